//! [`Session`]: blocking calls over core's client machine.

use std::os::unix::net::UnixStream;
use std::time::Duration as StdDuration;

use dynres_core::pset::{Attributes, OpOutcome, PsetName, PsetOp};
use dynres_core::rc::wire::{decode_reply, encode_client};
use dynres_core::rc::{
    AcceptResult, CallId, CallResult, ChangeRequest, Client, ClientCall, ClientInput, ClientOutput,
    ModexData, QueryAnswer, SpawnCommand, SpawnWatch, Spawned,
};
use dynres_core::{Duration, Instant, Namespace, ProcessId, Rank};

use crate::auth::{Peer, say_hello};
use crate::env;
use crate::error::ClientError;
use crate::framing::{Frame, FrameReader};
use std::io::Write;

/// Size and attributes of a pset (`mpi_size`, `mpi_ps_version`, `mpi_ps_epoch`,
/// `mpi_ps_active`, `mpi_ps_sched_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PsetInfo {
    /// `mpi_size`.
    pub size: usize,
    /// The other attributes.
    pub attrs: Attributes,
}

/// A process' session with its runtime.
pub struct Session {
    stream: UnixStream,
    reader: FrameReader,
    client: Client,
    app: String,
    next_call: CallId,
    start: std::time::Instant,
}

fn var(name: &'static str) -> Result<String, ClientError> {
    std::env::var(name).map_err(|_| ClientError::Env(name))
}

