//! RT-3, RT-4: no process launched for a job outlives it, whatever it does to its
//! process group or session, and whichever of the runtime's processes is killed.
//!
//! `dynres run` and `dynres daemon` fork before any thread exists. The parent — the pid
//! the user's shell, ssh or srun started — becomes the **supervisor**; the child runs the
//! runtime (master or node daemon). Both are child subreapers (`PR_SET_CHILD_SUBREAPER`):
//! a process of the job whose parent dies is re-parented to the nearest of them that is
//! alive, never to init, so `setsid`, a double fork or a wrapper's grandchildren cannot
//! escape. A process group or a session is not what is followed; parenthood is, and no
//! unprivileged process can leave its ancestors.
//!
//! - The runtime is killed outright (SIGKILL, a crash): its children come to the
//!   supervisor, which kills every descendant it has, removes the job directory the
//!   runtime reported, and exits non-zero with one line.
//! - The supervisor is killed: the runtime gets SIGTERM (`PR_SET_PDEATHSIG`) and ends the
//!   job as on SIGTERM; its own subreaper role catches the grandchildren of the ranks it
//!   kills, and [`end_orphans`] ends them before it exits.
//! - Signals sent to the supervisor (SIGHUP of a closed terminal or ssh session, SIGTERM,
//!   SIGINT, SIGQUIT, SIGUSR1, SIGUSR2) are forwarded to the runtime, which ends the job
//!   or forwards SIGUSR1/SIGUSR2 to the ranks.
//!
//! Cgroups (`cgroup.kill`) are not used: they need a delegated cgroup v2 subtree, which
//! neither a plain user session nor the hybrid v1 hosts here give; the subreapers need
//! nothing.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Signals the supervisor forwards to the runtime.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// How long the supervisor (or the runtime at its end) keeps killing descendants that
/// keep appearing (each killed process' children come to it next).
const SWEEP_BOUND: Duration = Duration::from_secs(5);

/// The runtime's side of the supervisor: where to tell it what to clean up.
#[derive(Debug)]
pub struct Supervised {
    report: OwnedFd,
}

