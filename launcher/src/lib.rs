//! # dynres-launcher
//!
//! The runtime that runs malleable jobs: a master and per-node daemons that drive
//! `dynres-core`'s Master/Daemon state machines (doing only I/O, process management and
//! timers), the client library applications link, and the `dynres` CLI. Filled in by
//! issue 7.
#![warn(missing_docs)]
