//! How much the master holds: entry counts of its tables, cheap to take, so that a test
//! or a driver can see that a long-running job's state stays bounded (`RC-19`,
//! `PSET-24`).

use super::Master;

/// Entry counts of the master's tables. Each is bounded by what the job holds *now*
/// (live processes, live psets, changes not yet forgotten), never by its age.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Footprint {
    /// Entries of the registry's process table (live and retained processes).
    pub table: usize,
    /// Heap bytes of the member sets of every live pset: a set spans the words up to
    /// its highest process-table index, so this grows if indices do.
    pub member_bytes: usize,
    /// Names in the registry, live and pruned.
    pub psets: usize,
    /// Applications with a delta-epoch counter.
    pub delta_epochs: usize,
    /// Job data: processes of the job.
    pub procs: usize,
    /// Processes whose application the master knows.
    pub app_of: usize,
    /// Change records, done ones included.
    pub changes: usize,
    /// Keys on the data server.
    pub data: usize,
    /// Lookups, fences and modexes waiting.
    pub waiting: usize,
    /// Spawns with children left.
    pub spawns: usize,
}

impl Master {
    /// The entry counts of the master's tables (see [`Footprint`]).
    pub fn footprint(&self) -> Footprint {
        let registry = &*self.registry;
        Footprint {
            table: registry.table.len(),
            member_bytes: registry
                .live_psets()
                .map(|(_, p)| p.members.heap_bytes())
                .sum(),
            psets: registry.psets.len(),
            delta_epochs: registry.delta_epoch.len(),
            procs: self.procs.len(),
            app_of: self.app_of.len(),
            changes: self.changes.len(),
            data: self.data.len(),
            waiting: self.lookups.len() + self.fences.len() + self.modexes.len(),
            spawns: self.spawns.len(),
        }
    }
}
