//! # dynres-client
//!
//! The client library: what an application process links to talk to its runtime
//! (`dynres run`), and all it links: no runtime, CLI or argument-parsing code.
//!
//! A [`Session`] wraps core's [`Client`](dynres_core::rc::Client) state machine with blocking calls over the
//! job's control socket (one call at a time). Resource-change calls follow the thesis'
//! API (Lst. 6.1–6.7): [`Session::get_res_change`], [`Session::pset_create_op`],
//! [`Session::accept_res_change`] (non-blocking) and
//! [`Session::accept_res_change_blocking`], [`Session::confirm_res_change`],
//! [`Session::request_res_change`]; plus the data server ([`Session::publish`],
//! [`Session::lookup`]) and [`Session::fence`].
//!
//! [`comm`] is a communicator made from a pset over `dynres-transports`; [`dpm`] is
//! MPI-2 style dynamic process management (spawn, ports, connect/accept) on the
//! kernel's spawn handshakes. [`auth`], [`env`](mod@env) and [`framing`] are the local protocol
//! between a process and its runtime, shared with `dynres-runtime`.

pub mod auth;
pub mod comm;
pub mod dpm;
pub mod env;
pub mod error;
pub mod framing;
mod session;
pub mod tracefile;

pub use error::{ClientError, CommError, EndpointError};
pub use session::{PsetInfo, Session};
