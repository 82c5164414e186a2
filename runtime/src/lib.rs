//! # dynres-runtime
//!
//! The runtime that runs malleable jobs: `dynres run` is the master and its host's node
//! daemon at once (core's [`Master`] and
//! [`Daemon`](dynres_core::rc::Daemon) state machines, joined by an ordered in-process
//! queue), serves application processes over a per-job Unix socket, launches and reaps
//! them, and answers the `dynres grow/shrink/replace/status` tools. Over several hosts
//! (`spec/runtime.md`), the other hosts get a node daemon each (`dynres daemon`),
//! started by a launch agent and linked to the master over TCP. Every protocol decision
//! is the kernel's; this crate only does I/O, process management and timers.
//!
//! Applications do not link this crate: they link `dynres-client`, whose local
//! protocol (hello, frames, environment) this runtime serves.

pub mod bind;
pub mod error;
pub mod events;
pub mod forward;
pub mod hostauth;
pub mod hosts;
pub mod input;
pub mod output;
pub mod private;
pub mod tool;

mod acceptor;
mod admission;
mod calibrated;
mod conns;
mod daemon;
mod engine;
mod fdlimit;
mod ioloop;
mod jobdir;
mod link;
mod nodes;
mod pmix;
mod procs;
pub use procs::mpich_shm_prefix;
mod server;
mod signals;
mod slurm;
mod status;
mod stdin;
mod supervisor;
mod tools;

use std::os::unix::net::UnixListener;
use std::time::Duration as StdDuration;

use dynres_core::rc::wire::link::PmixSetup;
use dynres_core::rc::{DataServer, Master, MasterConfig};
use dynres_core::slots::NodeSpec;
use dynres_core::{Duration, Namespace, ProcessId};

pub use daemon::run as daemon;
pub use engine::{ChangeLog, Event, OnLoss, Outcome};
pub use jobdir::{JobDir, LiveJob, live_jobs};
pub use nodes::Agent;
pub use procs::{LaunchSpec, check_program};
pub use status::json_str;

use crate::error::LauncherError;
use crate::hosts::Host;
use dynres_client::auth::new_secret;
use dynres_client::env;

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
    /// `RC-21`: how long a change short of slots waits for nodes the driver obtains
    /// (a Slurm allocation's growth); `None` refuses it at once.
    pub grow_wait: Option<StdDuration>,
    /// `RC-18`: what a failed process does to the job.
    pub on_loss: OnLoss,
    /// NAMES-1: the job (its id, as tools name it) whose data server this job's
    /// applications publish in and look up from; `None`: the job's own.
    pub data_server: Option<String>,
    /// The job's hosts (`--host`, `--hostfile`, Slurm); empty: this host only, with
    /// `slots` slots.
    pub hosts: Vec<Host>,
    /// How daemons are started on the other hosts.
    pub agent: Agent,
    /// HB-1: how often master and daemons tell each other they are alive.
    pub heartbeat: StdDuration,
    /// RC-20: the Slurm job whose nodes a shrink empties are given back to it.
    pub give_back: Option<String>,
    /// RT-5: `--wdir`, the directory every process starts in (default: the caller's,
    /// where it exists).
    pub wdir: Option<std::path::PathBuf>,
    /// RT-5: `-x VAR[=VALUE]` settings for every process.
    pub env: Vec<forward::EnvSetting>,
    /// `--timeout`: the job ends (as on SIGTERM, exit status 124) after this long.
    pub timeout: Option<StdDuration>,
    /// `--bind-to`: whether each process is bound to one core of its node.
    pub bind: bind::Bind,
    /// How the processes' output is shown or stored (`--tag-output`,
    /// `--timestamp-output`, `--output-filename`).
    pub output: output::OutputStyle,
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

