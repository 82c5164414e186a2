//! What the master and the daemons are told and how the master is set up: the inputs
//! of the two machines, apart from the machines themselves, so that their trace
//! encodings ([`super::trace`]) need only this leaf and the machines can use those
//! encodings without an import cycle.

use alloc::string::String;
use alloc::vec::Vec;

use super::msg::{ClientReply, ClientRequest, ToDaemon, ToMaster};
use super::types::{ChangeRequest, NodeId, ReqId};
use crate::process::{Namespace, ProcessId};
use crate::slots::NodeSpec;
use crate::time::Duration;

/// How the master is set up.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MasterConfig {
    /// The job's namespace.
    pub namespace: Namespace,
    /// Nodes and their slots, in the total order of `SLOT-1`.
    pub nodes: Vec<NodeSpec>,
    /// Applications and how many processes each starts with.
    pub apps: Vec<(String, u32)>,
    /// How long a change may take from announcement to a decision (`RC-10`).
    pub change_timeout: Duration,
    /// How long removed processes get to exit before they are killed (`RC-11`).
    pub grace: Duration,
    /// Most changes queued per application behind the one in flight (`RC-15`).
    pub max_queued: usize,
    /// How long a request that needs more slots than the job has waits for the driver
    /// to add nodes (`RC-21`); `None` refuses it at once (`RC-2`).
    pub grow_wait: Option<Duration>,
    /// Whose data server the applications' keys are in (`NAMES-1`).
    pub data_server: DataServer,
}

/// Whose data server a job's applications publish in and look up from (`NAMES-1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DataServer {
    /// The job's own master's.
    #[default]
    Own,
    /// Another job's: the master forwards every application publish, lookup and
    /// unpublish ([`MasterOutput::ForwardData`](super::MasterOutput::ForwardData)) and
    /// relays the answer the driver brings back ([`MasterInput::Forwarded`]). The
    /// protocol's own keys (`RC-16`) stay with the job's own master.
    Forwarded,
}

/// What the master is told.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MasterInput {
    /// A message from a daemon.
    FromDaemon {
        /// The sender.
        node: NodeId,
        /// The message.
        msg: ToMaster,
    },
    /// A change initiated from outside (a tool or the scheduler: `RES_CHANGE_DEFINE`).
    /// `ticket` is the driver's name for the request: the master reports under it when
    /// the change starts ([`MasterOutput::Started`](super::MasterOutput::Started)) or is refused, now or after waiting
    /// in the queue (`RC-15`), so the initiator learns the final outcome.
    RequestChange {
        /// The initiator's name for this request.
        ticket: u64,
        /// The request.
        req: ChangeRequest,
    },
    /// The timer armed from [`Master::poll_timeout`](super::Master::poll_timeout) fired.
    Timeout,
    /// The driver's failure detector declares a node (its daemon and every process on
    /// it) lost (`RC-17`).
    NodeLost {
        /// The node.
        node: NodeId,
    },
    /// The driver adds a node to the job, e.g. one the resource manager granted after
    /// [`MasterOutput::NeedSlots`](super::MasterOutput::NeedSlots) (`RC-21`): it gets the next node index, its slots
    /// come after every other (`SLOT-6`), and its daemon is sent the replica before
    /// anything else. A request waiting for slots starts once they suffice.
    NodeAdded {
        /// The node: its name and slots.
        node: NodeSpec,
    },
    /// The driver could not obtain the slots of [`MasterOutput::NeedSlots`](super::MasterOutput::NeedSlots) (`RC-21`):
    /// the waiting request is refused at once with [`RcError::NotGranted`](super::RcError::NotGranted).
    SlotsDenied,
    /// The driver gives back a node with no process of the job on it (one reported
    /// [`MasterOutput::NodeReleased`](super::MasterOutput::NodeReleased)), e.g. to the resource manager (`RC-20`): its slots
    /// are retired (`SLOT-5`). Refused, with nothing changed, while a process of the
    /// job is placed there (running, leaving, or launched by a change in flight).
    NodeReturned {
        /// The node.
        node: NodeId,
    },
    /// A data-server request of a guest job, one that uses this job's data server
    /// (`NAMES-2`), under the driver's `ticket`: answered as
    /// [`MasterOutput::GuestReply`](super::MasterOutput::GuestReply). Only publish,
    /// lookup and unpublish are served; reserved keys are refused as a client's.
    Guest {
        /// The driver's name for the request.
        ticket: u64,
        /// The request.
        request: ClientRequest,
    },
    /// The other job's answer to the request forwarded under `ticket` (`NAMES-1`).
    Forwarded {
        /// The ticket of [`MasterOutput::ForwardData`](super::MasterOutput::ForwardData).
        ticket: u64,
        /// The answer; `None`: none came (the job could not be reached, it ended, its
        /// answer did not decode). The client then gets an error (`NAMES-3`).
        reply: Option<ClientReply>,
    },
}

/// What a daemon is told.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DaemonInput {
    /// A message from the master (in the order the master sent them).
    FromMaster(ToDaemon),
    /// A request from a local client.
    FromClient {
        /// The client (authenticated by the driver's control socket).
        from: ProcessId,
        /// Its request id.
        req: ReqId,
        /// The request.
        request: ClientRequest,
    },
    /// A local process exited.
    Exited {
        /// The process.
        pid: ProcessId,
    },
    /// A local process reached its MPI library: it spoke on its PMI socket, or its PMIx
    /// client connected (`SPAWN-25`). Told to the master, which answers an MPI
    /// library's spawn once all of its children have.
    Started {
        /// The process.
        pid: ProcessId,
    },
    /// The timer armed from [`Daemon::poll_timeout`](super::Daemon::poll_timeout) fired.
    Timeout,
}
