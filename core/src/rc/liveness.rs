//! The failure detector and the lifecycle of master ↔ daemon links (`spec/runtime.md`
//! HB-1..3, NODE-1, RT-2, RT-3, LINK-5, LINK-6, RC-20), as sans-I/O machines in the
//! kernel's shape: the driver passes what happened on a link and the current time to
//! `handle`, sends what `poll_output` asks for, and wakes the machine at
//! `poll_timeout`. They never read a clock and never touch a socket, so the decision
//! "this node is lost" (and "this one is not") is tested in memory and checked by the
//! gate (`verification/src/liveness_model.rs`).
//!
//! - [`Liveness`]: the master's view of every other node's daemon — started, up,
//!   lost or given back — with the heartbeats it owes each (HB-1) and the losses it
//!   declares (HB-2, HB-3, NODE-1).
//! - [`MasterWatch`]: a node daemon's view of its master (HB-1, HB-2, RT-3).
//!
//! Both record their transitions for trace conformance (`spec/verification.md` §6;
//! roles `liveness` and `master-watch`, encodings in [`super::trace`]).

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use super::trace;
use crate::bugs::{Bug, Bugs};
use crate::time::{Duration, Instant};

/// HB-2: heartbeats missed before a link counts as dead.
pub const SILENT_BEATS: u32 = 10;

/// HB-3: how long a daemon has to connect and authenticate after its launch.
pub const CONNECT_BOUND: Duration = Duration::from_secs(30);

/// The detector's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LivenessConfig {
    /// The heartbeat interval (HB-1, `heartbeat_ms`).
    pub heartbeat: Duration,
    /// Heartbeats missed before a link counts as dead (HB-2).
    pub silent_beats: u32,
    /// How long a launched daemon has to authenticate (HB-3).
    pub connect_bound: Duration,
}

impl LivenessConfig {
    /// The spec's bounds for heartbeat interval `heartbeat`.
    pub fn new(heartbeat: Duration) -> Self {
        LivenessConfig {
            heartbeat,
            silent_beats: SILENT_BEATS,
            connect_bound: CONNECT_BOUND,
        }
    }

    /// HB-2: the longest silence a live link may have.
    pub fn silence_bound(&self) -> Duration {
        Duration(
            self.heartbeat
                .0
                .saturating_mul(u64::from(self.silent_beats)),
        )
    }
}

/// One side's record of a live link: when it last heard the peer and last wrote to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Beat {
    /// The last frame received (HB-1: any frame is a sign of life).
    pub last_heard: Instant,
    /// The last frame sent.
    pub last_sent: Instant,
}

/// What a [`Beat`] asks for at some instant.
enum Due {
    /// Nothing yet.
    Nothing,
    /// A heartbeat (HB-1).
    Heartbeat,
    /// The peer was silent this long, past the bound (HB-2).
    Silent(Duration),
}

impl Beat {
    fn new(now: Instant) -> Self {
        Beat {
            last_heard: now,
            last_sent: now,
        }
    }

    fn heard(&mut self, bugs: Bugs, now: Instant) {
        if bugs.has(Bug::HeardRecordedAsSent) {
            self.last_sent = self.last_sent.max(now);
            return;
        }
        self.last_heard = self.last_heard.max(now);
    }

    fn sent(&mut self, bugs: Bugs, now: Instant) {
        self.last_sent = self.last_sent.max(now);
        if bugs.has(Bug::SentCountsAsHeard) {
            self.last_heard = self.last_heard.max(now);
        }
    }

    /// HB-2 before HB-1: a dead link gets no more heartbeats.
    fn due(&self, cfg: &LivenessConfig, now: Instant) -> Due {
        let silent = now - self.last_heard;
        if silent > cfg.silence_bound() {
            Due::Silent(silent)
        } else if now - self.last_sent >= cfg.heartbeat {
            Due::Heartbeat
        } else {
            Due::Nothing
        }
    }

    /// The next instant [`Beat::due`] changes its answer.
    fn deadline(&self, cfg: &LivenessConfig) -> Instant {
        let silent = self.last_heard + cfg.silence_bound() + Duration(1);
        silent.min(self.last_sent + cfg.heartbeat)
    }
}

/// Where a node's daemon stands, as the master sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeLink {
    /// Its launch agent runs; the daemon has not authenticated yet (RT-2, HB-3).
    Starting {
        /// When the agent was started.
        since: Instant,
    },
    /// Authenticated and set up: heartbeats flow (HB-1).
    Up(Beat),
    /// Lost, or dropped when the job ended: frames for it are dropped, its link's end
    /// is no news.
    Gone,
    /// Given back to the resource manager (RC-20, GROW-2): its daemon was told to end,
    /// and its link's end is not a loss.
    Returned,
}

