//! Launching application processes (fork/exec through `std::process::Command`),
//! forwarding their output with a rank prefix, reporting their exits, killing them.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use super::engine::Event;
use crate::env;

/// What every launched process gets.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// Program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// `DYNRES_SOCKET`.
    pub socket: String,
    /// `DYNRES_SECRET`.
    pub secret: String,
    /// `DYNRES_NAMESPACE`.
    pub namespace: String,
    /// `DYNRES_APP`.
    pub app: String,
    /// `DYNRES_SHM_SPINS`: the shared-memory spin budget, calibrated once by the
    /// runtime instead of once in every process (a ~ms futex ping-pong each).
    pub shm_spins: u32,
}

/// A launched process.
#[derive(Debug)]
pub struct Child {
    /// Its OS process id.
    pub os_pid: u32,
    /// When it was launched.
    pub launched: std::time::Instant,
    /// Whether the runtime killed it.
    pub killed: bool,
    /// Its exit, once reaped.
    pub exit: Option<ExitStatus>,
    /// Output forwarders.
    pub threads: Vec<JoinHandle<()>>,
}

/// Starts the thread that launches processes (one long-lived thread, so that the
/// parent-death signal clients arm, tied to the launching thread, fires only when the
/// runtime is gone). Each launch is reported as [`Event::Launched`], and later its exit
/// as [`Event::Exited`].
pub fn spawner(spec: LaunchSpec, events: Sender<Event>) -> (Sender<u32>, JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<u32>();
    let t = std::thread::spawn(move || {
        for rank in rx {
            match launch(&spec, rank) {
                Ok((child, proc)) => {
                    if events
                        .send(Event::Launched {
                            rank,
                            child: Ok(child),
                        })
                        .is_err()
                    {
                        return;
                    }
                    // Started after `Launched` is queued, so the exit comes after it.
                    let tx = events.clone();
                    let mut proc = proc;
                    std::thread::spawn(move || {
                        let status = proc.wait();
                        let _ = tx.send(Event::Exited { rank, status });
                    });
                }
                Err(e) => {
                    let _ = events.send(Event::Launched {
                        rank,
                        child: Err(e),
                    });
                }
            }
        }
    });
    (tx, t)
}

fn launch(spec: &LaunchSpec, rank: u32) -> std::io::Result<(Child, std::process::Child)> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .env(env::SOCKET, &spec.socket)
        .env(env::SECRET, &spec.secret)
        .env(env::NAMESPACE, &spec.namespace)
        .env(env::RANK, rank.to_string())
        .env(env::APP, &spec.app)
        .env("DYNRES_SHM_SPINS", spec.shm_spins.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // No `pre_exec`: that would force fork + exec (1–2 ms each here) instead of
    // posix_spawn. Clients arm their parent-death signal themselves (`Session::init`).
    let launched = std::time::Instant::now();
    let mut child = cmd.spawn()?;
    let os_pid = child.id();
    tracing::trace!(
        rank,
        fork_exec_us = launched.elapsed().as_micros() as u64,
        "spawned"
    );
    let mut threads = Vec::new();
    if let Some(out) = child.stdout.take() {
        threads.push(forward(out, rank, false));
    }
    if let Some(err) = child.stderr.take() {
        threads.push(forward(err, rank, true));
    }
    Ok((
        Child {
            os_pid,
            launched,
            killed: false,
            exit: None,
            threads,
        },
        child,
    ))
}

fn forward(r: impl Read + Send + 'static, rank: u32, to_stderr: bool) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut lines = BufReader::new(r);
        let mut line = Vec::new();
        loop {
            line.clear();
            match lines.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let mut buf = format!("[rank {rank}] ").into_bytes();
            buf.extend_from_slice(&line);
            // One write per line so lines of different ranks do not interleave.
            let _ = if to_stderr {
                std::io::stderr().lock().write_all(&buf)
            } else {
                std::io::stdout().lock().write_all(&buf)
            };
        }
    })
}

/// Sends SIGKILL to a process.
pub fn kill(os_pid: u32) {
    // SAFETY: kill has no memory-safety preconditions. The pid is a child not yet
    // reaped (the caller checks), so it cannot have been reused.
    let r = unsafe { libc::kill(os_pid as libc::pid_t, libc::SIGKILL) };
    if r != 0 {
        tracing::debug!(os_pid, error = %std::io::Error::last_os_error(), "kill");
    }
}

/// A one-word description of an exit.
pub fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown".into(),
    }
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
