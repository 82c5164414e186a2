//! Signals to the runtime (RT-4). SIGINT, SIGTERM, SIGHUP (a closed terminal or ssh
//! session) and SIGQUIT end the job cleanly: the runtime kills its processes and cleans
//! up instead of dying. SIGUSR1 and SIGUSR2 are forwarded to the job's processes, as
//! mpirun does.
//!
//! The handlers set atomics and write a byte to a self-pipe whose read end the I/O loop
//! (`ioloop.rs`) waits on, so that a signal wakes the engine at once instead of being
//! found by a periodic poll.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Set with [`INTERRUPTED`] when the job's `--timeout` ended it.
static TIMED_OUT: AtomicBool = AtomicBool::new(false);
/// Forwarded signals received and not yet taken: bit 0 SIGUSR1, bit 1 SIGUSR2.
static FORWARD: AtomicU32 = AtomicU32::new(0);
/// Write end of the self-pipe (-1: none), for the handlers.
static WAKE_W: AtomicI32 = AtomicI32::new(-1);
/// Both ends of the self-pipe, created once (the handlers only ever see the raw write
/// end, which therefore must live as long as the process).
static WAKE: OnceLock<Option<(OwnedFd, OwnedFd)>> = OnceLock::new();

/// The signals that end the job.
const ENDING: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];
/// The signals forwarded to the job's processes, by bit in [`FORWARD`].
const FORWARDED: [libc::c_int; 2] = [libc::SIGUSR1, libc::SIGUSR2];

/// Writes one byte to the self-pipe. Async-signal-safe: an atomic load and write(2).
fn wake() {
    let fd = WAKE_W.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: writes one byte from a valid buffer; the descriptor is never closed
        // (held in `WAKE` for the process' life). A full pipe already wakes the loop.
        let _ = unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
    }
}

extern "C" fn on_ending(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    wake();
}

extern "C" fn on_forwarded(sig: libc::c_int) {
    if let Some(bit) = FORWARDED.iter().position(|s| *s == sig) {
        FORWARD.fetch_or(1 << bit, Ordering::SeqCst);
    }
    wake();
}

extern "C" fn on_child(_: libc::c_int) {
    wake();
}

fn self_pipe() -> Option<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which we then own. Non-blocking
    // both ways: a handler must never block, nor the loop that drains it.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "no self-pipe for signals: they are noticed within a second");
        return None;
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Some(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Installs the handlers.
pub fn install() {
    if let Some((_, w)) = WAKE.get_or_init(self_pipe) {
        WAKE_W.store(w.as_raw_fd(), Ordering::SeqCst);
    }
    let ending = on_ending as extern "C" fn(libc::c_int) as libc::sighandler_t;
    let forwarded = on_forwarded as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handlers only store to atomics and write(2), which are
    // async-signal-safe.
    unsafe {
        for s in ENDING {
            libc::signal(s, ending);
        }
        for s in FORWARDED {
            libc::signal(s, forwarded);
        }
    }
}

/// Makes SIGCHLD wake the I/O loop too: its reaper without `pidfd` (kernels before
/// 5.3) waits for that instead of a thread per child.
pub fn watch_children() {
    let child = on_child as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only writes to a pipe, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGCHLD, child);
    }
}

/// The read end of the self-pipe: readable once a signal arrived ([`drain`] empties
/// it). `None` before [`install`] or without a pipe.
pub fn wake_fd() -> Option<BorrowedFd<'static>> {
    WAKE.get().and_then(Option::as_ref).map(|(r, _)| r.as_fd())
}

/// Empties the self-pipe.
pub fn drain() {
    let Some(fd) = wake_fd() else { return };
    let mut buf = [0u8; 64];
    // SAFETY: reads into a valid buffer from a non-blocking descriptor we own.
    while unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

/// Whether a signal that ends the job arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// `--timeout`: the job's time is up; it ends as on SIGTERM, and says why.
pub fn time_out() {
    TIMED_OUT.store(true, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
    wake();
}

/// Whether [`time_out`] ended the job.
pub fn timed_out() -> bool {
    TIMED_OUT.load(Ordering::SeqCst)
}

/// The forwarded signals received since the last call (each once, however often it
/// arrived meanwhile).
pub fn take_forwarded() -> Vec<libc::c_int> {
    let bits = FORWARD.swap(0, Ordering::SeqCst);
    FORWARDED
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, s)| *s)
        .collect()
}
