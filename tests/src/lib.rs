//! # dynres-tests
//!
//! End-to-end tests across the kernel, the transports and the launcher: real processes,
//! real sockets, grow and shrink. The tests themselves live in `tests/tests/`.

pub mod job;
pub mod mpi;
pub mod netns;
pub mod skip;

pub use skip::skip;
