//! A list of process ids held as runs of consecutive ranks of one namespace.
//!
//! Ranks are handed out by a counter (`PSET-20`), so a job's psets are a few rank
//! ranges: `mpi://WORLD` after any number of ADDs is one run, and each SUB splits it
//! at most once per victim range. The master replicates every pset update to every
//! daemon (`RC-14`); as a list that cost O(world) bytes per daemon, O(D × world) per
//! ADD, and as runs it costs O(runs) (`RC-23`). The daemons keep their replica in
//! this form too, so a replica's pset costs memory by its runs, not its members.
//!
//! The runs keep the list's order and are canonical (a run never continues the one
//! before it), so two lists are equal exactly when their runs are: equality and hash
//! are those of the list.

use alloc::vec::Vec;

use super::{Namespace, ProcessId, Rank};

/// Ranks `first .. first + count` of `namespace`, in that order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Run {
    /// The namespace of every process of the run.
    pub namespace: Namespace,
    /// The first rank.
    pub first: Rank,
    /// How many consecutive ranks; at least one.
    pub count: u32,
}

impl Run {
    /// The rank after the run's last, if a rank can follow it.
    fn next(&self) -> Option<Rank> {
        self.first.checked_add(self.count)
    }

    /// Whether `p` continues the run.
    fn continued_by(&self, p: &ProcessId) -> bool {
        self.namespace == p.namespace && self.next() == Some(p.rank)
    }

    /// `p`'s offset in the run, if the run holds it.
    fn offset_of(&self, p: &ProcessId) -> Option<u32> {
        let off = p.rank.checked_sub(self.first)?;
        (self.namespace == p.namespace && off < self.count).then_some(off)
    }
}

/// Why runs read from outside are not a canonical list.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunsError {
    /// A run of no processes.
    #[error("a run of no processes")]
    Empty,
    /// A run whose ranks pass the largest rank.
    #[error("a run past the largest rank")]
    PastLastRank,
    /// A run continuing the one before it: the same list has a shorter form.
    #[error("a run continues the run before it")]
    NotCanonical,
}

/// A list of process ids as canonical runs (module documentation). Ordered by its runs,
/// an order consistent with equality, not the list's lexicographic one.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcRuns {
    runs: Vec<Run>,
    // The sum of the runs' counts, kept so `len` is O(1); a function of `runs`.
    len: usize,
}

impl ProcRuns {
    /// The empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// The list these runs spell, if they are canonical: each run non-empty, within the
    /// ranks, and not continuing the one before it.
    pub fn from_runs(runs: Vec<Run>) -> Result<Self, RunsError> {
        let mut len = 0usize;
        for (i, r) in runs.iter().enumerate() {
            if r.count == 0 {
                return Err(RunsError::Empty);
            }
            if r.first.checked_add(r.count - 1).is_none() {
                return Err(RunsError::PastLastRank);
            }
            if i > 0 && runs[i - 1].next() == Some(r.first) && runs[i - 1].namespace == r.namespace
            {
                return Err(RunsError::NotCanonical);
            }
            len = len.saturating_add(r.count as usize);
        }
        Ok(ProcRuns { runs, len })
    }

    /// The set of `procs` as a list in ascending order, each once: the fewest runs for
    /// the set, whatever order the processes come in (a SUB's victims come highest
    /// rank first).
    pub fn ascending<'a>(procs: impl IntoIterator<Item = &'a ProcessId>) -> Self {
        let mut v: Vec<&ProcessId> = procs.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        v.into_iter().collect()
    }

    /// Appends one process at the end of the list.
    pub fn push(&mut self, p: ProcessId) {
        self.len += 1;
        if let Some(last) = self.runs.last_mut() {
            if last.continued_by(&p) {
                last.count += 1;
                return;
            }
        }
        self.runs.push(Run {
            namespace: p.namespace,
            first: p.rank,
            count: 1,
        });
    }

    /// How many processes the list holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list holds no process.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The runs, in the list's order.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// The processes in the list's order.
    pub fn iter(&self) -> impl Iterator<Item = ProcessId> + '_ {
        self.runs.iter().flat_map(|r| {
            (0..r.count).map(move |k| ProcessId::new(r.namespace.clone(), r.first + k))
        })
    }

    /// Whether the list holds `p`. O(runs).
    pub fn contains(&self, p: &ProcessId) -> bool {
        self.position(p).is_some()
    }

    /// `p`'s first index in the list. O(runs).
    pub fn position(&self, p: &ProcessId) -> Option<usize> {
        let mut before = 0usize;
        for r in &self.runs {
            if let Some(off) = r.offset_of(p) {
                return Some(before + off as usize);
            }
            before += r.count as usize;
        }
        None
    }

    /// The processes as a list.
    pub fn to_vec(&self) -> Vec<ProcessId> {
        let mut v = Vec::with_capacity(self.len);
        v.extend(self.iter());
        v
    }
}

