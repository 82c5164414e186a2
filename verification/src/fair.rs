//! Liveness under fairness (`spec/verification.md` §3.3): the resource-change models with
//! their deadlines made fair.
//!
//! In the plain models a deadline may fire at any point, so a change may always end
//! ABORTED by its timer: "every terminal state has every change decided" then proves
//! only that a timer is armed. A fair model runs the same actors, but orders what may
//! happen next in three ranks and lets only the lowest enabled rank happen:
//!
//! 1. message deliveries (every interleaving of them stays explored);
//! 2. what processes do on their own: a root's poll (its accept then blocks until the
//!    decision), a new process starting its query ([`RcTimer::Begin`], so that its
//!    confirm may come after the root's accept as well as before);
//! 3. deadlines: the master's and the daemons' timers.
//!
//! A grant of the resource manager comes before processes act: a root that polls while
//! the slots it waits for are being granted would only spend its poll budget, a bound
//! of the model. That is the fairness assumption of a run with no fault: every message
//! arrives, and every process acts, before any deadline expires. Under it the protocol
//! must decide every request, queued ones included, every change it starts must end
//! FINALIZED, and no deadline may pass while a change is undecided — a change that
//! waits for a timer although nothing failed is a liveness bug that no safety property
//! sees.

use stateright::actor::ActorModelAction;
use stateright::{Expectation, Model, Property};

use crate::adapter::{Msg, RcTimer, Ticket};
use crate::models::{RcConfig, RcModel, RcModelState, every_request_decided, master, terminal};
use dynres_core::rc::RcStatus;

/// A resource-change model under fair scheduling (see the module doc).
#[derive(Clone)]
pub struct FairRc {
    /// The configuration's model, built with new processes waiting for `Begin`.
    pub inner: RcModel,
    /// Processes may crash (`RcConfig::fair_with_crashes`): a change may end ABORTED,
    /// but only by a crash, never by waiting for its deadline.
    pub crashes: bool,
}

/// Which configurations have a fair model: those with a root that runs the adaptation
/// loop (modex configurations have none, so their changes are decided by deadline by
/// design) and without faults, or whose only faults are crashing processes (no node
/// loss, no rogue client).
pub fn fair_configs() -> Vec<RcConfig> {
    crate::models::pr_configs()
        .into_iter()
        .filter(|c| c.fair_eligible() || c.fair_with_crashes())
        .collect()
}

/// The name of a configuration's fair model.
pub fn fair_name(cfg: &RcConfig) -> String {
    format!("fair-{}", cfg.name)
}

impl FairRc {
    /// The fair model of `cfg`.
    pub fn new(cfg: &RcConfig) -> FairRc {
        FairRc {
            inner: cfg.build(true),
            crashes: cfg.fair_with_crashes(),
        }
    }
}

type Action = ActorModelAction<Msg, RcTimer, ()>;

/// The rank of an action (see the module doc); only the lowest enabled one may happen.
fn rank(a: &Action) -> u8 {
    match a {
        ActorModelAction::Deliver { .. } | ActorModelAction::Timeout(_, RcTimer::Grant) => 0,
        ActorModelAction::Timeout(_, RcTimer::Master | RcTimer::Daemon) => 2,
        ActorModelAction::Timeout(..) => 1,
        // Drops and crashes are faults: fair models have none.
        _ => 3,
    }
}

impl Model for FairRc {
    type State = RcModelState;
    type Action = Action;

    fn init_states(&self) -> Vec<Self::State> {
        self.inner.init_states()
    }

    fn actions(&self, state: &Self::State, actions: &mut Vec<Self::Action>) {
        let mut all = Vec::new();
        self.inner.actions(state, &mut all);
        let Some(lowest) = all.iter().map(rank).min() else {
            return;
        };
        actions.extend(all.into_iter().filter(|a| rank(a) == lowest));
    }

    fn next_state(&self, last: &Self::State, action: Self::Action) -> Option<Self::State> {
        self.inner.next_state(last, action)
    }

    fn format_action(&self, action: &Self::Action) -> String {
        self.inner.format_action(action)
    }

    fn within_boundary(&self, state: &Self::State) -> bool {
        Model::within_boundary(&self.inner, state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let decided = Property {
            expectation: Expectation::Always,
            name: "RC-15 under fairness every request is decided, queued ones included",
            condition: |_, s| !terminal(s) || every_request_decided(s),
        };
        let requests_decided = Property {
            expectation: Expectation::Sometimes,
            name: "under fairness every request is decided",
            condition: |_, s| {
                let m = master(s);
                terminal(s) && m.tickets.iter().all(|(_, t)| *t != Ticket::Waiting)
            },
        };
        if self.crashes {
            return vec![
                decided,
                Property {
                    expectation: Expectation::Always,
                    name: "RC-10 RC-18 under fairness with crashes no change waits for its deadline",
                    // A crash decides what it affects at once (an added process' exit
                    // aborts its change, RC-10; a loss its application's, RC-18), and
                    // everything else goes on as without it: a deadline that fires while
                    // a change is undecided means the protocol waited for a timer.
                    condition: |_, s| master(s).stalled == 0,
                },
                // Without these the property above could hold on a model in which no
                // crash decides anything, or nothing ends.
                Property {
                    expectation: Expectation::Sometimes,
                    name: "under fairness a crash aborts a change",
                    condition: |_, s| master(s).log.iter().any(|(_, st)| *st == RcStatus::Aborted),
                },
                requests_decided,
            ];
        }
        vec![
            decided,
            Property {
                expectation: Expectation::Always,
                name: "RC-9 RC-8 under fairness every change ends FINALIZED, no deadline passing first",
                condition: |_, s| {
                    let m = master(s);
                    // A deadline that fires while a change is undecided means the
                    // protocol waited for a timer, not for a process.
                    m.stalled == 0
                        && (!terminal(s)
                            || m.master
                                .all_changes()
                                .all(|c| c.status == RcStatus::Finalized))
                },
            },
            // Without these the properties above could hold on a model that never
            // starts a change or never ends.
            Property {
                expectation: Expectation::Sometimes,
                name: "under fairness a change is FINALIZED",
                condition: |_, s| {
                    master(s)
                        .log
                        .iter()
                        .any(|(_, st)| *st == RcStatus::Finalized)
                },
            },
            requests_decided,
        ]
    }
}
