//! Typed errors of the runtime (`dynres run`, the daemons and the tools).

use dynres_core::rc::RcError;

/// Errors of the runtime (`dynres run` and the tools).
#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    /// An I/O operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The link between a node daemon and the master failed (`spec/runtime.md`).
    #[error("link to the master: {0}")]
    Link(String),
    /// The kernel refused to start the job.
    #[error("cannot start the job: {0}")]
    Start(RcError),
    /// Bad user input.
    #[error("{0}")]
    Usage(String),
    /// The named job does not exist or does not answer. Names the runtime directory
    /// looked in and what chose it: a job started with another runtime directory is
    /// not seen.
    #[error("no running job {job} in {} ({origin})", root.display())]
    NoSuchJob {
        /// The job id asked for.
        job: String,
        /// The runtime directory looked in.
        root: std::path::PathBuf,
        /// Which setting chose it.
        origin: dynres_client::env::RootOrigin,
    },
    /// The job refused a tool's command.
    #[error("{0}")]
    Refused(String),
    /// The directory that holds job directories (or a job directory in it) could be
    /// read or taken over by someone else: a symlink, not a directory, not ours, or
    /// open to group or others. Nothing is created in it, and no tool talks to a job
    /// in it (a fake runtime there could impersonate the job).
    #[error(
        "runtime directory {} {problem}; remove it or set {} to a private directory",
        path.display(),
        dynres_client::env::RUNTIME_DIR
    )]
    UnsafeRuntimeDir {
        /// The offending path.
        path: std::path::PathBuf,
        /// What is wrong with it ("is owned by uid 65534, not 0", …).
        problem: String,
    },
    /// Another live runtime owns the job directory of this job id.
    #[error("job ID {0} already running (choose another --job-id)")]
    AlreadyRunning(String),
    /// A directory of this job id exists without the pid file this runtime writes: it
    /// may belong to a live runtime of another version, so it is left alone.
    #[error(
        "job directory {} exists but has no pid file (another version of dynres?); remove it if no job runs there",
        .0.display()
    )]
    ForeignJobDir(std::path::PathBuf),
    /// The program to run cannot be run.
    #[error("cannot run `{program}`: {reason}")]
    CannotRun {
        /// The program as given.
        program: String,
        /// Why ("not found in PATH", "not executable", …).
        reason: String,
    },
}

impl LauncherError {
    /// Whether the error is the user's input (exit status 2, like clap's own errors)
    /// rather than a failure of the runtime or the job (exit status 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            LauncherError::Usage(_) | LauncherError::CannotRun { .. }
        )
    }

    /// An I/O error with context.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        LauncherError::Io {
            what: what.into(),
            source,
        }
    }
}
