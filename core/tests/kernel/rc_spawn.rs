//! The runtime part of a spawn (`spec/spawn.md` §9): slots for every child or
//! none (`SPAWN-17`), the replica before the launch (`SPAWN-18`), the spawn forgotten
//! once its children are gone (`SPAWN-19`), and only the spawner kills them
//! (`SPAWN-20`).

use crate::common;

use common::{APP, World, config, pid, root};
use dynres_core::pset::{AttrUpdate, PsetName, PsetOp, SetOp};
use dynres_core::rc::BadRequest;
use dynres_core::rc::{
    CallResult, ChangeRequest, ClientCall, MasterInput, MasterOutput, NodeId, RcError, RcStatus,
    SpawnCommand, SpawnWatch, Spawned, ToMaster,
};
use dynres_core::slots::SlotError;
use dynres_core::{Duration, Instant, ProcessId};

fn cmd(program: &str, count: u32) -> SpawnCommand {
    SpawnCommand {
        program: program.into(),
        args: vec!["--x".into()],
        count,
    }
}

fn spawn(w: &mut World, by: &ProcessId, commands: Vec<SpawnCommand>) -> Result<Spawned, RcError> {
    spawn_watched(w, by, commands, SpawnWatch::Handshake)
}

fn spawn_watched(
    w: &mut World,
    by: &ProcessId,
    commands: Vec<SpawnCommand>,
    watch: SpawnWatch,
) -> Result<Spawned, RcError> {
    let env = vec![("DYNRES_PARENT_PORT".to_string(), "p".to_string())];
    let call = ClientCall::Spawn {
        commands,
        env,
        watch,
    };
    match w.call_wait(by, call) {
        CallResult::Spawned(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// The master's reports of processes that exited, in order.
fn exits(w: &World) -> Vec<&MasterOutput> {
    w.notices
        .iter()
        .filter(|n| {
            matches!(
                n,
                MasterOutput::SpawnedExited(_) | MasterOutput::ProcessLost(_)
            )
        })
        .collect()
}

/// Asserts that the master's exit reports are `SpawnedExited` of each of `ranks`, in
/// order: spawns' children, none of them a loss of the job.
fn assert_spawned_exited(w: &World, ranks: &[u32]) {
    let want: Vec<MasterOutput> = ranks
        .iter()
        .map(|r| MasterOutput::SpawnedExited(pid(*r)))
        .collect();
    let got: Vec<MasterOutput> = exits(w).into_iter().cloned().collect();
    assert_eq!(got, want);
}

fn kill(w: &mut World, by: &ProcessId, app: &str) -> Result<(), RcError> {
    match w.call_wait(by, ClientCall::KillSpawn { app: app.into() }) {
        CallResult::SpawnKilled(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

fn spawn_root(app: &str) -> PsetName {
    PsetName::app_root(app).unwrap()
}

/// SPAWN-17, SPAWN-18: all children get slots or none does; granted children are a new
/// application with their own root pset (not in WORLD), and every daemon holds that
/// pset and their job data before any of them is launched.
#[test]
fn a_spawn_gets_slots_for_every_child_or_none() {
    let mut w = World::new(config(2, 2, 2));
    w.run_for(Duration::from_millis(1));
    let free = w.master.slots().free_count();
    let err = spawn(&mut w, &pid(0), vec![cmd("a", 2), cmd("b", 1)]).unwrap_err();
    assert!(
        matches!(
            err,
            RcError::Slots(SlotError::Exhausted { wanted: 3, free: 2 })
        ),
        "{err:?}"
    );
    assert_eq!(w.master.slots().free_count(), free, "nothing placed");
    assert!(w.spawned.is_empty(), "nothing launched");
    assert!(w.master.registry().get(&spawn_root("spawn-0")).is_err());

    let got = spawn(&mut w, &pid(1), vec![cmd("a", 1), cmd("b", 1)]).unwrap();
    assert_eq!(got.app, "spawn-0", "the refused spawn used no name");
    assert_eq!(got.procs, vec![pid(2), pid(3)], "fresh ranks (PSET-20)");
    w.run_for(Duration::from_millis(1));
    let (node, app, program, known) = &w.spawned[&pid(2)];
    assert_eq!(
        (*node, app.as_str(), program.as_str()),
        (NodeId(1), "spawn-0", "a")
    );
    assert!(
        known,
        "SPAWN-18: the replica held the child before its launch"
    );
    assert_eq!(w.spawned[&pid(3)].2, "b", "each command runs its program");
    assert!(w.spawned[&pid(3)].3);
    assert_eq!(w.members(&spawn_root("spawn-0")), vec![2, 3]);
    assert_eq!(
        w.members(&PsetName::world()),
        vec![0, 1],
        "children are not in WORLD"
    );
    assert_eq!(w.master.slots().free_count(), 0);
    for d in &w.daemons {
        assert!(d.job().contains(&pid(2)) && d.job().contains(&pid(3)));
    }
}

/// SPAWN-19: children that exit free their slots, are not losses of the job, and once
/// the last is gone the spawn's psets and job data leave the master and every
/// daemon; the next spawn gets a new name and new ranks.
#[test]
fn a_spawn_is_forgotten_when_its_children_are_gone() {
    let mut w = World::new(config(1, 4, 2));
    w.run_for(Duration::from_millis(1));
    let got = spawn(&mut w, &pid(0), vec![cmd("a", 2)]).unwrap();
    // A pset the children make in their own domain goes with them.
    let own = PsetName::parse("mpi://app/spawn-0/mine").unwrap();
    let ops = vec![PsetOp::Set {
        op: SetOp::Union,
        pset1: spawn_root(&got.app),
        pset2: spawn_root(&got.app),
        target: Some(own.clone()),
        attrs: AttrUpdate::none(),
    }];
    let made = w.call_wait(&pid(2), ClientCall::PsetOp { ops });
    assert!(matches!(made, CallResult::PsetOp(Ok(_))), "{made:?}");
    w.exit(&pid(2));
    w.run_for(Duration::from_millis(1));
    assert_eq!(w.master.slots().free_count(), 1);
    assert!(
        w.master.registry().get(&spawn_root(&got.app)).is_ok(),
        "one child left"
    );
    w.exit(&pid(3));
    w.run_for(Duration::from_millis(1));
    assert_eq!(w.master.slots().free_count(), 2);
    for name in [spawn_root(&got.app), own] {
        assert!(w.master.registry().get(&name).is_err(), "{name} forgotten");
        for d in &w.daemons {
            assert!(d.pset(&name).is_none(), "{name} left the replica");
        }
    }
    for d in &w.daemons {
        assert!(!d.job().contains(&pid(2)) && !d.job().contains(&pid(3)));
    }
    assert_spawned_exited(&w, &[2, 3]);
    assert_eq!(w.master.spawns().count(), 0);
    let again = spawn(&mut w, &pid(1), vec![cmd("a", 1)]).unwrap();
    assert_eq!(
        (again.app.as_str(), again.procs.clone()),
        ("spawn-1", vec![pid(4)])
    );
}

/// SPAWN-24, SPAWN-25: an MPI library's spawn (`SpawnWatch::Job`) is answered once
/// every child reached its MPI library; after that its children exit as processes of
/// the job (`ProcessLost`, judged by `--on-loss`), since no handshake tells their
/// spawner; a handshake spawn's children beside them still exit as `SpawnedExited`
/// (SPAWN-19). Both spawns are forgotten all the same.
#[test]
fn an_mpi_librarys_children_are_the_jobs_to_judge_once_they_started() {
    let mut w = World::new(config(1, 4, 2));
    w.run_for(Duration::from_millis(1));
    let call = |commands, watch| ClientCall::Spawn {
        commands,
        env: Vec::new(),
        watch,
    };
    let id = w.call(&pid(0), call(vec![cmd("a", 1)], SpawnWatch::Job));
    w.run_for(Duration::from_millis(1));
    assert!(
        !w.results.contains_key(&(pid(0), id)),
        "not before it started"
    );
    w.start(&pid(2));
    let mpi = match w.wait(&pid(0), id) {
        CallResult::Spawned(r) => r.unwrap(),
        other => panic!("{other:?}"),
    };
    let native = spawn(&mut w, &pid(1), vec![cmd("b", 1)]).unwrap();
    assert_eq!(
        (mpi.procs.clone(), native.procs.clone()),
        (vec![pid(2)], vec![pid(3)])
    );
    w.exit(&pid(2));
    w.exit(&pid(3));
    w.run_for(Duration::from_millis(1));
    assert_eq!(
        exits(&w),
        vec![
            &MasterOutput::ProcessLost(pid(2)),
            &MasterOutput::SpawnedExited(pid(3))
        ]
    );
    assert_eq!(w.master.spawns().count(), 0, "both spawns forgotten");
    assert_eq!(w.master.slots().free_count(), 2);
}

/// SPAWN-25: a child of an MPI library's spawn that ends before every child started
/// fails the spawn: the spawner hears why, the other child is killed, and neither exit
/// is a loss of the job; a `Started` from another node than the child's is not
/// believed.
#[test]
fn a_child_that_ends_before_the_others_started_fails_the_spawn() {
    let mut w = World::new(config(2, 2, 2));
    w.run_for(Duration::from_millis(1));
    let id = w.call(
        &pid(0),
        ClientCall::Spawn {
            commands: vec![cmd("a", 2)],
            env: Vec::new(),
            watch: SpawnWatch::Job,
        },
    );
    w.run_for(Duration::from_millis(1));
    // Child 2 runs on node 1 (stack order: the job's two on node 0).
    let elsewhere = ToMaster::Started { pid: pid(2) };
    w.master
        .handle(
            Instant(0),
            MasterInput::FromDaemon {
                node: NodeId(0),
                msg: elsewhere,
            },
        )
        .unwrap();
    w.start(&pid(3));
    w.run_for(Duration::from_millis(1));
    assert!(
        !w.results.contains_key(&(pid(0), id)),
        "child 2 has not started"
    );
    w.exit(&pid(2));
    match w.wait(&pid(0), id) {
        CallResult::Spawned(Err(RcError::ProcessLost(p))) => assert_eq!(p, pid(2)),
        other => panic!("{other:?}"),
    }
    w.run_for(Duration::from_millis(50));
    assert!(w.exited.contains(&pid(3)), "the other child was killed");
    assert_spawned_exited(&w, &[2, 3]);
    assert_eq!(w.master.spawns().count(), 0);
}

/// SPAWN-20: a spawn's children are killed only at the spawner's request; a spawn
/// already gone has nothing to kill; an unknown one is refused.
#[test]
fn only_the_spawning_application_kills_the_children() {
    let mut w = World::new(config(1, 4, 2));
    w.run_for(Duration::from_millis(1));
    let got = spawn(&mut w, &pid(0), vec![cmd("a", 2)]).unwrap();
    assert_eq!(
        kill(&mut w, &pid(2), &got.app),
        Err(RcError::NotPermitted(pid(2))),
        "a child may not"
    );
    assert!(w.killed.is_empty());
    assert_eq!(kill(&mut w, &pid(1), &got.app), Ok(()));
    w.run_for(Duration::from_millis(1));
    assert!(w.killed.contains(&pid(2)) && w.killed.contains(&pid(3)));
    assert!(!w.killed.contains(&pid(0)) && !w.killed.contains(&pid(1)));
    w.run_for(Duration::from_millis(5));
    assert_eq!(
        w.master.slots().free_count(),
        2,
        "the killed children's slots"
    );
    assert_eq!(kill(&mut w, &pid(1), &got.app), Ok(()), "gone already");
    assert_eq!(
        kill(&mut w, &pid(1), "spawn-7"),
        Err(RcError::BadRequest(BadRequest::NoSuchSpawn))
    );
}

/// RC-2 for spawns: malformed requests are refused with nothing changed.
#[test]
fn a_malformed_spawn_is_refused() {
    let mut w = World::new(config(1, 4, 2));
    w.run_for(Duration::from_millis(1));
    let env_bad = ClientCall::Spawn {
        commands: vec![cmd("a", 1)],
        env: vec![("A=B".into(), "x".into())],
        watch: SpawnWatch::Handshake,
    };
    let bad = [
        vec![],
        vec![cmd("a", 0)],
        vec![cmd("", 1)],
        vec![cmd("a", 1), cmd("b\0", 1)],
    ];
    for commands in bad {
        let r = spawn(&mut w, &pid(0), commands.clone());
        assert!(
            matches!(r, Err(RcError::BadRequest(_))),
            "{commands:?}: {r:?}"
        );
    }
    let r = w.call_wait(&pid(0), env_bad);
    assert!(
        matches!(r, CallResult::Spawned(Err(RcError::BadRequest(_)))),
        "{r:?}"
    );
    assert_eq!(w.master.slots().free_count(), 2);
    assert!(w.spawned.is_empty());
    assert_eq!(
        spawn(&mut w, &pid(0), vec![cmd("a", 1)]).unwrap().app,
        "spawn-0"
    );
}

/// RC-12 with a spawn in between: an ADD that aborts rolls back only its own job data,
/// so children spawned while it was undecided stay in the job.
#[test]
fn an_aborted_change_keeps_children_spawned_meanwhile() {
    let mut w = World::new(config(1, 6, 2));
    w.run_for(Duration::from_millis(1));
    w.crash_on_launch.insert(pid(2));
    w.request(ChangeRequest::add(APP, 1));
    w.run_for(Duration::from_micros(30));
    let got = spawn(&mut w, &pid(0), vec![cmd("a", 2)]).unwrap();
    assert_eq!(got.procs, vec![pid(3), pid(4)]);
    w.run_for(Duration::from_millis(50));
    let delta = w.statuses.first().expect("the ADD was announced").0.clone();
    assert_eq!(w.status_log(&delta).last(), Some(&RcStatus::Aborted));
    for p in &got.procs {
        assert!(
            w.master.processes().contains_key(p),
            "{p} still in the job data"
        );
        for d in &w.daemons {
            assert!(d.job().contains(p), "{p} still in the replica's job data");
        }
    }
    assert!(!w.master.processes().contains_key(&pid(2)));
    assert_eq!(w.members(&root()), vec![0, 1]);
}

/// `rc/master/spawn.rs` `Master::kill_spawn`: `k < next_spawn` → `<=` took a kill of
/// the next spawn's name, one not made yet, for a kill of a spawn whose children are
/// gone. Only names the runtime handed out are quietly done (`SPAWN-19`, `SPAWN-20`);
/// the next name is unknown.
#[test]
fn a_kill_of_a_spawn_not_made_yet_is_refused() {
    let mut w = World::new(config(2, 2, 2));
    w.run_for(Duration::from_millis(1));
    assert_eq!(
        kill(&mut w, &pid(0), "spawn-0"),
        Err(RcError::BadRequest(BadRequest::NoSuchSpawn))
    );
    let got = spawn(&mut w, &pid(0), vec![cmd("a", 1)]).unwrap();
    assert_eq!(got.app, "spawn-0");
    assert_eq!(
        kill(&mut w, &pid(0), "spawn-1"),
        Err(RcError::BadRequest(BadRequest::NoSuchSpawn))
    );
}

/// `rc/master/spawn.rs` `validate`: `total > MAX_SPAWN` → `>=` or `==` moved the limit of
/// one spawn by one process. A spawn starts at most 65,536 processes, one group
/// (`SPAWN-7`, `RC-2`): exactly that many is a well-formed request (refused here only
/// for want of slots, `SPAWN-17`), one more is malformed.
#[test]
fn a_spawn_may_start_up_to_65536_processes() {
    let mut w = World::new(config(1, 4, 2));
    w.run_for(Duration::from_millis(1));
    assert!(
        matches!(
            spawn(&mut w, &pid(0), vec![cmd("a", 65_535), cmd("b", 1)]),
            Err(RcError::Slots(SlotError::Exhausted { wanted: 65_536, .. }))
        ),
        "well-formed, too big for the slots"
    );
    assert_eq!(
        spawn(&mut w, &pid(0), vec![cmd("a", 65_536), cmd("b", 1)]),
        Err(RcError::BadRequest(BadRequest::SpawnTooLarge))
    );
}
