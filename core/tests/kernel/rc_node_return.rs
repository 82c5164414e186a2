//! Giving a node back (`RC-20`, `SLOT-5`): only a node with no process of the job on it,
//! and nothing is placed there again.

use crate::common;

use common::*;
use dynres_core::Duration;
use dynres_core::rc::{
    ChangeRequest, MasterInput, MasterOutput, MasterRejection, NodeId, RcError, RcStatus,
};
use dynres_core::slots::SlotState;

fn returned(w: &mut World, node: u32) -> Result<(), MasterRejection> {
    let now = w.now;
    let r = w
        .master
        .handle(now, MasterInput::NodeReturned { node: NodeId(node) });
    w.run_for(Duration::from_millis(1));
    r
}

/// Requests a change and lets the root adapt to it (Lst. 6.7); its final status.
fn decided(w: &mut World, req: ChangeRequest) -> RcStatus {
    w.request(req);
    w.run_for(Duration::from_millis(1));
    w.adapt(&pid(0), None);
    w.run_for(Duration::from_millis(50));
    let delta = w.statuses.last().expect("announced").0.clone();
    w.master.status(&delta)
}

/// RC-20: a node with processes of the job is not given back (nothing changes); once
/// its processes are gone it is, its slots are retired (SLOT-5) and a growth that would
/// need them is refused for want of slots.
#[test]
fn only_an_empty_node_is_returned_and_never_used_again() {
    // Node 0 runs ranks 0 and 1; an ADD of 2 goes to node 1.
    let mut w = World::new(config(2, 2, 2));
    assert_eq!(
        decided(&mut w, ChangeRequest::add(APP, 2)),
        RcStatus::Finalized
    );
    assert_eq!(w.master.slots().processes_on(1).len(), 2);
    let before = w.master.slots().slots().to_vec();
    assert_eq!(
        returned(&mut w, 1),
        Err(MasterRejection::NodeBusy(NodeId(1)))
    );
    assert_eq!(
        returned(&mut w, 0),
        Err(MasterRejection::NodeBusy(NodeId(0)))
    );
    assert_eq!(
        w.master.slots().slots(),
        &before[..],
        "a refused return changes nothing"
    );
    // Shrink back: the two processes of node 1 leave, then it is empty.
    assert_eq!(
        decided(&mut w, ChangeRequest::sub(APP, 2)),
        RcStatus::Finalized
    );
    w.run_for(Duration::from_millis(200));
    assert!(w.master.slots().processes_on(1).is_empty());
    returned(&mut w, 1).unwrap();
    assert_eq!(w.master.slots().free_count(), 0);
    let node1 = &w.master.slots().slots()[2..4];
    assert!(node1.iter().all(|s| *s == SlotState::Retired), "{node1:?}");
    // No slot is left to grow into: refused, as any request beyond the job's slots.
    w.request(ChangeRequest::add(APP, 1));
    w.run_for(Duration::from_millis(1));
    let slots_refused = w.notices.iter().any(|n| {
        matches!(
            n,
            MasterOutput::Refused {
                error: RcError::Slots(_),
                ..
            }
        )
    });
    assert!(slots_refused, "{:?}", w.notices);
}

/// RC-20: a node the job does not have is refused.
#[test]
fn an_unknown_node_is_refused() {
    let mut w = World::new(config(1, 2, 1));
    assert_eq!(
        returned(&mut w, 7),
        Err(MasterRejection::NoSuchNode(NodeId(7)))
    );
}

/// RC-20, SLOT-3, SLOT-5: between a SUB's FINALIZED and its victim's exit the victim has
/// left the job data but still runs on its node and holds its slot, so the node is not
/// given back; once the victim has exited it is. Only the gate's `rc-sub-return-2n-2e-1new`
/// saw this window before (issue 33): a master judging "busy" by the job data would give
/// back a node whose only process is still leaving.
#[test]
fn a_node_whose_only_process_is_leaving_is_not_given_back_before_it_exits() {
    // Rank 0 on node 0, rank 1 alone on node 1; the SUB removes rank 1 (stack order).
    let mut w = World::new(config(2, 1, 2));
    w.behaviour.exit_when_removed = false;
    assert_eq!(
        decided(&mut w, ChangeRequest::sub(APP, 1)),
        RcStatus::Finalized
    );
    assert!(!w.exited.contains(&pid(1)), "the victim has not exited yet");
    assert!(
        !w.master.processes().contains_key(&pid(1)),
        "a FINALIZED SUB's victim is out of the job data"
    );
    assert_eq!(
        w.master.slots().processes_on(1),
        [pid(1)],
        "but holds its slot"
    );
    let before = w.master.slots().slots().to_vec();
    assert!(
        matches!(returned(&mut w, 1), Err(MasterRejection::NodeBusy(_))),
        "a node whose process is still leaving is busy"
    );
    assert_eq!(
        w.master.slots().slots(),
        &before[..],
        "refused: nothing changes"
    );
    w.exit(&pid(1));
    w.run_for(Duration::from_millis(10));
    assert!(w.master.slots().processes_on(1).is_empty());
    returned(&mut w, 1).unwrap();
    assert!(
        w.master.slots().slots()[1..]
            .iter()
            .all(|s| *s == SlotState::Retired)
    );
}
