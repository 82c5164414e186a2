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

/// Asks for the cache line at `p` in this core's cache, ready to be written (x86's
/// `prefetchw`, where the CPU has it; nothing elsewhere and under loom). A hint only:
/// it never faults and changes no memory.
#[inline]
pub(crate) fn prefetch_for_write(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    if prefetchw_supported() {
        // SAFETY: a prefetch reads and writes nothing and never faults, whatever `p`.
        unsafe {
            core::arch::asm!(
                "prefetchw [{p}]",
                p = in(reg) p,
                options(nostack, readonly, preserves_flags)
            )
        };
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = p;
}

/// Whether this CPU has `prefetchw` (CPUID 0x8000_0001, ECX bit 8); asked once.
/// (The compiler's own write prefetch becomes a read prefetch without the target
/// feature, which the default target does not enable.)
#[cfg(all(target_arch = "x86_64", not(loom)))]
fn prefetchw_supported() -> bool {
    use std::sync::atomic::AtomicU8;
    // 0: not asked yet, 1: no, 2: yes.
    static HAS: AtomicU8 = AtomicU8::new(0);
    match HAS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => {
            // Leaf 0x8000_0001 is asked only when the highest extended leaf reaches it.
            // `__cpuid` is a safe function from Rust 1.94 on and unsafe before: the
            // block keeps the declared MSRV (1.85) building; newer compilers call it
            // an unused unsafe block.
            #[allow(unused_unsafe)]
            // SAFETY: CPUID exists on every x86_64 CPU and only reads identification
            // registers; leaf 0x8000_0001 is asked only when the highest extended leaf
            // (leaf 0x8000_0000's answer) reaches it.
            let (max, ecx) = unsafe {
                let max = core::arch::x86_64::__cpuid(0x8000_0000).eax;
                let ecx = if max >= 0x8000_0001 {
                    core::arch::x86_64::__cpuid(0x8000_0001).ecx
                } else {
                    0
                };
                (max, ecx)
            };
            let has = max >= 0x8000_0001 && ecx & (1 << 8) != 0;
            HAS.store(
                if has { 2 } else { 1 },
                std::sync::atomic::Ordering::Relaxed,
            );
            has
        }
        v => v == 2,
    }
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

#[cfg(all(test, not(loom)))]
mod tests {
    /// The ring asks for lines it may not be allowed to touch yet (the peer's next
    /// record line): the hint must never fault or access memory, whatever the address.
    #[test]
    fn a_write_prefetch_never_faults() {
        super::prefetch_for_write(std::ptr::null());
        super::prefetch_for_write(usize::MAX as *const u8);
        let line = [0u8; 64];
        super::prefetch_for_write(line.as_ptr());
        assert_eq!(line, [0u8; 64], "a hint changes no memory");
    }
}