fn to_core(d: StdDuration) -> Duration {
    Duration::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Session {
    /// Connects to the runtime named by the environment `dynres run` sets
    /// (`DYNRES_SOCKET`, `DYNRES_SECRET`, `DYNRES_NAMESPACE`, `DYNRES_RANK`,
    /// `DYNRES_APP`). With `DYNRES_TRACE_FILE` set, also starts recording this process's
    /// kernel transitions ([`crate::tracefile::install_for_client`]).
    pub fn init() -> Result<Session, ClientError> {
        // While the process most likely has one thread (see `register_early`): a later
        // registration, from a process with threads, costs an RCU grace period.
        dynres_transports::shm::register_early();
        // Before any kernel machine of this process exists, so its trace is complete.
        crate::tracefile::install_for_client();
        let socket = var(env::SOCKET)?;
        let secret = var(env::SECRET)?;
        let ns = var(env::NAMESPACE)?;
        let rank: Rank = var(env::RANK)?
            .parse()
            .map_err(|_| ClientError::Env(env::RANK))?;
        let app = var(env::APP)?;
        // If the runtime dies, this process dies with it rather than outliving the job.
        // (Armed before connecting: a runtime already gone refuses the connection.)
        // SAFETY: prctl(PR_SET_PDEATHSIG) has no memory-safety preconditions.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        Session::connect(
            &socket,
            &secret,
            ProcessId::new(Namespace::new(ns), rank),
            app,
        )
    }

    /// Connects to the control socket at `socket` as `pid` of `app`.
    pub fn connect(
        socket: &str,
        secret: &str,
        pid: ProcessId,
        app: String,
    ) -> Result<Session, ClientError> {
        let mut stream = UnixStream::connect(socket)?;
        if !say_hello(&mut stream, secret, Peer::Client(pid.rank))? {
            return Err(ClientError::Refused);
        }
        Ok(Session {
            stream,
            reader: FrameReader::new(),
            client: Client::new(pid),
            app,
            next_call: 0,
            start: std::time::Instant::now(),
        })
    }

    /// This process.
    pub fn pid(&self) -> &ProcessId {
        self.client.pid()
    }

    /// This process' rank in the job's namespace.
    pub fn rank(&self) -> Rank {
        self.client.pid().rank
    }

    /// This process' application.
    pub fn app(&self) -> &str {
        &self.app
    }

    /// `mpi://app/{app}`: the application's pset.
    pub fn app_pset(&self) -> PsetName {
        PsetName::app_root(&self.app).unwrap_or_else(|_| PsetName::world())
    }

    fn now(&self) -> Instant {
        Instant(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Makes one call and blocks until it completes.
    pub fn call(&mut self, call: ClientCall) -> Result<CallResult, ClientError> {
        self.next_call += 1;
        let id = self.next_call;
        self.client
            .handle(self.now(), ClientInput::Call { id, call })
            // The session numbers its own calls, so a rejection is a bug; it reports
            // as the refusal it maps to.
            .map_err(|r| ClientError::Rc(r.into()))?;
        loop {
            while let Some(out) = self.client.poll_output() {
                match out {
                    ClientOutput::Request { req, request } => {
                        self.stream.write_all(&encode_client(req, &request))?;
                    }
                    ClientOutput::Done { id: done, result } if done == id => return Ok(result),
                    ClientOutput::Done { .. } => {}
                }
            }
            let frame = match self.reader.next(&mut self.stream)?? {
                Frame::Frame(f) => f,
                Frame::Closed => {
                    return Err(ClientError::Io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the runtime closed the control connection",
                    )));
                }
            };
            let (req, reply) = decode_reply(&frame)?;
            self.client
                .handle(self.now(), ClientInput::Reply { req, reply })
                .map_err(|r| ClientError::Rc(r.into()))?;
        }
    }

    /// `get_res_change(bound)`: `None` asks for application-level changes;
    /// `Some(mpi://SELF)` for the change that contains this process.
    pub fn get_res_change(&mut self, bound: Option<&PsetName>) -> Result<QueryAnswer, ClientError> {
        match self.call(ClientCall::GetResChange {
            bound: bound.cloned(),
        })? {
            CallResult::ResChange(a) => Ok(a),
            _ => Err(ClientError::Unexpected("get_res_change")),
        }
    }

    /// Size and attributes of a pset.
    pub fn pset_info(&mut self, name: &PsetName) -> Result<PsetInfo, ClientError> {
        match self.call(ClientCall::PsetInfo { name: name.clone() })? {
            CallResult::PsetInfo(r) => {
                let (size, attrs) = r?;
                Ok(PsetInfo { size, attrs })
            }
            _ => Err(ClientError::Unexpected("pset_info")),
        }
    }

    /// The psets every process can name — `mpi://WORLD`, `mpi://SELF` and its
    /// application's `mpi://app/{app}` — with their size and attributes. (The kernel has
    /// no call listing every pset; see the crate README.)
    pub fn list_psets(&mut self) -> Result<Vec<(PsetName, PsetInfo)>, ClientError> {
        let names = [PsetName::world(), PsetName::self_set(), self.app_pset()];
        names
            .into_iter()
            .map(|n| self.pset_info(&n).map(|i| (n, i)))
            .collect()
    }

    /// `pset_create_op`: one or several operations, applied atomically by the master.
    pub fn pset_create_op(&mut self, ops: Vec<PsetOp>) -> Result<Vec<OpOutcome>, ClientError> {
        match self.call(ClientCall::PsetOp { ops })? {
            CallResult::PsetOp(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("pset_create_op")),
        }
    }

    /// Non-blocking `accept_res_change` by the root of a bound pset: the status is
    /// `Pending` until the change is decided; call again to poll.
    pub fn accept_res_change(
        &mut self,
        delta: &PsetName,
        new_pset: &PsetName,
        bound: Option<&PsetName>,
    ) -> Result<AcceptResult, ClientError> {
        self.accept(delta, new_pset, bound, None)
    }

    /// Blocking `accept_res_change`: waits up to `wait` for the decision (then answers
    /// `Pending`).
    pub fn accept_res_change_blocking(
        &mut self,
        delta: &PsetName,
        new_pset: &PsetName,
        bound: Option<&PsetName>,
        wait: StdDuration,
    ) -> Result<AcceptResult, ClientError> {
        self.accept(delta, new_pset, bound, Some(to_core(wait)))
    }

    fn accept(
        &mut self,
        delta: &PsetName,
        new_pset: &PsetName,
        bound: Option<&PsetName>,
        wait: Option<Duration>,
    ) -> Result<AcceptResult, ClientError> {
        let call = ClientCall::Accept {
            delta: delta.clone(),
            new_pset: new_pset.clone(),
            bound: bound.cloned(),
            wait,
        };
        match self.call(call)? {
            CallResult::Accept(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("accept_res_change")),
        }
    }

    /// `confirm_res_change` by a new process: returns the pset to derive communication
    /// from once the change is finalized. `timeout` bounds the lookup and the fence.
    pub fn confirm_res_change(
        &mut self,
        delta: &PsetName,
        timeout: StdDuration,
    ) -> Result<PsetName, ClientError> {
        let call = ClientCall::Confirm {
            delta: delta.clone(),
            timeout: to_core(timeout),
        };
        match self.call(call)? {
            CallResult::Confirm(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("confirm_res_change")),
        }
    }

    /// `request_res_change`: the delta pset, or `None` if the request was queued.
    pub fn request_res_change(
        &mut self,
        req: ChangeRequest,
    ) -> Result<Option<PsetName>, ClientError> {
        match self.call(ClientCall::RequestChange(req))? {
            CallResult::ChangeRequested(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("request_res_change")),
        }
    }

    /// Publishes `key = value` (never overwrites).
    pub fn publish(&mut self, key: &str, value: &str) -> Result<(), ClientError> {
        let call = ClientCall::Publish {
            key: key.into(),
            value: value.into(),
        };
        match self.call(call)? {
            CallResult::Published(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("publish")),
        }
    }

    /// Removes a key this application published.
    pub fn unpublish(&mut self, key: &str) -> Result<(), ClientError> {
        match self.call(ClientCall::Unpublish { key: key.into() })? {
            CallResult::Unpublished(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("unpublish")),
        }
    }

    /// Looks `key` up, waiting up to `wait` for it to be published.
    pub fn lookup(&mut self, key: &str, wait: Option<StdDuration>) -> Result<String, ClientError> {
        let call = ClientCall::Lookup {
            key: key.into(),
            wait: wait.map(to_core),
        };
        match self.call(call)? {
            CallResult::Lookup(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("lookup")),
        }
    }

    /// Barrier over the members of `pset`, bounded by `timeout`.
    pub fn fence(&mut self, pset: &PsetName, timeout: StdDuration) -> Result<(), ClientError> {
        let call = ClientCall::Fence {
            pset: pset.clone(),
            timeout: to_core(timeout),
        };
        match self.call(call)? {
            CallResult::Fence(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("fence")),
        }
    }

    /// Fence over `pset` that exchanges `data` with every member (`MODEX-1..6`): the
    /// pset version it ran at and every member's value, ordered by process id. Core's
    /// client asks again when the pset changed version under it (`MODEX-2`), until
    /// `timeout` has passed.
    pub fn modex(
        &mut self,
        pset: &PsetName,
        data: &str,
        timeout: StdDuration,
    ) -> Result<ModexData, ClientError> {
        let call = ClientCall::Modex {
            pset: pset.clone(),
            data: data.into(),
            timeout: to_core(timeout),
        };
        match self.call(call)? {
            CallResult::Modex(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("modex")),
        }
    }

    /// The runtime part of a spawn (`SPAWN-17`): asks the runtime to start the children
    /// of `commands`, each with `env` added to its environment, as a new application of
    /// the job. All of them get slots or the call fails and nothing starts. The
    /// handshake with the children is the `dpm` module's.
    pub fn spawn_children(
        &mut self,
        commands: Vec<SpawnCommand>,
        env: Vec<(String, String)>,
    ) -> Result<Spawned, ClientError> {
        // The caller runs the kernel's handshake with its children (SPAWN-19).
        let watch = SpawnWatch::Handshake;
        match self.call(ClientCall::Spawn {
            commands,
            env,
            watch,
        })? {
            CallResult::Spawned(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("spawn")),
        }
    }

    /// Kills the children of a spawn this application made (`SPAWN-20`), e.g. after its
    /// handshake failed.
    pub fn kill_spawn(&mut self, app: &str) -> Result<(), ClientError> {
        match self.call(ClientCall::KillSpawn { app: app.into() })? {
            CallResult::SpawnKilled(r) => Ok(r?),
            _ => Err(ClientError::Unexpected("kill_spawn")),
        }
    }
}
