//! The independent pset oracle (`verification/src/pset_oracle.rs`) against the shipped
//! `PsetRegistry`: random batches from processes of two applications, delta definitions
//! and prunes, over a small universe of names and processes, must get the same answers
//! (refusals compared without their free-text reasons) and leave the same stores — live
//! psets with members and attributes, retired names, the order processes were seen in.
//! `PSET-42`'s model trusts the oracle; this is what makes the oracle and the registry
//! agree on more than the model's few scripts.

use std::collections::{BTreeMap, BTreeSet};

use dynres_core::pset::{
    AttrUpdate, OpOutcome, Origin, PsetError, PsetName, PsetOp, PsetRegistry, SetOp, SplitBy,
};
use dynres_core::{Namespace, ProcessId};
use dynres_verification::pset_oracle::{Entry, OraclePset, PsetOracle, without_reasons};
use proptest::prelude::*;

/// The applications and their processes at job start; ranks 5 and 6 exist only once a
/// delta names them (an ADD's new processes).
const APPS: [(&str, &[u32]); 2] = [("a", &[0, 1, 2]), ("b", &[3, 4])];
const RANKS: u32 = 7;

fn pid(rank: u32) -> ProcessId {
    ProcessId::new(Namespace::new("job"), rank)
}

fn name(text: &str) -> PsetName {
    PsetName::parse(text).expect("valid name")
}

/// Names a request may use besides those the store holds: every domain, names of the
/// other application, deltas before and after they exist, generated names.
fn universe() -> Vec<PsetName> {
    let mut names = vec![name("mpi://WORLD"), name("mpi://SELF")];
    for (app, _) in APPS {
        for path in ["", "/p0", "/p1", "/op/1", "/op/2"] {
            names.push(name(&format!("mpi://app/{app}{path}")));
        }
        for path in ["rc/1", "rc/2", "x"] {
            names.push(name(&format!("mpi://rte/{app}/{path}")));
        }
    }
    names
}

/// A name in a request: mostly a live pset (or `mpi://SELF`), so that requests get
/// past their operands, or a live delta pset, so that they recurse (`PSET-34`);
/// otherwise any name of the pool.
#[derive(Clone, Copy, Debug)]
enum Pick {
    Live(u8),
    Delta(u8),
    Any(u8),
}

#[derive(Clone, Debug)]
enum Target {
    None,
    Pset1,
    Pick(Pick),
}

#[derive(Clone, Debug)]
struct Attrs {
    active: Option<bool>,
    hint: Option<(u8, u8)>,
}

#[derive(Clone, Debug)]
enum By {
    /// Cut points, turned into sizes that add up to the pset's size.
    Cuts(Vec<u8>),
    /// Sizes as they come (mostly refused).
    Sizes(Vec<usize>),
    /// `(rank, colour)` pairs.
    Colours(Vec<(u32, u32)>),
}

#[derive(Clone, Debug)]
enum Op {
    Set {
        op: u8,
        a: Pick,
        b: Pick,
        target: Target,
        attrs: Attrs,
    },
    Null {
        target: Pick,
        attrs: Attrs,
    },
    Split {
        pset: Pick,
        by: By,
        targets: Vec<Pick>,
        attrs: Attrs,
    },
}

#[derive(Clone, Debug)]
enum Step {
    Batch { app: usize, who: u8, ops: Vec<Op> },
    Delta { app: usize, ranks: BTreeSet<u32> },
    Prune { app: usize, name: Pick },
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        6 => any::<u8>().prop_map(Pick::Live),
        2 => any::<u8>().prop_map(Pick::Delta),
        2 => any::<u8>().prop_map(Pick::Any),
    ]
}

fn attrs() -> impl Strategy<Value = Attrs> {
    // Mostly a good hint key: a bad one fails the whole batch (PSET-14).
    let key = prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
    // Often inactive: X_a holds only inactive psets (PSET-23).
    let active = prop_oneof![2 => Just(None), 2 => Just(Some(false)), 1 => Just(Some(true))];
    (active, prop::option::weighted(0.2, (key, 0u8..2)))
        .prop_map(|(active, hint)| Attrs { active, hint })
}

