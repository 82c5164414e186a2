//! Running `dynres` jobs from tests: each job gets its own runtime directory, and
//! [`Finished::assert_nothing_left`] checks that the job left no process, socket or
//! shared-memory segment behind.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The `dynres` binary of this build, (re)built on demand: a lone `cargo test -p
/// dynres-tests` builds the launcher's library but not its binary, so a binary older
/// than this test executable may predate the code under test.
pub fn dynres_bin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(build_dynres).clone()
}

fn build_dynres() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test> → target/<profile>/dynres
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let bin = dir.join("dynres");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let stale = match (modified(&bin), modified(&exe)) {
        (Some(b), Some(e)) => b < e,
        _ => true,
    };
    if stale {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "dynres-launcher", "--bin", "dynres"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo build");
        assert!(st.success(), "building dynres failed");
    }
    bin
}

/// A private runtime directory (`DYNRES_RUNTIME_DIR`) for one test.
pub struct Runtime {
    /// The directory.
    pub dir: PathBuf,
}

impl Runtime {
    /// A fresh, empty runtime directory.
    pub fn new(name: &str) -> Runtime {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("dynres-test-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create runtime dir");
        // The runtime refuses a directory that group or others may use.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .expect("chmod runtime dir");
        Runtime { dir }
    }

    /// A scratch directory for a test's own files, outside the runtime directory (so
    /// that [`Finished::assert_nothing_left`] does not see them); removed on drop.
    pub fn scratch(&self) -> PathBuf {
        let d = self.dir.with_extension("scratch");
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create scratch dir");
        d
    }

    /// `dynres ARGS` with this runtime directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(dynres_bin());
        c.args(args)
            .env("DYNRES_RUNTIME_DIR", &self.dir)
            .env("DYNRES_LOG", "debug")
            .stdin(Stdio::null());
        c
    }

    /// Runs `dynres ARGS` to completion.
    pub fn run(&self, args: &[&str]) -> Finished {
        let out = self.command(args).output().expect("run dynres");
        Finished::new(out, self.dir.clone())
    }

    /// Runs `cmd` (a [`Runtime::command`], possibly adjusted) for at most `limit`:
    /// `Err` with what it printed if it had to be killed.
    pub fn run_bounded(&self, cmd: Command, limit: Duration) -> Result<Finished, Finished> {
        let mut cmd = cmd;
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dynres");
        wait_bounded(child, self.dir.clone(), limit)
    }

    /// Starts `dynres ARGS` in the background.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dynres")
    }

    /// Waits (bounded) until job `job`'s sockets exist.
    pub fn wait_for_job(&self, job: &str) -> PathBuf {
        let d = self.dir.join(job);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(d.join("control.sock").exists() && d.join("cli.sock").exists()) {
            assert!(Instant::now() < deadline, "job {job} never came up");
            std::thread::sleep(Duration::from_millis(10));
        }
        d
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(self.dir.with_extension("scratch"));
    }
}

/// Waits for `child` (its stdout and stderr piped) for at most `limit`; kills it
/// (SIGKILL) if it is still running then. `Err`: it had to be killed.
pub fn wait_bounded(
    mut child: Child,
    runtime_dir: PathBuf,
    limit: Duration,
) -> Result<Finished, Finished> {
    // Read both pipes while waiting, so a chatty child cannot block on a full pipe.
    let pipes = Pipes::drain(&mut child);
    finish_bounded(child, pipes, runtime_dir, limit)
}

fn finish_bounded(
    mut child: Child,
    pipes: Pipes,
    runtime_dir: PathBuf,
    limit: Duration,
) -> Result<Finished, Finished> {
    let deadline = Instant::now() + limit;
    let mut killed = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for dynres") {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            killed = true;
            break child.wait().expect("wait for killed dynres");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = pipes.finish(Duration::from_secs(10));
    let output = Output {
        status,
        stdout,
        stderr,
    };
    let f = Finished::new(output, runtime_dir);
    if killed { Err(f) } else { Ok(f) }
}

/// What a child wrote to one pipe: all of it up to [`Capture::HEAD`] bytes, then the
/// last [`Capture::TAIL`] bytes, so a job printing for minutes neither blocks on its
/// pipe nor fills the test's memory.
#[derive(Default)]
struct Capture {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: u64,
}

impl Capture {
    const HEAD: usize = 4 << 20;
    const TAIL: usize = 4 << 20;

