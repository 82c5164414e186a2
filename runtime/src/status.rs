//! `dynres status`: processes, nodes, psets and resource changes, as a table or as
//! one JSON object (`dynres status JOB --json`). Both are rendered from one
//! [`Snapshot`], so they always hold the same content.

use std::fmt::Write;
use std::time::Duration;

use dynres_core::pset::Origin;
use dynres_core::slots::SlotState;

use super::engine::{Engine, HISTORY, kind_name, status_name};
use super::procs::describe;

/// One process, as both renderings show it.
struct ProcRow {
    rank: u32,
    /// Its pid (on its node), once known.
    pid: Option<u32>,
    /// `running`, `leaving` or `exited`.
    state: &'static str,
    /// Another node's index and host name; `None` on the master's own node.
    node: Option<(u32, String)>,
    /// How an exited process ended (`exit 3`, `signal 9`).
    exit: Option<String>,
}

struct NodeRow {
    node: u32,
    host: String,
    slots: u32,
    used: usize,
    daemon: &'static str,
}

struct PsetRow {
    name: String,
    size: usize,
    version: u64,
    epoch: u64,
    active: bool,
}

struct ChangeRow {
    delta: String,
    kind: &'static str,
    added: usize,
    removed: usize,
    status: &'static str,
    /// ANNOUNCED → PENDING, PENDING → decision, ANNOUNCED → decision.
    phases: [Option<Duration>; 3],
}

/// The job's state at one moment.
struct Snapshot {
    job: String,
    namespace: String,
    app: String,
    uptime: Duration,
    processes: Vec<ProcRow>,
    /// `None` on a job that runs on its own host only.
    nodes: Option<Vec<NodeRow>>,
    psets: Vec<PsetRow>,
    changes: Vec<ChangeRow>,
}

/// Reads the engine's state; `None` on a node daemon (tools talk to the master only: a
/// daemon has no job-wide view).
fn snapshot(e: &Engine) -> Option<Snapshot> {
    let master = e.master.as_ref()?;
    let slots = master.slots().slots();
    let mut processes = Vec::new();
    for (rank, c) in &e.children {
        let leaving = slots
            .iter()
            .any(|x| matches!(x, SlotState::Leaving(p) if p.rank == *rank));
        processes.push(ProcRow {
            rank: *rank,
            pid: Some(c.os_pid),
            state: if leaving { "leaving" } else { "running" },
            node: None,
            exit: None,
        });
    }
    for (rank, p) in &e.remote_procs {
        let host = e.nodes.as_ref().map_or("?", |n| n.host(p.node));
        processes.push(ProcRow {
            rank: *rank,
            pid: p.os_pid,
            state: "running",
            node: Some((p.node, host.to_string())),
            exit: None,
        });
    }
    for x in &e.exited {
        processes.push(ProcRow {
            rank: x.rank,
            pid: Some(x.os_pid),
            state: "exited",
            node: None,
            exit: Some(describe(x.status)),
        });
    }
    let nodes = e.nodes.as_ref().map(|nodes| {
        let slots = master.slots();
        slots
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let i = i as u32;
                NodeRow {
                    node: i,
                    host: spec.name.clone(),
                    slots: spec.slots,
                    used: slots.processes_on(i).len(),
                    daemon: nodes.daemon_state(i),
                }
            })
            .collect()
    });
    let reg = master.registry();
    let psets = reg
        .live_psets()
        .map(|(name, p)| PsetRow {
            name: name.to_string(),
            size: reg
                .members(&Origin::Runtime, name)
                .map_or(p.members.len(), |m| m.len()),
            version: p.attrs.version,
            epoch: p.attrs.epoch,
            active: p.attrs.active,
        })
        .collect();
    let changes = e
        .changes
        .iter()
        .map(|c| {
            let [a, p, d] = c.at;
            let diff = |x: Option<Duration>, y: Option<Duration>| {
                x.zip(y).map(|(x, y)| y.saturating_sub(x))
            };
            ChangeRow {
                delta: c.delta.to_string(),
                kind: c.kind.map_or("?", kind_name),
                added: c.added,
                removed: c.removed,
                status: status_name(c.status),
                phases: [diff(a, p), diff(p, d), diff(a, d)],
            }
        })
        .collect();
    Some(Snapshot {
        job: e.job_id.clone(),
        namespace: e.namespace.to_string(),
        app: e.app.clone(),
        uptime: e.uptime(),
        processes,
        nodes,
        psets,
        changes,
    })
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
}

/// Renders the job's state as the `dynres status` table (empty on a node daemon).
pub fn render(e: &Engine) -> String {
    snapshot(e).map(|s| text(&s)).unwrap_or_default()
}

/// Renders the job's state as one JSON object (`dynres status --json`), followed by a
/// newline; `{}` on a node daemon.
pub fn render_json(e: &Engine) -> String {
    snapshot(e).map_or_else(|| "{}\n".into(), |s| json(&s))
}

