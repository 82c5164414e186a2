//! Process identity: `(namespace, rank)`.
//!
//! Ranks of a job are handed out by a monotonically increasing counter and never
//! reused (thesis §7.4.3; spec `PSET-20`), so a rank names one process for the life of
//! the job even after that process has left.

mod ranges;
mod runs;

pub use ranges::ProcSet;
pub use runs::{ProcRuns, Run, RunsError};

use alloc::string::String;
use compact_str::CompactString;
use core::fmt;

/// The namespace of a job (PMIx `nspace`). Short, printable, case-sensitive.
///
/// Kept inline when short (see `compact_str`): every [`ProcessId`] carries its namespace
/// and process ids are cloned into every pset, change and message, so a clone should not
/// allocate. Equality, order and hash are those of the text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(CompactString);

impl Namespace {
    /// A namespace with the given name.
    pub fn new(name: impl Into<String>) -> Self {
        Namespace(CompactString::from(name.into()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A rank inside a namespace.
pub type Rank = u32;

/// One process of one job: `(namespace, rank)`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcessId {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The rank, unique within the namespace for the life of the job.
    pub rank: Rank,
}

impl ProcessId {
    /// The process `rank` of `namespace`.
    pub fn new(namespace: Namespace, rank: Rank) -> Self {
        ProcessId { namespace, rank }
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.namespace, self.rank)
    }
}
