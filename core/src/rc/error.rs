//! Why a resource-change request was refused, and why a machine rejected an input.
//!
//! [`RcError`] is the wire refusal: replies carry it to clients, so it is plain data
//! (`Clone + Eq`) with a stable [`code`](RcError::code). The rejections
//! ([`MasterRejection`], [`DaemonRejection`], [`ClientRejection`]) are what a machine's
//! `handle` returns for an input it did not take: they go to the driver, never on the
//! wire; each maps to the refusal it is reported as (for the C ABI's codes) in one
//! `From` impl.

use alloc::string::String;

use crate::process::ProcessId;
use crate::pset::{PsetError, PsetName};
use crate::rc::client::CallId;
use crate::rc::types::NodeId;
use crate::slots::SlotError;

/// A refused or failed resource-change request.
///
/// Non-exhaustive: a newer runtime may refuse for reasons this one does not know (they
/// arrive as [`RcError::Refused`] from the wire). A caller acts on the kinds it knows
/// (retry after [`RcError::Stale`], wait less after [`RcError::Timeout`], …) and reports
/// any other to its user as a refusal with its [`code`](RcError::code) and text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum RcError {
    /// A pset request failed.
    #[error(transparent)]
    Pset(#[from] PsetErrorBox),
    /// Not enough free slots, or not enough processes to remove.
    #[error("slots: {0}")]
    Slots(#[from] SlotError),
    /// The request itself is inconsistent (zero size, unknown app, …).
    #[error("bad change request: {0}")]
    BadRequest(BadRequest),
    /// No change is known under this delta pset.
    #[error("no resource change with delta {0}")]
    NoSuchChange(PsetName),
    /// The change was aborted.
    #[error("resource change {0} was aborted")]
    Aborted(PsetName),
    /// The change is already finalized.
    #[error("resource change {0} is already finalized")]
    AlreadyFinalized(PsetName),
    /// The accept names a pset the change is not bound to.
    #[error("{bound} is not a bound pset of change {delta}")]
    NotBound {
        /// The change.
        delta: PsetName,
        /// The pset named.
        bound: PsetName,
    },
    /// The accept's new pset does not reflect the change (`RC-9`).
    #[error("new pset {new_pset} does not apply change {delta}: {why}")]
    NewPsetMismatch {
        /// The change.
        delta: PsetName,
        /// The pset given.
        new_pset: PsetName,
        /// What is wrong.
        why: &'static str,
    },
    /// Too many changes queued for this application (`RC-15`).
    #[error("{0} changes are already queued for this application")]
    QueueFull(usize),
    /// The key is reserved for the protocol (`{delta}:accept`, `{delta}:confirm`).
    #[error("key {0:?} is reserved for the resource-change protocol")]
    ReservedKey(String),
    /// The key is already published.
    #[error("key {0:?} is already published")]
    KeyExists(String),
    /// The key is not published.
    #[error("key {0:?} is not published")]
    NoSuchKey(String),
    /// A lookup, fence or blocking accept ran out of time.
    #[error("timed out")]
    Timeout,
    /// The process is not known to the job, or may not do this.
    #[error("process {0} may not do this")]
    NotPermitted(ProcessId),
    /// A process this request depended on exited without being removed (`RC-18`).
    #[error("process {0} was lost")]
    ProcessLost(ProcessId),
    /// A modex ran over a version of `pset` that is no longer current: ask again (the
    /// local replica holds the newer one by the time this arrives, `MODEX-2`).
    #[error("pset {pset} changed (now version {version}); ask again")]
    Stale {
        /// The pset.
        pset: PsetName,
        /// Its current version.
        version: u64,
    },
    /// The driver did not add the slots a change request needed in time (`RC-21`).
    #[error("the resource manager did not grant {slots} more slots in time")]
    NotGranted {
        /// Slots that were missing.
        slots: u32,
    },
    /// A client call was made in a state that does not allow it.
    #[error("client: {0}")]
    Client(&'static str),
    /// The peer refused with this code; `detail` is its message.
    ///
    /// This is how an error whose payload cannot cross the wire as data (a nested
    /// `PsetError`/`SlotError`, a `&'static str` reason) arrives: as its
    /// [`code`](RcError::code) and its `Display` text (`spec/wire.md`, "Errors on the
    /// wire"). It also carries codes a newer peer may define.
    #[error("refused by the peer (code {code}): {detail}")]
    Refused {
        /// The peer's [`RcError::code`] of the original error.
        code: u16,
        /// The peer's message (the original error's `Display` text).
        detail: String,
    },
}

impl RcError {
    /// Code of [`RcError::Pset`].
    pub const CODE_PSET: u16 = 1;
    /// Code of [`RcError::Slots`].
    pub const CODE_SLOTS: u16 = 2;
    /// Code of [`RcError::BadRequest`].
    pub const CODE_BAD_REQUEST: u16 = 3;
    /// Code of [`RcError::NoSuchChange`].
    pub const CODE_NO_SUCH_CHANGE: u16 = 4;
    /// Code of [`RcError::Aborted`].
    pub const CODE_ABORTED: u16 = 5;
    /// Code of [`RcError::AlreadyFinalized`].
    pub const CODE_ALREADY_FINALIZED: u16 = 6;
    /// Code of [`RcError::NotBound`].
    pub const CODE_NOT_BOUND: u16 = 7;
    /// Code of [`RcError::NewPsetMismatch`].
    pub const CODE_NEW_PSET_MISMATCH: u16 = 8;
    /// Code of [`RcError::QueueFull`].
    pub const CODE_QUEUE_FULL: u16 = 9;
    /// Code of [`RcError::ReservedKey`].
    pub const CODE_RESERVED_KEY: u16 = 10;
    /// Code of [`RcError::KeyExists`].
    pub const CODE_KEY_EXISTS: u16 = 11;
    /// Code of [`RcError::NoSuchKey`].
    pub const CODE_NO_SUCH_KEY: u16 = 12;
    /// Code of [`RcError::Timeout`].
    pub const CODE_TIMEOUT: u16 = 13;
    /// Code of [`RcError::NotPermitted`].
    pub const CODE_NOT_PERMITTED: u16 = 14;
    /// Code of [`RcError::Client`].
    pub const CODE_CLIENT: u16 = 15;
    /// Code of [`RcError::ProcessLost`].
    pub const CODE_PROCESS_LOST: u16 = 16;
    /// Code of [`RcError::Stale`].
    pub const CODE_STALE: u16 = 17;
    /// Code of [`RcError::NotGranted`].
    pub const CODE_NOT_GRANTED: u16 = 18;

    /// A stable number for the kind of error, the same on every peer (`spec/wire.md`).
    ///
    /// Codes are never reused or renumbered: they are what survives the wire when the
    /// payload does not. [`RcError::Refused`] reports the code it carries, so `code()`
    /// of an error is the same before and after it crossed the wire.
    pub fn code(&self) -> u16 {
        match self {
            RcError::Pset(_) => Self::CODE_PSET,
            RcError::Slots(_) => Self::CODE_SLOTS,
            RcError::BadRequest(_) => Self::CODE_BAD_REQUEST,
            RcError::NoSuchChange(_) => Self::CODE_NO_SUCH_CHANGE,
            RcError::Aborted(_) => Self::CODE_ABORTED,
            RcError::AlreadyFinalized(_) => Self::CODE_ALREADY_FINALIZED,
            RcError::NotBound { .. } => Self::CODE_NOT_BOUND,
            RcError::NewPsetMismatch { .. } => Self::CODE_NEW_PSET_MISMATCH,
            RcError::QueueFull(_) => Self::CODE_QUEUE_FULL,
            RcError::ReservedKey(_) => Self::CODE_RESERVED_KEY,
            RcError::KeyExists(_) => Self::CODE_KEY_EXISTS,
            RcError::NoSuchKey(_) => Self::CODE_NO_SUCH_KEY,
            RcError::Timeout => Self::CODE_TIMEOUT,
            RcError::NotPermitted(_) => Self::CODE_NOT_PERMITTED,
            RcError::Client(_) => Self::CODE_CLIENT,
            RcError::ProcessLost(_) => Self::CODE_PROCESS_LOST,
            RcError::Stale { .. } => Self::CODE_STALE,
            RcError::NotGranted { .. } => Self::CODE_NOT_GRANTED,
            RcError::Refused { code, .. } => *code,
        }
    }
}

/// Why a request was inconsistent in itself ([`RcError::BadRequest`]). The requester
/// fixes the request and asks again: the same request is refused the same way.
///
/// Non-exhaustive: new checks may be added; a caller that does not know a reason
/// reports it by its text. The texts are those the refusals always carried (a peer
/// receives them as [`RcError::Refused`] detail, `spec/wire.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum BadRequest {
    /// A spawn named no command.
    #[error("a spawn needs at least one command")]
    NoSpawnCommand,
    /// A spawn command has no program, or one containing NUL.
    #[error("a spawn command needs a program")]
    NoProgram,
    /// A spawn command starts zero processes.
    #[error("a spawn command starts no process")]
    EmptySpawnCommand,
    /// A spawn argument contains NUL (C strings cannot carry it).
    #[error("a spawn argument contains NUL")]
    NulInArgument,
    /// A spawn asks for more than `MAX_SPAWN` processes.
    #[error("a spawn may start at most 65536 processes")]
    SpawnTooLarge,
    /// A spawn environment variable is empty, holds `=` in its name, or NUL.
    #[error("a spawn environment variable has an invalid name or value")]
    BadEnvironment,
    /// A kill names a spawn that never existed.
    #[error("no such spawn")]
    NoSuchSpawn,
    /// The job would have more than `MAX_SLOTS` slots.
    #[error("a job may have at most 2^24 slots")]
    TooManySlots,
    /// An application of the job starts with zero processes.
    #[error("an application starts with no process")]
    EmptyApplication,
    /// A message came from a node the job does not have.
    #[error("message from an unknown node")]
    UnknownNode,
    /// A modex reached the master instead of the node's daemon (`MODEX-1`).
    #[error("a modex is gathered by the node's daemon")]
    ModexAtMaster,
    /// A change adds or removes no process.
    #[error("a change must add or remove at least one process")]
    EmptyChange,
    /// An ADD named victims. A [`crate::rc::ChangeRequest`] cannot say this; a request
    /// built from a bag of fields (the C API's `dynres_change_request`) is refused with
    /// it before it becomes one.
    #[error("only SUB and REPLACE take victims")]
    VictimsWithoutRemoval,
    /// A change would remove every process of its application.
    #[error("a change may not remove every process of the application")]
    RemovesWholeApplication,
    /// A victim is named twice.
    #[error("a victim is named twice")]
    DuplicateVictim,
    /// The bound pset named is not malleable.
    #[error("the bound pset is not malleable")]
    NotMalleable,
    /// The application has no malleable pset to bind an ADD to.
    #[error("the application has no malleable pset")]
    NoMalleablePset,
    /// A REPLACE removes processes of more than one malleable pset.
    #[error("a REPLACE must remove processes of exactly one malleable pset")]
    ReplaceSpansPsets,
    /// No active pset holds the processes to remove.
    #[error("no active pset holds the processes to remove")]
    NothingToRemove,
    /// An accept of a change bound to several psets named none.
    #[error("this change has several bound psets: name one")]
    AmbiguousBound,
    /// A node given back is not one of the job's.
    #[error("no such node")]
    NoSuchNode,
    /// A node given back still has processes of the job.
    #[error("the node still has processes of the job")]
    NodeBusy,
    /// A process joined a modex twice.
    #[error("this process is already in this modex")]
    AlreadyInModex,
}

/// Why [`Master::handle`](crate::rc::Master::handle) rejected an input. Nothing changed
/// and nobody is owed a reply: the driver logs it, and for a node it gave back
/// ([`NoSuchNode`](Self::NoSuchNode), [`NodeBusy`](Self::NodeBusy)) keeps the node and
/// tries again later.
///
/// Non-exhaustive: a driver that does not know a rejection logs it and goes on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum MasterRejection {
    /// A message from a node the job does not have.
    #[error("bad change request: message from an unknown node")]
    UnknownNode(NodeId),
    /// `NodeReturned` of a node the job does not have.
    #[error("bad change request: no such node")]
    NoSuchNode(NodeId),
    /// `NodeReturned` of a node that still has processes of the job (`RC-20`).
    #[error("bad change request: the node still has processes of the job")]
    NodeBusy(NodeId),
    /// `NodeAdded` beyond the most slots a job may have (`MAX_SLOTS`).
    #[error("bad change request: a job may have at most 2^24 slots")]
    TooManySlots,
}

