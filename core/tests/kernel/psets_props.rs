//! Property tests of the pset kernel: the bit-set against a naive `BTreeSet` oracle,
//! algebraic laws, the version/epoch/domain rules over random request sequences, and
//! the name grammar.

use std::collections::{BTreeMap, BTreeSet};

use dynres_core::pset::{
    AttrUpdate, MemberSet, NameError, Origin, PsetName, PsetOp, PsetRegistry, SetOp, SplitBy,
};
use dynres_core::{Namespace, ProcessId};
use proptest::prelude::*;

fn oracle(s: &MemberSet) -> BTreeSet<u32> {
    s.iter().collect()
}

fn set_strategy() -> impl Strategy<Value = BTreeSet<u32>> {
    // Spread over a few words, with dense and sparse cases.
    prop_oneof![
        prop::collection::btree_set(0u32..200, 0..60),
        prop::collection::btree_set(0u32..5000, 0..20),
    ]
}

proptest! {
    #[test]
    fn member_set_matches_btreeset(a in set_strategy(), b in set_strategy()) {
        let (sa, sb): (MemberSet, MemberSet) = (a.iter().copied().collect(), b.iter().copied().collect());
        prop_assert_eq!(oracle(&sa.union(&sb)), a.union(&b).copied().collect::<BTreeSet<_>>());
        prop_assert_eq!(oracle(&sa.difference(&sb)), a.difference(&b).copied().collect::<BTreeSet<_>>());
        prop_assert_eq!(oracle(&sa.intersection(&sb)), a.intersection(&b).copied().collect::<BTreeSet<_>>());
        prop_assert_eq!(sa.len(), a.len());
        prop_assert_eq!(sa.is_subset(&sb), a.is_subset(&b));
        prop_assert_eq!(sa.is_strict_subset(&sb), a.is_subset(&b) && a.len() < b.len());
        prop_assert_eq!(sa.intersects(&sb), !a.is_disjoint(&b));
        for x in b.iter().take(5) {
            prop_assert_eq!(sa.contains(*x), a.contains(x));
        }
        // Equality of bit-sets is equality of sets, whatever the history.
        let mut grown = sa.union(&sb);
        for x in b.difference(&a) {
            grown.remove(*x);
        }
        prop_assert_eq!(grown, sa);
    }

    #[test]
    fn set_algebra_laws(a in set_strategy(), b in set_strategy(), c in set_strategy()) {
        let [a, b, c]: [MemberSet; 3] = [a, b, c].map(|s| s.into_iter().collect());
        prop_assert_eq!(a.union(&b), b.union(&a));
        prop_assert_eq!(a.intersection(&b), b.intersection(&a));
        prop_assert_eq!(a.union(&b).union(&c), a.union(&b.union(&c)));
        prop_assert_eq!(a.intersection(&b).intersection(&c), a.intersection(&b.intersection(&c)));
        prop_assert_eq!(a.union(&a), a.clone());
        prop_assert!(a.difference(&b).intersection(&b).is_empty());
        prop_assert_eq!(a.intersection(&b).union(&a.difference(&b)), a.clone());
        prop_assert_eq!(a.intersection(&b.union(&c)), a.intersection(&b).union(&a.intersection(&c)));
        prop_assert!(a.intersection(&b).is_subset(&a) && a.is_subset(&a.union(&b)));
    }

    #[test]
    fn split_sizes_matches_slicing(a in prop::collection::btree_set(0u32..3000, 1..300), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6)) {
        let set: MemberSet = a.iter().copied().collect();
        let all: Vec<u32> = a.into_iter().collect();
        let mut bounds: Vec<usize> = cuts.iter().map(|i| i.index(all.len())).filter(|&c| c > 0).collect();
        bounds.push(all.len());
        bounds.sort();
        bounds.dedup();
        let sizes: Vec<usize> = bounds.iter().scan(0, |prev, &b| { let s = b - *prev; *prev = b; Some(s) }).collect();
        let parts = set.split_sizes(&sizes).unwrap();
        let mut start = 0;
        for (part, size) in parts.iter().zip(&sizes) {
            prop_assert_eq!(part.iter().collect::<Vec<_>>(), all[start..start + size].to_vec());
            start += size;
        }
    }
}

// ----- the registry over random request sequences -----

const APP: &str = "app1";

fn pid(rank: u32) -> ProcessId {
    ProcessId::new(Namespace::new("job"), rank)
}

#[derive(Clone, Debug)]
enum Target {
    Fresh(u8),
    Pset1,
    Existing(u8),
    Outside,
    None,
}

#[derive(Clone, Debug)]
enum Step {
    Set {
        op: u8,
        a: u8,
        b: u8,
        target: Target,
    },
    Delta(BTreeSet<u32>),
    Null {
        t: u8,
        active: bool,
    },
    Prune(u8),
    Split {
        p: u8,
        first: u8,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let target = prop_oneof![
        (0u8..4).prop_map(Target::Fresh),
        Just(Target::Pset1),
        any::<u8>().prop_map(Target::Existing),
        Just(Target::Outside),
        Just(Target::None),
    ];
    prop_oneof![
        4 => (0u8..3, any::<u8>(), any::<u8>(), target).prop_map(|(op, a, b, target)| Step::Set { op, a, b, target }),
        2 => prop::collection::btree_set(0u32..12, 1..4).prop_map(Step::Delta),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(t, active)| Step::Null { t, active }),
        1 => any::<u8>().prop_map(Step::Prune),
        1 => (any::<u8>(), 1u8..4).prop_map(|(p, first)| Step::Split { p, first }),
    ]
}

