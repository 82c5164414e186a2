//! Atomics and spinning behind `cfg(loom)` shims, so the ring and the waiter can be
//! model-checked with loom and run on std atomics otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// One iteration of a spin loop. Under loom a spin must yield, or the model checker
/// would explore an unbounded busy loop.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
