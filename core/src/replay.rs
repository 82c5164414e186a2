//! Replaying a recorded trace (`spec/verification.md` §6) against fresh kernel machines:
//! every machine (the protocol's and the runtime's liveness, master watch, give-back and
//! tool desk) is rebuilt from its `start` line (a daemon from its node number), every
//! recorded input is fed again, and each transition must reproduce the recorded output
//! and state fingerprints. Lives in the kernel (no_std + alloc) so the verification
//! gate and the end-to-end tests call the same code without either build enabling the
//! other's features.
//!
//! The lines are those of [`crate::trace`]. Machines are keyed by role and id within one
//! text; give each recorded process's file to its own [`replay`] call (ids are unique
//! per process).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::machine::Machine;
use crate::rc::giveback::GiveBack;
use crate::rc::liveness::{Liveness, MasterWatch};
use crate::rc::tools::{ToolDesk, ToolError, ToolOutput};
use crate::rc::trace::{
    self as rt, decode_daemon_input, decode_master_config, decode_master_input,
};
use crate::rc::{Daemon, DaemonOutput, Master, MasterOutput, NodeId};
use crate::spawn::trace::{self as st, HandshakeInput};
use crate::spawn::{Handshake, Join, Member, SpawnError, SpawnParent};
use crate::time::Instant;
use crate::trace::{RecordedOutputs, fingerprint, unhex};

/// Why a replay failed: the first line that did not replay identically.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct Divergence {
    /// 1-based line number in the trace.
    pub line: usize,
    /// What differs (or could not be read).
    pub what: String,
}

/// What a replay checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Lines replayed identically (starts and transitions), per role.
    pub lines: BTreeMap<String, usize>,
    /// Transitions (inputs fed, not counting `start` lines) replayed identically, per
    /// role.
    pub transitions: BTreeMap<String, usize>,
}

impl Replayed {
    /// Every line replayed identically.
    pub fn total_lines(&self) -> usize {
        self.lines.values().sum()
    }

    /// Transitions of `role` replayed identically.
    pub fn transitions_of(&self, role: &str) -> usize {
        self.transitions.get(role).copied().unwrap_or(0)
    }

    /// Adds another replay's counts (of another process's file).
    pub fn add(&mut self, other: &Replayed) {
        for (r, n) in &other.lines {
            *self.lines.entry(r.clone()).or_default() += n;
        }
        for (r, n) in &other.transitions {
            *self.transitions.entry(r.clone()).or_default() += n;
        }
    }
}

// Variants of very different sizes are fine unboxed: a replay holds a few machines.
#[allow(clippy::large_enum_variant)]
enum SpawnMachine {
    Handshake(Handshake),
    Parent(SpawnParent),
    Join(Join),
    Member(Member),
}

/// Feeds one input to a spawn machine; returns the fingerprint of what it queued and
/// its result, as the recorder took it (`ResultRecord::Hashed`).
fn feed_one<M>(m: &mut M, now: Instant, input: M::Input) -> u64
where
    M: Machine,
    M::Output: core::hash::Hash,
    M::Error: core::hash::Hash,
{
    let r = m.handle(now, input);
    fingerprint(&(m.take_outputs(), &r))
}

/// The outputs fingerprint of a tool desk's transition as its recorder took it: each
/// answer by [`crate::trace::Recorded::hash_output`] (errors in their recorded form),
/// with the result of a transition (`ResultRecord::Hashed`) but not of a construction.
fn desk_outputs(outs: &[ToolOutput], result: Option<&Result<(), ToolError>>) -> u64 {
    let outs: Vec<&ToolOutput> = outs.iter().collect();
    let outs = RecordedOutputs::<ToolDesk>(&outs);
    match result {
        Some(r) => fingerprint(&(outs, r)),
        None => fingerprint(&outs),
    }
}

