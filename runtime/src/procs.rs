//! Launching application processes (fork/exec through `std::process::Command`) and
//! killing them. Their output and their exits are the I/O loop's (`ioloop.rs`).

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use dynres_core::rc::ends::KillCause;

use super::engine::Event;
use super::ioloop;
use crate::error::LauncherError;
use dynres_client::env;

/// What every launched process gets.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// The job's PMIx server, when its program is an Open MPI one (`pmix.rs`).
    pub pmix: Option<Arc<crate::pmix::PmixHost>>,
    /// Program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// `DYNRES_SOCKET`.
    pub socket: String,
    /// `DYNRES_SECRET`.
    pub secret: String,
    /// `DYNRES_DATA_KEY`: the job's data-plane key (DATA-8).
    pub data_key: dynres_transports::tcp::DataKey,
    /// `DYNRES_NAMESPACE`.
    pub namespace: String,
    /// `DYNRES_APP`.
    pub app: String,
    /// `DYNRES_SHM_SPINS`: the shared-memory spin budget, calibrated once by the
    /// runtime instead of once in every process (a ~ms futex ping-pong each).
    pub shm_spins: u32,
    /// Per-process calibrations measured once by the runtime of the node instead of in
    /// every process (each costs a process 1–2 ms at start).
    pub calibration: Calibration,
    /// `DYNRES_NODE_ADDR`: the IP address of the node that the other nodes reach
    /// (processes bind their TCP endpoints there); none on a one-host job.
    pub node_addr: Option<String>,
    /// `DYNRES_HOST_ID`: the node's name in the job's host list, so that processes of
    /// different entries use TCP, not shared memory, even under one kernel (unless the
    /// runtime's own environment sets it); none on a one-host job.
    pub host_id: Option<String>,
    /// RT-5: the directory processes start in (`None`: the runtime's own).
    pub cwd: Option<String>,
    /// RT-5: variables set for every process on top of the runtime's environment
    /// (before the runtime's own `DYNRES_*`, which they cannot override).
    pub env: Vec<(String, String)>,
    /// `--bind-to core`: the node's CPUs, taken in turn by local rank; `None`: no
    /// binding.
    pub bind_cpus: Option<Vec<usize>>,
    /// Whether rank 0's stdin is the runtime's own, forwarded by the I/O loop (the
    /// master's node only; every other process gets `/dev/null`).
    pub forward_stdin: bool,
}

/// What the runtime measured once for the processes of its node: each would otherwise
/// spend 1–2 ms of its start-up measuring it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calibration {
    /// `DYNRES_TCP_SPIN_US`: the TCP spin budget.
    pub tcp_spin: Duration,
    /// `DYNRES_SHM_CMA`: whether single-copy transfers pay on this host.
    pub cma_pays: bool,
}

impl Calibration {
    /// Measures (once per runtime process).
    pub fn measure() -> Calibration {
        Calibration {
            tcp_spin: dynres_transports::tcp::calibrated_spin(),
            cma_pays: dynres_transports::shm::cma::single_copy_pays(),
        }
    }

    /// The variables, except those the runtime's own environment sets (a user's
    /// override wins).
    fn env(&self) -> Vec<(&'static str, String)> {
        let cma = if self.cma_pays {
            dynres_transports::shm::DEFAULT_CMA_THRESHOLD.to_string()
        } else {
            "0".to_string()
        };
        [
            (
                dynres_transports::tcp::SPIN_ENV,
                self.tcp_spin.as_micros().to_string(),
            ),
            (dynres_transports::shm::cma::CMA_ENV, cma),
        ]
        .into_iter()
        .filter(|(k, _)| std::env::var_os(k).is_none())
        .collect()
    }
}

/// What a spawned process runs instead of the job's program (`SPAWN-18`).
#[derive(Clone, Debug)]
pub struct SpawnLaunch {
    /// Its application (`DYNRES_APP`): the spawn's `spawn-{k}`.
    pub app: String,
    /// Its program, arguments and added environment.
    pub command: dynres_core::rc::LaunchCommand,
    /// The ranks, in their spawn's world, of the spawn's children on this node, of
    /// every command (PMIx registers the others as running elsewhere).
    pub local: Vec<u32>,
}

