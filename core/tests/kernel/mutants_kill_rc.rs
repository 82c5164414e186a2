//! Resource-change behaviour that `verification/nightly.sh`'s cargo-mutants run found
//! untested (spec/verification.md §7), on the in-memory world of `common`: each test
//! names the mutant it catches.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use dynres_core::Duration;
use dynres_core::ProcessId;
use dynres_core::pset::PsetName;
use dynres_core::pset::{AttrUpdate, PsetOp, SetOp};
use dynres_core::rc::BadRequest;
use dynres_core::rc::{
    CallResult, ChangeRequest, ClientCall, ClientReply, ClientRequest, DaemonInput, DaemonOutput,
    QueryAnswer, RcError, RcStatus,
};

/// Requests `req` and returns the delta pset of the change it announced.
fn announce(w: &mut World, req: ChangeRequest) -> PsetName {
    w.request(req);
    w.run_for(Duration::from_millis(1));
    w.statuses.last().expect("announced").0.clone()
}

/// Announces an ADD of `n` (new processes do not confirm) and returns its delta pset.
fn announce_add(w: &mut World, n: u32) -> PsetName {
    w.behaviour.confirm = false;
    announce(w, ChangeRequest::add(APP, n))
}

/// `op(pset1, pset2)`, its result written to `target` with `attrs`.
fn set_op(
    op: SetOp,
    pset1: &PsetName,
    pset2: &PsetName,
    target: &PsetName,
    attrs: AttrUpdate,
) -> PsetOp {
    PsetOp::Set {
        op,
        pset1: pset1.clone(),
        pset2: pset2.clone(),
        target: Some(target.clone()),
        attrs,
    }
}

/// Rank `rank` applies `ops` in one request, which must succeed.
fn apply_all(w: &mut World, rank: u32, ops: Vec<PsetOp>) {
    let res = w.call_wait(&pid(rank), ClientCall::PsetOp { ops });
    assert!(matches!(res, CallResult::PsetOp(Ok(_))), "{res:?}");
}

/// Rank `rank` applies `op`, which must succeed.
fn apply(w: &mut World, rank: u32, op: PsetOp) {
    apply_all(w, rank, vec![op]);
}

/// Phase 2 as rank 0 does it: `mpi://app/app ∪ delta` as the root's new version.
fn grow_root(w: &mut World, delta: &PsetName) {
    let r = root();
    apply(
        w,
        0,
        set_op(SetOp::Union, &r, delta, &r, AttrUpdate::none()),
    );
}

/// An ADD of one process, phase 2 done and the root's accept in (accepted, `Ok`).
fn root_accepted_add(w: &mut World) -> PsetName {
    root_accepted_add_of(w, 1)
}

/// An ADD of `n` whose root applied its phase 2 and accepted; returns its delta.
fn root_accepted_add_of(w: &mut World, n: u32) -> PsetName {
    let delta = announce_add(w, n);
    grow_root(w, &delta);
    assert!(matches!(accept_by(w, 0, &delta), CallResult::Accept(Ok(_))));
    delta
}

/// Hands the master `request` from `from` as a daemon forwards it, and returns the
/// master's reply.
fn forward(w: &mut World, from: ProcessId, request: ClientRequest) -> ClientReply {
    forward_now(w, from, request).expect("answered")
}

/// [`forward`], returning `None` if the master does not answer at once.
fn forward_now(w: &mut World, from: ProcessId, request: ClientRequest) -> Option<ClientReply> {
    use dynres_core::rc::{MasterInput, NodeId, ToMaster};
    while w.master.poll_output().is_some() {}
    let msg = ToMaster::Forward {
        from: from.clone(),
        req: 77,
        request,
    };
    w.master
        .handle(
            w.now,
            MasterInput::FromDaemon {
                node: NodeId(0),
                msg,
            },
        )
        .expect("a forwarded request is served");
    forwarded_reply(w, &from)
}

/// The master's reply to `from`'s request forwarded by [`forward_now`], among its
/// queued outputs (all drained).
fn forwarded_reply(w: &mut World, from: &ProcessId) -> Option<ClientReply> {
    use dynres_core::rc::{MasterOutput, ToDaemon};
    std::iter::from_fn(|| w.master.poll_output()).find_map(|o| match o {
        MasterOutput::Send(e) => match e.msg {
            ToDaemon::Reply { to, req: 77, reply } if &to == from => Some(reply),
            _ => None,
        },
        _ => None,
    })
}

/// Rank `rank`'s `get_res_change(bound)` (`RC-4`).
fn query(w: &mut World, rank: u32, bound: Option<PsetName>) -> QueryAnswer {
    match w.call_wait(&pid(rank), ClientCall::GetResChange { bound }) {
        CallResult::ResChange(q) => q,
        other => panic!("rank {rank}: not a query answer: {other:?}"),
    }
}

/// Hands node 0's daemon `request` from rank 1 directly (as request 5) and returns all
/// it does about it at once.
fn daemon_serves(w: &mut World, request: ClientRequest) -> Vec<DaemonOutput> {
    let now = w.now;
    let d = &mut w.daemons[0];
    while d.poll_output().is_some() {}
    let from = pid(1);
    d.handle(
        now,
        DaemonInput::FromClient {
            from,
            req: 5,
            request,
        },
    )
    .expect("served");
    std::iter::from_fn(|| d.poll_output()).collect()
}

/// Asserts that no change was announced and that the master refused a request with
/// `error` (`RC-2`: refused with nothing changed).
fn assert_refused(w: &World, error: RcError) {
    assert!(w.statuses.is_empty(), "{:?}", w.statuses);
    assert!(
        w.notices.iter().any(
            |n| matches!(n, dynres_core::rc::MasterOutput::Refused { error: e, .. } if *e == error)
        ),
        "{:?}",
        w.notices
    );
}

fn accept_by(w: &mut World, rank: u32, delta: &PsetName) -> CallResult {
    let accept = ClientCall::Accept {
        delta: delta.clone(),
        new_pset: root(),
        bound: None,
        wait: None,
    };
    w.call_wait(&pid(rank), accept)
}

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
    // `Master::aborted_key` (`accept_key(d) == key` → `!=`): a later lookup of the aborted
    // change's accept key fails with `Aborted`, one of a key nobody published with
    // `NoSuchKey`.
    let lookup = |key: String| ClientCall::Lookup { key, wait: None };
    assert_eq!(
        w.call_wait(&pid(0), lookup(format!("{delta}:accept"))),
        CallResult::Lookup(Err(RcError::Aborted(delta.clone())))
    );
    assert_eq!(
        w.call_wait(&pid(0), lookup("nothing".into())),
        CallResult::Lookup(Err(RcError::NoSuchKey("nothing".into())))
    );
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
        Err(dynres_core::rc::MasterRejection::TooManySlots)
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

/// `master/phase1.rs` `Master::start_change`: the guard `malleable.contains(b)` → `false`
/// refused an ADD bound to a malleable pset it names (`RC-6`).
#[test]
fn an_add_may_name_its_malleable_bound_pset() {
    let mut w = World::new(config(2, 4, 3));
    w.request(ChangeRequest::add_to(APP, 1, root()));
    w.run_for(Duration::from_millis(1));
    let (delta, status) = w.statuses.last().expect("announced, not refused").clone();
    assert_eq!(status, RcStatus::Announced, "{:?}", w.notices);
    assert_eq!(query(&mut w, 0, Some(root())).delta, Some(delta));
}

