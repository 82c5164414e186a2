//! The master: pset-operation module, publish/lookup data server, resource-change
//! controller and slot allocation, all serialized here (thesis §7.3–7.4.3;
//! `spec/resource-change.md` §4).
//!
//! Sans-I/O: feed [`MasterInput`]s with the current time to [`Master::handle`], then
//! drain [`Master::poll_output`] and arm a timer for [`Master::poll_timeout`].

mod data;
mod footprint;
mod growth;
mod guest;
mod modex;
mod phase1;
mod phase3;
mod retire;
mod spawn;

pub use footprint::Footprint;
pub use phase3::{accept_key, confirm_key};
pub use spawn::MAX_SPAWN;

use crate::shared::Shared;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;

use super::error::{BadRequest, MasterRejection, RcError};
pub use super::input::{DataServer, MasterConfig, MasterInput};
use super::msg::{ClientReply, ClientRequest, Envelope, ToDaemon, ToMaster};
use super::trace;
use super::types::{AbortReason, ChangeInfo, ChangeRequest, NodeId, RcStatus, ReqId};
use crate::process::{ProcessId, Rank};
use crate::pset::{Origin, PsetName, PsetRegistry};
use crate::slots::SlotMap;
use crate::time::Instant;

/// Most slots a job may have, over all its nodes: the slot map and the process table
/// are sized by it, so it is checked before either is allocated.
pub const MAX_SLOTS: u64 = 1 << 24;

/// Decided changes whose processes are all gone that the master still remembers (to
/// answer late accepts and confirms, `RC-13`). Older ones are forgotten with their
/// protocol keys, so a job's memory does not grow with its number of changes (`RC-19`).
pub const DONE_KEPT: usize = 16;

/// What the master wants done.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MasterOutput {
    /// Send this message to that daemon, in order after the ones before it.
    Send(Envelope),
    /// A change's status moved (for tools, `dynres status`, logs).
    Status {
        /// The change.
        delta: PsetName,
        /// Its new status.
        status: RcStatus,
    },
    /// A change was ABORTED, and why (reported just before its `Status`).
    Aborted {
        /// The change.
        delta: PsetName,
        /// Why.
        reason: AbortReason,
    },
    /// An externally requested change was refused (queued ones report here too).
    Refused {
        /// The ticket of the request.
        ticket: u64,
        /// The request.
        request: ChangeRequest,
        /// Why.
        error: RcError,
    },
    /// An externally requested change was announced (at once, or when it left the
    /// queue): its outcome is the final status of `delta`.
    Started {
        /// The ticket of the request.
        ticket: u64,
        /// The change's delta pset.
        delta: PsetName,
    },
    /// A node got its first process of the job (allocate it, e.g. start its daemon).
    NodeAllocated(NodeId),
    /// A change request needs this many more slots than the job has (`RC-21`): the
    /// driver may add nodes ([`MasterInput::NodeAdded`]) within `grow_wait`; the request
    /// waits for them and is refused with [`RcError::NotGranted`] if they do not come.
    NeedSlots {
        /// Slots missing.
        slots: u32,
    },
    /// A node has no process of the job left (it may be returned).
    NodeReleased(NodeId),
    /// A process of the job exited without the protocol removing it (`RC-18`): the job
    /// lost it. Its application's undecided change, if any, was aborted. A child of a
    /// spawn made by an MPI library ([`SpawnWatch::Job`]) exits as this too
    /// (`SPAWN-24`).
    ///
    /// [`SpawnWatch::Job`]: crate::rc::SpawnWatch::Job
    ProcessLost(ProcessId),
    /// Send this data-server request of one of the job's applications to the job whose
    /// data server this job uses (`NAMES-1`), and feed its answer back as
    /// [`MasterInput::Forwarded`] under `ticket`.
    ForwardData {
        /// The master's name for the request.
        ticket: u64,
        /// A publish, lookup or unpublish.
        request: ClientRequest,
    },
    /// The answer to a guest job's request (`NAMES-2`,
    /// [`MasterInput::Guest`]).
    GuestReply {
        /// The guest's ticket.
        ticket: u64,
        /// The answer.
        reply: ClientReply,
    },
    /// A child of a spawn whose spawner runs the kernel's handshake exited
    /// (`SPAWN-19`): its slot is free again. Not a loss of the job; whether it ended well
    /// is for the driver to say (it knows the status).
    SpawnedExited(ProcessId),
}