/// One launch for the launcher thread: a rank of the job, with the command of its
/// spawn if it is a spawned child.
#[derive(Clone, Debug)]
pub struct LaunchJob {
    /// The rank.
    pub rank: u32,
    /// `None`: the job's program.
    pub spawn: Option<Arc<SpawnLaunch>>,
    /// Its node, world size and place on the node, from the node's daemon replica
    /// (`DYNRES_NODE_ID`, `DYNRES_SIZE`, `DYNRES_LOCAL_RANK`, `DYNRES_LOCAL_SIZE`);
    /// `None` (the replica did not hold it): those variables are not set.
    pub standing: Option<dynres_core::rc::Standing>,
}

/// A launched process.
#[derive(Debug)]
pub struct Child {
    /// Its OS process id.
    pub os_pid: u32,
    /// When it was launched.
    pub launched: std::time::Instant,
    /// Why the runtime killed it, if it did (NODE-4).
    pub cause: KillCause,
    /// Its exit, once reaped.
    pub exit: Option<ExitStatus>,
}

/// Launcher threads: a launch blocks its thread until the child has exec'd (posix_spawn
/// is a vfork), so a second thread starts the next child meanwhile — a spawn of 8
/// children starts them in about half the time on two cores.
const LAUNCHERS: usize = 2;

/// Starts the threads that launch processes (long-lived, so that the parent-death
/// signal clients arm, tied to the launching thread, fires only when the runtime is
/// gone). Each launch is reported as [`Event::Launched`]; the process is then handed to
/// the I/O loop `io`, which reports its exit as [`Event::Exited`] and forwards its
/// output. The threads end once the engine drops the sender.
pub fn spawner(
    spec: LaunchSpec,
    events: Sender<Event>,
    io: ioloop::Handle,
) -> (Sender<LaunchJob>, Vec<JoinHandle<()>>) {
    sweep_stale_shm();
    let (tx, rx) = std::sync::mpsc::channel::<LaunchJob>();
    let rx = Arc::new(Mutex::new(rx));
    let spec = Arc::new(spec);
    let workers = (0..LAUNCHERS)
        .map(|_| {
            let (rx, spec, events, io) = (rx.clone(), spec.clone(), events.clone(), io.clone());
            std::thread::spawn(move || launcher(&rx, &spec, &events, &io))
        })
        .collect();
    (tx, workers)
}

/// One launcher thread: takes jobs until the engine drops its sender.
fn launcher(
    rx: &Mutex<std::sync::mpsc::Receiver<LaunchJob>>,
    spec: &LaunchSpec,
    events: &Sender<Event>,
    io: &ioloop::Handle,
) {
    loop {
        // The lock is held only to take a job, never while launching.
        let next = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = next else { return };
        let rank = job.rank;
        let program = job
            .spawn
            .as_ref()
            .map_or(spec.program.as_str(), |s| s.command.program.as_str())
            .to_string();
        match launch(spec, &job) {
            Ok((child, mut proc, pmi)) => {
                let (stdout, stderr) = (
                    proc.stdout.take().map(OwnedFd::from),
                    proc.stderr.take().map(OwnedFd::from),
                );
                if events
                    .send(Event::Launched {
                        rank,
                        child: Ok(child),
                    })
                    .is_err()
                {
                    return;
                }
                if let Some(pipe) = proc.stdin.take() {
                    io.forward_stdin(OwnedFd::from(pipe));
                }
                // Handed over after `Launched` is queued, so the exit comes after it
                // and the engine knows the rank when its PMI socket shows up.
                io.add_child(rank, proc, stdout, stderr);
                if let Some(pmi) = pmi {
                    io.add_pmi(rank, pmi);
                }
            }
            Err(e) => {
                // Name the program: "No such file or directory" alone does not say
                // what was missing.
                let e = std::io::Error::new(
                    e.kind(),
                    format!("cannot launch rank {rank} (`{program}`): {e}"),
                );
                let _ = events.send(Event::Launched {
                    rank,
                    child: Err(e),
                });
            }
        }
    }
}