impl From<MasterRejection> for RcError {
    /// The refusal a master rejection is reported as where a driver speaks the wire's
    /// codes (the C ABI); the only place the two meet.
    fn from(r: MasterRejection) -> Self {
        RcError::BadRequest(match r {
            MasterRejection::UnknownNode(_) => BadRequest::UnknownNode,
            MasterRejection::NoSuchNode(_) => BadRequest::NoSuchNode,
            MasterRejection::NodeBusy(_) => BadRequest::NodeBusy,
            MasterRejection::TooManySlots => BadRequest::TooManySlots,
        })
    }
}

/// Why [`Daemon::handle`](crate::rc::Daemon::handle) rejected an input. The daemon has
/// already answered the client with the refusal it is owed; the driver only logs it
/// (and may drop the connection it came on).
///
/// Non-exhaustive: a driver that does not know a rejection logs it and goes on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonRejection {
    /// A request from a process that does not run on this node.
    #[error("process {0} may not do this")]
    NotLocal(ProcessId),
}

impl From<DaemonRejection> for RcError {
    /// The refusal a daemon rejection is reported as (the one the client was sent).
    fn from(r: DaemonRejection) -> Self {
        match r {
            DaemonRejection::NotLocal(pid) => RcError::NotPermitted(pid),
        }
    }
}