/// Where a reply goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Route {
    pub node: NodeId,
    pub pid: ProcessId,
    pub req: ReqId,
}

/// Who asked for a change: a client (answered with a reply) or an external initiator
/// (answered with [`MasterOutput::Started`] / [`MasterOutput::Refused`] under its ticket).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Requester {
    Client(Route),
    External(u64),
}

/// A change the master tracks until its processes are gone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Change {
    pub info: ChangeInfo,
    /// Registry and job data before the change (`RC-12`).
    pub snapshot: Shared<PsetRegistry>,
    pub procs_before: Shared<BTreeMap<ProcessId, NodeId>>,
    /// Accepts received: bound pset → new pset (`RC-8`).
    pub accepted: BTreeMap<PsetName, PsetName>,
    /// New processes that confirmed (`RC-9`).
    pub confirmed: BTreeSet<ProcessId>,
    /// Decision deadline while not final.
    pub deadline: Option<Instant>,
    /// After FINALIZED: when leaving processes get killed (`RC-11`).
    pub grace_deadline: Option<Instant>,
    /// Processes of the change (removed, or added after an abort) that have exited.
    pub exited: BTreeSet<ProcessId>,
    /// Blocking accepts and confirms waiting for the decision.
    pub waiters: Vec<(Route, Waiter)>,
    /// Who asked for the change.
    pub requester: Requester,
    /// Decided and every process it had to get rid of is gone: kept only to answer
    /// late accepts and confirms consistently (`RC-1`).
    pub done: bool,
}

/// What a parked reply is waiting for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Waiter {
    /// A blocking accept for this new pset, until this deadline.
    Accept {
        new_pset: PsetName,
        deadline: Instant,
    },
    /// A confirm: answered at the decision.
    Confirm,
}

/// A request waiting for slots the driver was asked for (`RC-21`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Growth {
    pub from: Requester,
    pub req: ChangeRequest,
    /// Slots asked for.
    pub slots: u32,
    /// When it is refused if the slots have not come.
    pub deadline: Instant,
    /// Only with the planted bug `KeepRefusedGrowth`: refused, yet still held.
    pub refused: bool,
}

/// A fence in progress over a pset.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Fence {
    pub members: BTreeSet<ProcessId>,
    pub arrived: BTreeMap<ProcessId, Route>,
    pub deadline: Instant,
}

/// The runtime's head: see the module doc.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Master {
    pub(crate) cfg: Shared<MasterConfig>,
    pub(crate) registry: Shared<PsetRegistry>,
    pub(crate) slots: Shared<SlotMap>,
    /// Next rank to hand out; never decreases, not even on abort (`PSET-20`).
    pub(crate) next_rank: Rank,
    /// Job data: every process of the job and its node.
    pub(crate) procs: Shared<BTreeMap<ProcessId, NodeId>>,
    /// The application of every process ever started.
    pub(crate) app_of: Shared<BTreeMap<ProcessId, String>>,
    /// Every change by delta pset, kept until its processes are gone.
    pub(crate) changes: BTreeMap<PsetName, Change>,
    /// The undecided change of each application (`RC-15`).
    pub(crate) in_flight: BTreeMap<String, PsetName>,
    /// Requests waiting for their application's change to be decided (`RC-15`).
    pub(crate) queue: VecDeque<(Requester, ChangeRequest)>,
    /// The publish/lookup data server.
    pub(crate) data: Shared<BTreeMap<String, String>>,
    /// Lookups waiting for their key: (key, deadline, route).
    pub(crate) lookups: Vec<(String, Instant, Route)>,
    /// Requests forwarded to another job's data server, by ticket (`NAMES-1`): the
    /// client, and the error reply it gets if no answer of its kind comes.
    pub(crate) forwarded: BTreeMap<u64, (Route, ClientReply)>,
    /// The ticket of the next forwarded request.
    pub(crate) next_forward: u64,
    pub(crate) fences: BTreeMap<PsetName, Fence>,
    /// Modexes in progress, by pset (`MODEX-1..6`).
    pub(crate) modexes: BTreeMap<PsetName, modex::ModexGather>,
    /// The request waiting for the driver to add slots (`RC-21`), if any.
    pub(crate) growth: Option<Growth>,
    /// Spawns with children left, by the children's application (`SPAWN-17..20`).
    pub(crate) spawns: Shared<BTreeMap<String, spawn::SpawnGroup>>,
    /// The `k` of the next spawn's application `spawn-{k}`; never reused.
    pub(crate) next_spawn: u64,
    /// Done changes, oldest first; beyond [`DONE_KEPT`] the oldest is forgotten.
    pub(crate) done_order: Shared<VecDeque<PsetName>>,
    pub(crate) out: VecDeque<MasterOutput>,
    /// Planted bugs (always empty in shipped builds).
    pub(crate) bugs: crate::bugs::Bugs,
}

