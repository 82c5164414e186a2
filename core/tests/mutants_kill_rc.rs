//! Resource-change behaviour that `verification/nightly.sh`'s cargo-mutants run found
//! untested (spec/verification.md §7), on the in-memory world of `common`: each test
//! names the mutant it catches.

mod common;

use std::collections::BTreeMap;

use common::*;
use dynres_core::Duration;
use dynres_core::pset::{AttrUpdate, PsetOp, SetOp};
use dynres_core::rc::{CallResult, ChangeRequest, ClientCall, RcError, RcStatus};

/// `master/mod.rs` `Master::accepts` → `None`: the master reports the accept it recorded,
/// bound pset → new pset (`RC-8`), while the change waits for its confirms.
#[test]
fn accepts_reports_the_recorded_accept() {
    let mut w = World::new(config(2, 4, 3));
    w.behaviour.confirm = false;
    w.request(ChangeRequest::add(APP, 2));
    w.run_for(Duration::from_millis(1));
    let delta = w.statuses.last().expect("announced").0.clone();
    assert_eq!(w.master.accepts(&delta), Some(&BTreeMap::new()), "none yet");
    let r = root();
    let ops = vec![PsetOp::Set {
        op: SetOp::Union,
        pset1: r.clone(),
        pset2: delta.clone(),
        target: Some(r.clone()),
        attrs: AttrUpdate::none(),
    }];
    w.call_wait(&pid(0), ClientCall::PsetOp { ops });
    let accept = ClientCall::Accept {
        delta: delta.clone(),
        new_pset: r.clone(),
        bound: None,
        wait: None,
    };
    let CallResult::Accept(Ok(a)) = w.call_wait(&pid(0), accept) else {
        panic!("accept failed")
    };
    assert_eq!(a.status, RcStatus::Pending);
    assert_eq!(
        w.master.accepts(&delta),
        Some(&BTreeMap::from([(r.clone(), r)]))
    );
    assert_eq!(w.master.accepts(&name("mpi://rte/app/rc/99")), None);
}

/// `master/data.rs` `Master::fail_waiting_on`: `*k == key` → `*k != key`. When a change
/// aborts, the lookups parked on its accept key fail with `Aborted` (`RC-12`) and the
/// other parked lookups keep waiting.
#[test]
fn abort_fails_only_the_lookups_of_its_accept_key() {
    let mut w = World::new(config(2, 4, 3));
    w.behaviour.confirm = false;
    w.request(ChangeRequest::add(APP, 2));
    w.run_for(Duration::from_millis(1));
    let delta = w.statuses.last().expect("announced").0.clone();
    let wait = Some(Duration::from_secs(5));
    let on_accept = w.call(
        &pid(1),
        ClientCall::Lookup {
            key: format!("{delta}:accept"),
            wait,
        },
    );
    let other = w.call(
        &pid(2),
        ClientCall::Lookup {
            key: "other".into(),
            wait,
        },
    );
    // Nobody accepts: the change times out and aborts.
    w.run_for(Duration::from_millis(700));
    assert_eq!(w.master.status(&delta), RcStatus::Aborted);
    assert_eq!(
        w.results.get(&(pid(1), on_accept)),
        Some(&CallResult::Lookup(Err(RcError::Aborted(delta.clone())))),
        "failed at the abort, not at its own deadline"
    );
    assert_eq!(w.results.get(&(pid(2), other)), None, "still waiting");
    w.call_wait(
        &pid(0),
        ClientCall::Publish {
            key: "other".into(),
            value: "v".into(),
        },
    );
    assert_eq!(w.wait(&pid(2), other), CallResult::Lookup(Ok("v".into())));
}

/// `master/growth.rs` `Master::on_node_added`: `total + slots > MAX_SLOTS` →
/// `total * slots`: a job may grow to 2^24 slots in all (`RC-21`), so a node of 4097
/// slots joins 4096 (8193 in all, though 4096 · 4097 > 2^24) and one that would pass
/// 2^24 is refused.
#[test]
fn added_node_is_refused_only_past_the_slot_limit() {
    let mut w = World::new(config(1, 4096, 2));
    assert_eq!(w.add_node("big", 4097), Ok(()));
    assert_eq!(w.master.slots().free_count(), 4096 + 4097 - 2);
    assert!(matches!(
        w.add_node("huge", (1 << 24) - 8192),
        Err(RcError::BadRequest(_))
    ));
}

/// `daemon/modex.rs` `Daemon::modex_pset_changed`: `!g.forwarded` → `g.forwarded`. A
/// gather still waiting on its node's members when the pset gets a new version can never
/// complete: the daemon tells its members `Stale` at once (`MODEX-2`), and their retry
/// agrees with everyone on the new table.
#[test]
fn a_gather_not_yet_forwarded_is_stale_at_a_new_version() {
    use dynres_core::rc::ModexData;
    // Ranks 0 and 1 on node 0, rank 2 on node 1.
    let mut w = World::new(config(2, 2, 3));
    let r = root();
    let before = w.version(&r);
    let modex = |rank: u32| ClientCall::Modex {
        pset: r.clone(),
        data: format!("addr-of-{rank}"),
        timeout: Duration::from_millis(1000),
    };
    // Rank 1 joins alone: node 0 still waits for rank 0, nothing goes to the master.
    let early = w.call(&pid(1), modex(1));
    w.run_for(Duration::from_millis(1));
    assert!(w.modex_batches.is_empty(), "node 0 is still gathering");
    w.request(ChangeRequest::add(APP, 1));
    w.run_for(Duration::from_millis(1));
    w.adapt(&pid(0), None);
    w.run_for(Duration::from_millis(20));
    let now = w.version(&r);
    assert!(now > before);
    assert_eq!(w.modex_stale.len(), 1, "{:?}", w.modex_stale);
    let (p, pset, version) = &w.modex_stale[0];
    assert_eq!((p, pset, *version), (&pid(1), &r, now));
    let calls: Vec<(u32, u64)> = [0, 2, 3].map(|k| (k, w.call(&pid(k), modex(k)))).into();
    for (rank, id) in calls.into_iter().chain([(1, early)]) {
        let CallResult::Modex(Ok(ModexData { version, entries })) = w.wait(&pid(rank), id) else {
            panic!("rank {rank}: modex failed")
        };
        assert_eq!(version, now);
        let ranks: Vec<u32> = entries.iter().map(|(p, _)| p.rank).collect();
        assert_eq!(ranks, [0, 1, 2, 3], "rank {rank}");
    }
}
