//! dynres-core's integration tests, one test binary: a mutant of the kernel
//! (`verification/nightly.sh`'s cargo-mutants stage) then relinks one binary, not
//! seventeen, which was most of each mutant's time. Each module holds one area's tests
//! and names the spec rules it covers. `mutants_kill_trace.rs` stays a binary of its own
//! (its `tracing` subscriber must not share a process with these tests).

// The harnesses are shared with `verification/src/record.rs`, which includes them by
// path from where they are.
#[path = "../common/mod.rs"]
mod common;
#[path = "../spawn_sim/mod.rs"]
mod spawn_sim;
// The scale example's cluster (issue 29): the same simulator, counted at small sizes.
#[path = "../../examples/scale/cluster.rs"]
mod scale_cluster;

mod fuzz_seeds;
mod mutants_kill;
mod mutants_kill_rc;
mod proc_runs;
mod psets_props;
mod psets_rules;
mod rc_flow;
mod rc_footprint;
mod rc_growth;
mod rc_hardening;
mod rc_link;
mod rc_modex;
mod rc_names;
mod rc_node_return;
mod rc_scale;
mod rc_spawn;
mod rc_standing;
mod rc_wire;
mod spawn_bootstraps;
mod spawn_connect_join;
mod spawn_failures;
mod spawn_forged;

/// The key of the ports the tests write as text (`…:5a5a…`, 64 hex digits): the tests'
/// hand-made datagrams are sealed with it (SPAWN-22).
pub(crate) const KEY: dynres_core::spawn::BootKey = dynres_core::spawn::BootKey([0x5a; 32]);
