//! A deterministic in-memory world for the resource-change kernel (think quinn-proto's
//! `Pair`): one master, one daemon per node, one client per process, ordered links with
//! a fixed latency, simulated time. Shared by the flow tests and the benchmark.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use dynres_core::pset::{AttrUpdate, PsetName, PsetOp, SetOp};
use dynres_core::rc::{
    CallId, CallResult, ChangeRequest, Client, ClientCall, ClientInput, ClientOutput, ClientReply,
    ClientRequest, Daemon, DaemonInput, DaemonOutput, Master, MasterConfig, MasterInput,
    MasterOutput, NodeId, RcError, RcStatus, RcType, ReqId, Standing, ToDaemon, ToMaster,
};
use dynres_core::slots::NodeSpec;
use dynres_core::{Duration, Instant, Namespace, ProcessId};

#[derive(Clone, Debug)]
enum Event {
    ToMaster(NodeId, ToMaster),
    ToDaemon(NodeId, ToDaemon),
    ClientToDaemon(ProcessId, ReqId, ClientRequest),
    DaemonToClient(ProcessId, ReqId, ClientReply),
    Call(ProcessId, CallId, ClientCall),
    Exit(ProcessId),
    /// The process reached its MPI library (SPAWN-25).
    Start(ProcessId),
    External(ChangeRequest),
}

/// How new and removed processes behave on their own.
#[derive(Clone, Debug)]
pub struct Behaviour {
    /// New processes query `mpi://SELF` after this start-up delay, then confirm.
    pub confirm: bool,
    /// Start-up delay of a new process.
    pub startup: Duration,
    /// Timeout new processes give their confirm.
    pub confirm_timeout: Duration,
    /// Killed processes exit (after one latency).
    pub exit_on_kill: bool,
    /// Processes a finalized change removes exit (after one latency) once `adapt`
    /// returns; off, they stay until the test makes them exit.
    pub exit_when_removed: bool,
}

pub struct World {
    pub now: Instant,
    pub latency: Duration,
    pub master: Master,
    pub daemons: Vec<Daemon>,
    pub clients: BTreeMap<ProcessId, Client>,
    pub node_of: BTreeMap<ProcessId, NodeId>,
    pub behaviour: Behaviour,
    queue: BTreeMap<(Instant, u64), Event>,
    seq: u64,
    next_call: CallId,
    pub results: BTreeMap<(ProcessId, CallId), CallResult>,
    /// Status changes the master reported, in order.
    pub statuses: Vec<(PsetName, RcStatus)>,
    /// Other master outputs (refusals, node allocation, lost processes).
    pub notices: Vec<MasterOutput>,
    /// Per launched process: did its daemon already announce a change holding it? (RC-3)
    pub launch_saw_change: BTreeMap<ProcessId, bool>,
    pub killed: BTreeSet<ProcessId>,
    pub exited: BTreeSet<ProcessId>,
    /// Processes that crash instead of confirming.
    pub crash_on_launch: BTreeSet<ProcessId>,
    /// Every reply value a daemon served for a query, per process (versions monotone?).
    pub messages: u64,
    /// Modex batches daemons sent: (node, pset, version, members in the batch).
    pub modex_batches: Vec<(NodeId, PsetName, u64, usize)>,
    /// Modex outcomes the master sent: (node, pset, version, ok).
    pub modex_done: Vec<(NodeId, PsetName, u64, bool)>,
    /// `Stale` modex replies daemons handed clients: (client, pset, newer version).
    pub modex_stale: Vec<(ProcessId, PsetName, u64)>,
    /// Changes the master withdrew from a daemon's replica (`ToDaemon::Change` with no
    /// info): (daemon, delta).
    pub withdrawn: Vec<(NodeId, PsetName)>,
    /// Spawned children as their daemons launched them: (node, app, the command's
    /// program, whether the daemon's replica already held the child in its app pset).
    pub spawned: BTreeMap<ProcessId, (NodeId, String, String, bool)>,
    /// Each launched process' standing as its daemon's replica gave it at the launch.
    pub standings: BTreeMap<ProcessId, Option<Standing>>,
    /// Timers fired in a row at one instant with no event in between: a machine whose
    /// timer stays due after it fired would spin the world forever.
    timers_at_now: (Instant, u32),
}

/// Timers one instant may fire in a row before the world declares a machine stuck.
const MAX_TIMERS_AT_ONE_INSTANT: u32 = 64;

pub const APP: &str = "app";