/// `master/phase3.rs` `accept_key` → `"xyzzy"`: the first accept of an ADD publishes the
/// new pset under `{delta}:accept` (`RC-12`), where new processes look it up.
#[test]
fn the_first_accept_publishes_the_new_pset_under_the_accept_key() {
    let mut w = World::new(config(2, 4, 3));
    let delta = root_accepted_add(&mut w);
    let res = w.call_wait(
        &pid(1),
        ClientCall::Lookup {
            key: format!("{delta}:accept"),
            wait: None,
        },
    );
    assert_eq!(res, CallResult::Lookup(Ok(root().as_str().to_string())));
}

/// `master/phase3.rs` `Master::check_accept`: `!in_bound_now && !in_bound_at_announce`
/// → `||`. A process in the bound pset's current version (here a new process, after
/// phase 2) may accept though it was not in it when the change was announced.
#[test]
fn a_process_in_the_current_bound_pset_may_accept() {
    let mut w = World::new(config(2, 4, 3));
    let delta = announce_add(&mut w, 1);
    grow_root(&mut w, &delta);
    assert_eq!(w.members(&root()), [0, 1, 2, 3]);
    let res = accept_by(&mut w, 3, &delta);
    let CallResult::Accept(Ok(a)) = res else {
        panic!("the new process may accept: {res:?}")
    };
    assert_eq!(a.status, RcStatus::Pending);
}

/// `master/phase3.rs` `Master::set_status`: `!status.is_final()` → `status.is_final()`.
/// A change that became PENDING is re-announced to the daemons, so any process's query
/// answered from its daemon's replica sees PENDING (`RC-4`, `RC-14`).
#[test]
fn daemons_learn_that_a_change_is_pending() {
    let mut w = World::new(config(2, 4, 3));
    let delta = root_accepted_add(&mut w);
    w.run_for(Duration::from_millis(1));
    // Rank 2 lives on node 0 or 1; either daemon must have the news.
    for rank in [1, 2] {
        let q = query(&mut w, rank, None);
        assert_eq!(
            (q.delta.as_ref(), q.status),
            (Some(&delta), RcStatus::Pending)
        );
    }
}

/// Written for `master/phase3.rs` `Master::on_exit` (`!self.procs.contains_key(pid)` →
/// `self.procs.contains_key(pid)`), which it does not catch (spec/verification.md §7.2):
/// it pins the behaviour around it instead. A new process that exits before its change
/// is decided aborts the change at once (`RC-10`), long before the change's own timeout.
#[test]
fn a_new_process_exiting_undecided_aborts_at_once() {
    let mut w = World::new(config(2, 4, 2));
    w.crash_on_launch.insert(pid(3));
    let delta = announce_add(&mut w, 2);
    // It dies two start-up delays (10 ms) after its launch; the change would time out
    // at 500 ms, its confirms at 200 ms.
    w.run_for(Duration::from_millis(20));
    assert!(w.exited.contains(&pid(3)));
    assert_eq!(w.master.status(&delta), RcStatus::Aborted);
    assert_eq!(
        w.status_log(&delta),
        [RcStatus::Announced, RcStatus::Aborted]
    );
}

/// `client.rs` `Client::advance`: `now < deadline` → `now <= deadline`. A modex told
/// `Stale` exactly at its deadline has no time left: the call ends with `Stale` rather
/// than asking again with a zero timeout (`MODEX-2`).
#[test]
fn stale_at_the_deadline_ends_the_modex() {
    use dynres_core::Instant;
    use dynres_core::rc::{Client, ClientInput, ClientOutput, ClientReply};
    let r = root();
    let mut c = Client::new(pid(0));
    let at = |ms| Instant::ZERO + Duration::from_millis(ms);
    let call = ClientCall::Modex {
        pset: r.clone(),
        data: "addr".into(),
        timeout: Duration::from_millis(10),
    };
    c.handle(at(0), ClientInput::Call { id: 1, call }).unwrap();
    let Some(ClientOutput::Request { req, .. }) = c.poll_output() else {
        panic!("first request")
    };
    let stale = ClientReply::Modex(Err(RcError::Stale {
        pset: r,
        version: 3,
    }));
    c.handle(at(10), ClientInput::Reply { req, reply: stale })
        .unwrap();
    let out = c.poll_output();
    assert!(
        matches!(
            out,
            Some(ClientOutput::Done {
                id: 1,
                result: CallResult::Modex(Err(RcError::Stale { .. }))
            })
        ),
        "{out:?}"
    );
}

/// `master/phase3.rs` `Master::finalize`: `!keep_deadline` → `keep_deadline` left a
/// finalized change's deadline armed. A decided change has no deadline left (`RC-10`):
/// past the change timeout the master keeps its decision and never asks to be woken for
/// a deadline that is already behind it.
#[test]
fn a_finalized_change_has_no_deadline_left() {
    let mut w = World::new(config(2, 4, 3));
    let delta = announce(&mut w, ChangeRequest::add(APP, 1));
    w.adapt(&pid(0), None);
    w.run_for(Duration::from_millis(20));
    assert_eq!(w.master.status(&delta), RcStatus::Finalized);
    // Twice the change timeout (500 ms) from its announcement.
    w.run_for(Duration::from_millis(1000));
    assert_eq!(w.master.status(&delta), RcStatus::Finalized);
    assert_eq!(
        w.status_log(&delta),
        [RcStatus::Announced, RcStatus::Pending, RcStatus::Finalized]
    );
    let next = w.master.poll_timeout();
    assert!(next.is_none_or(|t| t > w.now), "{next:?} at {:?}", w.now);
}

/// `master/phase1.rs` `Master::start_change`: the guard `malleable.contains(&root)` →
/// `true` bound an ADD without a requested pset to `mpi://app/{app}` even when that is
/// not malleable. ADD binds to the requested pset, else the root if malleable, else the
/// first of X_m (`RC-6`): here the root is strictly inside an active pset of its
/// domain, so only that pset is malleable.
#[test]
fn an_add_binds_to_a_malleable_pset_when_the_root_is_not() {
    let mut cfg = config(2, 4, 3);
    cfg.apps.push(("other".to_string(), 1));
    let mut w = World::new(cfg);
    let big = name("mpi://app/app/big");
    apply(
        &mut w,
        0,
        set_op(
            SetOp::Union,
            &root(),
            &name("mpi://WORLD"),
            &big,
            AttrUpdate::none(),
        ),
    );
    assert_eq!(
        w.master.registry().malleable(APP),
        std::slice::from_ref(&big)
    );
    w.request(ChangeRequest::add(APP, 1));
    w.run_for(Duration::from_millis(1));
    let (delta, status) = w.statuses.last().expect("announced").clone();
    assert_eq!(status, RcStatus::Announced, "{:?}", w.notices);
    let info = w
        .master
        .changes()
        .find(|c| c.delta == delta)
        .expect("the change");
    assert_eq!(info.bound, [big]);
}

