//! # dynres-core
//!
//! The protocol kernel of dynres: deterministic, sans-I/O state machines for process
//! sets (psets), resource changes and spawn handshakes. No sockets, threads or clocks:
//! the driver feeds events and the current time in and drains outputs.
//!
//! Every normative rule implemented here is numbered in `spec/` (e.g. `PSET-3`) and the
//! code cites those IDs next to where it enforces them.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod bugs;
pub mod machine;
pub mod pmi;
pub mod process;
pub mod pset;
pub mod rc;
pub mod replay;
pub mod shared;
pub mod slots;
pub mod spawn;
pub mod time;
pub mod trace;
pub mod wire;

pub use machine::Machine;
pub use process::{Namespace, ProcRuns, ProcSet, ProcessId, Rank};
pub use time::{Duration, Instant};