/// RT-1: whether `name` is this machine: `localhost`, its host name, or an address
/// one of its interfaces has (binding a socket to it succeeds).
fn is_this_host(name: &str) -> bool {
    let me = host_name();
    if name == "localhost" || name == me || me.split('.').next() == Some(name) {
        return true;
    }
    let Ok(addrs) = std::net::ToSocketAddrs::to_socket_addrs(&(name, 0)) else {
        return false;
    };
    addrs
        .into_iter()
        .any(|a| std::net::TcpListener::bind((a.ip(), 0)).is_ok())
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
    if cfg.hosts.is_empty() && cfg.n > cfg.slots {
        return Err(LauncherError::Usage(format!(
            "-n {} exceeds the {} slots of this host (use --slots or --max)",
            cfg.n, cfg.slots
        )));
    }
    let total: u64 = cfg.hosts.iter().map(|h| u64::from(h.slots)).sum();
    if !cfg.hosts.is_empty() && u64::from(cfg.n) > total {
        return Err(LauncherError::Usage(format!(
            "-n {} exceeds the {total} slots of the job's hosts",
            cfg.n
        )));
    }
    if total > u64::from(MAX_PROCS) {
        return Err(LauncherError::Usage(format!(
            "the hosts have {total} slots in all (at most {MAX_PROCS})"
        )));
    }
    procs::check_program(&cfg.program)
}

/// What the job's data-plane key is derived from the daemon key with (DATA-8).
const DATA_KEY_LABEL: &[u8] = b"dynres data plane v1";

/// The job's data-plane key (DATA-8): `HMAC-SHA256(daemon key, "dynres data plane v1")`,
/// computed by the master and by every daemon from the key they share, so the processes
/// of all hosts hold the same one, and the daemon key itself is never handed to them.
pub(crate) fn data_key(link_key: &[u8]) -> dynres_transports::tcp::DataKey {
    dynres_transports::tcp::DataKey::derive(link_key, DATA_KEY_LABEL)
}

/// The node of each of the job's first `n` processes, by rank, as the master placed
/// them.
fn first_placement(master: &Master, ns: &Namespace, n: u32) -> Result<Vec<u32>, LauncherError> {
    (0..n)
        .map(|rank| {
            let pid = ProcessId::new(ns.clone(), rank);
            master
                .processes()
                .get(&pid)
                .map(|node| node.0)
                .ok_or_else(|| {
                    LauncherError::Usage(format!("rank {rank} has no node at the start"))
                })
        })
        .collect()
}

/// Listens for the other hosts' daemons (AUTH, LINK): on this host's address when it
/// is one of the job's hosts (then that address is also its node's, for its processes),
/// else on every interface, reached by this machine's host name. `key` is the job's
/// daemon key.
fn start_nodes(
    hosts: &[Host],
    own: u32,
    agent: &Agent,
    key: String,
    template: nodes::Template,
    events: std::sync::mpsc::Sender<Event>,
) -> Result<(nodes::Nodes, Option<String>), LauncherError> {
    let (listener, master_addr, own_addr) = if own == nodes::NO_NODE {
        let l = std::net::TcpListener::bind(("0.0.0.0", 0))
            .map_err(|e| LauncherError::io("listen for daemons", e))?;
        let port = l
            .local_addr()
            .map_err(|e| LauncherError::io("listen", e))?
            .port();
        (l, format!("{}:{port}", host_name()), None)
    } else {
        let me = &hosts[own as usize].name;
        let l = std::net::TcpListener::bind((me.as_str(), 0))
            .map_err(|e| LauncherError::io(format!("listen for daemons on {me}"), e))?;
        let a = l.local_addr().map_err(|e| LauncherError::io("listen", e))?;
        (l, a.to_string(), Some(a.ip().to_string()))
    };
    let nodes = nodes::Nodes::new(
        hosts.to_vec(),
        own,
        key.into_bytes(),
        listener,
        master_addr,
        agent.clone(),
        template,
        events,
    )
    .map_err(|e| LauncherError::io("start accepting daemons", e))?;
    Ok((nodes, own_addr))
}

