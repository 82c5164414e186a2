//! The event loop: core's master and this node's daemon, joined by an ordered in-process
//! queue, fed by the I/O loop (`ioloop.rs`: control connections, process exits,
//! signals), the launcher threads, tools and the master's timer (and, over several
//! hosts, by the links to other nodes' daemons or to the master: `hosts.rs`).
//! Every output of the state machines becomes exactly one action here; nothing is
//! decided.
//!
//! The engine never blocks on a peer: client replies go through [`Conn`]'s non-blocking
//! buffered writes (what a socket does not take is flushed when the I/O loop reports it
//! writable), tool answers through the tool connection's own thread.

mod grow;
mod hosts;
mod names;
mod pmi;
mod pmix_host;
mod pmix_jobs;

pub use grow::Grow;
pub use names::NameServer;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::os::unix::net::UnixStream;
use std::process::ExitStatus;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration as StdDuration;

use dynres_core::pset::PsetName;
use dynres_core::rc::ends::{KillCause, Verdict, daemon_kill_cause, judge};
use dynres_core::rc::onloss::{LossAction, on_loss};
use dynres_core::rc::wire::link::{LinkMsg, encode_link};
use dynres_core::rc::wire::{encode_reply, encode_to_master};
use dynres_core::rc::{
    ClientReply, ClientRequest, Daemon, DaemonInput, DaemonOutput, Master, MasterInput,
    MasterOutput, NodeId, RcStatus, RcType, ReqId, ToDaemon, ToMaster,
};
use dynres_core::{Instant, Namespace, ProcessId, Rank};

use super::conns::Conn;
use super::daemon::Upstream;
use super::ioloop::{self, IoLoop};
use super::nodes::Nodes;
use super::procs::{self, Child, LaunchSpec};
use super::signals;
use super::tools::{self, Command, ToolRequests};
use dynres_client::auth::HELLO_OK;

/// What the loop is told.
#[derive(Debug)]
pub enum Event {
    /// A connection presented the secret, claiming to be `rank`.
    Hello {
        /// Connection id.
        conn: u64,
        /// The claimed rank.
        rank: Rank,
        /// The stream (for replies).
        stream: UnixStream,
    },
    /// A decoded request on a connection.
    Request {
        /// Connection id.
        conn: u64,
        /// Request id.
        req: ReqId,
        /// The request.
        request: ClientRequest,
    },
    /// A rank's PMI socket is served by the I/O loop (`spec/pmi.md`).
    PmiUp {
        /// Connection id.
        conn: u64,
        /// The rank whose socket it is.
        rank: Rank,
        /// The stream (for replies).
        stream: UnixStream,
    },
    /// Bytes a rank wrote on its PMI socket.
    PmiBytes {
        /// Connection id.
        conn: u64,
        /// The bytes, as read.
        bytes: Vec<u8>,
    },
    /// An upcall of the job's PMIx server (`pmix.rs`), to be answered.
    Pmix(dynres_pmix::Request),
    /// libpmix's answer to a `dmodex_request` for a local process, made for connect
    /// `connect` (PMIS-16).
    PmixBlob {
        /// The connect it was asked for.
        connect: u64,
        /// The process.
        proc_: dynres_pmix::Proc,
        /// Its committed data.
        blob: Result<Vec<u8>, dynres_pmix::Status>,
    },
    /// A connection closed (or sent garbage).
    Gone {
        /// Connection id.
        conn: u64,
    },
    /// A tool's command line.
    Tool {
        /// The command.
        line: String,
        /// Where the answer goes: the I/O loop writes it, so a tool that does not read
        /// never blocks the engine. It may be sent later (a change is answered once
        /// decided); dropping it answers "the job ended".
        reply: ioloop::ToolReply,
    },
    /// The launcher thread started a process (or failed to).
    Launched {
        /// Its rank.
        rank: Rank,
        /// The process.
        child: std::io::Result<Child>,
    },
    /// A launched process exited.
    Exited {
        /// Its rank.
        rank: Rank,
        /// How.
        status: std::io::Result<ExitStatus>,
    },
    /// (Master) a daemon authenticated as `node` (AUTH-1..5).
    NodeUp {
        /// The node it claims.
        node: u32,
        /// Its link.
        stream: std::net::TcpStream,
    },
    /// A frame on a master ↔ daemon link: from `node`'s daemon on the master, from the
    /// master on a daemon (LINK-1).
    NodeFrame {
        /// The peer's node (on a daemon: its own node).
        node: u32,
        /// The whole frame.
        frame: Vec<u8>,
    },
    /// A master ↔ daemon link ended (NODE-1, RT-3).
    NodeGone {
        /// The peer's node (on a daemon: its own node).
        node: u32,
        /// Why.
        why: String,
    },
    /// (Master) Slurm's answer to a request for more nodes (GROW-1).
    Granted(Result<crate::slurm::Grant, String>),
    /// A connection whose replies were held back (`ioloop::Handle::watch_write`)
    /// takes bytes again.
    Writable {
        /// Connection id.
        conn: u64,
    },
    /// A link whose frames were held back (`ioloop::Handle::watch_link`) takes
    /// bytes again: the loop's turn flushes it.
    LinkWritable {
        /// The peer's node (on a daemon: its own node).
        node: u32,
    },
    /// A signal arrived (`signals.rs`): the loop looks at what it asks for.
    Signal,
    /// The job whose data server this job uses answered a forwarded request, or could
    /// not be reached (NAMES-1, NAMES-3).
    Named {
        /// The master's ticket of the request.
        ticket: u64,
        /// The answer, or why none came.
        reply: Result<ClientReply, String>,
    },
}

/// One step of the in-process links, kept in one FIFO so the master → daemon order
/// is the order the master sent (`RC-3`).
enum Link {
    ToDaemon(ToDaemon),
    ToMaster(ToMaster),
}

/// What the runtime does when the job loses a process (`RC-18`): core's policy, decided
/// by `dynres_core::rc::onloss::on_loss`.
pub use dynres_core::rc::onloss::OnLoss;

