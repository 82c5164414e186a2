//! Open MPI programs started by the test's own launcher on one node: `MPI_Init`,
//! rank and size, `MPI_Allreduce`, `MPI_Finalize`, through the PMIx server.

mod common;

use common::{Seen, assert_all_exited_0, harness};

fn hello(n: u32) {
    let Some(h) = harness() else { return };
    let _serial = h
        .serial
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let exe = h.build("hello", include_str!("programs/hello.c"));
    let ns = format!("hello{n}");
    let exits = h.run_job(&ns, &exe, n, &[]);
    for e in &exits {
        print!("{}:{} exit {:?}: {}", e.ns, e.rank, e.code, e.stdout);
    }
    assert_all_exited_0(&exits);
    assert_eq!(exits.len(), n as usize);
    let sum = n * (n - 1) / 2;
    for e in &exits {
        let want = format!("hello rank={} size={n} sum={sum}", e.rank);
        assert!(
            e.stdout.contains(&want),
            "rank {} printed {:?}, not {want:?}",
            e.rank,
            e.stdout
        );
    }
    let seen = h.seen();
    for rank in 0..n {
        assert!(
            seen.contains(&Seen::Connected(ns.clone(), rank)),
            "{ns}:{rank} never connected: {seen:?}"
        );
        assert!(
            seen.contains(&Seen::Finalized(ns.clone(), rank)),
            "{ns}:{rank} never finalized: {seen:?}"
        );
    }
}

#[test]
fn hello_one_process() {
    hello(1);
}

#[test]
fn hello_four_processes() {
    hello(4);
}