pub fn pid(rank: u32) -> ProcessId {
    ProcessId::new(Namespace::new("job"), rank)
}

pub fn name(s: &str) -> PsetName {
    PsetName::parse(s).unwrap()
}

pub fn root() -> PsetName {
    PsetName::app_root(APP).unwrap()
}

pub fn config(nodes: u32, slots: u32, start: u32) -> MasterConfig {
    MasterConfig {
        namespace: Namespace::new("job"),
        nodes: (0..nodes)
            .map(|i| NodeSpec {
                name: format!("n{i}"),
                slots,
            })
            .collect(),
        apps: vec![(APP.to_string(), start)],
        change_timeout: Duration::from_millis(500),
        grace: Duration::from_millis(100),
        max_queued: 2,
        grow_wait: None,
        data_server: Default::default(),
    }
}

impl World {
    pub fn new(cfg: MasterConfig) -> World {
        let nodes = cfg.nodes.len() as u32;
        let master = Master::new(cfg).expect("job starts");
        let mut w = World {
            now: Instant::ZERO,
            latency: Duration::from_micros(10),
            master,
            daemons: (0..nodes).map(|n| Daemon::new(NodeId(n))).collect(),
            clients: BTreeMap::new(),
            spawned: BTreeMap::new(),
            standings: BTreeMap::new(),
            node_of: BTreeMap::new(),
            behaviour: Behaviour {
                confirm: true,
                startup: Duration::from_millis(5),
                confirm_timeout: Duration::from_millis(200),
                exit_on_kill: true,
                exit_when_removed: true,
            },
            queue: BTreeMap::new(),
            seq: 0,
            next_call: 0,
            results: BTreeMap::new(),
            statuses: Vec::new(),
            notices: Vec::new(),
            launch_saw_change: BTreeMap::new(),
            killed: BTreeSet::new(),
            exited: BTreeSet::new(),
            crash_on_launch: BTreeSet::new(),
            messages: 0,
            modex_batches: Vec::new(),
            modex_done: Vec::new(),
            modex_stale: Vec::new(),
            withdrawn: Vec::new(),
            timers_at_now: (Instant::ZERO, 0),
        };
        w.drain_master();
        w.run_for(Duration::from_millis(1));
        w
    }

    fn push(&mut self, at: Instant, e: Event) {
        self.seq += 1;
        self.messages += 1;
        self.queue.insert((at, self.seq), e);
    }

    /// Makes `pid` call `call` now; returns the call id.
    pub fn call(&mut self, pid: &ProcessId, call: ClientCall) -> CallId {
        self.next_call += 1;
        let id = self.next_call;
        self.push(self.now, Event::Call(pid.clone(), id, call));
        id
    }

    /// A change from outside (tool or scheduler).
    pub fn request(&mut self, req: ChangeRequest) {
        self.push(self.now, Event::External(req));
    }

    /// Runs until the call has a result (or `limit` of simulated time passes).
    pub fn wait(&mut self, pid: &ProcessId, id: CallId) -> CallResult {
        let limit = self.now + Duration::from_secs(10);
        while !self.results.contains_key(&(pid.clone(), id)) {
            assert!(self.step(limit), "call {id} of {pid} never completed");
        }
        self.results[&(pid.clone(), id)].clone()
    }

    /// Calls and waits.
    pub fn call_wait(&mut self, pid: &ProcessId, call: ClientCall) -> CallResult {
        let id = self.call(pid, call);
        self.wait(pid, id)
    }

