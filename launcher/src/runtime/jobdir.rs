//! The per-job directory (mode 0700): `control.sock`, `cli.sock` and the `secret` file
//! (mode 0600). Removed when the job ends.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::env;
use crate::error::LauncherError;

/// A job directory; removed on drop.
#[derive(Debug)]
pub struct JobDir {
    path: PathBuf,
}

impl JobDir {
    /// Creates `root/job_id` with mode 0700 (and `root` if needed) and writes `secret`.
    pub fn create(root: &Path, job_id: &str, secret: &str) -> Result<JobDir, LauncherError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(|e| LauncherError::io(format!("create {}", root.display()), e))?;
        let path = root.join(job_id);
        DirBuilder::new().mode(0o700).create(&path).map_err(|e| {
            LauncherError::io(format!("create job directory {}", path.display()), e)
        })?;
        let dir = JobDir { path };
        // The mode given to mkdir is masked by the umask; make it exact.
        fs::set_permissions(&dir.path, fs::Permissions::from_mode(0o700))
            .map_err(|e| LauncherError::io("chmod job directory", e))?;
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.path.join(env::SECRET_FILE))
            .map_err(|e| LauncherError::io("write secret file", e))?;
        f.write_all(secret.as_bytes())
            .map_err(|e| LauncherError::io("write secret file", e))?;
        Ok(dir)
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
        if let Err(e) = fs::remove_dir_all(&self.path) {
            tracing::warn!(dir = %self.path.display(), error = %e, "could not remove job directory");
        }
    }
}
