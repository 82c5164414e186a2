//! A tour of the pset kernel on the thesis' own examples: the Fig. 6.1 hierarchy and its
//! derived sets, an ADD and a SUB applied through pset operations (with recursive
//! application), and the Fig. 7.1 slot allocation.
//!
//! Run: `cargo run -p dynres-core --example psets_tour`

use dynres_core::pset::{AttrUpdate, Origin, PsetName, PsetOp, PsetRegistry, SetOp, SplitBy};
use dynres_core::slots::{NodeSpec, SlotMap};
use dynres_core::{Namespace, ProcessId};

fn pid(rank: u32) -> ProcessId {
    ProcessId::new(Namespace::new("job"), rank)
}

fn name(s: &str) -> PsetName {
    PsetName::parse(s).expect("valid pset name")
}

fn show(reg: &PsetRegistry, title: &str) {
    println!("\n{title}");
    println!(
        "  {:<26} {:>4} {:>3} {:>3} {:>6}  members",
        "pset", "size", "v", "e", "active"
    );
    for (n, p) in reg.live_psets() {
        let ranks: Vec<String> = reg
            .members(&Origin::Runtime, n)
            .expect("live pset")
            .iter()
            .map(|p| p.rank.to_string())
            .collect();
        println!(
            "  {:<26} {:>4} {:>3} {:>3} {:>6}  {{{}}}",
            n.as_str(),
            p.members.len(),
            p.attrs.version,
            p.attrs.epoch,
            p.attrs.active,
            ranks.join(",")
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let app1_ranks: Vec<ProcessId> = (0..9).map(pid).collect();
    let app2_ranks: Vec<ProcessId> = (9..12).map(pid).collect();
    let mut reg = PsetRegistry::new();
    reg.start_job(&[("app1", &app1_ranks), ("app2", &app2_ranks)])?;
    let app1 = Origin::process("app1", pid(0));

    // app1 builds mul, add and roots, then hands mpi://app/app1 to the runtime.
    let colours =
        |list: &[(u32, u32)]| SplitBy::Colours(list.iter().map(|&(r, c)| (pid(r), c)).collect());
    reg.apply_batch(
        &app1,
        &[
            PsetOp::Split {
                pset: name("mpi://app/app1"),
                by: colours(&[(0, 0), (1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 1)]),
                targets: vec![name("mpi://app/app1/mul"), name("mpi://app/app1/add")],
                attrs: AttrUpdate::none(),
            },
            PsetOp::Split {
                pset: name("mpi://app/app1"),
                by: colours(&[(0, 0), (4, 0), (7, 0)]),
                targets: vec![name("mpi://app/app1/roots")],
                attrs: AttrUpdate::none(),
            },
            PsetOp::Null {
                target: name("mpi://app/app1"),
                attrs: AttrUpdate::active(false),
            },
        ],
    )?;
    let s1 = reg.define_delta("app1", &[pid(2), pid(3)])?;
    let s2 = reg.define_delta("app2", &[pid(11)])?;
    show(
        &reg,
        "Fig. 6.1: the hierarchy, SUB deltas s1 and s2 announced",
    );
    let list = |v: Vec<PsetName>| {
        v.iter()
            .map(|n| n.as_str().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("\n  X_m(app1)        = {{{}}}", list(reg.malleable("app1")));
    println!(
        "  X_c(s1)          = {{{}}}",
        list(reg.reference_counted(&s1)?)
    );
    println!(
        "  X_a(op(mul, s1)) = {{{}}}",
        list(reg.recursively_affected(&name("mpi://app/app1/mul"), &s1)?)
    );
    println!("  X_m(app2)        = {{{}}}", list(reg.malleable("app2")));
    println!(
        "  X_c(s2)          = {{{}}}",
        list(reg.reference_counted(&s2)?)
    );
    println!(
        "  X_a(op(app2,s2)) = {{{}}}",
        list(reg.recursively_affected(&name("mpi://app/app2"), &s2)?)
    );

    // Phase 2 of the SUB: DIFFERENCE(mul, s1) as a new version of mul.
    let out = reg.apply(
        &app1,
        &PsetOp::Set {
            op: SetOp::Difference,
            pset1: name("mpi://app/app1/mul"),
            pset2: s1.clone(),
            target: Some(name("mpi://app/app1/mul")),
            attrs: AttrUpdate::none(),
        },
    )?;
    show(
        &reg,
        &format!(
            "DIFFERENCE(mul, s1) -> {}; recursively applied to {}",
            list(out.results),
            list(out.recursive)
        ),
    );

    // An ADD of 3 to app2: the runtime announces a delta, app2 versions its root.
    let d = reg.define_delta("app2", &[pid(12), pid(13), pid(14)])?;
    let app2 = Origin::process("app2", pid(9));
    reg.apply(
        &app2,
        &PsetOp::Set {
            op: SetOp::Union,
            pset1: name("mpi://app/app2"),
            pset2: d.clone(),
            target: Some(name("mpi://app/app2")),
            attrs: AttrUpdate::none(),
        },
    )?;
    show(
        &reg,
        &format!("ADD of 3 to app2 via UNION(mpi://app/app2, {d})"),
    );

    // Fig. 7.1: four nodes of four slots.
    println!("\nFig. 7.1: stack-order slot allocation on 4 nodes x 4 slots");
    let nodes = (1..=4)
        .map(|i| NodeSpec {
            name: format!("node{i}"),
            slots: 4,
        })
        .collect();
    let mut slots = SlotMap::new(nodes);
    let (_, new) = slots.place(&(0..6).map(pid).collect::<Vec<_>>())?;
    println!("  epoch 1: ranks 0-5 on slots 0-5, nodes allocated {new:?}");
    let (placed, new) = slots.place(&(6..14).map(pid).collect::<Vec<_>>())?;
    println!(
        "  epoch 2: ranks 6-13 on slots {}-{}, nodes allocated {new:?}",
        placed[0].slot,
        placed[placed.len() - 1].slot
    );
    let victims = slots.victims(4)?;
    slots.mark_leaving(&victims)?;
    let mut released = Vec::new();
    for v in &victims {
        released.extend(slots.free(v)?);
    }
    let ranks: Vec<u32> = victims.iter().map(|p| p.rank).collect();
    println!("  epoch 3: SUB 4 removes ranks {ranks:?}; released nodes {released:?}");
    Ok(())
}