/// When a change's statuses were reported, for `dynres status`.
#[derive(Clone, Debug)]
pub struct ChangeLog {
    /// The change's delta pset.
    pub delta: PsetName,
    /// ADD, SUB or REPLACE.
    pub kind: Option<RcType>,
    /// Processes added.
    pub added: usize,
    /// Processes removed.
    pub removed: usize,
    /// Current status.
    pub status: RcStatus,
    /// Times (since job start) of ANNOUNCED, PENDING and the decision.
    pub at: [Option<StdDuration>; 3],
}

/// A process that has exited, as `dynres status` shows it.
#[derive(Clone, Debug)]
pub struct ExitRecord {
    /// Its rank.
    pub rank: Rank,
    /// Its OS pid.
    pub os_pid: u32,
    /// How it ended.
    pub status: ExitStatus,
}

/// How many decided changes and exited processes `dynres status` remembers: the
/// history is bounded so that a job's memory does not grow with its age.
pub const HISTORY: usize = 32;

/// A process on another node, as the master knows it (LINK-4).
#[derive(Clone, Debug)]
pub(super) struct RemoteProc {
    /// Its node.
    pub node: u32,
    /// Its pid there, once started.
    pub os_pid: Option<u32>,
    /// How it ended (exit code or 128 + signal, why the runtime killed it; LINK-4).
    pub ended: Option<(u32, KillCause)>,
}

/// The runtime's state: on the master's host, core's master and its own node's daemon
/// (plus links to the other nodes' daemons); on another host, that node's daemon and
/// its link to the master.
pub struct Engine {
    /// Core's master (absent on a node daemon).
    pub(super) master: Option<Master>,
    /// This process' node.
    node: NodeId,
    daemon: Daemon,
    /// The other nodes' daemons (master with several hosts).
    pub(super) nodes: Option<Nodes>,
    /// How the master obtains more nodes (GROW-1), if it can.
    grow: Option<grow::Grow>,
    /// The link to the master (node daemon).
    upstream: Option<Upstream>,
    /// Processes on other nodes (master).
    pub(super) remote_procs: BTreeMap<Rank, RemoteProc>,
    /// Nodes found dead, not yet reported to core (NODE-1).
    lost_nodes: Vec<(u32, String)>,
    /// Emptied nodes to give back (RC-20), not yet offered to core.
    to_return: Vec<u32>,
    /// Emptied nodes held until the nodes emptied alongside them are empty too
    /// (GROW-4): core's machine decides when they go.
    pub(super) giveback: dynres_core::rc::giveback::GiveBack,
    /// Nodes core was told are lost (each once).
    reported_lost: std::collections::BTreeSet<u32>,
    /// (Node daemon) the master said the job is over, or its link ended (LINK-5, RT-3).
    upstream_done: Option<Result<(), String>>,
    /// While core hears of a lost node: why, for the loss reports of its processes.
    node_lost_why: Option<String>,
    start: std::time::Instant,
    pub(super) namespace: Namespace,
    pub(super) app: String,
    pub(super) job_id: String,
    on_loss: OnLoss,
    spawner: Option<(Sender<procs::LaunchJob>, Vec<std::thread::JoinHandle<()>>)>,
    /// The I/O loop: client connections, the processes' exits and output, signals.
    io: Option<IoLoop>,
    io_handle: ioloop::Handle,
    /// Connections the I/O loop watches for writability on our behalf.
    write_watch: HashSet<u64>,
    /// Links (by node) the I/O loop watches for writability on our behalf.
    link_watch: HashSet<u32>,
    /// A blocked link could not be watched (out of descriptors): retry it soon.
    link_retry: bool,
    /// Launches asked of the spawner and not yet reported; `Some`: kill on arrival,
    /// and why.
    launching: BTreeMap<Rank, Option<KillCause>>,
    /// Running processes (exited ones move to `exited`).
    pub(super) children: BTreeMap<Rank, Child>,
    /// The last [`HISTORY`] exits.
    pub(super) exited: VecDeque<ExitRecord>,
    conns: HashMap<u64, Conn>,
    by_rank: HashMap<Rank, u64>,
    /// PMI sessions of local ranks, by connection (their sockets are in `conns`).
    pmi: HashMap<u64, dynres_core::pmi::PmiSession>,
    pmi_by_rank: HashMap<Rank, u64>,
    /// PMIx upcalls waiting for the daemon's reply, by request id.
    pmix_pending: HashMap<ReqId, pmix_host::Pending>,
    /// PMIx upcalls handed to the daemon machine so far (their request ids).
    pmix_asked: u64,
    /// PMIx fences across nodes whose modex requests are out (PMIS-14).
    pmix_fences: HashMap<u64, pmix_host::Fence>,
    /// PMIx connects across nodes whose processes' data is being published (PMIS-16).
    pmix_connects: HashMap<u64, pmix_host::Connect>,
    /// Fences across jobs (PMIS-21).
    pmix_cross: pmix_jobs::CrossFences,
    /// Ranks whose PMI socket spoke (SPAWN-25: told once each).
    pmi_heard: HashSet<Rank>,
    /// The PMI kvs names of the processes launched here (PMIS-22: MPICH's shared
    /// memory of each is swept before the first and after the last).
    mpich_kvs: std::collections::BTreeSet<String>,
    /// The job's PMIx server, if its program is an Open MPI one (`pmix.rs`).
    pmix: Option<std::sync::Arc<crate::pmix::PmixHost>>,
    /// What the PMI session of a rank being launched will serve, until its socket is up.
    pmi_pending: HashMap<Rank, dynres_core::pmi::PmiJob>,
    links: VecDeque<Link>,
    /// Changes in announcement order, the last [`HISTORY`] decided ones kept.
    pub(super) changes: VecDeque<ChangeLog>,
    tools: ToolRequests,
    /// (Master) the job whose data server this job uses (NAMES-1), if not its own.
    name_server: Option<NameServer>,
    /// (Master) guest jobs' data-server requests core has not answered, by ticket
    /// (NAMES-2).
    guests: BTreeMap<u64, ioloop::ToolReply>,
    next_guest: u64,
    failed: Vec<Rank>,
    /// How the first failure ended (exit code or 128 + signal, [`procs::code_of`]);
    /// `None` inside: it has no exit status (its node was lost).
    first_failure: Option<Option<u32>>,
    /// Why the runtime is ending the job before its processes finished.
    ending: Option<String>,
    /// Launches the daemon asked for, started once the replies of the same step are
    /// written (the daemon's replica already announces them, `RC-3`).
    to_launch: Vec<procs::LaunchJob>,
}

