//! A job across real network hosts (issue 11, `spec/runtime.md`): three network-namespace
//! hosts on one bridge, each with its own sshd (`tests/netns/hosts.sh`). `dynres run`
//! runs inside host 1 and starts the daemons of hosts 2 and 3 with `ssh`; daemons connect
//! back over the bridge, processes on different hosts talk over TCP.
//!
//! Prints `skipped: <reason>` where network namespaces are not available (not root).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use dynres_tests::job::{Running, Runtime, dynres_bin, signal, synthetic_idle};
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

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn in_host(hosts: &Hosts, i: usize, rt: &Runtime, args: &[String]) -> Command {
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
/// onto hosts 2 and 3 (its communicator then spans hosts over TCP), shrinks back and
/// ends cleanly, nothing left behind.
#[test]
fn a_job_grows_across_netns_hosts_over_ssh_and_shrinks_back() {
    let hosts = match Hosts::up_with_prefix("dyj", 3) {
        Ok(h) => h,
        Err(skip) => {
            dynres_tests::skip(&skip.0);
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
    let job = "nj";
    let mut args = strs(&["run", "-n", "2", "--job-id", job, "--host", &list]);
    args.extend(strs(&["--launch-agent", agent.to_str().unwrap()]));
    args.extend(synthetic_idle());
    let child = Running::start(in_host(&hosts, 1, &rt, &args));
    rt.wait_for_job(job);
    // Each change is decided before the tool returns: onto hosts 2 and 3, and back.
    rt.change(job, "grow", "+4");
    let st = rt.run(&["status", job]).stdout;
    for n in [1, 2] {
        let on = st
            .lines()
            .filter(|l| l.contains(&format!("running on node {n} ({})", hosts.addr(n + 1))))
            .count();
        assert_eq!(on, 2, "node {n}\n{st}");
    }
    rt.change(job, "shrink", "-4");
    rt.wait_status(job, "back on host 1", |s| !s.contains("running on node"));
    signal(child.id(), libc::SIGTERM);
    let f = child.finish(rt.dir.clone(), Duration::from_secs(30));
    assert_eq!(f.code, Some(130), "{}", f.dump());
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
    f.assert_nothing_left();
}

/// NODE-1, NODE-2, SLOT-4 over a real network: SIGKILL of host 2's daemon is a lost
/// node; with `--on-loss continue` the job goes on and its next growth lands on host 3.
#[test]
fn a_killed_remote_daemon_is_a_lost_node_and_the_job_goes_on() {
    let hosts = match Hosts::up_with_prefix("dyk", 3) {
        Ok(h) => h,
        Err(skip) => {
            dynres_tests::skip(&skip.0);
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
    let mut args = strs(&["run", "-n", "2", "--job-id", job, "--host", &list]);
    args.extend(strs(&["--launch-agent", agent.to_str().unwrap()]));
    args.extend(strs(&["--on-loss", "continue"]));
    args.extend(synthetic_idle());
    let child = Running::start(in_host(&hosts, 1, &rt, &args));
    rt.wait_for_job(job);
    // Onto host 2 and back: its daemon stays up with nothing to run. (The example does
    // not survive losing members of its communicator; the loopback test
    // `a_lost_node_with_processes_ends_the_job` covers a loss that takes processes.)
    rt.change(job, "grow", "+2");
    rt.change(job, "shrink", "-2");
    let pid = daemon_pid(&log, &hosts.addr(2)).expect("the agent logged host 2's daemon");
    signal(pid, libc::SIGKILL);
    rt.wait_status(job, "node 1 gone", |s| {
        s.lines()
            .any(|l| l.trim_start().starts_with("1 ") && l.ends_with("gone"))
    });
    rt.change(job, "grow", "+2");
    rt.wait_status(job, "2 processes on host 3", |s| {
        s.lines()
            .filter(|l| l.contains("running on node 2"))
            .count()
            == 2
    });
    signal(child.id(), libc::SIGTERM);
    let f = child.finish(rt.dir.clone(), Duration::from_secs(30));
    assert_eq!(f.code, Some(130), "{}", f.dump());
    assert!(
        f.stderr
            .lines()
            .any(|l| l.contains("node lost") && l.contains("node=1 ")),
        "{}",
        f.dump()
    );
}
