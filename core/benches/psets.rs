//! Pset operations at 1 K, 64 K and 1 M members: the bit-set algorithm alone and the
//! full registry request (resolve, compute, version, journal) that the master runs.
//!
//! Run: `cargo bench -p dynres-core --bench psets`. Prints the heap size of one
//! 1 M-member pset first (issue 2's target: ≤160 KiB).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dynres_core::pset::{
    AttrUpdate, MemberSet, Origin, PsetName, PsetOp, PsetRegistry, SetOp, SplitBy,
};
use dynres_core::{Namespace, ProcessId};

const SIZES: [u32; 3] = [1_000, 64_000, 1_000_000];

/// A = the first n indices, B = the n indices starting at n/2 (half overlap).
fn operands(n: u32) -> (MemberSet, MemberSet) {
    let a = MemberSet::first_n(n);
    let b: MemberSet = (n / 2..n / 2 + n).collect();
    (a, b)
}

/// A registry whose app `a` holds `n` processes, with `mpi://app/a/b` shifted by n/2.
fn registry(n: u32) -> (PsetRegistry, Origin) {
    let ns = Namespace::new("bench");
    let procs: Vec<ProcessId> = (0..n + n / 2)
        .map(|r| ProcessId::new(ns.clone(), r))
        .collect();
    let mut reg = PsetRegistry::new();
    reg.start_job(&[("a", &procs[..n as usize]), ("other", &procs[n as usize..])])
        .expect("start job");
    let me = Origin::process("a", procs[0].clone());
    // b = (a ∖ first n/2) ∪ other, built with the registry's own operations.
    let split = PsetOp::Split {
        pset: name("mpi://app/a"),
        by: SplitBy::Sizes(vec![(n / 2) as usize, (n - n / 2) as usize]),
        targets: vec![name("mpi://app/a/lo"), name("mpi://app/a/hi")],
        attrs: AttrUpdate::none(),
    };
    reg.apply(&me, &split).expect("split");
    let union = set(
        SetOp::Union,
        "mpi://app/a/hi",
        "mpi://app/other",
        "mpi://app/a/b",
    );
    reg.apply(&me, &union).expect("union");
    (reg, me)
}

fn name(s: &str) -> PsetName {
    PsetName::parse(s).expect("valid name")
}

fn set(op: SetOp, a: &str, b: &str, target: &str) -> PsetOp {
    PsetOp::Set {
        op,
        pset1: name(a),
        pset2: name(b),
        target: Some(name(target)),
        attrs: AttrUpdate::none(),
    }
}

fn bitset_ops(c: &mut Criterion) {
    let (a, _) = operands(1_000_000);
    eprintln!(
        "memory: one 1M-member pset holds {} bytes ({:.1} KiB) of membership",
        a.heap_bytes(),
        a.heap_bytes() as f64 / 1024.0
    );
    let mut g = c.benchmark_group("bitset");
    for n in SIZES {
        let (a, b) = operands(n);
        g.bench_with_input(BenchmarkId::new("union", n), &n, |bch, _| {
            bch.iter(|| black_box(&a).union(black_box(&b)))
        });
        g.bench_with_input(BenchmarkId::new("difference", n), &n, |bch, _| {
            bch.iter(|| black_box(&a).difference(black_box(&b)))
        });
        g.bench_with_input(BenchmarkId::new("intersection", n), &n, |bch, _| {
            bch.iter(|| black_box(&a).intersection(black_box(&b)))
        });
        let quarter = (n / 4) as usize;
        let sizes = [quarter, quarter, quarter, n as usize - 3 * quarter];
        g.bench_with_input(BenchmarkId::new("split4", n), &n, |bch, _| {
            bch.iter(|| black_box(&a).split_sizes(black_box(&sizes)))
        });
    }
    g.finish();
}

fn registry_ops(c: &mut Criterion) {
    let mut g = c.benchmark_group("registry");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    for n in SIZES {
        let (mut reg, me) = registry(n);
        for (label, op) in [
            ("union", SetOp::Union),
            ("difference", SetOp::Difference),
            ("intersection", SetOp::Intersection),
        ] {
            // Each op versions its own copy of `a` in place. Difference and intersection
            // shrink it on the first call, then repeat the same work on the same input.
            let scratch = format!("mpi://app/a/{label}");
            reg.apply(
                &me,
                &set(SetOp::Union, "mpi://app/a", "mpi://app/a", &scratch),
            )
            .expect("copy");
            let req = set(op, &scratch, "mpi://app/a/b", &scratch);
            g.bench_with_input(BenchmarkId::new(label, n), &n, |bch, _| {
                bch.iter(|| reg.apply(&me, black_box(&req)).expect("op"))
            });
        }
        // SPLIT makes new psets each time: time the request, prune its parts untimed.
        let quarter = (n / 4) as usize;
        let split = PsetOp::Split {
            pset: name("mpi://app/a"),
            by: SplitBy::Sizes(vec![quarter, quarter, quarter, n as usize - 3 * quarter]),
            targets: vec![],
            attrs: AttrUpdate::none(),
        };
        g.bench_with_input(BenchmarkId::new("split4", n), &n, |bch, _| {
            bch.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let out = reg.apply(&me, black_box(&split)).expect("split");
                    total += t.elapsed();
                    for part in &out.results {
                        reg.prune(&me, part).expect("prune");
                    }
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bitset_ops, registry_ops
}
criterion_main!(benches);
