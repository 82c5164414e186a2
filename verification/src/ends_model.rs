//! How a process' end counts for its job (`spec/runtime.md` NODE-4, RT-3, LINK-4,
//! LINK-5): a runtime decision the resource-change models do not reach, checked here
//! with the shipped decision functions of `dynres_core::rc::ends` — the cause a node
//! daemon gives its kills ([`daemon_kill_cause_with`]) and the master's verdict on each
//! end ([`judge_with`]).
//!
//! The job: rank 0 on the master's own node, ranks 1.. on one remote node whose daemon
//! reports ends over the link (`Ended`, FIFO). Any running rank may exit 0 or fail by
//! itself, a change may remove one rank, and the master may stall past the daemon's
//! heartbeat bound, after which the daemon ends its ranks on its own (RT-3). The master
//! judges every end it learns of; the first loss ends the job (`--on-loss end`, the
//! default): it kills its own ranks and sends `Shutdown`, on which the daemon ends its
//! remaining ranks on the job's account (LINK-5). The job exits 0 only if no verdict was
//! a loss.
//!
//! Property NODE-4: a job that exits 0 has every rank finished (status 0) or removed by
//! a change — never one its daemon killed without the job asking.

use std::collections::VecDeque;

use dynres_core::bugs::Bugs;
use dynres_core::rc::ends::{KillCause, Verdict, daemon_kill_cause_with, judge_with};
use stateright::{Model, Property};

use crate::run::Outcome;

/// A rank's life as the model tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rank {
    /// Running.
    Running,
    /// Ended with this code (0–255 or 128 + signal), for this cause.
    Ended(u32, KillCause),
}

/// The daemon's view of its master.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Upstream {
    /// Heard regularly.
    Live,
    /// Silent past the bound (HB-2): the daemon ended its node (RT-3).
    Lost,
    /// The master said `Shutdown` (LINK-5).
    Shutdown,
}

/// The whole job.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EndsState {
    /// Rank 0 on the master's node, the others on the remote node.
    pub ranks: Vec<Rank>,
    /// `Ended` reports on the link, daemon → master, in order.
    pub link: VecDeque<(usize, u32, KillCause)>,
    /// The master's verdict on each rank, once it learned of its end.
    pub verdicts: Vec<Option<Verdict>>,
    /// The master ends the job (a loss under `--on-loss end`).
    pub ending: bool,
    /// The daemon's view of the master.
    pub upstream: Upstream,
    /// A change removed a rank already (one at most, to bound the space).
    pub removed: bool,
    /// The job's exit code, once it exited.
    pub exit: Option<u8>,
}

/// What can happen next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum EndsAction {
    /// A running rank exits by itself with this code.
    Exits(usize, u32),
    /// A change removes a running rank (core's `Kill`, RC-11).
    Removed(usize),
    /// The master stalls past the heartbeat bound: the daemon ends its node (RT-3).
    MasterStalls,
    /// The master reads the next `Ended` on the link.
    MasterReads,
    /// The master learns of its own rank's end.
    MasterReaps,
    /// Everything judged: the job exits.
    JobExits,
}

/// One configuration.
#[derive(Clone, Debug)]
pub struct EndsConfig {
    /// Name in the table and the golden file.
    pub name: &'static str,
    /// Ranks on the remote node.
    pub remote: usize,
    /// Planted bugs (none for the clean gate).
    pub bugs: Bugs,
}

/// SIGKILL's exit code.
const KILLED: u32 = 128 + 9;

impl EndsConfig {
    fn kill_remote_running(&self, s: &mut EndsState, cause: KillCause) {
        for r in 1..s.ranks.len() {
            if s.ranks[r] == Rank::Running {
                s.ranks[r] = Rank::Ended(KILLED, cause);
                s.link.push_back((r, KILLED, cause));
            }
        }
    }