/// A launched process, its handle (with its output pipes) and the runtime's end of its
/// PMI socket, if it got one.
type Launched = (Child, std::process::Child, Option<OwnedFd>);

/// Held by every spawn of the runtime while a PMI socket's child end is inheritable
/// (PMIS-2 of `spec/pmi.md`: the socket is its rank's alone). Spawning takes it, never
/// waiting for a child: a spawn is a vfork + exec, so the two launcher threads still
/// overlap their setup.
pub static SPAWN_LOCK: Mutex<()> = Mutex::new(());

/// Spawns `cmd` under [`SPAWN_LOCK`]: for spawns other than ranks' (daemons' agents,
/// Slurm's commands), so that they never inherit a rank's PMI socket.
pub fn spawn_locked(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let _held = SPAWN_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    cmd.spawn()
}

/// [`Command::output`] with the spawn under [`SPAWN_LOCK`] (the wait is not).
pub fn output_locked(cmd: &mut Command) -> std::io::Result<std::process::Output> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    spawn_locked(cmd)?.wait_with_output()
}

/// PMIS-9: whether a variable of the runtime's own environment must not reach a rank: another
/// launcher's PMI or PMIx settings would send its MPI library to that launcher (issue
/// 31: both libraries' `libpmix.so.2` read `PMIX_*`).
fn foreign_pm_var(name: &std::ffi::OsStr) -> bool {
    let n = name.as_encoded_bytes();
    n.starts_with(b"PMI_") || n.starts_with(b"PMIX_")
}

/// The runtime's own [`foreign_pm_var`]s, found once (its environment does not change
/// while it launches), not by a scan of the environment per rank.
fn foreign_pm_vars() -> &'static [std::ffi::OsString] {
    static VARS: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();
    VARS.get_or_init(|| {
        std::env::vars_os()
            .map(|(k, _)| k)
            .filter(|k| foreign_pm_var(k))
            .collect()
    })
}

/// A connected pair of stream sockets, both close-on-exec: the runtime's end and the
/// rank's (made inheritable only under [`SPAWN_LOCK`]).
fn pmi_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (a, b) = std::os::unix::net::UnixStream::pair()?;
    Ok((OwnedFd::from(a), OwnedFd::from(b)))
}

