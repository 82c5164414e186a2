//! One test per pset rule of `spec/psets.md`, cited by ID, and the thesis' Fig. 6.1.

use dynres_core::pset::{
    AttrUpdate, AttrValue, MPI_PS_EPOCH, MPI_PS_VERSION, MPI_SIZE, Origin, PsetError, PsetName,
    PsetOp, PsetRegistry, SetOp, SplitBy,
};
use dynres_core::{Namespace, ProcessId};

fn pid(rank: u32) -> ProcessId {
    ProcessId::new(Namespace::new("job"), rank)
}

fn pids(ranks: impl IntoIterator<Item = u32>) -> Vec<ProcessId> {
    ranks.into_iter().map(pid).collect()
}

fn name(s: &str) -> PsetName {
    PsetName::parse(s).unwrap()
}

fn names(list: &[&str]) -> Vec<PsetName> {
    list.iter().map(|s| name(s)).collect()
}

/// An app1 process (rank 0) as the caller.
fn app1() -> Origin {
    Origin::process("app1", pid(0))
}

fn members(reg: &PsetRegistry, n: &str) -> Vec<u32> {
    reg.members(&Origin::Runtime, &name(n))
        .unwrap()
        .into_iter()
        .map(|p| p.rank)
        .collect()
}

fn version_epoch(reg: &PsetRegistry, n: &str) -> (u64, u64) {
    let a = &reg.get(&name(n)).unwrap().attrs;
    (a.version, a.epoch)
}

fn set(op: SetOp, a: &str, b: &str, target: Option<&str>) -> PsetOp {
    PsetOp::Set {
        op,
        pset1: name(a),
        pset2: name(b),
        target: target.map(name),
        attrs: AttrUpdate::none(),
    }
}

fn colour_split(pset: &str, coloured: &[(u32, u32)], targets: &[&str]) -> PsetOp {
    PsetOp::Split {
        pset: name(pset),
        by: SplitBy::Colours(coloured.iter().map(|&(r, c)| (pid(r), c)).collect()),
        targets: names(targets),
        attrs: AttrUpdate::none(),
    }
}

/// A job of two apps: app1 = ranks 0..9, app2 = ranks 9..12.
fn job() -> PsetRegistry {
    let mut reg = PsetRegistry::new();
    reg.start_job(&[("app1", &pids(0..9)), ("app2", &pids(9..12))])
        .unwrap();
    reg
}

/// The hierarchy of the thesis' Fig. 6.1: app1 made mul, add and roots and handed
/// `mpi://app/app1` to the runtime (inactive); the runtime announced SUB deltas s1
/// (inside mul) and s2 (inside app2).
fn figure_6_1() -> (PsetRegistry, PsetName, PsetName) {
    let mut reg = job();
    let ops = [
        colour_split(
            "mpi://app/app1",
            &[(0, 0), (1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 1)],
            &["mpi://app/app1/mul", "mpi://app/app1/add"],
        ),
        colour_split(
            "mpi://app/app1",
            &[(0, 0), (4, 0), (7, 0)],
            &["mpi://app/app1/roots"],
        ),
        PsetOp::Null {
            target: name("mpi://app/app1"),
            attrs: AttrUpdate::active(false),
        },
    ];
    reg.apply_batch(&app1(), &ops).unwrap();
    let s1 = reg.define_delta("app1", &pids([2, 3])).unwrap();
    let s2 = reg.define_delta("app2", &pids([11])).unwrap();
    (reg, s1, s2)
}

/// PSET-21, PSET-22, PSET-23: X_m, X_c and X_a on the thesis' Fig. 6.1.
#[test]
fn figure_6_1_derived_sets() {
    let (reg, s1, s2) = figure_6_1();
    assert_eq!(s1.as_str(), "mpi://rte/app1/rc/1");
    assert_eq!(
        reg.malleable("app1"),
        names(&[
            "mpi://app/app1/add",
            "mpi://app/app1/mul",
            "mpi://app/app1/roots"
        ])
    );
    assert_eq!(
        reg.reference_counted(&s1).unwrap(),
        names(&["mpi://app/app1/mul"])
    );
    assert_eq!(
        reg.recursively_affected(&name("mpi://app/app1/mul"), &s1)
            .unwrap(),
        names(&["mpi://app/app1"])
    );
    assert_eq!(reg.malleable("app2"), names(&["mpi://app/app2"]));
    assert_eq!(
        reg.reference_counted(&s2).unwrap(),
        names(&["mpi://app/app2"])
    );
    assert_eq!(
        reg.recursively_affected(&name("mpi://app/app2"), &s2)
            .unwrap(),
        Vec::<PsetName>::new()
    );
}