impl Supervised {
    /// Tells the supervisor the job directory, so that it removes it if the runtime is
    /// killed before it can (it removes only what is named here).
    pub fn job_dir(&self, path: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let mut line = b"dir ".to_vec();
        line.extend_from_slice(path.as_os_str().as_bytes());
        line.push(b'\n');
        // SAFETY: writes from a valid buffer to a descriptor we own. A pipe write of
        // less than PIPE_BUF bytes is atomic; a failure only costs the clean-up.
        let _ = unsafe { libc::write(self.report.as_raw_fd(), line.as_ptr().cast(), line.len()) };
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`. O_CLOEXEC keeps the write end
    // out of every process the runtime starts (they would hold it open).
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn sigset(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill the set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in signals {
            libc::sigaddset(&mut set, *s);
        }
        set
    }
}

fn subreaper() -> io::Result<()> {
    // SAFETY: prctl with these arguments has no memory-safety preconditions.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Forks the supervisor. Returns in the child, which runs the runtime; the parent
/// supervises it and exits with its exit code, never returning. Call it before any
/// thread is started (a fork copies only the calling thread).
pub fn start() -> io::Result<Supervised> {
    let (r, w) = pipe()?;
    subreaper()?;
    let mut all = FORWARDED.to_vec();
    all.push(libc::SIGCHLD);
    let blocked = sigset(&all);
    // SAFETY: a zeroed sigset_t is a valid out-parameter.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // Blocked before the fork, so that no signal and no child's end is missed between
    // the fork and the supervisor's first wait.
    // SAFETY: both sets are valid for the call.
    if unsafe { libc::sigprocmask(libc::SIG_BLOCK, &blocked, &mut old) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getpid has no preconditions.
    let supervisor = unsafe { libc::getpid() };
    // SAFETY: no other thread exists (the caller's contract): the child is a full copy
    // of this single-threaded process and may run any code.
    match unsafe { libc::fork() } {
        -1 => {
            let e = io::Error::last_os_error();
            // SAFETY: restores the mask saved above.
            unsafe { libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
            Err(e)
        }
        0 => {
            drop(r);
            // SAFETY: prctl, getppid, raise and sigprocmask have no memory-safety
            // preconditions; `old` is the mask saved above.
            unsafe {
                // The runtime ends the job when its supervisor is gone (its handler for
                // SIGTERM is installed before any process is launched).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
                libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
                if libc::getppid() != supervisor {
                    // Gone between the fork and the prctl: nothing would signal us.
                    libc::raise(libc::SIGTERM);
                }
            }
            Ok(Supervised { report: w })
        }
        child => {
            drop(w);
            supervise(child, r, &blocked)
        }
    }
}

/// The supervisor's whole life: forwards signals to the runtime until it exits, then
/// ends whatever of the job is left and exits with the runtime's code.
fn supervise(runtime: libc::pid_t, report: OwnedFd, waited: &libc::sigset_t) -> ! {
    let status = wait_runtime(runtime, waited);
    // The runtime's write end is closed now: whatever it reported is in the pipe.
    let mut text = String::new();
    let _ = std::fs::File::from(report).read_to_string(&mut text);
    let dir = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("dir "))
        .map(PathBuf::from);
    let ended = sweep();
    let (code, died) = if libc::WIFEXITED(status) {
        (libc::WEXITSTATUS(status), None)
    } else {
        let sig = libc::WTERMSIG(status);
        (128 + sig, Some(sig))
    };
    if let Some(sig) = died {
        // The runtime could not clean up: its job directory and its processes' shared
        // memory are ours to remove.
        if let Some(d) = &dir {
            let _ = std::fs::remove_dir_all(d);
        }
        super::procs::sweep_shm(&ended);
        let _ = writeln!(
            io::stderr(),
            "dynres: the runtime (pid {runtime}) died of signal {sig}; {} process(es) it left were ended",
            ended.len()
        );
    } else if !ended.is_empty() {
        tracing::debug!(
            count = ended.len(),
            "ended processes left behind at the end"
        );
    }
    let _ = io::stdout().flush();
    // SAFETY: _exit ends the process; nothing of ours needs unwinding.
    unsafe { libc::_exit(code) }
}

/// Waits for the runtime to exit, reaping orphans that come to us meanwhile and
/// forwarding signals. Its raw wait status.
fn wait_runtime(runtime: libc::pid_t, waited: &libc::sigset_t) -> libc::c_int {
    loop {
        // Reap everything that ended; the runtime's end ends the wait.
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status of a reaped child into `status`.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid == runtime {
                return status;
            }
            if pid <= 0 {
                break;
            }
        }
        // SAFETY: a zeroed siginfo_t is a valid out-parameter; `waited` is blocked.
        let sig = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigwaitinfo(waited, &mut info)
        };
        if sig > 0 && sig != libc::SIGCHLD {
            // SAFETY: kill has no memory-safety preconditions; the runtime is our
            // child and not yet reaped, so its pid cannot have been reused.
            unsafe { libc::kill(runtime, sig) };
        }
    }
}

/// This process' children: every thread's (an orphan is re-parented to some thread of
/// its subreaper).
fn children() -> Vec<libc::pid_t> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(
                s.split_whitespace()
                    .filter_map(|p| p.parse::<libc::pid_t>().ok()),
            );
        }
    }
    out
}

/// Kills and reaps every child of this process, and the children those leave behind,
/// for at most [`SWEEP_BOUND`]. The pids ended.
fn sweep() -> Vec<u32> {
    let until = Instant::now() + SWEEP_BOUND;
    let mut ended = Vec::new();
    loop {
        let left = children();
        if left.is_empty() || Instant::now() > until {
            return ended;
        }
        for &p in &left {
            // SAFETY: kill/waitpid have no memory-safety preconditions. `p` is our
            // child and unreaped (listed), so its pid cannot be reused before it is
            // reaped here. Not a blocking wait: a process in uninterruptible sleep must
            // not hold the sweep past its bound.
            unsafe {
                libc::kill(p, libc::SIGKILL);
                let mut status = 0;
                if libc::waitpid(p, &mut status, libc::WNOHANG) == p {
                    ended.push(p as u32);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Makes the runtime a subreaper from now on, so that the children of the ranks it is
/// about to kill come to it (and [`end_orphans`] ends them) even if the supervisor is
/// gone. Not from the start: while the job runs, orphans go to the supervisor, which
/// reaps them as they end, instead of staying zombies of a runtime whose reaper
/// threads each wait for one pid.
pub fn catch_orphans() {
    if let Err(e) = subreaper() {
        tracing::debug!(error = %e, "cannot become a subreaper");
    }
}

/// At the runtime's end: ends every process re-parented to it (see [`catch_orphans`]).
pub fn end_orphans() {
    let ended = sweep();
    if !ended.is_empty() {
        tracing::info!(
            count = ended.len(),
            "ended processes the job's ranks left behind"
        );
        super::procs::sweep_shm(&ended);
    }
}
