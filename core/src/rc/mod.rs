//! The resource-change protocol: query → pset operation → accept/confirm (thesis §6,
//! §7.4; `spec/resource-change.md`, rules `RC-n`), as three sans-I/O roles:
//!
//! - [`Master`]: pset operations, the publish/lookup data server, the resource-change
//!   controller and slot allocation — every decision is made here, one at a time;
//! - [`Daemon`]: one per node; answers queries from its replica, forwards the rest,
//!   launches, kills and reports local processes;
//! - [`Client`]: the application process' side of the API.
//!
//! Each has `handle(now, input)`, `poll_output()` and `poll_timeout()`.

mod client;
mod daemon;
pub mod ends;
mod error;
pub mod giveback;
mod input;
pub mod liveness;
pub mod master;
mod msg;
pub mod onloss;
pub mod query;
pub mod tools;
pub mod trace;
mod types;
pub mod wire;

pub use client::{AcceptResult, CallId, CallResult, Client, ClientCall, ClientInput, ClientOutput};
pub use daemon::{Daemon, DaemonInput, DaemonOutput, Standing};
pub use error::{
    BadRequest, ClientRejection, DaemonRejection, MasterRejection, PsetErrorBox, RcError,
};
pub use master::{DataServer, Master, MasterConfig, MasterInput, MasterOutput};
pub use msg::{ClientReply, ClientRequest, Envelope, ModexData, ToDaemon, ToMaster};
pub use types::{
    AbortReason, AcceptOutcome, Change, ChangeInfo, ChangeRequest, LaunchCommand, NamedVictims,
    NodeId, NodeLaunch, QueryAnswer, RcStatus, RcType, ReqId, SpawnCommand, SpawnWatch, Spawned,
    Victims,
};