fn op() -> impl Strategy<Value = Op> {
    let target = prop_oneof![
        1 => Just(Target::None),
        2 => Just(Target::Pset1),
        2 => pick().prop_map(Target::Pick),
    ];
    let by = prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..3).prop_map(By::Cuts),
        1 => prop::collection::vec(0usize..4, 0..3).prop_map(By::Sizes),
        2 => prop::collection::vec((0..RANKS, 0u32..3), 0..4).prop_map(By::Colours),
    ];
    prop_oneof![
        5 => (0u8..3, pick(), prop_oneof![pick(), any::<u8>().prop_map(Pick::Delta)], target, attrs())
            .prop_map(|(op, a, b, target, attrs)| Op::Set { op, a, b, target, attrs }),
        2 => (pick(), attrs()).prop_map(|(target, attrs)| Op::Null { target, attrs }),
        2 => (pick(), by, prop::collection::vec(pick(), 0..3), attrs())
            .prop_map(|(pset, by, targets, attrs)| Op::Split { pset, by, targets, attrs }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..APPS.len(), any::<u8>(), prop_oneof![1 => Just(vec![]), 9 => prop::collection::vec(op(), 1..4)])
            .prop_map(|(app, who, ops)| Step::Batch { app, who, ops }),
        2 => (0..APPS.len(), prop_oneof![1 => Just(BTreeSet::new()), 9 => prop::collection::btree_set(0..RANKS, 1..4)])
            .prop_map(|(app, ranks)| Step::Delta { app, ranks }),
        1 => (0..APPS.len(), pick()).prop_map(|(app, name)| Step::Prune { app, name }),
    ]
}

/// The names requests are made of: the live psets and `mpi://SELF`; and the universe
/// with every name the store has used (generated ones included), in name order.
struct Pool {
    live: Vec<PsetName>,
    deltas: Vec<PsetName>,
    all: Vec<PsetName>,
}

impl Pool {
    fn of(oracle: &PsetOracle) -> Self {
        let mut all: BTreeSet<PsetName> = universe().into_iter().collect();
        all.extend(oracle.names().map(|(n, _)| n.clone()));
        let mut live: Vec<PsetName> = oracle.live().map(|(n, _)| n.clone()).collect();
        let deltas = live
            .iter()
            .filter(|n| n.path().next() == Some("rc"))
            .cloned()
            .collect();
        live.push(PsetName::self_set());
        Pool {
            live,
            deltas,
            all: all.into_iter().collect(),
        }
    }

    fn get(&self, p: Pick) -> PsetName {
        let (from, k) = match p {
            Pick::Live(k) => (&self.live, k),
            Pick::Delta(k) if !self.deltas.is_empty() => (&self.deltas, k),
            Pick::Delta(k) | Pick::Any(k) => (&self.all, k),
        };
        from[k as usize % from.len()].clone()
    }
}

fn update(a: &Attrs) -> AttrUpdate {
    let mut u = AttrUpdate {
        active: a.active,
        ..AttrUpdate::none()
    };
    if let Some((key, value)) = a.hint {
        // A good key, one with an empty name and one without the prefix (PSET-14).
        let key = ["mpi_ps_sched_x", "mpi_ps_sched_", "colour"][key as usize];
        u = u.with_sched(key, value.to_string());
    }
    u
}

/// The request a generated op stands for, given the store it is sent to.
fn request(op: &Op, pool: &Pool, oracle: &PsetOracle) -> PsetOp {
    let pick = |p: Pick| pool.get(p);
    match op {
        Op::Set {
            op,
            a,
            b,
            target,
            attrs,
        } => {
            let pset1 = pick(*a);
            let target = match target {
                Target::None => None,
                Target::Pset1 => Some(pset1.clone()),
                Target::Pick(k) => Some(pick(*k)),
            };
            PsetOp::Set {
                op: [SetOp::Union, SetOp::Difference, SetOp::Intersection][*op as usize],
                pset1,
                pset2: pick(*b),
                target,
                attrs: update(attrs),
            }
        }
        Op::Null { target, attrs } => PsetOp::Null {
            target: pick(*target),
            attrs: update(attrs),
        },
        Op::Split {
            pset,
            by,
            targets,
            attrs,
        } => {
            let pset = pick(*pset);
            let size = if pset == PsetName::self_set() {
                1
            } else {
                oracle
                    .live()
                    .find(|(n, _)| **n == pset)
                    .map_or(0, |(_, p)| p.members.len())
            };
            let by = match by {
                By::Cuts(cuts) => {
                    let mut bounds: Vec<usize> = cuts
                        .iter()
                        .map(|&c| c as usize % size.max(1))
                        .filter(|&c| c > 0)
                        .collect();
                    bounds.push(size);
                    bounds.sort_unstable();
                    bounds.dedup();
                    let mut prev = 0;
                    let sizes = bounds
                        .into_iter()
                        .map(|b| b - std::mem::replace(&mut prev, b));
                    SplitBy::Sizes(sizes.collect())
                }
                By::Sizes(sizes) => SplitBy::Sizes(sizes.clone()),
                By::Colours(c) => SplitBy::Colours(c.iter().map(|&(r, k)| (pid(r), k)).collect()),
            };
            PsetOp::Split {
                pset,
                by,
                targets: targets.iter().map(|&k| pick(k)).collect(),
                attrs: update(attrs),
            }
        }
    }
}

