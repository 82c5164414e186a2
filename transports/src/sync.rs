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

/// The cheap side of an asymmetric barrier: orders nothing on the CPU, only stops the
/// compiler from moving memory accesses across it. It stands for a full fence because
/// the other side, [`heavy_barrier`], makes every CPU running a registered process
/// execute one (`membarrier(2)`): at that point each of our threads either has its
/// earlier stores visible, or has not yet made its later loads. Under loom both sides
/// are `SeqCst` fences, the model of that guarantee.
#[inline]
pub(crate) fn light_barrier() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
    #[cfg(not(loom))]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// The expensive side of an asymmetric barrier (see [`light_barrier`]): a full fence
/// here and on every CPU currently running a process that registered with
/// [`asymmetric_barriers`]. Returns false if the kernel refused (then the light side
/// of a peer must not be relied on; callers bound their sleep instead).
pub(crate) fn heavy_barrier() -> bool {
    #[cfg(loom)]
    {
        loom::sync::atomic::fence(Ordering::SeqCst);
        true
    }
    #[cfg(not(loom))]
    {
        std::sync::atomic::fence(Ordering::SeqCst);
        // SAFETY: membarrier takes no pointers; an unsupported command returns an error.
        let r =
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) };
        r == 0
    }
}

/// Whether this kernel offers [`heavy_barrier`] (asked once per process).
pub(crate) fn heavy_barrier_supported() -> bool {
    #[cfg(loom)]
    {
        true
    }
    #[cfg(not(loom))]
    {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| {
            // SAFETY: as in `heavy_barrier`.
            let cmds = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
            cmds >= 0 && cmds & i64::from(MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0
        })
    }
}

#[cfg(not(loom))]
const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
#[cfg(not(loom))]
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
#[cfg(not(loom))]
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

/// Registers this process for [`heavy_barrier`]s issued by others (once per process)
/// and says whether that worked: only then may this process rely on
/// [`light_barrier`]. `DYNRES_SHM_ASYM=0` turns it off (every such place then uses an
/// atomic read-modify-write instead).
pub(crate) fn asymmetric_barriers() -> bool {
    #[cfg(loom)]
    {
        true
    }
    #[cfg(not(loom))]
    {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| {
            if std::env::var("DYNRES_SHM_ASYM").is_ok_and(|v| v == "0") {
                return false;
            }
            // SAFETY: as in `heavy_barrier`.
            let cmds = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
            let wanted = i64::from(
                MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
            );
            let ok = cmds >= 0 && (cmds as i64) & wanted == wanted && {
                // SAFETY: as above.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_membarrier,
                        MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
                        0,
                        0,
                    )
                };
                r == 0
            };
            tracing::debug!(ok, "membarrier (asymmetric barriers) registration");
            ok
        })
    }
}
