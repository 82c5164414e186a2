//! The per-job process table: each process gets a dense index once, and every pset
//! refers to processes by index (see `members`).
//!
//! Indices are handed out in the order processes are first seen and never reused, like
//! ranks (`PSET-20`), so a pset's bit for a departed process keeps meaning that process.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

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

    /// Number of processes ever entered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no process was ever entered.
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
}