impl SpawnMachine {
    /// Builds the machine a `start` line describes; returns it with the fingerprint of
    /// the outputs its construction queued.
    fn start(role: &str, bytes: &[u8]) -> Result<(SpawnMachine, u64), String> {
        let built = |e: SpawnError| format!("machine refused its construction: {e}");
        let decoded = |e: crate::wire::WireError| format!("start: {e}");
        Ok(match role {
            st::ROLE_HANDSHAKE => {
                let s = st::decode_handshake_start(bytes).map_err(decoded)?;
                let mut m = Handshake::new(s.now, s.role, s.port, s.cfg).map_err(built)?;
                let outs = fingerprint(&m.take_outputs());
                (SpawnMachine::Handshake(m), outs)
            }
            st::ROLE_PARENT => {
                let (now, cfg) = st::decode_parent_start(bytes).map_err(decoded)?;
                let mut m = SpawnParent::new(now, cfg).map_err(built)?;
                let outs = fingerprint(&m.take_outputs());
                (SpawnMachine::Parent(m), outs)
            }
            st::ROLE_JOIN => {
                let (now, port, cfg) = st::decode_join_start(bytes).map_err(decoded)?;
                let mut m = Join::new(now, port, cfg).map_err(built)?;
                let outs = fingerprint(&m.take_outputs());
                (SpawnMachine::Join(m), outs)
            }
            st::ROLE_MEMBER => {
                let s = st::decode_member_start(bytes).map_err(decoded)?;
                let mut m = Member::new(s.role, s.rank, s.local, s.local_endpoints);
                let outs = fingerprint(&m.take_outputs());
                (SpawnMachine::Member(m), outs)
            }
            other => return Err(format!("unknown role {other:?}")),
        })
    }

    /// Feeds one recorded input; returns the outputs fingerprint (outputs and result).
    fn feed(&mut self, now: Instant, bytes: &[u8]) -> Result<u64, String> {
        let decoded = |e: crate::wire::WireError| format!("input: {e}");
        Ok(match self {
            SpawnMachine::Handshake(m) => {
                let r = match st::decode_handshake_input(bytes).map_err(decoded)? {
                    HandshakeInput::Input(i) => return Ok(feed_one(m, now, i)),
                    HandshakeInput::Cancel(e) => {
                        m.cancel(e);
                        Ok::<(), SpawnError>(())
                    }
                };
                fingerprint(&(m.take_outputs(), &r))
            }
            SpawnMachine::Parent(m) => {
                feed_one(m, now, st::decode_parent_input(bytes).map_err(decoded)?)
            }
            SpawnMachine::Join(m) => {
                feed_one(m, now, st::decode_join_input(bytes).map_err(decoded)?)
            }
            SpawnMachine::Member(m) => {
                feed_one(m, now, st::decode_member_msg(bytes).map_err(decoded)?)
            }
        })
    }

    fn fingerprint(&mut self) -> u64 {
        match self {
            SpawnMachine::Handshake(m) => m.fingerprint(),
            SpawnMachine::Parent(m) => m.fingerprint(),
            SpawnMachine::Join(m) => m.fingerprint(),
            SpawnMachine::Member(m) => m.fingerprint(),
        }
    }
}

