//! The tools' side of `cli.sock`: `dynres grow/shrink/replace/status JOB`; and
//! `dynres kill JOB`, which signals the job's runtime (`kill_job`).
//!
//! A tool trusts the job's directory only after checking it (and the runtime directory
//! above it) the way the runtime made it: ours, mode 0700, no symlinks, and the
//! `secret` file ours with mode 0600. Otherwise another local user could plant a fake
//! job whose socket answers in the job's name.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::error::LauncherError;
use crate::private;
use dynres_client::auth::{Peer, say_hello};
use dynres_client::env;

/// How long the runtime may take to answer the hello: it answers at once unless it is
/// stuck, and a tool must not hang on a stuck job.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a command may wait for its answer: a little longer than the runtime
/// itself waits for the engine's answer (`server::ANSWER_TIMEOUT`), so that its own
/// "no answer" arrives first.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(11 * 60);
/// Longest answer read (a `status` table of a very large job included).
const MAX_ANSWER: u64 = 64 << 20;

/// How often a tool waiting for an answer reports that it still waits.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Sends one command line to job `job` and returns its answer (without the `ok` line).
pub fn command(job: &str, line: &str) -> Result<String, LauncherError> {
    command_with_progress(job, line, |_| {})
}

/// [`command`], calling `progress(waited)` every [`PROGRESS_EVERY`] while the answer
/// has not come (a change waits for its decision, up to the job's change timeout).
pub fn command_with_progress(
    job: &str,
    line: &str,
    mut progress: impl FnMut(Duration),
) -> Result<String, LauncherError> {
    let (root, origin) = env::runtime_root_and_origin();
    let dir = private::job_path(&root, job)?;
    let no_job = || LauncherError::NoSuchJob {
        job: job.into(),
        root: root.clone(),
        origin,
    };
    let missing = |e: &LauncherError| matches!(e, LauncherError::Io { source, .. } if source.kind() == ErrorKind::NotFound);
    private::check_dir(&root).map_err(|e| if missing(&e) { no_job() } else { e })?;
    private::check_dir(&dir).map_err(|e| if missing(&e) { no_job() } else { e })?;
    let secret = private::read_file(&dir.join(env::SECRET_FILE), 4096)
        .map_err(|e| if missing(&e) { no_job() } else { e })?;
    let mut s = UnixStream::connect(dir.join(env::CLI_SOCK)).map_err(|e| match e.kind() {
        // No socket, or nobody listening on it: the job is over (or never was).
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => no_job(),
        _ => LauncherError::io(format!("connect to job {job}"), e),
    })?;
    let talk = |e| LauncherError::io("talk to the job", e);
    s.set_read_timeout(Some(HELLO_TIMEOUT)).map_err(talk)?;
    s.set_write_timeout(Some(HELLO_TIMEOUT)).map_err(talk)?;
    let ok = say_hello(&mut s, secret.trim(), Peer::Tool).map_err(|e| match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => LauncherError::Refused(format!(
            "job {job} did not answer within {} s",
            HELLO_TIMEOUT.as_secs()
        )),
        _ => talk(e),
    })?;
    if !ok {
        return Err(LauncherError::Refused(
            "the job refused the connection".into(),
        ));
    }
    s.write_all(format!("{line}\n").as_bytes()).map_err(talk)?;
    s.set_read_timeout(Some(PROGRESS_EVERY)).map_err(talk)?;
    let asked = Instant::now();
    let mut bytes = Vec::new();
    let mut reader = s.take(MAX_ANSWER);
    // The answer is complete when the runtime closes the connection; until then, a
    // read that times out is a moment to say the tool still waits.
    loop {
        match reader.read_to_end(&mut bytes) {
            Ok(_) => break,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                let waited = asked.elapsed();
                if waited >= ANSWER_TIMEOUT {
                    return Err(LauncherError::Refused(format!(
                        "job {job} did not answer within {} s",
                        ANSWER_TIMEOUT.as_secs()
                    )));
                }
                progress(waited);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(talk(e)),
        }
    }
    let answer = String::from_utf8_lossy(&bytes);
    if let Some(rest) = answer.strip_prefix("ok") {
        Ok(rest.trim_start_matches([' ', '\n']).to_string())
    } else if let Some(rest) = answer.strip_prefix("error: ") {
        Err(LauncherError::Refused(rest.trim().to_string()))
    } else {
        Err(LauncherError::Refused(format!(
            "unexpected answer {:?}",
            answer.trim()
        )))
    }
}

/// What [`kill_job`] saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Killed {
    /// The runtime got the signal and exited within the bound.
    Ended,
    /// The runtime got the signal and was still running at the bound.
    StillRunning,
}

/// Sends `signal` to job `job`'s runtime (the process that holds the job directory's
/// lock) and waits up to `wait` for it to exit. The runtime ends the job on SIGTERM,
/// SIGINT, SIGHUP and SIGQUIT (killing its processes, RT-4) and forwards SIGUSR1/2
/// to them.
///
/// The pid file's pid is only believed while the lock is held: the pid is pinned
/// with a pidfd first and the lock checked after, so a pid reused after the runtime
/// died is never signalled.
pub fn kill_job(job: &str, signal: i32, wait: Duration) -> Result<Killed, LauncherError> {
    let (root, origin) = env::runtime_root_and_origin();
    let no_job = || LauncherError::NoSuchJob {
        job: job.into(),
        root: root.clone(),
        origin,
    };
    let find = || -> Result<Option<u32>, LauncherError> {
        Ok(crate::live_jobs(&root)?
            .into_iter()
            .find(|j| j.id == job)
            .and_then(|j| j.pid))
    };
    let pid = find()?.ok_or_else(no_job)?;
    let pidfd = pidfd_open(pid).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => no_job(),
        _ => LauncherError::io(format!("open job {job}'s runtime (pid {pid})"), e),
    })?;
    if find()? != Some(pid) {
        return Err(no_job());
    }
    // SAFETY: a valid pidfd we own, a plain signal number, no siginfo, no flags.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if sent != 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ESRCH) => no_job(),
            _ => LauncherError::io(format!("signal job {job}'s runtime (pid {pid})"), e),
        });
    }
    // A pidfd polls readable once its process has exited.
    let mut fds = [libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd, its length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        if n > 0 {
            return Ok(Killed::Ended);
        }
        if n == 0 {
            return Ok(Killed::StillRunning);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(LauncherError::io("wait for the job's runtime", e));
        }
    }
}

/// `pidfd_open(2)`: a descriptor that names process `pid` for as long as it is open,
/// even after the pid is reused.
fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: plain syscall with a pid and no flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just gave us this descriptor; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
