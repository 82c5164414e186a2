//! The runtime's failure detector and link lifecycle (`spec/runtime.md` HB-1..3,
//! NODE-1, NODE-4, RT-3, RC-20), checked with the shipped machines of
//! `dynres_core::rc::liveness`: the master's [`Liveness`] and each node daemon's
//! [`MasterWatch`], fed by this model exactly as the runtime's drivers feed them.
//!
//! The job: `nodes` daemons launched at time 0. Time is discrete (the heartbeat interval
//! is one tick) and bounded by `horizon`; at each tick both sides' machines are woken.
//! A daemon may connect (or its agent exit) at any time; once running it may stall
//! (a hung host: it neither reads nor writes) or crash (its link closes), and the
//! master may give it back (RC-20: `Shutdown`, then its daemon closes the link) — one
//! such event per run, to bound the space. Frames on a link are delivered in order,
//! after any delay: the model records when the master last *received* a frame from
//! each node, the ground truth the detector's answers are judged against.
//!
//! Properties:
//! - HB-2 NODE-1: a node the master has not heard from for longer than the bound is
//!   declared lost (the silent loss: a daemon that stopped is never lost);
//! - HB-3: a daemon not connected within its bound is declared lost;
//! - HB-2 HB-3 NODE-1: a node is declared lost only for a reason — its link ended, its
//!   agent exited, or it was silent or unconnected past its bound (no false loss);
//! - RC-20: a node given back is never declared lost;
//! - RT-3 HB-2: a daemon whose master fell silent past the bound ends its node;
//! - NODE-4: a daemon that ended its node on its own reports its kills as a loss.

use dynres_core::bugs::Bugs;
use dynres_core::rc::ends::{KillCause, daemon_kill_cause_with, judge_with};
use dynres_core::rc::liveness::{
    Liveness, LivenessConfig, LivenessInput, LivenessOutput, Loss, MasterWatch, NodeLink,
    WatchInput, WatchOutput,
};
use dynres_core::time::{Duration, Instant};
use stateright::{Model, Property};

use crate::run::Outcome;

/// A daemon's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Its agent runs; it has not authenticated.
    Launching,
    /// Authenticated; it reads and writes.
    Running,
    /// Hung: it neither reads nor writes (the master must find it silent).
    Stalled,
    /// It ended its node's processes with this cause and closed its link.
    Ended(KillCause),
    /// Gone without a daemon: its agent exited, or it was refused.
    Absent,
}

/// One direction of a link: whether frames are in flight, and whether the sender
/// closed it after them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Wire {
    /// Frames sent and not yet received.
    pub pending: bool,
    /// The sender closed the link (after `pending`).
    pub closed: bool,
    /// (Master → daemon) a `Shutdown` is among the frames (LINK-5).
    pub shutdown: bool,
}

/// One node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    /// The daemon's life.
    pub phase: Phase,
    /// Its view of the master, once connected.
    pub watch: Option<MasterWatch>,
    /// Daemon → master.
    pub up: Wire,
    /// Master → daemon.
    pub down: Wire,
    /// When the master last received a frame from it (or it authenticated).
    pub heard_at: u64,
    /// When it last received a frame from the master (or authenticated).
    pub daemon_heard_at: u64,
    /// The master gave it back (RC-20).
    pub given_back: bool,
    /// The master declared it lost.
    pub lost: bool,
}

/// The whole job.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LiveState {
    /// The current tick.
    pub now: u64,
    /// The master's detector.
    pub master: Liveness,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// A stall, crash or give-back happened already (one per run).
    pub event: bool,
    /// A node was declared lost without a reason (a false loss).
    pub false_loss: bool,
    /// A node given back was declared lost.
    pub returned_lost: bool,
    /// A daemon that gave up on its master reported its kills as the job's will.
    pub loss_as_kill: bool,
}

/// What can happen next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LiveAction {
    /// One heartbeat interval passes; both sides' machines are woken.
    Tick,
    /// Node `n`'s daemon authenticates (AUTH-5).
    Connect(usize),
    /// Node `n`'s launch agent exits before its daemon authenticated.
    AgentExits(usize),
    /// The master receives what node `n` sent.
    DeliverUp(usize),
    /// The master reads node `n`'s link's end.
    CloseUp(usize),
    /// Node `n`'s daemon receives what the master sent.
    DeliverDown(usize),
    /// Node `n`'s daemon hangs.
    Stall(usize),
    /// Node `n`'s host resets its link.
    Crash(usize),
    /// The master gives node `n` back (RC-20).
    GiveBack(usize),
}

/// One configuration.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// Name in the table and the golden file.
    pub name: &'static str,
    /// Daemons.
    pub nodes: usize,
    /// Heartbeats missed before a link is dead (HB-2).
    pub silent_beats: u32,
    /// Ticks a daemon has to connect (HB-3).
    pub connect_ticks: u64,
    /// The last tick.
    pub horizon: u64,
    /// Planted bugs (none for the clean gate).
    pub bugs: Bugs,
}