impl NodeLink {
    /// Whether the node's link still counts: its end would be a loss.
    pub fn is_live(&self) -> bool {
        matches!(self, NodeLink::Starting { .. } | NodeLink::Up(_))
    }

    /// Its state in a word, for `dynres status`.
    pub fn name(&self) -> &'static str {
        match self {
            NodeLink::Starting { .. } => "starting",
            NodeLink::Up(_) => "up",
            NodeLink::Gone => "gone",
            NodeLink::Returned => "returned",
        }
    }
}

/// Why a node was declared lost (NODE-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loss {
    /// Its launch agent could not be started (RT-2).
    LaunchFailed,
    /// Its launch agent exited before the daemon authenticated (HB-3).
    AgentExited,
    /// Its daemon did not authenticate within this bound of its launch (HB-3).
    NeverConnected(Duration),
    /// Its daemon was silent this long, past the bound (HB-2).
    Silent(Duration),
    /// Its link closed, failed, overflowed or carried a frame that does not decode
    /// (LINK-1, LINK-6); the driver knows the details.
    LinkEnded,
}

/// What happened, for [`Liveness::handle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LivenessInput {
    /// `node`'s launch agent was started (RT-2).
    Launched {
        /// The node.
        node: u32,
    },
    /// `node`'s launch agent could not be started (RT-2).
    LaunchFailed {
        /// The node.
        node: u32,
    },
    /// `node`'s launch agent exited.
    AgentExited {
        /// The node.
        node: u32,
    },
    /// A daemon authenticated as `node` (AUTH-5: taken only while it is awaited).
    Authenticated {
        /// The node.
        node: u32,
    },
    /// A frame arrived from `node` (HB-1).
    Heard {
        /// The node.
        node: u32,
    },
    /// A frame was written to `node`.
    Sent {
        /// The node.
        node: u32,
    },
    /// `node`'s link ended: closed, failed, overflowed or undecodable (LINK-1, LINK-6),
    /// or a frame for it could not be written.
    LinkEnded {
        /// The node.
        node: u32,
    },
    /// `node` was given back (RC-20): its daemon is told to end, its end is no loss.
    Returned {
        /// The node.
        node: u32,
    },
    /// The master is done with `node` (it was lost, or the job ends, LINK-5).
    Dropped {
        /// The node.
        node: u32,
    },
    /// Time passed (at or after [`Liveness::poll_timeout`]).
    Timeout,
}

/// What the master's driver must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LivenessOutput {
    /// Send `node` a `Heartbeat` (HB-1).
    Heartbeat {
        /// The node.
        node: u32,
    },
    /// `node` is lost (NODE-1): core hears `NodeLost`, the driver closes its link.
    Lost {
        /// The node.
        node: u32,
        /// Why.
        loss: Loss,
    },
}

/// An input [`Liveness::handle`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum LivenessError {
    /// A daemon authenticated for a node that does not await one: never started, up
    /// already, lost or given back (AUTH-5).
    #[error("node {0} does not await a daemon")]
    NotAwaited(u32),
    /// A node's agent was started twice (RT-2: once per node).
    #[error("node {0} was started already")]
    StartedTwice(u32),
}

/// The master's failure detector and link lifecycle for the other nodes' daemons.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Liveness {
    cfg: LivenessConfig,
    bugs: Bugs,
    nodes: BTreeMap<u32, NodeLink>,
    out: VecDeque<LivenessOutput>,
}

impl Liveness {
    /// A detector with bounds `cfg`, knowing no node yet.
    pub fn new(cfg: LivenessConfig) -> Self {
        Self::with_bugs(cfg, Bugs::NONE)
    }

    /// [`Liveness::new`] with planted bugs (the verification crate's models).
    pub fn with_bugs(cfg: LivenessConfig, bugs: Bugs) -> Self {
        let mut m = Liveness {
            cfg,
            bugs,
            nodes: BTreeMap::new(),
            out: VecDeque::new(),
        };
        let start = crate::trace::enabled().then(|| trace::encode_liveness_config(&cfg));
        crate::trace::record_start(&mut m, start);
        m
    }

    /// Its bounds.
    pub fn config(&self) -> &LivenessConfig {
        &self.cfg
    }

    /// Where `node` stands; `None` for a node never started.
    pub fn link(&self, node: u32) -> Option<NodeLink> {
        self.nodes.get(&node).copied()
    }

    /// Whether `node`'s link still counts: its end would be a loss.
    pub fn is_live(&self, node: u32) -> bool {
        self.nodes.get(&node).is_some_and(NodeLink::is_live)
    }

    fn lose(&mut self, node: u32, loss: Loss) {
        self.nodes.insert(node, NodeLink::Gone);
        self.out.push_back(LivenessOutput::Lost { node, loss });
    }

