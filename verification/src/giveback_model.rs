//! When emptied nodes go back to the resource manager (`spec/runtime.md` GROW-4,
//! RC-20), checked with the shipped machine `dynres_core::rc::giveback::GiveBack`, fed
//! as the engine feeds it: each node core releases, then whether another node that
//! would be given back is still emptying, and the time.
//!
//! The job: `nodes` nodes that would be given back. A decided change may start
//! emptying any busy node (its processes leave); core releases an emptying node once
//! its processes are reaped — or never (a process that cannot be reaped). Time is
//! discrete and bounded by `horizon`; at each tick the engine asks the machine again
//! while it holds nodes.
//!
//! Properties:
//! - GROW-4: a released node is offered back at most the hold bound after it was held
//!   (a node that never empties keeps no other for longer);
//! - GROW-4: a batch goes while another node is emptying only once the bound passed
//!   (nodes one change empties go back in one update).

use dynres_core::bugs::Bugs;
use dynres_core::rc::giveback::{GiveBack, GiveBackInput, GiveBackOutput};
use dynres_core::time::{Duration, Instant};
use stateright::{Model, Property};

use crate::run::Outcome;

/// A node's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// Its processes run.
    Busy,
    /// All its processes are leaving (core's `is_emptying`).
    Emptying,
    /// Core released it at this tick; not offered yet.
    Released(u64),
    /// Offered back (RC-20).
    Offered,
}

/// The whole job.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GbState {
    /// The current tick.
    pub now: u64,
    /// The engine's machine.
    pub hold: GiveBack,
    /// The nodes.
    pub nodes: Vec<NodeState>,
    /// When the current hold started: the first node held while others emptied.
    pub held_at: Option<u64>,
    /// A batch went while another node was emptying before the bound passed.
    pub split: bool,
}

/// What can happen next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GbAction {
    /// A tick passes; the engine asks the machine again.
    Tick,
    /// A decided change empties node `n`.
    Empty(usize),
    /// Core releases node `n`.
    Release(usize),
}

/// One configuration.
#[derive(Clone, Debug)]
pub struct GbConfig {
    /// Name in the table and the golden file.
    pub name: &'static str,
    /// Nodes that would be given back.
    pub nodes: usize,
    /// The hold bound, in ticks.
    pub bound: u64,
    /// The last tick.
    pub horizon: u64,
    /// Planted bugs (none for the clean gate).
    pub bugs: Bugs,
}

impl GbConfig {
    /// The engine's step: tell the machine whether others are emptying, and offer what
    /// it returns.
    fn ask(&self, s: &mut GbState) {
        if s.hold.held().is_empty() {
            return;
        }
        let emptying = s.nodes.contains(&NodeState::Emptying);
        let now = Instant(s.now);
        s.hold.handle(now, GiveBackInput::Emptying(emptying));
        if emptying && s.held_at.is_none() {
            s.held_at = Some(s.now);
        }
        while let Some(GiveBackOutput::Offer { nodes, .. }) = s.hold.poll_output() {
            if emptying && s.held_at.is_some_and(|t| s.now - t < self.bound) {
                s.split = true;
            }
            for n in nodes {
                s.nodes[n as usize] = NodeState::Offered;
            }
            s.held_at = None;
        }
    }
}

impl Model for GbConfig {
    type State = GbState;
    type Action = GbAction;

    fn init_states(&self) -> Vec<GbState> {
        vec![GbState {
            now: 0,
            hold: GiveBack::with_bugs(Duration(self.bound), self.bugs),
            nodes: vec![NodeState::Busy; self.nodes],
            held_at: None,
            split: false,
        }]
    }

    fn actions(&self, s: &GbState, out: &mut Vec<GbAction>) {
        if s.now < self.horizon {
            out.push(GbAction::Tick);
        }
        for (i, n) in s.nodes.iter().enumerate() {
            match n {
                NodeState::Busy => out.push(GbAction::Empty(i)),
                NodeState::Emptying => out.push(GbAction::Release(i)),
                NodeState::Released(_) | NodeState::Offered => {}
            }
        }
    }

    fn next_state(&self, last: &GbState, a: GbAction) -> Option<GbState> {
        let mut s = last.clone();
        match a {
            GbAction::Tick => s.now += 1,
            GbAction::Empty(i) => {
                s.nodes[i] = NodeState::Emptying;
                return Some(s);
            }
            GbAction::Release(i) => {
                s.nodes[i] = NodeState::Released(s.now);
                s.hold
                    .handle(Instant(s.now), GiveBackInput::Released { node: i as u32 });
            }
        }
        self.ask(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "GROW-4 a released node goes back within the hold bound",
                |m: &GbConfig, s: &GbState| {
                    s.held_at.is_none_or(|t| s.now - t <= m.bound)
                        && s.nodes.iter().all(|n| match n {
                            NodeState::Released(_) => s.held_at.is_some(),
                            _ => true,
                        })
                },
            ),
            Property::always(
                "GROW-4 nodes emptied together go back together",
                |_, s: &GbState| !s.split,
            ),
            Property::sometimes("GROW-4 two nodes go back in one batch", |_, s: &GbState| {
                s.nodes.iter().filter(|n| **n == NodeState::Offered).count() >= 2
                    && s.held_at.is_none()
            }),
        ]
    }
}

/// The PR tier's configurations.
pub fn pr_configs() -> Vec<GbConfig> {
    vec![GbConfig {
        name: "giveback-3n",
        nodes: 3,
        bound: 3,
        horizon: 7,
        bugs: Bugs::NONE,
    }]
}

/// Checks one configuration.
pub fn check(cfg: &GbConfig, max_states: usize, threads: usize) -> Outcome {
    crate::run::explore_actions(cfg.name, cfg, max_states, threads)
}
