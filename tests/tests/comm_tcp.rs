//! The communicator across "hosts": processes of one job that the runtime puts on
//! different nodes get different `DYNRES_HOST_ID`s and `DYNRES_NODE_ADDR`s, and must
//! talk over TCP (send/recv, barrier, bcast, allreduce: the `check` example), while
//! processes on the same node keep shared memory.
//!
//! The runtime does not place processes on nodes yet, so a shell wrapper sets both
//! variables from the rank, as the runtime will per node: node `rank / per_node`, with
//! address `127.0.0.(node + 1)` (all of 127/8 is loopback).

use dynres_tests::job::{Finished, Runtime, dynres_bin};

/// Runs `check` on `n` processes, `per_node` to a node.
fn check_on_nodes(rt: &Runtime, n: u32, per_node: u32) -> Finished {
    let script = format!(
        "node=$((DYNRES_RANK / {per_node})); \
         DYNRES_HOST_ID=node$node DYNRES_NODE_ADDR=127.0.0.$((node + 1)) \
         exec \"$0\" example check"
    );
    let bin = dynres_bin().display().to_string();
    let n = n.to_string();
    rt.run(&[
        "run", "-n", &n, "--slots", "4", "--", "sh", "-c", &script, &bin,
    ])
}

/// `check` passed on all `n` processes, and rank 0 reached the others over `devices`
/// (`1=tcp 2=shm …`), leaving nothing behind.
fn assert_checked(f: &Finished, n: u32, devices: &str) {
    assert_eq!(f.code, Some(0), "{}", f.dump());
    for line in [
        format!("[rank 0] check: devices from 0: {devices}\n"),
        format!("[rank 0] check: {n} processes ok\n"),
    ] {
        assert!(f.stdout.contains(&line), "no {line:?} in\n{}", f.dump());
    }
    f.assert_nothing_left();
}

#[test]
fn two_hosts_talk_over_tcp() {
    let rt = Runtime::new("tcp2");
    assert_checked(&check_on_nodes(&rt, 2, 1), 2, "1=tcp");
}

#[test]
fn same_host_keeps_shared_memory_next_to_a_remote_member() {
    let rt = Runtime::new("tcp3");
    assert_checked(&check_on_nodes(&rt, 3, 2), 3, "1=shm 2=tcp");
}

#[test]
fn one_host_without_overrides_uses_shared_memory() {
    let rt = Runtime::new("tcp1");
    let f = rt.run(&["run", "-n", "2", "--slots", "2", "--example", "check"]);
    assert_checked(&f, 2, "1=shm");
}

#[test]
fn a_node_address_that_is_not_an_ip_fails_the_job_with_its_name() {
    let rt = Runtime::new("tcpbad");
    let mut cmd = rt.command(&["run", "-n", "1", "--slots", "1", "--example", "check"]);
    cmd.env("DYNRES_NODE_ADDR", "node-one");
    let f = Finished::new(cmd.output().expect("run dynres"), rt.dir.clone());
    assert_ne!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stderr
            .contains("DYNRES_NODE_ADDR=\"node-one\" is not an IP address"),
        "{}",
        f.dump()
    );
}
