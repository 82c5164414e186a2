//! The planted-bug corpus: every bug is a named switch in `dynres-core` (feature
//! `planted-bugs`), and the gate demands that the model finds a counterexample for the
//! property that guards against it (`spec/verification.md` §4).

use std::collections::BTreeSet;
use std::time::Instant;

use dynres_core::bugs::{Bug, Bugs};
use stateright::{Checker, HasDiscoveries, Model};

use crate::models::{RcConfig, pr_configs};
use crate::run::render_trace;

/// One bug, where to plant it and what must catch it.
#[derive(Clone, Debug)]
pub struct Planted {
    /// The switch.
    pub bug: Bug,
    /// The configuration it is planted in.
    pub config: &'static str,
    /// The property that must fail.
    pub property: &'static str,
}

/// The corpus.
pub fn corpus() -> Vec<Planted> {
    use Bug::*;
    let p = |bug, config, property| Planted {
        bug,
        config,
        property,
    };
    vec![
        p(
            AnnounceAfterLaunch,
            "rc-add-1n-2e-1new",
            "RC-3 announced before launched",
        ),
        p(
            FinalizeOnAccept,
            "rc-add-1n-2e-1new",
            "RC-9 ADD finalized => every new process confirmed",
        ),
        p(
            ReuseRankAfterAbort,
            "rc-add-add-1n-2e-2new",
            "PSET-20 ranks are never reused",
        ),
        p(
            SkipRollback,
            "rc-add-1n-2e-1new",
            "RC-12 ABORTED => rolled back",
        ),
        p(
            RollbackOldVersions,
            "rc-add-1n-2e-1new",
            "RC-14 replicas never go backwards",
        ),
        p(
            ConfirmAfterAbort,
            "rc-add-1n-2e-1new",
            "RC-1 status only moves forward",
        ),
        p(
            StaleReplica,
            "rc-add-1n-2e-1new",
            "RC-14 replicas match the master when quiet",
        ),
        p(
            FreeSlotBeforeExit,
            "rc-sub-1n-3e",
            "SLOT-3 a running process holds its slot",
        ),
        p(
            NoKillOnAbort,
            "rc-add-1n-2e-1new",
            "RC-12 ABORTED => added processes killed",
        ),
        p(
            AbortAfterFinalize,
            "rc-add-1n-2e-1new",
            "RC-1 status only moves forward",
        ),
        p(
            VersionBumpOnAttrUpdate,
            "rc-sub-1n-3e",
            "PSET-10 versions rise exactly with membership",
        ),
        p(
            LoseRecursiveApplication,
            "rc-sub-1n-3e",
            "PSET-34 inactive psets follow a finalized SUB",
        ),
    ]
}

/// The result of hunting one planted bug.
#[derive(Clone, Debug)]
pub struct Hunt {
    /// What was planted.
    pub planted: Planted,
    /// Whether the expected property produced a counterexample.
    pub caught: bool,
    /// Seconds to the counterexample (or to exhaustion).
    pub seconds: f64,
    /// States explored.
    pub states: usize,
    /// The counterexample, one line per step.
    pub trace: String,
}

/// Plants one bug and searches for the expected counterexample.
pub fn hunt(planted: &Planted, threads: usize) -> Hunt {
    let base = pr_configs()
        .into_iter()
        .find(|c| c.name == planted.config)
        .expect("corpus names existing configurations");
    let cfg = RcConfig {
        bugs: Bugs::NONE.with(planted.bug),
        ..base
    };
    let model = cfg.model();
    let started = Instant::now();
    let checker = model
        .clone()
        .checker()
        .threads(threads)
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([planted.property])))
        .spawn_dfs()
        .join();
    let seconds = started.elapsed().as_secs_f64();
    let found = checker.discovery(planted.property);
    Hunt {
        planted: planted.clone(),
        caught: found.is_some(),
        seconds,
        states: checker.unique_state_count(),
        trace: found.map(|p| render_trace(&model, p)).unwrap_or_default(),
    }
}