/// Sets or clears `fd`'s close-on-exec flag.
fn set_cloexec(fd: &OwnedFd, on: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let flag = if on { libc::FD_CLOEXEC } else { 0 };
    // SAFETY: F_SETFD on a descriptor this function borrows; no memory is involved.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, flag) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn launch(spec: &LaunchSpec, job: &LaunchJob) -> std::io::Result<Launched> {
    let rank = job.rank;
    let (program, args, app) = match &job.spawn {
        Some(s) => (&s.command.program, &s.command.args, &s.app),
        None => (&spec.program, &spec.args, &spec.app),
    };
    let mut cmd = Command::new(program);
    cmd.args(args);
    // RT-5: the job's directory and `-x`/forwarded variables, then the spawner's, then
    // the runtime's own, which nothing overrides.
    if let Some(d) = &spec.cwd {
        cmd.current_dir(d);
    }
    for k in foreign_pm_vars() {
        cmd.env_remove(k);
    }
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    if let Some(s) = &job.spawn {
        cmd.envs(s.command.env.iter().map(|(k, v)| (k, v)));
    }
    cmd.env(env::SOCKET, &spec.socket)
        .env(env::SECRET, &spec.secret)
        .env(env::DATA_KEY, spec.data_key.to_hex())
        .env(env::NAMESPACE, &spec.namespace)
        .env(env::RANK, rank.to_string())
        .env(env::APP, app)
        .envs(job.standing.iter().flat_map(|s| {
            [
                (env::SIZE, s.size),
                (env::LOCAL_RANK, s.local_rank),
                (env::LOCAL_SIZE, s.local_size),
                (env::NODE_ID, s.node.0),
            ]
            .map(|(k, v)| (k, v.to_string()))
        }))
        .env("DYNRES_SHM_SPINS", spec.shm_spins.to_string())
        .envs(spec.calibration.env())
        .stdin(if rank == 0 && job.spawn.is_none() && spec.forward_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // This runtime sweeps /dev/shm for the job (`sweep_stale_shm`, and the segments of
    // every rank that does not exit cleanly): the process need not scan it (unless the
    // runtime's own environment says otherwise, as for the calibrations).
    let reaped = dynres_transports::shm::segment::REAPED_ENV;
    if std::env::var_os(reaped).is_none() {
        cmd.env(reaped, "1");
    }
    if let Some(a) = &spec.node_addr {
        cmd.env(env::NODE_ADDR, a);
    }
    if let Some(h) = &spec.host_id {
        if std::env::var_os(env::HOST_ID).is_none() {
            cmd.env(env::HOST_ID, h);
        }
    }
    // PMI-1 for MPI programs (`spec/pmi.md`): every process gets a socket of its own as
    // `PMI_FD`; a spawn's children with their rank and size in their own world.
    let pmi = match &job.standing {
        Some(st) => Some((pmi_pair()?, st)),
        None => None,
    };
    // PMIx (Open MPI): the rank is registered with the job's server, and its
    // environment names the server (`setup_fork`).
    if let Some(host) = &spec.pmix {
        let env = match (&job.spawn, &job.standing) {
            (None, _) => host.client_env(rank),
            (Some(s), Some(st)) => {
                let parent = s
                    .command
                    .env
                    .iter()
                    .find(|(k, _)| k == crate::pmix::PARENT_ENV)
                    .map(|(_, v)| v.as_str());
                host.spawned_env(&s.app, rank, st.rank, st.size, parent, &s.local)
            }
            (Some(_), None) => Ok(Vec::new()),
        };
        cmd.envs(env.map_err(std::io::Error::other)?);
        // PMIS-23: Open MPI's shared memory in the runtime's directory, which it
        // removes at the end (unless the user chose a directory).
        let sm = crate::pmix::SM_DIR_ENV;
        let chosen = std::env::var_os(sm).is_some() || spec.env.iter().any(|(k, _)| k == sm);
        if let (Some(d), false) = (host.shm_dir(), chosen) {
            cmd.env(sm, d);
        }
    }
    if let Some(((_, theirs), st)) = &pmi {
        use std::os::fd::AsRawFd;
        cmd.env("PMI_FD", theirs.as_raw_fd().to_string())
            .env("PMI_RANK", st.rank.to_string())
            .env("PMI_SIZE", st.size.to_string());
        if job.spawn.is_some() {
            cmd.env("PMI_SPAWNED", "1");
        }
    }
    // No `pre_exec`: that would force fork + exec (1–2 ms each here) instead of
    // posix_spawn. Clients arm their parent-death signal themselves (`Session::init`).
    // So the rank's PMI end is made inheritable just for its spawn, under the lock that
    // every other spawn of the runtime takes too (PMIS-2), and closed before the lock is
    // released.
    let launched = std::time::Instant::now();
    let local = job.standing.as_ref().map_or(rank, |s| s.local_rank);
    let spawn = |cmd: &mut Command| -> std::io::Result<std::process::Child> {
        let Some(((_, theirs), _)) = &pmi else {
            return cmd.spawn();
        };
        let _held = SPAWN_LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set_cloexec(theirs, false)?;
        let child = cmd.spawn();
        set_cloexec(theirs, true)?;
        child
    };
    let child = match spec
        .bind_cpus
        .as_deref()
        .and_then(|c| crate::bind::cpu_of(c, local))
    {
        Some(cpu) => {
            let child = crate::bind::spawning_on(cpu, || spawn(&mut cmd))??;
            tracing::info!("rank {rank} bound to CPU {cpu} (local rank {local})");
            child
        }
        None => spawn(&mut cmd)?,
    };
    // The rank's end is the rank's now; the runtime keeps only its own.
    let pmi = pmi.map(|((ours, _theirs), _)| ours);
    let os_pid = child.id();
    tracing::trace!(
        rank,
        fork_exec_us = launched.elapsed().as_micros() as u64,
        "spawned"
    );
    Ok((
        Child {
            os_pid,
            launched,
            cause: KillCause::None,
            exit: None,
        },
        child,
        pmi,
    ))
}

/// Sends SIGKILL to a process.
pub fn kill(os_pid: u32) {
    send_signal(os_pid, libc::SIGKILL);
}

/// Sends `sig` to a process.
pub fn send_signal(os_pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions. The pid is a child not yet
    // reaped (the caller checks), so it cannot have been reused.
    let r = unsafe { libc::kill(os_pid as libc::pid_t, sig) };
    if r != 0 {
        tracing::debug!(os_pid, sig, error = %std::io::Error::last_os_error(), "kill");
    }
}

/// A one-word description of an exit.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown".into(),
    }
}

