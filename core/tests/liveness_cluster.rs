//! The runtime's failure detector in memory (`spec/runtime.md` HB-1..3, NODE-1, NODE-4,
//! RT-3, RC-20, AUTH-5): a cluster of core's [`Liveness`] (the master) and one
//! [`MasterWatch`] per node daemon, joined by links that deliver in order after a
//! latency, driven by a manual clock. Minutes of a job's life run in microseconds and
//! every run is the same, so each test asserts exact bounds — what the end-to-end tests
//! (which need hosts, sleep and tolerate scheduling) cannot.

use std::collections::{BTreeMap, VecDeque};

use dynres_core::rc::ends::{KillCause, Verdict, daemon_kill_cause, judge};
use dynres_core::rc::liveness::{
    CONNECT_BOUND, Liveness, LivenessConfig, LivenessError, LivenessInput, LivenessOutput, Loss,
    MasterWatch, NodeLink, SILENT_BEATS, WatchInput, WatchOutput,
};
use dynres_core::time::{Duration, Instant};

const HB: Duration = Duration::from_millis(100);

/// What travels on a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Msg {
    Heartbeat,
    /// Any other frame (core's, `Started`, `Ended`): a sign of life too (HB-1).
    Data,
    /// LINK-5 (master → daemon).
    Shutdown,
    /// The sender closed the link (or its host reset it).
    Close,
}

/// One direction of a link: frames arrive in order, `latency` after they were sent.
#[derive(Default)]
struct Wire(VecDeque<(Instant, Msg)>);

impl Wire {
    fn push(&mut self, at: Instant, msg: Msg) {
        self.0.push_back((at, msg));
    }
    fn due(&mut self, now: Instant) -> Option<Msg> {
        if self.0.front().is_some_and(|(t, _)| *t <= now) {
            return self.0.pop_front().map(|(_, m)| m);
        }
        None
    }
    fn next(&self) -> Option<Instant> {
        self.0.front().map(|(t, _)| *t)
    }
}

/// A node daemon: its watch on the master, and how it ended.
struct Daemon {
    watch: MasterWatch,
    /// Stopped (SIGSTOP, a hung host): it neither reads nor writes.
    stalled: bool,
    /// It ended its node's processes with this cause, and closed its link.
    ended: Option<KillCause>,
    /// Heartbeats it sent.
    beats: u32,
}

struct Cluster {
    now: Instant,
    cfg: LivenessConfig,
    master: Liveness,
    /// The master stopped: it reads, writes and decides nothing.
    master_stalled: bool,
    daemons: BTreeMap<u32, Daemon>,
    down: BTreeMap<u32, Wire>,
    up: BTreeMap<u32, Wire>,
    latency: Duration,
    /// Losses the master declared, and when.
    lost: Vec<(u32, Loss, Instant)>,
    /// Heartbeats the master sent, per node.
    beats: BTreeMap<u32, u32>,
}

impl Cluster {
    fn new(latency: Duration) -> Self {
        let cfg = LivenessConfig::new(HB);
        Cluster {
            now: Instant::ZERO,
            cfg,
            master: Liveness::new(cfg),
            master_stalled: false,
            daemons: BTreeMap::new(),
            down: BTreeMap::new(),
            up: BTreeMap::new(),
            latency,
            lost: Vec::new(),
            beats: BTreeMap::new(),
        }
    }

    /// `n` nodes launched and authenticated at once.
    fn up_nodes(n: u32, latency: Duration) -> Self {
        let mut c = Cluster::new(latency);
        for node in 1..=n {
            c.launch(node);
            c.connect(node).expect("awaited");
        }
        c
    }

    fn launch(&mut self, node: u32) {
        self.master
            .handle(self.now, LivenessInput::Launched { node })
            .expect("first launch");
    }

    /// The daemon authenticated (AUTH-5) and got its `Setup` (LINK-2).
    fn connect(&mut self, node: u32) -> Result<(), LivenessError> {
        self.master
            .handle(self.now, LivenessInput::Authenticated { node })?;
        self.daemons.insert(
            node,
            Daemon {
                watch: MasterWatch::new(node, self.cfg, self.now),
                stalled: false,
                ended: None,
                beats: 0,
            },
        );
        self.down.insert(node, Wire::default());
        self.up.insert(node, Wire::default());
        Ok(())
    }

    fn master_input(&mut self, input: LivenessInput) {
        if self.master_stalled {
            return;
        }
        let _ = self.master.handle(self.now, input);
        while let Some(out) = self.master.poll_output() {
            match out {
                LivenessOutput::Heartbeat { node } => {
                    *self.beats.entry(node).or_default() += 1;
                    let at = self.now + self.latency;
                    if let Some(w) = self.down.get_mut(&node) {
                        w.push(at, Msg::Heartbeat);
                    }
                }
                LivenessOutput::Lost { node, loss } => {
                    self.lost.push((node, loss, self.now));
                    // The driver closes the link of a node it lost.
                    let at = self.now + self.latency;
                    if let Some(w) = self.down.get_mut(&node) {
                        w.push(at, Msg::Close);
                    }
                    self.master
                        .handle(self.now, LivenessInput::Dropped { node })
                        .expect("dropping never fails");
                }
            }
        }
    }