/// PSET-34: DIFFERENCE(mul, s1) versions mul and, recursively, the inactive app1.
#[test]
fn figure_6_1_applying_s1_recurses_into_app1() {
    let (mut reg, s1, _) = figure_6_1();
    let out = reg
        .apply(
            &app1(),
            &set(
                SetOp::Difference,
                "mpi://app/app1/mul",
                s1.as_str(),
                Some("mpi://app/app1/mul"),
            ),
        )
        .unwrap();
    assert_eq!(out.results, names(&["mpi://app/app1/mul"]));
    assert_eq!(out.recursive, names(&["mpi://app/app1"]));
    assert_eq!(members(&reg, "mpi://app/app1/mul"), [0, 1]);
    assert_eq!(members(&reg, "mpi://app/app1"), [0, 1, 4, 5, 6, 7, 8]);
    assert_eq!(version_epoch(&reg, "mpi://app/app1/mul"), (1, 1));
    assert_eq!(version_epoch(&reg, "mpi://app/app1"), (1, 1));
    // Active psets the delta does not touch are left alone (PSET-13).
    assert_eq!(version_epoch(&reg, "mpi://app/app1/add"), (0, 0));
    assert_eq!(version_epoch(&reg, "mpi://app/app1/roots"), (0, 0));
}

/// PSET-34: a recursively affected pset the op would empty is pruned, not left empty.
#[test]
fn recursion_prunes_what_it_would_empty() {
    let mut reg = job();
    reg.apply(
        &app1(),
        &PsetOp::Split {
            pset: name("mpi://app/app1"),
            by: SplitBy::Sizes(vec![2, 7]),
            targets: names(&["mpi://app/app1/head", "mpi://app/app1/tail"]),
            attrs: AttrUpdate::active(false),
        },
    )
    .unwrap();
    let d = reg.define_delta("app1", &pids([0, 1])).unwrap();
    let out = reg
        .apply(
            &app1(),
            &set(
                SetOp::Difference,
                "mpi://app/app1",
                d.as_str(),
                Some("mpi://app/app1"),
            ),
        )
        .unwrap();
    assert_eq!(out.pruned, names(&["mpi://app/app1/head"]));
    assert!(reg.is_pruned(&name("mpi://app/app1/head")));
    assert_eq!(members(&reg, "mpi://app/app1"), (2..9).collect::<Vec<_>>());
    assert_eq!(
        version_epoch(&reg, "mpi://app/app1/tail"),
        (0, 0),
        "untouched"
    );
}

/// PSET-3, PSET-35, PSET-30 over PSET-34: recursion never prunes an application's root.
/// Here app1's root, made inactive, shrinks to rank 0 and a delta holds rank 0; an op
/// with that delta would empty the root, which cannot be pruned, so the request is
/// refused and changes nothing. (Found by the independent oracle of issue 13,
/// `verification/tests/pset_oracle_vs_registry.rs`: the registry pruned the root.)
#[test]
fn recursion_never_prunes_an_app_root() {
    let mut reg = job();
    let root = "mpi://app/app1";
    reg.apply_batch(
        &app1(),
        &[
            PsetOp::Split {
                pset: name(root),
                by: SplitBy::Sizes(vec![1, 8]),
                targets: names(&["mpi://app/app1/head", "mpi://app/app1/rest"]),
                attrs: AttrUpdate::none(),
            },
            set(SetOp::Intersection, root, "mpi://app/app1/head", Some(root)),
            PsetOp::Null {
                target: name(root),
                attrs: AttrUpdate::active(false),
            },
        ],
    )
    .unwrap();
    assert_eq!(members(&reg, root), [0]);
    let d = reg.define_delta("app1", &pids([0])).unwrap();
    let before = reg.clone();
    let op = set(SetOp::Difference, "mpi://WORLD", d.as_str(), None);
    assert_eq!(
        reg.apply(&app1(), &op),
        Err(PsetError::EmptyResult(name(root)))
    );
    assert_eq!(reg, before, "PSET-40: a refused request changes nothing");
    assert_eq!(members(&reg, root), [0]);
}