/// How a job ended.
#[derive(Debug)]
pub struct Outcome {
    /// Ranks of processes the job lost with a failure (non-zero exit or a signal the
    /// runtime did not send), in the order they were lost.
    pub failed: Vec<Rank>,
    /// Why the runtime ended the job early (`RC-18`), if it did.
    pub ended: Option<String>,
    /// Whether the job was interrupted (SIGINT/SIGTERM).
    pub interrupted: bool,
    /// Whether `--timeout` ended it (then `interrupted` too).
    pub timed_out: bool,
    /// How the first of `failed` ended: its exit code, or 128 + the signal that killed
    /// it; `None` inside when it has none (its node was lost), `None` when nothing
    /// failed.
    pub first_failure: Option<Option<u32>>,
}

impl Outcome {
    /// The exit status of `dynres run` for this outcome, as mpirun gives the first
    /// failing process' status: 130 when interrupted, else the first failure's code
    /// (128 + signal for a killed process, as a shell and srun give it), 1 for a
    /// failure without one or with a code that would read as success, 0 when nothing
    /// failed.
    pub fn exit_status(&self) -> u8 {
        // As timeout(1) reports a command it had to stop.
        if self.timed_out {
            return 124;
        }
        if self.interrupted {
            return 130;
        }
        match self.first_failure {
            None if self.failed.is_empty() && self.ended.is_none() => 0,
            // Only the low 8 bits reach the caller; one that reads 0 must not.
            Some(Some(code)) => match (code & 0xff) as u8 {
                0 => 1,
                c => c,
            },
            _ => 1,
        }
    }
}

/// After SIGINT/SIGTERM, how long the engine waits for killed processes to be reaped
/// before it returns anyway: the runtime always ends in bounded time.
const INTERRUPT_BOUND: StdDuration = StdDuration::from_secs(5);

/// How often the loop looks at its links and bounds (heartbeats, held nodes, the
/// bounds after a signal or the master's end).
const TICK: StdDuration = StdDuration::from_millis(200);

/// The longest the loop waits without any of those: every wake-up it needs is an
/// event then (signals come through the I/O loop's self-pipe); this is a safety net.
const IDLE_WAIT: StdDuration = StdDuration::from_secs(1);

