//! Where a process stands in its job when its node's daemon launches it: its node, the
//! size of its world, and its place among its world's processes on the node. Read from
//! the daemon's replica (job data, psets, the change table), which the master fills in
//! the order `RC-3` and `SPAWN-18` give, so every node derives them from the master's
//! placement instead of deciding anything itself. The launcher hands them to the
//! process as `DYNRES_NODE_ID`, `DYNRES_SIZE`, `DYNRES_LOCAL_RANK` and
//! `DYNRES_LOCAL_SIZE`.

use super::Daemon;
use crate::process::{ProcSet, ProcessId};
use crate::pset::PsetName;
use crate::rc::types::NodeId;

/// A launched process' place in its job at its launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Standing {
    /// Its node: the index of its host in the job's node list.
    pub node: NodeId,
    /// The size of its world: for a process of the job, `mpi://WORLD` as the change
    /// that launched it leaves it (the job's first processes: its starting size); for a
    /// spawn's child, the spawn's children (its own world, as `MPI_COMM_WORLD` is for
    /// processes `MPI_Comm_spawn` started). A malleable job's size changes later: the
    /// pset's current size is the client's to ask.
    pub size: u32,
    /// Its position, by rank, among the processes of its world (`MPI_COMM_WORLD`'s
    /// rank: a spawn's first child is 0).
    pub rank: u32,
    /// Its position, by rank, among the processes of its world on its node. Unique
    /// among them; a process leaving by the same change may still hold the same
    /// position until it exits.
    pub local_rank: u32,
    /// How many processes of its world are on its node, itself included.
    pub local_size: u32,
}

impl Daemon {
    /// `pid`'s standing, for a process this daemon launches now: call it when its
    /// `Launch` (`spawned` `None`) or `Spawn` (`spawned` naming the children's
    /// application) is output, before other input changes the replica. `None` if the
    /// replica does not hold `pid` in its world (not a process launched here).
    pub fn standing(&self, pid: &ProcessId, spawned: Option<&str>) -> Option<Standing> {
        // The world as rank ranges, built from the replica's runs: O(runs), not
        // O(world), per launched process (RC-23).
        let world = match spawned {
            Some(app) => {
                let root = PsetName::app_root(app).ok()?;
                ProcSet::from(&self.psets.get(&root)?.0)
            }
            None => {
                let mut world = ProcSet::from(&self.psets.get(&PsetName::world())?.0);
                // `mpi://WORLD` changes at the decision; a process is launched at the
                // announcement (RC-3), so its change is applied here as core will.
                if let Some(c) = self.changes.values().find(|c| c.added.contains(pid)) {
                    world.extend(c.added.iter().cloned());
                    for r in &c.removed {
                        world.remove(r);
                    }
                }
                world
            }
        };
        let rank = world.index_of(pid)?;
        let local: alloc::vec::Vec<&ProcessId> =
            self.local.iter().filter(|p| world.contains(p)).collect();
        let local_rank = local.iter().position(|p| *p == pid)?;
        Some(Standing {
            node: self.node,
            rank: u32::try_from(rank).unwrap_or(u32::MAX),
            size: u32::try_from(world.len()).unwrap_or(u32::MAX),
            local_rank: local_rank as u32,
            local_size: local.len() as u32,
        })
    }
}