/// Why [`Client::handle`](crate::rc::Client::handle) rejected an input: a mistake of
/// the caller, which fixes the call (here: picks an id not in use) and makes it again.
/// Nothing was sent.
///
/// Non-exhaustive: a caller that does not know a rejection reports it as a failed call.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum ClientRejection {
    /// The call id names a call still open.
    #[error("client: call id already in use")]
    CallIdInUse(CallId),
}

impl From<ClientRejection> for RcError {
    /// The refusal a client rejection is reported as (the C ABI's code for it).
    fn from(r: ClientRejection) -> Self {
        match r {
            ClientRejection::CallIdInUse(_) => RcError::Client("call id already in use"),
        }
    }
}

/// `PsetError` boxed so that `RcError` stays small.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[error("{0}")]
pub struct PsetErrorBox(pub alloc::boxed::Box<PsetError>);

impl From<PsetError> for RcError {
    fn from(e: PsetError) -> Self {
        RcError::Pset(PsetErrorBox(alloc::boxed::Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    /// A rejection reads as the refusal it maps to, so logs and the C ABI's messages
    /// did not change when rejections got their own types.
    #[test]
    fn rejections_read_as_the_refusals_they_map_to() {
        let pid = ProcessId::new(crate::process::Namespace::new("job"), 3);
        let master = [
            MasterRejection::UnknownNode(NodeId(7)),
            MasterRejection::NoSuchNode(NodeId(7)),
            MasterRejection::NodeBusy(NodeId(1)),
            MasterRejection::TooManySlots,
        ];
        for r in master {
            assert_eq!(r.to_string(), RcError::from(r.clone()).to_string());
            assert_eq!(RcError::from(r).code(), RcError::CODE_BAD_REQUEST);
        }
        let d = DaemonRejection::NotLocal(pid.clone());
        assert_eq!(RcError::from(d.clone()), RcError::NotPermitted(pid));
        assert_eq!(d.to_string(), RcError::from(d).to_string());
        let c = ClientRejection::CallIdInUse(5);
        assert_eq!(c.to_string(), RcError::from(c.clone()).to_string());
        assert_eq!(RcError::from(c).code(), RcError::CODE_CLIENT);
    }

    /// The reasons keep the texts peers have always received.
    #[test]
    fn bad_requests_keep_their_texts() {
        assert_eq!(
            RcError::BadRequest(BadRequest::NoSuchSpawn).to_string(),
            "bad change request: no such spawn"
        );
        assert_eq!(
            BadRequest::ModexAtMaster.to_string(),
            "a modex is gathered by the node's daemon"
        );
    }
}