/// `master/mod.rs` `Master::confirmed` → `None`: the master reports which new processes
/// confirmed a change (`RC-9`), none before the root's accept launches them, and keeps
/// the record once the change is FINALIZED.
#[test]
fn confirmed_reports_the_new_processes_that_confirmed() {
    let mut w = World::new(config(1, 4, 2));
    let delta = announce(&mut w, ChangeRequest::add(APP, 1));
    assert_eq!(
        w.master.confirmed(&delta),
        Some(&Default::default()),
        "none yet"
    );
    grow_root(&mut w, &delta);
    assert!(matches!(
        accept_by(&mut w, 0, &delta),
        CallResult::Accept(Ok(_))
    ));
    // The new process (rank 2) starts, queries and confirms.
    w.run_for(Duration::from_millis(50));
    assert_eq!(w.master.status(&delta), RcStatus::Finalized);
    assert_eq!(
        w.master.confirmed(&delta),
        Some(&std::collections::BTreeSet::from([pid(2)]))
    );
    assert_eq!(w.master.confirmed(&name("mpi://rte/app/rc/99")), None);
}

/// `master/phase3.rs` `Master::accept_reply`: `*n == new_pset` → `!=`. A SUB bound to two
/// psets (|X_c| = 2, `RC-8`) is accepted by each pset's leader with its own new pset;
/// each leader's reply names the pset that leader accepted, not the other one's.
#[test]
fn each_leader_of_a_two_pset_sub_is_answered_with_its_own_new_pset() {
    let mut w = World::new(config(1, 4, 3));
    let ex = |r: u32| name(&format!("mpi://app/app/ex{r}"));
    // The application's pset inactive, and ex{r} = app − {r} active: a victim in both
    // binds the SUB to both (the verification model's two-leader set-up).
    let set_up = |w: &mut World, r: u32, ops_before: Vec<PsetOp>| {
        let mut ops = ops_before;
        let self_set = name("mpi://SELF");
        ops.push(set_op(
            SetOp::Difference,
            &root(),
            &self_set,
            &ex(r),
            AttrUpdate::active(true),
        ));
        apply_all(w, r, ops);
    };
    let inactive = PsetOp::Null {
        target: root(),
        attrs: AttrUpdate::active(false),
    };
    set_up(&mut w, 0, vec![inactive]);
    set_up(&mut w, 1, Vec::new());
    // SUB 1 removes rank 2 (stack order), a member of ex0 = {1, 2} and ex1 = {0, 2}.
    let delta = announce(&mut w, ChangeRequest::sub(APP, 1));
    // `Master::check_accept` (guard `bound.len() == 1` → `true`): with two bound psets
    // an accept must name the one it accepts for (`RC-8`).
    let unnamed = ClientCall::Accept {
        delta: delta.clone(),
        new_pset: ex(0),
        bound: None,
        wait: None,
    };
    assert!(matches!(
        w.call_wait(&pid(1), unnamed),
        CallResult::Accept(Err(RcError::BadRequest(_)))
    ));
    // Leaders: rank 1 of ex0, rank 0 of ex1. Each shrinks its pset, then accepts it.
    let accept = |w: &mut World, leader: u32, pset: PsetName| {
        apply(
            w,
            leader,
            set_op(SetOp::Difference, &pset, &delta, &pset, AttrUpdate::none()),
        );
        let call = ClientCall::Accept {
            delta: delta.clone(),
            new_pset: pset.clone(),
            bound: Some(pset),
            wait: None,
        };
        match w.call_wait(&pid(leader), call) {
            CallResult::Accept(Ok(a)) => a,
            other => panic!("accept by rank {leader}: {other:?}"),
        }
    };
    let first = accept(&mut w, 1, ex(0));
    assert_eq!(first.status, RcStatus::Pending);
    assert_eq!(first.new_pset, ex(0));
    let second = accept(&mut w, 0, ex(1));
    assert_eq!(
        second.status,
        RcStatus::Finalized,
        "one accept per X_c pset"
    );
    assert_eq!(second.new_pset, ex(1), "its own pset, not ex0");
}

/// `master/mod.rs` `Master::on_request`: `i.status != Finalized` → `==`. A query a daemon
/// forwards anyway (daemons answer queries from their replica) gets the master's own
/// answer: the application's undecided change, never a finalized one (`RC-1`, Lst. 6.2).
#[test]
fn a_forwarded_query_is_answered_with_the_undecided_change() {
    let mut w = World::new(config(1, 4, 2));
    let delta = announce_add(&mut w, 1);
    let ClientReply::Query(answer) = forward(&mut w, pid(1), ClientRequest::Query { bound: None })
    else {
        panic!("not a query answer")
    };
    assert_eq!(answer.delta, Some(delta));
    assert_eq!(answer.status, RcStatus::Announced);
}

/// `daemon/mod.rs` `Daemon::on_client`: the `PsetInfo` arm deleted sent every pset
/// lookup to the master. A daemon answers it from its replica, at once (spec
/// `resource-change.md` §1: the daemon "answers queries from the replica").
#[test]
fn a_daemon_answers_pset_info_from_its_replica() {
    let mut w = World::new(config(1, 4, 2));
    w.run_for(Duration::from_millis(1));
    let out = daemon_serves(&mut w, ClientRequest::PsetInfo { name: root() });
    assert!(
        matches!(
            out.as_slice(),
            [DaemonOutput::ToClient {
                reply: ClientReply::PsetInfo(Ok((2, _))),
                ..
            }]
        ),
        "{out:?}"
    );
}

/// `master/phase3.rs` `Master::confirm`: its `Aborted` arm deleted, a confirm that came
/// after the deadline aborted the change was filed like any other. A late confirm gets
/// the decision already made (`RC-1`, `RC-10`), and the change stays ABORTED.
#[test]
fn a_confirm_after_the_abort_is_told_the_change_aborted() {
    let mut w = World::new(config(1, 4, 2));
    w.behaviour.exit_on_kill = false;
    let delta = root_accepted_add(&mut w);
    // The new process (rank 2) runs but never confirms: the deadline aborts the change.
    w.run_for(Duration::from_millis(700));
    assert_eq!(w.master.status(&delta), RcStatus::Aborted);
    let late = ClientRequest::Confirm {
        delta: delta.clone(),
        ok: true,
    };
    assert_eq!(
        forward(&mut w, pid(2), late),
        ClientReply::Confirmed(Err(RcError::Aborted(delta.clone())))
    );
    assert_eq!(w.master.status(&delta), RcStatus::Aborted);
}

/// `master/phase3.rs` `Master::forget_if_done`: `status == Aborted && !bug(…)` → `||`
/// withdrew every done change from the daemons. Only an ABORTED change is withdrawn
/// when it is done (its added processes gone, `RC-14`, `RC-19`): a FINALIZED one left the
/// replicas when it was decided, and nothing more is sent for it when its victim exits.
#[test]
fn only_an_aborted_change_is_withdrawn_from_the_daemons_when_done() {
    let mut w = World::new(config(1, 4, 3));
    w.behaviour.exit_when_removed = false;
    let sub = announce(&mut w, ChangeRequest::sub(APP, 1));
    w.adapt(&pid(0), None);
    w.run_for(Duration::from_millis(5));
    assert_eq!(w.master.status(&sub), RcStatus::Finalized);
    let at_decision = w.withdrawn.len();
    w.exit(&pid(2));
    w.run_for(Duration::from_millis(5));
    assert_eq!(
        w.withdrawn[at_decision..],
        [],
        "nothing withdrawn when the FINALIZED SUB is done"
    );
    // An ADD nobody accepts aborts at its deadline; with no process launched it is done
    // at once, and withdrawn.
    let add = announce_add(&mut w, 1);
    w.run_for(Duration::from_millis(700));
    assert_eq!(w.master.status(&add), RcStatus::Aborted);
    assert!(
        w.withdrawn.iter().any(|(_, d)| *d == add),
        "{:?}",
        w.withdrawn
    );
}

