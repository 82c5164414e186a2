//! Signals to the runtime (RT-4). SIGINT, SIGTERM, SIGHUP (a closed terminal or ssh
//! session) and SIGQUIT end the job cleanly: the runtime kills its processes and cleans
//! up instead of dying. SIGUSR1 and SIGUSR2 are forwarded to the job's processes, as
//! mpirun does.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Set with [`INTERRUPTED`] when the job's `--timeout` ended it.
static TIMED_OUT: AtomicBool = AtomicBool::new(false);
/// Forwarded signals received and not yet taken: bit 0 SIGUSR1, bit 1 SIGUSR2.
static FORWARD: AtomicU32 = AtomicU32::new(0);

/// The signals that end the job.
const ENDING: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];
/// The signals forwarded to the job's processes, by bit in [`FORWARD`].
const FORWARDED: [libc::c_int; 2] = [libc::SIGUSR1, libc::SIGUSR2];

extern "C" fn on_ending(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

extern "C" fn on_forwarded(sig: libc::c_int) {
    if let Some(bit) = FORWARDED.iter().position(|s| *s == sig) {
        FORWARD.fetch_or(1 << bit, Ordering::SeqCst);
    }
}

/// Installs the handlers.
pub fn install() {
    let ending = on_ending as extern "C" fn(libc::c_int) as libc::sighandler_t;
    let forwarded = on_forwarded as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handlers only store to atomics, which is async-signal-safe.
    unsafe {
        for s in ENDING {
            libc::signal(s, ending);
        }
        for s in FORWARDED {
            libc::signal(s, forwarded);
        }
    }
}

/// Whether a signal that ends the job arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// `--timeout`: the job's time is up; it ends as on SIGTERM, and says why.
pub fn time_out() {
    TIMED_OUT.store(true, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
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
