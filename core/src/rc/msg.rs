//! Messages between the roles (`spec/resource-change.md` §3). Client ↔ daemon travel
//! over the node-local control socket; daemon ↔ master over the runtime's ordered
//! links. The wire encoding is in `spec/wire.md`.

use alloc::string::String;
use alloc::vec::Vec;

use super::error::RcError;
use super::types::{
    AcceptOutcome, ChangeInfo, ChangeRequest, NodeId, NodeLaunch, QueryAnswer, ReqId, SpawnCommand,
    SpawnWatch, Spawned,
};
use crate::process::{ProcRuns, ProcessId};
use crate::pset::{Attributes, OpOutcome, PsetName, PsetOp};
use crate::time::Duration;

/// What a client asks of the runtime.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientRequest {
    /// `get_res_change(bound)`: answered by the local daemon (`RC-4`).
    Query {
        /// The bound pset; `None` is the caller's `mpi://app/{app}`.
        bound: Option<PsetName>,
    },
    /// Size and attributes of a pset: answered by the local daemon.
    PsetInfo {
        /// The pset.
        name: PsetName,
    },
    /// `pset_create_op`: one or several operations, applied atomically at the master.
    PsetOp {
        /// The operations.
        ops: Vec<PsetOp>,
    },
    /// Publish a key (never overwrites).
    Publish {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Remove a key this application published (thesis §7.4.3 `UNPUBLISH`).
    Unpublish {
        /// The key.
        key: String,
    },
    /// Look a key up, waiting up to `wait` for it to be published.
    Lookup {
        /// The key.
        key: String,
        /// How long to wait; `None` answers at once.
        wait: Option<Duration>,
    },
    /// Barrier over the members of a pset.
    Fence {
        /// The pset.
        pset: PsetName,
        /// How long to wait for the others.
        timeout: Duration,
    },
    /// The root of a bound pset accepts a change (thesis Lst. 6.5).
    Accept {
        /// The change.
        delta: PsetName,
        /// The pset to derive communication from afterwards.
        new_pset: PsetName,
        /// The bound pset this accept is for; `None` if the change has exactly one.
        bound: Option<PsetName>,
        /// Blocking accept: wait up to this long for the change to be decided.
        wait: Option<Duration>,
    },
    /// A new process reports the outcome of its confirm (thesis Lst. 6.6).
    Confirm {
        /// The change.
        delta: PsetName,
        /// Whether the lookup and fence succeeded.
        ok: bool,
    },
    /// The application asks for a change itself (`request_res_change`).
    RequestChange(ChangeRequest),
    /// Fence over a pset that also exchanges one value per member (the modex,
    /// `spec/resource-change.md` §8): gathered by each node's daemon, one message per
    /// node to the master and back (`MODEX-1..6`).
    Modex {
        /// The pset (its version is the one the local daemon's replica holds).
        pset: PsetName,
        /// This member's value, e.g. its transport addresses.
        data: String,
        /// How long to wait for the others.
        timeout: Duration,
    },
    /// `MPI_Comm_spawn(_multiple)`'s runtime part (`SPAWN-17`): start the children of
    /// `commands`, each with `env` added, as a new application of the job. Decided at
    /// the master: all of them get slots, or none is started.
    Spawn {
        /// The commands, in order (the multiple-command form has several).
        commands: Vec<SpawnCommand>,
        /// Variables added to every child's environment (the parent's port).
        env: Vec<(String, String)>,
        /// Who tells the spawner that a child failed: the kernel's handshake, or
        /// nobody but the job's loss policy (`SPAWN-24`).
        watch: SpawnWatch,
    },
    /// Kill the children of a spawn that failed (`SPAWN-8`, `SPAWN-20`): only the
    /// application that spawned them may.
    KillSpawn {
        /// The children's application, as [`Spawned::app`] named it.
        app: String,
    },
}

/// What a completed modex gives every member: the pset version it ran over and every
/// member's value, ordered by process id (`MODEX-3`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModexData {
    /// The version of the pset whose members took part.
    pub version: u64,
    /// Each member and its value, ordered by process id.
    pub entries: Vec<(ProcessId, String)>,
}

