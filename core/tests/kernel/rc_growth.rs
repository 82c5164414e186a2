//! Growth beyond the job's nodes (`RC-21`, `SLOT-6`): a request short of slots waits for
//! the driver to add a node, starts on it once it is there (its daemon holding the
//! replica first), and is refused with `NotGranted` when the node does not come.

use crate::common;

use common::{APP, World, config, pid, root};
use dynres_core::pset::PsetName;
use dynres_core::rc::{ChangeRequest, MasterOutput, NodeId, RcError, RcStatus};
use dynres_core::{Duration, ProcessId};

fn growing_world(wait_ms: u64) -> World {
    let mut cfg = config(1, 2, 2);
    cfg.grow_wait = Some(Duration::from_millis(wait_ms));
    World::new(cfg)
}

fn need_slots(w: &World) -> Vec<u32> {
    w.notices
        .iter()
        .filter_map(|n| match n {
            MasterOutput::NeedSlots { slots } => Some(*slots),
            _ => None,
        })
        .collect()
}

fn refusals(w: &World) -> Vec<RcError> {
    w.notices
        .iter()
        .filter_map(|n| match n {
            MasterOutput::Refused { error, .. } => Some(error.clone()),
            _ => None,
        })
        .collect()
}

/// RC-21, SLOT-6, RC-3, RC-14: the ADD waits, the driver adds a node, the new node's
/// daemon holds every pset before its processes start, and the ADD finalizes there.
#[test]
fn a_request_short_of_slots_waits_for_a_node_and_runs_on_it() {
    let mut w = growing_world(1000);
    w.request(ChangeRequest::add(APP, 2));
    w.run_for(Duration::from_millis(5));
    assert_eq!(need_slots(&w), vec![2]);
    assert!(w.statuses.is_empty(), "nothing is announced while waiting");
    w.add_node("n1", 2).expect("node added");
    w.run_for(Duration::from_millis(5));
    let added: Vec<ProcessId> = vec![pid(2), pid(3)];
    for p in &added {
        assert_eq!(
            w.node_of.get(p),
            Some(&NodeId(1)),
            "{p} runs on the new node"
        );
        assert_eq!(
            w.launch_saw_change.get(p),
            Some(&true),
            "RC-3 on the new node"
        );
    }
    let r = root();
    let replica = w.daemons[1]
        .pset(&r)
        .expect("the new daemon holds mpi://app/app");
    assert_eq!(replica.0.to_vec(), vec![pid(0), pid(1)]);
    w.adapt(&pid(0), None);
    w.run_for(Duration::from_millis(50));
    let delta = w.statuses.last().unwrap().0.clone();
    assert_eq!(w.status_log(&delta).last(), Some(&RcStatus::Finalized));
    assert_eq!(w.members(&r), vec![0, 1, 2, 3]);
    assert_eq!(w.master.slots().nodes().len(), 2);
}

/// RC-21: a node that does not come by `grow_wait` aborts the request with
/// `NotGranted`; the request queued behind it is served next and nothing was taken.
#[test]
fn a_request_whose_node_never_comes_is_refused_and_the_queue_moves_on() {
    let mut w = growing_world(100);
    w.request(ChangeRequest::add(APP, 2));
    w.run_for(Duration::from_millis(1));
    w.request(ChangeRequest::sub(APP, 1));
    // RC-15: the waiting ADD is the application's change in flight, so the SUB waits
    // in the queue behind it (`Master::growing`).
    w.run_for(Duration::from_millis(50));
    assert!(w.statuses.is_empty(), "the SUB waits: {:?}", w.statuses);
    w.run_for(Duration::from_millis(150));
    assert_eq!(refusals(&w), vec![RcError::NotGranted { slots: 2 }]);
    let (delta, status) = w.statuses.first().cloned().expect("the SUB was announced");
    assert_eq!(status, RcStatus::Announced);
    assert_eq!(
        delta.as_str(),
        "mpi://rte/app/rc/1",
        "no epoch was used by the refused ADD"
    );
}

/// RC-21: the driver says at once that it cannot obtain the slots; without `grow_wait`
/// the request is refused at once as before (RC-2).
#[test]
fn a_denied_or_impossible_growth_is_refused_at_once() {
    let mut w = growing_world(10_000);
    w.request(ChangeRequest::add(APP, 3));
    w.run_for(Duration::from_millis(1));
    w.master
        .handle(w.now, dynres_core::rc::MasterInput::SlotsDenied)
        .unwrap();
    assert!(matches!(
        w.master.poll_output(),
        Some(MasterOutput::Refused {
            error: RcError::NotGranted { slots: 3 },
            ..
        })
    ));
    let mut w = World::new(config(1, 2, 2));
    w.request(ChangeRequest::add(APP, 1));
    w.run_for(Duration::from_millis(1));
    assert!(need_slots(&w).is_empty());
    assert!(matches!(refusals(&w)[..], [RcError::Slots(_)]));
}

/// RC-14, RC-21: a node added while a FINALIZED SUB still waits for its victim to exit
/// gets the change table the other daemons hold. They forgot the SUB when it was
/// finalized; the new daemon must not be handed it as a change still in progress (it
/// would never be told to forget it: nothing is broadcast when a finalized change is
/// done).
#[test]
fn a_node_added_after_a_finalized_sub_does_not_get_it_as_in_progress() {
    let mut cfg = config(1, 3, 3);
    cfg.grow_wait = Some(Duration::from_millis(1000));
    let mut w = World::new(cfg);
    w.behaviour.exit_when_removed = false;
    w.request(ChangeRequest::sub(APP, 1));
    w.run_for(Duration::from_millis(1));
    let r = w.adapt(&pid(0), None);
    assert!(
        matches!(r, dynres_core::rc::CallResult::Accept(Ok(ref a)) if a.status == RcStatus::Finalized),
        "{r:?}"
    );
    let sub = w.statuses.last().unwrap().0.clone();
    assert!(
        w.daemons[0].changes().all(|c| c.delta != sub),
        "daemons forget a change when it is finalized"
    );
    // The victim has not exited: its slot is still taken, so an ADD needs a node.
    w.request(ChangeRequest::add(APP, 1));
    w.run_for(Duration::from_millis(5));
    assert_eq!(need_slots(&w), vec![1]);
    assert!(
        w.master.changes().any(|c| c.delta == sub),
        "the SUB still waits for its victim"
    );
    w.add_node("n1", 2).expect("node added");
    w.run_for(Duration::from_millis(5));
    let table = |d: &dynres_core::rc::Daemon| -> Vec<PsetName> {
        d.changes().map(|c| c.delta.clone()).collect()
    };
    assert_eq!(
        table(&w.daemons[1]),
        table(&w.daemons[0]),
        "the new daemon's change table is the others'"
    );
    assert!(!table(&w.daemons[1]).contains(&sub));
    // The victim exits: the SUB is done; still nobody holds it.
    let victim = w
        .master
        .all_changes()
        .find(|c| c.delta == sub)
        .map(|c| c.removed[0].clone())
        .expect("the SUB is known");
    w.exit(&victim);
    w.run_for(Duration::from_millis(5));
    assert!(
        w.master.changes().all(|c| c.delta != sub),
        "the SUB is done"
    );
    assert!(
        w.daemons
            .iter()
            .all(|d| d.changes().all(|c| c.delta != sub))
    );
}
