//! The resource-change kernel alone (no I/O): one ADD of 8 and one SUB of 8 from the
//! request to FINALIZED, on the deterministic in-memory world of the flow tests (master,
//! 4 daemons, every client, simulated time). Wall time here is kernel CPU time only.
//!
//! Run: `cargo bench -p dynres-core --bench rc_flow`

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::Duration as WallDuration;

use common::*;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use dynres_core::Duration;
use dynres_core::rc::{CallResult, ChangeRequest, RcStatus};

fn finalized(res: CallResult) {
    match res {
        CallResult::Accept(Ok(a)) if a.status == RcStatus::Finalized => {}
        other => panic!("not finalized: {other:?}"),
    }
}

fn flows(c: &mut Criterion) {
    let mut g = c.benchmark_group("rc_flow");
    g.bench_function("add8_to_finalized", |b| {
        b.iter_batched(
            || World::new(config(4, 8, 8)),
            |mut w| {
                w.request(ChangeRequest::add(APP, 8));
                w.run_for(Duration::from_micros(100));
                finalized(w.adapt(&pid(0), Some(Duration::from_millis(100))));
                black_box(w)
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("sub8_to_finalized", |b| {
        b.iter_batched(
            || World::new(config(4, 8, 16)),
            |mut w| {
                w.request(ChangeRequest::sub(APP, 8));
                w.run_for(Duration::from_micros(100));
                finalized(w.adapt(&pid(0), None));
                black_box(w)
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(WallDuration::from_millis(500)).measurement_time(WallDuration::from_secs(3));
    targets = flows
}
criterion_main!(benches);