impl Engine {
    /// A runtime for `node`: with `master`, the job's master process (its own node's
    /// daemon included); without, a node daemon (see [`Engine::with_upstream`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        master: Option<Master>,
        node: u32,
        job_id: String,
        namespace: Namespace,
        app: String,
        spec: LaunchSpec,
        on_loss: OnLoss,
        events: Sender<Event>,
        io: IoLoop,
    ) -> Engine {
        let io_handle = io.handle();
        let pmix = spec.pmix.clone();
        Engine {
            master,
            node: NodeId(node),
            daemon: Daemon::new(NodeId(node)),
            nodes: None,
            grow: None,
            upstream: None,
            remote_procs: BTreeMap::new(),
            lost_nodes: Vec::new(),
            to_return: Vec::new(),
            giveback: Default::default(),
            reported_lost: std::collections::BTreeSet::new(),
            upstream_done: None,
            node_lost_why: None,
            start: std::time::Instant::now(),
            namespace,
            app,
            job_id,
            on_loss,
            spawner: Some(procs::spawner(spec, events, io_handle.clone())),
            io: Some(io),
            io_handle,
            write_watch: HashSet::new(),
            link_watch: HashSet::new(),
            link_retry: false,
            launching: BTreeMap::new(),
            children: BTreeMap::new(),
            exited: VecDeque::new(),
            conns: HashMap::new(),
            by_rank: HashMap::new(),
            pmi: HashMap::new(),
            pmi_by_rank: HashMap::new(),
            pmi_pending: HashMap::new(),
            pmix_pending: HashMap::new(),
            pmix_asked: 0,
            pmix_fences: HashMap::new(),
            pmix_connects: HashMap::new(),
            pmix_cross: Default::default(),
            mpich_kvs: Default::default(),
            pmi_heard: HashSet::new(),
            pmix,
            links: VecDeque::new(),
            changes: VecDeque::new(),
            tools: ToolRequests::default(),
            name_server: None,
            guests: BTreeMap::new(),
            next_guest: 0,
            failed: Vec::new(),
            first_failure: None,
            ending: None,
            to_launch: Vec::new(),
        }
    }

    fn now(&self) -> Instant {
        Instant(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Time since the job started.
    pub fn uptime(&self) -> StdDuration {
        self.start.elapsed()
    }

    pub(super) fn pid(&self, rank: Rank) -> ProcessId {
        ProcessId::new(self.namespace.clone(), rank)
    }

    fn live(&self) -> usize {
        self.launching.len() + self.children.len() + self.remote_procs.len()
    }

    /// Whether the loop goes on: a master runs until its job's last process exited; a
    /// node daemon until the master is done with it and its processes exited.
    fn running(&self) -> bool {
        if self.master.is_some() {
            self.live() > 0
        } else {
            self.upstream_done.is_none() || self.live() > 0
        }
    }

    /// Runs the job until its last process has exited.
    pub fn run(mut self, rx: Receiver<Event>) -> Outcome {
        self.drain();
        let mut interrupted_at: Option<std::time::Instant> = None;
        let mut ending_at: Option<std::time::Instant> = None;
        // Left with processes unreaped: their threads are not waited for.
        let mut abandoned = false;
        while self.running() {
            if interrupted_at.is_none() && signals::interrupted() {
                interrupted_at = Some(std::time::Instant::now());
                tracing::warn!("interrupted: killing the job");
                self.kill_all(self.end_cause());
            }
            for sig in signals::take_forwarded() {
                self.forward_signal(sig);
            }
            if interrupted_at.is_some_and(|t| t.elapsed() > INTERRUPT_BOUND) {
                tracing::error!(
                    left = self.live(),
                    "processes not reaped after SIGKILL; leaving anyway"
                );
                abandoned = true;
                break;
            }
            // LINK-5, RT-3: a node daemon whose master is done or gone leaves in bounded
            // time too.
            match (&self.upstream_done, ending_at) {
                (Some(_), None) => ending_at = Some(std::time::Instant::now()),
                (Some(_), Some(t)) if t.elapsed() > INTERRUPT_BOUND => {
                    tracing::error!(
                        left = self.live(),
                        "processes not reaped after SIGKILL; leaving anyway"
                    );
                    abandoned = true;
                    break;
                }
                _ => {}
            }
            let now = self.now();
            // Links and the bounds above are ticked; otherwise every wake-up is an event
            // (signals come through the I/O loop), and the longer wait is a safety net.
            let ticking = self.nodes.is_some()
                || self.upstream.is_some()
                || interrupted_at.is_some()
                || ending_at.is_some()
                || signals::wake_fd().is_none();
            let mut wait = if ticking { TICK } else { IDLE_WAIT };
            // The master's deadlines and this node's daemon's (its modex gathers).
            let deadlines = self.master.as_ref().and_then(Master::poll_timeout);
            for t in deadlines.into_iter().chain(self.daemon.poll_timeout()) {
                wait = wait.min(StdDuration::from_nanos(t.0.saturating_sub(now.0)));
            }
            if std::mem::take(&mut self.link_retry) {
                // Nothing else wakes us for a link the I/O loop does not watch.
                wait = wait.min(StdDuration::from_millis(2));
            }
            match rx.recv_timeout(wait) {
                Ok(ev) => self.on_event(ev),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if let Some(t) = self.master.as_ref().and_then(Master::poll_timeout) {
                let now = self.now();
                if t <= now {
                    self.master_input(MasterInput::Timeout);
                }
            }
            if self.daemon.poll_timeout().is_some_and(|t| t <= self.now()) {
                self.daemon_input(DaemonInput::Timeout);
            }
            self.tick_links();
            self.flush_conns();
            self.watch_blocked();
            self.watch_blocked_links();
        }
        if let Some(mut nodes) = self.nodes.take() {
            nodes.shutdown();
            nodes.finish(INTERRUPT_BOUND);
        }
        if let Some(up) = &mut self.upstream {
            up.finish();
        }
        let orderly = interrupted_at.is_none() && !abandoned;
        if let Some((tx, workers)) = self.spawner.take() {
            drop(tx);
            if orderly {
                for t in workers {
                    let _ = t.join();
                }
            }
        }
        // PMIS-23: Open MPI's processes are gone (or abandoned after SIGKILL): their
        // namespaces and shared memory go.
        if let Some(host) = &self.pmix {
            host.finish();
        }
        // PMIS-22: MPICH's segments of a job that died in `MPI_Init` (its processes
        // are gone, or left behind after SIGKILL, which cannot use them any more).
        let kvs: Vec<String> = std::mem::take(&mut self.mpich_kvs).into_iter().collect();
        let n = procs::sweep_mpich_shm(&kvs);
        if n > 0 {
            tracing::debug!(
                segments = n,
                "removed MPICH's shared memory left by the job"
            );
        }
        // The processes' last output goes out before the runtime ends (unless it is
        // leaving in a hurry).
        if let Some(io) = self.io.take() {
            io.finish(orderly);
        }
        let ended = match self.upstream_done.take() {
            Some(Err(why)) => Some(why),
            _ => self.ending,
        };
        Outcome {
            failed: self.failed,
            ended,
            interrupted: interrupted_at.is_some(),
            timed_out: interrupted_at.is_some() && signals::timed_out(),
            first_failure: self.first_failure,
        }
    }

    /// Why this runtime kills everything now (NODE-4): the master ends the job by its
    /// own decision; a node daemon does so when its master said so (`Shutdown`), and
    /// on its own otherwise (its master lost or silent, RT-3, or a signal).
    fn end_cause(&self) -> KillCause {
        match self.master {
            Some(_) => KillCause::JobEnding,
            None => daemon_kill_cause(matches!(self.upstream_done, Some(Ok(())))),
        }
    }

    fn kill_all(&mut self, cause: KillCause) {
        // RT-4: the children of the ranks killed now come to us, also if the
        // supervisor is gone (`end_orphans` ends them before we exit).
        super::supervisor::catch_orphans();
        for c in self
            .children
            .values_mut()
            // Not one already reaped (a loss being judged): its pid may be reused.
            .filter(|c| c.cause == KillCause::None && c.exit.is_none())
        {
            c.cause = cause;
            procs::kill(c.os_pid);
        }
        for k in self.launching.values_mut() {
            k.get_or_insert(cause);
        }
        // Other nodes end their processes on `Shutdown` and report them (LINK-5); the
        // processes of a node whose daemon never connected never started.
        if let Some(nodes) = &mut self.nodes {
            for node in nodes.shutdown() {
                self.remote_procs.retain(|_, p| p.node != node);
            }
        }
    }

    /// RT-4: SIGUSR1/SIGUSR2 sent to `dynres run` go to every process of the job, as
    /// mpirun forwards them: this node's directly, the other nodes' through their
    /// daemons (`LinkMsg::Signal`).
    fn forward_signal(&mut self, sig: libc::c_int) {
        tracing::info!(signal = sig, "forwarding a signal to the job's processes");
        for c in self
            .children
            .values()
            .filter(|c| c.cause == KillCause::None && c.exit.is_none())
        {
            procs::send_signal(c.os_pid, sig);
        }
        if let Some(nodes) = &mut self.nodes {
            let frame = encode_link(&LinkMsg::Signal { signal: sig as u32 });
            for node in nodes.others() {
                if nodes.is_live(node) {
                    let _ = nodes.send(node, &frame);
                }
            }
        }
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Hello { conn, rank, stream } => self.on_hello(conn, rank, stream),
            Event::Request { conn, req, request } => {
                let Some(c) = self.conns.get(&conn) else {
                    return;
                };
                let from = self.pid(c.rank);
                self.daemon_input(DaemonInput::FromClient { from, req, request });
            }
            Event::PmiUp { conn, rank, stream } => self.on_pmi_up(conn, rank, stream),
            Event::PmiBytes { conn, bytes } => self.on_pmi_bytes(conn, bytes),
            Event::Pmix(request) => self.on_pmix(request),
            Event::PmixBlob {
                connect,
                proc_,
                blob,
            } => self.on_pmix_blob(connect, proc_, blob),
            Event::Gone { conn } => self.drop_conn(conn),
            Event::Tool { line, reply } => self.on_tool(line.trim(), reply),
            Event::Launched { rank, child } => self.on_launched(rank, child),
            Event::Exited { rank, status } => self.on_exit(rank, status),
            Event::NodeUp { node, stream } => {
                if let Some(nodes) = &mut self.nodes {
                    if let Err(why) = nodes.on_auth(node, stream) {
                        self.lost_nodes.push((node, why));
                        self.drain();
                    }
                }
            }
            Event::NodeFrame { node, frame } => {
                if self.master.is_some() {
                    self.on_node_frame(node, &frame);
                } else {
                    self.on_master_frame(&frame);
                }
            }
            Event::NodeGone { node, why } => {
                if self.master.is_some() {
                    // The detector says whether the end is a loss (not for a node given
                    // back, RC-20, or one lost already).
                    match self.nodes.as_mut().map(|n| n.link_ended(node, why.clone())) {
                        Some(Some(lost)) => {
                            self.lost_nodes.push(lost);
                            self.drain();
                        }
                        _ => tracing::debug!(node, "daemon ended: {why}"),
                    }
                } else {
                    self.master_gone(why);
                }
            }
            Event::Granted(result) => self.on_granted(result),
            Event::Named { ticket, reply } => self.on_named(ticket, reply),
            Event::Writable { conn } => {
                self.write_watch.remove(&conn);
                let failed = self.conns.get_mut(&conn).and_then(|c| c.flush().err());
                if let Some(e) = failed {
                    tracing::warn!(conn, error = %e, "reply not delivered; closing the connection");
                    self.drop_conn(conn);
                }
            }
            // Flushed by the loop's turn (`tick_links`).
            Event::LinkWritable { node } => {
                self.link_watch.remove(&node);
            }
            // Looked at at the top of the loop.
            Event::Signal => {}
        }
    }

    fn drop_conn(&mut self, conn: u64) {
        self.write_watch.remove(&conn);
        self.pmi_gone(conn);
        if let Some(c) = self.conns.remove(&conn) {
            c.close();
            if self.by_rank.get(&c.rank) == Some(&conn) {
                self.by_rank.remove(&c.rank);
            }
        }
    }

    fn flush_conns(&mut self) {
        let mut broken = Vec::new();
        for (id, c) in &mut self.conns {
            if let Err(e) = c.flush() {
                tracing::warn!(rank = c.rank, error = %e, "reply not delivered; closing the connection");
                broken.push(*id);
            }
        }
        for id in broken {
            self.drop_conn(id);
        }
    }

    /// Asks the I/O loop to say when connections with replies held back take bytes
    /// again (once per blocked stretch).
    fn watch_blocked(&mut self) {
        for (id, c) in &self.conns {
            if c.has_pending() && self.write_watch.insert(*id) {
                self.io_handle.watch_write(*id);
            }
        }
    }

    /// Asks the I/O loop to say when links with frames held back take bytes again
    /// (once per blocked stretch); without it, they are retried every 2 ms.
    fn watch_blocked_links(&mut self) {
        let mut blocked = self.nodes.as_ref().map(Nodes::blocked).unwrap_or_default();
        blocked.extend(
            self.upstream
                .as_ref()
                .and_then(Upstream::blocked)
                .map(|fd| (self.node.0, fd)),
        );
        // A link no longer blocked is watched again when it is next (a watch still in
        // the I/O loop only reports once, harmlessly).
        self.link_watch
            .retain(|n| blocked.iter().any(|(b, _)| b == n));
        let mut watched = Vec::new();
        for (node, fd) in blocked {
            if self.link_watch.contains(&node) {
                continue;
            }
            match self.io_handle.watch_link(node, fd) {
                Ok(()) => watched.push(node),
                Err(e) => {
                    tracing::debug!(node, error = %e, "cannot watch a link; retrying it often");
                    self.link_retry = true;
                }
            }
        }
        self.link_watch.extend(watched);
    }

    fn on_launched(&mut self, rank: Rank, child: std::io::Result<Child>) {
        let kill = self
            .launching
            .remove(&rank)
            .flatten()
            .or_else(|| signals::interrupted().then(|| self.end_cause()));
        match child {
            Ok(mut c) => {
                tracing::debug!(rank, os_pid = c.os_pid, "launched");
                if self.master.is_some() {
                    crate::events::start(rank, self.node.0);
                }
                if self.upstream.is_some() {
                    let os_pid = c.os_pid;
                    self.upstream_send(&encode_link(&LinkMsg::Started { rank, os_pid }));
                }
                if let Some(cause) = kill {
                    c.cause = cause;
                    procs::kill(c.os_pid);
                }
                self.children.insert(rank, c);
            }
            Err(e) => {
                tracing::error!(rank, error = %e, "launch failed");
                // 127: what a shell returns for a program it cannot run.
                self.record_failure(rank, Some(127));
                self.report_end(rank, 0, 127, KillCause::None);
                let pid = self.pid(rank);
                self.daemon_input(DaemonInput::Exited { pid });
            }
        }
    }

    fn on_hello(&mut self, conn: u64, rank: Rank, stream: UnixStream) {
        let alive = self.launching.contains_key(&rank) || self.children.contains_key(&rank);
        if !alive || self.by_rank.contains_key(&rank) {
            tracing::warn!(
                rank,
                "refused a connection: no such running process, or already connected"
            );
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
        let mut c = Conn::new(rank, stream);
        if c.send(&[HELLO_OK]).is_err() {
            c.close();
            return;
        }
        if let Some(ch) = self.children.get(&rank) {
            tracing::debug!(
                rank,
                spawn_us = ch.launched.elapsed().as_micros() as u64,
                "connected"
            );
        }
        self.by_rank.insert(rank, conn);
        self.conns.insert(conn, c);
    }

    fn on_exit(&mut self, rank: Rank, status: std::io::Result<ExitStatus>) {
        self.pmi_pending.remove(&rank);
        let Some(c) = self.children.get_mut(&rank) else {
            return;
        };
        let status = match status {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(rank, error = %e, "could not reap");
                std::os::unix::process::ExitStatusExt::from_raw(0xff00)
            }
        };
        c.exit = Some(status);
        if !judge(procs::code_of(status), c.cause).is_loss() {
            tracing::debug!(rank, how = %procs::describe(status), cause = ?c.cause, "exited");
        } else {
            tracing::warn!(rank, how = %procs::describe(status), "exited");
        }
        if !status.success() {
            // A process that did not finish cleanly cannot unlink its segments.
            procs::sweep_shm(&[c.os_pid]);
        }
        let (os_pid, cause) = (c.os_pid, c.cause);
        if self.master.is_some() {
            crate::events::end(rank, self.node.0, i64::from(procs::code_of(status)));
        }
        if let Some(conn) = self.by_rank.get(&rank).copied() {
            self.drop_conn(conn);
        }
        self.report_end(rank, os_pid, procs::code_of(status), cause);
        let pid = self.pid(rank);
        // Core learns the exit while the child is still listed, so that a loss it
        // reports can be judged by its exit status.
        self.daemon_input(DaemonInput::Exited { pid });
        if let Some(c) = self.children.remove(&rank) {
            self.exited.push_back(ExitRecord {
                rank,
                os_pid: c.os_pid,
                status,
            });
            if self.exited.len() > HISTORY {
                self.exited.pop_front();
            }
        }
    }

    fn on_tool(&mut self, line: &str, reply: ioloop::ToolReply) {
        let (req, wait) = match tools::parse(line, &self.app) {
            Ok(Command::Status { json }) => {
                let body = if json {
                    super::status::render_json(self)
                } else {
                    super::status::render(self)
                };
                reply.send(format!("ok\n{body}"));
                return;
            }
            Ok(Command::Change { req, wait }) => (req, wait),
            Ok(Command::Data { frame }) => return self.on_guest(&frame, reply),
            Err(e) => {
                reply.send(format!("error: {e}\n"));
                return;
            }
        };
        if let Some(why) = &self.ending {
            reply.send(format!("error: the job is ending: {why}\n"));
            return;
        }
        let ticket = self.tools.open(reply, wait);
        self.master_input(MasterInput::RequestChange { ticket, req });
        self.tools.after_request(ticket);
    }

    fn master_input(&mut self, input: MasterInput) {
        let now = self.now();
        let Some(m) = &mut self.master else {
            return;
        };
        if let Err(e) = m.handle(now, input) {
            tracing::debug!(error = %e, "master refused an input");
        }
        self.drain();
    }

    fn daemon_input(&mut self, input: DaemonInput) {
        let now = self.now();
        if let Err(e) = self.daemon.handle(now, input) {
            tracing::debug!(error = %e, "daemon refused an input");
        }
        self.drain();
    }

    /// Drains both machines until neither has anything left to do, then hands the
    /// launches they asked for to the launcher thread.
    fn drain(&mut self) {
        self.drain_links();
        while !self.lost_nodes.is_empty() || !self.to_return.is_empty() {
            self.report_lost_nodes();
            self.return_nodes();
            self.drain_links();
        }
        if !self.giveback.held().is_empty() {
            // Held nodes (GROW-4) go once the nodes they wait for are released or lost.
            self.return_nodes();
            self.drain_links();
        }
        for job in std::mem::take(&mut self.to_launch) {
            self.launch(job);
        }
    }

    fn drain_links(&mut self) {
        loop {
            while let Some(o) = self.master.as_mut().and_then(Master::poll_output) {
                self.on_master_output(o);
            }
            while let Some(o) = self.daemon.poll_output() {
                self.on_daemon_output(o);
            }
            let Some(link) = self.links.pop_front() else {
                return;
            };
            let now = self.now();
            // Each machine rejects with its own type; both are only logged.
            match link {
                Link::ToDaemon(msg) => {
                    if let Err(e) = self.daemon.handle(now, DaemonInput::FromMaster(msg)) {
                        tracing::debug!(error = %e, "input refused");
                    }
                }
                Link::ToMaster(msg) => {
                    let node = self.node;
                    if let Some(m) = &mut self.master {
                        let input = MasterInput::FromDaemon { node, msg };
                        if let Err(e) = m.handle(now, input) {
                            tracing::debug!(error = %e, "input refused");
                        }
                    }
                }
            }
        }
    }

    fn on_master_output(&mut self, o: MasterOutput) {
        match o {
            MasterOutput::Send(env) if env.to == self.node => {
                self.links.push_back(Link::ToDaemon(env.msg));
            }
            MasterOutput::Send(env) => self.send_to_node(env.to.0, &env.msg),
            MasterOutput::Status { delta, status } => self.on_status(delta, status),
            MasterOutput::Aborted { delta, reason } => {
                tracing::warn!("{delta}: ABORTED: {reason}");
                self.tools.aborted(&delta, reason);
            }
            MasterOutput::Started { ticket, delta } => self.tools.started(ticket, &delta),
            MasterOutput::Refused {
                ticket,
                request,
                error,
            } => {
                tracing::warn!(?request, %error, "change request refused");
                self.tools.refused(ticket, &error);
            }
            MasterOutput::NodeAllocated(n) => {
                tracing::debug!(node = n.0, "node allocated");
                if n != self.node {
                    let started = match &mut self.nodes {
                        Some(nodes) => nodes.start(n.0),
                        None => Err(format!("node {} has no host", n.0)),
                    };
                    if let Err(why) = started {
                        tracing::error!("{why}");
                        self.lost_nodes.push((n.0, why));
                    }
                }
            }
            MasterOutput::NodeReleased(n) => {
                tracing::debug!(node = n.0, "node released");
                let give_back = self
                    .nodes
                    .as_ref()
                    .is_some_and(|x| x.gives_back(n.0) && x.is_live(n.0));
                if give_back && n != self.node {
                    self.to_return.push(n.0);
                }
            }
            MasterOutput::ProcessLost(pid) => self.on_lost(pid.rank, false),
            MasterOutput::SpawnedExited(pid) => self.on_lost(pid.rank, true),
            MasterOutput::NeedSlots { slots } => self.need_slots(slots),
            MasterOutput::ForwardData { ticket, request } => self.forward_names(ticket, request),
            MasterOutput::GuestReply { ticket, reply } => self.guest_reply(ticket, &reply),
        }
    }

    /// `RC-18`: core reports a process that exited without being removed. A clean exit
    /// (status 0) is a process that finished its work; anything else is a failure,
    /// which ends the job unless it was started with [`OnLoss::Continue`].
    ///
    /// A spawn's child (`spawned`) never ends the job (`SPAWN-19`): its spawner learns
    /// of a failure through the handshake, so its failure is only logged. Core reports
    /// the children of an MPI library's spawn as [`MasterOutput::ProcessLost`]
    /// (`SPAWN-24`): no handshake would tell their spawner.
    fn on_lost(&mut self, rank: Rank, spawned: bool) {
        let (why, code) = if let Some(c) = self.children.get(&rank) {
            let Some(status) = c.exit else {
                return;
            };
            let code = procs::code_of(status);
            if !judge(code, c.cause).is_loss() {
                tracing::debug!(rank, "process finished");
                return;
            }
            let why = format!(
                "rank {rank} (pid {}) exited unexpectedly ({})",
                c.os_pid,
                procs::describe(status)
            );
            (why, Some(code))
        } else if let Some(p) = self.remote_procs.get(&rank) {
            // LINK-4: a remote process' end arrives before core's `Exited` for it; one
            // without it went down with its node (NODE-2).
            let host = self.nodes.as_ref().map_or("?", |n| n.host(p.node));
            let pid = p.os_pid.map_or("-".into(), |p| p.to_string());
            let why = match (p.ended, &self.node_lost_why) {
                (Some((code, cause)), _) if !judge(code, cause).is_loss() => {
                    tracing::debug!(rank, "process finished");
                    return;
                }
                // NODE-4: the node's daemon killed it without the job asking.
                (Some((code, KillCause::NodeEnding)), _) => format!(
                    "rank {rank} (pid {pid} on {host}) was ended by its node's daemon ({}): \
                     the daemon lost the master or was signalled",
                    procs::describe_code(code)
                ),
                (Some((code, _)), _) => format!(
                    "rank {rank} (pid {pid} on {host}) exited unexpectedly ({})",
                    procs::describe_code(code)
                ),
                (None, Some(node_why)) => format!("rank {rank} (on {host}) lost: {node_why}"),
                (None, None) => format!("rank {rank} (on {host}) lost"),
            };
            (why, p.ended.map(|(code, _)| code))
        } else {
            return;
        };
        // Judged a loss above; the policy decides what it does to the job.
        let action = on_loss(
            self.on_loss,
            Verdict::Failed,
            spawned,
            self.ending.is_some(),
        );
        if action.counts() {
            self.record_failure(rank, code);
        }
        match action {
            LossAction::None => {}
            LossAction::Logged => tracing::warn!("spawned {why}"),
            LossAction::Continue => tracing::error!("{why}; the job goes on without it"),
            LossAction::EndJob => {
                tracing::error!("{why}; ending the job");
                self.ending = Some(why);
                self.kill_all(KillCause::JobEnding);
            }
            LossAction::Counted => tracing::error!("{why}"),
        }
    }

    /// Counts `rank` as failed; the first failure's code becomes the job's exit status
    /// ([`Outcome::exit_status`]).
    fn record_failure(&mut self, rank: Rank, code: Option<u32>) {
        self.failed.push(rank);
        self.first_failure.get_or_insert(code);
    }

    fn on_status(&mut self, delta: PsetName, status: RcStatus) {
        self.tools.status(&delta, status);
        let t = self.start.elapsed();
        let info = self
            .master
            .as_ref()
            .and_then(|m| m.all_changes().find(|c| c.delta == delta).cloned());
        let pos = self.changes.iter().rposition(|l| l.delta == delta);
        let log = match pos {
            Some(i) => &mut self.changes[i],
            None => {
                self.changes.push_back(ChangeLog {
                    delta: delta.clone(),
                    kind: info.as_ref().map(|i| i.kind),
                    added: info.as_ref().map_or(0, |i| i.added.len()),
                    removed: info.as_ref().map_or(0, |i| i.removed.len()),
                    status,
                    at: [None; 3],
                });
                self.changes.back_mut().expect("just pushed")
            }
        };
        log.status = status;
        let slot = match status {
            RcStatus::Announced => 0,
            RcStatus::Pending => 1,
            _ => 2,
        };
        log.at[slot] = Some(t);
        let kind = log.kind.map_or("?", kind_name);
        let (added, removed) = (log.added, log.removed);
        tracing::info!(
            "{kind} +{added} -{removed} {delta}: {}",
            status_name(status)
        );
        if self.master.is_some() {
            crate::events::change(kind, delta.as_str(), added, removed, status_name(status));
        }
        // Bounded history: drop the oldest decided changes.
        while self.changes.len() > HISTORY {
            match self.changes.iter().position(|l| l.status.is_final()) {
                Some(i) => {
                    self.changes.remove(i);
                }
                None => break,
            }
        }
    }

    fn on_daemon_output(&mut self, o: DaemonOutput) {
        match o {
            DaemonOutput::ToMaster(msg) if self.master.is_some() => {
                self.links.push_back(Link::ToMaster(msg));
            }
            DaemonOutput::ToMaster(msg) => self.upstream_send(&encode_to_master(&msg)),
            DaemonOutput::ToClient { to, req, reply } => {
                let Some(reply) = self.pmix_reply(req, reply) else {
                    return;
                };
                if let Some(reply) = self.pmi_reply(to.rank, req, reply) {
                    self.reply(to.rank, req, &reply);
                }
            }
            // The replica is as the launch left it (outputs are taken after each
            // input): each process' standing is read now.
            DaemonOutput::Launch { procs } => {
                self.to_launch
                    .extend(procs.iter().map(|p| procs::LaunchJob {
                        rank: p.rank,
                        spawn: None,
                        standing: self.daemon.standing(p, None),
                    }));
            }
            DaemonOutput::Spawn {
                app,
                command,
                procs,
            } => {
                let standings: Vec<_> = procs
                    .iter()
                    .map(|p| self.daemon.standing(p, Some(&app)))
                    .collect();
                // Every child of the spawn on this node, of every command: the daemon
                // learns them all in one message (SPAWN-18).
                let local = PsetName::app_root(&app)
                    .ok()
                    .and_then(|root| self.daemon.pset(&root))
                    .map(|(members, _)| {
                        (0u32..)
                            .zip(members.iter())
                            .filter(|(_, p)| self.daemon.local().contains(p))
                            .map(|(r, _)| r)
                            .collect()
                    })
                    .unwrap_or_default();
                let spawn = std::sync::Arc::new(procs::SpawnLaunch {
                    app,
                    command,
                    local,
                });
                self.to_launch
                    .extend(
                        procs
                            .iter()
                            .zip(standings)
                            .map(|(p, standing)| procs::LaunchJob {
                                rank: p.rank,
                                spawn: Some(spawn.clone()),
                                standing,
                            }),
                    );
            }
            DaemonOutput::Kill { procs } => {
                for p in procs {
                    if let Some(k) = self.launching.get_mut(&p.rank) {
                        k.get_or_insert(KillCause::Removed);
                    }
                    if let Some(c) = self.children.get_mut(&p.rank) {
                        if c.cause == KillCause::None {
                            tracing::info!(rank = p.rank, os_pid = c.os_pid, "killing");
                            c.cause = KillCause::Removed;
                            procs::kill(c.os_pid);
                        }
                    }
                }
            }
        }
    }

    fn reply(&mut self, rank: Rank, req: ReqId, reply: &ClientReply) {
        let Some(conn) = self.by_rank.get(&rank).copied() else {
            tracing::debug!(rank, "reply to a process that is not connected: dropped");
            return;
        };
        let frame = encode_reply(req, reply);
        let failed = match self.conns.get_mut(&conn) {
            Some(c) => c.send(&frame).err(),
            None => None,
        };
        if let Some(e) = failed {
            tracing::warn!(rank, error = %e, "reply not delivered; closing the connection");
            self.drop_conn(conn);
        }
    }

    fn launch(&mut self, job: procs::LaunchJob) {
        let rank = job.rank;
        if let Some(pmi) = self.pmi_job(&job) {
            // PMIS-22: before the first process of a kvs starts here, what a dead job
            // of the same kvs left goes.
            if self.mpich_kvs.insert(pmi.kvsname.clone()) {
                let n = procs::sweep_mpich_shm(std::slice::from_ref(&pmi.kvsname));
                if n > 0 {
                    tracing::info!(kvs = %pmi.kvsname, segments = n, "removed MPICH's stale shared memory");
                }
            }
            self.pmi_pending.insert(rank, pmi);
        }
        if self.ending.is_some() || signals::interrupted() {
            // The job is being ended: report the launch as failed at once.
            let cause = self.end_cause();
            self.report_end(rank, 0, 128 + 9, cause);
            let pid = self.pid(rank);
            self.daemon_input(DaemonInput::Exited { pid });
            return;
        }
        let sent = self
            .spawner
            .as_ref()
            .is_some_and(|(tx, _)| tx.send(job).is_ok());
        if sent {
            self.launching.insert(rank, None);
        } else {
            tracing::error!(rank, "launcher thread gone");
            self.report_end(rank, 0, 127, KillCause::None);
            let pid = self.pid(rank);
            self.daemon_input(DaemonInput::Exited { pid });
        }
    }
}

/// `ADD`, `SUB`, `REPLACE`.
pub fn kind_name(k: RcType) -> &'static str {
    match k {
        RcType::Add => "ADD",
        RcType::Sub => "SUB",
        RcType::Replace => "REPLACE",
    }
}

