//! The client: the runtime side of an application process (thesis Lst. 6.1–6.7 and the
//! PMIx calls under them; `spec/resource-change.md` §6). It turns API calls into
//! requests to the local daemon and sequences the multi-step ones (confirm = lookup,
//! fence, report). Collective parts stay with the application: the root calls accept and
//! broadcasts the outcome over its communicator.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;

use super::error::{ClientRejection, RcError};
use super::master::accept_key;
use super::msg::{ClientReply, ClientRequest, ModexData};
use super::types::{
    ChangeRequest, QueryAnswer, RcStatus, ReqId, SpawnCommand, SpawnWatch, Spawned,
};
use crate::process::ProcessId;
use crate::pset::{Attributes, OpOutcome, PsetName, PsetOp};
use crate::time::{Duration, Instant};

/// Names one API call, chosen by the caller.
pub type CallId = u64;

/// An API call.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientCall {
    /// `get_res_change` (Lst. 6.1).
    GetResChange {
        /// The bound pset; `None` for application level.
        bound: Option<PsetName>,
    },
    /// `get_pset_info`: size and attributes.
    PsetInfo {
        /// The pset.
        name: PsetName,
    },
    /// `pset_create_op` (Lst. 6.2), several operations atomically.
    PsetOp {
        /// The operations.
        ops: Vec<PsetOp>,
    },
    /// Publish a key.
    Publish {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Remove a key this application published.
    Unpublish {
        /// The key.
        key: String,
    },
    /// Look a key up, waiting up to `wait`.
    Lookup {
        /// The key.
        key: String,
        /// How long to wait, `None` for no wait.
        wait: Option<Duration>,
    },
    /// Fence over a pset.
    Fence {
        /// The pset.
        pset: PsetName,
        /// How long to wait.
        timeout: Duration,
    },
    /// `accept_res_change` by the root of a bound pset (Lst. 6.5).
    Accept {
        /// The change.
        delta: PsetName,
        /// The pset to derive communication from.
        new_pset: PsetName,
        /// Which bound pset (SUB over several).
        bound: Option<PsetName>,
        /// Blocking: wait up to this long for the decision. `None` is non-blocking.
        wait: Option<Duration>,
    },
    /// `confirm_res_change` by a new process (Lst. 6.6).
    Confirm {
        /// The change.
        delta: PsetName,
        /// Bound on the lookup and on the fence, each.
        timeout: Duration,
    },
    /// `request_res_change`.
    RequestChange(ChangeRequest),
    /// Fence over a pset exchanging one value per member (`MODEX-1..6`).
    Modex {
        /// The pset.
        pset: PsetName,
        /// This member's value.
        data: String,
        /// How long to wait for the others.
        timeout: Duration,
    },
    /// The runtime part of `MPI_Comm_spawn(_multiple)` (`SPAWN-17`): start the children.
    Spawn {
        /// The commands.
        commands: Vec<SpawnCommand>,
        /// Variables added to every child's environment.
        env: Vec<(String, String)>,
        /// Who tells the spawner that a child failed (`SPAWN-24`).
        watch: SpawnWatch,
    },
    /// Kill the children of a failed spawn (`SPAWN-20`).
    KillSpawn {
        /// The children's application.
        app: String,
    },
}

/// What an accept returns to the process that called it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AcceptResult {
    /// `Pending` until decided, then `Finalized`.
    pub status: RcStatus,
    /// The pset to derive communication from.
    pub new_pset: PsetName,
    /// Set once finalized for a process that was removed: it must finalize and exit.
    pub terminate: bool,
    /// Every removed process (for broadcasting `terminate` over the communicator).
    pub removed: Vec<ProcessId>,
}

/// The result of a call.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CallResult {
    /// Of `GetResChange`.
    ResChange(QueryAnswer),
    /// Of `PsetInfo`.
    PsetInfo(Result<(usize, Attributes), RcError>),
    /// Of `PsetOp`.
    PsetOp(Result<Vec<OpOutcome>, RcError>),
    /// Of `Publish`.
    Published(Result<(), RcError>),
    /// Of `Lookup`.
    Lookup(Result<String, RcError>),
    /// Of `Unpublish`.
    Unpublished(Result<(), RcError>),
    /// Of `Fence`.
    Fence(Result<(), RcError>),
    /// Of `Accept`.
    Accept(Result<AcceptResult, RcError>),
    /// Of `Confirm`: the new pset to derive communication from.
    Confirm(Result<PsetName, RcError>),
    /// Of `RequestChange`: the delta, or `None` if queued.
    ChangeRequested(Result<Option<PsetName>, RcError>),
    /// Of `Modex`: the version and every member's value.
    Modex(Result<ModexData, RcError>),
    /// Of `Spawn`: the children.
    Spawned(Result<Spawned, RcError>),
    /// Of `KillSpawn`.
    SpawnKilled(Result<(), RcError>),
}

/// What a client is told.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientInput {
    /// The application makes a call.
    Call {
        /// Its id (unique among the client's open calls).
        id: CallId,
        /// The call.
        call: ClientCall,
    },
    /// The daemon answered a request.
    Reply {
        /// The request.
        req: ReqId,
        /// The answer.
        reply: ClientReply,
    },
}

