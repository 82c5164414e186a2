//! Unmodified MPI programs under `dynres run` through PMI-1 (`spec/pmi.md`, issue 31):
//! C programs built here with MPICH 5's `mpicc` (the PyPI wheel `mpich==5.0.2`, which
//! `.ci/run` installs into `target/mpi-venvs/mpich`; elsewhere `DYNRES_MPICH` names a
//! prefix with `bin/mpicc`), and shell ranks that speak PMI by hand as hostile clients.
//! Without the wheel the MPI tests print `skipped: <reason>`; the hostile-client tests
//! need no MPI and always run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dynres_tests::job::{Finished, Runtime};
use dynres_tests::mpi::{Mpi, local_agent};

fn mpich() -> Option<PathBuf> {
    Mpi::Mpich.prefix()
}

fn build(prefix: &Path, dir: &Path, name: &str, src: &str) -> PathBuf {
    Mpi::build(prefix, dir, name, src)
}

fn run(rt: &Runtime, args: &[&str]) -> Finished {
    Mpi::Mpich.run(rt, args)
}

const HELLO: &str = include_str!("mpi/hello.c");

use dynres_tests::mpi::check_hello;

#[test]
fn mpich_hello_ring_and_allreduce_on_one_host() {
    let Some(mpi) = mpich() else { return };
    let rt = Runtime::new("pmi-hello");
    let exe = build(&mpi, &rt.scratch(), "hello", HELLO);
    let exe = exe.to_str().unwrap();
    for n in [1u32, 2, 5] {
        // As mpirun takes it: the program without `--`.
        let f = run(&rt, &["run", "-n", &n.to_string(), "--oversubscribe", exe]);
        check_hello(&f, n);
        // MPICH links libmpi.so.12: PMI-1 only, no PMIx server.
        assert!(!f.stderr.contains("serving PMIx"), "{}", f.dump());
    }
    // PMIS-22: the shared memory a job of the same id left when it died in MPI_Init
    // (here planted: MPICH attaches to it and hangs or fails) is removed before the
    // launch; nothing of the job is left after it.
    let stale = std::path::Path::new("/dev/shm").join(format!(
        "{}0",
        dynres_runtime::mpich_shm_prefix("job-stale-kvs")
    ));
    std::fs::write(&stale, vec![0xa5u8; 4096]).unwrap();
    let f = run(&rt, &["run", "-n", "2", "--job-id", "stale-kvs", exe]);
    check_hello(&f, 2);
    assert!(!stale.exists(), "{}", f.dump());
    f.assert_nothing_left();
}

#[test]
fn mpich_hello_across_loopback_hosts() {
    let Some(mpi) = mpich() else { return };
    let rt = Runtime::new("pmi-hosts");
    let dir = rt.scratch();
    let exe = build(&mpi, &dir, "hello", HELLO);
    // The launch agent runs each daemon here: two daemons, each serving its ranks'
    // PMI, the barrier one modex across them.
    let agent = local_agent(&dir);
    let f = run(
        &rt,
        &[
            "run",
            "-n",
            "4",
            "--host",
            "127.0.0.1:2,127.0.0.2:2",
            "--launch-agent",
            agent.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
        ],
    );
    check_hello(&f, 4);
    assert!(f.stderr.contains("daemon up node=1"), "{}", f.dump());
}

const NAMES: &str = include_str!("mpi/names.c");

