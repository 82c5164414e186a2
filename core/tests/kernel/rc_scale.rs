//! The kernel at scale, by counting (issue 29, goal 4): the `scale` example's in-memory
//! cluster (`core/examples/scale/cluster.rs`: real machines, real wire frames) at small
//! sizes, pinning how the messages of each operation grow with the job. Timing is the
//! example's business (`cargo run --release -p dynres-core --example scale`); here only
//! counts that a change of complexity would break.

use crate::scale_cluster::{APP, Cluster, Counts, Link, config};
use dynres_core::rc::ChangeRequest;

/// Counts of the start, the ADD and SUB of one node's worth, a pset operation on the
/// world, a fence and a modex over the application, for `nodes` × `ppn` (on `nodes + 1` nodes).
fn ops(nodes: u32, ppn: u32) -> [Counts; 6] {
    let mut c = Cluster::start(config(nodes, ppn));
    assert_eq!(c.processes() as u32, nodes * ppn);
    let start = c.take_counts();
    c.change(ChangeRequest::add(APP, ppn));
    let add = c.take_counts();
    assert_eq!(c.processes() as u32, (nodes + 1) * ppn);
    c.change(ChangeRequest::sub(APP, ppn));
    let sub = c.take_counts();
    assert_eq!(c.processes() as u32, nodes * ppn);
    c.pset_op_on_world("mpi://app/app/w");
    let pset_op = c.take_counts();
    assert_eq!(
        c.fence(),
        u64::from(nodes * ppn),
        "every member was released"
    );
    let fence = c.take_counts();
    assert_eq!(c.modex(), u64::from(nodes * ppn), "every member completed");
    let modex = c.take_counts();
    [start, add, sub, pset_op, fence, modex]
}

/// Messages per kind of master → daemon message.
fn kinds(c: &Counts) -> Vec<(&'static str, u64)> {
    c.to_daemon_kinds.iter().map(|(k, v)| (*k, v.0)).collect()
}

/// The message count of every operation is linear: a replica update per node and a
/// constant number of messages per process that the operation starts, never per pair
/// of nodes or per process of the world. `n` is the job's nodes (`nodes` + the free
/// one the ADD fills).
#[test]
fn messages_per_operation_grow_with_nodes_and_affected_processes_only() {
    for (nodes, ppn) in [(1, 2), (1, 4), (2, 2), (4, 2), (4, 4), (8, 4), (16, 3)] {
        let n = u64::from(nodes) + 1;
        let (d, p) = (u64::from(nodes), u64::from(ppn));
        let [start, add, sub, pset_op, fence, modex] = ops(nodes, ppn);
        let at = format!("{nodes} nodes × {ppn}");
        // Start: every node's replica (WORLD, the application's pset, the job data),
        // and one launch per node with processes.
        assert_eq!(
            kinds(&start),
            [("DefinePset", 2 * n), ("JobData", n), ("Launch", d)],
            "{at}"
        );
        assert_eq!(start.messages(), 4 * n - 1, "{at}");
        // ADD of one node's worth: three change and three pset updates and the job data
        // per node, one launch, and per new process its confirm (a query answered
        // locally, the accept lookup, the fence and the report through the master).
        assert_eq!(
            kinds(&add),
            [
                ("Change", 3 * n),
                ("DefinePset", 3 * n),
                ("JobData", n),
                ("Launch", 1),
                ("Reply", 3 + 3 * p)
            ],
            "{at}"
        );
        assert_eq!(add.link(Link::ToMaster).0, 3 + 3 * p, "{at}");
        assert_eq!(add.link(Link::ClientToDaemon).0, 4 + 4 * p, "{at}");
        assert_eq!(add.link(Link::DaemonToClient).0, 4 + 4 * p, "{at}");
        // SUB: the same replica updates, no launch, the removed processes' exits.
        assert_eq!(
            kinds(&sub),
            [
                ("Change", 3 * n),
                ("DefinePset", 3 * n),
                ("JobData", n),
                ("Reply", 2)
            ],
            "{at}"
        );
        assert_eq!(sub.link(Link::ToMaster).0, 2 + p, "{at}");
        // A pset operation on the world: the client's request forwarded, the reply back
        // to it, one definition per node.
        assert_eq!(kinds(&pset_op), [("DefinePset", n), ("Reply", 1)], "{at}");
        assert_eq!(pset_op.messages(), n + 4, "{at}");
        // A fence: every member's request goes through the master and back (it is not
        // gathered per node, unlike the modex).
        assert_eq!(fence.link(Link::ToMaster).0, d * p, "{at}");
        assert_eq!(kinds(&fence), [("Reply", d * p)], "{at}");
        assert_eq!(fence.messages(), 4 * d * p, "{at}");
        // The modex: one batch per node up and one table per node down (MODEX-1,
        // MODEX-3), one request and one reply per member.
        assert_eq!(modex.link(Link::ToMaster).0, d, "{at}");
        assert_eq!(kinds(&modex), [("ModexDone", d)], "{at}");
        assert_eq!(modex.messages(), 2 * d + 2 * d * p, "{at}");
    }
}

/// Bytes of one kind of master → daemon message.
fn bytes(c: &Counts, kind: &str) -> u64 {
    c.to_daemon_kinds.get(kind).map_or(0, |v| v.1)
}

/// RC-23: the replica's updates carry member lists as runs, so what a pset update or a
/// job-data update costs a daemon does not grow with the processes in it. The same
/// operations on the same nodes with 2 and with 64 processes per node send the same
/// `DefinePset` and `JobData` bytes (as lists they would be ~32 times as many).
#[test]
fn replica_updates_cost_the_same_bytes_at_any_job_size() {
    for nodes in [1, 4] {
        let small = ops(nodes, 2);
        let large = ops(nodes, 64);
        for (op, (s, l)) in ["start", "add", "sub", "pset_op"]
            .iter()
            .zip(small.iter().zip(large.iter()))
        {
            for kind in ["DefinePset", "JobData"] {
                assert_eq!(
                    bytes(s, kind),
                    bytes(l, kind),
                    "{nodes} nodes: {op}'s {kind} bytes grew with the processes per node"
                );
            }
        }
        assert!(bytes(&large[0], "DefinePset") > 0 && bytes(&large[0], "JobData") > 0);
    }
}