/// What a client wants done.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientOutput {
    /// Send this request to the local daemon.
    Request {
        /// Its id, echoed in the reply.
        req: ReqId,
        /// The request.
        request: ClientRequest,
    },
    /// A call completed.
    Done {
        /// The call.
        id: CallId,
        /// Its result.
        result: CallResult,
    },
}

/// Where a multi-step call is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Step {
    /// A one-request call.
    Single(CallId),
    /// A modex; asked again when the pset changed version under it (`MODEX-2`) until
    /// `deadline`.
    Modex {
        id: CallId,
        pset: PsetName,
        data: String,
        deadline: Instant,
    },
    /// Confirm, waiting for the accept key.
    ConfirmLookup {
        id: CallId,
        delta: PsetName,
        timeout: Duration,
    },
    /// Confirm, in the fence over the delta.
    ConfirmFence {
        id: CallId,
        delta: PsetName,
        new_pset: PsetName,
    },
    /// Confirm, reported; waiting for the decision.
    ConfirmReport {
        id: CallId,
        new_pset: PsetName,
        failure: Option<RcError>,
    },
}

/// See the module doc.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Client {
    pid: ProcessId,
    next_req: ReqId,
    open: BTreeMap<ReqId, Step>,
    out: VecDeque<ClientOutput>,
}

impl Client {
    /// The client of process `pid`.
    pub fn new(pid: ProcessId) -> Self {
        Client {
            pid,
            next_req: 0,
            open: BTreeMap::new(),
            out: VecDeque::new(),
        }
    }

    /// The client of process `pid` whose request ids start at `first`: a process with
    /// two clients (its own and the runtime's PMI server for it, `spec/pmi.md`) keeps
    /// their ids apart.
    pub fn with_first_request(pid: ProcessId, first: ReqId) -> Self {
        Client {
            next_req: first,
            ..Client::new(pid)
        }
    }

    /// Its process.
    pub fn pid(&self) -> &ProcessId {
        &self.pid
    }

    /// Feeds one input. Replies to unknown requests (late or duplicated) are ignored.
    pub fn handle(&mut self, now: Instant, input: ClientInput) -> Result<(), ClientRejection> {
        match input {
            ClientInput::Call { id, call } => self.call(now, id, call),
            ClientInput::Reply { req, reply } => {
                if let Some(step) = self.open.remove(&req) {
                    self.advance(now, step, reply);
                }
                Ok(())
            }
        }
    }

