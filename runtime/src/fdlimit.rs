//! The runtime's descriptor limit: it holds about three descriptors per process of the
//! job on its node (two output pipes and the control connection), so a soft limit of
//! 1024 — the usual default — ran out near 330 processes (issue 29, spec `DATA-12`).

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (which an unprivileged process
/// may do) and returns the soft limit now in force. Processes the runtime launches
/// inherit it. A failure leaves the limit as it was: the runtime still runs, as far as
/// its descriptors go.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out-parameter.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: a valid rlimit; raising the soft limit up to the hard one is allowed.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::debug!(
                from = lim.rlim_cur,
                to = lim.rlim_max,
                "descriptor limit raised"
            );
            return lim.rlim_max;
        }
        tracing::warn!(
            soft = lim.rlim_cur,
            error = %std::io::Error::last_os_error(),
            "cannot raise the descriptor limit"
        );
    }
    lim.rlim_cur
}

#[cfg(test)]
mod tests {
    /// A soft limit below the hard one is raised to it (DATA-12). Run in a child
    /// process, so that lowering the limit first does not disturb other tests.
    #[test]
    fn soft_descriptor_limit_is_raised_to_the_hard_one() {
        // SAFETY: fork in a test; the child only calls async-signal-safe functions and
        // the function under test (no locks held by other threads are needed: it makes
        // two system calls and, below the level tests log at, no output), then _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: valid out-parameter / rlimit values; the child exits right after.
            let ok = unsafe {
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_max > 64 && {
                    let low = libc::rlimit {
                        rlim_cur: 64,
                        rlim_max: lim.rlim_max,
                    };
                    libc::setrlimit(libc::RLIMIT_NOFILE, &low) == 0
                }
            };
            let raised = ok && super::raise_nofile() == lim.rlim_max;
            // SAFETY: ends the forked child without running the parent's destructors.
            unsafe { libc::_exit(if raised { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "soft limit not raised to the hard one"
        );
    }
}
