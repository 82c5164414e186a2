//! The runtime inside a real Slurm allocation (`spec/runtime.md` RT-1, RT-2): a local
//! Slurm cluster of 3 logical nodes (`tests/slurm/slurm-local.sh`, slurmctld + 3 slurmd
//! on this machine), `salloc -N3`, and `dynres run` in it: host list and slots come from
//! Slurm, every node's daemon is a job step started with `srun`, and the job grows across
//! the nodes and shrinks back.
//!
//! Needs root and Slurm's daemons (`.ci/run` installs them); without them the test prints
//! `skipped: <reason>` (recorded by `dynres_tests::skip`) and passes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dynres_tests::job::{Running, Runtime, signal, synthetic_idle, synthetic_step};

fn which(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// Why this machine cannot run a local Slurm cluster, if it cannot.
fn unsupported() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (slurmd must run as root)".into());
    }
    for p in ["slurmctld", "slurmd", "salloc", "srun", "sinfo", "bc"] {
        if !which(p) {
            return Some(format!("{p} not installed (apt-get install slurm-wlm bc)"));
        }
    }
    None
}

/// A local cluster, stopped on drop.
struct Cluster {
    script: PathBuf,
    base: PathBuf,
    conf: PathBuf,
}

impl Cluster {
    /// Starts a cluster of `nodes`; tests running at the same time pass different
    /// `slot`s (directory and ports).
    fn start(nodes: u32, slot: u16) -> Cluster {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm/slurm-local.sh");
        let base = std::env::temp_dir().join(format!("dynres-slurm-{}-{slot}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        // Ports away from a cluster someone may run with the defaults.
        let port = 20_000 + (std::process::id() % 1_000) as u16 * 16 + slot * 8;
        let c = Cluster {
            conf: base.join("etc/slurm.conf"),
            script,
            base,
        };
        let out = c
            .cmd()
            .env("SLURM_LOCAL_CTLD_PORT", port.to_string())
            .env("SLURM_LOCAL_SLURMD_PORT", (port + 1).to_string())
            .args(["start", &nodes.to_string()])
            .output()
            .expect("run slurm-local.sh");
        assert!(
            out.status.success(),
            "slurm-local.sh start failed\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        c
    }

    /// `sinfo -N`'s state of each node, e.g. `[("n1", "allocated"), ("n2", "idle")]`.
    fn node_states(&self) -> Vec<(String, String)> {
        let out = Command::new("sinfo")
            .args(["-h", "-N", "-o", "%N %T"])
            .env("SLURM_CONF", &self.conf)
            .output()
            .expect("run sinfo");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let (n, st) = l.split_once(' ')?;
                Some((n.to_string(), st.trim().to_string()))
            })
            .collect()
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("bash");
        c.arg(&self.script)
            .env("SLURM_LOCAL_BASE", &self.base)
            .env("SLURM_LOCAL_AUTH", "none");
        c
    }
}

/// Waits until `sinfo` shows each node in its state. Slurm moves a released node
/// through COMPLETING (its epilog) before IDLE, which takes seconds on a quiet machine
/// and much longer on a loaded one (a 30 s limit once failed while a mutation run held
/// both cores), so the limit is generous: the wait ends as soon as the states hold.
fn wait_node_states(cluster: &Cluster, want: &[(&str, &str)]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let states = cluster.node_states();
        let holds = want
            .iter()
            .all(|(n, st)| states.iter().any(|s| s.0 == *n && s.1 == *st));
        if holds {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sinfo never showed {want:?}: {states:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.cmd().arg("stop").output();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// The `dynres run` under salloc: SIGKILLed when the test ends before it.
struct Master(u32);

impl Drop for Master {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions; a pid that already exited
        // (reaped by salloc) fails with ESRCH.
        unsafe {
            libc::kill(self.0 as libc::pid_t, libc::SIGKILL);
        }
    }
}

#[test]
fn a_job_in_a_slurm_allocation_runs_its_daemons_with_srun_and_grows_across_nodes() {
    if let Some(why) = unsupported() {
        dynres_tests::skip(why);
        return;
    }
    let cluster = Cluster::start(3, 0);
    let rt = Runtime::new("slurm");
    let mut cmd = Command::new("salloc");
    cmd.args(["-N3", "--exclusive", "--time=5"])
        .arg(dynres_tests::job::dynres_bin())
        // Its subject is growth across the allocation's nodes: emptied nodes are kept
        // (giving them back, and growing again with a second allocation, is the next
        // test's).
        .args(["run", "-n", "2", "--job-id", "sl", "--keep-nodes"])
        // Long enough iterations that the first change is decided while the job runs
        // (daemons started by srun take ~2 s to connect).
        .args(synthetic_step(2, 6, 4, 60, 3_000_000))
        .env("SLURM_CONF", &cluster.conf)
        .env("DYNRES_RUNTIME_DIR", &rt.dir)
        .env("DYNRES_LOG", "debug")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let f = rt
        .run_bounded(cmd, Duration::from_secs(180))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    // RT-1: the allocation's shell is not one of its nodes, so every node has a daemon,
    // each started as a job step on its node.
    for (n, host) in ["n1", "n2", "n3"].iter().enumerate() {
        assert!(
            f.stderr.lines().any(|l| l.contains("starting a daemon")
                && l.contains(&format!("node={n} "))
                && l.contains(&format!("host=\"{host}\""))
                && l.contains("agent=srun")),
            "node {n} ({host})\n{}",
            f.dump()
        );
    }
    let sizes: Vec<String> = f.csv().iter().map(|r| r[1].clone()).collect();
    let grown = sizes.iter().position(|s| s == "6");
    assert!(
        grown.is_some_and(|i| sizes[i..].iter().any(|s| s == "2")),
        "expected 2 → 6 → 2, got {sizes:?}\n{}",
        f.dump()
    );
    f.assert_nothing_left();
}

/// RC-20, SLOT-5: a shrink that empties nodes gives them back to Slurm (`sinfo` shows
/// them idle while the job runs on), and `dynres status` shows them returned. GROW-1..3,
/// RC-21: growing beyond the allocation obtains a node from Slurm (a second
/// allocation) whose daemon comes up like any other (NODE-3), shrinking gives it back,
/// and what Slurm cannot grant ends ABORTED.
#[test]
fn a_shrink_that_empties_nodes_gives_them_back_to_slurm() {
    if let Some(why) = unsupported() {
        dynres_tests::skip(why);
        return;
    }
    let cluster = Cluster::start(3, 1);
    let rt = Runtime::new("slurm-ret");
    let job = "slret";
    let mut cmd = Command::new("salloc");
    cmd.args(["-N3", "--exclusive", "--time=5"])
        .arg(dynres_tests::job::dynres_bin())
        .args(["run", "-n", "2", "--job-id", job, "--grow-wait-ms", "5000"])
        .args(synthetic_idle())
        .env("SLURM_CONF", &cluster.conf)
        .env("DYNRES_RUNTIME_DIR", &rt.dir)
        .env("DYNRES_LOG", "debug")
        .stdin(std::process::Stdio::null());
    let child = Running::start(cmd);
    let dir = rt.wait_for_job(job);
    // `dynres run` runs under salloc in a process group of its own: signal it directly,
    // and kill it if the test fails (its daemons then end, RT-3).
    let master = Master(
        std::fs::read_to_string(dir.join("pid"))
            .ok()
            .and_then(|p| p.split_whitespace().next()?.parse().ok())
            .expect("the runtime's pid file"),
    );
    // Onto n2 and n3 (2 slots each), then back to n1 alone.
    rt.change(job, "grow", "+4");
    rt.change(job, "shrink", "-4");
    let st = rt.wait_status(job, "n2 and n3 returned", |s| {
        s.lines()
            .filter(|l| l.ends_with("returned") && (l.contains(" n2 ") || l.contains(" n3 ")))
            .count()
            == 2
    });
    assert!(
        st.lines().any(|l| l.contains(" n1 ") && l.ends_with("up")),
        "{st}"
    );
    // Slurm has them back: idle while the job still holds n1.
    wait_node_states(
        &cluster,
        &[("n1", "allocated"), ("n2", "idle"), ("n3", "idle")],
    );
    // GROW-1, RC-21: growth beyond n1 asks Slurm for a second allocation; its node
    // (n2 or n3) joins the job and runs the new processes.
    rt.change(job, "grow", "+2");
    let st = rt.wait_status(job, "a granted node up", |s| {
        s.lines()
            .any(|l| l.trim_start().starts_with('3') && l.ends_with("up"))
    });
    let granted = if st
        .lines()
        .any(|l| l.trim_start().starts_with('3') && l.contains(" n2 "))
    {
        "n2"
    } else {
        "n3"
    };
    let allocated = cluster.node_states();
    assert!(
        allocated.contains(&(granted.to_string(), "allocated".to_string())),
        "sinfo after the grow onto {granted}: {allocated:?}\n{st}"
    );
    // GROW-2: shrinking it away gives the second allocation back.
    rt.change(job, "shrink", "-2");
    wait_node_states(&cluster, &[("n2", "idle"), ("n3", "idle")]);
    // RC-21: what Slurm cannot grant (4 more nodes of a 3-node cluster) ends ABORTED
    // with one clear line, and the job goes on.
    let r = rt.run(&["grow", job, "+8"]);
    assert!(
        r.code != Some(0) && r.stderr.contains("ABORTED") && r.stderr.contains("did not grant"),
        "grow beyond the cluster: {}",
        r.dump()
    );
    rt.wait_status(job, "the job still running", |s| {
        s.lines()
            .any(|l| l.trim_start().starts_with("0 ") && l.contains("running on node 0"))
    });
    signal(master.0, libc::SIGTERM);
    let f = child.finish(rt.dir.clone(), Duration::from_secs(60));
    // It ended: its pid may be reused, so the guard must not signal it any more.
    std::mem::forget(master);
    // GROW-4: the shrink that emptied n2 and n3 gave both back in one update (Slurm
    // without an accounting database resizes a job once only).
    assert!(
        f.stderr
            .lines()
            .any(|l| l.contains("node given back to Slurm job") && l.contains("hosts=\"n2,n3\"")),
        "{}",
        f.dump()
    );
    // GROW-3: no second allocation outlives the job.
    let out = Command::new("squeue")
        .args(["-h", "-o", "%j %T"])
        .env("SLURM_CONF", &cluster.conf)
        .output()
        .expect("run squeue");
    let queue = String::from_utf8_lossy(&out.stdout);
    assert!(
        !queue.lines().any(|l| l.starts_with("dynres-slret-grow")),
        "{queue}"
    );
}
