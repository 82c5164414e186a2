//! The per-job directory (mode 0700) in the runtime directory: `control.sock`,
//! `cli.sock`, the `secret` file (mode 0600) and the `pid` file, which the runtime
//! keeps locked (`flock`) while it lives. Removed when the job ends.
//!
//! A runtime that dies without cleaning up (SIGKILL, a crash) leaves its directory
//! behind; the kernel drops its lock with it. A later job with the same id therefore
//! finds the directory unlocked, removes it and goes on; a locked one belongs to a
//! live runtime and the id is refused. The lock, unlike the pid written in the file,
//! cannot be fooled by a reused pid.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::LauncherError;
use crate::private;
use dynres_client::env;

/// Name of the file, inside a job directory, that holds the runtime's pid and its lock.
pub const PID_FILE: &str = "pid";

/// A job directory; removed on drop.
#[derive(Debug)]
pub struct JobDir {
    path: PathBuf,
    /// The `pid` file, locked for as long as this runtime lives.
    _lock: File,
}

/// Whether a job directory's runtime lives.
#[derive(Debug)]
enum Owner {
    Alive,
    /// No pid file: not made by this version of the runtime; it may be alive.
    Unknown,
    /// Dead: the directory may be taken over; the open pid file keeps others out
    /// while it is (its lock is held until it is dropped).
    Dead(Option<File>),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LauncherError {
    let what = what.into();
    move |e| LauncherError::io(what, e)
}

/// Takes the lock on an open pid file without waiting: `Ok(false)` if another open
/// file description holds it.
fn try_lock(f: &File) -> std::io::Result<bool> {
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Whether the runtime of the existing job directory `path` lives.
fn owner(path: &Path) -> Result<Owner, LauncherError> {
    let pid_path = path.join(PID_FILE);
    // Without blocking: a FIFO in its place must not hang the runtime.
    let f = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&pid_path)
    {
        Ok(f) => f,
        // No pid file: this version writes it before the directory appears under its
        // name, so it is another version's directory, perhaps of a live runtime.
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Owner::Unknown),
        Err(e) => return Err(LauncherError::io(format!("open {}", pid_path.display()), e)),
    };
    let t = f
        .metadata()
        .map_err(io(format!("stat {}", pid_path.display())))?
        .file_type();
    if !t.is_file() {
        return Err(LauncherError::UnsafeRuntimeDir {
            path: pid_path,
            problem: format!("is {}, not a regular file", crate::input::kind_of(t)),
        });
    }
    match try_lock(&f) {
        Ok(true) => Ok(Owner::Dead(Some(f))),
        Ok(false) => Ok(Owner::Alive),
        Err(e) => {
            // A filesystem without flock: fall back on the recorded pid.
            tracing::debug!(error = %e, "flock unavailable; checking the recorded pid");
            // A pid is a few digits: a larger file is not one of ours.
            let pid: Option<libc::pid_t> = crate::input::read_bounded(&pid_path, &f, 32)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            let alive = pid.is_some_and(|p| {
                // Never 0 or negative: kill would address process groups.
                if p <= 0 {
                    return false;
                }
                // SAFETY: kill with signal 0 only checks that the process exists.
                let sent = unsafe { libc::kill(p, 0) };
                sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
            });
            Ok(if alive {
                Owner::Alive
            } else {
                Owner::Dead(None)
            })
        }
    }
}

/// A job directory whose runtime lives, as `dynres list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveJob {
    /// The job id (the directory's name).
    pub id: String,
    /// The runtime's pid as its `pid` file records it (the process `dynres run`
    /// forked, RT-4); `None` if the file does not hold one.
    pub pid: Option<u32>,
    /// The job directory.
    pub dir: PathBuf,
}

/// The jobs in the runtime directory `root` whose runtime lives, by id. Liveness is
/// judged as [`JobDir::create`] judges it, by the `pid` file's lock, not by the
/// recorded pid (which a new process may have reused). A missing `root` holds no job;
/// entries that are not private directories of ours, and directories without a pid
/// file (another version's), are left out.
///
/// Probing a dead job's lock holds it for an instant: a runtime taking that directory
/// over at the very same moment refuses its job id as running, as it would for any
/// concurrent runtime of the same id.
pub fn live_jobs(root: &Path) -> Result<Vec<LiveJob>, LauncherError> {
    match private::check_dir(root) {
        Ok(()) => {}
        Err(LauncherError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(e),
    }
    let entries = fs::read_dir(root).map_err(io(format!("read {}", root.display())))?;
    let mut jobs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io(format!("read {}", root.display())))?;
        let Some(id) = entry.file_name().to_str().map(String::from) else {
            continue;
        };
        // Dot names are directories being built, taken over or removed.
        if id.starts_with('.') {
            continue;
        }
        let dir = entry.path();
        if let Err(e) = private::check_dir(&dir) {
            tracing::debug!(dir = %dir.display(), error = %e, "not a job directory of ours");
            continue;
        }
        match owner(&dir) {
            Ok(Owner::Alive) => {}
            Ok(Owner::Unknown | Owner::Dead(_)) => continue,
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "not a job directory of ours");
                continue;
            }
        }
        let pid_path = dir.join(PID_FILE);
        let pid = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&pid_path)
            .ok()
            .and_then(|f| crate::input::read_bounded(&pid_path, f, 32).ok())
            .and_then(|s| s.trim().parse().ok());
        jobs.push(LiveJob { id, pid, dir });
    }
    jobs.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(jobs)
}

