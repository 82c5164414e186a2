//! The modex (`spec/resource-change.md` §8, `MODEX-1..6`) on the in-memory world: one
//! message per node to the master and one back, every member gets the same table,
//! stale versions, losses, timeouts and bad batches fail without corrupting anything.

use crate::common;

use common::{World, config, pid, root};
use dynres_core::pset::PsetName;
use dynres_core::rc::{
    CallResult, ChangeRequest, ClientCall, MasterInput, MasterOutput, ModexData, NodeId, RcError,
    ToDaemon, ToMaster,
};
use dynres_core::{Duration, ProcessId};

fn value(rank: u32) -> String {
    format!("addr-of-{rank}")
}

fn modex(pset: &PsetName, rank: u32, timeout_ms: u64) -> ClientCall {
    ClientCall::Modex {
        pset: pset.clone(),
        data: value(rank),
        timeout: Duration::from_millis(timeout_ms),
    }
}

/// Starts a modex call for each rank and returns the call ids.
fn start(w: &mut World, pset: &PsetName, ranks: &[u32], timeout_ms: u64) -> Vec<(u32, u64)> {
    ranks
        .iter()
        .map(|&r| (r, w.call(&pid(r), modex(pset, r, timeout_ms))))
        .collect()
}

fn outcome(w: &mut World, (rank, id): (u32, u64)) -> Result<ModexData, RcError> {
    match w.wait(&pid(rank), id) {
        CallResult::Modex(r) => r,
        other => panic!("rank {rank}: not a modex result: {other:?}"),
    }
}

/// MODEX-1, MODEX-3: six members on three nodes; each node sends one batch with its two
/// members and gets one outcome; every member gets the whole table, ordered by process
/// id, at the pset's current version.
#[test]
fn a_modex_costs_one_message_per_node_each_way() {
    let mut w = World::new(config(3, 2, 6));
    let r = root();
    let calls = start(&mut w, &r, &[5, 0, 3, 1, 4, 2], 1000);
    let want: Vec<(ProcessId, String)> = (0..6).map(|k| (pid(k), value(k))).collect();
    let version = w.version(&r);
    for c in calls {
        let got = outcome(&mut w, c).expect("modex completes");
        assert_eq!(got.entries, want);
        assert_eq!(got.version, version);
    }
    let mut batches: Vec<(u32, usize)> = w
        .modex_batches
        .iter()
        .map(|(n, p, v, k)| {
            assert_eq!((p, *v), (&r, version));
            (n.0, *k)
        })
        .collect();
    batches.sort();
    assert_eq!(batches, vec![(0, 2), (1, 2), (2, 2)]);
    let mut done: Vec<(u32, bool)> = w
        .modex_done
        .iter()
        .map(|(n, _, _, ok)| (n.0, *ok))
        .collect();
    done.sort();
    assert_eq!(done, vec![(0, true), (1, true), (2, true)]);
}

/// MODEX-5: a member that never joins makes the others time out — those whose node had
/// forwarded (the master's deadline) and those still gathering on its node (the daemon's
/// own timer). Nothing is left behind: the next modex over the same pset completes.
#[test]
fn a_missing_member_times_out_everyone_and_nothing_is_left_behind() {
    let mut w = World::new(config(3, 2, 6));
    let r = root();
    let calls = start(&mut w, &r, &[0, 1, 2, 3, 4], 50);
    w.run_for(Duration::from_millis(100));
    for c in calls {
        assert_eq!(outcome(&mut w, c), Err(RcError::Timeout), "rank {}", c.0);
    }
    assert!(
        w.master.poll_timeout().is_none(),
        "the master keeps no deadline"
    );
    assert!(w.daemons.iter().all(|d| d.poll_timeout().is_none()));
    let calls = start(&mut w, &r, &[0, 1, 2, 3, 4, 5], 1000);
    for c in calls {
        assert_eq!(outcome(&mut w, c).expect("second modex").entries.len(), 6);
    }
}