/// PSET-3: WORLD and the app roots exist from the start, at version 0 and epoch 0.
#[test]
fn job_start_defines_mandatory_psets() {
    let reg = job();
    assert_eq!(members(&reg, "mpi://WORLD"), (0..12).collect::<Vec<_>>());
    assert_eq!(members(&reg, "mpi://app/app2"), [9, 10, 11]);
    assert!(reg.get(&name("mpi://app/app1")).unwrap().attrs.active);
    assert!(!reg.get(&name("mpi://WORLD")).unwrap().attrs.active);
    assert_eq!(version_epoch(&reg, "mpi://WORLD"), (0, 0));
    let mut again = reg.clone();
    assert_eq!(
        again.start_job(&[("app3", &pids(20..21))]),
        Err(PsetError::Job("already started"))
    );
    let mut overlap = PsetRegistry::new();
    assert!(
        overlap
            .start_job(&[("a", &pids(0..2)), ("b", &pids(1..3))])
            .is_err()
    );
    assert!(overlap.live_psets().next().is_none());
}

/// PSET-10: versions rise by one per membership change and never otherwise; PSET-14: a
/// scheduling hint is kept under its `mpi_ps_sched_*` key; PSET-15: `mpi_size` is the
/// member count.
#[test]
fn versions_rise_only_with_membership() {
    let mut reg = job();
    let d = reg.define_delta("app1", &pids([20, 21])).unwrap();
    let root = "mpi://app/app1";
    reg.apply(&app1(), &set(SetOp::Union, root, d.as_str(), Some(root)))
        .unwrap();
    assert_eq!(version_epoch(&reg, root), (1, 1));
    // Same op again: same members, so no new version.
    reg.apply(&app1(), &set(SetOp::Union, root, d.as_str(), Some(root)))
        .unwrap();
    assert_eq!(version_epoch(&reg, root), (1, 1));
    // Attribute-only update (NULL): no new version (PSET-33).
    reg.apply(
        &app1(),
        &PsetOp::Null {
            target: name(root),
            attrs: AttrUpdate::none().with_sched("mpi_ps_sched_interval", "10"),
        },
    )
    .unwrap();
    assert_eq!(version_epoch(&reg, root), (1, 1));
    assert_eq!(
        reg.attribute(&app1(), &name(root), "mpi_ps_sched_interval")
            .unwrap(),
        Some(AttrValue::Text("10".into()))
    );
    assert_eq!(
        reg.attribute(&app1(), &name(root), MPI_PS_VERSION).unwrap(),
        Some(AttrValue::Int(1))
    );
    assert_eq!(
        reg.attribute(&app1(), &name(root), MPI_SIZE).unwrap(),
        Some(AttrValue::Int(11))
    );
    assert!(reg.attribute(&app1(), &name(root), "colour").is_err());
}

/// PSET-11 / PSET-12 (Def. 1): delta epochs count up per app, pruned deltas included;
/// an op's result carries the larger operand epoch.
#[test]
fn epochs_follow_definition_1() {
    let mut reg = job();
    let d1 = reg.define_delta("app1", &pids([20])).unwrap();
    let d2 = reg.define_delta("app1", &pids([21])).unwrap();
    reg.prune(&Origin::Runtime, &d2).unwrap();
    let d3 = reg.define_delta("app1", &pids([22])).unwrap();
    let e = |reg: &PsetRegistry, n: &PsetName| reg.get(n).unwrap().attrs.epoch;
    assert_eq!((e(&reg, &d1), e(&reg, &d3)), (1, 3));
    assert_eq!(d3.as_str(), "mpi://rte/app1/rc/3");
    let other = reg.define_delta("app2", &pids([23])).unwrap();
    assert_eq!(e(&reg, &other), 1, "epochs are per application domain");
    let out = reg
        .apply(
            &app1(),
            &set(
                SetOp::Union,
                d1.as_str(),
                d3.as_str(),
                Some("mpi://app/app1/new"),
            ),
        )
        .unwrap();
    assert_eq!(reg.get(&out.results[0]).unwrap().attrs.epoch, 3);
    assert_eq!(
        reg.attribute(&app1(), &out.results[0], MPI_PS_EPOCH)
            .unwrap(),
        Some(AttrValue::Int(3))
    );
}

