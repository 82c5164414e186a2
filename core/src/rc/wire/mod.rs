//! The wire encoding of the resource-change protocol's messages (`spec/wire.md`,
//! "Resource-change, pset and data-server messages (0x02xx–0x04xx)").
//!
//! Built on the kernel codec in [`crate::wire`]: every message is one frame
//! ([`encode_frame`](crate::wire::encode_frame) / [`decode_frame`](crate::wire::decode_frame)),
//! fields use the primitives of [`crate::wire::prim`], and every decoder returns a typed
//! [`WireError`](crate::wire::WireError) on malformed input and never panics.
//!
//! Four top-level message families cross a process boundary:
//!
//! | family | direction | encoder / decoder |
//! |---|---|---|
//! | client request `(ReqId, ClientRequest)` | client → daemon | [`encode_client`] / [`decode_client`] |
//! | client reply `(ReqId, ClientReply)` | daemon → client | [`encode_reply`] / [`decode_reply`] |
//! | [`ToMaster`](super::ToMaster) | daemon → master | [`encode_to_master`] / [`decode_to_master`] |
//! | [`ToDaemon`](super::ToDaemon) | master → daemon | [`encode_to_daemon`] / [`decode_to_daemon`] |
//!
//! Each decoder accepts only its family's message types, so a frame sent on the wrong
//! link is [`WireError::UnknownType`](crate::wire::WireError::UnknownType) rather than a
//! misinterpreted message.
//!
//! Errors ([`RcError`](super::RcError)) travel as a stable code plus either their data or
//! their text; see [`errors`] for which variants survive structurally.

mod change;
pub mod errors;
mod frames;
pub mod link;
mod messages;
mod pset;
pub mod spawn;
pub mod types;
mod values;

pub use frames::{
    decode_client, decode_reply, decode_to_daemon, decode_to_master, encode_client, encode_reply,
    encode_to_daemon, encode_to_master,
};
pub use values::name_error_code;
// For the trace records of the runtime's tool desk (`rc::trace`), which carry pset
// names, statuses and refusals exactly as the wire does.
pub(crate) use errors::{error, put_error};
pub(crate) use values::{name, put_name, put_rc_status, rc_status};

/// Longest namespace of a [`ProcessId`](crate::ProcessId), in bytes.
pub const MAX_NAMESPACE_LEN: usize = 255;
/// Longest application name (in a change request or change info), in bytes. App names
/// are pset-name segments, so the pset-name limit bounds them.
pub const MAX_APP_LEN: usize = crate::pset::MAX_NAME_LEN;
/// Longest data-server key, in bytes.
pub const MAX_KEY_LEN: usize = 4096;
/// Longest data-server value, in bytes.
pub const MAX_VALUE_LEN: usize = 4096;
/// Longest scheduling-hint key or value (`mpi_ps_sched_*`), in bytes.
pub const MAX_HINT_LEN: usize = 4096;
/// Most scheduling hints in one attribute set or update.
pub const MAX_SCHED_HINTS: usize = 64;
/// Longest error detail text ([`RcError::Refused`](super::RcError::Refused)), in bytes.
pub const MAX_DETAIL_LEN: usize = 4096;
/// Most processes in one list (members, victims, launches, split sizes or colours...).
pub const MAX_PROCS: usize = 1 << 20;
/// Most pset names in one list (bound psets, split targets, op results).
pub const MAX_PSETS: usize = 1 << 16;
/// Most operations in one atomic pset-op batch.
pub const MAX_OPS: usize = 1024;