/// `daemon/modex.rs` `Daemon::modex_pset_changed`: `p == pset && …` → `||` told the
/// members of every pending gather `Stale` when any pset got a new version. Only the
/// gathers over the pset that changed are stale (`MODEX-2`); a modex over another pset
/// goes on.
#[test]
fn a_new_version_of_one_pset_leaves_a_modex_over_another_alone() {
    use dynres_core::rc::ModexData;
    // Ranks 0 and 1 on node 0, rank 2 on node 1; `x` = a copy of the application's pset.
    let mut w = World::new(config(2, 2, 3));
    let r = root();
    let x = name("mpi://app/app/x");
    apply(
        &mut w,
        0,
        set_op(SetOp::Union, &r, &r, &x, AttrUpdate::active(false)),
    );
    let modex = |pset: &PsetName, rank: u32| ClientCall::Modex {
        pset: pset.clone(),
        data: format!("addr-of-{rank}"),
        timeout: Duration::from_millis(1000),
    };
    // Rank 1 starts a modex over `x`: node 0 waits for rank 0.
    let on_x = w.call(&pid(1), modex(&x, 1));
    w.run_for(Duration::from_millis(1));
    // An ADD gives the application's pset a new version; `x` keeps its own.
    w.request(ChangeRequest::add(APP, 1));
    w.run_for(Duration::from_millis(1));
    w.adapt(&pid(0), None);
    w.run_for(Duration::from_millis(20));
    assert!(w.modex_stale.is_empty(), "{:?}", w.modex_stale);
    // The other members join and everyone gets the table at `x`'s version.
    let version = w.version(&x);
    let calls: Vec<(u32, u64)> = [0, 2].map(|k| (k, w.call(&pid(k), modex(&x, k)))).into();
    for (rank, id) in calls.into_iter().chain([(1, on_x)]) {
        let CallResult::Modex(Ok(ModexData {
            version: v,
            entries,
        })) = w.wait(&pid(rank), id)
        else {
            panic!("rank {rank}: modex failed")
        };
        assert_eq!(v, version);
        assert_eq!(entries.len(), 3, "rank {rank}");
    }
}

/// `pset/rollback.rs` `PsetRegistry::roll_back_app`: `!active && bug(…)` → `||` skipped
/// every inactive pset in a rollback (what the planted bug `RollbackActiveOnly` does).
/// An aborted SUB restores all the application's psets its delta reached, the inactive
/// ones that followed it (`PSET-34`) included (`RC-12`).
#[test]
fn an_aborted_sub_restores_the_inactive_psets_that_followed_its_delta() {
    let mut w = World::new(config(1, 4, 3));
    let (r, all) = (root(), name("mpi://app/app/all"));
    // An inactive copy of the application's pset: it follows every delta (PSET-34).
    apply(
        &mut w,
        0,
        set_op(SetOp::Union, &r, &r, &all, AttrUpdate::active(false)),
    );
    let sub = announce(&mut w, ChangeRequest::sub(APP, 1));
    // Phase 2 without an accept: rank 2 leaves the root and, with it, `all`.
    apply(
        &mut w,
        0,
        set_op(SetOp::Difference, &r, &sub, &r, AttrUpdate::none()),
    );
    assert_eq!(w.members(&all), [0, 1]);
    w.run_for(Duration::from_millis(700));
    assert_eq!(w.master.status(&sub), RcStatus::Aborted);
    assert_eq!(w.members(&r), [0, 1, 2]);
    assert_eq!(
        w.members(&all),
        [0, 1, 2],
        "the inactive pset is restored too"
    );
}

/// `master/phase3.rs` `Master::confirm`: `ok && bug(ConfirmAnsweredAtOnce)` → `||`
/// answered every confirm at once. A new process's confirm is answered with the
/// decision (`RC-9`): while another new process has not confirmed, it waits.
#[test]
fn a_confirm_is_answered_at_the_decision() {
    let mut w = World::new(config(1, 4, 2));
    let delta = root_accepted_add_of(&mut w, 2);
    let confirm = || ClientRequest::Confirm {
        delta: delta.clone(),
        ok: true,
    };
    assert_eq!(
        forward_now(&mut w, pid(2), confirm()),
        None,
        "rank 3 still owes one"
    );
    assert_eq!(
        forward(&mut w, pid(3), confirm()),
        ClientReply::Confirmed(Ok(()))
    );
    assert_eq!(w.master.status(&delta), RcStatus::Finalized);
}

/// `rc/client.rs` `step_call` → `Default::default()` made every open call look like call
/// 0. A call id is unique among the client's open calls (`ClientInput::Call`): a second
/// call under an open call's id is refused, another id is taken.
#[test]
fn a_client_refuses_a_call_id_already_open() {
    use dynres_core::Instant;
    use dynres_core::rc::{Client, ClientInput};
    let mut c = Client::new(pid(1));
    let query = |id| ClientInput::Call {
        id,
        call: ClientCall::GetResChange { bound: None },
    };
    assert_eq!(c.handle(Instant(0), query(5)), Ok(()));
    assert_eq!(
        c.handle(Instant(0), query(5)),
        Err(dynres_core::rc::ClientRejection::CallIdInUse(5))
    );
    assert_eq!(c.handle(Instant(0), query(0)), Ok(()));
}

/// `master/data.rs` `Master::expire_data`: `f.deadline <= now` → `>` failed the fences
/// not yet due whenever another deadline woke the master. A fence fails with `Timeout`
/// at its own deadline only (`RC-16`): one the change deadline passes by completes.
#[test]
fn a_fence_outlives_another_deadline() {
    let mut w = World::new(config(1, 4, 2));
    let fence = || ClientCall::Fence {
        pset: root(),
        timeout: Duration::from_millis(2000),
    };
    let first = w.call(&pid(0), fence());
    // An ADD nobody accepts: its deadline (500 ms) wakes the master meanwhile.
    let add = announce_add(&mut w, 1);
    w.run_for(Duration::from_millis(700));
    assert_eq!(w.master.status(&add), RcStatus::Aborted);
    assert_eq!(w.results.get(&(pid(0), first)), None, "still waiting");
    let second = w.call(&pid(1), fence());
    assert!(matches!(w.wait(&pid(1), second), CallResult::Fence(Ok(_))));
    assert!(matches!(w.wait(&pid(0), first), CallResult::Fence(Ok(_))));
}

/// Sets up `x` = the application's pset less the caller `by`, and starts rank `first`'s
/// modex over it; returns `x` and the call.
fn modex_over_all_but(w: &mut World, by: u32, first: u32) -> (PsetName, u64) {
    let x = name("mpi://app/app/x");
    apply(
        w,
        by,
        set_op(
            SetOp::Difference,
            &root(),
            &name("mpi://SELF"),
            &x,
            AttrUpdate::active(false),
        ),
    );
    let call = w.call(&pid(first), modex_call(&x, first));
    w.run_for(Duration::from_millis(1));
    (x, call)
}

fn modex_call(pset: &PsetName, rank: u32) -> ClientCall {
    ClientCall::Modex {
        pset: pset.clone(),
        data: format!("addr-of-{rank}"),
        timeout: Duration::from_millis(1000),
    }
}

