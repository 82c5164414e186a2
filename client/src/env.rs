//! Names of the environment variables and files the runtime hands to processes.

/// Path of the job's control socket (`control.sock`).
pub const SOCKET: &str = "DYNRES_SOCKET";
/// The per-job secret, hex; presented in the hello frame of every connection.
pub const SECRET: &str = "DYNRES_SECRET";
/// The job's data-plane key, 64 hex digits: every TCP connection between the job's
/// processes proves it holds it (`spec/dataplane.md`, DATA-8). Derived from the job's
/// daemon key by the master and by every daemon, so all processes of a job hold the
/// same one. A process started by the runtime without it refuses to open its
/// transport.
pub const DATA_KEY: &str = "DYNRES_DATA_KEY";
/// The job's namespace.
pub const NAMESPACE: &str = "DYNRES_NAMESPACE";
/// The process' rank in the namespace.
pub const RANK: &str = "DYNRES_RANK";
/// The process' application.
pub const APP: &str = "DYNRES_APP";
/// The size of the process' world when it was launched: the job's size once the change
/// that launched it is decided (the first processes: `-n`); a spawned child's: its
/// spawn's children. A malleable job's size changes afterwards: the current one is the
/// size of `mpi://WORLD` (or of the application's pset) from the client library's pset
/// info. Like the next three, set from the node's daemon replica at the launch
/// (`dynres_core::rc::Standing`), never decided by the launcher.
pub const SIZE: &str = "DYNRES_SIZE";
/// The process' position, by rank, among the processes of its world on its node
/// (0-based), at its launch (as `OMPI_COMM_WORLD_LOCAL_RANK`, `SLURM_LOCALID`).
pub const LOCAL_RANK: &str = "DYNRES_LOCAL_RANK";
/// How many processes of its world run on its node at its launch, itself included (as
/// `OMPI_COMM_WORLD_LOCAL_SIZE`).
pub const LOCAL_SIZE: &str = "DYNRES_LOCAL_SIZE";
/// The index of the process' node in the job's host list (`--host`, `--hostfile`, the
/// Slurm allocation; nodes a job grows onto later come after them), as `SLURM_NODEID`.
pub const NODE_ID: &str = "DYNRES_NODE_ID";
/// The `tracing` filter of `dynres` itself (`info`, `debug`, `dynres_launcher=trace`…);
/// wins over [`RUST_LOG`].
pub const LOG: &str = "DYNRES_LOG";
/// The Rust ecosystem's usual filter variable, honoured when [`LOG`] is unset.
pub const RUST_LOG: &str = "RUST_LOG";

/// The `tracing` filter directives `dynres` logs with: `DYNRES_LOG`, else `RUST_LOG`
/// (an empty value counts as unset), else `None` (the caller's default). `get` reads a
/// variable (the process environment in `dynres`).
pub fn log_directives(get: impl Fn(&str) -> Option<String>) -> Option<String> {
    [LOG, RUST_LOG]
        .into_iter()
        .filter_map(get)
        .find(|v| !v.trim().is_empty())
}

/// Overrides the directory job directories are created in.
pub const RUNTIME_DIR: &str = "DYNRES_RUNTIME_DIR";
/// `PATH`: record every kernel transition of the run for trace conformance
/// (`spec/verification.md` §6), one line per transition, in the format
/// `dynres-verification replay` reads. The master process (`dynres run`) writes `PATH`,
/// every other process (node daemons, applications using the client library) writes
/// `PATH.<pid>`; files are appended to and created on the first transition. Inherited by
/// the processes the runtime starts. See [`crate::tracefile`].
pub const TRACE_FILE: &str = "DYNRES_TRACE_FILE";

/// Name of the clients' socket inside the job directory.
pub const CONTROL_SOCK: &str = "control.sock";
/// Name of the tools' socket inside the job directory.
pub const CLI_SOCK: &str = "cli.sock";
/// Name of the file holding the secret (mode 0600) inside the job directory.
pub const SECRET_FILE: &str = "secret";

/// The directory that holds job directories: `$DYNRES_RUNTIME_DIR`, else
/// `$XDG_RUNTIME_DIR/dynres`, else `/tmp/dynres-<uid>`. Only a path: the runtime and
/// the tools check it (ours, mode 0700, not a symlink) before they use it, see
/// `dynres_runtime::private`.
pub fn runtime_root() -> std::path::PathBuf {
    runtime_root_and_origin().0
}

/// Which setting chose the runtime directory: a tool that finds no job says it, since
/// a shell with another `XDG_RUNTIME_DIR` (su, sudo, ssh) looks in another directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootOrigin {
    /// `DYNRES_RUNTIME_DIR` is set.
    DynresRuntimeDir,
    /// `XDG_RUNTIME_DIR` is set (and `DYNRES_RUNTIME_DIR` is not).
    XdgRuntimeDir,
    /// Neither is set: `/tmp/dynres-<uid>`.
    Default,
}

impl std::fmt::Display for RootOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RootOrigin::DynresRuntimeDir => "set by DYNRES_RUNTIME_DIR",
            RootOrigin::XdgRuntimeDir => "from XDG_RUNTIME_DIR; DYNRES_RUNTIME_DIR is unset",
            RootOrigin::Default => "the default: DYNRES_RUNTIME_DIR and XDG_RUNTIME_DIR are unset",
        })
    }
}

/// [`runtime_root`] and the setting that chose it.
pub fn runtime_root_and_origin() -> (std::path::PathBuf, RootOrigin) {
    if let Some(d) = std::env::var_os(RUNTIME_DIR) {
        return (d.into(), RootOrigin::DynresRuntimeDir);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return (
            std::path::Path::new(&d).join("dynres"),
            RootOrigin::XdgRuntimeDir,
        );
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    (
        std::path::PathBuf::from(format!("/tmp/dynres-{uid}")),
        RootOrigin::Default,
    )
}

/// The IP address of the node a process runs on, set by the runtime per node: the
/// process' TCP endpoint listens there (any free port). Unset or empty: `127.0.0.1`.
pub const NODE_ADDR: &str = "DYNRES_NODE_ADDR";
/// The node's identity, set by the runtime per node: processes with different values
/// never use shared memory with each other (see [`dynres_transports::HOST_ID_ENV`]).
/// Unset or empty: the kernel's boot id and the host name.
pub const HOST_ID: &str = dynres_transports::HOST_ID_ENV;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynres_log_wins_over_rust_log() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(log_directives(env(&[])), None);
        assert_eq!(
            log_directives(env(&[("RUST_LOG", "debug")])).as_deref(),
            Some("debug")
        );
        assert_eq!(
            log_directives(env(&[("RUST_LOG", "debug"), ("DYNRES_LOG", "warn")])).as_deref(),
            Some("warn")
        );
        assert_eq!(
            log_directives(env(&[("RUST_LOG", "debug"), ("DYNRES_LOG", " ")])).as_deref(),
            Some("debug")
        );
    }
}
