//! The event loop: core's master and this node's daemon, joined by an ordered in-process
//! queue, fed by socket readers, process reapers, tools and the master's timer. Every
//! output of the state machines becomes exactly one action here; nothing is decided.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::ExitStatus;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration as StdDuration;

use dynres_core::pset::PsetName;
use dynres_core::rc::wire::encode_reply;
use dynres_core::rc::{
    ChangeRequest, ClientReply, ClientRequest, Daemon, DaemonInput, DaemonOutput, Master,
    MasterInput, MasterOutput, NodeId, RcError, RcStatus, RcType, ReqId, ToDaemon, ToMaster,
};
use dynres_core::{Instant, Namespace, ProcessId, Rank};

use super::procs::{self, Child, LaunchSpec};
use super::signals;
use crate::auth::HELLO_OK;

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
    /// A connection closed (or sent garbage).
    Gone {
        /// Connection id.
        conn: u64,
    },
    /// A tool's command line.
    Tool {
        /// The command.
        line: String,
        /// Where the answer goes: the connection's own thread writes it, so a tool
        /// that does not read cannot stall the engine. Dropping it unanswered tells
        /// the tool that the job ended.
        reply: Sender<String>,
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
}

/// One step of the in-process links, kept in one FIFO so the master → daemon order
/// is the order the master sent (`RC-3`).
enum Link {
    ToDaemon(ToDaemon),
    ToMaster(ToMaster),
}