    /// The master's verdict on rank `r`; a loss ends the job (RC-18, NODE-2).
    fn judged(&self, s: &mut EndsState, r: usize, code: u32, cause: KillCause) {
        let v = judge_with(self.bugs, code, cause);
        s.verdicts[r] = Some(v);
        if v.is_loss() && !s.ending {
            s.ending = true;
            if s.ranks[0] == Rank::Running {
                s.ranks[0] = Rank::Ended(KILLED, KillCause::JobEnding);
            }
            if s.upstream == Upstream::Live {
                s.upstream = Upstream::Shutdown;
                let cause = daemon_kill_cause_with(self.bugs, true);
                self.kill_remote_running(s, cause);
            }
        }
    }
}

impl Model for EndsConfig {
    type State = EndsState;
    type Action = EndsAction;

    fn init_states(&self) -> Vec<EndsState> {
        let n = 1 + self.remote;
        vec![EndsState {
            ranks: vec![Rank::Running; n],
            link: VecDeque::new(),
            verdicts: vec![None; n],
            ending: false,
            upstream: Upstream::Live,
            removed: false,
            exit: None,
        }]
    }

    fn actions(&self, s: &EndsState, out: &mut Vec<EndsAction>) {
        if s.exit.is_some() {
            return;
        }
        for (r, rank) in s.ranks.iter().enumerate() {
            if *rank == Rank::Running {
                out.push(EndsAction::Exits(r, 0));
                out.push(EndsAction::Exits(r, 1));
                if !s.removed && !s.ending {
                    out.push(EndsAction::Removed(r));
                }
            }
        }
        if s.upstream == Upstream::Live {
            out.push(EndsAction::MasterStalls);
        }
        if !s.link.is_empty() {
            out.push(EndsAction::MasterReads);
        }
        if matches!(s.ranks[0], Rank::Ended(..)) && s.verdicts[0].is_none() {
            out.push(EndsAction::MasterReaps);
        }
        if s.verdicts.iter().all(Option::is_some) && s.link.is_empty() {
            out.push(EndsAction::JobExits);
        }
    }

    fn next_state(&self, last: &EndsState, a: EndsAction) -> Option<EndsState> {
        let mut s = last.clone();
        match a {
            EndsAction::Exits(r, code) => {
                s.ranks[r] = Rank::Ended(code, KillCause::None);
                if r > 0 {
                    s.link.push_back((r, code, KillCause::None));
                }
            }
            EndsAction::Removed(r) => {
                s.removed = true;
                s.ranks[r] = Rank::Ended(KILLED, KillCause::Removed);
                if r > 0 {
                    s.link.push_back((r, KILLED, KillCause::Removed));
                }
            }
            EndsAction::MasterStalls => {
                s.upstream = Upstream::Lost;
                let cause = daemon_kill_cause_with(self.bugs, false);
                self.kill_remote_running(&mut s, cause);
            }
            EndsAction::MasterReads => {
                let (r, code, cause) = s.link.pop_front()?;
                self.judged(&mut s, r, code, cause);
            }
            EndsAction::MasterReaps => {
                let Rank::Ended(code, cause) = s.ranks[0] else {
                    return None;
                };
                self.judged(&mut s, 0, code, cause);
            }
            EndsAction::JobExits => {
                let lost = s.verdicts.iter().flatten().any(|v| v.is_loss());
                s.exit = Some(u8::from(lost || s.ending));
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "NODE-4 a job that exits 0 lost no rank's work",
                |_, s: &EndsState| {
                    s.exit != Some(0)
                        || s.ranks.iter().all(|r| {
                            matches!(r, Rank::Ended(0, _) | Rank::Ended(_, KillCause::Removed))
                        })
                },
            ),
            Property::sometimes("NODE-4 a job exits 0", |_, s: &EndsState| s.exit == Some(0)),
            Property::sometimes(
                "NODE-4 a stalled master's job exits non-zero",
                |_, s: &EndsState| s.exit == Some(1) && s.upstream == Upstream::Lost,
            ),
        ]
    }
}

/// The PR tier's configurations.
pub fn pr_configs() -> Vec<EndsConfig> {
    vec![EndsConfig {
        name: "ends-stall-2n-3r",
        remote: 2,
        bugs: Bugs::NONE,
    }]
}

/// Checks one configuration.
pub fn check(cfg: &EndsConfig, max_states: usize, threads: usize) -> Outcome {
    crate::run::explore_actions(cfg.name, cfg, max_states, threads)
}
