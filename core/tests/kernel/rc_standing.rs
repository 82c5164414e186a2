//! What a launched process learns of its place in the job (`Daemon::standing`: the
//! launcher's `DYNRES_SIZE`, `DYNRES_LOCAL_RANK`, `DYNRES_LOCAL_SIZE`, `DYNRES_NODE_ID`),
//! read from its daemon's replica at the launch on the deterministic world.

use crate::common;

use common::*;
use dynres_core::Duration;
use dynres_core::pset::PsetName;
use dynres_core::rc::{CallResult, ChangeRequest, ClientCall, SpawnCommand, SpawnWatch, Standing};

fn standing(w: &World, rank: u32) -> Standing {
    w.standings[&pid(rank)].unwrap_or_else(|| panic!("rank {rank} launched without a standing"))
}

/// (node, size, local rank, local size) of `rank`.
fn place(w: &World, rank: u32) -> (u32, u32, u32, u32) {
    let s = standing(w, rank);
    (s.node.0, s.size, s.local_rank, s.local_size)
}

/// The job's first processes: size is the starting size, local ranks count from 0 on
/// each node in rank order (slots fill node 0 first, SLOT-1).
#[test]
fn first_processes_learn_the_size_and_their_place_on_their_node() {
    let w = World::new(config(2, 2, 3));
    assert_eq!(place(&w, 0), (0, 3, 0, 2));
    assert_eq!(place(&w, 1), (0, 3, 1, 2));
    assert_eq!(place(&w, 2), (1, 3, 0, 1));
    assert_eq!(standing(&w, 2).rank, 2);
}

/// Processes an ADD launches see the size the change gives the job, and places after
/// the node's processes that stay; after a SUB emptied slots, a REPLACE's new process
/// never takes the position of a process that stays.
#[test]
fn added_processes_learn_the_size_after_their_change() {
    let mut w = World::new(config(2, 3, 2));
    w.finalize(ChangeRequest::add(APP, 2));
    // Ranks 2 (node 0's last slot) and 3 (node 1).
    assert_eq!(place(&w, 2), (0, 4, 2, 3));
    assert_eq!(place(&w, 3), (1, 4, 0, 1));
    w.finalize(ChangeRequest::sub(APP, 2));
    w.finalize(ChangeRequest::replace(APP, 1, 1));
    // Left: 0, 1; the REPLACE removes 1 and adds 4 on node 0.
    assert_eq!(w.members(&PsetName::world()), vec![0, 4]);
    assert_eq!(place(&w, 4), (0, 2, 1, 2));
}

/// `count` processes of `program`, no arguments.
fn command(program: &str, count: u32) -> SpawnCommand {
    SpawnCommand {
        program: program.into(),
        args: Vec::new(),
        count,
    }
}

/// Rank 0 spawns `commands` (a dynres-native spawn) and the launches run.
fn spawn(w: &mut World, commands: Vec<SpawnCommand>) {
    let watch = SpawnWatch::Handshake;
    let env = Vec::new();
    let r = w.call_wait(
        &pid(0),
        ClientCall::Spawn {
            commands,
            env,
            watch,
        },
    );
    assert!(matches!(r, CallResult::Spawned(Ok(_))), "{r:?}");
    w.run_for(Duration::from_millis(1));
}

/// A spawn's children count their own world (their spawn), not the job's.
#[test]
fn spawned_children_learn_their_spawns_size() {
    let mut w = World::new(config(2, 2, 2));
    spawn(&mut w, vec![command("a", 2)]);
    assert_eq!(place(&w, 2), (1, 2, 0, 2));
    assert_eq!(place(&w, 3), (1, 2, 1, 2));
    // Their ranks in their own world count from 0 (PMI_RANK, MPI_COMM_WORLD's rank).
    assert_eq!((standing(&w, 2).rank, standing(&w, 3).rank), (0, 1));
    assert_eq!((standing(&w, 0).rank, standing(&w, 1).rank), (0, 1));
}

/// A spawn of several commands whose children share a node: the daemon learns all of
/// them in one message (`SPAWN-18`), so the first command's children already count the
/// second's among their node-mates (`DYNRES_LOCAL_SIZE`, a PMIx local map). When the
/// master sent one message per command, the first child saw a node of one.
#[test]
fn children_of_every_command_count_as_node_mates() {
    let mut w = World::new(config(2, 2, 2));
    spawn(&mut w, vec![command("a", 1), command("b", 1)]);
    assert_eq!(place(&w, 2), (1, 2, 0, 2));
    assert_eq!(place(&w, 3), (1, 2, 1, 2));
}
