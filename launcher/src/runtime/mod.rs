//! `dynres run`: on one host the runtime is the master and the node's daemon at once,
//! plus the Unix-socket servers for clients and tools.

mod conns;
mod engine;
mod jobdir;
mod procs;
mod server;
mod signals;
mod status;
mod tools;

use std::os::unix::net::UnixListener;
use std::time::Duration as StdDuration;

use dynres_core::rc::{Master, MasterConfig};
use dynres_core::slots::NodeSpec;
use dynres_core::{Duration, Namespace};

pub use engine::{ChangeLog, Event, OnLoss, Outcome};
pub use jobdir::JobDir;
pub use procs::{LaunchSpec, check_program};

use crate::auth::new_secret;
use crate::env;
use crate::error::LauncherError;

/// How to run a job.
#[derive(Clone, Debug)]
pub struct JobConfig {
    /// Processes to start with.
    pub n: u32,
    /// Slots of this host (most processes at once).
    pub slots: u32,
    /// Program and arguments.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// The application's name (pset `mpi://app/{app}`).
    pub app: String,
    /// The job id (the directory name); defaults to the runtime's pid.
    pub job_id: Option<String>,
    /// `RC-10`: how long a change may take to be decided.
    pub change_timeout: StdDuration,
    /// `RC-11`: how long removed processes get to exit.
    pub grace: StdDuration,
    /// `RC-15`: most changes queued per application.
    pub max_queued: usize,
    /// `RC-18`: what a failed process does to the job.
    pub on_loss: OnLoss,
}

/// The host's number of cores: the default slot count.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

fn core_duration(d: StdDuration) -> Duration {
    Duration::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Most processes (and slots) a job may have: the kernel keeps a table entry per
/// slot, so an absurd count would only exhaust memory before anything runs.
pub const MAX_PROCS: u32 = 1 << 20;

/// Checks a job's configuration before anything is created or started.
fn validate(cfg: &JobConfig) -> Result<(), LauncherError> {
    if cfg.n == 0 {
        return Err(LauncherError::Usage("-n must be at least 1".into()));
    }
    for (what, v) in [("-n", cfg.n), ("the slot count", cfg.slots)] {
        if v > MAX_PROCS {
            return Err(LauncherError::Usage(format!(
                "{what} {v} is too large (at most {MAX_PROCS})"
            )));
        }
    }
    if cfg.n > cfg.slots {
        return Err(LauncherError::Usage(format!(
            "-n {} exceeds the {} slots of this host (use --slots or --max)",
            cfg.n, cfg.slots
        )));
    }
    procs::check_program(&cfg.program)
}

/// Runs a job to its end; nothing is left behind (processes, sockets, shm segments).
/// Everything that can be checked (counts, the program, the runtime directory) is
/// checked before anything is created or launched.
pub fn run(cfg: JobConfig) -> Result<Outcome, LauncherError> {
    validate(&cfg)?;
    let job_id = cfg
        .job_id
        .clone()
        .unwrap_or_else(|| std::process::id().to_string());
    let root = env::runtime_root();
    // Checks the id before the kernel names a namespace after it.
    crate::private::job_path(&root, &job_id)?;
    let namespace = Namespace::new(format!("job-{job_id}"));
    let master = Master::new(MasterConfig {
        namespace: namespace.clone(),
        nodes: vec![NodeSpec {
            name: host_name(),
            slots: cfg.slots,
        }],
        apps: vec![(cfg.app.clone(), cfg.n)],
        change_timeout: core_duration(cfg.change_timeout),
        grace: core_duration(cfg.grace),
        max_queued: cfg.max_queued,
    })
    .map_err(LauncherError::Start)?;
    let secret = new_secret().map_err(|e| LauncherError::io("read /dev/urandom", e))?;
    let dir = JobDir::create(&root, &job_id, &secret)?;
    let bind = |p: &std::path::Path| {
        UnixListener::bind(p).map_err(|e| LauncherError::io(format!("bind {}", p.display()), e))
    };
    let control = bind(&dir.control_sock())?;
    let cli = bind(&dir.cli_sock())?;
    signals::install();
    let (tx, rx) = std::sync::mpsc::channel();
    let serve = |listener, kind| {
        server::Server::start(
            listener,
            kind,
            server::Limits::of(kind),
            secret.clone(),
            tx.clone(),
        )
        .map_err(|e| LauncherError::io(format!("start the {kind:?} socket's server"), e))
    };
    let control = serve(control, server::Kind::Control)?;
    let servers = match serve(cli, server::Kind::Tool) {
        Ok(cli) => [control, cli],
        Err(e) => {
            control.stop();
            return Err(e);
        }
    };
    tracing::info!(
        "job {job_id}: {} processes of {} on {} slots; `dynres status {job_id}` (dir {})",
        cfg.n,
        cfg.program,
        cfg.slots,
        dir.path().display()
    );
    let spec = LaunchSpec {
        program: cfg.program.clone(),
        args: cfg.args.clone(),
        socket: dir.control_sock().display().to_string(),
        secret,
        namespace: namespace.as_str().to_string(),
        app: cfg.app.clone(),
        shm_spins: dynres_transports::shm::waiter::calibrated_spins(),
    };
    let engine = engine::Engine::new(
        master,
        job_id,
        namespace,
        cfg.app.clone(),
        spec,
        cfg.on_loss,
        tx,
    );
    let outcome = engine.run(rx);
    for s in servers {
        s.stop();
    }
    drop(dir);
    Ok(outcome)
}