impl Master {
    /// Starts a job: places every application's processes in stack order, defines the
    /// mandatory psets and tells each daemon its job data and what to launch.
    pub fn new(cfg: MasterConfig) -> Result<Master, RcError> {
        // Sizes are checked before any table is allocated for them (`RC-2`).
        let total: u64 = cfg.nodes.iter().map(|n| u64::from(n.slots)).sum();
        if total > MAX_SLOTS {
            return Err(RcError::BadRequest(BadRequest::TooManySlots));
        }
        let wanted: u64 = cfg.apps.iter().map(|(_, n)| u64::from(*n)).sum();
        if wanted > total {
            return Err(RcError::Slots(crate::slots::SlotError::Exhausted {
                wanted: wanted as usize,
                free: total as usize,
            }));
        }
        let mut m = Master {
            registry: PsetRegistry::new().into(),
            slots: SlotMap::new(cfg.nodes.clone()).into(),
            next_rank: 0,
            procs: BTreeMap::new().into(),
            app_of: BTreeMap::new().into(),
            changes: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            queue: VecDeque::new(),
            data: BTreeMap::new().into(),
            lookups: Vec::new(),
            forwarded: BTreeMap::new(),
            next_forward: 0,
            fences: BTreeMap::new(),
            modexes: BTreeMap::new(),
            growth: None,
            spawns: BTreeMap::new().into(),
            next_spawn: 0,
            done_order: VecDeque::new().into(),
            out: VecDeque::new(),
            bugs: crate::bugs::Bugs::NONE,
            cfg: cfg.into(),
        };
        let mut apps: Vec<(String, Vec<ProcessId>)> = Vec::new();
        for (app, n) in m.cfg.apps.clone() {
            if n == 0 {
                return Err(RcError::BadRequest(BadRequest::EmptyApplication));
            }
            let procs = m.new_ranks(n);
            apps.push((app, procs));
        }
        let all: Vec<ProcessId> = apps.iter().flat_map(|(_, p)| p.iter().cloned()).collect();
        let (placed, new_nodes) = m.slots.place(&all)?;
        let refs: Vec<(&str, &[ProcessId])> = apps
            .iter()
            .map(|(a, p)| (a.as_str(), p.as_slice()))
            .collect();
        m.registry.start_job(&refs)?;
        for (app, procs) in &apps {
            for p in procs {
                m.app_of.insert(p.clone(), app.clone());
            }
        }
        for p in &placed {
            m.procs.insert(p.pid.clone(), NodeId(p.node));
        }
        for n in new_nodes {
            m.out.push_back(MasterOutput::NodeAllocated(NodeId(n)));
        }
        let names: Vec<PsetName> = m.registry.live_psets().map(|(n, _)| n.clone()).collect();
        for name in names {
            m.broadcast_pset(&name);
        }
        m.broadcast(ToDaemon::job_data(&all, &[]));
        m.launch(&all);
        let start = crate::trace::enabled().then(|| trace::encode_master_config(&m.cfg));
        crate::trace::record_start(&mut m, start);
        Ok(m)
    }

    /// Feeds one input. A client's bad request gets a typed reply; `Err` is only for
    /// input the master cannot attribute (a message from an unknown node), which
    /// changes nothing.
    pub fn handle(&mut self, now: Instant, input: MasterInput) -> Result<(), MasterRejection> {
        crate::trace::record(self, now, input, Self::transition)
    }

    /// [`Master::handle`] without its transition event.
    fn transition(&mut self, now: Instant, input: MasterInput) -> Result<(), MasterRejection> {
        self.step(now, input)?;
        if !self.bug(crate::bugs::Bug::ModexIgnoreVersion) {
            self.recheck_modexes();
        }
        Ok(())
    }

    /// A fingerprint of the state, without the queue of outputs not yet drained (so it
    /// does not depend on when the driver drains them).
    pub fn fingerprint(&mut self) -> u64 {
        let out = core::mem::take(&mut self.out);
        let fp = trace::fingerprint(self);
        self.out = out;
        fp
    }