    /// The next thing to do, if any.
    #[must_use = "an output is an action the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<ClientOutput> {
        self.out.pop_front()
    }

    /// Clients arm no timers: every wait is bounded by the master.
    #[must_use = "a deadline the driver must arm a timer for"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn call(&mut self, now: Instant, id: CallId, call: ClientCall) -> Result<(), ClientRejection> {
        if self.open.values().any(|s| step_call(s) == id) {
            return Err(ClientRejection::CallIdInUse(id));
        }
        let request = match call {
            ClientCall::GetResChange { bound } => ClientRequest::Query { bound },
            ClientCall::PsetInfo { name } => ClientRequest::PsetInfo { name },
            ClientCall::PsetOp { ops } => ClientRequest::PsetOp { ops },
            ClientCall::Publish { key, value } => ClientRequest::Publish { key, value },
            ClientCall::Lookup { key, wait } => ClientRequest::Lookup { key, wait },
            ClientCall::Unpublish { key } => ClientRequest::Unpublish { key },
            ClientCall::Fence { pset, timeout } => ClientRequest::Fence { pset, timeout },
            ClientCall::Accept {
                delta,
                new_pset,
                bound,
                wait,
            } => ClientRequest::Accept {
                delta,
                new_pset,
                bound,
                wait,
            },
            ClientCall::RequestChange(r) => ClientRequest::RequestChange(r),
            ClientCall::Spawn {
                commands,
                env,
                watch,
            } => ClientRequest::Spawn {
                commands,
                env,
                watch,
            },
            ClientCall::KillSpawn { app } => ClientRequest::KillSpawn { app },
            ClientCall::Modex {
                pset,
                data,
                timeout,
            } => {
                let step = Step::Modex {
                    id,
                    pset: pset.clone(),
                    data: data.clone(),
                    deadline: now + timeout,
                };
                let request = ClientRequest::Modex {
                    pset,
                    data,
                    timeout,
                };
                self.send(step, request);
                return Ok(());
            }
            ClientCall::Confirm { delta, timeout } => {
                // Step 1: blocking lookup of `{delta}:accept` (RC-9).
                let request = ClientRequest::Lookup {
                    key: accept_key(&delta),
                    wait: Some(timeout),
                };
                self.send(Step::ConfirmLookup { id, delta, timeout }, request);
                return Ok(());
            }
        };
        self.send(Step::Single(id), request);
        Ok(())
    }

    fn send(&mut self, step: Step, request: ClientRequest) {
        let req = self.next_req;
        self.next_req += 1;
        self.open.insert(req, step);
        self.out.push_back(ClientOutput::Request { req, request });
    }

    fn done(&mut self, id: CallId, result: CallResult) {
        self.out.push_back(ClientOutput::Done { id, result });
    }

    fn advance(&mut self, now: Instant, step: Step, reply: ClientReply) {
        let unexpected = RcError::Client("unexpected reply");
        match (step, reply) {
            // MODEX-2: the daemon's replica holds the new version by the time `Stale`
            // arrives, so asking again joins the modex at that version.
            (
                Step::Modex {
                    id,
                    pset,
                    data,
                    deadline,
                },
                ClientReply::Modex(Err(RcError::Stale { .. })),
            ) if now < deadline => {
                let timeout = Duration::from_nanos(deadline.as_nanos() - now.as_nanos());
                let request = ClientRequest::Modex {
                    pset: pset.clone(),
                    data: data.clone(),
                    timeout,
                };
                let step = Step::Modex {
                    id,
                    pset,
                    data,
                    deadline,
                };
                self.send(step, request);
            }
            (Step::Modex { id, .. }, ClientReply::Modex(r)) => {
                self.done(id, CallResult::Modex(r));
            }
            (Step::Single(id), reply) => {
                let result = match reply {
                    ClientReply::Query(a) => CallResult::ResChange(a),
                    ClientReply::PsetInfo(r) => CallResult::PsetInfo(r),
                    ClientReply::PsetOp(r) => CallResult::PsetOp(r),
                    ClientReply::Published(r) => CallResult::Published(r),
                    ClientReply::Lookup(r) => CallResult::Lookup(r),
                    ClientReply::Unpublished(r) => CallResult::Unpublished(r),
                    ClientReply::Fence(r) => CallResult::Fence(r),
                    ClientReply::Accept(r) => CallResult::Accept(r.map(|o| AcceptResult {
                        terminate: o.status == RcStatus::Finalized && o.removed.contains(&self.pid),
                        status: o.status,
                        new_pset: o.new_pset,
                        removed: o.removed,
                    })),
                    ClientReply::Confirmed(r) => CallResult::Published(r),
                    ClientReply::ChangeRequested(r) => CallResult::ChangeRequested(r),
                    ClientReply::Modex(r) => CallResult::Modex(r),
                    ClientReply::Spawned(r) => CallResult::Spawned(r),
                    ClientReply::SpawnKilled(r) => CallResult::SpawnKilled(r),
                };
                self.done(id, result);
            }
            (Step::ConfirmLookup { id, delta, timeout }, ClientReply::Lookup(r)) => {
                match r.and_then(|v| {
                    PsetName::parse(&v).map_err(|e| crate::pset::PsetError::from(e).into())
                }) {
                    // Step 2: fence over the delta, so every new process has the name.
                    Ok(new_pset) => self.send(
                        Step::ConfirmFence {
                            id,
                            delta: delta.clone(),
                            new_pset,
                        },
                        ClientRequest::Fence {
                            pset: delta,
                            timeout,
                        },
                    ),
                    Err(e) => self.report(id, delta, PsetName::world(), Some(e)),
                }
            }
            (
                Step::ConfirmFence {
                    id,
                    delta,
                    new_pset,
                },
                ClientReply::Fence(r),
            ) => {
                // Step 3: report; the master decides once every new process did.
                self.report(id, delta, new_pset, r.err());
            }
            (
                Step::ConfirmReport {
                    id,
                    new_pset,
                    failure,
                },
                ClientReply::Confirmed(r),
            ) => {
                let result = match (failure, r) {
                    (Some(e), _) => Err(e),
                    (None, Ok(())) => Ok(new_pset),
                    (None, Err(e)) => Err(e),
                };
                self.done(id, CallResult::Confirm(result));
            }
            (step, _) => {
                let id = step_call(&step);
                self.done(id, CallResult::Confirm(Err(unexpected)));
            }
        }
    }

    fn report(
        &mut self,
        id: CallId,
        delta: PsetName,
        new_pset: PsetName,
        failure: Option<RcError>,
    ) {
        let ok = failure.is_none();
        self.send(
            Step::ConfirmReport {
                id,
                new_pset,
                failure,
            },
            ClientRequest::Confirm { delta, ok },
        );
    }
}

fn step_call(step: &Step) -> CallId {
    match step {
        Step::Single(id)
        | Step::Modex { id, .. }
        | Step::ConfirmLookup { id, .. }
        | Step::ConfirmFence { id, .. }
        | Step::ConfirmReport { id, .. } => *id,
    }
}

impl crate::machine::Machine for Client {
    type Input = ClientInput;
    type Output = ClientOutput;
    type Error = ClientRejection;

    fn handle(&mut self, now: Instant, input: ClientInput) -> Result<(), ClientRejection> {
        Client::handle(self, now, input)
    }

    fn poll_output(&mut self) -> Option<ClientOutput> {
        Client::poll_output(self)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Client::poll_timeout(self)
    }

    fn fingerprint(&mut self) -> u64 {
        crate::machine::fingerprint_without_queue(self, |m| &mut m.out)
    }
}