/// Operand candidates: the live psets, plus SELF.
fn pick(reg: &PsetRegistry, k: u8) -> PsetName {
    let mut live: Vec<PsetName> = reg.live_psets().map(|(n, _)| n.clone()).collect();
    live.push(PsetName::self_set());
    live[k as usize % live.len()].clone()
}

type Snapshot = BTreeMap<PsetName, (BTreeSet<u32>, u64, u64, bool)>;

fn snapshot(reg: &PsetRegistry) -> Snapshot {
    reg.live_psets()
        .map(|(n, p)| {
            let ranks = reg
                .members(&Origin::Runtime, n)
                .unwrap()
                .iter()
                .map(|p| p.rank)
                .collect();
            (
                n.clone(),
                (ranks, p.attrs.version, p.attrs.epoch, p.attrs.active),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// PSET-10, -12, -13, -30, -34, -40 over random sequences of requests.
    #[test]
    fn registry_rules_hold_over_random_sequences(steps in prop::collection::vec(step(), 1..25)) {
        let me = Origin::process(APP, pid(0));
        let mut reg = PsetRegistry::new();
        let ranks: Vec<ProcessId> = (0..8).map(pid).collect();
        reg.start_job(&[(APP, &ranks)]).unwrap();
        let mut last_delta_epoch = 0;
        for step in steps {
            let before = reg.clone();
            let snap = snapshot(&reg);
            let mut expect_new: Option<(BTreeSet<u32>, u64)> = None;
            let mut delta_operand = None;
            let mut versioned = None;
            let result = match &step {
                Step::Set { op, a, b, target } => {
                    let (p1, p2) = (pick(&reg, *a), pick(&reg, *b));
                    let set_op = [SetOp::Union, SetOp::Difference, SetOp::Intersection][*op as usize];
                    let target = match target {
                        Target::Fresh(k) => Some(PsetName::parse(&format!("mpi://app/{APP}/p{k}")).unwrap()),
                        Target::Pset1 => Some(p1.clone()),
                        Target::Existing(k) => Some(pick(&reg, *k)),
                        Target::Outside => Some(PsetName::parse(&format!("mpi://rte/{APP}/x")).unwrap()),
                        Target::None => None,
                    };
                    let members_of = |n: &PsetName| -> BTreeSet<u32> {
                        reg.members(&me, n).unwrap_or_default().iter().map(|p| p.rank).collect()
                    };
                    let (a_set, b_set) = (members_of(&p1), members_of(&p2));
                    let c: BTreeSet<u32> = match set_op {
                        SetOp::Union => a_set.union(&b_set).copied().collect(),
                        SetOp::Difference => a_set.difference(&b_set).copied().collect(),
                        SetOp::Intersection => a_set.intersection(&b_set).copied().collect(),
                    };
                    let epoch_of = |n: &PsetName| reg.get(n).map(|p| p.attrs.epoch).unwrap_or(0);
                    expect_new = Some((c, epoch_of(&p1).max(epoch_of(&p2))));
                    if p2.is_delta() { delta_operand = Some((p1.clone(), p2.clone())); }
                    if target.as_ref() == Some(&p1) && p1.in_app_domain(APP) { versioned = Some(p1.clone()); }
                    let op = PsetOp::Set { op: set_op, pset1: p1, pset2: p2, target, attrs: AttrUpdate::none() };
                    reg.apply(&me, &op)
                }
                Step::Delta(ranks) => {
                    let procs: Vec<ProcessId> = ranks.iter().map(|&r| pid(r)).collect();
                    reg.define_delta(APP, &procs).map(|n| dynres_core::pset::OpOutcome { results: vec![n], ..Default::default() })
                }
                Step::Null { t, active } => {
                    let op = PsetOp::Null { target: pick(&reg, *t), attrs: AttrUpdate::active(*active) };
                    reg.apply(&me, &op)
                }
                Step::Prune(k) => reg.prune(&me, &pick(&reg, *k)).map(|_| Default::default()),
                Step::Split { p, first } => {
                    let pset = pick(&reg, *p);
                    let size = reg.info(&me, &pset).map(|i| i.size).unwrap_or(0);
                    let first = (*first as usize).min(size.saturating_sub(1)).max(1);
                    let op = PsetOp::Split { pset, by: SplitBy::Sizes(vec![first, size.saturating_sub(first)]), targets: vec![], attrs: AttrUpdate::none() };
                    reg.apply(&me, &op)
                }
            };
            let Ok(out) = result else {
                // PSET-40: a refused request changes nothing.
                prop_assert_eq!(&reg, &before);
                continue;
            };
            let after = snapshot(&reg);
            // Def. 4 computed naively from the snapshot (S = {caller} for mpi://SELF).
            let x_a: BTreeSet<PsetName> = match &delta_operand {
                Some((s, u)) => {
                    let s_set = snap.get(s).map(|e| e.0.clone()).unwrap_or_else(|| BTreeSet::from([0]));
                    let u_set = &snap[u].0;
                    snap.iter()
                        .filter(|(t, (m, _, _, active))| {
                            t.in_app_domain(APP)
                                && !active
                                && (!m.is_disjoint(u_set) || (s_set.is_subset(m) && s_set.len() < m.len()))
                        })
                        .map(|(t, _)| t.clone())
                        .collect()
                }
                None => BTreeSet::new(),
            };
            for (name, (members, version, epoch, active)) in &after {
                // PSET-30: nothing live is empty.
                prop_assert!(!members.is_empty(), "{} is empty", name);
                match snap.get(name) {
                    Some((old, v0, e0, was_active)) => {
                        // PSET-10: +1 exactly when members change.
                        if members != old {
                            prop_assert_eq!(*version, v0 + 1, "{}", name);
                            prop_assert!(*epoch >= *e0);
                            // PSET-13: an active pset changes only as the versioned pset1.
                            if *was_active {
                                prop_assert_eq!(Some(name), versioned.as_ref());
                            }
                            // PSET-34: other changes are the recursive application.
                            if Some(name) != versioned.as_ref() {
                                prop_assert!(x_a.contains(name), "{} changed outside X_a", name);
                            }
                        } else {
                            prop_assert_eq!(*version, *v0, "{}", name);
                        }
                        // PSET-6: applications never change the runtime's psets.
                        if !name.in_app_domain(APP) && !matches!(step, Step::Delta(_)) {
                            prop_assert_eq!(&snap[name], &after[name]);
                        }
                        let _ = active;
                    }
                    None => {
                        prop_assert_eq!(*version, 0, "new pset {} starts at version 0", name);
                        if let (Step::Set { .. }, Some((c, e))) = (&step, &expect_new) {
                            // Def. 5 against the oracle, epoch per Def. 1 (PSET-12).
                            prop_assert_eq!(members, c);
                            prop_assert_eq!(*epoch, *e);
                            prop_assert!(name.in_app_domain(APP), "PSET-31: {}", name);
                        }
                        if let Step::Delta(_) = step {
                            // PSET-11: delta epochs strictly increase.
                            prop_assert!(*epoch > last_delta_epoch);
                            last_delta_epoch = *epoch;
                        }
                    }
                }
            }
            for r in &out.results {
                prop_assert!(reg.get(r).is_ok(), "result {} is live", r);
            }
        }
    }

    /// Valid names round-trip to their canonical form; keywords are case-insensitive.
    #[test]
    fn names_round_trip(
        domain in 0u8..4,
        upper in any::<[bool; 3]>(),
        app in "[A-Za-z0-9_][A-Za-z0-9._-]{0,10}",
        segs in prop::collection::vec("[A-Za-z0-9_-][A-Za-z0-9._-]{0,8}", 0..4),
    ) {
        prop_assume!(app != "." && app != "..");
        let case = |s: &str, up: bool| if up { s.to_uppercase() } else { s.to_lowercase() };
        let (input, canonical) = match domain {
            0 => (format!("{}WORLD", case("mpi://", upper[0])), "mpi://WORLD".to_string()),
            1 => (format!("mpi://{}", case("self", upper[1])), "mpi://SELF".to_string()),
            d => {
                let dom = if d == 2 { "app" } else { "rte" };
                let path: String = segs.iter().map(|s| format!("/{s}")).collect();
                (format!("{}{}/{app}{path}", case("mpi://", upper[0]), case(dom, upper[2])), format!("mpi://{dom}/{app}{path}"))
            }
        };
        let parsed = PsetName::parse(&input).unwrap();
        prop_assert_eq!(parsed.as_str(), canonical.as_str());
        prop_assert_eq!(PsetName::parse(parsed.as_str()).unwrap(), parsed.clone());
        if domain >= 2 {
            prop_assert_eq!(parsed.app(), Some(app.as_str()));
            prop_assert_eq!(parsed.path().count(), segs.len());
        }
    }

    /// A character outside the alphabet is reported with its exact offset.
    #[test]
    fn bad_characters_are_located(
        app in "[a-z]{1,8}",
        pos in any::<prop::sample::Index>(),
        bad in prop::sample::select(vec![' ', ':', '?', '#', '%', '*', '~', 'ß', '\u{0}', '\\']),
    ) {
        let mut chars: Vec<char> = app.chars().collect();
        let at = pos.index(chars.len());
        chars.insert(at, bad);
        let input = format!("mpi://app/{}", chars.into_iter().collect::<String>());
        let err = PsetName::parse(&input).unwrap_err();
        let byte_at = "mpi://app/".len() + app[..at].len();
        prop_assert_eq!(err, NameError::BadChar { ch: bad, at: byte_at });
    }
}