/// `daemon/modex.rs` `Daemon::modex_member_gone` (`!forwarded && members.contains(pid)`
/// → `||`) and `master/modex.rs` `Master::modex_lost` (`members.contains(pid) && …` →
/// `||`) failed every pending modex when any process exited. Only a modex the lost
/// process belonged to and had not contributed to fails (`MODEX-4`); one over a pset
/// without it completes.
#[test]
fn a_lost_process_fails_only_the_modexes_it_belongs_to() {
    // All on node 0: x = {0, 1}; rank 0 waits for rank 1 at the daemon; rank 2 exits.
    let mut w = World::new(config(1, 4, 3));
    let (x, first) = modex_over_all_but(&mut w, 2, 0);
    w.exit(&pid(2));
    w.run_for(Duration::from_millis(5));
    let second = w.call(&pid(1), modex_call(&x, 1));
    both_get_the_table(&mut w, [(1, second), (0, first)]);
    // Two nodes: x = {0, 2} waits at the master for node 1 while rank 1 is lost.
    let mut w = World::new(config(2, 2, 3));
    let (x, first) = modex_over_all_but(&mut w, 1, 0);
    w.exit(&pid(1));
    w.run_for(Duration::from_millis(5));
    let second = w.call(&pid(2), modex_call(&x, 2));
    both_get_the_table(&mut w, [(2, second), (0, first)]);
}

/// Each of two ranks' modex calls ends with a table of both.
fn both_get_the_table(w: &mut World, calls: [(u32, u64); 2]) {
    use dynres_core::rc::ModexData;
    for (rank, id) in calls {
        let CallResult::Modex(Ok(ModexData { entries, .. })) = w.wait(&pid(rank), id) else {
            panic!("rank {rank}: its modex failed")
        };
        assert_eq!(entries.len(), 2);
    }
}

/// `master/phase1.rs` `Master::start_change`: the guard `malleable.contains(b)` →
/// `true` bound an ADD to any pset it named. An ADD may name only a malleable pset
/// (`RC-6`): one that is not (here the inactive WORLD) is refused, nothing announced.
#[test]
fn an_add_naming_a_pset_that_is_not_malleable_is_refused() {
    use dynres_core::pset::PsetName;
    let mut w = World::new(config(2, 4, 3));
    w.request(ChangeRequest::add_to(APP, 1, PsetName::world()));
    w.run_for(Duration::from_millis(1));
    assert_refused(&w, RcError::BadRequest(BadRequest::NotMalleable));
}

/// `rc/client.rs` `Client::poll_timeout` → `Some(Default::default())` asked its driver to
/// be woken at time zero, again and again. A client keeps no deadline of its own — its
/// modexes are timed by the daemon and the master (`MODEX-5`), every other wait by the
/// master (`RC-16`, resource-change.md §4 "Timers (all at the master)") — so it never
/// asks for a timer, not even with a bounded call open.
#[test]
fn a_client_asks_for_no_timer() {
    use dynres_core::Instant;
    use dynres_core::rc::{Client, ClientInput};
    let mut c = Client::new(pid(0));
    assert_eq!(c.poll_timeout(), None);
    let call = modex_call(&root(), 0);
    c.handle(Instant(0), ClientInput::Call { id: 1, call })
        .expect("a modex call");
    assert!(c.poll_output().is_some(), "the modex goes to the daemon");
    assert_eq!(c.poll_timeout(), None, "its deadline is the daemon's");
}

/// `rc/client.rs` `Client::advance`: `o.status == Finalized` → `!=` told a removed
/// accept root to terminate while its change was still PENDING and not once it was
/// FINALIZED. A removed process finalizes and exits only once the change is FINALIZED
/// (`RC-11`); until then it may still be needed, the change may abort (`RC-12`).
#[test]
fn a_removed_root_terminates_only_once_finalized() {
    let mut w = World::new(config(1, 4, 3));
    w.behaviour.exit_when_removed = false;
    // REPLACE rank 0 (the accept root) by one new process, which starts late enough
    // that the change still waits for its confirm after the accept.
    w.behaviour.startup = Duration::from_millis(20);
    let req = ChangeRequest::replace_named(APP, pid(0).into(), 1);
    let delta = announce(&mut w, req);
    let sub_delta = query(&mut w, 0, None)
        .sub_delta
        .expect("a REPLACE has a sub delta");
    let r = root();
    apply_all(
        &mut w,
        0,
        vec![
            set_op(SetOp::Difference, &r, &sub_delta, &r, AttrUpdate::none()),
            set_op(SetOp::Union, &r, &delta, &r, AttrUpdate::none()),
        ],
    );
    let accept = |w: &mut World| match accept_by(w, 0, &delta) {
        CallResult::Accept(Ok(a)) => a,
        other => panic!("accept: {other:?}"),
    };
    let pending = accept(&mut w);
    assert_eq!(pending.status, RcStatus::Pending);
    assert_eq!(pending.removed, [pid(0)]);
    assert!(!pending.terminate, "not before the change is FINALIZED");
    w.run_for(Duration::from_millis(50));
    assert_eq!(w.master.status(&delta), RcStatus::Finalized);
    // RC-13: the decided change answers the repeated accept with its decision.
    let finalized = accept(&mut w);
    assert_eq!(finalized.status, RcStatus::Finalized);
    assert!(finalized.terminate, "rank 0 is removed: it must exit");
}

/// `daemon/mod.rs` `Daemon::poll_timeout` → `None`: a daemon never woke for the deadline
/// of a gather it had not forwarded. With every member on one node the master holds
/// nothing of the modex; the daemon's own timer fails it with `Timeout` at the earliest
/// contributor's deadline and leaves nothing behind (`MODEX-5`).
#[test]
fn a_daemon_times_out_a_gather_it_holds() {
    let mut w = World::new(config(1, 4, 2));
    let r = root();
    // Rank 1 never joins; rank 0's call reaches the daemon one latency from now.
    let deadline = w.now + w.latency + Duration::from_millis(1000);
    let call = w.call(&pid(0), modex_call(&r, 0));
    w.run_for(Duration::from_millis(1));
    assert!(w.modex_batches.is_empty(), "node 0 still waits for rank 1");
    assert_eq!(w.daemons[0].poll_timeout(), Some(deadline));
    w.run_for(Duration::from_millis(1100));
    assert_eq!(
        w.results.get(&(pid(0), call)),
        Some(&CallResult::Modex(Err(RcError::Timeout)))
    );
    assert_eq!(w.daemons[0].poll_timeout(), None, "nothing left behind");
}

/// `daemon/mod.rs` `Daemon::on_client`: the `Query` arm deleted sent every
/// `get_res_change` to the master. A daemon answers a query from its replica, at once
/// (`RC-4`).
#[test]
fn a_daemon_answers_a_query_from_its_replica() {
    let mut w = World::new(config(1, 4, 2));
    let delta = announce_add(&mut w, 1);
    let out = daemon_serves(&mut w, ClientRequest::Query { bound: None });
    let [
        DaemonOutput::ToClient {
            to,
            req: 5,
            reply: ClientReply::Query(answer),
        },
    ] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert_eq!(to, &pid(1));
    assert_eq!(
        (answer.delta.as_ref(), answer.status),
        (Some(&delta), RcStatus::Announced)
    );
}

