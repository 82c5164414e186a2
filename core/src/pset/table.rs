//! The per-job process table: each process gets a dense index, and every pset refers
//! to processes by index (see `members`).
//!
//! Indices are handed out in the order processes are first seen (`PSET-20`), so a pset's
//! bit for a departed process keeps meaning that process for as long as the table holds
//! it. Retired processes — in no live pset — leave the table when it is compacted
//! (`PSET-24`): the kept entries are renumbered densely in their order, and every member
//! set over the table is renumbered alike ([`crate::pset::MemberSet::compress`]).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::members::MemberSet;
use crate::process::{Namespace, ProcessId, Rank};

/// Dense numbering of the processes a job knows.
///
/// Namespaces are stored once; an entry is a (namespace slot, rank) pair, so a table of
/// 1 M processes costs a few tens of MB rather than one string per process.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcessTable {
    namespaces: Vec<Namespace>,
    entries: Vec<(u32, Rank)>,
    index: BTreeMap<(u32, Rank), u32>,
}

impl ProcessTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of processes in the table (entered and not compacted away, `PSET-24`).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds no process.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The index of `pid`, entering it if it is new.
    ///
    /// Returns `None` only if the table is full (2³² processes).
    pub fn intern(&mut self, pid: &ProcessId) -> Option<u32> {
        let ns = match self.namespaces.iter().position(|n| *n == pid.namespace) {
            Some(i) => i as u32,
            None => {
                self.namespaces.push(pid.namespace.clone());
                (self.namespaces.len() - 1) as u32
            }
        };
        if let Some(&i) = self.index.get(&(ns, pid.rank)) {
            return Some(i);
        }
        let i = u32::try_from(self.entries.len()).ok()?;
        self.entries.push((ns, pid.rank));
        self.index.insert((ns, pid.rank), i);
        Some(i)
    }

    /// The index of `pid` if it is known.
    pub fn index_of(&self, pid: &ProcessId) -> Option<u32> {
        let ns = self.namespaces.iter().position(|n| *n == pid.namespace)? as u32;
        self.index.get(&(ns, pid.rank)).copied()
    }

    /// The process at `index`.
    pub fn get(&self, index: u32) -> Option<ProcessId> {
        let &(ns, rank) = self.entries.get(index as usize)?;
        Some(ProcessId::new(self.namespaces[ns as usize].clone(), rank))
    }

    /// Keeps only the entries at the indices of `keep`, renumbered densely in their
    /// order, as [`crate::pset::MemberSet::compress`] renumbers a member set (`PSET-24`).
    /// Indices of `keep` past the end of the table are ignored, so a table that is a
    /// prefix of another (a snapshot's) stays a prefix of it when both are compacted
    /// with the same `keep`.
    pub(crate) fn compact(&mut self, keep: &MemberSet) {
        let mut table = ProcessTable::new();
        for i in keep.iter() {
            let Some(&(ns, rank)) = self.entries.get(i as usize) else {
                break;
            };
            let pid = ProcessId::new(self.namespaces[ns as usize].clone(), rank);
            // Cannot fail: the new table is no larger than this one.
            let _ = table.intern(&pid);
        }
        *self = table;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_dense() {
        let mut t = ProcessTable::new();
        let a = ProcessId::new(Namespace::new("job"), 7);
        let b = ProcessId::new(Namespace::new("other"), 7);
        assert_eq!(t.intern(&a), Some(0));
        assert_eq!(t.intern(&b), Some(1));
        assert_eq!(t.intern(&a), Some(0));
        assert_eq!(t.index_of(&b), Some(1));
        assert_eq!(t.get(1), Some(b));
        assert_eq!(t.index_of(&ProcessId::new(Namespace::new("job"), 8)), None);
        assert_eq!(t.len(), 2);
    }

    /// PSET-24: compaction keeps the chosen entries in their order, forgets the others
    /// (and namespaces only they used), and new entries come after the kept ones.
    #[test]
    fn compaction_keeps_the_chosen_entries_in_order() {
        let mut t = ProcessTable::new();
        let job = |r| ProcessId::new(Namespace::new("job"), r);
        let other = ProcessId::new(Namespace::new("other"), 0);
        for p in [job(0), other.clone(), job(2), job(3), job(4)] {
            t.intern(&p);
        }
        let mut snapshot = t.clone();
        snapshot.entries.truncate(3);
        let keep: MemberSet = [0, 2, 4].into_iter().collect();
        t.compact(&keep);
        assert_eq!(t.len(), 3);
        assert_eq!(
            (0..3).map(|i| t.get(i)).collect::<Vec<_>>(),
            [0, 2, 4].map(|r| Some(job(r)))
        );
        assert_eq!(t.index_of(&other), None);
        assert_eq!(t.index_of(&job(3)), None);
        assert_eq!(
            t.namespaces.len(),
            1,
            "a namespace no kept entry uses is dropped"
        );
        assert_eq!(t.intern(&job(5)), Some(3));
        // A prefix compacted with the same set stays a prefix.
        snapshot.compact(&keep);
        assert_eq!(snapshot.len(), 2);
        assert_eq!(snapshot.get(1), t.get(1));
    }
}
