//! The runtime against hostile or careless surroundings: runtime directories another
//! user prepared, stale and live job directories, sockets removed while the job runs,
//! thread exhaustion, and a tool that floods its socket and never reads.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use dynres_client::auth::{HELLO_OK, Peer, encode_hello};
use dynres_tests::job::{Finished, Runtime, runtime_of, synthetic_idle, wait_bounded};

/// `nobody`: tests that need a second user run the runtime (or own files) as it.
const NOBODY: u32 = 65534;

/// A job that runs until it is stopped.
fn endless(job: &str) -> Vec<String> {
    let mut v: Vec<String> = ["run", "-n", "2", "--max", "4", "--job-id", job]
        .map(String::from)
        .to_vec();
    v.extend(synthetic_idle());
    v
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `dynres status JOB` from `cmd`, bounded: `Some(stdout)` when it answered.
fn status_once(rt: &Runtime, cmd: Command) -> Result<Finished, Finished> {
    rt.run_bounded(cmd, Duration::from_secs(20))
}

/// Polls `dynres status JOB` (as built by `cmd`) until it answers with exit 0 and
/// `pred` holds, for at most 60 s.
fn wait_status(
    rt: &Runtime,
    cmd: impl Fn() -> Command,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let f = match status_once(rt, cmd()) {
            Ok(f) => f,
            Err(f) => panic!(
                "`dynres status` hung while waiting for {what}\n{}",
                f.dump()
            ),
        };
        if f.code == Some(0) && pred(&f.stdout) {
            return f.stdout;
        }
        assert!(Instant::now() < deadline, "never saw {what}:\n{}", f.dump());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A runtime in the background, killed (SIGKILL) if the test fails before it ends.
struct Running(Option<Child>);

impl Running {
    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL, as a crash would.
    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGKILL of the supervisor and the runtime at once, as a crash of the host's
    /// session or the OOM killer would: nobody is left to clean up (RT-4's supervisor
    /// and runtime clean up after each other otherwise). The runtime is stopped first,
    /// so it cannot act on its parent-death signal.
    fn kill_both(&mut self) {
        let runtime = runtime_of(self.id());
        // SAFETY: kill has no memory-safety preconditions; both are the test's own
        // descendants, not yet reaped.
        unsafe { libc::kill(runtime as libc::pid_t, libc::SIGSTOP) };
        self.kill();
        // SAFETY: as above; a stopped process is killed by SIGKILL.
        unsafe { libc::kill(runtime as libc::pid_t, libc::SIGKILL) };
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while std::path::Path::new(&format!("/proc/{runtime}")).exists() {
            assert!(
                std::time::Instant::now() < until,
                "the runtime survived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// SIGTERM to the runtime, then a bounded wait for its end.
fn terminate(rt: &Runtime, mut running: Running) -> Finished {
    let child = running.0.take().expect("a running runtime");
    let pid = child.id() as libc::pid_t;
    // SAFETY: sending a signal to our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    match wait_bounded(child, rt.dir.clone(), Duration::from_secs(20)) {
        Ok(f) => f,
        Err(f) => panic!(
            "the runtime did not end within 20 s of SIGTERM\n{}",
            f.dump()
        ),
    }
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).expect("chown");
}

/// The one line `dynres run` must print for an unsafe runtime directory.
fn assert_refused_one_line(f: &Finished, path: &Path, what: &str) {
    assert!(
        matches!(f.code, Some(c) if c != 0),
        "{what}: the job ran\n{}",
        f.dump()
    );
    let lines: Vec<&str> = f.stderr.trim().lines().collect();
    assert_eq!(lines.len(), 1, "{what}: {}", f.dump());
    assert!(
        lines[0].starts_with("dynres: runtime directory ")
            && lines[0].contains(&path.display().to_string()),
        "{what}: {}",
        lines[0]
    );
    assert!(!f.stderr.contains("launched"), "{what}: {}", f.dump());
}

#[test]
fn runtime_directories_others_could_use_are_refused_and_left_untouched() {
    let rt = Runtime::new("unsafe-root");
    let scratch = rt.scratch();
    let run = |root: &Path| {
        let mut c = rt.command(&["run", "-n", "1", "--job-id", "j", "--", "true"]);
        c.env("DYNRES_RUNTIME_DIR", root);
        match rt.run_bounded(c, Duration::from_secs(60)) {
            Ok(f) | Err(f) => f,
        }
    };

    // A symlink to a directory someone else controls.
    let target = scratch.join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = scratch.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let f = run(&link);
    assert_refused_one_line(&f, &link, "symlink");
    assert!(f.stderr.contains("symbolic link"), "{}", f.dump());
    assert!(entries(&target).is_empty(), "{:?}", entries(&target));

    // A regular file.
    let file = scratch.join("file");
    std::fs::write(&file, "not a directory").unwrap();
    let f = run(&file);
    assert_refused_one_line(&f, &file, "file");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a directory");

    // A directory everyone may write to.
    let open = scratch.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let f = run(&open);
    assert_refused_one_line(&f, &open, "0777 directory");
    assert!(f.stderr.contains("0777"), "{}", f.dump());
    assert!(entries(&open).is_empty(), "{:?}", entries(&open));

    // A private directory of another user (needs root to make one).
    if is_root() {
        let theirs = scratch.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        chown(&theirs, NOBODY);
        let f = run(&theirs);
        assert_refused_one_line(&f, &theirs, "another user's directory");
        assert!(
            f.stderr.contains(&format!("owned by uid {NOBODY}")),
            "{}",
            f.dump()
        );
        assert!(entries(&theirs).is_empty(), "{:?}", entries(&theirs));
    } else {
        eprintln!("not root: the another-user case is not exercised");
    }

    // The default location under $XDG_RUNTIME_DIR is checked the same way.
    let xdg = scratch.join("xdg");
    std::fs::create_dir(&xdg).unwrap();
    std::os::unix::fs::symlink(&target, xdg.join("dynres")).unwrap();
    let mut c = rt.command(&["run", "-n", "1", "--job-id", "j", "--", "true"]);
    c.env_remove("DYNRES_RUNTIME_DIR")
        .env("XDG_RUNTIME_DIR", &xdg);
    let f = match rt.run_bounded(c, Duration::from_secs(60)) {
        Ok(f) | Err(f) => f,
    };
    assert_refused_one_line(&f, &xdg.join("dynres"), "XDG symlink");
    assert!(entries(&target).is_empty(), "{:?}", entries(&target));

    // A missing root is created private.
    let fresh = scratch.join("fresh");
    let f = run(&fresh);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let mode = std::fs::symlink_metadata(&fresh)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o700);
    // Only the host's calibrations stay, on purpose (launcher/src/runtime/calibrated.rs).
    let left = entries(&fresh);
    assert!(left.iter().all(|e| e == ".calibration"), "{left:?}");
}

#[test]
fn a_tool_does_not_talk_to_a_job_in_a_directory_others_could_have_prepared() {
    let rt = Runtime::new("fake-job");
    let scratch = rt.scratch();
    // Someone else's world-writable "runtime directory" with a fake job in it: its
    // socket would learn nothing secret, but would answer in the job's name.
    let open = scratch.join("open");
    let job = open.join("fake");
    std::fs::create_dir_all(&job).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(job.join("secret"), "0".repeat(64)).unwrap();
    let fake = UnixListener::bind(job.join("cli.sock")).unwrap();
    fake.set_nonblocking(true).unwrap();
    let mut c = rt.command(&["status", "fake"]);
    c.env("DYNRES_RUNTIME_DIR", &open);
    let f = match rt.run_bounded(c, Duration::from_secs(20)) {
        Ok(f) => f,
        Err(f) => panic!("the tool waited on the fake job\n{}", f.dump()),
    };
    assert!(
        matches!(f.code, Some(c) if c != 0),
        "the tool believed the fake job\n{}",
        f.dump()
    );
    assert_eq!(f.stderr.trim().lines().count(), 1, "{}", f.dump());
    assert!(
        f.stderr.starts_with("dynres: runtime directory "),
        "{}",
        f.dump()
    );
    assert!(
        matches!(fake.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the tool connected to the fake job's socket"
    );
}

#[test]
fn a_live_job_id_is_refused_and_a_dead_runtimes_directory_is_taken_over() {
    let rt = Runtime::new("stale");
    let job = "dup";
    let mut first = Running(Some(rt.spawn(&as_strs(&endless(job)))));
    rt.wait_for_job(job);

    // Live: refused with one line; the running job is untouched.
    let f = rt.run(&["run", "-n", "1", "--job-id", job, "--example", "check"]);
    assert!(matches!(f.code, Some(c) if c != 0), "{}", f.dump());
    let lines: Vec<&str> = f.stderr.trim().lines().collect();
    assert_eq!(lines.len(), 1, "{}", f.dump());
    assert!(lines[0].contains("already running"), "{}", f.dump());
    assert!(!f.stderr.contains("launched"), "{}", f.dump());
    wait_status(
        &rt,
        || rt.command(&["status", job]),
        "the first job",
        |s| s.contains("PROCESSES"),
    );

    // Dead (SIGKILL of both the supervisor and the runtime leaves its directory
    // behind): a new job with the same id runs.
    first.kill_both();
    assert!(rt.dir.join(job).exists(), "no stale directory to test with");
    let f = rt.run(&["run", "-n", "1", "--job-id", job, "--example", "check"]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(f.stdout.contains("check: 1 processes ok"), "{}", f.dump());
    f.assert_nothing_left();
}

#[test]
fn sigterm_ends_the_runtime_when_its_sockets_were_removed_or_replaced() {
    for replace in [false, true] {
        let rt = Runtime::new(if replace { "replaced" } else { "removed" });
        let job = "nosock";
        let child = Running(Some(rt.spawn(&as_strs(&endless(job)))));
        let dir = rt.wait_for_job(job);
        wait_status(
            &rt,
            || rt.command(&["status", job]),
            "two processes",
            |s| s.lines().filter(|l| l.ends_with("running")).count() == 2,
        );
        let mut impostors = Vec::new();
        for sock in ["control.sock", "cli.sock"] {
            std::fs::remove_file(dir.join(sock)).unwrap();
            if replace {
                // Listening, never accepting: a connection to it succeeds and wakes
                // nothing in the runtime.
                impostors.push(UnixListener::bind(dir.join(sock)).unwrap());
            }
        }
        let f = terminate(&rt, child);
        assert_eq!(f.code, Some(130), "{}", f.dump());
        drop(impostors);
    }
}

#[test]
fn sigterm_ends_the_runtime_when_a_descendant_keeps_its_output_open() {
    let rt = Runtime::new("orphan");
    let scratch = rt.scratch();
    let pidfile = scratch.join("orphan.pid");
    // The launched shell leaves a background child holding its stdout and stderr,
    // which outlives it (the runtime kills only the processes it launched).
    let script = format!("sleep 40 & echo $! > {}; exec sleep 600", pidfile.display());
    let child = Running(Some(rt.spawn(&[
        "run", "-n", "1", "--job-id", "orphan", "--", "sh", "-c", &script,
    ])));
    rt.wait_for_job("orphan");
    let deadline = Instant::now() + Duration::from_secs(30);
    let orphan: libc::pid_t = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "the script never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    /// Ends the orphan however the test ends.
    struct Orphan(libc::pid_t);
    impl Drop for Orphan {
        fn drop(&mut self) {
            // SAFETY: the orphan is the test's own descendant; SIGKILL ends it.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    let _orphan = Orphan(orphan);
    let f = terminate(&rt, child);
    assert_eq!(f.code, Some(130), "{}", f.dump());
}

/// Tasks (threads) of `uid` on this host.
fn tasks_of(uid: u32) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(st) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let field = |k: &str| {
            st.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            n += field("Threads:").unwrap_or(0);
        }
    }
    n
}

/// Sets the soft RLIMIT_NPROC of process `pid` (running as [`NOBODY`]). The test
/// lacks CAP_SYS_RESOURCE, so it does so from a helper that is `nobody` too (same
/// ids: no capability needed) and keeps the hard limit.
fn set_nproc(pid: u32, soft: u64) {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `cur`.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut cur) }, 0);
    let lim = libc::rlimit {
        rlim_cur: soft.min(cur.rlim_max),
        rlim_max: cur.rlim_max,
    };
    let mut helper = Command::new("true");
    helper.uid(NOBODY).gid(NOBODY);
    // SAFETY: the closure runs in the forked child before exec and makes one system
    // call (async-signal-safe).
    unsafe {
        helper.pre_exec(move || {
            if libc::prlimit(
                pid as libc::pid_t,
                libc::RLIMIT_NPROC,
                &lim,
                std::ptr::null_mut(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let st = helper.status().expect("prlimit helper");
    assert!(st.success(), "prlimit helper: {st}");
}

/// A runtime that may start no more threads (`RLIMIT_NPROC`) still serves every
/// connection, tools included: its I/O loop needs no thread per connection (issue 30;
/// before it, the limit cost each new connection, and the runtime did not panic).
#[test]
fn a_runtime_out_of_threads_does_not_panic_and_serves_again_afterwards() {
    if !is_root() {
        // RLIMIT_NPROC does not bind root, and only root can become another user.
        eprintln!("not root: thread exhaustion is not exercised");
        return;
    }
    let rt = Runtime::new("nproc");
    chown(&rt.dir, NOBODY);
    let job = "nproc";
    let as_nobody = |args: &[&str]| {
        let mut c = rt.command(args);
        c.uid(NOBODY).gid(NOBODY);
        c
    };
    let mut cmd = as_nobody(&as_strs(&endless(job)));
    let child = Running(Some(
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn dynres as nobody"),
    ));
    let dir = rt.wait_for_job(job);
    wait_status(
        &rt,
        || as_nobody(&["status", job]),
        "two processes",
        |s| s.lines().filter(|l| l.ends_with("running")).count() == 2,
    );

    // From now on the runtime may start no more threads (the runtime process, not its
    // supervisor: RT-4).
    let runtime = runtime_of(child.id());
    set_nproc(runtime, tasks_of(NOBODY));
    let mut held = Vec::new();
    for _ in 0..40 {
        for sock in ["control.sock", "cli.sock"] {
            if let Ok(s) = UnixStream::connect(dir.join(sock)) {
                held.push(s);
            }
        }
    }
    // Each of these waits for a hello; meanwhile the job answers, and afterwards too.
    wait_status(
        &rt,
        || as_nobody(&["status", job]),
        "an answer",
        |s| s.contains("PROCESSES"),
    );
    drop(held);
    wait_status(
        &rt,
        || as_nobody(&["status", job]),
        "an answer",
        |s| s.contains("PROCESSES"),
    );
    set_nproc(runtime, u64::MAX);
    let f = terminate(&rt, child);
    assert_eq!(f.code, Some(130), "{}", f.dump());
    assert!(!f.stderr.contains("panicked"), "{}", f.dump());
    assert!(
        !f.stderr.contains("cannot start a thread"),
        "a connection needed a thread\n{}",
        f.dump()
    );
}

/// Connects as an authenticated tool and floods `bytes` (then `tail`), never reading.
fn flooding_tool(sock: &Path, secret: &str, bytes: usize, tail: &[u8]) -> UnixStream {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(&encode_hello(secret, Peer::Tool)).unwrap();
    let mut ok = [0u8; 1];
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.read_exact(&mut ok).unwrap();
    assert_eq!(ok[0], HELLO_OK);
    let mut w = s.try_clone().unwrap();
    let tail = tail.to_vec();
    // The runtime may stop reading (and close) at any point: errors end the flood.
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 << 10];
        let mut sent = 0;
        while sent < bytes {
            if w.write_all(&chunk).is_err() {
                return;
            }
            sent += chunk.len();
        }
        let _ = w.write_all(&tail);
    });
    s
}

#[test]
fn a_tool_that_floods_its_socket_and_never_reads_does_not_stall_the_job() {
    let rt = Runtime::new("flood");
    let job = "flood";
    let child = Running(Some(rt.spawn(&as_strs(&endless(job)))));
    let dir = rt.wait_for_job(job);
    let secret = std::fs::read_to_string(dir.join("secret")).unwrap();
    let sock = dir.join("cli.sock");
    // 4 MiB without a newline, and 4 MiB with one; neither tool reads its answer.
    let _a = flooding_tool(&sock, secret.trim(), 4 << 20, b"");
    let _b = flooding_tool(&sock, secret.trim(), 4 << 20, b"\n");

    wait_status(
        &rt,
        || rt.command(&["status", job]),
        "two processes",
        |s| s.lines().filter(|l| l.ends_with("running")).count() == 2,
    );
    let g = match rt.run_bounded(rt.command(&["grow", job, "+1"]), Duration::from_secs(20)) {
        Ok(g) => g,
        Err(g) => panic!("`dynres grow` hung\n{}", g.dump()),
    };
    assert_eq!(g.code, Some(0), "{}", g.dump());
    wait_status(
        &rt,
        || rt.command(&["status", job]),
        "the ADD finalized",
        |s| {
            s.lines()
                .any(|l| l.contains("ADD") && l.contains("FINALIZED"))
        },
    );
    let f = terminate(&rt, child);
    assert_eq!(f.code, Some(130), "{}", f.dump());
    f.assert_nothing_left();
}

/// Issue 30: the runtime serves its ranks from one I/O loop, so its thread count does
/// not grow with them: a job of 32 ranks runs on as many runtime threads as a job of 2.
/// Counted in `/proc` once every rank runs (no timing is asserted; a thread that is
/// only passing through, such as a calibration's, is waited out).
#[test]
fn the_runtimes_threads_do_not_grow_with_its_ranks() {
    use dynres_tests::job::Running as Job;
    let count = |dir: String| std::fs::read_dir(dir).map_or(0, Iterator::count);
    // The runtime's threads once its `n` ranks (`sleep SECS`) all run.
    let threads = |n: u32, secs: &str| -> (usize, Finished) {
        let rt = Runtime::new(&format!("threads-{n}"));
        let job = format!("threads-{n}");
        let n_s = n.to_string();
        let args = [
            "run", "--job-id", &job, "-n", &n_s, "--max", &n_s, "--", "sleep", secs,
        ];
        let r = Job::start(rt.command(&args));
        rt.wait_for_job(&job);
        let runtime = runtime_of(r.id());
        let until = Instant::now() + Duration::from_secs(60);
        let ranks = || {
            let kids = |t: std::fs::DirEntry| {
                std::fs::read_to_string(t.path().join("children")).unwrap_or_default()
            };
            std::fs::read_dir(format!("/proc/{runtime}/task"))
                .map(|d| {
                    d.flatten()
                        .map(|t| kids(t).split_whitespace().count())
                        .sum::<usize>()
                })
                .unwrap_or(0)
        };
        while ranks() < n as usize {
            assert!(Instant::now() < until, "the {n} ranks never all ran");
            std::thread::sleep(Duration::from_millis(20));
        }
        let tasks = format!("/proc/{runtime}/task");
        let mut seen = count(tasks.clone());
        // Stable for a while: transient threads (calibrations, launches) are gone.
        let mut stable = 0;
        while stable < 10 {
            std::thread::sleep(Duration::from_millis(50));
            let now = count(tasks.clone());
            stable = if now == seen { stable + 1 } else { 0 };
            seen = now;
            assert!(Instant::now() < until, "the thread count never settled");
        }
        // SAFETY: kill has no memory-safety preconditions; the job is the test's child.
        unsafe { libc::kill(r.id() as libc::pid_t, libc::SIGTERM) };
        (seen, r.finish(rt.dir.clone(), Duration::from_secs(60)))
    };
    let (few, f2) = threads(2, "3741");
    let (many, f32) = threads(32, "3742");
    assert!(few > 0, "{}", f2.dump());
    assert_eq!(
        few,
        many,
        "the runtime has {few} threads with 2 ranks, {many} with 32\n{}\n{}",
        f2.dump(),
        f32.dump()
    );
}
