//! The `dynres status` table: processes, psets, resource changes.

use std::fmt::Write;

use dynres_core::pset::Origin;
use dynres_core::slots::SlotState;

use super::engine::{Engine, kind_name, status_name};
use super::procs::describe;

fn ms(d: Option<std::time::Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
}

/// Renders the job's state.
pub fn render(e: &Engine) -> String {
    let mut s = String::new();
    let Some(master) = &e.master else {
        // Tools talk to the master only; a node daemon has no job-wide view.
        return s;
    };
    let _ = writeln!(
        s,
        "job {}  namespace {}  app {}  up {:.1} s",
        e.job_id,
        e.namespace,
        e.app,
        e.uptime().as_secs_f64()
    );
    let _ = writeln!(s, "\nPROCESSES\n{:>6} {:>8}  state", "rank", "pid");
    let slots = master.slots().slots();
    for (rank, c) in &e.children {
        let leaving = slots
            .iter()
            .any(|x| matches!(x, SlotState::Leaving(p) if p.rank == *rank));
        let state = if leaving { "leaving" } else { "running" };
        let _ = writeln!(s, "{rank:>6} {:>8}  {state}", c.os_pid);
    }
    for (rank, p) in &e.remote_procs {
        let host = e.nodes.as_ref().map_or("?", |n| n.host(p.node));
        let pid = p.os_pid.map_or("-".into(), |p| p.to_string());
        let _ = writeln!(s, "{rank:>6} {pid:>8}  running on node {} ({host})", p.node);
    }
    for x in &e.exited {
        let _ = writeln!(
            s,
            "{:>6} {:>8}  exited ({})",
            x.rank,
            x.os_pid,
            describe(&x.status)
        );
    }
    let _ = writeln!(
        s,
        "(running processes, then the last {} exits)",
        super::engine::HISTORY
    );
    if let Some(nodes) = &e.nodes {
        let _ = writeln!(
            s,
            "\nNODES\n{:>4} {:<24} {:>5} {:>5}  daemon",
            "node", "host", "slots", "used"
        );
        for (i, spec) in master.slots().nodes().iter().enumerate() {
            let i = i as u32;
            let used = master.slots().processes_on(i).len();
            let _ = writeln!(
                s,
                "{i:>4} {:<24} {:>5} {used:>5}  {}",
                spec.name,
                spec.slots,
                nodes.daemon_state(i)
            );
        }
    }
    let _ = writeln!(
        s,
        "\nPSETS\n{:<32} {:>5} {:>8} {:>6} {:>7}",
        "name", "size", "version", "epoch", "active"
    );
    let reg = master.registry();
    for (name, p) in reg.live_psets() {
        let size = reg
            .members(&Origin::Runtime, name)
            .map_or(p.members.len(), |m| m.len());
        let _ = writeln!(
            s,
            "{:<32} {:>5} {:>8} {:>6} {:>7}",
            name.to_string(),
            size,
            p.attrs.version,
            p.attrs.epoch,
            p.attrs.active
        );
    }
    let _ = writeln!(
        s,
        "\nRESOURCE CHANGES\n{:<28} {:<8} {:>4} {:>4} {:<10} {:>12} {:>12} {:>10}",
        "delta", "type", "+", "-", "status", "announce→acc", "accept→dec", "total"
    );
    for c in &e.changes {
        let delta = &c.delta;
        let [a, p, d] = c.at;
        let diff = |x: Option<std::time::Duration>, y: Option<std::time::Duration>| {
            x.zip(y).map(|(x, y)| y.saturating_sub(x))
        };
        let _ = writeln!(
            s,
            "{:<28} {:<8} {:>4} {:>4} {:<10} {:>12} {:>12} {:>10}",
            delta.to_string(),
            c.kind.map_or("?", kind_name),
            c.added,
            c.removed,
            status_name(c.status),
            ms(diff(a, p)),
            ms(diff(p, d)),
            ms(diff(a, d)),
        );
    }
    let _ = writeln!(
        s,
        "(times in ms; undecided changes and the last {} decided ones)",
        super::engine::HISTORY
    );
    s
}