    /// The master writes a frame of its own to `node` (core's traffic).
    fn master_sends(&mut self, node: u32, msg: Msg) {
        let at = self.now + self.latency;
        self.down.get_mut(&node).expect("connected").push(at, msg);
        self.master_input(LivenessInput::Sent { node });
    }

    /// A daemon's node ends on its own or on `Shutdown`: its processes are killed with
    /// the cause core's `daemon_kill_cause` gives, and its link closes.
    fn daemon_ends(&mut self, node: u32, master_said_so: bool) {
        let at = self.now + self.latency;
        let d = self.daemons.get_mut(&node).expect("connected");
        if d.ended.is_none() {
            d.ended = Some(daemon_kill_cause(master_said_so));
            self.up
                .get_mut(&node)
                .expect("connected")
                .push(at, Msg::Close);
        }
    }

    fn daemon_input(&mut self, node: u32, input: WatchInput) {
        let at = self.now + self.latency;
        let d = self.daemons.get_mut(&node).expect("connected");
        if d.stalled || d.ended.is_some() {
            return;
        }
        d.watch.handle(self.now, input);
        let mut silent = false;
        while let Some(out) = d.watch.poll_output() {
            match out {
                WatchOutput::Heartbeat => {
                    d.beats += 1;
                    self.up
                        .get_mut(&node)
                        .expect("connected")
                        .push(at, Msg::Heartbeat);
                }
                WatchOutput::MasterSilent(_) => silent = true,
            }
        }
        if silent {
            self.daemon_ends(node, false);
        }
    }

    /// The next instant anything happens: a frame arrives or a machine's deadline.
    fn next_event(&self) -> Option<Instant> {
        // Only wires someone reads: a stalled or ended side leaves its frames there.
        let down = self
            .down
            .iter()
            .filter(|(n, _)| {
                self.daemons
                    .get(n)
                    .is_some_and(|d| !d.stalled && d.ended.is_none())
            })
            .filter_map(|(_, w)| w.next());
        let up = self
            .up
            .values()
            .filter(|_| !self.master_stalled)
            .filter_map(Wire::next);
        let wires = down.chain(up);
        let daemons = self
            .daemons
            .values()
            .filter(|d| !d.stalled && d.ended.is_none())
            .filter_map(|d| d.watch.poll_timeout());
        let master = (!self.master_stalled)
            .then(|| self.master.poll_timeout())
            .flatten();
        wires.chain(daemons).chain(master).min()
    }

    /// Runs the cluster for `d`, event by event.
    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        while let Some(t) = self.next_event().filter(|t| *t <= until) {
            self.now = self.now.max(t);
            self.step();
        }
        self.now = until;
    }

    /// Everything due at `now`: deliveries, then both sides' timers.
    fn step(&mut self) {
        let nodes: Vec<u32> = self.daemons.keys().copied().collect();
        for &node in &nodes {
            // Master → daemon. A stalled daemon reads nothing: frames wait.
            let d = &self.daemons[&node];
            if !d.stalled && d.ended.is_none() {
                while let Some(m) = self.down.get_mut(&node).and_then(|w| w.due(self.now)) {
                    self.daemon_input(node, WatchInput::Heard);
                    match m {
                        Msg::Shutdown => self.daemon_ends(node, true),
                        // RT-3: a closed link ends the daemon.
                        Msg::Close => self.daemon_ends(node, false),
                        Msg::Heartbeat | Msg::Data => {}
                    }
                }
            }
            // Daemon → master.
            if !self.master_stalled {
                while let Some(m) = self.up.get_mut(&node).and_then(|w| w.due(self.now)) {
                    match m {
                        Msg::Close => self.master_input(LivenessInput::LinkEnded { node }),
                        _ => self.master_input(LivenessInput::Heard { node }),
                    }
                }
            }
        }
        for &node in &nodes {
            self.daemon_input(node, WatchInput::Timeout);
        }
        if self.master.poll_timeout().is_some_and(|t| t <= self.now) {
            self.master_input(LivenessInput::Timeout);
        }
    }

    fn lost(&self, node: u32) -> Option<(Loss, Instant)> {
        self.lost
            .iter()
            .find(|(n, _, _)| *n == node)
            .map(|(_, l, t)| (*l, *t))
    }
}

fn bound() -> Duration {
    Duration(HB.0 * u64::from(SILENT_BEATS))
}