/// PSET-30: no operation may produce an empty pset; the registry stays as it was.
#[test]
fn empty_results_are_refused() {
    let mut reg = job();
    let before = reg.clone();
    let err = reg
        .apply(
            &app1(),
            &set(
                SetOp::Intersection,
                "mpi://app/app1",
                "mpi://app/app2",
                Some("mpi://app/app1/x"),
            ),
        )
        .unwrap_err();
    assert_eq!(err, PsetError::EmptyResult(name("mpi://app/app1/x")));
    let err = reg
        .apply(
            &app1(),
            &set(SetOp::Difference, "mpi://app/app1", "mpi://WORLD", None),
        )
        .unwrap_err();
    assert!(matches!(err, PsetError::EmptyResult(_)));
    assert_eq!(reg, before);
    assert!(reg.define_delta("app1", &[]).is_err());
}

/// PSET-31: a preferred name is honoured only in the caller's own app domain; elsewhere
/// the runtime names the result in that domain. Unset attributes come from pset1.
#[test]
fn preferred_names_and_inheritance() {
    let mut reg = job();
    reg.apply(
        &app1(),
        &PsetOp::Null {
            target: name("mpi://app/app1"),
            attrs: AttrUpdate::none().with_sched("mpi_ps_sched_cost", "high"),
        },
    )
    .unwrap();
    let honoured = reg
        .apply(
            &app1(),
            &set(
                SetOp::Union,
                "mpi://app/app1",
                "mpi://SELF",
                Some("mpi://app/app1/a"),
            ),
        )
        .unwrap();
    assert_eq!(honoured.results, names(&["mpi://app/app1/a"]));
    let a = reg.get(&name("mpi://app/app1/a")).unwrap();
    assert!(a.attrs.active);
    assert_eq!(
        a.attrs.sched.get("mpi_ps_sched_cost").map(String::as_str),
        Some("high")
    );
    for elsewhere in ["mpi://rte/app1/mine", "mpi://app/app2/mine", "mpi://WORLD"] {
        let out = reg
            .apply(
                &app1(),
                &set(
                    SetOp::Union,
                    "mpi://app/app1",
                    "mpi://SELF",
                    Some(elsewhere),
                ),
            )
            .unwrap();
        let got = &out.results[0];
        assert!(got.in_app_domain("app1"), "{elsewhere} gave {got}");
        assert!(got.as_str().starts_with("mpi://app/app1/op/"));
    }
    assert!(
        reg.get(&name("mpi://rte/app1/mine")).is_err(),
        "PSET-6: apps never write in rte"
    );
    // An explicit attribute overrides inheritance.
    let out = reg
        .apply(
            &app1(),
            &PsetOp::Set {
                op: SetOp::Union,
                pset1: name("mpi://app/app1"),
                pset2: name("mpi://SELF"),
                target: Some(name("mpi://app/app1/b")),
                attrs: AttrUpdate::active(false),
            },
        )
        .unwrap();
    assert!(!reg.get(&out.results[0]).unwrap().attrs.active);
}

/// PSET-5 / PSET-32: a result named like an existing pset other than pset1 is refused;
/// pruned names are never reused and pruned psets are invalid operands (PSET-35).
#[test]
fn names_are_never_reused() {
    let mut reg = job();
    reg.apply(
        &app1(),
        &set(
            SetOp::Union,
            "mpi://app/app1",
            "mpi://SELF",
            Some("mpi://app/app1/x"),
        ),
    )
    .unwrap();
    let err = reg
        .apply(
            &app1(),
            &set(
                SetOp::Union,
                "mpi://app/app1",
                "mpi://SELF",
                Some("mpi://app/app1/x"),
            ),
        )
        .unwrap_err();
    assert_eq!(err, PsetError::NameTaken(name("mpi://app/app1/x")));
    reg.prune(&app1(), &name("mpi://app/app1/x")).unwrap();
    let err = reg
        .apply(
            &app1(),
            &set(
                SetOp::Union,
                "mpi://app/app1",
                "mpi://SELF",
                Some("mpi://app/app1/x"),
            ),
        )
        .unwrap_err();
    assert_eq!(err, PsetError::NameTaken(name("mpi://app/app1/x")));
    let err = reg
        .apply(
            &app1(),
            &set(SetOp::Union, "mpi://app/app1/x", "mpi://SELF", None),
        )
        .unwrap_err();
    assert_eq!(err, PsetError::Pruned(name("mpi://app/app1/x")));
    assert!(
        reg.psets_containing(&pid(0))
            .iter()
            .all(|n| n.as_str() != "mpi://app/app1/x")
    );
}