/// The runtime's answer to a [`ClientRequest`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientReply {
    /// To `Query`.
    Query(QueryAnswer),
    /// To `PsetInfo`: size and attributes.
    PsetInfo(Result<(usize, Attributes), RcError>),
    /// To `PsetOp`.
    PsetOp(Result<Vec<OpOutcome>, RcError>),
    /// To `Publish`.
    Published(Result<(), RcError>),
    /// To `Lookup`.
    Lookup(Result<String, RcError>),
    /// To `Unpublish`.
    Unpublished(Result<(), RcError>),
    /// To `Fence`.
    Fence(Result<(), RcError>),
    /// To `Accept`.
    Accept(Result<AcceptOutcome, RcError>),
    /// To `Confirm`.
    Confirmed(Result<(), RcError>),
    /// To `RequestChange`: the delta pset, or the position in the queue.
    ChangeRequested(Result<Option<PsetName>, RcError>),
    /// To `Modex`.
    Modex(Result<ModexData, RcError>),
    /// To `Spawn`: the children, launched (or being launched) by their daemons.
    Spawned(Result<Spawned, RcError>),
    /// To `KillSpawn`.
    SpawnKilled(Result<(), RcError>),
}

/// Daemon → master.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToMaster {
    /// A client request the daemon cannot answer locally.
    Forward {
        /// The client.
        from: ProcessId,
        /// Its request id.
        req: ReqId,
        /// The request.
        request: ClientRequest,
    },
    /// A local process exited (or was killed).
    Exited {
        /// The process.
        pid: ProcessId,
    },
    /// A local process reached its MPI library: it spoke on its PMI socket, or its
    /// PMIx client connected (`SPAWN-25`).
    Started {
        /// The process.
        pid: ProcessId,
    },
    /// This node's part of a modex: the values of every member of `pset` (at `version`)
    /// placed here, sent once all of them contributed (`MODEX-1`).
    Modex {
        /// The pset.
        pset: PsetName,
        /// Its version in this daemon's replica.
        version: u64,
        /// Time left until the earliest deadline among the contributors.
        timeout: Duration,
        /// Each local member and its value.
        entries: Vec<(ProcessId, String)>,
    },
}

/// Master → daemon. The link is ordered, so a daemon sees a change's pset, job data and
/// announcement before the launch of its processes (`RC-3`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToDaemon {
    /// Define or update a pset in the replica (`PRTE_DYNRES_DEFINE_PSET`).
    DefinePset {
        /// The pset.
        name: PsetName,
        /// Its members, as runs (`RC-23`).
        members: ProcRuns,
        /// Its attributes.
        attrs: Attributes,
    },
    /// Drop a pset from the replica (pruned).
    PrunePset {
        /// The pset.
        name: PsetName,
    },
    /// Processes of the job that run on this daemon's node were added or removed
    /// (`PRTE_DAEMON_DVM_ADD/SUB_PROCS`: the job data update).
    JobData {
        /// Processes now part of the job, as runs (`RC-23`).
        added: ProcRuns,
        /// Processes no longer part of the job, as runs.
        removed: ProcRuns,
    },
    /// Define or update a change in the replica (`PRTE_DYNRES_DEFINE_RES_CHANGE`);
    /// `None` info removes it from queries (`PRTE_DYNRES_UNPUBLISH_RES_CHANGE`).
    Change {
        /// The delta pset naming the change.
        delta: PsetName,
        /// Its replicated state, or `None` once it is no longer queryable.
        info: Option<ChangeInfo>,
    },
    /// Launch these processes on this node (`PRTE_DAEMON_DVM_ADD_LOCAL_PROCS`).
    Launch {
        /// The processes.
        procs: Vec<ProcessId>,
    },
    /// Launch these spawned processes on this node (`SPAWN-18`: the children's
    /// application pset and job data come first on the link). One message per node
    /// carries every command of the spawn that has children there, so the daemon knows
    /// all of its children of the spawn before it launches the first.
    Spawn {
        /// The children's application.
        app: String,
        /// Each command with children on this node, in command order.
        launches: Vec<NodeLaunch>,
    },
    /// Kill these local processes.
    Kill {
        /// The processes.
        procs: Vec<ProcessId>,
    },
    /// The outcome of a modex over `pset` at `version`, once for every node with a
    /// member (`MODEX-3`, `MODEX-4`).
    ModexDone {
        /// The pset.
        pset: PsetName,
        /// The version the modex ran over.
        version: u64,
        /// Every member's value ordered by process id, or why the modex failed.
        result: Result<Vec<(ProcessId, String)>, RcError>,
    },
    /// Reply to a forwarded client request.
    Reply {
        /// The client.
        to: ProcessId,
        /// Its request id.
        req: ReqId,
        /// The reply.
        reply: ClientReply,
    },
}

/// Where the master sends a message.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Envelope {
    /// The daemon.
    pub to: NodeId,
    /// The message.
    pub msg: ToDaemon,
}

impl ToDaemon {
    /// A job-data update: the job's processes are a set, so each list goes in ascending
    /// order, the fewest runs (RC-23).
    pub fn job_data(added: &[ProcessId], removed: &[ProcessId]) -> ToDaemon {
        ToDaemon::JobData {
            added: ProcRuns::ascending(added),
            removed: ProcRuns::ascending(removed),
        }
    }
}