impl FromIterator<ProcessId> for ProcRuns {
    fn from_iter<I: IntoIterator<Item = ProcessId>>(iter: I) -> Self {
        let mut runs = ProcRuns::new();
        runs.extend(iter);
        runs
    }
}

impl Extend<ProcessId> for ProcRuns {
    fn extend<I: IntoIterator<Item = ProcessId>>(&mut self, iter: I) {
        for p in iter {
            self.push(p);
        }
    }
}

impl<'a> FromIterator<&'a ProcessId> for ProcRuns {
    fn from_iter<I: IntoIterator<Item = &'a ProcessId>>(iter: I) -> Self {
        iter.into_iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn p(ns: &str, rank: Rank) -> ProcessId {
        ProcessId::new(Namespace::new(ns), rank)
    }

    #[test]
    fn consecutive_ranks_of_one_namespace_are_one_run() {
        let l: ProcRuns = (0..1000).map(|r| p("j", r)).collect();
        assert_eq!(l.runs().len(), 1);
        assert_eq!(l.len(), 1000);
        assert_eq!(l.position(&p("j", 999)), Some(999));
        assert!(!l.contains(&p("j", 1000)));
        assert!(!l.contains(&p("k", 5)));
    }

    #[test]
    fn order_gaps_and_namespaces_start_runs() {
        let v = vec![
            p("j", 3),
            p("j", 4),
            p("j", 9),
            p("k", 10),
            p("j", 8),
            p("j", 9),
        ];
        let l: ProcRuns = v.iter().collect();
        assert_eq!(l.runs().len(), 4);
        assert_eq!(l.to_vec(), v);
        assert_eq!(l.position(&p("j", 8)), Some(4));
        assert_eq!(l.position(&p("j", 9)), Some(2), "the first index");
    }

    #[test]
    fn ascending_is_the_set_in_fewest_runs() {
        let victims: Vec<ProcessId> = (0..64).rev().map(|r| p("j", r)).collect();
        assert_eq!(victims.iter().collect::<ProcRuns>().runs().len(), 64);
        let set = ProcRuns::ascending(victims.iter().chain(&victims[..3]));
        assert_eq!(set.runs().len(), 1);
        assert_eq!(set.len(), 64, "each once");
        assert_eq!(set.position(&p("j", 0)), Some(0));
    }

    #[test]
    fn the_last_rank_ends_a_run() {
        let l: ProcRuns = [p("j", Rank::MAX), p("j", 0)].into_iter().collect();
        assert_eq!(l.runs().len(), 2);
        assert_eq!(l.to_vec(), vec![p("j", Rank::MAX), p("j", 0)]);
    }

    #[test]
    fn from_runs_refuses_what_push_would_not_build() {
        let run = |first, count| Run {
            namespace: Namespace::new("j"),
            first,
            count,
        };
        assert_eq!(ProcRuns::from_runs(vec![run(0, 0)]), Err(RunsError::Empty));
        assert_eq!(
            ProcRuns::from_runs(vec![run(Rank::MAX, 2)]),
            Err(RunsError::PastLastRank)
        );
        assert_eq!(
            ProcRuns::from_runs(vec![run(0, 2), run(2, 1)]),
            Err(RunsError::NotCanonical)
        );
        let ok = ProcRuns::from_runs(vec![run(0, 2), run(3, 1)]).unwrap();
        assert_eq!(ok, [p("j", 0), p("j", 1), p("j", 3)].iter().collect());
        assert_eq!(ok.len(), 3);
    }
}
