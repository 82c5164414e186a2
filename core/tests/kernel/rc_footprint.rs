//! Long runs keep the kernel's memory flat (issue 28): the process table forgets retired
//! processes (PSET-24) as the change history forgets old changes (RC-19), and an abort
//! after a compaction still restores the right processes (RC-12).

use crate::common;

use common::*;
use dynres_core::pset::{Origin, PsetName};
use dynres_core::rc::master::{DONE_KEPT, Footprint};
use dynres_core::rc::{CallResult, ChangeRequest, Daemon, RcStatus};
use dynres_core::{Duration, ProcessId};

/// Every count of the master's footprint and the daemon's replica, named, so that a
/// failure says which table grew. Destructured whole: a new footprint field must be
/// added here.
fn counts(f: &Footprint, d: &Daemon) -> [(&'static str, usize); 14] {
    let Footprint {
        table,
        member_bytes,
        psets,
        delta_epochs,
        procs,
        app_of,
        changes,
        data,
        waiting,
        spawns,
    } = *f;
    let replica_members = d.psets().map(|(_, (m, _))| m.len()).sum();
    [
        ("table", table),
        ("member_bytes", member_bytes),
        ("psets", psets),
        ("delta_epochs", delta_epochs),
        ("procs", procs),
        ("app_of", app_of),
        ("changes", changes),
        ("data", data),
        ("waiting", waiting),
        ("spawns", spawns),
        ("daemon psets", d.psets().count()),
        ("daemon replica members", replica_members),
        ("daemon job", d.job().len()),
        ("daemon changes", d.changes().count()),
    ]
}

/// Runs `cycles` grow/shrink cycles; returns the largest of each count after a cycle.
fn most_over(w: &mut World, cycles: usize) -> [(&'static str, usize); 14] {
    let mut most = counts(&w.master.footprint(), &w.daemons[0]);
    for _ in 0..cycles {
        w.grow_shrink_cycle(2);
        let now = counts(&w.master.footprint(), &w.daemons[0]);
        for (m, n) in most.iter_mut().zip(now) {
            m.1 = m.1.max(n.1);
        }
    }
    most
}

/// PSET-24, RC-19: 5,000 grow/shrink cycles (10,000 processes made and gone). The
/// process table compacts in bursts (once retired entries are as many as kept ones), so
/// its size is a saw-tooth: the largest footprint of cycles 4,000–5,000 must not exceed
/// that of cycles 1,000–2,000, and the table stays within twice what the job holds —
/// the two live processes plus the two of each change still kept. Before PSET-24 the
/// table held every process ever seen: 10,002 entries at the end, 4,002 at cycle 2,000.
#[test]
fn thousands_of_cycles_keep_the_footprint_flat() {
    let mut w = World::new(config(1, 8, 2));
    let _warm_up = most_over(&mut w, 1_000);
    let early = most_over(&mut w, 1_000);
    let _ = most_over(&mut w, 2_000);
    let late = most_over(&mut w, 1_000);
    for ((name, e), (_, l)) in early.iter().zip(&late) {
        assert!(
            l <= e,
            "{name} grew: at most {e} in cycles 1,000-2,000, {l} in 4,000-5,000"
        );
    }
    let held = 2 + 2 * DONE_KEPT;
    assert!(late[0].1 <= 2 * held, "table {} > 2 × {held}", late[0].1);
    // Nothing was lost on the way: the job is back to its two processes.
    assert_eq!(w.members(&root()), [0, 1]);
    assert_eq!(w.master.processes().len(), 2);
}

/// PSET-24 with RC-12: application `b` has a change in flight, its pset already
/// changed in phase 2, while application `app` churns and the table compacts under it,
/// renumbering `b`'s processes. When `b`'s change aborts, its pset is restored from
/// the change's snapshot — renumbered with the table, so it names the same processes as
/// before, at the master and in the daemon's replica.
#[test]
fn an_abort_after_a_compaction_restores_the_same_processes() {
    let mut cfg = config(1, 16, 2);
    cfg.apps.push(("b".to_string(), 1));
    // Long enough for `app`'s churn below; `b`'s change ends by this timeout.
    cfg.change_timeout = Duration::from_secs(10);
    let mut w = World::new(cfg);
    // A confirm that times out fails its change: `b`'s must last as long.
    w.behaviour.confirm_timeout = Duration::from_secs(10);
    let b_root = PsetName::app_root("b").unwrap();
    let b0 = pid(2);
    let index = |w: &World, p: &ProcessId| w.master.registry().table().index_of(p);
    let b_members = |w: &World| {
        let m = w.master.registry().members(&Origin::Runtime, &b_root);
        m.unwrap()
    };
    // Retired processes of `app` lie below `b`'s next process in the table.
    for _ in 0..DONE_KEPT + 5 {
        w.grow_shrink_cycle(2);
    }
    // `b` grows by one (finalized), then asks for one more and applies it in phase 2
    // without accepting: the change stays ANNOUNCED with a snapshot holding {b0, b1}.
    w.request(ChangeRequest::add("b", 1));
    w.run_for(Duration::from_millis(1));
    let r = w.adapt_pset(&b_root, &b0, None);
    assert!(matches!(r, CallResult::Accept(Ok(ref a)) if a.status == RcStatus::Finalized));
    let before = b_members(&w);
    assert_eq!(before.len(), 2);
    let b1 = before[1].clone();
    w.request(ChangeRequest::add("b", 1));
    w.run_for(Duration::from_millis(1));
    let delta = w.apply_change(&b_root, &b0);
    assert_eq!(b_members(&w).len(), 3, "phase 2 applied");
    let b1_index = index(&w, &b1).unwrap();
    // `app` churns until a compaction has moved `b1` down the table.
    let mut cycles = 0;
    while index(&w, &b1) == Some(b1_index) {
        assert!(
            cycles < 4 * DONE_KEPT,
            "no compaction moved b1 ({b1_index})"
        );
        w.grow_shrink_cycle(2);
        cycles += 1;
    }
    assert_eq!(
        w.master.status(&delta),
        RcStatus::Announced,
        "still undecided"
    );
    // The abort restores `b`'s pset from the snapshot taken before the compaction.
    w.run_for(Duration::from_secs(11));
    assert_eq!(w.master.status(&delta), RcStatus::Aborted);
    assert_eq!(
        b_members(&w),
        before,
        "the snapshot names the same processes"
    );
    let replica = &w.daemons[0].pset(&b_root).unwrap().0;
    assert_eq!(replica.to_vec(), before, "and so does the daemon's replica");
    // And the job carries on: `b` grows again, on top of its restored pset.
    w.request(ChangeRequest::add("b", 1));
    w.run_for(Duration::from_millis(1));
    let r = w.adapt_pset(&b_root, &b0, None);
    assert!(matches!(r, CallResult::Accept(Ok(ref a)) if a.status == RcStatus::Finalized));
    assert_eq!(b_members(&w)[..2], before[..]);
}