/// `master/mod.rs` `Master::fingerprint` → 0 and → 1: a trace line's state fingerprint
/// must tell the master's states apart, and be the same for equal states whatever
/// outputs are still queued — a replay compares it after every transition
/// (spec/verification.md §6).
#[test]
fn a_master_fingerprint_follows_its_state() {
    use dynres_core::rc::{MasterInput, NodeId, ToMaster};
    let mut a = World::new(config(1, 4, 2));
    let mut b = World::new(config(1, 4, 2));
    let fresh = a.master.fingerprint();
    assert_eq!(b.master.fingerprint(), fresh, "the same state");
    b.behaviour.confirm = false;
    b.request(ChangeRequest::add(APP, 1));
    b.run_for(Duration::from_millis(1));
    let announced = b.master.fingerprint();
    assert_ne!(announced, fresh, "an announced change is state");
    // Outputs queued but not yet drained do not count.
    let msg = ToMaster::Forward {
        from: pid(0),
        req: 1,
        request: ClientRequest::Query { bound: None },
    };
    a.master
        .handle(
            a.now,
            MasterInput::FromDaemon {
                node: NodeId(0),
                msg,
            },
        )
        .expect("a query is answered");
    assert_eq!(a.master.fingerprint(), fresh, "a reply queued is not state");
    assert!(a.master.poll_output().is_some(), "the reply was queued");
}

/// `master/mod.rs` `Master::step`: the guard `node.0 as usize >= self.cfg.nodes.len()` →
/// `false` served messages from node indices the master never gave out, replying to a
/// daemon that does not exist. Nodes are the job's and those the driver added, each with
/// the next index (`RC-21`); a message from any other is refused and changes nothing,
/// and one from an added node is served.
#[test]
fn a_message_from_an_unknown_node_is_refused() {
    use dynres_core::rc::{MasterInput, NodeId, ToMaster};
    let mut w = World::new(config(1, 4, 2));
    while w.master.poll_output().is_some() {}
    let query = |node| MasterInput::FromDaemon {
        node: NodeId(node),
        msg: ToMaster::Forward {
            from: pid(0),
            req: 1,
            request: ClientRequest::Query { bound: None },
        },
    };
    let before = w.master.fingerprint();
    assert_eq!(
        w.master.handle(w.now, query(1)),
        Err(dynres_core::rc::MasterRejection::UnknownNode(NodeId(1)))
    );
    assert_eq!(w.master.poll_output(), None);
    assert_eq!(w.master.fingerprint(), before);
    assert_eq!(w.add_node("n1", 2), Ok(()));
    while w.master.poll_output().is_some() {}
    assert_eq!(w.master.handle(w.now, query(1)), Ok(()));
    assert!(
        w.master.poll_output().is_some(),
        "the added node's query is answered"
    );
}

/// `rc/query.rs` `answer`: `!c.status.is_final()` → `c.status.is_final()` preferred a
/// decided change. An undecided change wins over an ABORTED one still queryable
/// (`RC-4`): after an ADD aborted whose process has not exited yet, the application's
/// query answers the next ADD.
#[test]
fn a_query_prefers_the_undecided_change_to_an_aborted_one() {
    let mut w = World::new(config(1, 4, 2));
    // The aborted ADD's process is killed but does not exit: the change stays queryable.
    w.behaviour.exit_on_kill = false;
    let aborted = announce_add(&mut w, 1);
    w.run_for(Duration::from_millis(700));
    assert_eq!(w.master.status(&aborted), RcStatus::Aborted);
    let next = announce_add(&mut w, 1);
    assert_ne!(next, aborted);
    for by in [0, 1] {
        let q = query(&mut w, by, None);
        assert_eq!(
            (q.delta.as_ref(), q.status),
            (Some(&next), RcStatus::Announced),
            "rank {by}"
        );
    }
    // The master's answer is the same (a forwarded query, `RC-1`).
    let ClientReply::Query(q) = forward(&mut w, pid(1), ClientRequest::Query { bound: None })
    else {
        panic!("not a query answer")
    };
    assert_eq!(q.delta, Some(next));
}

/// `rc/types.rs` `RcStatus::may_become` → `true`: the master's guard against an illegal
/// status step let every step through. A change's status only moves `NULL → ANNOUNCED →
/// PENDING → FINALIZED | ABORTED`, ANNOUNCED may also abort, and the final ones never
/// move (`RC-1`).
#[test]
fn a_status_moves_only_along_its_lifecycle() {
    use RcStatus::*;
    let all = [Null, Announced, Pending, Finalized, Aborted];
    let legal = [
        (Null, Announced),
        (Announced, Pending),
        (Announced, Aborted),
        (Pending, Finalized),
        (Pending, Aborted),
    ];
    for from in all {
        for to in all {
            assert_eq!(
                from.may_become(to),
                legal.contains(&(from, to)),
                "{from:?} -> {to:?}"
            );
        }
    }
}

/// `master/phase3.rs` `Master::on_exit`: `!self.procs.contains_key(pid)` → delete `!`
/// kept the application of a process that had left the job. A dead process is nobody
/// (`RC-18`): a change request of it that arrives late, after its exit was handled, is
/// refused as from a process of no application (`NotPermitted`, `RC-2`) and starts
/// nothing, where from a live member it starts a change.
#[test]
fn a_late_change_request_of_a_dead_process_starts_nothing() {
    let mut w = World::new(config(1, 4, 3));
    w.run_for(Duration::from_millis(1));
    w.exit(&pid(2));
    w.run_for(Duration::from_millis(1));
    let late = forward(
        &mut w,
        pid(2),
        ClientRequest::RequestChange(ChangeRequest::add(APP, 1)),
    );
    assert_eq!(
        late,
        ClientReply::ChangeRequested(Err(RcError::NotPermitted(pid(2))))
    );
    assert_eq!(w.master.all_changes().count(), 0);
    let live = forward(
        &mut w,
        pid(1),
        ClientRequest::RequestChange(ChangeRequest::add(APP, 1)),
    );
    assert!(
        matches!(live, ClientReply::ChangeRequested(Ok(Some(_)))),
        "{live:?}"
    );
}

/// `master/phase3.rs` `Master::answer_waiters`: the guard `status == Finalized` → `true`
/// told a new process whose confirm waited for the decision that an ABORTED change had
/// succeeded. A confirm is answered with the decision (`RC-9`): when the change aborts
/// (here at its deadline, the root never accepting), with `Aborted`.
#[test]
fn a_waiting_confirm_learns_the_change_aborted() {
    use dynres_core::rc::MasterInput;
    let mut w = World::new(config(1, 4, 2));
    w.behaviour.confirm = false;
    let delta = announce_add(&mut w, 1);
    let confirm = ClientRequest::Confirm {
        delta: delta.clone(),
        ok: true,
    };
    assert_eq!(forward_now(&mut w, pid(2), confirm), None, "waits");
    let at = w.master.poll_timeout().expect("the change's deadline");
    w.master
        .handle(at, MasterInput::Timeout)
        .expect("a timeout");
    let answer = forwarded_reply(&mut w, &pid(2));
    assert_eq!(w.master.status(&delta), RcStatus::Aborted);
    assert_eq!(
        answer,
        Some(ClientReply::Confirmed(Err(RcError::Aborted(delta))))
    );
}