#[test]
fn mpich_publish_lookup_unpublish_go_through_the_data_server() {
    let Some(mpi) = mpich() else { return };
    let rt = Runtime::new("pmi-names");
    let exe = build(&mpi, &rt.scratch(), "names", NAMES);
    let f = run(&rt, &["run", "-n", "2", exe.to_str().unwrap()]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(f.stdout.contains("lookup rc=0 same=1"), "{}", f.dump());
    assert!(f.stdout.contains("after unpublish found=0"), "{}", f.dump());
    f.assert_nothing_left();
}

const SPAWN: &str = include_str!("mpi/spawn.c");

/// PMIS-10: MPI_Comm_spawn and MPI_Comm_spawn_multiple are the kernel's spawn; the
/// children merge with their parents; a spawn without slots is an MPI error; children
/// that die before they connect end the job (SPAWN-24).
#[test]
fn mpich_spawn_spawn_multiple_and_a_spawn_without_slots() {
    let Some(mpi) = mpich() else { return };
    let rt = Runtime::new("pmi-spawn");
    let dir = rt.scratch();
    let exe = build(&mpi, &dir, "spawn", SPAWN);
    let exe = exe.to_str().unwrap();
    for (mode, np, children) in [("single", 1u32, 2u32), ("single", 2, 2), ("multiple", 1, 3)] {
        Mpi::Mpich.check_spawn(&rt, exe, mode, np, children);
    }
    // Children on another daemon than their parents (a spawn of two commands, which the
    // daemon learns in one message, SPAWN-18).
    let agent = local_agent(&dir);
    let hosts = [
        "run",
        "-n",
        "2",
        "--host",
        "127.0.0.1:2,127.0.0.2:4",
        "--launch-agent",
    ];
    let mut args = hosts.to_vec();
    args.extend([agent.to_str().unwrap(), exe, "multiple"]);
    let f = run(&rt, &args);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let kids = f
        .stdout
        .lines()
        .filter(|l| l.contains("] child rank=") && l.ends_with("merged=5 sum=5"))
        .count();
    assert_eq!(kids, 3, "{}", f.dump());
    // 64 children on 4 slots: refused by the master (all or none, SPAWN-17), an error
    // MPI_Comm_spawn returns, nothing started, no hang.
    let f = run(&rt, &["run", "-n", "1", "--max", "4", exe, "noslots"]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stdout.contains("parent rank=0 spawn refused"),
        "{}",
        f.dump()
    );
    assert!(!f.stdout.contains("child"), "{}", f.dump());
    f.assert_nothing_left();
    Mpi::Mpich.check_child_dies(&rt, exe);
}

const CROSS: &str = include_str!("mpi/cross.c");

/// Two independent `dynres run` jobs connect and accept: the port travels in a file,
/// or by name through the server job's data server, which the client job uses
/// (`--data-server`, NAMES-1).
#[test]
fn mpich_connect_accept_between_two_jobs() {
    let Some(mpi) = mpich() else { return };
    let rt = Runtime::new("pmi-cross");
    let dir = rt.scratch();
    let exe = build(&mpi, &dir, "cross", CROSS);
    let (port, tmp) = (dir.join("port"), dir.join("port.tmp"));
    let (exe, port, tmp) = (
        exe.to_str().unwrap(),
        port.to_str().unwrap(),
        tmp.to_str().unwrap(),
    );
    let none: &[&str] = &[];
    Mpi::Mpich.check_cross(
        &rt,
        exe,
        (none, &["server", port, tmp]),
        (none, &["client", port]),
    );
    // NAMES-1: the port published by name in the server job's data server, which the
    // client job uses.
    let name = "name:dynres-cross";
    Mpi::Mpich.check_cross(
        &rt,
        exe,
        (&["--job-id", "cross-server"], &["server", name]),
        (&["--data-server", "cross-server"], &["client", name]),
    );
    // The server job on two loopback hosts, one rank each.
    let agent = local_agent(&dir);
    let server = [
        "--job-id",
        "cross-hosts",
        "--host",
        "127.0.0.1:1,127.0.0.2:1",
        "--launch-agent",
        agent.to_str().unwrap(),
    ];
    Mpi::Mpich.check_cross(
        &rt,
        exe,
        (&server, &["server", name]),
        (&["--data-server", "cross-hosts"], &["client", name]),
    );
}

const JOIN: &str = include_str!("mpi/join.c");

/// `MPI_Comm_join` over a TCP socket between two ranks of a job.
#[test]
fn mpich_comm_join() {
    let Some(mpi) = mpich() else { return };
    let rt = Runtime::new("pmi-join");
    let exe = build(&mpi, &rt.scratch(), "join", JOIN);
    let f = run(&rt, &["run", "-n", "2", exe.to_str().unwrap()]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    for r in 0..2 {
        let want = format!("join rank={r} remote=1 v=7");
        assert!(f.stdout.contains(&want), "{want}\n{}", f.dump());
    }
    f.assert_nothing_left();
}

const ABORT: &str = include_str!("mpi/abort.c");

#[test]
fn mpi_abort_and_a_killed_rank_end_the_job_and_leave_nothing() {
    let Some(mpi) = mpich() else { return };
    let rt = Runtime::new("pmi-abort");
    let dir = rt.scratch();
    let exe = build(&mpi, &dir, "abort", ABORT);
    let exe = exe.to_str().unwrap();
    // PMIS-7: MPI_Abort's code is the job's, and the log says who called it.
    let f = run(&rt, &["run", "-n", "3", "--oversubscribe", exe]);
    assert_eq!(f.code, Some(7), "{}", f.dump());
    assert!(f.stderr.contains("rank 1 called MPI_Abort"), "{}", f.dump());
    f.assert_nothing_left();
    // kill -9 of a rank mid-job: 128 + 9, the others ended.
    let f = run(&rt, &["run", "-n", "3", "--oversubscribe", exe, "kill"]);
    assert_eq!(f.code, Some(137), "{}", f.dump());
    f.assert_nothing_left();
    // PMIS-7 on another node: rank 1 runs on the second loopback host; its daemon
    // tells the master, whose exit status is the code (not the 137 of a killed rank).
    let agent = local_agent(&dir);
    let hosts = "127.0.0.1:1,127.0.0.2:2";
    let agent = agent.to_str().unwrap();
    let f = run(
        &rt,
        &[
            "run",
            "-n",
            "3",
            "--host",
            hosts,
            "--launch-agent",
            agent,
            exe,
        ],
    );
    assert_eq!(f.code, Some(7), "{}", f.dump());
    assert!(f.stderr.contains("rank 1 called MPI_Abort"), "{}", f.dump());
    f.assert_nothing_left();
}

/// A rank that is a bash script speaking PMI by hand (dash cannot redirect to a
/// descriptor above 9): it prints each reply it gets.
const HOSTILE: &str = r#"
fd=$PMI_FD
ask() { printf '%s\n' "$1" >&$fd; IFS= read -r reply <&$fd; echo "$2: $reply"; }
ask 'garbage' garbage
ask 'cmd=put kvsname=someone-else key=k value=v' otherkvs
ask 'cmd=get kvsname=someone-else key=k' otherget
ask 'cmd=initack pmiid=1' claim
ask 'cmd=get_my_kvsname' still
echo "foreign: ${PMI_PORT:-unset} ${PMIX_NAMESPACE:-unset} rank ${PMI_RANK} of ${PMI_SIZE}"
# The only socket this rank holds is its own PMI socket.
n=0; for f in /proc/$$/fd/*; do case "$(readlink "$f")" in socket:*) n=$((n+1));; esac; done
echo "sockets: $n"
# A line without end past the limit: an error, then the socket is closed.
head -c 5000 /dev/zero | tr '\0' x >&$fd
IFS= read -r reply <&$fd; echo "overlong: $reply"
if IFS= read -r more <&$fd; then echo "after: open"; else echo "after: closed"; fi
"#;

#[test]
fn hostile_pmi_clients_get_errors_and_touch_nothing() {
    let rt = Runtime::new("pmi-hostile");
    let script = rt.scratch().join("hostile.sh");
    std::fs::write(&script, HOSTILE).unwrap();
    // PMIS-9: another launcher's settings in dynres' own environment stay out.
    let mut cmd = rt.command(&["run", "-n", "2", "/bin/bash", script.to_str().unwrap()]);
    cmd.env("PMI_PORT", "10.0.0.1:7777")
        .env("PMIX_NAMESPACE", "slurm.pmix.1.0");
    let f = rt
        .run_bounded(cmd, Duration::from_secs(120))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    for rank in 0..2 {
        let line = |what: &str| f.rank_line(rank, what);
        // PMIS-3: malformed or forbidden commands get error replies ...
        for what in ["garbage", "otherkvs", "otherget", "claim"] {
            assert!(line(what).contains("rc=-1 msg="), "{what}: {}", line(what));
        }
        // ... and the session goes on untouched.
        assert!(line("still").starts_with("cmd=my_kvsname rc=0 kvsname="));
        assert_eq!(line("foreign"), format!("unset unset rank {rank} of 2"));
        // PMIS-2: no other rank's socket leaked into this one.
        assert_eq!(line("sockets"), "1");
        assert!(line("overlong").contains("rc=-1"), "{}", line("overlong"));
        assert_eq!(line("after"), "closed");
    }
    // PMIS-3: a closed PMI socket is not fatal to the job.
    f.assert_nothing_left();
}
