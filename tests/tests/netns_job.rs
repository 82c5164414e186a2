//! A job across real network hosts (issue 11, `spec/runtime.md`): three network-namespace
//! hosts on one bridge, each with its own sshd (`tests/netns/hosts.sh`). `dynres run`
//! runs inside host 1 and starts the daemons of hosts 2 and 3 with `ssh`; daemons connect
//! back over the bridge, processes on different hosts talk over TCP.
//!
//! Prints `skipped: <reason>` where network namespaces are not available (not root).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use dynres_tests::job::{Running, Runtime, dynres_bin, signal, wait_bounded};
use dynres_tests::netns::Hosts;

/// The launch agent: plain `ssh` with the test hosts' config. The remote command gets
/// this test's runtime directory and log level (ssh does not forward the environment),
/// and logs the daemon's pid (`exec` keeps it).
fn ssh_agent(rt: &Runtime, hosts: &Hosts) -> (PathBuf, PathBuf) {
    let dir = rt.scratch();
    let log = dir.join("agent.log");
    let script = dir.join("ssh-agent.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nh=$1; shift\nexec ssh -F {} \"$h\" \"echo \\$\\$ $h >> {}; DYNRES_RUNTIME_DIR={} DYNRES_LOG=debug exec $*\"\n",
            hosts.ssh_config().display(),
            log.display(),
            rt.dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (script, log)
}

fn in_host(hosts: &Hosts, i: usize, rt: &Runtime, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &hosts.namespace(i)])
        .arg(dynres_bin())
        .args(args)
        .env("DYNRES_RUNTIME_DIR", &rt.dir)
        .env("DYNRES_LOG", "debug")
        .stdin(std::process::Stdio::null());
    c
}

fn daemon_pid(log: &std::path::Path, host: &str) -> Option<u32> {
    std::fs::read_to_string(log)
        .ok()?
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(host))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// RT-1, RT-2, AUTH, LINK over ssh and a real network: the job starts on host 1, grows
/// onto hosts 2 and 3 (processes on different hosts use TCP), shrinks back and ends
/// cleanly, nothing left behind.
#[test]
fn a_job_grows_across_netns_hosts_over_ssh_and_shrinks_back() {
    let hosts = match Hosts::up_with_prefix("dyj", 3) {
        Ok(h) => h,
        Err(skip) => {
            println!("{skip}");
            return;
        }
    };
    let rt = Runtime::new("netns-job");
    let (agent, _) = ssh_agent(&rt, &hosts);
    let list = format!(
        "{}:2,{}:2,{}:2",
        hosts.addr(1),
        hosts.addr(2),
        hosts.addr(3)
    );
    let cmd = in_host(
        &hosts,
        1,
        &rt,
        &[
            "run",
            "-n",
            "2",
            "--job-id",
            "nj",
            "--host",
            &list,
            "--launch-agent",
            agent.to_str().unwrap(),
            "--example",
            "synthetic",
            "--",
            "--mode",
            "step",
            "--n-start",
            "2",
            "--n-limit",
            "6",
            "--n-delta",
            "4",
            "-f",
            "2",
            "-i",
            "40",
            "--problem-size",
            "1000000",
        ],
    );
    let f = rt
        .run_bounded(cmd, Duration::from_secs(180))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    for n in [1, 2] {
        let peer = format!("peer={}:", hosts.addr(n + 1));
        assert!(
            f.stderr
                .lines()
                .any(|l| l.contains("daemon up") && l.contains(&peer)),
            "node {n}'s daemon connects from its host's address\n{}",
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

/// NODE-1, NODE-2, SLOT-4 over a real network: SIGKILL of host 2's daemon is a lost
/// node; with `--on-loss continue` the job goes on and its next growth lands on host 3.
#[test]
fn a_killed_remote_daemon_is_a_lost_node_and_the_job_goes_on() {
    let hosts = match Hosts::up_with_prefix("dyk", 3) {
        Ok(h) => h,
        Err(skip) => {
            println!("{skip}");
            return;
        }
    };
    let rt = Runtime::new("netns-loss");
    let (agent, log) = ssh_agent(&rt, &hosts);
    let job = "nl";
    let list = format!(
        "{}:2,{}:2,{}:2",
        hosts.addr(1),
        hosts.addr(2),
        hosts.addr(3)
    );
    let child = Running::start(in_host(
        &hosts,
        1,
        &rt,
        &[
            "run",
            "-n",
            "2",
            "--job-id",
            job,
            "--host",
            &list,
            "--launch-agent",
            agent.to_str().unwrap(),
            "--on-loss",
            "continue",
            "--example",
            "synthetic",
            "--",
            "--mode",
            "none",
            "-i",
            "100000000",
            "--problem-size",
            "1000",
        ],
    ));
    rt.wait_for_job(job);
    // Onto host 2 and back: its daemon stays up with nothing to run. (The example does
    // not survive losing members of its communicator; the loopback test
    // `a_lost_node_with_processes_ends_the_job` covers a loss that takes processes.)
    for (op, k) in [("grow", "+2"), ("shrink", "-2")] {
        let r = rt.run(&[op, job, k]);
        assert!(r.stdout.contains("FINALIZED"), "{op}: {}", r.dump());
    }
    let pid = daemon_pid(&log, &hosts.addr(2)).expect("the agent logged host 2's daemon");
    signal(pid, libc::SIGKILL);
    rt.wait_status(job, "node 1 gone", |s| {
        s.lines()
            .any(|l| l.trim_start().starts_with("1 ") && l.ends_with("gone"))
    });
    let r = rt.run(&["grow", job, "+2"]);
    assert!(r.stdout.contains("FINALIZED"), "grow: {}", r.dump());
    rt.wait_status(job, "2 processes on host 3", |s| {
        s.lines()
            .filter(|l| l.contains("running on node 2"))
            .count()
            == 2
    });
    signal(child.id(), libc::SIGTERM);
    let f = wait_bounded(child.into_child(), rt.dir.clone(), Duration::from_secs(30))
        .unwrap_or_else(|f| panic!("the job did not end\n{}", f.dump()));
    assert_eq!(f.code, Some(130), "{}", f.dump());
    assert!(
        f.stderr
            .lines()
            .any(|l| l.contains("node lost") && l.contains("node=1 ")),
        "{}",
        f.dump()
    );
}
