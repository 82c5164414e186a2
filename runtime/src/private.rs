//! Private directories and files: the runtime directory, job directories and the
//! `secret` file must be ours and closed to everyone else, or another local user could
//! deny service (a file or a directory in the way), read new processes' hellos and
//! with them the job's secret (a directory they can write to, or a symlink to one), or
//! impersonate the runtime to tools (a fake job directory with their own socket).
//!
//! Every check is made on what the path itself names, without following a symlink
//! (`O_NOFOLLOW`, `lstat`), and on an open descriptor where one is needed (`fstat`), so
//! that what is checked is what is used. Once a directory passes, it is ours with mode
//! 0700: nobody else can add, remove or rename anything in it, so paths below it stay
//! what they were when checked.

use std::fs::{self, File, Metadata, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::LauncherError;
use crate::input::{self, InputError, Problem};

/// The effective uid: who must own what the runtime trusts.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn refuse(path: &Path, problem: impl Into<String>) -> LauncherError {
    LauncherError::UnsafeRuntimeDir {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

fn kind_of(m: &Metadata) -> &'static str {
    input::kind_of(m.file_type())
}

/// A private file that could not be used: one the runtime directory should not hold
/// (a symlink, a FIFO, too large) is refused as unsafe; anything else failed.
fn unusable(path: &Path, doing: &str, e: InputError) -> LauncherError {
    match e.problem {
        Problem::Io(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            refuse(path, "is a symbolic link")
        }
        Problem::Io(e) => LauncherError::io(format!("{doing} {}", path.display()), e),
        p => refuse(path, p.to_string()),
    }
}

/// Owner and mode: ours, and nothing for group or others.
fn check_owner_mode(path: &Path, m: &Metadata) -> Result<(), LauncherError> {
    let me = euid();
    if m.uid() != me {
        return Err(refuse(
            path,
            format!("is owned by uid {}, not {me}", m.uid()),
        ));
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(refuse(
            path,
            format!("has mode {mode:04o}: group or others may use it (want 0700)"),
        ));
    }
    Ok(())
}

/// Checks that `path` is a directory (not a symlink to one) owned by us with no
/// permission for group or others. A missing directory is an I/O error of kind
/// `NotFound`.
pub fn check_dir(path: &Path) -> Result<(), LauncherError> {
    // O_PATH: no read permission needed to look at it; O_NOFOLLOW: a symlink fails
    // with ELOOP instead of being followed; O_DIRECTORY: anything else fails ENOTDIR.
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path);
    let m = match opened.and_then(|f| f.metadata()) {
        Ok(m) => m,
        Err(e) => {
            // Say what is there rather than quoting the errno.
            return Err(match fs::symlink_metadata(path) {
                Ok(m) if !m.file_type().is_dir() => {
                    refuse(path, format!("is {}, not a directory", kind_of(&m)))
                }
                _ => LauncherError::io(format!("open {}", path.display()), e),
            });
        }
    };
    check_owner_mode(path, &m)
}

/// The runtime directory `root`, created (mode 0700, parents as needed) if missing,
/// then checked with [`check_dir`].
pub fn ensure_dir(root: &Path) -> Result<(), LauncherError> {
    let create = || fs::DirBuilder::new().mode(0o700).create(root);
    let created = match create() {
        Ok(()) => true,
        // mkdir does not follow a symlink in the last component: whatever is there
        // (a symlink included) is left to the check.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if let Some(parent) = root.parent() {
                fs::create_dir_all(parent)
                    .map_err(|e| LauncherError::io(format!("create {}", parent.display()), e))?;
            }
            match create() {
                Ok(()) => true,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
                Err(e) => {
                    return Err(LauncherError::io(
                        format!("create runtime directory {}", root.display()),
                        e,
                    ));
                }
            }
        }
        Err(e) => {
            return Err(LauncherError::io(
                format!("create runtime directory {}", root.display()),
                e,
            ));
        }
    };
    if created {
        // The umask may have taken bits of 0700 away (never added any).
        fs::set_permissions(root, fs::Permissions::from_mode(0o700))
            .map_err(|e| LauncherError::io(format!("chmod {}", root.display()), e))?;
    }
    check_dir(root)
}

