//! Shared-memory device: one inbox segment per process with one SPSC ring per sender,
//! so every ordered pair of processes has its own lock-free ring.
//!
//! * Eager path: a message up to [`ShmConfig::eager_threshold`] is copied into the ring
//!   as one record (header + payload) and published with one store.
//! * Large path: above the threshold the header goes first and the payload streams
//!   through the ring in chunks as the receiver drains it (pipelined, bounded memory);
//!   the receiver copies straight into the posted user buffer when there is one.
//! * Single copy: at or above the threshold of [`CmaMode`] (and where a one-time
//!   measurement shows it pays), when a probe showed the receiver may read the sender's
//!   memory, the ring carries only a request and the
//!   receiver copies the payload with `process_vm_readv` ([`cma`]); otherwise, or if
//!   that read is refused, the large path above.
//! * Waiting: spin-then-block on the process' futex word ([`waiter`]).
//! * Cleanup: the owner unlinks its inbox on finalize/drop; a peer that notices the owner
//!   died unlinks it, and [`segment::reap_stale`] sweeps leftovers at start-up. A slot is
//!   recycled once its sender closed it or died, even if we dropped the connection
//!   first (see [`layout::Slot::recycle`]).
//! * Names: `dynres-shm-{pid}-{random}`, created exclusively with mode 0600; a segment
//!   of another user or open to others is never mapped ([`segment::Segment::open`]).

// Single-copy transfers need real processes: not model-checked.
#[cfg(not(loom))]
pub mod cma;
pub mod extension;
pub mod layout;
mod record;
pub mod ring;
pub mod segment;
pub mod waiter;

// The device itself is not model-checked (it needs real futexes and processes).
#[cfg(not(loom))]
mod device;

#[cfg(not(loom))]
pub use device::{CmaMode, DEFAULT_CMA_THRESHOLD, ShmConfig, ShmDevice};

/// Registers this process for the peers' asymmetric barriers, which [`ShmDevice::new`]
/// otherwise does itself. Call it while the process has one thread: the kernel
/// registers a multi-threaded process only after an RCU grace period (10–20 ms on these
/// VMs, measured as a new process' first transport open in a helper thread), a
/// single-threaded one at once. Idempotent; returns whether the barriers are in use.
pub fn register_early() -> bool {
    crate::sync::asymmetric_barriers()
}