/// Upper-case status names as in the thesis.
pub fn status_name(s: RcStatus) -> &'static str {
    match s {
        RcStatus::Null => "NULL",
        RcStatus::Announced => "ANNOUNCED",
        RcStatus::Pending => "PENDING",
        RcStatus::Finalized => "FINALIZED",
        RcStatus::Aborted => "ABORTED",
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;

    fn outcome(failed: &[u32], first: Option<Option<u32>>, interrupted: bool) -> Outcome {
        Outcome {
            failed: failed.to_vec(),
            ended: None,
            interrupted,
            timed_out: false,
            first_failure: first,
        }
    }

    /// The job's exit status is the first failure's: its code, 128 + its signal, never
    /// 0 for a failure; 130 when interrupted; 0 with no failure.
    #[test]
    fn the_exit_status_is_the_first_failures() {
        assert_eq!(outcome(&[], None, false).exit_status(), 0);
        assert_eq!(outcome(&[1], Some(Some(3)), false).exit_status(), 3);
        assert_eq!(
            outcome(&[2, 1], Some(Some(128 + 9)), false).exit_status(),
            137
        );
        assert_eq!(outcome(&[1], Some(Some(127)), false).exit_status(), 127);
        // No status (a lost node), or one whose low byte reads as success: 1.
        assert_eq!(outcome(&[1], Some(None), false).exit_status(), 1);
        assert_eq!(outcome(&[1], Some(Some(256)), false).exit_status(), 1);
        assert_eq!(outcome(&[1], Some(Some(0)), false).exit_status(), 1);
        assert_eq!(outcome(&[1], Some(Some(3)), true).exit_status(), 130);
        // The runtime ended the job for another reason than a failed rank.
        let mut o = outcome(&[], None, false);
        o.ended = Some("why".into());
        assert_eq!(o.exit_status(), 1);
        // --timeout: 124, as timeout(1), whatever failed meanwhile.
        let mut o = outcome(&[1], Some(Some(3)), true);
        o.timed_out = true;
        assert_eq!(o.exit_status(), 124);
    }
}