/// Opens `path` for reading if it is a regular file (not a symlink, not a FIFO: it is
/// opened without blocking) owned by us with no permission for group or others.
pub fn open_file(path: &Path) -> Result<File, LauncherError> {
    let f = input::open_regular(path, libc::O_NOFOLLOW).map_err(|e| unusable(path, "open", e))?;
    let m = f
        .metadata()
        .map_err(|e| LauncherError::io(format!("stat {}", path.display()), e))?;
    check_owner_mode(path, &m)?;
    Ok(f)
}

/// Reads a small private file checked as by [`open_file`]; one of more than `max`
/// bytes is refused (a truncated secret would only be refused later, less clearly).
pub fn read_file(path: &Path, max: u64) -> Result<String, LauncherError> {
    input::read_bounded(path, open_file(path)?, max).map_err(|e| unusable(path, "read", e))
}

/// Where a job directory would be for `root` and `job`, refusing job ids that are not
/// one plain path component (they could name something outside `root`).
pub fn job_path(root: &Path, job: &str) -> Result<PathBuf, LauncherError> {
    if job.is_empty() || job.contains('/') || job.starts_with('.') || job.contains('\0') {
        return Err(LauncherError::Usage(format!("bad job id {job:?}")));
    }
    Ok(root.join(job))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dynres-private-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    fn problem(r: Result<(), LauncherError>) -> String {
        match r {
            Err(LauncherError::UnsafeRuntimeDir { problem, .. }) => problem,
            other => panic!("not refused as unsafe: {other:?}"),
        }
    }

    #[test]
    fn directories_are_checked_without_following_symlinks() {
        let d = scratch("dirs");
        let good = d.join("good");
        ensure_dir(&good).unwrap();
        assert_eq!(fs::symlink_metadata(&good).unwrap().mode() & 0o7777, 0o700);
        // Idempotent on a directory that passes.
        ensure_dir(&good).unwrap();

        let link = d.join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(problem(ensure_dir(&link)).contains("symbolic link"));

        let dangling = d.join("dangling");
        std::os::unix::fs::symlink(d.join("nowhere"), &dangling).unwrap();
        assert!(problem(ensure_dir(&dangling)).contains("symbolic link"));
        assert!(!d.join("nowhere").exists(), "followed a dangling symlink");

        let file = d.join("file");
        fs::write(&file, "x").unwrap();
        assert!(problem(ensure_dir(&file)).contains("regular file"));

        let open = d.join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o750)).unwrap();
        assert!(problem(ensure_dir(&open)).contains("0750"));

        let nested = d.join("a/b/c");
        ensure_dir(&nested).unwrap();
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn private_files_must_be_plain_files_closed_to_others() {
        let d = scratch("files");
        let f = d.join("secret");
        fs::write(&f, "s3cret").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_file(&f, 64).unwrap(), "s3cret");
        assert!(problem(read_file(&f, 2).map(drop)).contains("larger than the limit of 2 bytes"));
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(problem(read_file(&fifo, 64).map(drop)).contains("is a FIFO, not a regular file"));

        fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(problem(read_file(&f, 64).map(drop)).contains("0644"));

        let link = d.join("link");
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(problem(read_file(&link, 64).map(drop)).contains("symbolic link"));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn job_ids_are_one_path_component() {
        let root = Path::new("/r");
        assert_eq!(job_path(root, "j1").unwrap(), Path::new("/r/j1"));
        for bad in ["", "..", ".hidden", "a/b", "/abs"] {
            assert!(
                matches!(job_path(root, bad), Err(LauncherError::Usage(_))),
                "{bad:?}"
            );
        }
    }
}
