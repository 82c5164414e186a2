//! RT-3 for every process a node daemon starts, whatever program it runs: the daemon
//! leads a process group of its own, and a watchdog process (forked before any thread
//! exists) waits for the daemon to be gone — its end of a pipe closes whenever the
//! daemon exits, crashes or is SIGKILLed — and then kills the whole group. Processes keep
//! being started with `posix_spawn` (no per-process `pre_exec`, which would cost a fork
//! and exec each) and stay in the daemon's group.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Puts this process at the head of its own process group and forks the watchdog. Call
/// it before any thread is started. The watchdog's pipe stays open until this process
/// ends (the end of the process is what the watchdog waits for).
pub fn start() -> io::Result<()> {
    // SAFETY: getpid/getpgrp/setpgid have no memory-safety preconditions.
    unsafe {
        if libc::getpgrp() != libc::getpid() && libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`; O_CLOEXEC keeps the daemon's
    // write end out of every process it starts (else they would hold the pipe open).
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no other thread exists yet (the caller's contract), so the child may run
    // the code below, which only calls async-signal-safe functions.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // The watchdog.
            // SAFETY: close, read, kill and _exit are async-signal-safe; the buffer is
            // valid for one byte.
            unsafe {
                libc::close(w.as_raw_fd());
                let mut b = 0u8;
                loop {
                    let n = libc::read(r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
                    if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                        break;
                    }
                }
                // The daemon is gone: end every process of its group (this one too).
                libc::kill(0, libc::SIGKILL);
                libc::_exit(0);
            }
        }
        _ => {
            drop(r);
            // Kept open for the rest of this process' life: its closing is the signal.
            std::mem::forget(w);
            Ok(())
        }
    }
}
