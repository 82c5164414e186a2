//! Trace conformance (`spec/verification.md` §6): record the master's and daemons'
//! transition events (emitted by `dynres_core::rc::trace`), and replay a recording
//! against fresh machines, demanding the same output and state fingerprints at every
//! step.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use dynres_core::Instant;
use dynres_core::rc::trace::{
    TARGET, decode_daemon_input, decode_master_config, decode_master_input, fingerprint, unhex,
};
use dynres_core::rc::{Daemon, DaemonOutput, Master, MasterOutput, NodeId};
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;

/// A `tracing` layer that keeps every transition event as one line of text:
/// `master start <config> <outputs> <state>`, `master <now> <input> <outputs> <state>`,
/// `daemon <node> <now> <input> <outputs> <state>` (hex input, decimal fingerprints).
#[derive(Clone, Default)]
pub struct Recorder {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    /// The lines recorded so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

#[derive(Default)]
struct Fields(BTreeMap<&'static str, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name(), value.to_string());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != TARGET {
            return;
        }
        let mut f = Fields::default();
        event.record(&mut f);
        let get = |k: &str| f.0.get(k).cloned().unwrap_or_default();
        let line = match get("role").as_str() {
            "master" if f.0.contains_key("start") => {
                format!(
                    "master start {} {} {}",
                    get("start"),
                    get("outputs"),
                    get("state")
                )
            }
            "master" => format!(
                "master {} {} {} {}",
                get("now"),
                get("input"),
                get("outputs"),
                get("state")
            ),
            "daemon" => format!(
                "daemon {} {} {} {} {}",
                get("node"),
                get("now"),
                get("input"),
                get("outputs"),
                get("state")
            ),
            _ => return,
        };
        if let Ok(mut l) = self.lines.lock() {
            l.push(line);
        }
    }
}

/// Why a replay failed.
#[derive(Debug, PartialEq, Eq)]
pub struct Divergence {
    /// 1-based line number in the trace.
    pub line: usize,
    /// What differs.
    pub what: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

/// Replays a recorded trace; returns the number of transitions checked.
pub fn replay(text: &str) -> Result<usize, Divergence> {
    let mut master: Option<Master> = None;
    let mut daemons: BTreeMap<u32, Daemon> = BTreeMap::new();
    let mut checked = 0;
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let bad = |what: String| Divergence { line, what };
        let words: Vec<&str> = raw.split_whitespace().collect();
        if words.is_empty() || words[0].starts_with('#') {
            continue;
        }
        let num = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| bad(format!("not a number: {s:?}")))
        };
        let bytes = |s: &str| unhex(s).ok_or_else(|| bad(format!("not hex: {s:?}")));
        let (outputs, state) = match words.as_slice() {
            ["master", "start", cfg, out, st] => {
                let cfg =
                    decode_master_config(&bytes(cfg)?).map_err(|e| bad(format!("config: {e}")))?;
                let mut m =
                    Master::new(cfg).map_err(|e| bad(format!("master refused its config: {e}")))?;
                daemons.clear();
                let outs = drain_master(&mut m);
                let got = (fingerprint(&outs), m.fingerprint());
                master = Some(m);
                (got, (num(out)?, num(st)?))
            }
            ["master", now, input, out, st] => {
                let m = master
                    .as_mut()
                    .ok_or_else(|| bad("master transition before its start".into()))?;
                let input =
                    decode_master_input(&bytes(input)?).map_err(|e| bad(format!("input: {e}")))?;
                m.handle(Instant(num(now)?), input)
                    .map_err(|e| bad(format!("master refused: {e}")))?;
                let outs = drain_master(m);
                ((fingerprint(&outs), m.fingerprint()), (num(out)?, num(st)?))
            }
            ["daemon", node, now, input, out, st] => {
                let node = num(node)? as u32;
                let d = daemons
                    .entry(node)
                    .or_insert_with(|| Daemon::new(NodeId(node)));
                let input =
                    decode_daemon_input(&bytes(input)?).map_err(|e| bad(format!("input: {e}")))?;
                // A refused client request is part of the recorded behaviour too.
                let _ = d.handle(Instant(num(now)?), input);
                let outs = drain_daemon(d);
                ((fingerprint(&outs), d.fingerprint()), (num(out)?, num(st)?))
            }
            _ => return Err(bad(format!("unrecognised line: {raw:?}"))),
        };
        if outputs.0 != state.0 {
            return Err(bad(format!(
                "outputs differ (recorded {}, replayed {})",
                state.0, outputs.0
            )));
        }
        if outputs.1 != state.1 {
            return Err(bad(format!(
                "state differs (recorded {}, replayed {})",
                state.1, outputs.1
            )));
        }
        checked += 1;
    }
    Ok(checked)
}

fn drain_master(m: &mut Master) -> Vec<MasterOutput> {
    std::iter::from_fn(|| m.poll_output()).collect()
}

fn drain_daemon(d: &mut Daemon) -> Vec<DaemonOutput> {
    std::iter::from_fn(|| d.poll_output()).collect()
}
