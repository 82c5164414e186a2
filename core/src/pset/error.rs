//! What can go wrong with a pset request. Every variant names the pset or input at
//! fault; none of them leaves the registry changed (`PSET-40`).

use alloc::boxed::Box;
use alloc::string::String;

use super::name::{NameError, PsetName};
use crate::process::ProcessId;

/// Why a pset request was refused.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
pub enum PsetError {
    /// A name did not parse.
    #[error("bad pset name: {0}")]
    Name(#[from] NameError),
    /// No pset has this name.
    #[error("no pset named {0}")]
    NotFound(PsetName),
    /// The pset was pruned: invalid for new use (`PSET-35`).
    #[error("pset {0} was pruned")]
    Pruned(PsetName),
    /// The name is taken by a live or pruned pset and names are never reused (`PSET-5`).
    #[error("pset name {0} is already in use or retired")]
    NameTaken(PsetName),
    /// An operation's result (or a definition) would have no member (`PSET-30`).
    #[error("pset {0} would be empty")]
    EmptyResult(PsetName),
    /// The caller may not do this in this domain (`PSET-6`, `PSET-7`).
    #[error("not permitted on {name}: {why}")]
    NotPermitted {
        /// The pset concerned.
        name: PsetName,
        /// The rule that forbids it.
        why: &'static str,
    },
    /// The runtime tried to change the members of an active pset (`PSET-13`).
    #[error("pset {0} is active: only its application may change its members")]
    Active(PsetName),
    /// `mpi://SELF` used without a calling process.
    #[error("mpi://SELF needs a calling process")]
    SelfWithoutProcess,
    /// A process the request names is unknown to the job, or not where it must be.
    #[error("process {pid} {why}")]
    Process {
        /// The process.
        pid: ProcessId,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A SPLIT request that does not describe a partition.
    #[error("bad split of {name}: {why}")]
    BadSplit {
        /// The pset being split.
        name: PsetName,
        /// What is wrong.
        why: &'static str,
    },
    /// An attribute key that cannot be set this way.
    #[error("attribute {key:?} cannot be set: {why}")]
    BadAttribute {
        /// The key.
        key: String,
        /// Why not.
        why: &'static str,
    },
    /// `start_job` called twice, or a request before it.
    #[error("job {0}")]
    Job(&'static str),
    /// The process table is full (2³² processes).
    #[error("process table full")]
    TableFull,
    /// Operation `index` of an atomic batch failed; nothing of the batch was applied.
    #[error("operation {index} of the batch failed: {source}")]
    InBatch {
        /// Position of the failing operation in the batch.
        index: usize,
        /// Its error.
        source: Box<PsetError>,
    },
}
