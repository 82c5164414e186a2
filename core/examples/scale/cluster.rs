//! An in-memory cluster for measuring the kernel at scale (issue 29, goal 4): the real
//! [`Master`], one real [`Daemon`] per node and one real [`Client`] per process, linked
//! by ordered links with a fixed latency under simulated time, every message crossing a
//! link as its real wire frame (`dynres_core::rc::wire`): encoded by the sender, decoded
//! by the receiver, its bytes counted.
//!
//! Unlike the flow tests' `World` (`core/tests/common`), this driver costs
//! O(log events) per step whatever the number of nodes (timers are kept in an ordered
//! set and refreshed only for the machine that just ran), so what grows with the job
//! here is the kernel's, not the harness'. Shared by the `scale` example (the table and
//! the plot) and the `scale` test (counts at small sizes).

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use dynres_core::pset::{AttrUpdate, PsetName, PsetOp, SetOp};
use dynres_core::rc::wire::{
    decode_client, decode_reply, decode_to_daemon, decode_to_master, encode_client, encode_reply,
    encode_to_daemon, encode_to_master,
};
use dynres_core::rc::{
    CallId, CallResult, ChangeRequest, Client, ClientCall, ClientInput, ClientOutput, Daemon,
    DaemonInput, DaemonOutput, Master, MasterConfig, MasterInput, MasterOutput, NodeId, RcStatus,
    RcType, ToDaemon,
};
use dynres_core::slots::NodeSpec;
use dynres_core::{Duration, Instant, Namespace, ProcessId};

/// The application every simulated job runs.
pub const APP: &str = "app";

/// Process `rank` of the simulated job.
pub fn pid(rank: u32) -> ProcessId {
    ProcessId::new(Namespace::new("job"), rank)
}

/// A job of `nodes` × `ppn` processes on `nodes + 1` nodes of `ppn` slots each: the last
/// node stays free for the ADD of one node's worth.
pub fn config(nodes: u32, ppn: u32) -> MasterConfig {
    MasterConfig {
        namespace: Namespace::new("job"),
        nodes: (0..=nodes)
            .map(|i| NodeSpec {
                name: format!("n{i}"),
                slots: ppn,
            })
            .collect(),
        apps: vec![(APP.to_string(), nodes * ppn)],
        change_timeout: Duration::from_secs(60),
        grace: Duration::from_millis(100),
        max_queued: 2,
        grow_wait: None,
        data_server: Default::default(),
    }
}

/// A master → daemon message's kind, for [`Counts::to_daemon_kinds`].
fn kind(msg: &ToDaemon) -> &'static str {
    match msg {
        ToDaemon::DefinePset { .. } => "DefinePset",
        ToDaemon::PrunePset { .. } => "PrunePset",
        ToDaemon::JobData { .. } => "JobData",
        ToDaemon::Change { .. } => "Change",
        ToDaemon::Launch { .. } => "Launch",
        ToDaemon::Spawn { .. } => "Spawn",
        ToDaemon::Kill { .. } => "Kill",
        ToDaemon::ModexDone { .. } => "ModexDone",
        ToDaemon::Reply { .. } => "Reply",
    }
}

/// Which link a message crossed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Link {
    /// Master → daemon.
    ToDaemon,
    /// Daemon → master.
    ToMaster,
    /// Client → its daemon (node-local control socket).
    ClientToDaemon,
    /// Daemon → a local client.
    DaemonToClient,
}

/// Messages and encoded bytes per link since the last [`Cluster::take_counts`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Messages and bytes, per link.
    pub per_link: BTreeMap<Link, (u64, u64)>,
    /// Machine inputs handled (messages delivered, calls, exits and timers).
    pub steps: u64,
    /// Master → daemon messages and bytes per message kind (where the bytes go).
    pub to_daemon_kinds: BTreeMap<&'static str, (u64, u64)>,
    /// CPU nanoseconds the master spent in `handle` and `poll_output`, by
    /// [`Cluster::clock`] (zero without one).
    pub master_ns: u64,
    /// The same per daemon, by node.
    pub daemon_ns: BTreeMap<u32, u64>,
}

impl Counts {
    /// Messages over every link.
    pub fn messages(&self) -> u64 {
        self.per_link.values().map(|c| c.0).sum()
    }

    /// Bytes over every link.
    pub fn bytes(&self) -> u64 {
        self.per_link.values().map(|c| c.1).sum()
    }

