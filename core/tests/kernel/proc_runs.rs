//! `ProcRuns` (`RC-23`) is the list it spells: every law of the list holds for the
//! runs, and two run lists are equal exactly when their lists are. `ProcSet` is the set
//! it holds: it answers as a `BTreeSet` given the same inserts and removes.

use std::collections::BTreeSet;

use dynres_core::process::Run;
use dynres_core::{Namespace, ProcRuns, ProcSet, ProcessId};
use proptest::collection::vec;
use proptest::prelude::*;

/// Lists where runs happen: two namespaces, ranks close together and at the top.
fn list() -> impl Strategy<Value = Vec<ProcessId>> {
    let rank = prop_oneof![0u32..10, (u32::MAX - 3)..=u32::MAX];
    let p = (prop_oneof![Just("j"), Just("k")], rank)
        .prop_map(|(ns, r)| ProcessId::new(Namespace::new(ns), r));
    vec(p, 0..24)
}

proptest! {
    #[test]
    fn runs_spell_their_list(v in list()) {
        let r: ProcRuns = v.iter().collect();
        prop_assert_eq!(r.to_vec(), v.clone());
        prop_assert_eq!(r.len(), v.len());
        prop_assert_eq!(r.is_empty(), v.is_empty());
        for p in &v {
            prop_assert_eq!(r.position(p), v.iter().position(|q| q == p));
        }
        let outside = ProcessId::new(Namespace::new("x"), 0);
        prop_assert!(!r.contains(&outside));
        // Canonical: the runs re-read are the same list, and no run continues the last.
        prop_assert_eq!(ProcRuns::from_runs(r.runs().to_vec()), Ok(r.clone()));
        for w in r.runs().windows(2) {
            let next = w[0].first.checked_add(w[0].count);
            prop_assert!(!(w[0].namespace == w[1].namespace && next == Some(w[1].first)));
        }
    }

    #[test]
    fn equal_runs_are_equal_lists(a in list(), b in list()) {
        let (ra, rb): (ProcRuns, ProcRuns) = (a.iter().collect(), b.iter().collect());
        prop_assert_eq!(ra == rb, a == b);
    }

    #[test]
    fn from_runs_accepts_only_canonical_runs(
        runs in vec((prop_oneof![Just("j"), Just("k")], 0u32..6, 0u32..3), 0..6)
    ) {
        let runs: Vec<Run> = runs
            .into_iter()
            .map(|(ns, first, count)| Run { namespace: Namespace::new(ns), first, count })
            .collect();
        match ProcRuns::from_runs(runs.clone()) {
            // Accepted runs are exactly what pushing their processes builds.
            Ok(r) => {
                let rebuilt: ProcRuns = r.iter().collect();
                prop_assert_eq!(rebuilt.runs(), &runs[..]);
            }
            Err(_) => {
                let spelled: Vec<ProcessId> = runs
                    .iter()
                    .flat_map(|r| (r.first..r.first + r.count).map(|k| ProcessId::new(r.namespace.clone(), k)))
                    .collect();
                let canonical: ProcRuns = spelled.iter().collect();
                prop_assert_ne!(canonical.runs(), &runs[..]);
            }
        }
    }

    #[test]
    fn proc_set_is_the_set_it_holds(ops in vec((any::<bool>(), list()), 0..6)) {
        let (mut set, mut model) = (ProcSet::new(), BTreeSet::new());
        for (insert, procs) in ops {
            for p in procs {
                if insert {
                    prop_assert_eq!(set.insert(p.clone()), model.insert(p));
                } else {
                    prop_assert_eq!(set.remove(&p), model.remove(&p));
                }
            }
            prop_assert!(set.iter().eq(model.iter().cloned()));
            prop_assert_eq!(set.len(), model.len());
            // Canonical: the same set built in ascending order is equal, and has as
            // few ranges as the ascending walk finds.
            let rebuilt: ProcSet = model.iter().cloned().collect();
            prop_assert_eq!(&rebuilt, &set);
            let breaks = model
                .iter()
                .zip(model.iter().skip(1))
                .filter(|(a, b)| a.namespace != b.namespace || a.rank.checked_add(1) != Some(b.rank))
                .count();
            prop_assert_eq!(set.ranges(), if model.is_empty() { 0 } else { breaks + 1 });
            for (i, p) in model.iter().enumerate() {
                prop_assert_eq!(set.index_of(p), Some(i));
            }
        }
    }

    #[test]
    fn a_list_as_a_set_run_by_run(base in list(), more in list()) {
        // Runs inserted into a set that already holds some of them (overlapping,
        // touching and disjoint ranges).
        let mut set: ProcSet = base.iter().cloned().collect();
        let mut model: BTreeSet<ProcessId> = base.iter().cloned().collect();
        let runs: ProcRuns = more.iter().collect();
        for r in runs.runs() {
            let fresh = (r.first..=r.first + (r.count - 1))
                .map(|k| ProcessId::new(r.namespace.clone(), k))
                .filter(|p| model.insert(p.clone()))
                .count();
            prop_assert_eq!(set.insert_run(r), fresh);
        }
        prop_assert!(set.iter().eq(model.iter().cloned()));
        prop_assert_eq!(set.len(), model.len());
        prop_assert_eq!(&set, &model.iter().cloned().collect::<ProcSet>());
        let direct = ProcSet::from(&runs);
        prop_assert!(direct.iter().eq(more.iter().cloned().collect::<BTreeSet<_>>().into_iter()));
        for p in model.iter().chain(&more) {
            prop_assert_eq!(set.contains(p), model.contains(p));
        }
    }
}