/// One tick of the model's clock (the heartbeat interval).
const TICK: u64 = 1;

impl LiveConfig {
    fn cfg(&self) -> LivenessConfig {
        LivenessConfig {
            heartbeat: Duration(TICK),
            silent_beats: self.silent_beats,
            connect_bound: Duration(self.connect_ticks),
        }
    }

    fn bound(&self) -> u64 {
        u64::from(self.silent_beats)
    }

    /// Feeds the master `input` and carries out what it decides; `reason`: the input
    /// itself justifies a loss (a link's or an agent's end).
    fn master(&self, s: &mut LiveState, input: LivenessInput, reason: bool) {
        let now = Instant(s.now);
        let _ = s.master.handle(now, input);
        while let Some(out) = s.master.poll_output() {
            match out {
                LivenessOutput::Heartbeat { node } => {
                    s.nodes[node as usize].down.pending = true;
                }
                LivenessOutput::Lost { node, loss } => {
                    let n = &mut s.nodes[node as usize];
                    let justified = reason
                        || match loss {
                            Loss::NeverConnected(_) => {
                                n.phase == Phase::Launching && s.now > self.connect_ticks
                            }
                            Loss::Silent(_) => s.now - n.heard_at > self.bound(),
                            _ => false,
                        };
                    s.false_loss |= !justified;
                    s.returned_lost |= n.given_back;
                    n.lost = true;
                    // The driver closes a lost node's link.
                    n.down.closed = true;
                    let _ = s.master.handle(now, LivenessInput::Dropped { node });
                }
            }
        }
    }

    /// Feeds node `i`'s watch `input` and carries out what it decides.
    fn daemon(&self, s: &mut LiveState, i: usize, input: WatchInput) {
        let n = &mut s.nodes[i];
        let Some(w) = &mut n.watch else {
            return;
        };
        w.handle(Instant(s.now), input);
        let mut silent = false;
        while let Some(out) = w.poll_output() {
            match out {
                WatchOutput::Heartbeat => n.up.pending = true,
                WatchOutput::MasterSilent(_) => silent = true,
            }
        }
        if silent {
            self.daemon_ends(s, i, false);
        }
    }

    /// RT-3, LINK-5: node `i`'s daemon kills its processes and closes its link.
    fn daemon_ends(&self, s: &mut LiveState, i: usize, master_said_so: bool) {
        let cause = daemon_kill_cause_with(self.bugs, master_said_so);
        if !master_said_so && !judge_with(self.bugs, 128 + 9, cause).is_loss() {
            s.loss_as_kill = true;
        }
        let n = &mut s.nodes[i];
        n.phase = Phase::Ended(cause);
        n.watch = None;
        n.up.closed = true;
    }
}

impl Model for LiveConfig {
    type State = LiveState;
    type Action = LiveAction;

    fn init_states(&self) -> Vec<LiveState> {
        let mut master = Liveness::with_bugs(self.cfg(), self.bugs);
        for node in 0..self.nodes {
            let _ = master.handle(Instant(0), LivenessInput::Launched { node: node as u32 });
        }
        let node = Node {
            phase: Phase::Launching,
            watch: None,
            up: Wire::default(),
            down: Wire::default(),
            heard_at: 0,
            daemon_heard_at: 0,
            given_back: false,
            lost: false,
        };
        vec![LiveState {
            now: 0,
            master,
            nodes: vec![node; self.nodes],
            event: false,
            false_loss: false,
            returned_lost: false,
            loss_as_kill: false,
        }]
    }

    fn actions(&self, s: &LiveState, out: &mut Vec<LiveAction>) {
        if s.now < self.horizon {
            out.push(LiveAction::Tick);
        }
        for (i, n) in s.nodes.iter().enumerate() {
            if n.phase == Phase::Launching {
                out.push(LiveAction::Connect(i));
                out.push(LiveAction::AgentExits(i));
            }
            if n.up.pending {
                out.push(LiveAction::DeliverUp(i));
            } else if n.up.closed {
                out.push(LiveAction::CloseUp(i));
            }
            if n.phase == Phase::Running && (n.down.pending || n.down.closed) {
                out.push(LiveAction::DeliverDown(i));
            }
            if n.phase == Phase::Running && !s.event {
                out.push(LiveAction::Stall(i));
                out.push(LiveAction::Crash(i));
                if matches!(s.master.link(i as u32), Some(NodeLink::Up(_))) {
                    out.push(LiveAction::GiveBack(i));
                }
            }
        }
    }

