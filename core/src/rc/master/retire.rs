//! Retired processes leave the process table (`PSET-24`), so the master's memory is
//! bounded by the processes the job holds, not by how many it ever had.
//!
//! Why: ranks are never reused (`PSET-20`) and the registry used to keep every process
//! it ever saw; a job that grows and shrinks by two processes per cycle gained two table
//! entries — and two bits in the member sets of the delta psets still kept — per cycle,
//! forever (issue 28: 6.5 → 8.7 MiB of RSS over 6,000 cycles).

use super::Master;

impl Master {
    /// Compacts the process table once at least as many of its entries are retired as
    /// are kept, so each compaction at least halves it and its cost (one pass over the
    /// table and the live member sets) is amortized over the processes it drops.
    ///
    /// A process is kept while a live pset holds it — in the registry or in the snapshot
    /// of a change not yet done, which an abort restores (`RC-12`) and a late accept
    /// consults — or while it is a process of the job or the master still knows its
    /// application. The snapshots are renumbered with the registry, so their member
    /// sets keep naming the same processes.
    pub(crate) fn retire_processes(&mut self) {
        let mut keep = self.registry.held();
        for c in self.changes.values() {
            if !c.snapshot.table().is_empty() {
                keep = keep.union(&c.snapshot.held());
            }
        }
        let table = self.registry.table();
        // Cheap test first: the job's processes are normally members of `WORLD` or of
        // their change's delta, hence already in `keep`.
        if table.len().saturating_sub(keep.len()) < keep.len().max(1) {
            return;
        }
        for p in self.procs.keys().chain(self.app_of.keys()) {
            if let Some(i) = table.index_of(p) {
                keep.insert(i);
            }
        }
        let retired = table.len().saturating_sub(keep.len());
        if retired < keep.len().max(1) {
            return;
        }
        tracing::debug!(retired, kept = keep.len(), "process table compacted");
        self.registry.compact(&keep);
        for c in self.changes.values_mut() {
            if !c.snapshot.table().is_empty() {
                c.snapshot.compact(&keep);
            }
        }
    }
}
