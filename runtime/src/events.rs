//! The run's events for a machine-readable log (`dynres run --event-log FILE`, one JSON
//! object per line; `dynres plot FILE` draws it): the job's start, every resource
//! change's status, every process' start and end with its node. Emitted as `tracing`
//! events of target [`TARGET`] by the master process, so that the runtime writes nothing
//! itself: the `dynres` binary installs the layer that writes them, and keeps them out
//! of the log on stderr.

/// The `tracing` target of run events.
pub const TARGET: &str = "dynres::events";

/// The job started: its id, first size and hosts (in node order, comma-separated;
/// `[local]` on one host).
pub fn job(job: &str, n: u32, hosts: &[String]) {
    let hosts = if hosts.is_empty() {
        "[local]".to_string()
    } else {
        hosts.join(",")
    };
    tracing::info!(target: TARGET, event = "job", job, n, hosts = hosts.as_str());
}

/// A resource change reached `status` (ANNOUNCED, PENDING, FINALIZED, ABORTED).
pub fn change(kind: &str, delta: &str, added: usize, removed: usize, status: &str) {
    tracing::info!(
        target: TARGET,
        event = "change",
        kind,
        delta,
        added = added as u64,
        removed = removed as u64,
        status
    );
}

/// Process `rank` started on `node`.
pub fn start(rank: u32, node: u32) {
    tracing::info!(target: TARGET, event = "start", rank, node);
}

/// Process `rank` on `node` ended with `code` (its exit code, or 128 + signal; -1 if
/// unknown: a lost node).
pub fn end(rank: u32, node: u32, code: i64) {
    tracing::info!(target: TARGET, event = "end", rank, node, code);
}

/// `node`'s daemon is gone (lost, or ended with the job): its processes that did not
/// report an end are gone with it.
pub fn node_gone(node: u32) {
    tracing::info!(target: TARGET, event = "node_gone", node);
}
