//! Process sets (psets): names, membership, attributes, operations and the derived sets
//! of the thesis' Defs. 1–5. Normative text: `spec/psets.md`; rules are cited as
//! `PSET-n`.
//!
//! Membership is a bit-set over a per-job process table (`members`, `table`), so set
//! operations cost a pass over words rather than the O(m·n) list walks the thesis
//! measured as its bottleneck (§8.3.3).

mod attrs;
mod derived;
mod error;
mod members;
mod name;
mod ops;
mod registry;
mod rollback;
mod table;

pub use attrs::{
    AttrUpdate, AttrValue, Attributes, MPI_PS_ACTIVE, MPI_PS_EPOCH, MPI_PS_VERSION, MPI_SIZE,
    PsetInfo, SCHED_PREFIX,
};
pub use error::PsetError;
pub use members::MemberSet;
pub use name::{DELTA_SUBDOMAIN, Domain, MAX_NAME_LEN, MAX_SEGMENT_LEN, NameError, PsetName};
pub use ops::{OpOutcome, PsetOp, SetOp, SplitBy};
pub use registry::{Origin, Pset, PsetRegistry};
pub use rollback::RollbackReport;
pub use table::ProcessTable;
