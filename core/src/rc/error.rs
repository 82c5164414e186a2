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
    /// A client call was made in a state that does not allow it.
    #[error("client: {0}")]
    Client(&'static str),
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