/// When a change's statuses were reported, for `dynres status`.
#[derive(Clone, Debug)]
pub struct ChangeLog {
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

/// The runtime's state.
pub struct Engine {
    pub(super) master: Master,
    daemon: Daemon,
    start: std::time::Instant,
    pub(super) namespace: Namespace,
    pub(super) app: String,
    pub(super) job_id: String,
    spawner: Option<(Sender<u32>, std::thread::JoinHandle<()>)>,
    /// Launches asked of the spawner and not yet reported; `true`: kill on arrival.
    launching: BTreeMap<Rank, bool>,
    pub(super) children: BTreeMap<Rank, Child>,
    conns: HashMap<u64, (Rank, UnixStream)>,
    by_rank: HashMap<Rank, u64>,
    links: VecDeque<Link>,
    pub(super) changes: BTreeMap<PsetName, ChangeLog>,
    refused: Vec<(ChangeRequest, RcError)>,
    failed: Vec<Rank>,
    /// Launches the daemon asked for, started once the replies of the same step are
    /// written (the daemon's replica already announces them, `RC-3`).
    to_launch: Vec<Rank>,
}

/// How a job ended.
#[derive(Debug)]
pub struct Outcome {
    /// Ranks of processes the job lost with a failure (non-zero exit or a signal the
    /// runtime did not send).
    pub failed: Vec<Rank>,
    /// Whether the job was interrupted (SIGINT/SIGTERM).
    pub interrupted: bool,
    /// OS pids of every process launched.
    pub os_pids: Vec<u32>,
}

impl Engine {
    /// A runtime around a started master.
    pub fn new(
        master: Master,
        job_id: String,
        namespace: Namespace,
        app: String,
        spec: LaunchSpec,
        events: Sender<Event>,
    ) -> Engine {
        Engine {
            master,
            daemon: Daemon::new(NodeId(0)),
            start: std::time::Instant::now(),
            namespace,
            app,
            job_id,
            spawner: Some(procs::spawner(spec, events)),
            launching: BTreeMap::new(),
            children: BTreeMap::new(),
            conns: HashMap::new(),
            by_rank: HashMap::new(),
            links: VecDeque::new(),
            changes: BTreeMap::new(),
            refused: Vec::new(),
            failed: Vec::new(),
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

    fn pid(&self, rank: Rank) -> ProcessId {
        ProcessId::new(self.namespace.clone(), rank)
    }

    fn live(&self) -> usize {
        self.launching.len() + self.children.values().filter(|c| c.exit.is_none()).count()
    }

    /// Runs the job until its last process has exited.
    pub fn run(mut self, rx: Receiver<Event>) -> Outcome {
        self.drain();
        let mut interrupted = false;
        while self.live() > 0 {
            if !interrupted && signals::interrupted() {
                interrupted = true;
                tracing::warn!("interrupted: killing the job");
                for c in self.children.values_mut().filter(|c| c.exit.is_none()) {
                    c.killed = true;
                    procs::kill(c.os_pid);
                }
            }
            let now = self.now();
            let mut wait = StdDuration::from_millis(200);
            if let Some(t) = self.master.poll_timeout() {
                wait = wait.min(StdDuration::from_nanos(t.0.saturating_sub(now.0)));
            }
            match rx.recv_timeout(wait) {
                Ok(ev) => self.on_event(ev),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if let Some(t) = self.master.poll_timeout() {
                let now = self.now();
                if t <= now {
                    self.master_input(MasterInput::Timeout);
                }
            }
        }
        if let Some((tx, t)) = self.spawner.take() {
            drop(tx);
            let _ = t.join();
        }
        let mut os_pids = Vec::new();
        for c in self.children.values_mut() {
            os_pids.push(c.os_pid);
            for t in c.threads.drain(..) {
                let _ = t.join();
            }
        }
        Outcome {
            failed: self.failed,
            interrupted,
            os_pids,
        }
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Hello { conn, rank, stream } => self.on_hello(conn, rank, stream),
            Event::Request { conn, req, request } => {
                let Some((rank, _)) = self.conns.get(&conn) else {
                    return;
                };
                let from = self.pid(*rank);
                self.daemon_input(DaemonInput::FromClient { from, req, request });
            }
            Event::Gone { conn } => {
                if let Some((rank, _)) = self.conns.remove(&conn) {
                    if self.by_rank.get(&rank) == Some(&conn) {
                        self.by_rank.remove(&rank);
                    }
                }
            }
            Event::Tool { line, reply } => {
                let answer = self.on_tool(line.trim());
                let _ = reply.send(answer);
            }
            Event::Launched { rank, child } => self.on_launched(rank, child),
            Event::Exited { rank, status } => self.on_exit(rank, status),
        }
    }

    fn on_launched(&mut self, rank: Rank, child: std::io::Result<Child>) {
        let kill = self.launching.remove(&rank).unwrap_or(false) || signals::interrupted();
        match child {
            Ok(mut c) => {
                tracing::debug!(rank, os_pid = c.os_pid, "launched");
                if kill {
                    c.killed = true;
                    procs::kill(c.os_pid);
                }
                self.children.insert(rank, c);
            }
            Err(e) => {
                tracing::error!(rank, error = %e, "launch failed");
                self.failed.push(rank);
                let pid = self.pid(rank);
                self.daemon_input(DaemonInput::Exited { pid });
            }
        }
    }

    fn on_hello(&mut self, conn: u64, rank: Rank, mut stream: UnixStream) {
        let alive = self.launching.contains_key(&rank)
            || self.children.get(&rank).is_some_and(|c| c.exit.is_none());
        if !alive || self.by_rank.contains_key(&rank) {
            tracing::warn!(
                rank,
                "refused a connection: no such running process, or already connected"
            );
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
        // A client that stops reading must not stall the runtime: its replies are
        // dropped with the connection after this long.
        let _ = stream.set_write_timeout(Some(StdDuration::from_secs(10)));
        if stream.write_all(&[HELLO_OK]).is_err() {
            return;
        }
        if let Some(c) = self.children.get(&rank) {
            tracing::debug!(
                rank,
                spawn_us = c.launched.elapsed().as_micros() as u64,
                "connected"
            );
        }
        self.by_rank.insert(rank, conn);
        self.conns.insert(conn, (rank, stream));
    }

    fn on_exit(&mut self, rank: Rank, status: std::io::Result<ExitStatus>) {
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
        if status.success() || c.killed {
            tracing::debug!(rank, how = %procs::describe(&status), killed = c.killed, "exited");
        } else {
            tracing::warn!(rank, how = %procs::describe(&status), "exited");
        }
        if let Some(conn) = self.by_rank.remove(&rank) {
            self.conns.remove(&conn);
        }
        let pid = self.pid(rank);
        self.daemon_input(DaemonInput::Exited { pid });
    }

    fn on_tool(&mut self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |s: &str| s.trim_start_matches(['+', '-']).parse::<u32>().ok();
        let req = match words.as_slice() {
            ["status"] => return format!("ok\n{}", super::status::render(self)),
            ["grow", k] => num(k).map(|k| ChangeRequest::add(self.app.clone(), k)),
            ["shrink", k] => num(k).map(|k| ChangeRequest::sub(self.app.clone(), k)),
            ["replace", r, a] => num(r)
                .zip(num(a))
                .map(|(r, a)| ChangeRequest::replace(self.app.clone(), r, a)),
            _ => None,
        };
        let Some(req) = req else {
            return format!("error: bad command {line:?}\n");
        };
        self.refused.clear();
        let before: Vec<PsetName> = self.master.all_changes().map(|c| c.delta.clone()).collect();
        self.master_input(MasterInput::RequestChange(req.clone()));
        match self.refused.iter().find(|(r, _)| *r == req) {
            Some((_, e)) => format!("error: refused: {e}\n"),
            None => {
                let delta = self
                    .master
                    .all_changes()
                    .map(|c| c.delta.to_string())
                    .find(|d| !before.iter().any(|b| b.as_str() == d))
                    .unwrap_or_else(|| "queued behind the change in flight".into());
                format!("ok {delta}\n")
            }
        }
    }

    fn master_input(&mut self, input: MasterInput) {
        let now = self.now();
        if let Err(e) = self.master.handle(now, input) {
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
        for rank in std::mem::take(&mut self.to_launch) {
            self.launch(rank);
        }
    }

    fn drain_links(&mut self) {
        loop {
            while let Some(o) = self.master.poll_output() {
                self.on_master_output(o);
            }
            while let Some(o) = self.daemon.poll_output() {
                self.on_daemon_output(o);
            }
            let Some(link) = self.links.pop_front() else {
                return;
            };
            let now = self.now();
            let r = match link {
                Link::ToDaemon(msg) => self.daemon.handle(now, DaemonInput::FromMaster(msg)),
                Link::ToMaster(msg) => self.master.handle(
                    now,
                    MasterInput::FromDaemon {
                        node: NodeId(0),
                        msg,
                    },
                ),
            };
            if let Err(e) = r {
                tracing::debug!(error = %e, "input refused");
            }
        }
    }

    fn on_master_output(&mut self, o: MasterOutput) {
        match o {
            MasterOutput::Send(env) => self.links.push_back(Link::ToDaemon(env.msg)),
            MasterOutput::Status { delta, status } => self.on_status(delta, status),
            MasterOutput::Refused { request, error } => {
                tracing::warn!(?request, %error, "change request refused");
                self.refused.push((request, error));
            }
            MasterOutput::NodeAllocated(n) => tracing::debug!(node = n.0, "node allocated"),
            MasterOutput::NodeReleased(n) => tracing::debug!(node = n.0, "node released"),
            MasterOutput::ProcessLost(pid) => {
                let failed = self
                    .children
                    .get(&pid.rank)
                    .and_then(|c| c.exit.map(|s| !s.success() && !c.killed))
                    .unwrap_or(false);
                if failed {
                    tracing::warn!(rank = pid.rank, "the job lost a process");
                    self.failed.push(pid.rank);
                }
            }
        }
    }

    fn on_status(&mut self, delta: PsetName, status: RcStatus) {
        let t = self.start.elapsed();
        let info = self
            .master
            .all_changes()
            .find(|c| c.delta == delta)
            .cloned();
        let log = self.changes.entry(delta.clone()).or_insert(ChangeLog {
            kind: info.as_ref().map(|i| i.kind),
            added: info.as_ref().map_or(0, |i| i.added.len()),
            removed: info.as_ref().map_or(0, |i| i.removed.len()),
            status,
            at: [None; 3],
        });
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
    }

    fn on_daemon_output(&mut self, o: DaemonOutput) {
        match o {
            DaemonOutput::ToMaster(msg) => self.links.push_back(Link::ToMaster(msg)),
            DaemonOutput::ToClient { to, req, reply } => self.reply(to.rank, req, &reply),
            DaemonOutput::Launch { procs } => {
                self.to_launch.extend(procs.iter().map(|p| p.rank));
            }
            DaemonOutput::Kill { procs } => {
                for p in procs {
                    if let Some(k) = self.launching.get_mut(&p.rank) {
                        *k = true;
                    }
                    if let Some(c) = self.children.get_mut(&p.rank) {
                        if c.exit.is_none() {
                            tracing::info!(rank = p.rank, os_pid = c.os_pid, "killing");
                            c.killed = true;
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
        if let Some((_, s)) = self.conns.get_mut(&conn) {
            if let Err(e) = s.write_all(&frame) {
                tracing::warn!(rank, error = %e, "reply not delivered; closing the connection");
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    fn launch(&mut self, rank: Rank) {
        let sent = self
            .spawner
            .as_ref()
            .is_some_and(|(tx, _)| tx.send(rank).is_ok());
        if sent {
            self.launching.insert(rank, false);
        } else {
            tracing::error!(rank, "launcher thread gone");
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