/// `master/phase3.rs` `Master::abort`: `!self.bug(NoBroadcastOnRollback)` → delete `!`
/// kept the psets a rollback restored from the daemons. An abort's restored psets are
/// replicated (`RC-12`, `RC-14`): a daemon answers the root's info as the master holds
/// it again, without the aborted change's process.
#[test]
fn a_rollback_reaches_the_daemons() {
    let mut w = World::new(config(1, 4, 2));
    w.behaviour.exit_on_kill = false;
    w.behaviour.confirm = false;
    let delta = root_accepted_add(&mut w);
    assert_eq!(w.members(&root()), [0, 1, 2], "phase 2 grew the root");
    w.run_for(Duration::from_millis(700));
    assert_eq!(w.master.status(&delta), RcStatus::Aborted);
    let at_master = w.master.registry().get(&root()).unwrap().clone();
    assert_eq!(at_master.members.len(), 2, "restored");
    let out = daemon_serves(&mut w, ClientRequest::PsetInfo { name: root() });
    let [
        DaemonOutput::ToClient {
            reply: ClientReply::PsetInfo(Ok(info)),
            ..
        },
    ] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert_eq!(
        (info.0, info.1.version),
        (2, at_master.attrs.version),
        "the daemon's replica"
    );
}

/// `master/phase3.rs` `Master::lose`: `f.members.contains(pid) && !f.arrived…` → `||`
/// failed every fence the lost process had not arrived at, also fences it is no member
/// of. A loss fails the fences waiting for it (`RC-18`); a fence over a pset without it
/// goes on and completes.
#[test]
fn a_loss_fails_only_the_fences_waiting_for_the_lost_process() {
    let mut w = World::new(config(1, 4, 3));
    // `x` = the application less rank 2.
    let x = name("mpi://app/app/x");
    apply(
        &mut w,
        2,
        set_op(
            SetOp::Difference,
            &root(),
            &name("mpi://SELF"),
            &x,
            AttrUpdate::none(),
        ),
    );
    let fence = |pset: &PsetName| ClientCall::Fence {
        pset: pset.clone(),
        timeout: Duration::from_millis(2000),
    };
    let on_x = w.call(&pid(0), fence(&x));
    let on_root = w.call(&pid(1), fence(&root()));
    w.run_for(Duration::from_millis(1));
    w.exit(&pid(2));
    w.run_for(Duration::from_millis(5));
    assert_eq!(
        w.results.get(&(pid(1), on_root)),
        Some(&CallResult::Fence(Err(RcError::ProcessLost(pid(2))))),
        "rank 2 will never arrive"
    );
    assert_eq!(w.results.get(&(pid(0), on_x)), None, "x waits for rank 1");
    let last = w.call(&pid(1), fence(&x));
    assert!(matches!(w.wait(&pid(1), last), CallResult::Fence(Ok(_))));
    assert!(matches!(w.wait(&pid(0), on_x), CallResult::Fence(Ok(_))));
}

/// `daemon/modex.rs` `Daemon::expire_gathers`: `!g.forwarded && g.deadline <= now` →
/// `||` failed every gather still waiting on its node at any daemon timeout. A gather
/// fails with `Timeout` only at its deadline (`MODEX-5`): woken before it (its timer
/// serves every gather of the node), the daemon keeps waiting, and the late member
/// completes the modex.
#[test]
fn a_daemon_woken_early_keeps_a_gather_before_its_deadline() {
    use dynres_core::rc::ModexData;
    let mut w = World::new(config(1, 4, 2));
    let r = root();
    let first = w.call(&pid(0), modex_call(&r, 0));
    w.run_for(Duration::from_millis(1));
    assert!(w.modex_batches.is_empty(), "node 0 still waits for rank 1");
    let now = w.now;
    w.daemons[0]
        .handle(now, DaemonInput::Timeout)
        .expect("an early wake-up is served");
    let second = w.call(&pid(1), modex_call(&r, 1));
    for (rank, id) in [(0, first), (1, second)] {
        let CallResult::Modex(Ok(ModexData { entries, .. })) = w.wait(&pid(rank), id) else {
            panic!("rank {rank}: modex failed: {:?}", w.results)
        };
        assert_eq!(entries.len(), 2, "rank {rank}");
    }
}

/// `master/growth.rs` `Master::send_replica`: `!c.done` → `c.done`, and
/// `status != Finalized || bug(..)` → `&&`: an added node's daemon got no undecided
/// change. Its replica holds every change still in progress before any change can place
/// a process there (`RC-14`, `RC-21`), so its processes' queries see it (`RC-4`).
#[test]
fn an_added_node_learns_the_change_in_progress() {
    let mut w = World::new(config(1, 4, 2));
    let delta = announce_add(&mut w, 1);
    w.add_node("n1", 2).expect("the node joins");
    w.run_for(Duration::from_millis(1));
    let held: Vec<&PsetName> = w.daemons[1].changes().map(|c| &c.delta).collect();
    assert_eq!(held, [&delta]);
}

/// `master/growth.rs` `Master::expire_growth`: `!g.refused && (denied || deadline <=
/// now)` → `||` refused a request waiting for slots at any master timeout. It is refused
/// only when the driver denies the slots or its deadline passes (`RC-21`): woken before
/// (the master has one timer for all its deadlines), it keeps waiting and starts on the
/// node that comes.
#[test]
fn a_request_waiting_for_slots_outlives_an_early_wake_up() {
    use dynres_core::rc::{MasterInput, MasterOutput};
    let mut cfg = config(1, 2, 2);
    cfg.grow_wait = Some(Duration::from_millis(1000));
    let mut w = World::new(cfg);
    w.request(ChangeRequest::add(APP, 1));
    w.run_for(Duration::from_millis(10));
    assert!(w.statuses.is_empty(), "it waits for a node");
    let now = w.now;
    w.master
        .handle(now, MasterInput::Timeout)
        .expect("an early wake-up is served");
    w.add_node("n1", 1).expect("the node joins");
    w.run_for(Duration::from_millis(1));
    assert!(
        !w.notices
            .iter()
            .any(|n| matches!(n, MasterOutput::Refused { .. })),
        "{:?}",
        w.notices
    );
    assert_eq!(w.statuses.len(), 1, "it started on the new node");
}