/// Replays one recorded text (one process's file, or the in-memory recorder's lines):
/// `Ok` with what was checked, or the first line whose outputs or state differ, or that
/// cannot be read. Blank lines and lines starting with `#` are skipped.
pub fn replay(text: &str) -> Result<Replayed, Divergence> {
    let mut master: Option<Master> = None;
    let mut daemons: BTreeMap<u32, Daemon> = BTreeMap::new();
    let mut spawn: BTreeMap<(String, String), SpawnMachine> = BTreeMap::new();
    let mut liveness: Option<Liveness> = None;
    let mut watches: BTreeMap<u32, MasterWatch> = BTreeMap::new();
    let mut givebacks: BTreeMap<String, GiveBack> = BTreeMap::new();
    let mut desk: Option<ToolDesk> = None;
    let mut done = Replayed::default();
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
        let node_of =
            |s: &str| u32::try_from(num(s)?).map_err(|_| bad(format!("node out of range: {s}")));
        // (replayed outputs, replayed state), (recorded outputs, recorded state), whether
        // the line is a transition, and the machine it names.
        let (got, want, transition, who) = match words.as_slice() {
            ["master", "start", cfg, out, st] => {
                let cfg =
                    decode_master_config(&bytes(cfg)?).map_err(|e| bad(format!("config: {e}")))?;
                let mut m =
                    Master::new(cfg).map_err(|e| bad(format!("master refused its config: {e}")))?;
                // A new master is a new run: its daemons start afresh too.
                daemons.clear();
                let outs: Vec<MasterOutput> = m.take_outputs();
                let got = (fingerprint(&outs), m.fingerprint());
                master = Some(m);
                (got, (num(out)?, num(st)?), false, "master".to_string())
            }
            ["master", now, input, out, st] => {
                let m = master
                    .as_mut()
                    .ok_or_else(|| bad("master transition before its start".into()))?;
                let input =
                    decode_master_input(&bytes(input)?).map_err(|e| bad(format!("input: {e}")))?;
                m.handle(Instant(num(now)?), input)
                    .map_err(|e| bad(format!("master refused: {e}")))?;
                let outs: Vec<MasterOutput> = m.take_outputs();
                let got = (fingerprint(&outs), m.fingerprint());
                (got, (num(out)?, num(st)?), true, "master".to_string())
            }
            ["daemon", node, now, input, out, st] => {
                let node = u32::try_from(num(node)?)
                    .map_err(|_| bad(format!("node out of range: {node}")))?;
                let d = daemons
                    .entry(node)
                    .or_insert_with(|| Daemon::new(NodeId(node)));
                let input =
                    decode_daemon_input(&bytes(input)?).map_err(|e| bad(format!("input: {e}")))?;
                // A refused client request is part of the recorded behaviour too.
                let _ = d.handle(Instant(num(now)?), input);
                let outs: Vec<DaemonOutput> = d.take_outputs();
                let got = (fingerprint(&outs), d.fingerprint());
                (got, (num(out)?, num(st)?), true, format!("daemon {node}"))
            }
            ["liveness", "start", cfg, out, st] => {
                let cfg = rt::decode_liveness_config(&bytes(cfg)?)
                    .map_err(|e| bad(format!("liveness start: {e}")))?;
                // A repeated start is a new detector (a new run's).
                let m = liveness.insert(Liveness::new(cfg));
                let got = (fingerprint(&m.take_outputs()), m.fingerprint());
                (got, (num(out)?, num(st)?), false, "liveness".to_string())
            }
            ["liveness", now, input, out, st] => {
                let m = liveness
                    .as_mut()
                    .ok_or_else(|| bad("liveness transition before its start".into()))?;
                let input = rt::decode_liveness_input(&bytes(input)?)
                    .map_err(|e| bad(format!("liveness input: {e}")))?;
                // Refusals were recorded with the outputs (`ResultRecord::Hashed`).
                let outs = feed_one(m, Instant(num(now)?), input);
                let got = (outs, m.fingerprint());
                (got, (num(out)?, num(st)?), true, "liveness".to_string())
            }
            ["master-watch", node, "start", args, out, st] => {
                let node = node_of(node)?;
                let (cfg, at) = rt::decode_watch_start(&bytes(args)?)
                    .map_err(|e| bad(format!("master-watch {node} start: {e}")))?;
                let mut m = MasterWatch::new(node, cfg, at);
                let got = (fingerprint(&m.take_outputs()), m.fingerprint());
                watches.insert(node, m);
                (
                    got,
                    (num(out)?, num(st)?),
                    false,
                    format!("master-watch {node}"),
                )
            }
            ["master-watch", node, now, input, out, st] => {
                let node = node_of(node)?;
                let m = watches.get_mut(&node).ok_or_else(|| {
                    bad(format!("master-watch {node}: transition before its start"))
                })?;
                let input = rt::decode_watch_input(&bytes(input)?)
                    .map_err(|e| bad(format!("master-watch {node} input: {e}")))?;
                m.handle(Instant(num(now)?), input);
                let got = (fingerprint(&m.take_outputs()), m.fingerprint());
                (
                    got,
                    (num(out)?, num(st)?),
                    true,
                    format!("master-watch {node}"),
                )
            }
            ["giveback", id, "start", args, out, st] => {
                let bound = rt::decode_giveback_start(&bytes(args)?)
                    .map_err(|e| bad(format!("giveback {id} start: {e}")))?;
                let mut m = GiveBack::new(bound);
                let got = (fingerprint(&m.take_outputs()), m.fingerprint());
                givebacks.insert(id.to_string(), m);
                (got, (num(out)?, num(st)?), false, format!("giveback {id}"))
            }
            ["giveback", id, now, input, out, st] => {
                let m = givebacks
                    .get_mut(*id)
                    .ok_or_else(|| bad(format!("giveback {id}: transition before its start")))?;
                let input = rt::decode_giveback_input(&bytes(input)?)
                    .map_err(|e| bad(format!("giveback {id} input: {e}")))?;
                m.handle(Instant(num(now)?), input);
                let got = (fingerprint(&m.take_outputs()), m.fingerprint());
                (got, (num(out)?, num(st)?), true, format!("giveback {id}"))
            }
            ["tool-desk", "start", args, out, st] => {
                rt::decode_tool_desk_start(&bytes(args)?)
                    .map_err(|e| bad(format!("tool-desk start: {e}")))?;
                // A repeated start is a new desk (a new run's).
                let m = desk.insert(ToolDesk::new());
                let outs = m.take_outputs();
                let got = (desk_outputs(&outs, None), m.fingerprint());
                (got, (num(out)?, num(st)?), false, "tool-desk".to_string())
            }
            ["tool-desk", now, input, out, st] => {
                let m = desk
                    .as_mut()
                    .ok_or_else(|| bad("tool-desk transition before its start".into()))?;
                let input = rt::decode_tool_input(&bytes(input)?)
                    .map_err(|e| bad(format!("tool-desk input: {e}")))?;
                let r = m.handle(Instant(num(now)?), input);
                let outs = m.take_outputs();
                // Refusals were recorded with the outputs (`ResultRecord::Hashed`).
                let got = (desk_outputs(&outs, Some(&r)), m.fingerprint());
                (got, (num(out)?, num(st)?), true, "tool-desk".to_string())
            }
            [role, id, "start", args, out, st] if role.starts_with("spawn-") => {
                let (mut m, outs) = SpawnMachine::start(role, &bytes(args)?)
                    .map_err(|w| bad(format!("{role} {id}: {w}")))?;
                let got = (outs, m.fingerprint());
                // A repeated start of one id is a new machine of that id.
                spawn.insert((role.to_string(), id.to_string()), m);
                (got, (num(out)?, num(st)?), false, format!("{role} {id}"))
            }
            [role, id, now, input, out, st] if role.starts_with("spawn-") => {
                let m = spawn
                    .get_mut(&(role.to_string(), id.to_string()))
                    .ok_or_else(|| bad(format!("{role} {id}: transition before its start")))?;
                let outs = m
                    .feed(Instant(num(now)?), &bytes(input)?)
                    .map_err(|w| bad(format!("{role} {id}: {w}")))?;
                let got = (outs, m.fingerprint());
                (got, (num(out)?, num(st)?), true, format!("{role} {id}"))
            }
            _ => return Err(bad(format!("unrecognised line: {raw:?}"))),
        };
        if got.0 != want.0 {
            return Err(bad(format!(
                "{who}: outputs differ (recorded {}, replayed {})",
                want.0, got.0
            )));
        }
        if got.1 != want.1 {
            return Err(bad(format!(
                "{who}: state differs (recorded {}, replayed {})",
                want.1, got.1
            )));
        }
        let role = words[0].to_string();
        *done.lines.entry(role.clone()).or_default() += 1;
        if transition {
            *done.transitions.entry(role).or_default() += 1;
        }
    }
    Ok(done)
}