    /// Messages over the runtime's links (master ↔ daemons), without node-local ones.
    pub fn runtime_messages(&self) -> u64 {
        self.link(Link::ToDaemon).0 + self.link(Link::ToMaster).0
    }

    /// Messages and bytes over one link.
    pub fn link(&self, l: Link) -> (u64, u64) {
        self.per_link.get(&l).copied().unwrap_or_default()
    }
}

#[derive(Clone, Debug)]
enum Event {
    ToMaster(NodeId, Vec<u8>),
    ToDaemon(NodeId, Vec<u8>),
    ClientToDaemon(ProcessId, Vec<u8>),
    DaemonToClient(ProcessId, Vec<u8>),
    Call(ProcessId, CallId, ClientCall),
    Exit(ProcessId),
    External(u64, ChangeRequest),
}

/// A machine with a timer: `None` is the master, `Some(n)` node `n`'s daemon.
type Who = Option<u32>;

/// The simulated cluster; see the module doc.
pub struct Cluster {
    /// Simulated time.
    pub now: Instant,
    latency: Duration,
    startup: Duration,
    /// The master.
    pub master: Master,
    /// One daemon per node.
    pub daemons: Vec<Daemon>,
    clients: HashMap<ProcessId, Client>,
    node_of: HashMap<ProcessId, NodeId>,
    queue: BTreeMap<(Instant, u64), Event>,
    seq: u64,
    next_call: CallId,
    timers: BTreeSet<(Instant, Who)>,
    timer_of: HashMap<Who, Instant>,
    /// Results of the calls a test or the driver waits for (others are dropped, so the
    /// modex's tables do not pile up here).
    watched: HashMap<(ProcessId, CallId), Option<CallResult>>,
    /// Modex calls completed successfully since the last [`Cluster::take_counts`].
    pub modex_ok: u64,
    /// Fence calls completed successfully since the last [`Cluster::take_counts`].
    pub fence_ok: u64,
    /// Processes whose daemon launched them.
    pub launched: u64,
    exited: BTreeSet<ProcessId>,
    counts: Counts,
    /// A CPU clock in nanoseconds (the thread's CPU time), to split an operation's CPU
    /// time between the machines: in a real job the daemons run in parallel, so the
    /// master's time and the busiest daemon's bound an operation, not their sum.
    pub clock: fn() -> u64,
}

impl Cluster {
    /// Starts the job of `cfg` and runs until every first process is launched.
    pub fn start(cfg: MasterConfig) -> Cluster {
        Cluster::start_clocked(cfg, || 0)
    }

    /// [`Cluster::start`], splitting CPU time by machine with `clock`
    /// ([`Counts::master_ns`]); the start itself counts too.
    pub fn start_clocked(cfg: MasterConfig, clock: fn() -> u64) -> Cluster {
        let t0 = clock();
        let nodes = cfg.nodes.len() as u32;
        let master = Master::new(cfg).expect("job starts");
        let master_new = clock() - t0;
        let mut c = Cluster {
            now: Instant::ZERO,
            latency: Duration::from_micros(10),
            startup: Duration::from_millis(5),
            master,
            daemons: (0..nodes).map(|n| Daemon::new(NodeId(n))).collect(),
            clients: HashMap::new(),
            node_of: HashMap::new(),
            queue: BTreeMap::new(),
            seq: 0,
            next_call: 0,
            timers: BTreeSet::new(),
            timer_of: HashMap::new(),
            watched: HashMap::new(),
            modex_ok: 0,
            fence_ok: 0,
            launched: 0,
            exited: BTreeSet::new(),
            counts: Counts::default(),
            clock,
        };
        c.counts.master_ns += master_new;
        c.drain_master();
        c.settle();
        c
    }

    /// Counts since the last call, and starts counting afresh.
    pub fn take_counts(&mut self) -> Counts {
        self.modex_ok = 0;
        self.fence_ok = 0;
        core::mem::take(&mut self.counts)
    }

    /// Runs until nothing is left to do before the next timer more than 10 ms away
    /// (the change timeout, a grace period): the operation in flight is done.
    pub fn settle(&mut self) {
        loop {
            let until = self.now + Duration::from_millis(10);
            if !self.step(until) {
                return;
            }
        }
    }