/// PSET-4 / PSET-6 / PSET-7 / PSET-3: the domains, who may write where, and what can
/// never be pruned.
#[test]
fn domains_and_permissions() {
    let mut reg = job();
    let before = reg.clone();
    let app2_pset = PsetOp::Null {
        target: name("mpi://app/app2"),
        attrs: AttrUpdate::active(false),
    };
    assert!(matches!(
        reg.apply(&app1(), &app2_pset),
        Err(PsetError::NotPermitted { .. })
    ));
    for mandatory in ["mpi://WORLD", "mpi://SELF", "mpi://app/app1"] {
        assert!(reg.prune(&app1(), &name(mandatory)).is_err(), "{mandatory}");
        assert!(
            reg.prune(&Origin::Runtime, &name(mandatory)).is_err(),
            "{mandatory}"
        );
    }
    assert!(
        reg.define(name("mpi://app/app1/x"), &pids([0]), &AttrUpdate::none())
            .is_err()
    );
    assert!(
        reg.define(name("mpi://rte/app1/rc/9"), &pids([0]), &AttrUpdate::none())
            .is_err()
    );
    reg.define(
        name("mpi://rte/app1/hosts/n1"),
        &pids([0, 1]),
        &AttrUpdate::none(),
    )
    .unwrap();
    assert!(
        reg.prune(&app1(), &name("mpi://rte/app1/hosts/n1"))
            .is_err()
    );
    // The runtime may not assign the application's `mpi_ps_active`.
    let flip = PsetOp::Null {
        target: name("mpi://rte/app1/hosts/n1"),
        attrs: AttrUpdate::active(true),
    };
    assert!(reg.apply(&Origin::Runtime, &flip).is_err());
    assert!(matches!(
        reg.apply(
            &app1(),
            &PsetOp::Null {
                target: name("mpi://app/app1"),
                attrs: AttrUpdate::none().with_sched("colour", "red"),
            }
        ),
        Err(PsetError::BadAttribute { .. })
    ));
    reg.prune(&Origin::Runtime, &name("mpi://rte/app1/hosts/n1"))
        .unwrap();
    assert_ne!(reg, before);
}

/// PSET-13: the runtime never changes the members of an active pset.
#[test]
fn runtime_never_touches_active_psets() {
    let mut reg = job();
    let root = name("mpi://app/app1");
    let extra = reg.intern_all(&pids([30])).unwrap();
    let set9 = reg.get(&root).unwrap().members.union(&extra);
    assert_eq!(
        reg.runtime_set_members(&root, set9.clone(), 1),
        Err(PsetError::Active(root.clone()))
    );
    let d = reg.define_delta("app1", &pids([30])).unwrap();
    let err = reg
        .apply(
            &Origin::Runtime,
            &set(SetOp::Union, root.as_str(), d.as_str(), Some(root.as_str())),
        )
        .unwrap_err();
    assert_eq!(err, PsetError::Active(root.clone()));
    // WORLD is runtime-managed: it may change, with a new version.
    let world = name("mpi://WORLD");
    let grown = reg.get(&world).unwrap().members.union(&set9);
    reg.runtime_set_members(&world, grown, 1).unwrap();
    assert_eq!(version_epoch(&reg, "mpi://WORLD"), (1, 1));
}

