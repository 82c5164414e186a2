//! Why a resource-change request was refused. Replies carry these to clients, so they
//! are plain data (`Clone + Eq`).

use alloc::string::String;

use crate::process::ProcessId;
use crate::pset::{PsetError, PsetName};
use crate::slots::SlotError;

/// A refused or failed resource-change request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
pub enum RcError {
    /// A pset request failed.
    #[error(transparent)]
    Pset(#[from] PsetErrorBox),
    /// Not enough free slots, or not enough processes to remove.
    #[error("slots: {0}")]
    Slots(#[from] SlotError),
    /// The request itself is inconsistent (zero size, unknown app, …).
    #[error("bad change request: {0}")]
    BadRequest(&'static str),
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

/// `PsetError` boxed so that `RcError` stays small.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[error("{0}")]
pub struct PsetErrorBox(pub alloc::boxed::Box<PsetError>);

impl From<PsetError> for RcError {
    fn from(e: PsetError) -> Self {
        RcError::Pset(PsetErrorBox(alloc::boxed::Box::new(e)))
    }
}