    fn count(&mut self, link: Link, bytes: usize) {
        let e = self.counts.per_link.entry(link).or_default();
        e.0 += 1;
        e.1 += bytes as u64;
    }

    fn push(&mut self, at: Instant, e: Event) {
        self.seq += 1;
        self.queue.insert((at, self.seq), e);
    }

    /// Makes `pid` call `call` now; `watch` keeps its result for [`Cluster::wait`].
    pub fn call(&mut self, pid: &ProcessId, call: ClientCall, watch: bool) -> CallId {
        self.next_call += 1;
        let id = self.next_call;
        if watch {
            self.watched.insert((pid.clone(), id), None);
        }
        self.push(self.now, Event::Call(pid.clone(), id, call));
        id
    }

    /// Runs until the watched call has a result.
    pub fn wait(&mut self, pid: &ProcessId, id: CallId) -> CallResult {
        let key = (pid.clone(), id);
        let limit = self.now + Duration::from_secs(120);
        loop {
            if let Some(Some(r)) = self.watched.get(&key) {
                let r = r.clone();
                self.watched.remove(&key);
                return r;
            }
            assert!(self.step(limit), "call {id} of {pid} never completed");
        }
    }

    /// Calls and waits.
    pub fn call_wait(&mut self, pid: &ProcessId, call: ClientCall) -> CallResult {
        let id = self.call(pid, call, true);
        self.wait(pid, id)
    }

    fn refresh_timer(&mut self, who: Who) {
        let t = match who {
            None => self.master.poll_timeout(),
            Some(n) => self.daemons[n as usize].poll_timeout(),
        };
        if let Some(old) = self.timer_of.remove(&who) {
            self.timers.remove(&(old, who));
        }
        if let Some(t) = t {
            self.timer_of.insert(who, t);
            self.timers.insert((t, who));
        }
    }

    /// One event or timer no later than `until`; false if there is none.
    fn step(&mut self, until: Instant) -> bool {
        let next_event = self.queue.keys().next().map(|k| k.0);
        let timer = self.timers.first().copied();
        match (next_event, timer) {
            (_, Some((t, who))) if t <= until && next_event.is_none_or(|e| t < e) => {
                self.now = self.now.max(t);
                self.counts.steps += 1;
                match who {
                    None => {
                        self.feed_master(MasterInput::Timeout);
                    }
                    Some(n) => {
                        self.feed_daemon(NodeId(n), DaemonInput::Timeout);
                    }
                }
                true
            }
            (Some(e), _) if e <= until => {
                let (key, ev) = self.queue.pop_first().unwrap();
                self.now = self.now.max(key.0);
                self.counts.steps += 1;
                self.dispatch(ev);
                true
            }
            _ => false,
        }
    }

    fn dispatch(&mut self, ev: Event) {
        match ev {
            Event::ToMaster(node, frame) => {
                let msg = decode_to_master(&frame).expect("the master decodes");
                drop(frame);
                self.feed_master(MasterInput::FromDaemon { node, msg });
            }
            Event::External(ticket, req) => {
                self.feed_master(MasterInput::RequestChange { ticket, req });
            }
            Event::ToDaemon(node, frame) => {
                let msg = decode_to_daemon(&frame).expect("a daemon decodes");
                drop(frame);
                self.feed_daemon(node, DaemonInput::FromMaster(msg));
            }
            Event::ClientToDaemon(from, frame) => {
                if self.exited.contains(&from) {
                    return;
                }
                let (req, request) = decode_client(&frame).expect("a daemon decodes");
                let node = self.node_of[&from];
                self.feed_daemon(node, DaemonInput::FromClient { from, req, request });
            }
            Event::DaemonToClient(to, frame) => {
                if self.exited.contains(&to) {
                    return;
                }
                let (req, reply) = decode_reply(&frame).expect("a client decodes");
                drop(frame);
                if let Some(c) = self.clients.get_mut(&to) {
                    c.handle(self.now, ClientInput::Reply { req, reply })
                        .unwrap();
                }
                self.drain_client(&to);
            }
            Event::Call(pid, id, call) => {
                if self.exited.contains(&pid) {
                    return;
                }
                self.clients
                    .get_mut(&pid)
                    .expect("client exists")
                    .handle(self.now, ClientInput::Call { id, call })
                    .unwrap();
                self.drain_client(&pid);
            }
            Event::Exit(pid) => {
                if !self.exited.insert(pid.clone()) {
                    return;
                }
                self.clients.remove(&pid);
                let node = self.node_of[&pid];
                self.feed_daemon(node, DaemonInput::Exited { pid });
            }
        }
    }