/// An exit as one number for the link (LINK-4): the exit code, or 128 + the signal.
pub fn code_of(status: ExitStatus) -> u32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u32 & 0xff,
        (None, Some(s)) => 128 + s as u32,
        _ => 255,
    }
}

/// Describes a [`code_of`] number as [`describe`] does an exit status.
pub fn describe_code(code: u32) -> String {
    match code {
        0..=128 => format!("exit {code}"),
        c => format!("signal {}", c - 128),
    }
}

/// Sweeps `/dev/shm` of segments whose owners died (a job killed with its runtime) once
/// for the node, on a thread of its own so that the launches do not wait for it, in
/// place of every process doing it at its start (`REAPED_ENV`). An owner counts as dead
/// only when `kill(pid, 0)` says it does not exist: the transports' own sweep also reads
/// `/proc/PID/stat` of every live owner to catch zombies, ~30 µs each, 40 ms per job on
/// the shared VM with 1300 segments of other jobs; a zombie's segment goes at a later
/// sweep instead.
fn sweep_stale_shm() {
    let spawned = std::thread::Builder::new()
        .name("dynres-shm-sweep".into())
        .spawn(|| {
            let n = sweep_dead_owners();
            tracing::debug!(reaped = n, "swept /dev/shm of dead processes' segments");
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no thread to sweep /dev/shm; left to the next job");
    }
}

/// Unlinks our segments whose owner pid does not exist; how many.
fn sweep_dead_owners() -> usize {
    use dynres_transports::shm::segment::owner_of;
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(owner_of) else {
            continue;
        };
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone && std::fs::remove_file(e.path()).is_ok() {
            n += 1;
        }
    }
    n
}

/// The prefix of the shared-memory segments MPICH's processes of the kvs `kvsname`
/// make at `MPI_Init` on a node: `mpich_shm_` and the 32-bit FNV-1a hash of the name,
/// in lowercase hex (MPICH 5's `MPIDU_Init_shm`, read from its `openat` calls). Its
/// processes unlink the segment once all of them attached; a job that dies before
/// leaves it behind, and a later job with the same kvs attaches to the stale one and
/// hangs in `MPI_Init` (PMIS-22).
pub fn mpich_shm_prefix(kvsname: &str) -> String {
    let hash = kvsname.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("mpich_shm_{hash:x}_")
}

/// PMIS-22: removes what MPICH's processes of the kvs names `kvsnames` left in
/// `/dev/shm` (see [`mpich_shm_prefix`]); how many. Run where no process of those kvs
/// names lives: before the job's first launch on the node, and once all are gone.
pub fn sweep_mpich_shm(kvsnames: &[String]) -> usize {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let prefixes: Vec<String> = kvsnames.iter().map(|k| mpich_shm_prefix(k)).collect();
    let mut n = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let ours = prefixes.iter().any(|p| {
            name.strip_prefix(p.as_str())
                .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
        });
        if ours && std::fs::remove_file(e.path()).is_ok() {
            n += 1;
        }
    }
    n
}

