//! The runtime across hosts (`spec/runtime.md`), end to end on this machine: loopback
//! addresses `127.0.0.1`, `127.0.0.2`, … name the job's hosts, and a launch agent that
//! runs the daemon here stands in for `ssh` (the netns/sshd tests run the same over real
//! network namespaces). Each daemon is a separate process with its own job directory,
//! TCP link, authentication and heartbeats: only the agent is local.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dynres_runtime::hostauth::{AuthError, daemon_handshake};
use dynres_tests::job::{
    Finished, Running, Runtime, as_nobody, processes_running, runtime_of, signal, synthetic_idle,
    synthetic_step,
};

/// A launch agent that logs `PID ARGS…` and runs the command here (`exec` keeps the pid:
/// the logged pid is the daemon's supervisor, RT-4; `runtime_of` gives the daemon).
fn agent(rt: &Runtime) -> (PathBuf, PathBuf) {
    agent_in(&rt.scratch(), "")
}

/// [`agent`] in `dir`, running the shell lines `before` ahead of the daemon.
fn agent_in(dir: &Path, before: &str) -> (PathBuf, PathBuf) {
    let log = dir.join("agent.log");
    let script = dir.join("agent.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$$ $*\" >> {}\n{before}shift\nexec \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (script, log)
}

/// Like [`agent`], but the agent also keeps the daemon key it is handed on stdin in a
/// file (a test playing an impostor that holds the key; AUTH-5).
fn agent_keeping_key(rt: &Runtime) -> (PathBuf, PathBuf, PathBuf) {
    let dir = rt.scratch();
    let log = dir.join("agent.log");
    let key = dir.join("key");
    let script = dir.join("agent.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh
echo \"$$ $*\" >> {}
IFS= read -r key
printf '%s\\n' \"$key\" > {}
shift
exec \"$@\" <<EOF
$key
EOF
",
            log.display(),
            key.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (script, log, key)
}

/// Like [`agent`], but the agent starts the daemon only once the file it returns exists
/// (a test readies strangers at the master's port first).
fn agent_waiting(rt: &Runtime) -> (PathBuf, PathBuf, PathBuf) {
    let dir = rt.scratch();
    let go = dir.join("go");
    let wait = format!(
        "n=0\nwhile [ ! -e {} ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done\n",
        go.display()
    );
    let (script, log) = agent_in(&dir, &wait);
    (script, log, go)
}

/// A `dynres daemon` for `node` that nobody started, handed `key` on stdin as a launch
/// agent would. Bounded: `Err` if it still runs after 20 s (a master that accepted it
/// would leave it running).
fn impostor(rt: &Runtime, master: &str, node: &str, key: &str) -> Result<Finished, Finished> {
    let mut fake = rt
        .command(&["daemon", "--master", master, "--node", node])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = fake.stdin.take().unwrap();
        writeln!(stdin, "{key}").unwrap();
    }
    dynres_tests::job::wait_bounded(fake, rt.dir.clone(), Duration::from_secs(20))
}

/// `(daemon pid, node, master address)` of each daemon the agent started.
fn daemons(log: &Path) -> Vec<(u32, u32, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = |flag: &str| w.iter().position(|x| *x == flag).map(|i| w[i + 1]);
            Some((
                w.first()?.parse().ok()?,
                at("--node")?.parse().ok()?,
                at("--master")?.to_string(),
            ))
        })
        .collect()
}

fn wait_daemon(rt: &Runtime, job: &str, log: &Path, node: u32) -> (u32, String) {
    rt.wait_status(job, &format!("node {node}'s daemon up"), |s| {
        node_state(s, node) == Some("up".into())
    });
    daemons(log)
        .into_iter()
        .find(|d| d.1 == node)
        .map(|d| (d.0, d.2))
        .expect("the agent logged the daemon")
}

