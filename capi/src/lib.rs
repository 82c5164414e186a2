//! # dynres-capi
//!
//! dynres for C, C++ and Fortran: `libdynres.a`, `libdynres.so` and the header
//! `include/dynres.h` (generated from this crate by cbindgen; `tests/header.rs` fails
//! when the checked-in header drifts).
//!
//! Two APIs:
//!
//! - **the kernel** — opaque handles on core's sans-I/O machines ([`master`], [`daemon`],
//!   [`client`]) and the pset [`registry`]. Inputs are frames of core's wire codec plus
//!   the caller's time in nanoseconds; outputs come one [`action`] at a time, their
//!   frames copied into the caller's buffer. For runtimes that embed the protocol
//!   (PRRTE, Slurm, Flux) and carry the frames themselves.
//! - **the client library** ([`session`]) — blocking calls for an application started
//!   by `dynres run`: query, accept, confirm, request a change, pset info and
//!   operations, publish/lookup/fence.
//!
//! Every entry point returns an `int` code (`DYNRES_OK` or an [`error`] code, with the
//! message from `dynres_last_error()`), checks its pointers for NULL, and catches
//! panics (the handle is then poisoned). Handles are not thread-safe: one thread at a
//! time per handle.

pub mod action;
pub mod calls;
pub mod client;
pub mod daemon;
pub mod error;
pub mod master;
pub mod registry;
pub mod session;
pub mod types;
