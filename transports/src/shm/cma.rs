//! Single-copy transfers of large messages with Cross Memory Attach
//! (`process_vm_readv(2)`), as Open MPI's vader BTL does.
//!
//! The ring path copies a large payload twice (sender into the ring, ring into the
//! receive buffer). With CMA the sender only publishes a *request to send* record
//! (header, address of its buffer, sequence number) and the receiver copies the payload
//! straight from the sender's address space into the posted buffer, then acknowledges in
//! the sender's slot ([`crate::shm::layout::Slot::answer_request`]) so the sender may reuse its
//! buffer. One copy, and the kernel's copy is not chunked through a 256 KiB ring.
//!
//! CMA needs ptrace access to the sender (same uid, and Yama's `ptrace_scope` allowing
//! it). Whether it works is *detected, not assumed*: when a receiver attaches a sender's
//! slot it reads a token the sender published in its inbox header
//! ([`probe`]); only if that read returns the token does it mark the slot
//! [`CMA_OK`](crate::shm::layout::CMA_OK), and only then does the sender use CMA for that
//! ring. A read that fails later with a permission error is answered with
//! [`ACK_FALLBACK`](crate::shm::layout::ACK_FALLBACK): the sender then streams the payload through the ring as before, so
//! the message still arrives. `ESRCH` (the sender is gone) is reported as the peer's
//! death by the liveness check.

use std::io;

use std::sync::atomic::{AtomicU64, Ordering};

/// Environment switch: `DYNRES_SHM_CMA=0` disables single-copy transfers in this
/// process (as sender and as receiver), forcing the ring path.
pub const CMA_ENV: &str = "DYNRES_SHM_CMA";

/// Whether a single-copy read is worth it on this machine: a 1 MiB `process_vm_readv`
/// of our own memory takes at most 1.25 × a 1 MiB `memcpy` (medians of 5), measured
/// once per process.
///
/// Why this rule: the ring path's two copies overlap (the reader copies chunk k out
/// while the writer copies k+1 in), so a large message costs it about one copy's time;
/// single copy wins only if the kernel's copy (page pinning included) is about as fast
/// as a `memcpy`. On bare-metal hosts it usually is; in some virtual machines pinning
/// costs several times the copy (on the Firecracker VMs this crate is measured on, a
/// 1 MiB read takes ~70 µs against ~18 µs for `memcpy` — and Open MPI's vader, which
/// uses CMA, needs ~98 µs one-way for 1 MiB there).
pub fn single_copy_pays() -> bool {
    static PAYS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PAYS.get_or_init(|| {
        const N: usize = 1 << 20;
        let src = vec![1u8; N];
        let mut dst = vec![0u8; N];
        let pid = std::process::id();
        let median = |mut v: Vec<std::time::Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let mut cma_t = Vec::new();
        let mut copy_t = Vec::new();
        for _ in 0..5 {
            let t = std::time::Instant::now();
            if read_remote(pid, src.as_ptr() as u64, &mut dst).is_err() {
                tracing::debug!("single copy unavailable in this process");
                return false;
            }
            cma_t.push(t.elapsed());
            let t = std::time::Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            copy_t.push(t.elapsed());
        }
        let (c, m) = (median(cma_t), median(copy_t));
        let pays = c.as_nanos() * 4 <= m.as_nanos() * 5;
        tracing::debug!(cma = ?c, memcpy = ?m, pays, "single-copy cost measured");
        pays
    })
}

/// Why a remote read failed.
#[derive(Debug)]
pub enum ReadError {
    /// The sender process no longer exists (`ESRCH`): it died.
    Gone,
    /// Anything else (`EPERM`, `EFAULT`, `ENOSYS`, a short read that made no
    /// progress): the receiver asks for the ring path instead.
    Refused(io::Error),
}

static TRANSFERS: AtomicU64 = AtomicU64::new(0);

/// How many messages this process received by a single-copy read (for tests and
/// benchmarks: proves which path carried the bytes).
pub fn transfers() -> u64 {
    TRANSFERS.load(Ordering::Relaxed)
}

/// Counts one message received by single copy (see [`transfers`]).
pub fn note_transfer() {
    TRANSFERS.fetch_add(1, Ordering::Relaxed);
}

/// Copies `dst.len()` bytes from address `remote` of process `pid` into `dst`.
pub fn read_remote(pid: u32, remote: u64, dst: &mut [u8]) -> Result<(), ReadError> {
    let mut done = 0usize;
    while done < dst.len() {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: dst.len() - done,
        };
        let rem = libc::iovec {
            iov_base: (remote as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: dst.len() - done,
        };
        // SAFETY: `local` describes the writable rest of `dst`, which we borrow
        // mutably for the call; `rem` is only an address in the other process, which
        // the kernel validates (a bad one is EFAULT, not undefined behaviour here).
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &rem, 1, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ESRCH) => Err(ReadError::Gone),
                _ => Err(ReadError::Refused(e)),
            };
        }
        if n == 0 {
            return Err(ReadError::Refused(io::Error::other(
                "process_vm_readv made no progress",
            )));
        }
        done += n as usize;
    }
    Ok(())
}

/// The word a receiver reads to probe CMA access to this process: its address and
/// value go into our inbox header. Random, so a successful probe proves the read
/// reached *this* process and not some other one reusing the pid.
static PROBE: AtomicU64 = AtomicU64::new(0);

/// `(address, token)` of this process' probe word, initialised on first use.
pub fn probe_target() -> (u64, u64) {
    let mut v = PROBE.load(Ordering::Relaxed);
    if v == 0 {
        // Not secret, only distinct: pid, time and an address mixed.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mixed = (u64::from(std::process::id()) << 32) ^ t ^ (&v as *const u64 as u64);
        let cand = mixed | 1;
        v = match PROBE.compare_exchange(0, cand, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => cand,
            Err(cur) => cur,
        };
    }
    (&PROBE as *const AtomicU64 as u64, v)
}

/// Whether this process can read process `pid`'s memory: reads its probe word at
/// `addr` and compares with `token` (both from its inbox header).
pub fn probe(pid: u32, addr: u64, token: u64) -> bool {
    let mut b = [0u8; 8];
    match read_remote(pid, addr, &mut b) {
        Ok(()) => {
            let ok = u64::from_ne_bytes(b) == token;
            if !ok {
                tracing::debug!(pid, "cma probe read the wrong token: ring path");
            }
            ok
        }
        Err(e) => {
            tracing::debug!(pid, error = ?e, "cma probe failed: ring path");
            false
        }
    }
}

/// Lets any process of ours read our memory under Yama `ptrace_scope = 1` (where only
/// ancestors may otherwise): `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`, as Open MPI
/// does. Without Yama the call fails with `EINVAL` and nothing is needed; a failure is
/// only logged, since the probe decides in the end.
pub fn allow_peers() {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    let r = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    if r != 0 {
        tracing::trace!(error = %io::Error::last_os_error(), "PR_SET_PTRACER not applied");
    }
}