    /// Takes what happened at `now`. A refused input changes nothing.
    pub fn handle(&mut self, now: Instant, input: LivenessInput) -> Result<(), LivenessError> {
        crate::trace::record(self, now, input, Self::step)
    }

    /// A fingerprint of the state without the outputs not yet drained.
    pub fn fingerprint(&mut self) -> u64 {
        crate::machine::fingerprint_without_queue(self, |m| &mut m.out)
    }

    /// [`Liveness::handle`] without its transition event.
    fn step(&mut self, now: Instant, input: LivenessInput) -> Result<(), LivenessError> {
        match input {
            LivenessInput::Launched { node } => {
                if self.nodes.contains_key(&node) {
                    return Err(LivenessError::StartedTwice(node));
                }
                self.nodes.insert(node, NodeLink::Starting { since: now });
            }
            LivenessInput::LaunchFailed { node } => {
                if self.nodes.contains_key(&node) {
                    return Err(LivenessError::StartedTwice(node));
                }
                self.lose(node, Loss::LaunchFailed);
            }
            LivenessInput::AgentExited { node } => {
                // HB-3: an agent that exits before its daemon authenticated takes the
                // node with it; once up, the link itself tells.
                if let Some(NodeLink::Starting { .. }) = self.nodes.get(&node) {
                    self.lose(node, Loss::AgentExited);
                }
            }
            LivenessInput::Authenticated { node } => match self.nodes.get_mut(&node) {
                Some(l @ NodeLink::Starting { .. }) => *l = NodeLink::Up(Beat::new(now)),
                _ => return Err(LivenessError::NotAwaited(node)),
            },
            LivenessInput::Heard { node } => {
                if let Some(NodeLink::Up(b)) = self.nodes.get_mut(&node) {
                    b.heard(self.bugs, now);
                }
            }
            LivenessInput::Sent { node } => {
                if let Some(NodeLink::Up(b)) = self.nodes.get_mut(&node) {
                    b.sent(self.bugs, now);
                }
            }
            LivenessInput::LinkEnded { node } => match self.nodes.get(&node) {
                // A node core routes to without a daemon is lost too (RT-2).
                None => self.lose(node, Loss::LinkEnded),
                Some(l) if l.is_live() => self.lose(node, Loss::LinkEnded),
                Some(NodeLink::Returned) if self.bugs.has(Bug::ReturnedEndIsLoss) => {
                    self.lose(node, Loss::LinkEnded)
                }
                // RC-20, LINK-5: a daemon told to end ends; a lost one was reported.
                Some(_) => {}
            },
            LivenessInput::Returned { node } => {
                self.nodes.insert(node, NodeLink::Returned);
            }
            LivenessInput::Dropped { node } => {
                if let Some(l) = self.nodes.get_mut(&node) {
                    if *l != NodeLink::Returned {
                        *l = NodeLink::Gone;
                    }
                }
            }
            LivenessInput::Timeout => self.expire(now),
        }
        Ok(())
    }

    /// HB-1..3 at `now`: the nodes silent or unconnected past their bound are lost; the
    /// others get the heartbeats they are owed.
    fn expire(&mut self, now: Instant) {
        let (cfg, bugs) = (self.cfg, self.bugs);
        let mut lost = Vec::new();
        for (&node, l) in self.nodes.iter_mut() {
            match l {
                NodeLink::Starting { since } => {
                    if now - *since > cfg.connect_bound {
                        lost.push((node, Loss::NeverConnected(cfg.connect_bound)));
                    }
                }
                NodeLink::Up(beat) => match beat.due(&cfg, now) {
                    Due::Nothing => {}
                    Due::Heartbeat => {
                        beat.sent(bugs, now);
                        self.out.push_back(LivenessOutput::Heartbeat { node });
                    }
                    Due::Silent(d) => lost.push((node, Loss::Silent(d))),
                },
                NodeLink::Gone | NodeLink::Returned => {}
            }
        }
        for (node, loss) in lost {
            self.lose(node, loss);
        }
    }

    /// The next thing the driver must do.
    pub fn poll_output(&mut self) -> Option<LivenessOutput> {
        self.out.pop_front()
    }

    /// When the machine next wants a [`LivenessInput::Timeout`]; `None`: no node is
    /// live.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let cfg = &self.cfg;
        self.nodes
            .values()
            .filter_map(|l| match l {
                NodeLink::Starting { .. } if self.bugs.has(Bug::ConnectDeadlineNotArmed) => None,
                NodeLink::Starting { since } => Some(*since + cfg.connect_bound + Duration(1)),
                NodeLink::Up(b) => Some(b.deadline(cfg)),
                NodeLink::Gone | NodeLink::Returned => None,
            })
            .min()
    }
}