impl JobDir {
    /// Creates `root/job_id` with mode 0700 (and `root`, checked to be private, see
    /// [`private::ensure_dir`]), writes `secret` and the locked `pid` file. A directory
    /// of the same id left by a dead runtime is removed first; one of a live runtime
    /// is [`LauncherError::AlreadyRunning`].
    pub fn create(root: &Path, job_id: &str, secret: &str) -> Result<JobDir, LauncherError> {
        private::ensure_dir(root)?;
        let path = private::job_path(root, job_id)?;
        let me = std::process::id();
        // Built under a name no job id can have, then renamed into place: a job
        // directory is never seen without its (locked) pid file.
        let tmp = root.join(format!(".{job_id}.{me}.new"));
        // Only a dead runtime that had our pid can have left this.
        let _ = fs::remove_dir_all(&tmp);
        let built = Self::build(&tmp, secret);
        let lock = match built {
            Ok(l) => l,
            Err(e) => {
                let _ = fs::remove_dir_all(&tmp);
                return Err(e);
            }
        };
        // Bounded: each round either succeeds, refuses, or removes one stale directory
        // that a concurrent runtime may have replaced with its own in the meantime.
        for _ in 0..8 {
            match fs::rename(&tmp, &path) {
                Ok(()) => {
                    return Ok(JobDir { path, _lock: lock });
                }
                // rename(2) replaces an empty directory but not a non-empty one.
                Err(e)
                    if e.kind() == ErrorKind::DirectoryNotEmpty
                        || e.raw_os_error() == Some(libc::EEXIST) =>
                {
                    match owner(&path) {
                        Ok(Owner::Alive) => {
                            let _ = fs::remove_dir_all(&tmp);
                            return Err(LauncherError::AlreadyRunning(job_id.into()));
                        }
                        Ok(Owner::Unknown) => {
                            let _ = fs::remove_dir_all(&tmp);
                            return Err(LauncherError::ForeignJobDir(path));
                        }
                        Ok(Owner::Dead(held)) => {
                            Self::remove_stale(root, &path, job_id)?;
                            drop(held);
                        }
                        Err(e) => {
                            let _ = fs::remove_dir_all(&tmp);
                            return Err(e);
                        }
                    }
                }
                Err(e) => {
                    let _ = fs::remove_dir_all(&tmp);
                    return Err(LauncherError::io(
                        format!("create job directory {}", path.display()),
                        e,
                    ));
                }
            }
        }
        let _ = fs::remove_dir_all(&tmp);
        Err(LauncherError::AlreadyRunning(job_id.into()))
    }

    /// The directory's contents, in `tmp`; returns the locked pid file.
    fn build(tmp: &Path, secret: &str) -> Result<File, LauncherError> {
        DirBuilder::new()
            .mode(0o700)
            .create(tmp)
            .map_err(io(format!("create job directory {}", tmp.display())))?;
        // The mode given to mkdir is masked by the umask; make it exact.
        fs::set_permissions(tmp, fs::Permissions::from_mode(0o700))
            .map_err(io("chmod job directory"))?;
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(tmp.join(PID_FILE))
            .map_err(io("write pid file"))?;
        if !try_lock(&lock).unwrap_or(true) {
            return Err(LauncherError::io(
                "lock pid file",
                std::io::Error::from(ErrorKind::WouldBlock),
            ));
        }
        writeln!(lock, "{}", std::process::id()).map_err(io("write pid file"))?;
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(tmp.join(env::SECRET_FILE))
            .map_err(io("write secret file"))?;
        f.write_all(secret.as_bytes())
            .map_err(io("write secret file"))?;
        Ok(lock)
    }

    /// Moves the dead runtime's directory out of the way (atomically, so that a
    /// concurrent runtime never sees it half removed), then removes it.
    fn remove_stale(root: &Path, path: &Path, job_id: &str) -> Result<(), LauncherError> {
        let trash = root.join(format!(".{job_id}.{}.stale", std::process::id()));
        let _ = fs::remove_dir_all(&trash);
        match fs::rename(path, &trash) {
            Ok(()) => {}
            // Someone else took it over first: look again.
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(LauncherError::io(
                    format!("remove stale job directory {}", path.display()),
                    e,
                ));
            }
        }
        tracing::info!(
            dir = %path.display(),
            "removed the job directory a dead runtime left behind"
        );
        fs::remove_dir_all(&trash).map_err(io(format!(
            "remove stale job directory {}",
            trash.display()
        )))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The clients' socket.
    pub fn control_sock(&self) -> PathBuf {
        self.path.join(env::CONTROL_SOCK)
    }

