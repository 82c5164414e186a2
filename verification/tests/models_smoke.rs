//! The smallest model configurations, exhaustively, inside `cargo test`: the kernel's
//! machines must satisfy every property (and reach every outcome) even in a debug build,
//! and a planted bug must still be caught. The full gate is `dynres-verification check`.

use dynres_core::bugs::{Bug, Bugs};
use dynres_verification::models::{RcConfig, pr_configs};
use dynres_verification::planted::{Planted, hunt};
use dynres_verification::{pset_model, run};

fn config(name: &str) -> RcConfig {
    pr_configs()
        .into_iter()
        .find(|c| c.name == name)
        .expect("configuration exists")
}

#[test]
fn smallest_resource_change_model_holds_every_property() {
    let o = run::check(&config("rc-sub-1n-3e"), 1_000_000, 2);
    assert!(o.passed(), "{:#?}", o.failures);
    assert!(o.states > 1_000, "explored {} states", o.states);
}

#[test]
fn pset_operations_are_linearizable() {
    let cfg = &pset_model::pr_configs()[0];
    let o = pset_model::check(cfg, 1_000_000, 2);
    assert!(o.passed(), "{:#?}", o.failures);
}

#[test]
fn a_planted_bug_is_caught() {
    let planted = Planted {
        bug: Bug::FreeSlotBeforeExit,
        config: "rc-sub-1n-3e",
        property: "SLOT-3 a running process holds its slot",
    };
    let h = hunt(&planted, 2);
    assert!(h.caught, "{planted:?} escaped");
    assert!(!h.trace.is_empty());
    // And the same configuration without it is clean (checked above); the switch is
    // what makes the difference.
    assert_ne!(Bugs::NONE.with(Bug::FreeSlotBeforeExit), Bugs::NONE);
}