    fn step(&mut self, now: Instant, input: MasterInput) -> Result<(), MasterRejection> {
        tracing::trace!(?input, "master input");
        match input {
            MasterInput::FromDaemon { node, .. } if node.0 as usize >= self.cfg.nodes.len() => {
                return Err(MasterRejection::UnknownNode(node));
            }
            MasterInput::FromDaemon { node, msg } => match msg {
                ToMaster::Forward { from, req, request } => {
                    let route = Route {
                        node,
                        pid: from,
                        req,
                    };
                    self.on_request(now, route, request);
                }
                ToMaster::Exited { pid } => self.on_exit(now, &pid),
                // SPAWN-25: believed only from the node the process runs on.
                ToMaster::Started { pid } if self.procs.get(&pid) == Some(&node) => {
                    self.on_started(&pid)
                }
                ToMaster::Started { .. } => {}
                ToMaster::Modex {
                    pset,
                    version,
                    timeout,
                    entries,
                } => self.on_modex_batch(now, node, pset, version, timeout, entries),
            },
            MasterInput::RequestChange { ticket, req } => {
                self.request_change(now, Requester::External(ticket), req)
            }
            MasterInput::Timeout => self.on_timeout(now),
            MasterInput::NodeLost { node } => self.on_node_lost(now, node),
            MasterInput::NodeReturned { node } => return self.on_node_returned(node),
            MasterInput::NodeAdded { node } => return self.on_node_added(now, node),
            MasterInput::SlotsDenied => self.expire_growth(now, true),
            MasterInput::Guest { ticket, request } => self.on_guest(now, ticket, request),
            MasterInput::Forwarded { ticket, reply } => self.on_forwarded(ticket, reply),
        }
        Ok(())
    }