    /// The tools' socket.
    pub fn cli_sock(&self) -> PathBuf {
        self.path.join(env::CLI_SOCK)
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        // Renamed away first so the job id is free at once and nobody sees the
        // directory half removed; the lock is released after (field drop).
        let gone = self
            .path
            .file_name()
            .map(|n| {
                let mut t = std::ffi::OsString::from(".");
                t.push(n);
                t.push(format!(".{}.old", std::process::id()));
                self.path.with_file_name(t)
            })
            .filter(|t| fs::rename(&self.path, t).is_ok())
            .unwrap_or_else(|| self.path.clone());
        if let Err(e) = fs::remove_dir_all(&gone) {
            tracing::warn!(dir = %gone.display(), error = %e, "could not remove job directory");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dynres-jobdir-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn entries(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_live_directory_is_refused_and_a_dead_ones_taken_over() {
        let r = root("owner");
        let first = JobDir::create(&r, "j", "s1").unwrap();
        assert_eq!(entries(first.path()), ["pid", "secret"]);
        assert!(matches!(
            JobDir::create(&r, "j", "s2"),
            Err(LauncherError::AlreadyRunning(_))
        ));
        // The refusal left the live directory as it was, and nothing else.
        assert_eq!(
            fs::read_to_string(first.path().join("secret")).unwrap(),
            "s1"
        );
        assert_eq!(entries(&r), ["j"]);

        drop(first);
        assert!(entries(&r).is_empty(), "{:?}", entries(&r));

        // What SIGKILL leaves: the files, the pid of a dead process, no lock.
        fs::create_dir_all(r.join("j")).unwrap();
        fs::write(r.join("j/pid"), "999999999\n").unwrap();
        fs::write(r.join("j/secret"), "old").unwrap();
        let second = JobDir::create(&r, "j", "s3").unwrap();
        assert_eq!(
            fs::read_to_string(second.path().join("secret")).unwrap(),
            "s3"
        );
        assert_eq!(
            fs::read_to_string(second.path().join("pid"))
                .unwrap()
                .trim(),
            std::process::id().to_string()
        );
        drop(second);
        assert!(entries(&r).is_empty(), "{:?}", entries(&r));

        // A directory without a pid file may be a live runtime of another version:
        // refused, and left alone.
        fs::create_dir_all(r.join("k/junk")).unwrap();
        assert!(matches!(
            JobDir::create(&r, "k", "s4"),
            Err(LauncherError::ForeignJobDir(_))
        ));
        assert_eq!(entries(&r), ["k"]);
        assert_eq!(entries(&r.join("k")), ["junk"]);
        // An empty one is nobody's.
        fs::remove_dir(r.join("k/junk")).unwrap();
        drop(JobDir::create(&r, "k", "s5").unwrap());
        assert!(entries(&r).is_empty(), "{:?}", entries(&r));
        let _ = fs::remove_dir_all(&r);
    }

    /// `live_jobs` lists a job whose runtime holds its lock and leaves out what a dead
    /// runtime left, directories being built and a missing runtime directory.
    #[test]
    fn live_jobs_are_those_whose_lock_is_held() {
        let r = root("list");
        assert_eq!(live_jobs(&r).unwrap(), []);
        let live = JobDir::create(&r, "alive", "s").unwrap();
        // What SIGKILL leaves: files, no lock.
        fs::create_dir_all(r.join("dead")).unwrap();
        fs::set_permissions(r.join("dead"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(r.join("dead/pid"), "999999999\n").unwrap();
        fs::create_dir_all(r.join(".alive.1.new")).unwrap();
        let jobs = live_jobs(&r).unwrap();
        assert_eq!(
            jobs,
            [LiveJob {
                id: "alive".into(),
                pid: Some(std::process::id()),
                dir: live.path().to_path_buf(),
            }]
        );
        drop(live);
        assert_eq!(live_jobs(&r).unwrap(), []);
        let _ = fs::remove_dir_all(&r);
    }

    /// A `pid` that is not a regular file (a FIFO: reading it, where `flock` is not
    /// supported, would never end) is refused with one line naming it, and left alone.
    #[test]
    fn a_pid_file_that_is_not_a_regular_file_is_refused() {
        let r = root("fifo");
        private::ensure_dir(&r).unwrap();
        fs::create_dir_all(r.join("j")).unwrap();
        let fifo = r.join("j/pid");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = JobDir::create(&r, "j", "s").unwrap_err();
        assert!(
            e.to_string()
                .contains("j/pid is a FIFO, not a regular file"),
            "{e}"
        );
        assert_eq!(entries(&r.join("j")), ["pid"]);
        let _ = fs::remove_dir_all(&r);
    }
}