/// What happened, for [`MasterWatch::handle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchInput {
    /// A frame arrived from the master (HB-1).
    Heard,
    /// A frame was written to the master.
    Sent,
    /// Time passed (at or after [`MasterWatch::poll_timeout`]).
    Timeout,
}

/// What a node daemon's driver must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchOutput {
    /// Send the master a `Heartbeat` (HB-1).
    Heartbeat,
    /// The master was silent this long, past the bound (HB-2): the daemon ends its
    /// node on its own account (RT-3, NODE-4).
    MasterSilent(Duration),
}

/// A node daemon's view of its master (HB-1, HB-2, RT-3).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MasterWatch {
    /// The daemon's node: which watch of a trace this is (the daemon's own key).
    node: u32,
    cfg: LivenessConfig,
    bugs: Bugs,
    beat: Beat,
    /// The master was declared silent: nothing more is decided.
    given_up: bool,
    out: VecDeque<WatchOutput>,
}

impl MasterWatch {
    /// Node `node`'s watch on a link set up at `now`.
    pub fn new(node: u32, cfg: LivenessConfig, now: Instant) -> Self {
        Self::with_bugs(node, cfg, now, Bugs::NONE)
    }

    /// [`MasterWatch::new`] with planted bugs (the verification crate's models).
    pub fn with_bugs(node: u32, cfg: LivenessConfig, now: Instant, bugs: Bugs) -> Self {
        let mut m = MasterWatch {
            node,
            cfg,
            bugs,
            beat: Beat::new(now),
            given_up: false,
            out: VecDeque::new(),
        };
        let start = crate::trace::enabled().then(|| trace::encode_watch_start(&cfg, now));
        crate::trace::record_start(&mut m, start);
        m
    }

    /// Its node.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// Whether the master was declared silent.
    pub fn given_up(&self) -> bool {
        self.given_up
    }

    /// Takes what happened at `now`.
    pub fn handle(&mut self, now: Instant, input: WatchInput) {
        crate::trace::record_infallible(self, now, input, Self::step);
    }

    /// A fingerprint of the state without the outputs not yet drained.
    pub fn fingerprint(&mut self) -> u64 {
        crate::machine::fingerprint_without_queue(self, |m| &mut m.out)
    }

    /// [`MasterWatch::handle`] without its transition event.
    fn step(&mut self, now: Instant, input: WatchInput) {
        if self.given_up {
            return;
        }
        match input {
            WatchInput::Heard => self.beat.heard(self.bugs, now),
            WatchInput::Sent => self.beat.sent(self.bugs, now),
            WatchInput::Timeout => match self.beat.due(&self.cfg, now) {
                Due::Nothing => {}
                Due::Heartbeat => {
                    self.beat.sent(self.bugs, now);
                    self.out.push_back(WatchOutput::Heartbeat);
                }
                Due::Silent(d) => {
                    self.given_up = true;
                    self.out.push_back(WatchOutput::MasterSilent(d));
                }
            },
        }
    }

    /// The next thing the driver must do.
    pub fn poll_output(&mut self) -> Option<WatchOutput> {
        self.out.pop_front()
    }

    /// When the watch next wants a [`WatchInput::Timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        (!self.given_up).then(|| self.beat.deadline(&self.cfg))
    }
}

crate::machine::by_inherent_methods!(Liveness, LivenessInput, LivenessOutput, LivenessError);

impl crate::trace::Recorded for Liveness {
    const ROLE: &'static str = trace::ROLE_LIVENESS;
    // The runtime acts on refusals (AUTH-5: a daemon not awaited is turned away), so
    // replay checks them too.
    const RESULT: crate::trace::ResultRecord = crate::trace::ResultRecord::Hashed;
    fn key(&self) -> crate::trace::TraceKey {
        crate::trace::TraceKey::None
    }
    fn queue(&mut self) -> &mut VecDeque<LivenessOutput> {
        &mut self.out
    }
    fn encode_input(input: &LivenessInput) -> Vec<u8> {
        trace::encode_liveness_input(input)
    }
}

crate::machine::infallible_by_inherent_methods!(MasterWatch, WatchInput, WatchOutput);

impl crate::trace::Recorded for MasterWatch {
    const ROLE: &'static str = trace::ROLE_WATCH;
    // Nothing is ever refused.
    const RESULT: crate::trace::ResultRecord = crate::trace::ResultRecord::Omitted;
    fn key(&self) -> crate::trace::TraceKey {
        crate::trace::TraceKey::Node(self.node)
    }
    fn queue(&mut self) -> &mut VecDeque<WatchOutput> {
        &mut self.out
    }
    fn encode_input(input: &WatchInput) -> Vec<u8> {
        trace::encode_watch_input(input)
    }
}