    fn next_state(&self, last: &LiveState, a: LiveAction) -> Option<LiveState> {
        let mut s = last.clone();
        let node = |i: usize| i as u32;
        match a {
            LiveAction::Tick => {
                s.now += TICK;
                for i in 0..s.nodes.len() {
                    if s.nodes[i].phase == Phase::Running {
                        self.daemon(&mut s, i, WatchInput::Timeout);
                    }
                }
                if s.master.poll_timeout().is_some_and(|t| t.0 <= s.now) {
                    self.master(&mut s, LivenessInput::Timeout, false);
                }
            }
            LiveAction::Connect(i) => {
                let now = Instant(s.now);
                if s.master
                    .handle(now, LivenessInput::Authenticated { node: node(i) })
                    .is_err()
                {
                    // AUTH-5: refused (its node was lost meanwhile).
                    s.nodes[i].phase = Phase::Absent;
                    return Some(s);
                }
                let n = &mut s.nodes[i];
                n.phase = Phase::Running;
                n.watch = Some(MasterWatch::with_bugs(node(i), self.cfg(), now, self.bugs));
                n.heard_at = s.now;
                n.daemon_heard_at = s.now;
            }
            LiveAction::AgentExits(i) => {
                s.nodes[i].phase = Phase::Absent;
                self.master(&mut s, LivenessInput::AgentExited { node: node(i) }, true);
            }
            LiveAction::DeliverUp(i) => {
                s.nodes[i].up.pending = false;
                s.nodes[i].heard_at = s.now;
                self.master(&mut s, LivenessInput::Heard { node: node(i) }, false);
            }
            LiveAction::CloseUp(i) => {
                s.nodes[i].up.closed = false;
                self.master(&mut s, LivenessInput::LinkEnded { node: node(i) }, true);
            }
            LiveAction::DeliverDown(i) => {
                let down = std::mem::take(&mut s.nodes[i].down);
                s.nodes[i].daemon_heard_at = s.now;
                self.daemon(&mut s, i, WatchInput::Heard);
                if s.nodes[i].phase == Phase::Running && (down.shutdown || down.closed) {
                    // LINK-5 on `Shutdown`; RT-3 on a closed link.
                    self.daemon_ends(&mut s, i, down.shutdown);
                }
            }
            LiveAction::Stall(i) => {
                s.event = true;
                s.nodes[i].phase = Phase::Stalled;
            }
            LiveAction::Crash(i) => {
                s.event = true;
                let n = &mut s.nodes[i];
                n.phase = Phase::Ended(KillCause::None);
                n.watch = None;
                n.up.closed = true;
            }
            LiveAction::GiveBack(i) => {
                s.event = true;
                let n = &mut s.nodes[i];
                n.given_back = true;
                n.down.pending = true;
                n.down.shutdown = true;
                self.master(&mut s, LivenessInput::Returned { node: node(i) }, false);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "HB-2 NODE-1 a node silent past the bound is declared lost",
                |m: &LiveConfig, s: &LiveState| {
                    s.nodes.iter().enumerate().all(|(i, n)| {
                        !matches!(s.master.link(i as u32), Some(NodeLink::Up(_)))
                            || s.now - n.heard_at <= m.bound()
                    })
                },
            ),
            Property::always(
                "HB-3 a daemon not connected within its bound is declared lost",
                |m: &LiveConfig, s: &LiveState| {
                    (0..s.nodes.len()).all(|i| {
                        !matches!(s.master.link(i as u32), Some(NodeLink::Starting { .. }))
                            || s.now <= m.connect_ticks
                    })
                },
            ),
            Property::always(
                "HB-2 HB-3 NODE-1 a node is declared lost only for a reason",
                |_, s: &LiveState| !s.false_loss,
            ),
            Property::always(
                "RC-20 a node given back is never declared lost",
                |_, s: &LiveState| !s.returned_lost,
            ),
            Property::always(
                "RT-3 HB-2 a daemon whose master fell silent ends its node",
                |m: &LiveConfig, s: &LiveState| {
                    s.nodes.iter().all(|n| {
                        n.phase != Phase::Running || s.now - n.daemon_heard_at <= m.bound()
                    })
                },
            ),
            Property::always(
                "NODE-4 a daemon that ends its node on its own reports a loss",
                |_, s: &LiveState| !s.loss_as_kill,
            ),
            Property::sometimes(
                "HB-2 a stalled node is declared lost",
                |_, s: &LiveState| s.nodes.iter().any(|n| n.phase == Phase::Stalled && n.lost),
            ),
            Property::sometimes(
                "RC-20 a node given back ends on Shutdown",
                |_, s: &LiveState| {
                    s.nodes.iter().any(|n| {
                        n.given_back
                            && n.phase == Phase::Ended(KillCause::JobEnding)
                            && !n.up.closed
                    })
                },
            ),
            Property::sometimes(
                "RT-3 a daemon gives up on a silent master",
                |_, s: &LiveState| {
                    s.nodes
                        .iter()
                        .any(|n| n.phase == Phase::Ended(KillCause::NodeEnding))
                },
            ),
        ]
    }
}

/// The PR tier's configurations.
pub fn pr_configs() -> Vec<LiveConfig> {
    vec![LiveConfig {
        name: "liveness-2n-3b",
        nodes: 2,
        silent_beats: 3,
        connect_ticks: 2,
        horizon: 6,
        bugs: Bugs::NONE,
    }]
}

/// Checks one configuration.
pub fn check(cfg: &LiveConfig, max_states: usize, threads: usize) -> Outcome {
    crate::run::explore_actions(cfg.name, cfg, max_states, threads)
}
