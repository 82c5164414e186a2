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
    println!("harness saw: {seen:?}");
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

#[test]
fn setup_fork_names_the_server_the_namespace_and_the_rank() {
    let Some(h) = harness() else { return };
    let _serial = h
        .serial
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let ns = dynres_pmix::Namespace {
        name: "forkenv".into(),
        size: 2,
        universe: 2,
        nodes: vec!["localhost".into()],
        procs: (0..2)
            .map(|rank| dynres_pmix::ProcInfo {
                rank,
                node: 0,
                local_rank: u16::try_from(rank).unwrap(),
                node_rank: u16::try_from(rank).unwrap(),
                app: 0,
            })
            .collect(),
        this_node: 0,
        spawned_by: None,
        oversubscribed: false,
    };
    h.server
        .register_namespace(&ns)
        .expect("register_namespace");
    let env = h.server.setup_fork("forkenv", 1).expect("setup_fork");
    for (k, v) in &env {
        println!("{k}={v}");
    }
    let get = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    assert_eq!(get("PMIX_NAMESPACE"), Some("forkenv"));
    assert_eq!(get("PMIX_RANK"), Some("1"));
    assert!(
        env.iter().any(|(k, _)| k.starts_with("PMIX_SERVER_URI")),
        "no server URI in {env:?}"
    );
    h.server.deregister_namespace("forkenv");
}

#[test]
fn a_second_server_is_refused() {
    let Some(h) = harness() else { return };
    let (tx, _rx) = std::sync::mpsc::channel();
    let second = dynres_pmix::Server::start(&h.dir.join("second"), tx);
    assert_eq!(second.err(), Some(dynres_pmix::PmixError::AlreadyStarted));
}
