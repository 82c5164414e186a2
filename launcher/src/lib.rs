//! # dynres-launcher
//!
//! The runtime that runs malleable jobs on one host: `dynres run` is the master and the
//! node's daemon at once (core's [`Master`](dynres_core::rc::Master) and
//! [`Daemon`](dynres_core::rc::Daemon) state machines, joined by an ordered in-process
//! queue), serves application processes over a per-job Unix socket, launches and reaps
//! them, and answers the `dynres grow/shrink/replace/status` tools. Every protocol
//! decision is the kernel's; this crate only does I/O, process management and timers.
//!
//! Applications link [`client`] (sessions, resource-change calls, publish/lookup/fence)
//! and [`comm`] (a communicator made from a pset over `dynres-transports`).
#![warn(missing_docs)]

pub mod apps;
pub mod auth;
pub mod client;
pub mod comm;
pub mod dpm;
pub mod env;
pub mod error;
pub mod framing;
pub mod hostauth;
pub mod hosts;
pub mod input;
pub mod private;
pub mod runtime;
pub mod tool;
pub mod tracefile;

pub use error::{ClientError, CommError, EndpointError, LauncherError};