/// PSET-41: a batch applies all of its requests or none.
#[test]
fn batches_are_all_or_nothing() {
    let mut reg = job();
    let before = reg.clone();
    let ops = [
        set(
            SetOp::Union,
            "mpi://app/app1",
            "mpi://SELF",
            Some("mpi://app/app1/first"),
        ),
        set(SetOp::Union, "mpi://app/app1", "mpi://SELF", None),
        set(
            SetOp::Intersection,
            "mpi://app/app1/first",
            "mpi://app/app2",
            None,
        ),
    ];
    let err = reg.apply_batch(&app1(), &ops).unwrap_err();
    assert!(matches!(err, PsetError::InBatch { index: 2, .. }), "{err}");
    assert_eq!(reg, before, "the first two requests were undone too");
    let outs = reg.apply_batch(&app1(), &ops[..2]).unwrap();
    assert_eq!(outs[0].results, names(&["mpi://app/app1/first"]));
    // A later request sees the earlier result.
    let ops = [
        set(
            SetOp::Union,
            "mpi://app/app1",
            "mpi://SELF",
            Some("mpi://app/app1/second"),
        ),
        set(
            SetOp::Difference,
            "mpi://app/app1/second",
            "mpi://SELF",
            Some("mpi://app/app1/second"),
        ),
    ];
    reg.apply_batch(&app1(), &ops).unwrap();
    assert_eq!(
        members(&reg, "mpi://app/app1/second"),
        (1..9).collect::<Vec<_>>()
    );
    assert_eq!(version_epoch(&reg, "mpi://app/app1/second"), (1, 0));
}

/// PSET-36: SPLIT by sizes and by colours; bad partitions are typed errors.
#[test]
fn split_by_sizes_and_colours() {
    let mut reg = job();
    let out = reg
        .apply(
            &app1(),
            &PsetOp::Split {
                pset: name("mpi://app/app1"),
                by: SplitBy::Sizes(vec![3, 6]),
                targets: names(&["mpi://app/app1/left"]),
                attrs: AttrUpdate::none(),
            },
        )
        .unwrap();
    assert_eq!(out.results[0].as_str(), "mpi://app/app1/left");
    assert_eq!(members(&reg, "mpi://app/app1/left"), [0, 1, 2]);
    assert_eq!(
        members(&reg, out.results[1].as_str()),
        (3..9).collect::<Vec<_>>()
    );
    let out = reg
        .apply(
            &app1(),
            &colour_split("mpi://app/app1", &[(8, 5), (1, 2), (7, 5)], &[]),
        )
        .unwrap();
    assert_eq!(
        members(&reg, out.results[0].as_str()),
        [1],
        "colour 2 first"
    );
    assert_eq!(members(&reg, out.results[1].as_str()), [7, 8]);
    let before = reg.clone();
    let bad = [
        PsetOp::Split {
            pset: name("mpi://app/app1"),
            by: SplitBy::Sizes(vec![3, 5]),
            targets: vec![],
            attrs: AttrUpdate::none(),
        },
        colour_split("mpi://app/app1", &[(1, 0), (1, 1)], &[]),
        colour_split("mpi://app/app1", &[(10, 0)], &[]),
        colour_split("mpi://app/app1", &[], &[]),
        colour_split("mpi://app/app1", &[(1, 0)], &["mpi://app/app1"]),
    ];
    for op in &bad {
        assert!(reg.apply(&app1(), op).is_err(), "{op:?}");
    }
    assert_eq!(reg, before);
}

/// `mpi://SELF` is the caller; membership queries list every live pset of a process.
#[test]
fn self_and_membership_queries() {
    let mut reg = job();
    let me = Origin::process("app2", pid(10));
    assert_eq!(reg.members(&me, &name("mpi://SELF")).unwrap(), pids([10]));
    assert_eq!(
        reg.members(&Origin::Runtime, &name("mpi://SELF")),
        Err(PsetError::SelfWithoutProcess)
    );
    let stranger = Origin::process("app2", pid(99));
    assert!(reg.members(&stranger, &name("mpi://SELF")).is_err());
    reg.define_delta("app2", &pids([10])).unwrap();
    assert_eq!(
        reg.psets_containing(&pid(10)),
        names(&[
            "mpi://SELF",
            "mpi://WORLD",
            "mpi://app/app2",
            "mpi://rte/app2/rc/1"
        ])
    );
    assert!(reg.psets_containing(&pid(99)).is_empty());
}