    fn push(&mut self, mut bytes: &[u8]) {
        let room = Self::HEAD - self.head.len();
        let first = bytes.len().min(room);
        self.head.extend_from_slice(&bytes[..first]);
        bytes = &bytes[first..];
        self.tail.extend(bytes);
        let over = self.tail.len().saturating_sub(Self::TAIL);
        self.tail.drain(..over);
        self.dropped += over as u64;
    }

    fn bytes(&self) -> Vec<u8> {
        let mut v = self.head.clone();
        if self.dropped > 0 {
            v.extend_from_slice(
                format!("\n[... {} bytes not kept ...]\n", self.dropped).as_bytes(),
            );
        }
        v.extend(self.tail.iter());
        v
    }
}

/// Reads `pipe` (if any) into a capture on a thread of its own, pushed to `readers`.
fn capture(
    pipe: Option<impl Read + Send + 'static>,
    readers: &mut Vec<std::thread::JoinHandle<()>>,
) -> std::sync::Arc<std::sync::Mutex<Capture>> {
    let cap = std::sync::Arc::new(std::sync::Mutex::new(Capture::default()));
    if let Some(mut r) = pipe {
        let c = cap.clone();
        readers.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            while let Ok(n @ 1..) = r.read(&mut buf) {
                c.lock().expect("capture").push(&buf[..n]);
            }
        }));
    }
    cap
}

/// Both pipes of a child, read on threads of their own from the start.
struct Pipes {
    out: std::sync::Arc<std::sync::Mutex<Capture>>,
    err: std::sync::Arc<std::sync::Mutex<Capture>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Pipes {
    fn drain(child: &mut Child) -> Pipes {
        let mut readers = Vec::new();
        let out = capture(child.stdout.take(), &mut readers);
        let err = capture(child.stderr.take(), &mut readers);
        Pipes { out, err, readers }
    }

    /// Both streams once the pipes closed, or as far as read after `bound` (a
    /// straggler of the killed job may still hold them open).
    fn finish(self, bound: Duration) -> (Vec<u8>, Vec<u8>) {
        let deadline = Instant::now() + bound;
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let take = |c: &std::sync::Mutex<Capture>| c.lock().map(|c| c.bytes()).unwrap_or_default();
        (take(&self.out), take(&self.err))
    }
}

/// A finished `dynres` invocation.
pub struct Finished {
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error (the runtime's log at debug level).
    pub stderr: String,
    runtime_dir: PathBuf,
}

impl Finished {
    /// Wraps an output.
    pub fn new(out: Output, runtime_dir: PathBuf) -> Finished {
        Finished {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            runtime_dir,
        }
    }

    /// Both streams, for assertion messages.
    pub fn dump(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// The CSV rows the synthetic benchmark's root printed (prefix stripped).
    pub fn csv(&self) -> Vec<Vec<String>> {
        self.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("[rank 0] "))
            .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()))
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect()
    }

    /// OS pids of every process the runtime launched (from its debug log).
    pub fn launched_pids(&self) -> Vec<u32> {
        self.stderr
            .lines()
            .filter(|l| l.contains("launched"))
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("os_pid="))
                    .and_then(|p| p.parse().ok())
            })
            .collect()
    }

    /// What rank `rank` printed after `what: ` on a line of its own (a hostile client's
    /// report of one exchange); panics with the job's output if it printed none.
    pub fn rank_line(&self, rank: u32, what: &str) -> String {
        let prefix = format!("[rank {rank}] {what}: ");
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix:?}\n{}", self.dump()))
            .to_string()
    }

    /// Asserts that no launched process lives on, no job directory or socket is left
    /// in the runtime directory, and no shared-memory segment of a launched process
    /// remains, nor the directory of Open MPI's segments (PMIS-23).
    pub fn assert_nothing_left(&self) {
        let pids = self.launched_pids();
        assert!(!pids.is_empty(), "no launches logged\n{}", self.dump());
        for p in &pids {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            // A reused pid would be someone else's process, not a child of the job:
            // our children are reaped, so any state but a fresh unrelated process fails.
            assert!(
                stat.is_empty() || !stat.contains("(dynres)"),
                "process {p} is still alive: {stat}"
            );
        }
        // `.calibration` is the host's, kept for the next jobs of the boot on purpose
        // (launcher/src/runtime/calibrated.rs): not something this job left.
        let left: Vec<_> = std::fs::read_dir(&self.runtime_dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name() != ".calibration")
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "left behind: {left:?}\n{}", self.dump());
        let shm: Vec<String> = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| {
                        pids.iter()
                            .any(|p| n.starts_with(&format!("dynres-shm-{p}-")))
                    })
                    .collect()
            })
            .unwrap_or_default();
        assert!(shm.is_empty(), "shared memory left behind: {shm:?}");
        // PMIS-23: the directory of Open MPI's segments (named in the debug log).
        for word in self.stderr.split(|c: char| c.is_whitespace() || c == '=') {
            if word.starts_with("/dev/shm/dynres-ompi-") {
                let dir = std::path::Path::new(word);
                assert!(!dir.exists(), "{word} left behind\n{}", self.dump());
            }
        }
    }
}