/// How long a job started with `--data-server JOB` waits for `JOB` to appear (NAMES-1).
const DATA_SERVER_APPEARS: StdDuration = StdDuration::from_secs(5);

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
    // NAMES-1: the job whose data server this one uses must answer now, or the
    // applications' first publish would be the first to find out. Two jobs started
    // together (`dynres run A & dynres run --data-server A`) race: the other job gets
    // a few seconds to appear.
    if let Some(other) = &cfg.data_server {
        let started = std::time::Instant::now();
        loop {
            match crate::tool::command(other, "status json") {
                Ok(_) => break,
                Err(LauncherError::NoSuchJob { .. }) if started.elapsed() < DATA_SERVER_APPEARS => {
                    std::thread::sleep(StdDuration::from_millis(50));
                }
                Err(e) => {
                    return Err(LauncherError::Refused(format!(
                        "--data-server {other}: {e}"
                    )));
                }
            }
        }
    }
    // RT-4: before any thread exists; from here on this is the runtime, and the pid the
    // caller started (the job id's default) supervises it.
    let supervised =
        supervisor::start().map_err(|e| LauncherError::io("start the runtime's supervisor", e))?;
    // About three descriptors per local process (DATA-12).
    fdlimit::raise_nofile();
    let namespace = Namespace::new(format!("job-{job_id}"));
    let (hosts, own) = if cfg.hosts.is_empty() {
        let me = Host {
            name: host_name(),
            slots: cfg.slots,
        };
        (vec![me], 0)
    } else {
        // RT-1: the first entry naming this machine is served in-process; without one,
        // every host gets a daemon.
        let own = cfg
            .hosts
            .iter()
            .position(|h| is_this_host(&h.name))
            .map_or(nodes::NO_NODE, |i| i as u32);
        (cfg.hosts.clone(), own)
    };
    let master = Master::new(MasterConfig {
        namespace: namespace.clone(),
        nodes: hosts
            .iter()
            .map(|h| NodeSpec {
                name: h.name.clone(),
                slots: h.slots,
            })
            .collect(),
        apps: vec![(cfg.app.clone(), cfg.n)],
        change_timeout: core_duration(cfg.change_timeout),
        grace: core_duration(cfg.grace),
        max_queued: cfg.max_queued,
        grow_wait: cfg.grow_wait.map(core_duration),
        data_server: match cfg.data_server {
            Some(_) => DataServer::Forwarded,
            None => DataServer::Own,
        },
    })
    .map_err(LauncherError::Start)?;
    let secret = new_secret().map_err(|e| LauncherError::io("read /dev/urandom", e))?;
    // The daemon key exists on one host too: the data-plane key is derived from it.
    let link_key = new_secret().map_err(|e| LauncherError::io("read /dev/urandom", e))?;
    let data_key = data_key(link_key.as_bytes());
    let dir = JobDir::create(&root, &job_id, &secret)?;
    supervised.job_dir(dir.path());
    let bind = |p: &std::path::Path| {
        UnixListener::bind(p).map_err(|e| LauncherError::io(format!("bind {}", p.display()), e))
    };
    let control = bind(&dir.control_sock())?;
    let cli = bind(&dir.cli_sock())?;
    signals::install();
    let (tx, rx) = std::sync::mpsc::channel();
    // Dropped on an error below, it stops.
    let socket = |listener, kind| ioloop::Socket {
        listener,
        kind,
        limits: server::Limits::of(kind),
        secret: secret.clone(),
    };
    let sockets = vec![
        socket(control, server::Kind::Control),
        socket(cli, server::Kind::Tool),
    ];
    let io = ioloop::IoLoop::start(sockets, tx.clone(), cfg.output.clone())
        .map_err(|e| LauncherError::io("start the I/O loop", e))?;
    let slots: u64 = hosts.iter().map(|h| u64::from(h.slots)).sum();
    tracing::info!(
        "job {job_id}: {} processes of {} on {slots} slots of {} host(s); `dynres status {job_id}` (dir {})",
        cfg.n,
        cfg.program,
        hosts.len(),
        dir.path().display()
    );
    events::job(
        &job_id,
        cfg.n,
        &hosts.iter().map(|h| h.name.clone()).collect::<Vec<_>>(),
    );
    // Measured by the first runtime of this boot, read from the runtime directory by
    // the next ones (`calibrated.rs`): 3–12 ms less before the first rank starts.
    let host_cal = calibrated::host(&root);
    let shm_spins = host_cal.shm_spins;
    // RT-5: where processes start and what environment they get, on every host.
    let (cwd, cwd_required) = forward::start_dir(cfg.wdir.as_deref())?;
    let (remote_env, dropped) = forward::remote_env(std::env::vars_os(), &cfg.env);
    if !dropped.is_empty() {
        tracing::warn!(
            "not sent to other hosts (not UTF-8 or too long): {}",
            dropped.join(", ")
        );
    }
    let pmix_setup = if pmix::wanted(&cfg.program) {
        Some(PmixSetup {
            namespace: pmix::secret_namespace(namespace.as_str())?,
            universe: u32::try_from(slots).unwrap_or(u32::MAX),
            nodes: hosts.iter().map(|h| h.name.clone()).collect(),
            placement: first_placement(&master, &namespace, cfg.n)?,
        })
    } else {
        None
    };
    let template = nodes::Template {
        pmix: pmix_setup.clone(),
        job: job_id.clone(),
        namespace: namespace.as_str().to_string(),
        app: cfg.app.clone(),
        program: cfg.program.clone(),
        args: cfg.args.clone(),
        shm_spins,
        heartbeat: cfg.heartbeat,
        cwd: cwd.display().to_string(),
        cwd_required,
        env: remote_env,
        bind_core: cfg.bind == bind::Bind::Core,
        output: cfg.output.clone(),
    };
    // A job that may grow (GROW-1) needs the other hosts' side even on one host.
    let (nodes, own_addr) = if hosts.len() > 1 || own == nodes::NO_NODE || cfg.grow_wait.is_some() {
        match start_nodes(&hosts, own, &cfg.agent, link_key, template, tx.clone()) {
            Ok((mut n, a)) => {
                n.slurm_in(dir.path().to_path_buf());
                if let Some(job) = &cfg.give_back {
                    n.give_back_to_slurm(job.clone());
                }
                (Some(n), a)
            }
            Err(e) => return Err(e),
        }
    } else {
        (None, None)
    };
    // Open MPI speaks PMIx only: a server on every node that runs processes, all
    // with the namespace and map decided here (PMIS-13).
    let pmix = match (&pmix_setup, own) {
        (Some(setup), own) if own != nodes::NO_NODE => {
            Some(pmix::start(dir.path(), setup, own, tx.clone())?)
        }
        _ => None,
    };
    let spec = LaunchSpec {
        pmix,
        program: cfg.program.clone(),
        args: cfg.args.clone(),
        socket: dir.control_sock().display().to_string(),
        secret,
        data_key,
        namespace: namespace.as_str().to_string(),
        app: cfg.app.clone(),
        shm_spins,
        calibration: host_cal.calibration,
        host_id: own_addr.as_ref().map(|_| hosts[own as usize].name.clone()),
        node_addr: own_addr,
        // This host's processes inherit the caller's directory and environment.
        cwd: cwd_required.then(|| cwd.display().to_string()),
        env: forward::local_env(&cfg.env),
        bind_cpus: bind_cpus(cfg.bind),
        forward_stdin: stdin::should_forward(),
    };
    let tx_names = tx.clone();
    let grow = cfg.grow_wait.map(|wait| engine::Grow {
        wait,
        per_node: hosts.iter().map(|h| h.slots).max().unwrap_or(1),
        events: tx.clone(),
    });
    let mut engine = engine::Engine::new(
        Some(master),
        own,
        job_id,
        namespace,
        cfg.app.clone(),
        spec,
        cfg.on_loss,
        tx,
        io,
    );
    if let Some(job) = cfg.data_server.clone() {
        let events = tx_names;
        engine = engine.with_name_server(engine::NameServer { job, events });
    }
    if let Some(n) = nodes {
        engine = engine.with_nodes(n);
        if let Some(g) = grow {
            engine = engine.with_grow(g);
        }
    }
    if let Some(t) = cfg.timeout {
        // Detached: the process ends with the job, and a job that ends first never
        // reads the flag.
        let armed = std::thread::Builder::new()
            .name("timeout".into())
            .spawn(move || {
                std::thread::sleep(t);
                tracing::warn!(
                    "the job's --timeout of {} s is up: ending it",
                    t.as_secs_f64()
                );
                signals::time_out();
            });
        if let Err(e) = armed {
            return Err(LauncherError::io("arm the job's --timeout", e));
        }
    }
    let outcome = engine.run(rx);
    supervisor::end_orphans();
    drop(dir);
    Ok(outcome)
}

/// The CPUs processes of this host are bound to in turn (`--bind-to core`), from the
/// runtime's own allowed set; an unreadable set binds nothing (logged).
pub(crate) fn bind_cpus(bind: bind::Bind) -> Option<Vec<usize>> {
    if bind != bind::Bind::Core {
        return None;
    }
    match bind::allowed_cpus() {
        Ok(c) if !c.is_empty() => Some(c),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!("--bind-to core: cannot read this host's CPUs ({e}); not binding");
            None
        }
    }
}