/// HB-1: an idle job's links carry a heartbeat each way every interval, and nothing is
/// lost for as long as both sides run (HB-2: no false loss).
#[test]
fn an_idle_cluster_beats_and_loses_nothing() {
    let mut c = Cluster::up_nodes(3, Duration::from_millis(2));
    c.run_for(Duration::from_secs(60));
    assert_eq!(c.lost, []);
    for node in 1..=3 {
        assert_eq!(c.beats[&node], 600, "master → node {node}");
        assert_eq!(c.daemons[&node].beats, 600, "node {node} → master");
        assert!(c.master.is_live(node));
    }
}

/// HB-1: a heartbeat goes only in the absence of other traffic.
#[test]
fn traffic_stands_in_for_heartbeats() {
    let mut c = Cluster::up_nodes(1, Duration::ZERO);
    for _ in 0..100 {
        c.run_for(Duration::from_millis(50));
        c.master_sends(1, Msg::Data);
    }
    assert_eq!(
        c.beats.get(&1),
        None,
        "5 s of data every 50 ms needs no heartbeat"
    );
    assert_eq!(c.lost, []);
}

/// HB-2, NODE-1 (the silent loss): a daemon that stops — a hung host, SIGSTOP — is
/// declared lost once the bound passed since it was last heard, not before, although
/// the master keeps writing heartbeats to it.
#[test]
fn a_silent_daemon_is_lost_after_the_bound() {
    let mut c = Cluster::up_nodes(2, Duration::ZERO);
    c.run_for(Duration::from_secs(5));
    c.daemons.get_mut(&2).unwrap().stalled = true;
    let stalled = c.now;
    // Its last heartbeat went out at the stall (every 100 ms from 0).
    c.run_for(bound());
    assert_eq!(c.lost, [], "silent for exactly the bound: not yet lost");
    c.run_for(Duration(1));
    assert_eq!(
        c.lost(2),
        Some((
            Loss::Silent(Duration(bound().0 + 1)),
            stalled + bound() + Duration(1)
        ))
    );
    assert!(c.lost(1).is_none());
    assert!(!c.master.is_live(2) && c.master.is_live(1));
    assert_eq!(c.master.link(2), Some(NodeLink::Gone));
}

/// HB-2 (no false loss): a slow link — every frame arriving the bound less one
/// interval late — is not a dead one.
#[test]
fn a_slow_link_is_not_a_dead_one() {
    let mut c = Cluster::up_nodes(2, Duration(bound().0 - HB.0));
    c.run_for(Duration::from_secs(120));
    assert_eq!(c.lost, []);
    assert!(c.daemons.values().all(|d| d.ended.is_none()));
}

/// HB-3: a daemon that never authenticates makes its node lost 30 s after its launch,
/// one whose agent exits first at once; an agent's exit after authentication is no
/// news (the link tells).
#[test]
fn a_daemon_that_never_connects_is_lost() {
    let mut c = Cluster::new(Duration::ZERO);
    c.launch(1);
    c.launch(2);
    c.launch(3);
    c.connect(3).unwrap();
    c.run_for(Duration::from_secs(1));
    c.master_input(LivenessInput::AgentExited { node: 2 });
    c.master_input(LivenessInput::AgentExited { node: 3 });
    assert_eq!(
        c.lost(2),
        Some((Loss::AgentExited, Instant::ZERO + Duration::from_secs(1)))
    );
    assert!(c.lost(3).is_none() && c.master.is_live(3));
    c.run_for(Duration(CONNECT_BOUND.0 - Duration::from_secs(1).0));
    assert!(c.lost(1).is_none(), "30 s exactly: still starting");
    assert_eq!(c.master.link(1).map(|l| l.name()), Some("starting"));
    c.run_for(Duration(1));
    assert_eq!(
        c.lost(1),
        Some((
            Loss::NeverConnected(CONNECT_BOUND),
            Instant::ZERO + CONNECT_BOUND + Duration(1)
        ))
    );
}

/// AUTH-5: a node takes one daemon, only while it awaits it.
#[test]
fn a_node_takes_one_daemon_while_it_awaits_one() {
    let mut c = Cluster::new(Duration::ZERO);
    assert_eq!(
        c.connect(1),
        Err(LivenessError::NotAwaited(1)),
        "never started"
    );
    c.launch(1);
    c.connect(1).unwrap();
    assert_eq!(
        c.connect(1),
        Err(LivenessError::NotAwaited(1)),
        "up already"
    );
    c.master_input(LivenessInput::LaunchFailed { node: 2 });
    assert_eq!(c.lost(2).map(|l| l.0), Some(Loss::LaunchFailed));
    assert_eq!(c.connect(2), Err(LivenessError::NotAwaited(2)), "lost");
    assert_eq!(
        c.master.handle(c.now, LivenessInput::Launched { node: 1 }),
        Err(LivenessError::StartedTwice(1))
    );
}