impl Runtime {
    /// Polls `dynres status JOB` until `pred` holds on its output (bounded: 60 s).
    pub fn wait_status(&self, job: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let f = self.run(&["status", job]);
            assert_eq!(f.code, Some(0), "status failed\n{}", f.dump());
            if pred(&f.stdout) {
                return f.stdout;
            }
            assert!(Instant::now() < deadline, "never saw {what}:\n{}", f.stdout);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `dynres grow|shrink JOB COUNT`, which waits for the decision: asserts it is
    /// FINALIZED.
    pub fn change(&self, job: &str, op: &str, count: &str) {
        let r = self.run(&[op, job, count]);
        assert!(r.stdout.contains("FINALIZED"), "{op} {count}: {}", r.dump());
    }

    /// The OS pid of `rank` as `dynres status JOB` shows it, once it runs.
    pub fn pid_of(&self, job: &str, rank: u32) -> u32 {
        let st = self.wait_status(job, &format!("rank {rank} running"), |s| {
            s.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() == 3 && w[0] == rank.to_string() && w[2] == "running"
            })
        });
        st.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.len() == 3 && w[0] == rank.to_string() && w[2] == "running")
            .and_then(|w| w[1].parse().ok())
            .expect("a pid")
    }
}

/// A running `dynres` in a process group of its own. If the test ends before it does (a
/// failed assertion unwinds), the whole group is killed and reaped: a failing test must
/// not leave a job running.
/// Its stdout and stderr are read from the start, so a chatty job never blocks on a
/// full pipe however long the test waits.
pub struct Running(Option<(Child, Pipes)>);

impl Running {
    /// Starts `cmd` (stdout and stderr piped) as the leader of a new process group.
    pub fn start(mut cmd: Command) -> Running {
        use std::os::unix::process::CommandExt;
        let child = cmd
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dynres");
        Running::adopt(child)
    }

    /// Takes charge of `child`, started with `process_group(0)` by the caller.
    pub fn adopt(mut child: Child) -> Running {
        let pipes = Pipes::drain(&mut child);
        Running(Some((child, pipes)))
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, |(c, _)| c.id())
    }

    /// Waits (at most `limit`) for the process to end; `Err`: it had to be killed.
    pub fn wait(mut self, runtime_dir: PathBuf, limit: Duration) -> Result<Finished, Finished> {
        let (child, pipes) = self.0.take().expect("not taken yet");
        finish_bounded(child, pipes, runtime_dir, limit)
    }

    /// Waits (at most `limit`) for the process to end; panics with its output if it has
    /// to be killed.
    pub fn finish(self, runtime_dir: PathBuf, limit: Duration) -> Finished {
        self.wait(runtime_dir, limit)
            .unwrap_or_else(|f| panic!("the job did not end in {limit:?}\n{}", f.dump()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some((mut c, pipes)) = self.0.take() {
            // SAFETY: kill has no memory-safety preconditions; -pid names the group.
            unsafe {
                libc::kill(-(c.id() as libc::pid_t), libc::SIGKILL);
            }
            let _ = c.wait();
            // A failing test shows what the job said: the panic alone rarely tells why.
            if std::thread::panicking() {
                let (out, err) = pipes.finish(Duration::from_secs(5));
                eprintln!(
                    "--- output of the killed job\n{}{}",
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&err)
                );
            }
        }
    }
}

/// Arguments after `--example synthetic` for a job in the thesis' step mode: from
/// `start`, change by `delta` every 2 iterations up to `limit`, for `iterations`.
pub fn synthetic_step(
    start: u32,
    limit: u32,
    delta: u32,
    iterations: u32,
    size: u64,
) -> Vec<String> {
    let v = [
        "--example".to_string(),
        "synthetic".into(),
        "--".into(),
        "--mode".into(),
        "step".into(),
        "--n-start".into(),
        start.to_string(),
        "--n-limit".into(),
        limit.to_string(),
        "--n-delta".into(),
        delta.to_string(),
        "-f".into(),
        "2".into(),
        "-i".into(),
        iterations.to_string(),
        "--problem-size".into(),
        size.to_string(),
    ];
    v.to_vec()
}

