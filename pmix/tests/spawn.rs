//! `MPI_Comm_spawn` on one node: the Spawn request makes the harness register a new
//! namespace (spawned by the caller), start its processes, and answer its name; parent
//! and children then talk over the intercommunicator (publish/lookup, connect).

mod common;

use common::{Seen, assert_all_exited_0, harness};

#[test]
fn comm_spawn_two_children() {
    let Some(h) = harness() else { return };
    let _serial = h
        .serial
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let exe = h.build("spawn", include_str!("programs/spawn.c"));
    let exits = h.run_job(
        "parent",
        &exe,
        2,
        // Open MPI's shared-memory BTL does not reach the processes of another job:
        // parent and children talk over TCP on the loopback interface.
        &[
            ("OMPI_MCA_btl", "self,sm,tcp"),
            ("OMPI_MCA_btl_tcp_if_include", "lo"),
        ],
    );
    for e in &exits {
        print!("{}:{} exit {:?}: {}", e.ns, e.rank, e.code, e.stdout);
    }
    let seen = h.seen();
    println!("harness saw: {seen:?}");
    assert_all_exited_0(&exits);
    assert_eq!(exits.len(), 4, "two parents and two children");
    assert!(
        exits[1].stdout.contains("parent rank=1 size=2 done"),
        "{:?}",
        exits[1].stdout
    );
    assert!(
        exits[0].stdout.contains("parent got 0 from child 0"),
        "{:?}",
        exits[0].stdout
    );
    assert!(
        exits[0].stdout.contains("parent got 2 from child 1"),
        "{:?}",
        exits[0].stdout
    );
    for (i, e) in exits[2..].iter().enumerate() {
        let want = format!("child rank={i} size=2 answered {}", 2 * i);
        assert!(e.stdout.contains(&want), "child {i} printed {:?}", e.stdout);
    }
    assert!(
        seen.contains(&Seen::Spawn("parent".into(), 0, "parent-spawn1".into())),
        "no Spawn from parent:0: {seen:?}"
    );
}