/// MODEX-5: the master keeps the *earliest* deadline of the batches it holds: a node whose
/// members wait 50 ms and a node whose members wait 10 s, with a member missing on a third
/// node — every member, the patient ones too, has its `Timeout` by 100 ms (keeping the
/// latest deadline, they would wait 10 s; the models cannot tell, as every member there
/// has the same timeout).
#[test]
fn the_earliest_contributors_deadline_times_the_modex_out() {
    let mut w = World::new(config(3, 2, 6));
    let r = root();
    let mut calls = start(&mut w, &r, &[0, 1], 50);
    calls.extend(start(&mut w, &r, &[2, 3, 4], 10_000));
    w.run_for(Duration::from_millis(100));
    for (rank, id) in calls {
        match w.results.get(&(pid(rank), id)) {
            Some(CallResult::Modex(Err(RcError::Timeout))) => {}
            other => panic!("rank {rank} at 100 ms: {other:?}"),
        }
    }
}

/// MODEX-2: a node's batch gathered at a version that is no longer current fails with
/// `Stale` naming the new version; the member's client asks again, and every member
/// agrees on the new table.
#[test]
fn a_modex_over_a_replaced_version_is_stale_and_the_retry_agrees() {
    // Ranks 0 and 1 on node 0, rank 2 on node 1.
    let mut w = World::new(config(2, 2, 3));
    let r = root();
    let before = w.version(&r);
    let early = start(&mut w, &r, &[2], 1000);
    w.run_for(Duration::from_millis(1));
    assert_eq!(w.modex_batches.len(), 1, "node 1 forwarded its only member");
    // An ADD of one: the root's pset operation makes a new version of mpi://app/app.
    w.request(ChangeRequest::add(common::APP, 1));
    w.run_for(Duration::from_millis(1));
    w.adapt(&pid(0), None);
    w.run_for(Duration::from_millis(20));
    let now = w.version(&r);
    assert!(now > before);
    match &w.modex_stale[..] {
        [(p, pset, version)] => {
            assert_eq!((p, pset), (&pid(2), &r));
            assert!(*version > before, "names a newer version");
        }
        other => panic!("expected one Stale for rank 2, got {other:?}"),
    }
    let calls = start(&mut w, &r, &[0, 1, 3], 1000);
    let want: Vec<(ProcessId, String)> = (0..4).map(|k| (pid(k), value(k))).collect();
    for c in early.into_iter().chain(calls) {
        let got = outcome(&mut w, c).expect("retry completes");
        assert_eq!((got.version, &got.entries), (now, &want));
    }
}

/// MODEX-4: a member that exits before it joined fails the modex for everyone, on its
/// own node (the daemon sees the exit) and on the others (the master's `RC-18`).
#[test]
fn a_lost_member_fails_the_modex_everywhere() {
    // Only the lost member's node is gathering: the master has not heard of the modex,
    // so its daemon must fail it.
    let mut w = World::new(config(2, 2, 3));
    let r = root();
    let calls = start(&mut w, &r, &[0], 1000);
    w.run_for(Duration::from_millis(1));
    w.exit(&pid(1));
    assert_eq!(outcome(&mut w, calls[0]), Err(RcError::ProcessLost(pid(1))));
    assert!(w.daemons.iter().all(|d| d.poll_timeout().is_none()));
    // Another node had forwarded: the master fails it there.
    let mut w = World::new(config(2, 2, 3));
    let calls = start(&mut w, &r, &[2, 0], 1000);
    w.run_for(Duration::from_millis(1));
    w.exit(&pid(1));
    for c in calls {
        assert_eq!(
            outcome(&mut w, c),
            Err(RcError::ProcessLost(pid(1))),
            "rank {}",
            c.0
        );
    }
    assert!(w.master.poll_timeout().is_none());
}

/// MODEX-1, MODEX-6: a non-member is refused, a member may join a modex once, and a
/// batch that speaks for another node's member is refused by the master without
/// touching the modex in progress.
#[test]
fn only_members_join_once_and_daemons_speak_only_for_their_node() {
    let mut w = World::new(config(2, 2, 3));
    let r = root();
    let delta_like = PsetName::parse("mpi://app/app/nobody").unwrap();
    let c = w.call(&pid(0), modex(&delta_like, 0, 100));
    assert!(matches!(
        w.wait(&pid(0), c),
        CallResult::Modex(Err(RcError::Pset(_)))
    ));
    let first = start(&mut w, &r, &[0], 1000);
    let again = start(&mut w, &r, &[0], 1000);
    assert!(matches!(
        outcome(&mut w, again[0]),
        Err(RcError::BadRequest(_))
    ));
    // Node 1 claims rank 0, which runs on node 0.
    let forged = ToMaster::Modex {
        pset: r.clone(),
        version: w.version(&r),
        timeout: Duration::from_millis(100),
        entries: vec![(pid(0), "forged".into())],
    };
    w.master
        .handle(
            w.now,
            MasterInput::FromDaemon {
                node: NodeId(1),
                msg: forged,
            },
        )
        .unwrap();
    let mut refused = false;
    while let Some(o) = w.master.poll_output() {
        if let MasterOutput::Send(env) = o {
            if let ToDaemon::ModexDone { result, .. } = env.msg {
                assert_eq!(env.to, NodeId(1));
                assert_eq!(result, Err(RcError::NotPermitted(pid(0))));
                refused = true;
            }
        }
    }
    assert!(refused);
    let rest = start(&mut w, &r, &[1, 2], 1000);
    for c in first.into_iter().chain(rest) {
        let got = outcome(&mut w, c).expect("the real modex completes");
        assert_eq!(
            got.entries[0],
            (pid(0), value(0)),
            "the forged value is not used"
        );
    }
}