/// Arguments for a synthetic job that changes nothing by itself and runs until it is
/// interrupted (changes come from `dynres grow` / `shrink`).
pub fn synthetic_idle() -> Vec<String> {
    [
        "--example",
        "synthetic",
        "--",
        "--mode",
        "none",
        "-i",
        "100000000",
        "--problem-size",
        "1000",
    ]
    .map(String::from)
    .to_vec()
}

/// The runtime process (master or node daemon) that the `dynres` process `supervisor`
/// supervises (RT-4: the pid a caller starts forks the runtime and watches it): its
/// only child. Waits for it (bounded: 10 s).
pub fn runtime_of(supervisor: u32) -> u32 {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let kids =
            std::fs::read_to_string(format!("/proc/{supervisor}/task/{supervisor}/children"))
                .unwrap_or_default();
        if let Some(p) = kids.split_whitespace().find_map(|p| p.parse().ok()) {
            return p;
        }
        assert!(
            std::time::Instant::now() < until,
            "dynres process {supervisor} has no runtime child"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Pids of the live processes whose command line is exactly `args` (e.g. a `sleep`
/// with a number no other test uses), zombies excluded: what a test left running.
pub fn processes_running(args: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = args.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == want))
                .filter(|p| {
                    // `State:\tZ` is a zombie: dead, only not yet reaped by its parent.
                    std::fs::read_to_string(format!("/proc/{p}/status"))
                        .is_ok_and(|s| !s.lines().any(|l| l.starts_with("State:\tZ")))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The uid and gid of `nobody`: the second local user a stranger test runs as.
pub const NOBODY: u32 = 65534;

/// Makes `cmd` run as [`NOBODY`] (std drops the supplementary groups too when it
/// changes the uid as root), so a test's stranger is another local user.
pub fn as_nobody(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    cmd.uid(NOBODY).gid(NOBODY)
}

/// Sends `sig` to process `pid`.
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill({pid}, {sig})");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_keeps_head_and_tail_and_says_what_it_dropped() {
        let mut c = Capture::default();
        c.push(b"first line\n");
        assert_eq!(c.bytes(), b"first line\n");
        // Fill the head, then write twice the tail's size of numbered bytes.
        c.push(&vec![b'h'; Capture::HEAD - 11]);
        let body: Vec<u8> = (0..2 * Capture::TAIL).map(|i| (i % 251) as u8).collect();
        for chunk in body.chunks(60_000) {
            c.push(chunk);
        }
        let got = c.bytes();
        assert!(got.starts_with(b"first line\nhhh"));
        let note = format!("\n[... {} bytes not kept ...]\n", Capture::TAIL);
        let at = Capture::HEAD;
        assert_eq!(&got[at..at + note.len()], note.as_bytes());
        assert_eq!(&got[at + note.len()..], &body[Capture::TAIL..]);
    }

    #[test]
    fn a_running_job_that_prints_more_than_a_pipe_holds_is_not_blocked() {
        // 1 MiB through each pipe, far more than the 64 KiB a pipe buffers: with
        // nobody reading, the child would block and be killed at the bound.
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2; echo done >&2",
        ]);
        let run = Running::start(cmd);
        // It ends (a zombie until reaped) while the test is busy elsewhere.
        let stat = format!("/proc/{}/stat", run.id());
        let deadline = Instant::now() + Duration::from_secs(20);
        let state = || {
            let s = std::fs::read_to_string(&stat).unwrap_or_default();
            s.rsplit(") ").next().and_then(|r| r.chars().next())
        };
        while state() != Some('Z') {
            assert!(Instant::now() < deadline, "blocked writing: {:?}", state());
            std::thread::sleep(Duration::from_millis(10));
        }
        let f = run
            .wait(std::env::temp_dir(), Duration::from_secs(20))
            .unwrap_or_else(|f| panic!("blocked: {}", f.code.is_none()));
        assert_eq!(f.code, Some(0));
        assert_eq!(f.stdout.len(), 1 << 20);
        assert!(f.stderr.ends_with("done\n"));
    }
}