    /// Feeds the master, timing it.
    fn feed_master(&mut self, input: MasterInput) {
        let t0 = (self.clock)();
        self.master.handle(self.now, input).unwrap();
        self.counts.master_ns += (self.clock)() - t0;
        self.drain_master();
    }

    /// Feeds a daemon, timing it. A client's bad request is the client's business
    /// (it gets a typed reply), so the daemon's `Err` is ignored.
    fn feed_daemon(&mut self, node: NodeId, input: DaemonInput) {
        let t0 = (self.clock)();
        let _ = self.daemons[node.0 as usize].handle(self.now, input);
        *self.counts.daemon_ns.entry(node.0).or_default() += (self.clock)() - t0;
        self.drain_daemon(node);
    }

    fn drain_master(&mut self) {
        let at = self.now + self.latency;
        loop {
            let t0 = (self.clock)();
            let o = self.master.poll_output();
            self.counts.master_ns += (self.clock)() - t0;
            let Some(o) = o else { break };
            if let MasterOutput::Send(env) = o {
                let frame = encode_to_daemon(&env.msg);
                self.count(Link::ToDaemon, frame.len());
                let kind = self
                    .counts
                    .to_daemon_kinds
                    .entry(kind(&env.msg))
                    .or_default();
                kind.0 += 1;
                kind.1 += frame.len() as u64;
                self.push(at, Event::ToDaemon(env.to, frame));
            }
        }
        self.refresh_timer(None);
    }

    fn drain_daemon(&mut self, node: NodeId) {
        let at = self.now + self.latency;
        loop {
            let t0 = (self.clock)();
            let o = self.daemons[node.0 as usize].poll_output();
            *self.counts.daemon_ns.entry(node.0).or_default() += (self.clock)() - t0;
            let Some(o) = o else { break };
            match o {
                DaemonOutput::ToMaster(msg) => {
                    let frame = encode_to_master(&msg);
                    self.count(Link::ToMaster, frame.len());
                    self.push(at, Event::ToMaster(node, frame));
                }
                DaemonOutput::ToClient { to, req, reply } => {
                    let frame = encode_reply(req, &reply);
                    self.count(Link::DaemonToClient, frame.len());
                    self.push(at, Event::DaemonToClient(to, frame));
                }
                DaemonOutput::Launch { procs } => {
                    let saw_change = self.daemons[node.0 as usize].changes().next().is_some();
                    for p in procs {
                        self.launched += 1;
                        self.node_of.insert(p.clone(), node);
                        self.clients.insert(p.clone(), Client::new(p.clone()));
                        // A process a change launched queries its change after starting
                        // up and confirms it (thesis Lst. 6.7); the job's first ones
                        // start before any change exists.
                        if saw_change {
                            let call = ClientCall::GetResChange {
                                bound: Some(PsetName::self_set()),
                            };
                            self.next_call += 1;
                            let id = self.next_call;
                            let at = self.now + self.startup;
                            self.push(at, Event::Call(p, id, call));
                        }
                    }
                }
                DaemonOutput::Kill { procs } => {
                    for p in procs {
                        self.push(at, Event::Exit(p));
                    }
                }
                DaemonOutput::Spawn { .. } => unreachable!("the simulated job does not spawn"),
            }
        }
        self.refresh_timer(Some(node.0));
    }

    fn drain_client(&mut self, pid: &ProcessId) {
        let mut outs = Vec::new();
        if let Some(c) = self.clients.get_mut(pid) {
            while let Some(o) = c.poll_output() {
                outs.push(o);
            }
        }
        for o in outs {
            match o {
                ClientOutput::Request { req, request } => {
                    let frame = encode_client(req, &request);
                    self.count(Link::ClientToDaemon, frame.len());
                    let at = self.now + self.latency;
                    self.push(at, Event::ClientToDaemon(pid.clone(), frame));
                }
                ClientOutput::Done { id, result } => {
                    if let CallResult::ResChange(a) = &result {
                        let adds = matches!(a.kind, Some(RcType::Add | RcType::Replace));
                        if a.incl && adds && !a.status.is_final() {
                            if let Some(delta) = a.delta.clone() {
                                let timeout = Duration::from_secs(10);
                                self.call(pid, ClientCall::Confirm { delta, timeout }, false);
                            }
                        }
                    }
                    match result {
                        CallResult::Modex(Ok(_)) => self.modex_ok += 1,
                        CallResult::Fence(Ok(())) => self.fence_ok += 1,
                        _ => {}
                    }
                    if let Some(slot) = self.watched.get_mut(&(pid.clone(), id)) {
                        *slot = Some(result);
                    }
                }
            }
        }
    }