/// MODEX-6: a SUB announced while a modex gathers takes its victims out of the job data
/// (phase 1), but they still run and are members of the version being gathered: their
/// node's batch is accepted and everyone gets the table (the race an e2e test hit under
/// load, when the check read the job data instead of the slot map).
#[test]
fn a_sub_announced_during_a_modex_does_not_refuse_its_victims() {
    let mut w = World::new(config(2, 2, 3));
    let r = root();
    let calls = start(&mut w, &r, &[0, 1], 1000);
    w.request(ChangeRequest::sub(common::APP, 1));
    w.run_for(Duration::from_millis(1));
    assert!(!w.statuses.is_empty(), "the SUB was announced");
    assert!(
        !w.master.processes().contains_key(&pid(2)),
        "rank 2 left the job data"
    );
    let late = start(&mut w, &r, &[2], 1000);
    for c in calls.into_iter().chain(late) {
        let got = outcome(&mut w, c).expect("the victim's batch is accepted");
        assert_eq!(got.entries.len(), 3);
    }
}

/// MODEX-4: a member that contributed and then exited before its node's batch reached
/// the master fails the modex with `ProcessLost`, not a refusal.
#[test]
fn a_member_that_exits_after_contributing_fails_the_modex_as_lost() {
    let mut w = World::new(config(2, 2, 3));
    let r = root();
    let first = start(&mut w, &r, &[0], 1000);
    w.run_for(Duration::from_millis(1));
    w.exit(&pid(0));
    w.run_for(Duration::from_millis(1));
    let rest = start(&mut w, &r, &[1, 2], 1000);
    for c in rest {
        assert_eq!(
            outcome(&mut w, c),
            Err(RcError::ProcessLost(pid(0))),
            "rank {}",
            c.0
        );
    }
    drop(first);
}

/// MODEX-2 in the client machine: told `Stale` before its deadline it asks again with
/// what is left of its timeout; after the deadline the call ends with `Stale`.
#[test]
fn the_client_asks_again_on_stale_until_its_deadline() {
    use dynres_core::Instant;
    use dynres_core::rc::{Client, ClientInput, ClientOutput, ClientReply, ClientRequest};
    let r = root();
    let stale = ClientReply::Modex(Err(RcError::Stale {
        pset: r.clone(),
        version: 3,
    }));
    let mut c = Client::new(pid(0));
    let at = |ms| Instant::ZERO + Duration::from_millis(ms);
    c.handle(
        at(0),
        ClientInput::Call {
            id: 1,
            call: modex(&r, 0, 10),
        },
    )
    .unwrap();
    let Some(ClientOutput::Request { req, .. }) = c.poll_output() else {
        panic!("first request")
    };
    c.handle(
        at(4),
        ClientInput::Reply {
            req,
            reply: stale.clone(),
        },
    )
    .unwrap();
    let Some(ClientOutput::Request { req, request }) = c.poll_output() else {
        panic!("asked again")
    };
    assert_eq!(
        request,
        ClientRequest::Modex {
            pset: r.clone(),
            data: value(0),
            timeout: Duration::from_millis(6),
        }
    );
    c.handle(
        at(11),
        ClientInput::Reply {
            req,
            reply: stale.clone(),
        },
    )
    .unwrap();
    assert!(matches!(
        c.poll_output(),
        Some(ClientOutput::Done {
            id: 1,
            result: CallResult::Modex(Err(RcError::Stale { .. }))
        })
    ));
}