/// NODE-1, RC-20: a live node's link ending is a loss, at once; a given-back node's
/// daemon ends on `Shutdown` and its link's end is not (nor is a lost node's end news
/// twice).
#[test]
fn a_link_end_is_a_loss_unless_the_node_was_given_back() {
    let mut c = Cluster::up_nodes(3, Duration::from_millis(1));
    c.run_for(Duration::from_secs(1));
    // Node 1 crashes: its host resets the link.
    let at = c.now + c.latency;
    c.up.get_mut(&1).unwrap().push(at, Msg::Close);
    // Node 2 is given back: the master says Shutdown and forgets it.
    c.master_sends(2, Msg::Shutdown);
    c.master_input(LivenessInput::Returned { node: 2 });
    c.run_for(Duration::from_secs(5));
    assert_eq!(
        c.lost(1),
        Some((Loss::LinkEnded, Instant::ZERO + Duration::from_millis(1001)))
    );
    assert!(c.lost(2).is_none(), "a node given back is not lost");
    assert_eq!(c.master.link(2), Some(NodeLink::Returned));
    assert_eq!(c.daemons[&2].ended, Some(KillCause::JobEnding));
    assert!(c.master.is_live(3));
    c.master_input(LivenessInput::LinkEnded { node: 1 });
    assert_eq!(c.lost.len(), 1, "a lost node is reported once");
}

/// RT-3, NODE-4 (a loss reported as a deliberate kill): a master that stalls past the
/// bound finds, when it runs again, every node lost; each daemon ended its processes on
/// its own account, which the master judges a loss — never the job's will, so the job
/// cannot exit 0. A daemon told `Shutdown` ends on the job's account instead.
#[test]
fn a_stalled_master_loses_its_nodes_as_failures() {
    let mut c = Cluster::up_nodes(2, Duration::ZERO);
    c.run_for(Duration::from_secs(2));
    c.master_stalled = true;
    c.run_for(Duration(bound().0 + HB.0));
    for node in 1..=2 {
        let cause = c.daemons[&node]
            .ended
            .expect("the daemon gave up on its master");
        assert_eq!(cause, KillCause::NodeEnding);
        assert_eq!(judge(128 + 9, cause), Verdict::Failed);
    }
    c.master_stalled = false;
    c.run_for(Duration::from_millis(1));
    // Woken, the master reads the closed links (or would find them silent).
    let losses: Vec<u32> = c.lost.iter().map(|(n, _, _)| *n).collect();
    assert_eq!(losses, [1, 2]);
    assert!(
        c.lost
            .iter()
            .all(|(_, l, _)| matches!(l, Loss::LinkEnded | Loss::Silent(_)))
    );

    let mut c = Cluster::up_nodes(1, Duration::ZERO);
    c.master_sends(1, Msg::Shutdown);
    c.run_for(Duration::from_millis(1));
    let cause = c.daemons[&1].ended.unwrap();
    assert_eq!(judge(128 + 9, cause), Verdict::Ended);
}

/// HB-2 on the daemon's side: the watch gives up exactly past the bound, once, and then
/// asks for nothing more.
#[test]
fn a_daemon_gives_up_on_a_silent_master_once() {
    let cfg = LivenessConfig::new(HB);
    let mut w = MasterWatch::new(1, cfg, Instant::ZERO);
    let t = Instant::ZERO + bound();
    w.handle(t, WatchInput::Timeout);
    assert_eq!(w.poll_output(), Some(WatchOutput::Heartbeat));
    assert_eq!(w.poll_output(), None);
    w.handle(t + Duration(1), WatchInput::Timeout);
    assert_eq!(
        w.poll_output(),
        Some(WatchOutput::MasterSilent(Duration(bound().0 + 1)))
    );
    assert!(w.given_up() && w.poll_timeout().is_none());
    w.handle(t + bound(), WatchInput::Heard);
    w.handle(t + bound(), WatchInput::Timeout);
    assert_eq!(w.poll_output(), None);
}

/// The master asks to be woken only while some node is live.
#[test]
fn nothing_live_asks_for_no_timer() {
    let mut l = Liveness::new(LivenessConfig::new(HB));
    assert_eq!(l.poll_timeout(), None);
    l.handle(Instant::ZERO, LivenessInput::Launched { node: 4 })
        .unwrap();
    assert_eq!(
        l.poll_timeout(),
        Some(Instant::ZERO + CONNECT_BOUND + Duration(1))
    );
    l.handle(Instant::ZERO, LivenessInput::Authenticated { node: 4 })
        .unwrap();
    assert_eq!(l.poll_timeout(), Some(Instant::ZERO + HB));
    l.handle(Instant::ZERO, LivenessInput::Returned { node: 4 })
        .unwrap();
    assert_eq!(l.poll_timeout(), None);
}