/// Removes shared-memory segments (`/dev/shm/dynres-shm-{pid}-*`) of the given processes.
pub fn sweep_shm(os_pids: &[u32]) -> usize {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let prefixes: Vec<String> = os_pids.iter().map(|p| format!("dynres-shm-{p}-")).collect();
    let mut n = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if prefixes.iter().any(|p| name.starts_with(p.as_str()))
            && std::fs::remove_file(e.path()).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// Whether `path` names an executable regular file (following symlinks, as exec does).
fn executable(path: &std::path::Path) -> Result<(), &'static str> {
    use std::os::unix::ffi::OsStrExt;
    let m = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err("permission denied");
        }
        Err(_) => return Err("no such file"),
    };
    if m.is_dir() {
        return Err("is a directory");
    }
    if !m.is_file() {
        return Err("not a regular file");
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return Err("no such file");
    };
    // SAFETY: access reads a NUL-terminated path and nothing else.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 {
        return Err("not executable");
    }
    Ok(())
}

/// Checks, before a job starts, that `program` can be launched as
/// `std::process::Command` will: a path (with a `/`) must name an executable file, a
/// bare name must be found in `PATH` as one. `Err` names the program and the reason.
pub fn check_program(program: &str) -> Result<(), LauncherError> {
    let refuse = |reason: String| LauncherError::CannotRun {
        program: program.to_string(),
        reason,
    };
    if program.is_empty() {
        return Err(refuse("empty program name".into()));
    }
    if program.contains('/') {
        return executable(std::path::Path::new(program)).map_err(|r| refuse(r.into()));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut seen = None;
    for dir in std::env::split_paths(&path) {
        // An empty entry is the current directory (POSIX), as execvp reads it.
        let dir = if dir.as_os_str().is_empty() {
            std::path::PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        match executable(&candidate) {
            Ok(()) => return Ok(()),
            Err("no such file") => {}
            Err(r) => {
                seen.get_or_insert((candidate, r));
            }
        }
    }
    Err(refuse(match seen {
        Some((p, r)) => format!("{} {r}", p.display()),
        None => "not found in PATH".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// PMIS-22: the segment name MPICH 5.0.2 made for the kvs `job-abc` (its
    /// `openat` under strace), and only digit-suffixed names of that prefix go.
    #[test]
    fn mpich_segments_are_named_by_the_kvs_hash() {
        assert_eq!(mpich_shm_prefix("job-abc"), "mpich_shm_823082bd_");
        let kvs = format!("job-sweep-test-{}", std::process::id());
        let prefix = mpich_shm_prefix(&kvs);
        let dir = std::path::Path::new("/dev/shm");
        let (stale, other) = (
            dir.join(format!("{prefix}0")),
            dir.join(format!("{prefix}x")),
        );
        std::fs::write(&stale, b"stale").unwrap();
        std::fs::write(&other, b"not MPICH's").unwrap();
        assert_eq!(sweep_mpich_shm(&[kvs]), 1);
        assert!(!stale.exists() && other.exists());
        std::fs::remove_file(other).unwrap();
    }

    #[test]
    fn programs_are_checked_before_launch() {
        let d = std::env::temp_dir().join(format!("dynres-prog-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let plain = d.join("plain");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let reason = |p: &str| match check_program(p) {
            Err(LauncherError::CannotRun { program, reason }) => {
                assert_eq!(program, p);
                reason
            }
            other => panic!("{p}: {other:?}"),
        };
        assert!(check_program("sh").is_ok());
        assert!(check_program("/bin/sh").is_ok());
        assert_eq!(reason("dynres-no-such-program"), "not found in PATH");
        assert_eq!(reason("/nonexistent/prog"), "no such file");
        assert_eq!(reason(d.to_str().unwrap()), "is a directory");
        assert_eq!(reason(""), "empty program name");
        // As root, access(X_OK) fails only without any x bit: true for everyone.
        assert_eq!(reason(plain.to_str().unwrap()), "not executable");
        let _ = std::fs::remove_dir_all(&d);
    }
}