/// A store as comparable data: the live psets by name, the registry's in the oracle's
/// terms (members as process ids).
type View = BTreeMap<PsetName, OraclePset>;

fn view_registry(reg: &PsetRegistry) -> View {
    reg.live_psets()
        .map(|(n, p)| {
            let members = reg.members(&Origin::Runtime, n).expect("live");
            let pset = OraclePset {
                members: members.into_iter().collect(),
                version: p.attrs.version,
                epoch: p.attrs.epoch,
                active: p.attrs.active,
                hints: p.attrs.sched.clone(),
            };
            (n.clone(), pset)
        })
        .collect()
}

fn view_oracle(oracle: &PsetOracle) -> View {
    oracle.live().map(|(n, p)| (n.clone(), p.clone())).collect()
}

type Answer = Result<Vec<OpOutcome>, PsetError>;

fn comparable(answer: Answer) -> Answer {
    answer.map_err(|e| without_reasons(&e))
}

fn job() -> (PsetRegistry, PsetOracle) {
    let procs: Vec<(&str, Vec<ProcessId>)> = APPS
        .iter()
        .map(|(app, ranks)| (*app, ranks.iter().copied().map(pid).collect()))
        .collect();
    let job: Vec<(&str, &[ProcessId])> = procs.iter().map(|(a, p)| (*a, p.as_slice())).collect();
    let mut reg = PsetRegistry::new();
    reg.start_job(&job).expect("a valid job");
    let oracle = PsetOracle::start_job(&job).expect("a valid job");
    (reg, oracle)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn oracle_and_registry_agree(steps in prop::collection::vec(step(), 1..30)) {
        let (mut reg, mut oracle) = job();
        for step in &steps {
            let pool = Pool::of(&oracle);
            let (got, want): (Answer, Answer) = match step {
                Step::Batch { app, who, ops } => {
                    let (app, ranks) = APPS[*app];
                    let caller = pid(ranks[*who as usize % ranks.len()]);
                    let ops: Vec<PsetOp> =
                        ops.iter().map(|op| request(op, &pool, &oracle)).collect();
                    let origin = Origin::process(app, caller.clone());
                    (reg.apply_batch(&origin, &ops), oracle.apply_batch(app, &caller, &ops))
                }
                Step::Delta { app, ranks } => {
                    let app = APPS[*app].0;
                    let procs: Vec<ProcessId> = ranks.iter().copied().map(pid).collect();
                    let one = |n: PsetName| vec![OpOutcome { results: vec![n], ..OpOutcome::default() }];
                    (reg.define_delta(app, &procs).map(one), oracle.define_delta(app, &procs).map(one))
                }
                Step::Prune { app, name } => {
                    let (app, ranks) = APPS[*app];
                    let target = &pool.get(*name);
                    let origin = Origin::process(app, pid(ranks[0]));
                    (reg.prune(&origin, target).map(|()| vec![]), oracle.prune(app, target).map(|()| vec![]))
                }
            };
            prop_assert_eq!(comparable(got), comparable(want), "answers to {:?}", step);
            prop_assert_eq!(view_registry(&reg), view_oracle(&oracle), "stores after {:?}", step);
            // Retired names (PSET-5, PSET-35), as far as a name can be asked about.
            for (n, e) in oracle.names() {
                prop_assert_eq!(reg.is_pruned(n), *e == Entry::Pruned, "{} after {:?}", n, step);
            }
            for n in &pool.all {
                prop_assert!(!reg.is_pruned(n) || oracle.names().any(|(m, e)| m == n && *e == Entry::Pruned));
            }
            // The order processes were seen in, which SPLIT by sizes cuts in (PSET-36).
            let table = reg.table();
            let seen: Vec<ProcessId> = (0..table.len() as u32).filter_map(|i| table.get(i)).collect();
            prop_assert_eq!(seen.as_slice(), oracle.processes());
        }
    }
}