    /// An externally requested change, adapted to by rank 0 (thesis Lst. 6.7: query,
    /// apply the change to `mpi://app/app`, accept), run until FINALIZED and until the
    /// removed processes exited.
    pub fn change(&mut self, req: ChangeRequest) {
        self.seq += 1;
        self.push(self.now, Event::External(self.seq, req));
        self.settle();
        let root_pid = pid(0);
        let r = PsetName::app_root(APP).unwrap();
        let CallResult::ResChange(q) =
            self.call_wait(&root_pid, ClientCall::GetResChange { bound: None })
        else {
            panic!("query")
        };
        let (Some(kind), Some(delta)) = (q.kind, q.delta.clone()) else {
            panic!("no change announced: {q:?}")
        };
        let op = match kind {
            RcType::Add => SetOp::Union,
            RcType::Sub => SetOp::Difference,
            RcType::Replace => unreachable!("the simulation replaces nothing"),
        };
        let ops = vec![PsetOp::Set {
            op,
            pset1: r.clone(),
            pset2: delta.clone(),
            target: Some(r.clone()),
            attrs: AttrUpdate::none(),
        }];
        let CallResult::PsetOp(Ok(_)) = self.call_wait(&root_pid, ClientCall::PsetOp { ops })
        else {
            panic!("pset op failed")
        };
        loop {
            let accept = ClientCall::Accept {
                delta: delta.clone(),
                new_pset: r.clone(),
                bound: None,
                wait: None,
            };
            match self.call_wait(&root_pid, accept) {
                CallResult::Accept(Ok(a)) if a.status == RcStatus::Pending => {
                    self.settle();
                }
                CallResult::Accept(Ok(a)) => {
                    assert_eq!(a.status, RcStatus::Finalized);
                    for p in a.removed {
                        let at = self.now + self.latency;
                        self.push(at, Event::Exit(p));
                    }
                    break;
                }
                other => panic!("accept: {other:?}"),
            }
        }
        self.settle();
    }

    /// Rank 0 creates `mpi://app/app/w`, the union of the world and the application's
    /// pset (every process of the job), in one pset operation.
    pub fn pset_op_on_world(&mut self, target: &str) {
        let ops = vec![PsetOp::Set {
            op: SetOp::Union,
            pset1: PsetName::world(),
            pset2: PsetName::app_root(APP).unwrap(),
            target: Some(PsetName::parse(target).unwrap()),
            attrs: AttrUpdate::none(),
        }];
        let r = self.call_wait(&pid(0), ClientCall::PsetOp { ops });
        assert!(matches!(r, CallResult::PsetOp(Ok(_))), "{r:?}");
        self.settle();
    }

    /// Every process of the job takes part in a modex over the application's pset with
    /// a 15-byte value; returns how many completed.
    pub fn modex(&mut self) -> u64 {
        let pset = PsetName::app_root(APP).unwrap();
        let mut ranks: Vec<ProcessId> = self.clients.keys().cloned().collect();
        ranks.sort();
        for p in ranks {
            let call = ClientCall::Modex {
                pset: pset.clone(),
                data: format!("tcp://{:09}", p.rank),
                timeout: Duration::from_secs(10),
            };
            self.call(&p, call, false);
        }
        self.settle();
        self.modex_ok
    }

    /// Every process of the job enters a fence over the application's pset; returns
    /// how many were released.
    pub fn fence(&mut self) -> u64 {
        let pset = PsetName::app_root(APP).unwrap();
        let mut ranks: Vec<ProcessId> = self.clients.keys().cloned().collect();
        ranks.sort();
        for p in ranks {
            let call = ClientCall::Fence {
                pset: pset.clone(),
                timeout: Duration::from_secs(10),
            };
            self.call(&p, call, false);
        }
        self.settle();
        self.fence_ok
    }

    /// Processes alive (launched and not exited).
    pub fn processes(&self) -> usize {
        self.clients.len()
    }
}