    /// Runs every event and timer up to `now + d`.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        while self.step(until) {}
        self.now = until;
    }

    /// One event or timer no later than `until`; false if there is none.
    fn step(&mut self, until: Instant) -> bool {
        let next_event = self.queue.keys().next().map(|k| k.0);
        // The master's timer, then each daemon's (modex gathers, MODEX-5): `None` is
        // the master.
        let timer = std::iter::once((None, self.master.poll_timeout()))
            .chain(
                self.daemons
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (Some(i), d.poll_timeout())),
            )
            .filter_map(|(who, t)| t.map(|t| (t, who)))
            .min();
        match (next_event, timer) {
            (_, Some((t, who))) if t <= until && next_event.is_none_or(|e| t < e) => {
                self.now = self.now.max(t);
                self.note_timer(who);
                match who {
                    None => {
                        self.master.handle(self.now, MasterInput::Timeout).unwrap();
                        self.drain_master();
                    }
                    Some(i) => {
                        self.daemons[i]
                            .handle(self.now, DaemonInput::Timeout)
                            .unwrap();
                        self.drain_daemon(NodeId(i as u32));
                    }
                }
                true
            }
            (Some(e), _) if e <= until => {
                self.timers_at_now.1 = 0;
                let (key, ev) = self.queue.pop_first().unwrap();
                self.now = self.now.max(key.0);
                self.dispatch(ev);
                true
            }
            _ => false,
        }
    }

    /// Fails the test when timers keep firing at one instant without progress (a
    /// deadline that handling its timeout does not clear), instead of spinning.
    pub fn note_timer(&mut self, who: Option<usize>) {
        if self.timers_at_now.0 == self.now {
            self.timers_at_now.1 += 1;
        } else {
            self.timers_at_now = (self.now, 1);
        }
        assert!(
            self.timers_at_now.1 <= MAX_TIMERS_AT_ONE_INSTANT,
            "{} timer(s) fired {} times at {:?} with nothing else happening: its deadline \
             is never cleared",
            who.map_or("the master's".to_string(), |n| format!("daemon {n}'s")),
            self.timers_at_now.1,
            self.now
        );
    }

    fn dispatch(&mut self, ev: Event) {
        match ev {
            Event::ToMaster(node, msg) => {
                self.master
                    .handle(self.now, MasterInput::FromDaemon { node, msg })
                    .unwrap();
                self.drain_master();
            }
            Event::External(req) => {
                self.master
                    .handle(
                        self.now,
                        MasterInput::RequestChange {
                            ticket: self.seq,
                            req,
                        },
                    )
                    .unwrap();
                self.drain_master();
            }
            Event::ToDaemon(node, msg) => {
                self.daemons[node.0 as usize]
                    .handle(self.now, DaemonInput::FromMaster(msg))
                    .unwrap();
                self.drain_daemon(node);
            }
            Event::ClientToDaemon(from, req, request) => {
                if self.exited.contains(&from) {
                    return;
                }
                let node = self.node_of[&from];
                let _ = self.daemons[node.0 as usize]
                    .handle(self.now, DaemonInput::FromClient { from, req, request });
                self.drain_daemon(node);
            }
            Event::DaemonToClient(to, req, reply) => {
                if self.exited.contains(&to) {
                    return;
                }
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
                let node = self.node_of[&pid];
                self.daemons[node.0 as usize]
                    .handle(self.now, DaemonInput::Exited { pid })
                    .unwrap();
                self.drain_daemon(node);
            }
            Event::Start(pid) => {
                let node = self.node_of[&pid];
                self.daemons[node.0 as usize]
                    .handle(self.now, DaemonInput::Started { pid })
                    .unwrap();
                self.drain_daemon(node);
            }
        }
    }

    fn drain_master(&mut self) {
        while let Some(o) = self.master.poll_output() {
            match o {
                MasterOutput::Send(env) => {
                    if let ToDaemon::ModexDone {
                        pset,
                        version,
                        result,
                    } = &env.msg
                    {
                        let done = (env.to, pset.clone(), *version, result.is_ok());
                        self.modex_done.push(done);
                    }
                    if let ToDaemon::Change { delta, info: None } = &env.msg {
                        self.withdrawn.push((env.to, delta.clone()));
                    }
                    let at = self.now + self.latency;
                    self.push(at, Event::ToDaemon(env.to, env.msg));
                }
                MasterOutput::Status { delta, status } => self.statuses.push((delta, status)),
                other => self.notices.push(other),
            }
        }
    }

    fn drain_daemon(&mut self, node: NodeId) {
        while let Some(o) = self.daemons[node.0 as usize].poll_output() {
            let at = self.now + self.latency;
            match o {
                DaemonOutput::ToMaster(msg) => {
                    if let ToMaster::Modex {
                        pset,
                        version,
                        entries,
                        ..
                    } = &msg
                    {
                        let batch = (node, pset.clone(), *version, entries.len());
                        self.modex_batches.push(batch);
                    }
                    self.push(at, Event::ToMaster(node, msg))
                }
                DaemonOutput::ToClient { to, req, reply } => {
                    if let ClientReply::Modex(Err(RcError::Stale { pset, version })) = &reply {
                        self.modex_stale.push((to.clone(), pset.clone(), *version));
                    }
                    self.push(at, Event::DaemonToClient(to, req, reply))
                }
                DaemonOutput::Launch { procs } => {
                    for p in procs {
                        let standing = self.daemons[node.0 as usize].standing(&p, None);
                        self.standings.insert(p.clone(), standing);
                        let saw = self.daemons[node.0 as usize]
                            .changes()
                            .any(|c| c.includes(&p));
                        // The job's first processes start before any change exists.
                        if !self.statuses.is_empty() {
                            self.launch_saw_change.insert(p.clone(), saw);
                        }
                        self.node_of.insert(p.clone(), node);
                        self.clients.insert(p.clone(), Client::new(p.clone()));
                        if self.crash_on_launch.contains(&p) {
                            // Dies while the others are already confirming.
                            let at = self.now + self.behaviour.startup + self.behaviour.startup;
                            self.push(at, Event::Exit(p));
                        } else if self.behaviour.confirm && saw {
                            self.next_call += 1;
                            let id = self.next_call;
                            let at = self.now + self.behaviour.startup;
                            let call = ClientCall::GetResChange {
                                bound: Some(PsetName::self_set()),
                            };
                            self.push(at, Event::Call(p, id, call));
                        }
                    }
                }
                DaemonOutput::Spawn {
                    app,
                    command,
                    procs,
                } => {
                    let daemon = &self.daemons[node.0 as usize];
                    for p in procs {
                        // SPAWN-18: the replica holds the child's pset and job data.
                        let root = PsetName::app_root(&app).expect("app name");
                        let known = daemon.job().contains(&p)
                            && daemon.pset(&root).is_some_and(|(m, _)| m.contains(&p));
                        self.standings
                            .insert(p.clone(), daemon.standing(&p, Some(&app)));
                        let launched = (node, app.clone(), command.program.clone(), known);
                        self.spawned.insert(p.clone(), launched);
                        self.node_of.insert(p.clone(), node);
                        self.clients.insert(p.clone(), Client::new(p.clone()));
                    }
                }
                DaemonOutput::Kill { procs } => {
                    for p in procs {
                        self.killed.insert(p.clone());
                        if self.behaviour.exit_on_kill {
                            self.push(at, Event::Exit(p));
                        }
                    }
                }
            }
        }
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
                    let at = self.now + self.latency;
                    self.push(at, Event::ClientToDaemon(pid.clone(), req, request));
                }
                ClientOutput::Done { id, result } => {
                    // A new process that finds itself in an ADD confirms it (Lst. 6.7).
                    if let CallResult::ResChange(a) = &result {
                        let adds = matches!(a.kind, Some(RcType::Add | RcType::Replace));
                        if self.behaviour.confirm && a.incl && adds && !a.status.is_final() {
                            if let Some(delta) = a.delta.clone() {
                                let timeout = self.behaviour.confirm_timeout;
                                self.call(pid, ClientCall::Confirm { delta, timeout });
                            }
                        }
                    }
                    self.results.insert((pid.clone(), id), result);
                }
            }
        }
    }

    /// Results of every confirm call, per process.
    pub fn confirms(&self) -> BTreeMap<ProcessId, Result<PsetName, dynres_core::rc::RcError>> {
        self.results
            .iter()
            .filter_map(|((p, _), r)| match r {
                CallResult::Confirm(r) => Some((p.clone(), r.clone())),
                _ => None,
            })
            .collect()
    }

    /// The statuses reported for one change, in order.
    pub fn status_log(&self, delta: &PsetName) -> Vec<RcStatus> {
        self.statuses
            .iter()
            .filter(|(d, _)| d == delta)
            .map(|(_, s)| *s)
            .collect()
    }

    pub fn members(&self, pset: &PsetName) -> Vec<u32> {
        self.master
            .registry()
            .members(&dynres_core::pset::Origin::Runtime, pset)
            .unwrap_or_default()
            .iter()
            .map(|p| p.rank)
            .collect()
    }

    pub fn version(&self, pset: &PsetName) -> u64 {
        self.master
            .registry()
            .get(pset)
            .map(|p| p.attrs.version)
            .unwrap_or(u64::MAX)
    }

    /// Phases 1 and 2 of [`World::adapt`]: `root_pid` queries its application's change
    /// and applies it to `r`. Returns the change's delta pset.
    pub fn apply_change(&mut self, r: &PsetName, root_pid: &ProcessId) -> PsetName {
        let CallResult::ResChange(q) =
            self.call_wait(root_pid, ClientCall::GetResChange { bound: None })
        else {
            panic!("query")
        };
        let (Some(kind), Some(delta)) = (q.kind, q.delta.clone()) else {
            panic!("no change announced: {q:?}")
        };
        let op = |op, with: &PsetName| PsetOp::Set {
            op,
            pset1: r.clone(),
            pset2: with.clone(),
            target: Some(r.clone()),
            attrs: AttrUpdate::none(),
        };
        let ops = match kind {
            RcType::Add => vec![op(SetOp::Union, &delta)],
            RcType::Sub => vec![op(SetOp::Difference, &delta)],
            RcType::Replace => vec![
                op(SetOp::Difference, q.sub_delta.as_ref().unwrap()),
                op(SetOp::Union, &delta),
            ],
        };
        let CallResult::PsetOp(Ok(_)) = self.call_wait(root_pid, ClientCall::PsetOp { ops }) else {
            panic!("pset op failed")
        };
        delta
    }

    /// The thesis' Lst. 6.7 adaptation step, run by `root` for application-level
    /// changes: query, apply the change to `mpi://app/app` (phase 2), accept (phase 3),
    /// and poll a non-blocking accept until it is decided. Removed processes exit.
    /// Returns the final accept result.
    pub fn adapt(&mut self, root_pid: &ProcessId, wait: Option<Duration>) -> CallResult {
        self.adapt_pset(&root(), root_pid, wait)
    }

    /// [`World::adapt`] for the application whose pset to change is `r`.
    pub fn adapt_pset(
        &mut self,
        r: &PsetName,
        root_pid: &ProcessId,
        wait: Option<Duration>,
    ) -> CallResult {
        let delta = self.apply_change(r, root_pid);
        loop {
            let accept = ClientCall::Accept {
                delta: delta.clone(),
                new_pset: r.clone(),
                bound: None,
                wait,
            };
            let res = self.call_wait(root_pid, accept);
            match &res {
                CallResult::Accept(Ok(a)) if a.status == RcStatus::Pending => {
                    self.run_for(Duration::from_millis(1));
                }
                CallResult::Accept(Ok(a)) => {
                    if self.behaviour.exit_when_removed {
                        for p in a.removed.clone() {
                            let at = self.now + self.latency;
                            self.push(at, Event::Exit(p));
                        }
                    }
                    return res;
                }
                _ => return res,
            }
        }
    }

    /// One cycle of a malleable job: `app` (the root process `pid(0)` adapting) grows
    /// by `k` processes, then shrinks by `k`; both changes must finalize, and the removed
    /// processes have exited when it returns.
    pub fn grow_shrink_cycle(&mut self, k: u32) {
        for req in [ChangeRequest::add(APP, k), ChangeRequest::sub(APP, k)] {
            self.finalize(req);
        }
    }

    /// Requests `req` from outside, runs Lst. 6.7 on rank 0 and asserts the change
    /// FINALIZED, then lets removed processes exit.
    pub fn finalize(&mut self, req: ChangeRequest) {
        self.request(req);
        self.run_for(Duration::from_millis(1));
        let r = self.adapt(&pid(0), None);
        assert!(
            matches!(r, CallResult::Accept(Ok(ref a)) if a.status == RcStatus::Finalized),
            "{r:?}"
        );
        self.run_for(Duration::from_millis(5));
    }

    /// A node crashes: its processes die with it and the failure detector tells the
    /// master (`RC-17`).
    pub fn lose_node(&mut self, node: NodeId) {
        let dead: Vec<ProcessId> = self
            .node_of
            .iter()
            .filter(|(_, n)| **n == node)
            .map(|(p, _)| p.clone())
            .collect();
        self.exited.extend(dead);
        self.master
            .handle(self.now, MasterInput::NodeLost { node })
            .unwrap();
        self.drain_master();
    }

    /// The driver adds a node (`RC-21`): a daemon for it, then the master's input.
    pub fn add_node(
        &mut self,
        name: &str,
        slots: u32,
    ) -> Result<(), dynres_core::rc::MasterRejection> {
        let node = NodeId(self.daemons.len() as u32);
        self.daemons.push(Daemon::new(node));
        let spec = NodeSpec {
            name: name.to_string(),
            slots,
        };
        let r = self
            .master
            .handle(self.now, MasterInput::NodeAdded { node: spec });
        self.drain_master();
        r
    }

    /// Makes a process exit now (finalize, or a crash).
    pub fn exit(&mut self, pid: &ProcessId) {
        self.push(self.now, Event::Exit(pid.clone()));
    }

    /// Process `pid` reaches its MPI library (its daemon's `Started`, SPAWN-25).
    pub fn start(&mut self, pid: &ProcessId) {
        self.push(self.now, Event::Start(pid.clone()));
    }
}