/// The daemon column of `node`'s line in the NODES table.
fn node_state(status: &str, node: u32) -> Option<String> {
    status
        .lines()
        .skip_while(|l| *l != "NODES")
        .skip(2)
        .take_while(|l| !l.is_empty())
        .find(|l| l.split_whitespace().next() == Some(&node.to_string()))
        .and_then(|l| l.split_whitespace().last().map(str::to_string))
}

/// `dynres run --job-id JOB -n N --host HOSTS --launch-agent AGENT EXTRA…`.
fn run_cmd(
    rt: &Runtime,
    job: &str,
    n: u32,
    hosts: &str,
    agent: &Path,
    extra: &[String],
) -> Command {
    let mut args: Vec<String> = [
        "run",
        "--job-id",
        job,
        "-n",
        &n.to_string(),
        "--host",
        hosts,
    ]
    .map(String::from)
    .to_vec();
    args.push("--launch-agent".into());
    args.push(agent.display().to_string());
    args.extend_from_slice(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    rt.command(&args)
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn hosts(n: u32, slots: u32) -> String {
    (1..=n)
        .map(|i| format!("127.0.0.{i}:{slots}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// RT-1, RT-2, LINK-1..5: a job starts on host 1, grows onto hosts 2 and 3 (a daemon
/// is started for each when its first process is placed there), shrinks back, and ends
/// cleanly: daemons exit, their job directories go, no process is left.
#[test]
fn a_job_grows_onto_other_hosts_and_shrinks_back() {
    let rt = Runtime::new("mh-grow");
    let (agent, log) = agent(&rt);
    let h = hosts(3, 2);
    let cmd = run_cmd(
        &rt,
        "mhgrow",
        2,
        &h,
        &agent,
        &synthetic_step(2, 6, 4, 40, 1_000_000),
    );
    let f = rt
        .run_bounded(cmd, Duration::from_secs(120))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let sizes: Vec<String> = f.csv().iter().map(|r| r[1].clone()).collect();
    let grown = sizes.iter().position(|s| s == "6");
    assert!(
        grown.is_some_and(|i| sizes[i..].iter().any(|s| s == "2")),
        "expected 2 → 6 → 2, got {sizes:?}\n{}",
        f.dump()
    );
    let mut nodes: Vec<u32> = daemons(&log).iter().map(|d| d.1).collect();
    nodes.sort();
    assert_eq!(nodes, vec![1, 2], "one daemon per other host\n{}", f.dump());
    for n in [1, 2] {
        assert!(
            f.stderr
                .lines()
                .any(|l| l.contains("daemon up") && l.contains(&format!("node={n} "))),
            "node {n}\n{}",
            f.dump()
        );
    }
    f.assert_nothing_left();
}

/// Every rank's environment says where it stands: the job's size, its node and its
/// place among the job's ranks there (3 ranks on 2 hosts of 2 slots: ranks 0 and 1 on
/// node 0, rank 2 alone on node 1, whose daemon launched it).
#[test]
fn every_rank_learns_its_size_node_and_local_rank() {
    let rt = Runtime::new("mh-env");
    let (agent, _log) = agent(&rt);
    let h = hosts(2, 2);
    let script = "echo env $DYNRES_RANK size=$DYNRES_SIZE node=$DYNRES_NODE_ID \
                  local=$DYNRES_LOCAL_RANK/$DYNRES_LOCAL_SIZE";
    let extra = strs(&["--", "sh", "-c", script]);
    let cmd = run_cmd(&rt, "mhenv", 3, &h, &agent, &extra);
    let f = rt
        .run_bounded(cmd, Duration::from_secs(60))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let mut lines: Vec<&str> = f
        .stdout
        .lines()
        .filter_map(|l| l.split_once("] env ").map(|(_, e)| e))
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "0 size=3 node=0 local=0/2",
            "1 size=3 node=0 local=1/2",
            "2 size=3 node=1 local=0/1",
        ],
        "{}",
        f.dump()
    );
    f.assert_nothing_left();
}

/// RT-5: a daemon started as ssh starts it (in `/`, with an empty environment but
/// PATH and HOME) still runs its processes where the caller stood, with the caller's
/// environment less host-specific variables, plus `-x`: a relative `./prog` works on
/// every host, and `--wdir` moves every process.
#[test]
fn every_host_starts_processes_where_and_as_the_caller_does() {
    let rt = Runtime::new("mh-parity");
    let scratch = rt.scratch();
    // As sshd starts a command: in `/` (the home directory there), with a fresh
    // environment.
    let agent = scratch.join("ssh-like.sh");
    std::fs::write(
        &agent,
        "#!/bin/sh\nshift\ncd /\nexec env -i PATH=\"$PATH\" HOME=\"$HOME\" \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let prog = scratch.join("where.sh");
    std::fs::write(
        &prog,
        "#!/bin/sh\necho where $DYNRES_RANK $DYNRES_NODE_ID $(pwd) \
         inherited=$PARITY_INHERITED x=$PARITY_X host=${HOSTNAME:-unset}\n",
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let sub = scratch.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let h = hosts(2, 1);
    let lines = |f: &Finished| {
        let mut v: Vec<String> = f
            .stdout
            .lines()
            .filter_map(|l| l.split_once("] where ").map(|(_, w)| w.to_string()))
            .collect();
        v.sort();
        v
    };
    let here = scratch.canonicalize().unwrap().display().to_string();
    let extra = strs(&["-x", "PARITY_X=set", "--", "./where.sh"]);
    let mut cmd = run_cmd(&rt, "parity", 2, &h, &agent, &extra);
    cmd.current_dir(&scratch)
        .env("PARITY_INHERITED", "yes")
        .env("HOSTNAME", "the-callers-host");
    let f = rt
        .run_bounded(cmd, Duration::from_secs(60))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert_eq!(
        lines(&f),
        [
            format!("0 0 {here} inherited=yes x=set host=the-callers-host"),
            format!("1 1 {here} inherited=yes x=set host=unset"),
        ],
        "rank 1 ran on the other host, through the ssh-like agent\n{}",
        f.dump()
    );
    let extra = strs(&[
        "--wdir",
        "sub",
        "--",
        "sh",
        "-c",
        "echo where $DYNRES_RANK $(pwd)",
    ]);
    let mut cmd = run_cmd(&rt, "paritywd", 2, &h, &agent, &extra);
    cmd.current_dir(&scratch);
    let f = rt
        .run_bounded(cmd, Duration::from_secs(60))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let sub = sub.canonicalize().unwrap().display().to_string();
    assert_eq!(
        lines(&f),
        [format!("0 {sub}"), format!("1 {sub}")],
        "{}",
        f.dump()
    );
    f.assert_nothing_left();
}

/// NODE-1, NODE-2, SLOT-4: a daemon killed with SIGKILL is a lost node; with
/// `--on-loss continue` the job goes on, and a later growth uses the other hosts only.
#[test]
fn a_lost_daemon_retires_its_node_and_the_job_goes_on() {
    let rt = Runtime::new("mh-lost");
    let (agent, log) = agent(&rt);
    let job = "mhlost";
    let h = hosts(3, 2);
    let mut extra = strs(&["--on-loss", "continue", "--heartbeat-ms", "200"]);
    extra.extend(synthetic_idle());
    let cmd = run_cmd(&rt, job, 2, &h, &agent, &extra);
    let child = Running::start(cmd);
    rt.wait_for_job(job);
    // Onto host 2 and back: its daemon stays up with nothing to run.
    rt.change(job, "grow", "+2");
    rt.change(job, "shrink", "-2");
    let (daemon, _) = wait_daemon(&rt, job, &log, 1);
    signal(daemon, libc::SIGKILL);
    rt.wait_status(job, "node 1 gone", |s| {
        node_state(s, 1) == Some("gone".into())
    });
    // SLOT-4: host 2's slots are retired; the next processes go to host 3.
    rt.change(job, "grow", "+2");
    let st = rt.wait_status(job, "processes on node 2", |s| {
        s.lines()
            .filter(|l| l.contains("running on node 2"))
            .count()
            == 2
    });
    assert!(!st.contains("running on node 1"), "{st}");
    signal(child.id(), libc::SIGTERM);
    let f = child.finish(rt.dir.clone(), Duration::from_secs(30));
    assert_eq!(f.code, Some(130), "{}", f.dump());
    assert!(
        f.stderr
            .lines()
            .any(|l| l.contains("node lost: the link closed") && l.contains("node=1 ")),
        "the loss is logged\n{}",
        f.dump()
    );
}

/// NODE-2: by default, losing a node that runs processes of the job ends the job with
/// one line naming the node and why.
#[test]
fn a_lost_node_with_processes_ends_the_job() {
    let rt = Runtime::new("mh-end");
    let (agent, log) = agent(&rt);
    let job = "mhend";
    let h = hosts(2, 2);
    let cmd = run_cmd(&rt, job, 4, &h, &agent, &strs(&["--", "sleep", "60"]));
    let child = Running::start(cmd);
    rt.wait_for_job(job);
    let (daemon, _) = wait_daemon(&rt, job, &log, 1);
    rt.wait_status(job, "processes on node 1", |s| {
        s.lines()
            .filter(|l| l.contains("running on node 1"))
            .count()
            == 2
    });
    // The daemon process itself, as a crash would (the agent's pid is its supervisor,
    // RT-4, which then ends the node's processes).
    signal(runtime_of(daemon), libc::SIGKILL);
    let f = child.finish(rt.dir.clone(), Duration::from_secs(30));
    assert_eq!(f.code, Some(1), "{}", f.dump());
    let last = f.stderr.trim().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("dynres: job failed: rank ")
            && last.contains("node 1 (127.0.0.2) lost: the link closed"),
        "{}",
        f.dump()
    );
    for p in f.launched_pids() {
        let alive = std::path::Path::new(&format!("/proc/{p}")).exists();
        let ours = std::fs::read_to_string(format!("/proc/{p}/cmdline"))
            .is_ok_and(|c| c.starts_with("sleep"));
        assert!(
            !(alive && ours),
            "process {p} outlived its node\n{}",
            f.dump()
        );
    }
}

/// AUTH-3, AUTH-4: a daemon that does not hold the job's key is refused (the master's
/// tag does not verify for it, so it never answers), the refusal is logged, and the job
/// runs on unharmed.
#[test]
fn a_daemon_with_the_wrong_key_is_refused() {
    let rt = Runtime::new("mh-key");
    let (agent, log) = agent(&rt);
    let job = "mhkey";
    let h = hosts(2, 2);
    let cmd = run_cmd(&rt, job, 3, &h, &agent, &strs(&["--", "sleep", "60"]));
    let child = Running::start(cmd);
    rt.wait_for_job(job);
    let (_, master) = wait_daemon(&rt, job, &log, 1);
    let fake = impostor(&rt, &master, "1", &"ab".repeat(32))
        .unwrap_or_else(|f| panic!("the impostor was not refused\n{}", f.dump()));
    assert_eq!(fake.code, Some(1), "{}", fake.dump());
    assert!(fake.stderr.contains("wrong key"), "{}", fake.dump());
    // The job is unharmed: its real daemon is still the one up.
    let st = rt.run(&["status", job]);
    assert_eq!(
        node_state(&st.stdout, 1),
        Some("up".into()),
        "{}",
        st.dump()
    );
    signal(child.id(), libc::SIGTERM);
    let f = child.finish(rt.dir.clone(), Duration::from_secs(30));
    assert_eq!(f.code, Some(130), "{}", f.dump());
    assert!(f.stderr.contains("refused a daemon"), "{}", f.dump());
    f.assert_nothing_left();
}

/// AUTH-5: even with the job's key, a second daemon for a node that has one, or a
/// daemon for a node no daemon was started for, is refused before the verdict byte (it
/// never reads the acceptance, only the refusal) and changes nothing.
#[test]
fn a_daemon_for_a_taken_or_unknown_node_is_refused_even_with_the_key() {
    let rt = Runtime::new("mh-auth5");
    let (agent, log, key) = agent_keeping_key(&rt);
    let job = "mhauth5";
    let h = hosts(2, 2);
    let cmd = run_cmd(&rt, job, 3, &h, &agent, &strs(&["--", "sleep", "60"]));
    let child = Running::start(cmd);
    rt.wait_for_job(job);
    let (_, master) = wait_daemon(&rt, job, &log, 1);
    let key = std::fs::read_to_string(&key).expect("the key the agent was handed");
    for node in [1, 7] {
        let mut s = std::net::TcpStream::connect(&master).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let r = daemon_handshake(&mut s, key.trim().as_bytes(), node);
        assert!(
            matches!(r, Err(AuthError::Refused(n)) if n == node),
            "node {node}: a key holder must be refused before the verdict: {r:?}"
        );
    }
    // The job is unharmed: its real daemon is still the one up.
    let st = rt.run(&["status", job]);
    assert_eq!(
        node_state(&st.stdout, 1),
        Some("up".into()),
        "{}",
        st.dump()
    );
    signal(child.id(), libc::SIGTERM);
    let f = child.finish(rt.dir.clone(), Duration::from_secs(30));
    assert_eq!(f.code, Some(130), "{}", f.dump());
    assert!(
        f.stderr.contains("the node has one already"),
        "{}",
        f.dump()
    );
    assert!(
        f.stderr.contains("no daemon was started for that node"),
        "{}",
        f.dump()
    );
    f.assert_nothing_left();
}

/// The stranger process (`tests/src/bin/stranger.rs`) at `master`, killed when dropped.
struct Stranger(std::process::Child);

impl Stranger {
    /// Starts it as `nobody` (a second local user) when the test runs as root; else as
    /// this user, printing why that variant is skipped.
    fn start(master: &str) -> Stranger {
        use std::io::BufRead;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stranger"));
        cmd.arg(master)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            as_nobody(&mut cmd);
        } else {
            dynres_tests::skip(
                "the second-user variant (not root): the stranger runs as this test's user",
            );
        }
        let mut child = cmd.spawn().expect("start the stranger");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the stranger did not start");
        Stranger(child)
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// AUTH-6, AUTH-7, AUTH-8: while a stranger without the key (another local user when
/// the test runs as root, so from the daemon's own address) keeps 40 connections to
/// the master's daemon port open with a byte every 2 s and floods it with connections,
/// node 1's daemon still gets in and the job succeeds; the refusals are summed up in a
/// few log lines, not one each.
#[test]
fn strangers_cannot_keep_a_daemon_out() {
    let rt = Runtime::new("mh-flood");
    let (agent, log, go) = agent_waiting(&rt);
    let cmd = run_cmd(
        &rt,
        "mhflood",
        3,
        "127.0.0.1:1,127.0.0.2:2",
        &agent,
        &strs(&["--", "true"]),
    );
    let child = Running::start(cmd);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let master = loop {
        if let Some(d) = daemons(&log).first() {
            break d.2.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent was never called"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let stranger = Stranger::start(&master);
    std::fs::write(&go, "").unwrap();
    let f = child.finish(rt.dir.clone(), Duration::from_secs(90));
    drop(stranger);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let refusals: Vec<&str> = f.stderr.lines().filter(|l| l.contains("refused")).collect();
    assert!(
        (1..=10).contains(&refusals.len())
            && refusals
                .iter()
                .any(|l| l.contains("more daemon connections in the last")),
        "{} refusal lines\n{}",
        refusals.len(),
        f.dump()
    );
    f.assert_nothing_left();
}

/// RT-1, HB-3, NODE-2: without a host that is this machine every host needs a daemon;
/// when its launch agent fails, the node is lost before any process ran there and the
/// job ends with one line naming the host and why.
#[test]
fn a_host_whose_agent_fails_ends_the_job_with_a_clear_line() {
    let rt = Runtime::new("mh-none");
    let f = rt.run(&[
        "run",
        "-n",
        "1",
        "--host",
        "192.0.2.1:2",
        "--launch-agent",
        "false",
        "--",
        "true",
    ]);
    assert_eq!(f.code, Some(1), "{}", f.dump());
    let last = f.stderr.trim().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("dynres: job failed: rank 0 (on 192.0.2.1) lost: node 0 (192.0.2.1) lost: its launch agent exited"),
        "{}",
        f.dump()
    );
    // Nothing ran; nothing is left in the runtime directory (but the host's
    // calibrations, kept on purpose: launcher/src/runtime/calibrated.rs).
    let left = std::fs::read_dir(&rt.dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != ".calibration")
        .count();
    assert_eq!(left, 0, "{}", f.dump());
}

/// HB-1, HB-2: a daemon that stops answering (SIGSTOP: its link stays open) is a lost
/// node once 10 heartbeats went unanswered; woken up, it finds its link closed and ends
/// (RT-3).
#[test]
fn a_silent_daemon_is_a_lost_node() {
    let rt = Runtime::new("mh-silent");
    let (agent, log) = agent(&rt);
    let job = "mhsilent";
    let h = hosts(2, 2);
    let extra = strs(&["--heartbeat-ms", "50", "--", "sleep", "60"]);
    let cmd = run_cmd(&rt, job, 2, &h, &agent, &extra);
    let child = Running::start(cmd);
    rt.wait_for_job(job);
    let (daemon, _) = wait_daemon(&rt, job, &log, 1);
    // The daemon process itself (the agent's pid supervises it, RT-4).
    let daemon = runtime_of(daemon);
    signal(daemon, libc::SIGSTOP);
    rt.wait_status(job, "node 1 gone", |s| {
        node_state(s, 1) == Some("gone".into())
    });
    signal(daemon, libc::SIGCONT);
    signal(child.id(), libc::SIGTERM);
    let f = child.finish(rt.dir.clone(), Duration::from_secs(30));
    assert_eq!(f.code, Some(130), "{}", f.dump());
    assert!(
        f.stderr
            .lines()
            .any(|l| l.contains("node lost: its daemon was silent for") && l.contains("node=1 ")),
        "{}",
        f.dump()
    );
    f.assert_nothing_left();
}

/// The data plane across hosts: the runtime gives each host's processes their node's
/// address and identity, so members on one host use shared memory and members on
/// different hosts TCP (send/recv, barrier, bcast and allreduce all checked by the
/// `check` example).
#[test]
fn members_on_one_host_use_shm_and_across_hosts_tcp() {
    let rt = Runtime::new("mh-check");
    let (agent, _) = agent(&rt);
    let h = hosts(2, 2);
    let cmd = run_cmd(
        &rt,
        "mhcheck",
        3,
        &h,
        &agent,
        &strs(&["--example", "check"]),
    );
    let f = rt
        .run_bounded(cmd, Duration::from_secs(60))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stdout.contains("check: devices from 0: 1=shm 2=tcp"),
        "{}",
        f.dump()
    );
    assert!(f.stdout.contains("check: 3 processes ok"), "{}", f.dump());
    f.assert_nothing_left();
}

/// Collectives over a tree of host leaders: 5 members on 3 hosts (2, 2, 1) agree on
/// barrier, bcast and allreduce results (the `check` example verifies each).
#[test]
fn collectives_over_three_hosts_agree() {
    let rt = Runtime::new("mh-tree");
    let (agent, _) = agent(&rt);
    let h = hosts(3, 2);
    let cmd = run_cmd(&rt, "mhtree", 5, &h, &agent, &strs(&["--example", "check"]));
    let f = rt
        .run_bounded(cmd, Duration::from_secs(60))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stdout
            .contains("check: devices from 0: 1=shm 2=tcp 3=tcp 4=tcp"),
        "{}",
        f.dump()
    );
    assert!(f.stdout.contains("check: 5 processes ok"), "{}", f.dump());
    f.assert_nothing_left();
}

/// SPAWN-17, SPAWN-18 across hosts: host 1 is full with the two parents, so the master
/// places the three children on host 2, whose daemon (started for them) launches them
/// with the spawn's command; parents and children then talk across the hosts (the
/// `spawn` example checks point to point, the inter-communicator collectives and a
/// merge), twice.
#[test]
fn a_spawn_places_its_children_on_another_host() {
    let rt = Runtime::new("mh-spawn");
    let (agent, log) = agent(&rt);
    let cmd = run_cmd(
        &rt,
        "mhspawn",
        2,
        "127.0.0.1:2,127.0.0.2:3",
        &agent,
        &strs(&[
            "--example",
            "spawn",
            "--",
            "--children",
            "3",
            "--rounds",
            "2",
        ]),
    );
    let f = rt
        .run_bounded(cmd, Duration::from_secs(120))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stdout.contains("spawn: ok rounds=2 children=3 parents=2"),
        "{}",
        f.dump()
    );
    let nodes: Vec<u32> = daemons(&log).iter().map(|d| d.1).collect();
    assert_eq!(
        nodes,
        vec![1],
        "host 2's daemon ran the children\n{}",
        f.dump()
    );
    f.assert_nothing_left();
}

/// NODE-4, RT-3: a master that stalls past the daemons' heartbeat bound (here SIGSTOP)
/// makes a remote daemon end its node's processes on its own; that is a loss, not a
/// removal: the job ends non-zero naming the node, never 0 without that rank's work.
/// (Before NODE-4 the daemon reported them as killed on purpose and the job exited 0.)
#[test]
fn a_master_stall_that_ends_a_node_fails_the_job() {
    let rt = Runtime::new("mh-stall");
    let (agent, log) = agent(&rt);
    let job = "mhstall";
    let h = hosts(2, 2);
    // Ranks 0, 1 on the master's host finish after 6 s; ranks 2, 3 on host 2 would too.
    let extra = strs(&["--heartbeat-ms", "100", "--", "sleep", "6.25"]);
    let cmd = run_cmd(&rt, job, 4, &h, &agent, &extra);
    let child = Running::start(cmd);
    rt.wait_for_job(job);
    wait_daemon(&rt, job, &log, 1);
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while processes_running(&["sleep", "6.25"]).len() < 4 {
        assert!(
            std::time::Instant::now() < until,
            "the ranks never all started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let master = runtime_of(child.id());
    signal(master, libc::SIGSTOP);
    // Ten heartbeats of silence and a margin: the daemon gives up on the master.
    std::thread::sleep(Duration::from_millis(2500));
    signal(master, libc::SIGCONT);
    let f = child.finish(rt.dir.clone(), Duration::from_secs(30));
    let last = f.stderr.trim().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("dynres: job failed: ") && last.contains("127.0.0.2"),
        "the failure names the node\n{}",
        f.dump()
    );
    // The first failure's status: a rank its daemon killed (SIGKILL) is 128 + 9; one
    // whose end never reached the master (the link went first) has none, so 1.
    let want = if last.contains("(signal 9)") { 137 } else { 1 };
    assert_eq!(f.code, Some(want), "a rank's work was lost\n{}", f.dump());
}