    /// The next thing to do, if any.
    #[must_use = "an output is an action the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<MasterOutput> {
        self.out.pop_front()
    }

    /// When to call `handle(now, MasterInput::Timeout)` next.
    #[must_use = "a deadline the driver must arm a timer for"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let changes = self.changes.values().flat_map(|c| {
            let waits = c.waiters.iter().filter_map(|(_, w)| match w {
                Waiter::Accept { deadline, .. } => Some(*deadline),
                Waiter::Confirm => None,
            });
            c.deadline.into_iter().chain(c.grace_deadline).chain(waits)
        });
        let lookups = self.lookups.iter().map(|(_, d, _)| *d);
        let fences = self.fences.values().map(|f| f.deadline);
        let modexes = self.modexes.values().map(|g| g.deadline);
        let growth = self
            .growth
            .as_ref()
            .filter(|g| !g.refused)
            .map(|g| g.deadline);
        changes
            .chain(lookups)
            .chain(fences)
            .chain(modexes)
            .chain(growth)
            .min()
    }

    /// Plants bugs for the verification crate's corpus.
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bugs: crate::bugs::Bugs) {
        self.bugs = bugs;
        self.registry.bugs = bugs;
        self.slots.bugs = bugs;
    }

    pub(crate) fn bug(&self, bug: crate::bugs::Bug) -> bool {
        self.bugs.has(bug)
    }

    /// The pset registry (for status displays and checks).
    pub fn registry(&self) -> &PsetRegistry {
        &self.registry
    }

    /// The slot map.
    pub fn slots(&self) -> &SlotMap {
        &self.slots
    }

    /// Job data: the job's processes and their nodes.
    pub fn processes(&self) -> &BTreeMap<ProcessId, NodeId> {
        &self.procs
    }

    /// Every change still in progress (undecided, or decided with processes still to
    /// go), by delta pset.
    pub fn changes(&self) -> impl Iterator<Item = &ChangeInfo> {
        self.changes.values().filter(|c| !c.done).map(|c| &c.info)
    }

    /// Every change the master has announced, decided ones included.
    pub fn all_changes(&self) -> impl Iterator<Item = &ChangeInfo> {
        self.changes.values().map(|c| &c.info)
    }

    /// The keys published on the data server (the application's and the protocol's).
    pub fn published_keys(&self) -> impl Iterator<Item = &str> {
        self.data.keys().map(String::as_str)
    }

    /// The accepts recorded for a change: bound pset → new pset (`RC-8`).
    pub fn accepts(&self, delta: &PsetName) -> Option<&BTreeMap<PsetName, PsetName>> {
        self.changes.get(delta).map(|c| &c.accepted)
    }

    /// The new processes that confirmed a change (`RC-9`).
    pub fn confirmed(&self, delta: &PsetName) -> Option<&BTreeSet<ProcessId>> {
        self.changes.get(delta).map(|c| &c.confirmed)
    }

    /// The status of the change named by `delta` (`Null` if unknown).
    pub fn status(&self, delta: &PsetName) -> RcStatus {
        self.changes
            .get(delta)
            .map_or(RcStatus::Null, |c| c.info.status)
    }

    // ----- shared helpers -----

    fn on_request(&mut self, now: Instant, route: Route, request: ClientRequest) {
        // NAMES-1: another job's master may serve the applications' keys.
        if self.forwards(&request) {
            return self.forward(route, request);
        }
        match request {
            ClientRequest::PsetOp { ops } => {
                let reply = self.pset_ops(&route.pid, &ops);
                self.reply(&route, ClientReply::PsetOp(reply));
            }
            request @ (ClientRequest::Publish { .. }
            | ClientRequest::Lookup { .. }
            | ClientRequest::Unpublish { .. }) => self.serve_data(now, route, request),
            ClientRequest::Fence { pset, timeout } => self.fence(now, route, pset, timeout),
            ClientRequest::Accept {
                delta,
                new_pset,
                bound,
                wait,
            } => self.accept(now, route, delta, new_pset, bound, wait),
            ClientRequest::Confirm { delta, ok } => self.confirm(now, route, delta, ok),
            ClientRequest::RequestChange(req) => {
                let ok = self.app_of.get(&route.pid) == Some(&req.app);
                if ok {
                    self.request_change(now, Requester::Client(route), req);
                } else {
                    let err = RcError::NotPermitted(route.pid.clone());
                    self.reply(&route, ClientReply::ChangeRequested(Err(err)));
                }
            }
            // Answered by daemons from their replica; a daemon that forwards them anyway
            // gets the same answer from the master's own data.
            ClientRequest::Query { bound } => {
                let app = self.app_of.get(&route.pid).map(String::as_str);
                let queryable = self
                    .changes
                    .values()
                    .map(|c| &c.info)
                    .filter(|i| i.status != RcStatus::Finalized)
                    .filter(|i| !self.changes[&i.delta].done);
                let answer = super::query::answer(queryable, app, &route.pid, bound.as_ref());
                self.reply(&route, ClientReply::Query(answer));
            }
            // Gathered by the daemons (`MODEX-1`); a daemon that forwards one anyway is
            // refused rather than served one member at a time.
            ClientRequest::Modex { .. } => {
                let err = RcError::BadRequest(BadRequest::ModexAtMaster);
                self.reply(&route, ClientReply::Modex(Err(err)));
            }
            ClientRequest::Spawn {
                commands,
                env,
                watch,
            } => match self.spawn(&route, commands, env, watch) {
                Ok(granted) => self.answer_spawn(route, granted, watch),
                Err(e) => self.reply(&route, ClientReply::Spawned(Err(e))),
            },
            ClientRequest::KillSpawn { app } => {
                let r = self.kill_spawn(&route, &app);
                self.reply(&route, ClientReply::SpawnKilled(r));
            }
            ClientRequest::PsetInfo { name } => {
                let info = self
                    .registry
                    .info(&self.origin(&route.pid), &name)
                    .map(|i| (i.size, i.attrs))
                    .map_err(RcError::from);
                self.reply(&route, ClientReply::PsetInfo(info));
            }
        }
    }

    /// A client's pset request (phase 2), applied atomically here (`PSET-42`).
    fn pset_ops(
        &mut self,
        pid: &ProcessId,
        ops: &[crate::pset::PsetOp],
    ) -> Result<Vec<crate::pset::OpOutcome>, RcError> {
        let origin = self.origin(pid);
        if matches!(origin, Origin::Runtime) {
            return Err(RcError::NotPermitted(pid.clone()));
        }
        let outs = if self.bug(crate::bugs::Bug::NonAtomicBatch) {
            let mut outs = Vec::new();
            for (index, op) in ops.iter().enumerate() {
                match self
                    .registry
                    .apply_batch(&origin, core::slice::from_ref(op))
                {
                    Ok(mut o) => outs.append(&mut o),
                    Err(crate::pset::PsetError::InBatch { source, .. }) => {
                        return Err(crate::pset::PsetError::InBatch { index, source }.into());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            outs
        } else {
            self.registry.apply_batch(&origin, ops)?
        };
        for out in &outs {
            for name in out.results.iter().chain(&out.recursive) {
                self.broadcast_pset(name);
            }
            for name in &out.pruned {
                self.broadcast(ToDaemon::PrunePset { name: name.clone() });
            }
        }
        Ok(outs)
    }

    pub(crate) fn origin(&self, pid: &ProcessId) -> Origin {
        match self.app_of.get(pid) {
            Some(app) => Origin::process(app.clone(), pid.clone()),
            None => Origin::Runtime,
        }
    }

    pub(crate) fn new_ranks(&mut self, n: u32) -> Vec<ProcessId> {
        let first = self.next_rank;
        self.next_rank = self.next_rank.saturating_add(n);
        (first..self.next_rank)
            .map(|r| ProcessId::new(self.cfg.namespace.clone(), r))
            .collect()
    }

    pub(crate) fn reply(&mut self, route: &Route, reply: ClientReply) {
        if route.node == guest::GUEST_NODE {
            let ticket = route.req;
            return self
                .out
                .push_back(MasterOutput::GuestReply { ticket, reply });
        }
        self.send(
            route.node,
            ToDaemon::Reply {
                to: route.pid.clone(),
                req: route.req,
                reply,
            },
        );
    }

    pub(crate) fn send(&mut self, to: NodeId, msg: ToDaemon) {
        self.out.push_back(MasterOutput::Send(Envelope { to, msg }));
    }

    /// Sends to every daemon of the job's node list.
    pub(crate) fn broadcast(&mut self, msg: ToDaemon) {
        for n in 0..self.cfg.nodes.len() as u32 {
            self.send(NodeId(n), msg.clone());
        }
    }

    /// Replicates a pset's current members and attributes to every daemon.
    pub(crate) fn broadcast_pset(&mut self, name: &PsetName) {
        match self.define_pset(name) {
            Some(define) => self.broadcast(define),
            None => self.broadcast(ToDaemon::PrunePset { name: name.clone() }),
        }
    }

    /// A live pset's replica update, `None` for a pset the registry no longer holds. Its
    /// members are runs, built once here: each daemon's copy is then O(runs) (RC-23).
    pub(crate) fn define_pset(&self, name: &PsetName) -> Option<ToDaemon> {
        let attrs = self.registry.get(name).ok()?.attrs.clone();
        let members = self
            .registry
            .members(&Origin::Runtime, name)
            .unwrap_or_default()
            .iter()
            .collect();
        Some(ToDaemon::DefinePset {
            name: name.clone(),
            members,
            attrs,
        })
    }

    /// Tells each node's daemon to launch its share of `procs`.
    pub(crate) fn launch(&mut self, procs: &[ProcessId]) {
        self.per_node(procs, |procs| ToDaemon::Launch { procs });
    }

    /// Tells each node's daemon to kill its share of `procs`.
    pub(crate) fn kill(&mut self, procs: &[ProcessId]) {
        self.per_node(procs, |procs| ToDaemon::Kill { procs });
    }

    fn per_node(&mut self, procs: &[ProcessId], msg: impl Fn(Vec<ProcessId>) -> ToDaemon) {
        for (node, procs) in self.by_node(procs) {
            self.send(node, msg(procs));
        }
    }

    /// `procs` grouped by the node their slot is on (processes without one left out).
    fn by_node(&self, procs: &[ProcessId]) -> BTreeMap<NodeId, Vec<ProcessId>> {
        let mut by_node: BTreeMap<NodeId, Vec<ProcessId>> = BTreeMap::new();
        for p in procs {
            if let Some(slot) = self.slots.slot_of(p) {
                let node = NodeId(self.slots.node_of(slot).unwrap_or_default());
                by_node.entry(node).or_default().push(p.clone());
            }
        }
        by_node
    }
}

crate::machine::by_inherent_methods!(Master, MasterInput, MasterOutput, MasterRejection);

impl crate::trace::Recorded for Master {
    const ROLE: &'static str = "master";
    // A message the master cannot attribute changes nothing: not a transition.
    const RESULT: crate::trace::ResultRecord = crate::trace::ResultRecord::OnlyAccepted;
    fn key(&self) -> crate::trace::TraceKey {
        crate::trace::TraceKey::None
    }
    fn queue(&mut self) -> &mut VecDeque<MasterOutput> {
        &mut self.out
    }
    fn encode_input(input: &MasterInput) -> Vec<u8> {
        trace::encode_master_input(input)
    }
}
