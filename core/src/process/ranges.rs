//! A set of process ids held as ranges of consecutive ranks per namespace.
//!
//! Each daemon's replica holds the job data: every process of the job (RC-14). As a set
//! of ids that is O(world) memory on every node, O(D × world) in all, although ranks
//! are handed out by a counter (`PSET-20`) and the set is a few ranges; held as ranges
//! it costs memory by its gaps (`RC-23`).
//!
//! The ranges are canonical (disjoint, and two ranges never touch), so equality and
//! hash are those of the set, and iteration is in the order of a `BTreeSet<ProcessId>`.

use alloc::collections::BTreeMap;

use super::{Namespace, ProcRuns, ProcessId, Rank, Run};

/// A set of process ids as ranges of ranks (module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcSet {
    // Per namespace: each range's first rank → its last rank (inclusive, so the range
    // that holds `Rank::MAX` needs no rank past it). Disjoint and never adjacent.
    ranges: BTreeMap<Namespace, BTreeMap<Rank, Rank>>,
    len: usize,
}

impl ProcSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many processes the set holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set holds no process.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The range holding `p`, as (first, last), if any.
    fn range_of(&self, p: &ProcessId) -> Option<(Rank, Rank)> {
        let (&first, &last) = self
            .ranges
            .get(&p.namespace)?
            .range(..=p.rank)
            .next_back()?;
        (p.rank <= last).then_some((first, last))
    }

    /// Whether the set holds `p`. O(log ranges).
    pub fn contains(&self, p: &ProcessId) -> bool {
        self.range_of(p).is_some()
    }

    /// Adds `p`; `false` if it was there already.
    pub fn insert(&mut self, p: ProcessId) -> bool {
        if self.contains(&p) {
            return false;
        }
        let r = p.rank;
        let ranges = self.ranges.entry(p.namespace).or_default();
        // The range ending just below `r`, and the one starting just above it.
        let below = r
            .checked_sub(1)
            .and_then(|b| ranges.range(..=b).next_back().map(|(&f, &l)| (f, l)))
            .filter(|&(_, l)| Some(l) == r.checked_sub(1));
        let above = r
            .checked_add(1)
            .and_then(|a| ranges.get(&a).map(|&l| (a, l)));
        let first = below.map_or(r, |(f, _)| f);
        let last = match above {
            Some((a, l)) => {
                ranges.remove(&a);
                l
            }
            None => r,
        };
        ranges.insert(first, last);
        self.len += 1;
        true
    }

    /// Adds every process of `run`; how many were not there yet. O(log ranges) plus the
    /// ranges it joins.
    pub fn insert_run(&mut self, run: &Run) -> usize {
        let Some(mut last) = run.first.checked_add(run.count.saturating_sub(1)) else {
            return 0;
        };
        if run.count == 0 {
            return 0;
        }
        let mut first = run.first;
        let ranges = self.ranges.entry(run.namespace.clone()).or_default();
        // Every range that overlaps or touches [first, last] joins it.
        let reach = last.saturating_add(1);
        let mut held = 0usize;
        let joined: alloc::vec::Vec<(Rank, Rank)> = ranges
            .range(..=reach)
            .rev()
            .take_while(|(_, l)| l.checked_add(1).is_none_or(|after| after >= first))
            .map(|(&f, &l)| (f, l))
            .collect();
        for (f, l) in joined {
            ranges.remove(&f);
            let (lo, hi) = (f.max(first), l.min(last));
            if lo <= hi {
                held += (hi - lo) as usize + 1;
            }
            first = first.min(f);
            last = last.max(l);
        }
        ranges.insert(first, last);
        let added = run.count as usize - held;
        self.len += added;
        added
    }

    /// How many processes of the set come before `p` in ascending order, if the set
    /// holds `p`: its index. O(ranges of `p`'s namespace and the namespaces before it).
    pub fn index_of(&self, p: &ProcessId) -> Option<usize> {
        self.range_of(p)?;
        let mut before = 0usize;
        for (ns, ranges) in &self.ranges {
            for (&f, &l) in ranges {
                if *ns == p.namespace && f <= p.rank && p.rank <= l {
                    return Some(before + (p.rank - f) as usize);
                }
                before += (l - f) as usize + 1;
            }
        }
        None
    }

    /// Removes `p`; `false` if it was not there.
    pub fn remove(&mut self, p: &ProcessId) -> bool {
        let Some((first, last)) = self.range_of(p) else {
            return false;
        };
        let ranges = self
            .ranges
            .get_mut(&p.namespace)
            .expect("range_of found it");
        ranges.remove(&first);
        if first < p.rank {
            ranges.insert(first, p.rank - 1);
        }
        if p.rank < last {
            ranges.insert(p.rank + 1, last);
        }
        if ranges.is_empty() {
            self.ranges.remove(&p.namespace);
        }
        self.len -= 1;
        true
    }

    /// The processes in ascending order (namespace, then rank).
    pub fn iter(&self) -> impl Iterator<Item = ProcessId> + '_ {
        self.ranges.iter().flat_map(|(ns, ranges)| {
            ranges
                .iter()
                .flat_map(move |(&f, &l)| (f..=l).map(move |r| ProcessId::new(ns.clone(), r)))
        })
    }

    /// How many ranges the set is held as.
    pub fn ranges(&self) -> usize {
        self.ranges.values().map(BTreeMap::len).sum()
    }
}

impl From<&ProcRuns> for ProcSet {
    /// The set of a list's processes, run by run.
    fn from(list: &ProcRuns) -> Self {
        let mut set = ProcSet::new();
        for r in list.runs() {
            set.insert_run(r);
        }
        set
    }
}

impl Extend<ProcessId> for ProcSet {
    fn extend<I: IntoIterator<Item = ProcessId>>(&mut self, iter: I) {
        for p in iter {
            self.insert(p);
        }
    }
}

impl FromIterator<ProcessId> for ProcSet {
    fn from_iter<I: IntoIterator<Item = ProcessId>>(iter: I) -> Self {
        let mut s = ProcSet::new();
        s.extend(iter);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn p(ns: &str, rank: Rank) -> ProcessId {
        ProcessId::new(Namespace::new(ns), rank)
    }

    #[test]
    fn ranges_merge_and_split() {
        let mut s: ProcSet = [0, 1, 2, 4].map(|r| p("j", r)).into_iter().collect();
        assert_eq!(s.ranges(), 2);
        assert!(s.insert(p("j", 3)));
        assert_eq!(s.ranges(), 1, "3 joins both neighbours");
        assert!(!s.insert(p("j", 3)));
        assert!(s.remove(&p("j", 2)));
        assert_eq!(s.ranges(), 2);
        assert!(!s.contains(&p("j", 2)));
        assert!(!s.remove(&p("j", 2)));
        let v: Vec<_> = s.iter().collect();
        assert_eq!(v, [0, 1, 3, 4].map(|r| p("j", r)));
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn the_ends_of_the_ranks() {
        let mut s = ProcSet::new();
        assert!(s.insert(p("j", Rank::MAX)));
        assert!(s.insert(p("j", 0)));
        assert!(s.insert(p("j", Rank::MAX - 1)));
        assert_eq!(s.ranges(), 2);
        assert!(s.remove(&p("j", Rank::MAX)));
        assert!(s.contains(&p("j", Rank::MAX - 1)));
        assert!(!s.contains(&p("k", 0)));
    }
}