/// `master/modex.rs` `Master::on_modex_batch`: `version != current &&
/// !bug(ModexIgnoreVersion)` → `&& bug(..)` gathered a batch for a version the pset no
/// longer has (the gather then failed for every node of the pset). A batch at another
/// version than the master's is answered `Stale`, with the current version, to the node
/// that sent it alone: no modex is open at the master (`MODEX-2`).
#[test]
fn the_master_answers_a_batch_at_an_old_version_stale() {
    use dynres_core::rc::{MasterInput, MasterOutput, NodeId, ToDaemon, ToMaster};
    // Ranks 0 and 1 on node 0; the new rank 2 on node 1.
    let mut w = World::new(config(2, 2, 2));
    let r = root();
    let old = w.version(&r);
    let delta = announce_add(&mut w, 1);
    grow_root(&mut w, &delta);
    let current = w.version(&r);
    assert!(current > old);
    while w.master.poll_output().is_some() {}
    let msg = ToMaster::Modex {
        pset: r.clone(),
        version: old,
        timeout: Duration::from_millis(1000),
        entries: vec![(pid(0), "a".into()), (pid(1), "b".into())],
    };
    let now = w.now;
    w.master
        .handle(
            now,
            MasterInput::FromDaemon {
                node: NodeId(0),
                msg,
            },
        )
        .expect("served");
    let done: Vec<_> = std::iter::from_fn(|| w.master.poll_output())
        .filter_map(|o| match o {
            MasterOutput::Send(e) => match e.msg {
                ToDaemon::ModexDone {
                    version, result, ..
                } => Some((e.to, version, result)),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(
        done,
        [(
            NodeId(0),
            old,
            Err(RcError::Stale {
                pset: r,
                version: current
            })
        )]
    );
}

/// `master/phase1.rs` `Master::dequeue`: `!in_flight && !growing` → `||` started every
/// queued request of the application at once. One change per application is undecided
/// at a time (`RC-15`): when the first aborts, only the next queued one starts.
#[test]
fn a_decided_change_starts_only_the_next_queued_request() {
    let mut w = World::new(config(1, 8, 2));
    w.behaviour.confirm = false;
    for _ in 0..3 {
        w.request(ChangeRequest::add(APP, 1));
    }
    w.run_for(Duration::from_millis(1));
    assert_eq!(w.statuses.len(), 1, "two wait in the queue");
    // No accept: the first change aborts at its deadline (500 ms).
    w.run_for(Duration::from_millis(600));
    let announced: Vec<&PsetName> = w
        .statuses
        .iter()
        .filter(|(_, s)| *s == RcStatus::Announced)
        .map(|(d, _)| d)
        .collect();
    assert_eq!(announced.len(), 2, "{:?}", w.statuses);
}

/// `master/phase1.rs` `Master::start_change`: `(add && adds == 0) || (sub && removes ==
/// 0)` → `&&` let an ADD of no process through. A change must add or remove at least
/// one process (`RC-2`).
#[test]
fn an_add_of_no_process_is_refused() {
    let mut w = World::new(config(1, 4, 2));
    w.request(ChangeRequest::add(APP, 0));
    w.run_for(Duration::from_millis(1));
    assert_refused(&w, RcError::BadRequest(BadRequest::EmptyChange));
}

/// `master/phase1.rs` `Master::start_change`: `!in_app(p) || !is_running(p)` → `&&` let
/// a SUB name a running process of another application. A named victim must be a
/// running process of the application (`RC-5`).
#[test]
fn a_sub_may_not_name_a_process_of_another_application() {
    let mut cfg = config(1, 8, 3);
    cfg.apps.push(("other".to_string(), 1));
    let mut w = World::new(cfg);
    let stranger = pid(3);
    assert_eq!(
        w.members(&root()),
        [0, 1, 2],
        "rank 3 is the other application's"
    );
    w.request(ChangeRequest::sub_named(APP, stranger.clone().into()));
    w.run_for(Duration::from_millis(1));
    assert!(w.statuses.is_empty(), "{:?}", w.statuses);
    assert!(
        w.notices.iter().any(|n| matches!(
            n,
            dynres_core::rc::MasterOutput::Refused {
                error: RcError::NotPermitted(p),
                ..
            } if *p == stranger
        )),
        "{:?}",
        w.notices
    );
}

/// `master/phase3.rs` `confirm_key` → `String::new()` / `"xyzzy"`: the decision is
/// published under `{delta}:confirm` (`RC-12`), where new processes look it up.
#[test]
fn the_decision_is_published_under_the_confirm_key() {
    let mut w = World::new(config(1, 4, 2));
    w.request(ChangeRequest::add(APP, 1));
    w.run_for(Duration::from_millis(1));
    let delta = w.statuses.last().expect("announced").0.clone();
    w.adapt(&pid(0), None);
    w.run_for(Duration::from_millis(100));
    assert_eq!(w.master.status(&delta), RcStatus::Finalized);
    let res = w.call_wait(
        &pid(1),
        ClientCall::Lookup {
            key: format!("{delta}:confirm"),
            wait: None,
        },
    );
    assert_eq!(res, CallResult::Lookup(Ok("success".to_string())));
}

/// `master/phase3.rs` `Master::accept`: the guard `!status.is_final()` → `true` parked a
/// blocking accept that had just decided its SUB. A blocking accept waits only for an
/// undecided change: the SUB's last accept finalizes it and is answered at once
/// (`RC-8`, `RC-13`).
#[test]
fn the_blocking_accept_that_decides_a_sub_is_answered_at_once() {
    let mut w = World::new(config(1, 4, 3));
    let delta = announce(&mut w, ChangeRequest::sub(APP, 1));
    let r = root();
    apply(
        &mut w,
        0,
        set_op(SetOp::Difference, &r, &delta, &r, AttrUpdate::none()),
    );
    let accept = ClientRequest::Accept {
        delta: delta.clone(),
        new_pset: r.clone(),
        bound: None,
        wait: Some(Duration::from_secs(5)),
    };
    let Some(ClientReply::Accept(Ok(a))) = forward_now(&mut w, pid(0), accept) else {
        panic!("the deciding accept waits")
    };
    assert_eq!(a.status, RcStatus::Finalized);
}

/// `master/phase3.rs` `Master::check_accept`: `!in_bound_now && !in_bound_at_announce`
/// → `&& in_bound_at_announce` let a process outside the bound pset accept. Only a
/// member of the bound pset (now or when the change was announced) accepts (`RC-8`).
#[test]
fn a_process_outside_the_bound_pset_may_not_accept() {
    let mut w = World::new(config(1, 4, 3));
    // The application's pset inactive, ex2 = app − {2} active: ex2 is the only malleable
    // pset, and rank 2 is in the application but not in ex2.
    let ex2 = name("mpi://app/app/ex2");
    let inactive = PsetOp::Null {
        target: root(),
        attrs: AttrUpdate::active(false),
    };
    let ex = set_op(
        SetOp::Difference,
        &root(),
        &name("mpi://SELF"),
        &ex2,
        AttrUpdate::active(true),
    );
    apply_all(&mut w, 2, vec![inactive, ex]);
    assert_eq!(
        w.master.registry().malleable(APP),
        std::slice::from_ref(&ex2)
    );
    let delta = announce_add(&mut w, 1);
    apply(
        &mut w,
        0,
        set_op(SetOp::Union, &ex2, &delta, &ex2, AttrUpdate::none()),
    );
    let accept = |rank: u32, w: &mut World| {
        let call = ClientCall::Accept {
            delta: delta.clone(),
            new_pset: ex2.clone(),
            bound: None,
            wait: None,
        };
        w.call_wait(&pid(rank), call)
    };
    assert_eq!(
        accept(2, &mut w),
        CallResult::Accept(Err(RcError::NotPermitted(pid(2))))
    );
    assert!(matches!(accept(0, &mut w), CallResult::Accept(Ok(_))));
}

/// `master/phase3.rs` `Master::confirm`: the `Finalized` arm deleted parked a confirm
/// that came after the decision. A confirm of a FINALIZED change is answered `Ok` at
/// once (`RC-9`).
#[test]
fn a_confirm_after_the_decision_is_answered_at_once() {
    let mut w = World::new(config(1, 4, 2));
    let delta = root_accepted_add_of(&mut w, 1);
    let confirm = || ClientRequest::Confirm {
        delta: delta.clone(),
        ok: true,
    };
    assert_eq!(
        forward(&mut w, pid(2), confirm()),
        ClientReply::Confirmed(Ok(()))
    );
    assert_eq!(w.master.status(&delta), RcStatus::Finalized);
    assert_eq!(
        forward_now(&mut w, pid(2), confirm()),
        Some(ClientReply::Confirmed(Ok(())))
    );
}