fn text(snap: &Snapshot) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "job {}  namespace {}  app {}  up {:.1} s",
        snap.job,
        snap.namespace,
        snap.app,
        snap.uptime.as_secs_f64()
    );
    let _ = writeln!(s, "\nPROCESSES\n{:>6} {:>8}  state", "rank", "pid");
    for p in &snap.processes {
        let pid = p.pid.map_or("-".into(), |p| p.to_string());
        let state = match (&p.node, &p.exit) {
            (_, Some(how)) => format!("exited ({how})"),
            (Some((node, host)), None) => format!("{} on node {node} ({host})", p.state),
            (None, None) => p.state.to_string(),
        };
        let _ = writeln!(s, "{:>6} {pid:>8}  {state}", p.rank);
    }
    let _ = writeln!(s, "(running processes, then the last {HISTORY} exits)");
    if let Some(nodes) = &snap.nodes {
        let _ = writeln!(
            s,
            "\nNODES\n{:>4} {:<24} {:>5} {:>5}  daemon",
            "node", "host", "slots", "used"
        );
        for n in nodes {
            let _ = writeln!(
                s,
                "{:>4} {:<24} {:>5} {:>5}  {}",
                n.node, n.host, n.slots, n.used, n.daemon
            );
        }
    }
    let _ = writeln!(
        s,
        "\nPSETS\n{:<32} {:>5} {:>8} {:>6} {:>7}",
        "name", "size", "version", "epoch", "active"
    );
    for p in &snap.psets {
        let _ = writeln!(
            s,
            "{:<32} {:>5} {:>8} {:>6} {:>7}",
            p.name, p.size, p.version, p.epoch, p.active
        );
    }
    let _ = writeln!(
        s,
        "\nRESOURCE CHANGES\n{:<28} {:<8} {:>4} {:>4} {:<10} {:>12} {:>12} {:>10}",
        "delta", "type", "+", "-", "status", "announce→acc", "accept→dec", "total"
    );
    for c in &snap.changes {
        let [ap, pd, ad] = c.phases;
        let _ = writeln!(
            s,
            "{:<28} {:<8} {:>4} {:>4} {:<10} {:>12} {:>12} {:>10}",
            c.delta,
            c.kind,
            c.added,
            c.removed,
            c.status,
            ms(ap),
            ms(pd),
            ms(ad),
        );
    }
    let _ = writeln!(
        s,
        "(times in ms; undecided changes and the last {HISTORY} decided ones)"
    );
    s
}

/// `s` as a JSON string literal: quotes, backslashes and control characters escaped
/// (RFC 8259 §7). Host names, pset names and job ids are the only free text here.
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number or `null`.
fn json_opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "null".into(), |v| v.to_string())
}

/// Milliseconds with three decimals (always finite: they come from `Duration`s), or
/// `null`.
fn json_ms(d: Option<Duration>) -> String {
    json_opt(d.map(|d| format!("{:.3}", d.as_secs_f64() * 1e3)))
}

/// `items` as a JSON array of the objects `one` writes.
fn json_array<T>(items: &[T], one: impl Fn(&T) -> String) -> String {
    let v: Vec<String> = items.iter().map(one).collect();
    format!("[{}]", v.join(","))
}

fn json(snap: &Snapshot) -> String {
    let processes = json_array(&snap.processes, |p| {
        let (node, host) = match &p.node {
            Some((n, h)) => (n.to_string(), json_str(h)),
            None => ("null".into(), "null".into()),
        };
        format!(
            "{{\"rank\":{},\"pid\":{},\"state\":{},\"node\":{node},\"host\":{host},\"exit\":{}}}",
            p.rank,
            json_opt(p.pid),
            json_str(p.state),
            p.exit.as_deref().map_or_else(|| "null".into(), json_str),
        )
    });
    let nodes = snap.nodes.as_ref().map_or_else(
        || "null".into(),
        |nodes| {
            json_array(nodes, |n| {
                format!(
                    "{{\"node\":{},\"host\":{},\"slots\":{},\"used\":{},\"daemon\":{}}}",
                    n.node,
                    json_str(&n.host),
                    n.slots,
                    n.used,
                    json_str(n.daemon)
                )
            })
        },
    );
    let psets = json_array(&snap.psets, |p| {
        format!(
            "{{\"name\":{},\"size\":{},\"version\":{},\"epoch\":{},\"active\":{}}}",
            json_str(&p.name),
            p.size,
            p.version,
            p.epoch,
            p.active
        )
    });
    let changes = json_array(&snap.changes, |c| {
        let [ap, pd, ad] = c.phases;
        format!(
            "{{\"delta\":{},\"type\":{},\"added\":{},\"removed\":{},\"status\":{},\
             \"announce_to_accept_ms\":{},\"accept_to_decision_ms\":{},\"total_ms\":{}}}",
            json_str(&c.delta),
            json_str(c.kind),
            c.added,
            c.removed,
            json_str(c.status),
            json_ms(ap),
            json_ms(pd),
            json_ms(ad)
        )
    });
    format!(
        "{{\"job\":{},\"namespace\":{},\"app\":{},\"uptime_s\":{:.3},\"history\":{HISTORY},\
         \"processes\":{processes},\"nodes\":{nodes},\"psets\":{psets},\"changes\":{changes}}}\n",
        json_str(&snap.job),
        json_str(&snap.namespace),
        json_str(&snap.app),
        snap.uptime.as_secs_f64(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every character a host, pset or job name could hold comes back from a JSON
    /// parser as it went in.
    #[test]
    fn json_strings_round_trip_through_a_parser() {
        let cases = [
            "plain",
            "q\"uote",
            "back\\slash",
            "nl\nand\ttab\r",
            "\u{1}\u{1f}\u{7f}",
            "é→",
        ];
        for s in cases {
            let lit = json_str(s);
            let back: String = serde_json::from_str(&lit).unwrap_or_else(|e| panic!("{lit}: {e}"));
            assert_eq!(back, s, "{lit}");
        }
        let v: serde_json::Value = serde_json::from_str(&json_array(
            &[Some(Duration::from_micros(1500)), None],
            |d| json_ms(*d),
        ))
        .unwrap();
        assert_eq!(v, serde_json::json!([1.5, null]));
    }
}
