//! Unmodified MPI programs under `dynres run` through PMI-1 (`spec/pmi.md`, issue 31):
//! C programs built here with MPICH 5's `mpicc` (the PyPI wheel `mpich==5.0.2`, which
//! `.ci/run` installs into `target/mpi-venvs/mpich`; elsewhere `DYNRES_MPICH` names a
//! prefix with `bin/mpicc`), and shell ranks that speak PMI by hand as hostile clients.
//! Without the wheel the MPI tests print `skipped: <reason>`; the hostile-client tests
//! need no MPI and always run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dynres_tests::job::{Finished, Runtime};
use dynres_tests::skip::skip;

/// MPICH's prefix, or `None` after recording why the test is skipped.
fn mpich() -> Option<PathBuf> {
    let prefix = match std::env::var_os("DYNRES_MPICH") {
        Some(p) => PathBuf::from(p),
        None => {
            // target/debug/deps/<test> → target/mpi-venvs/mpich
            let exe = std::env::current_exe().ok()?;
            exe.parent()?.parent()?.parent()?.join("mpi-venvs/mpich")
        }
    };
    if prefix.join("bin/mpicc").exists() {
        Some(prefix)
    } else {
        skip(format!(
            "no MPICH at {} (`pip install mpich==5.0.2` into that venv, or set DYNRES_MPICH)",
            prefix.display()
        ));
        None
    }
}

/// Builds `src` with MPICH's `mpicc` into `dir/name`.
fn build(prefix: &Path, dir: &Path, name: &str, src: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&c, src).unwrap();
    let out = Command::new(prefix.join("bin/mpicc"))
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

/// MPICH's settings for these tests: the OFI netmod over TCP (the wheel's default
/// netmod makes business cards longer than `MPI_MAX_PORT_NAME`, so `MPI_Open_port`
/// fails under its own `mpiexec` too).
fn mpich_env(cmd: &mut Command) {
    cmd.env("MPIR_CVAR_CH4_NETMOD", "ofi")
        .env("FI_PROVIDER", "tcp");
}

/// Runs `dynres ARGS` bounded (a PMI bug would hang MPI_Init, not fail it).
fn run(rt: &Runtime, args: &[&str]) -> Finished {
    let mut cmd = rt.command(args);
    mpich_env(&mut cmd);
    rt.run_bounded(cmd, Duration::from_secs(120))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()))
}

const HELLO: &str = r#"
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long mine = rank, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    /* A ring: the token visits every rank once. */
    int token = 0;
    if (size > 1) {
        if (rank == 0) {
            token = 1;
            MPI_Send(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token++;
            MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
        }
    }
    printf("rank=%d size=%d sum=%ld token=%d\n", rank, size, sum, token);
    MPI_Finalize();
    return 0;
}
"#;

/// Checks HELLO's lines: every rank once, with the right size, sum and ring token.
fn check_hello(f: &Finished, n: u32) {
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let sum: u32 = (0..n).sum();
    for r in 0..n {
        let token = if n == 1 {
            0
        } else if r == 0 {
            n
        } else {
            r + 1
        };
        let want = format!("rank={r} size={n} sum={sum} token={token}");
        let seen = f.stdout.lines().filter(|l| l.ends_with(&want)).count();
        assert_eq!(seen, 1, "want {want:?} once\n{}", f.dump());
    }
    f.assert_nothing_left();
}

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
    }
}

#[test]
fn mpich_hello_across_loopback_hosts() {
    let Some(mpi) = mpich() else { return };
    let rt = Runtime::new("pmi-hosts");
    let dir = rt.scratch();
    let exe = build(&mpi, &dir, "hello", HELLO);
    // The launch agent runs each daemon here: two daemons, each serving its ranks'
    // PMI, the barrier one modex across them.
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, "#!/bin/sh\nshift\nexec \"$@\"\n").unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
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

const NAMES: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    int rank;
    char port[MPI_MAX_PORT_NAME] = "", seen[MPI_MAX_PORT_NAME] = "";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    if (rank == 0) {
        if (MPI_Open_port(MPI_INFO_NULL, port) != MPI_SUCCESS || !port[0]) return 2;
        if (MPI_Publish_name("dynres-svc", MPI_INFO_NULL, port) != MPI_SUCCESS) return 3;
    }
    MPI_Bcast(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 1) {
        int rc = MPI_Lookup_name("dynres-svc", MPI_INFO_NULL, seen);
        printf("lookup rc=%d same=%d\n", rc, rc == MPI_SUCCESS && port[0] && strcmp(seen, port) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) MPI_Unpublish_name("dynres-svc", MPI_INFO_NULL, port);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        int rc = MPI_Lookup_name("dynres-svc", MPI_INFO_NULL, seen);
        printf("after unpublish found=%d\n", rc == MPI_SUCCESS);
    }
    if (rank == 0) MPI_Close_port(port);
    MPI_Finalize();
    return 0;
}
"#;

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

const SPAWN: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    MPI_Comm parent, inter, merged;
    int rank, size, msize;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (parent == MPI_COMM_NULL) {
        int errs[64];
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int rc;
        if (strcmp(argv[1], "multiple") == 0) {
            char *cmds[2] = {argv[0], argv[0]};
            int n[2] = {1, 2};
            MPI_Info infos[2] = {MPI_INFO_NULL, MPI_INFO_NULL};
            rc = MPI_Comm_spawn_multiple(2, cmds, MPI_ARGVS_NULL, n, infos, 0, MPI_COMM_WORLD, &inter, errs);
        } else {
            int n = strcmp(argv[1], "noslots") == 0 ? 64 : 2;
            rc = MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
        }
        if (rc != MPI_SUCCESS) {
            printf("parent rank=%d spawn refused\n", rank);
            MPI_Finalize();
            return 0;
        }
        MPI_Intercomm_merge(inter, 0, &merged);
    } else {
        MPI_Intercomm_merge(parent, 1, &merged);
    }
    MPI_Comm_size(merged, &msize);
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, merged);
    printf("%s rank=%d of %d merged=%d sum=%d\n", parent == MPI_COMM_NULL ? "parent" : "child", rank, size, msize, sum);
    MPI_Comm_free(&merged);
    MPI_Finalize();
    return 0;
}
"#;

/// PMIS-10: MPI_Comm_spawn and MPI_Comm_spawn_multiple are the kernel's spawn; the
/// children merge with their parents; a spawn without slots is an MPI error.
#[test]
fn mpich_spawn_spawn_multiple_and_a_spawn_without_slots() {
    let Some(mpi) = mpich() else { return };
    let rt = Runtime::new("pmi-spawn");
    let dir = rt.scratch();
    let exe = build(&mpi, &dir, "spawn", SPAWN);
    let exe = exe.to_str().unwrap();
    for (mode, np, children) in [("single", 1u32, 2u32), ("single", 2, 2), ("multiple", 1, 3)] {
        let total = np + children;
        let f = run(
            &rt,
            &[
                "run",
                "-n",
                &np.to_string(),
                "--max",
                &total.to_string(),
                exe,
                mode,
            ],
        );
        assert_eq!(f.code, Some(0), "{mode}\n{}", f.dump());
        let parents = f
            .stdout
            .lines()
            .filter(|l| {
                l.contains("] parent rank=")
                    && l.ends_with(&format!("of {np} merged={total} sum={total}"))
            })
            .count();
        let kids = f
            .stdout
            .lines()
            .filter(|l| {
                l.contains("] child rank=") && l.ends_with(&format!("merged={total} sum={total}"))
            })
            .count();
        assert_eq!(
            (parents, kids),
            (np as usize, children as usize),
            "{mode} -n {np}\n{}",
            f.dump()
        );
        f.assert_nothing_left();
    }
    // Children on another daemon than their parents (a spawn of two commands: the
    // daemon learns it one command at a time).
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, "#!/bin/sh\nshift\nexec \"$@\"\n").unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
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
}

const CROSS: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char port[MPI_MAX_PORT_NAME] = "";
    MPI_Comm inter;
    int rank, v = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (strcmp(argv[1], "server") == 0) {
        if (rank == 0) {
            if (MPI_Open_port(MPI_INFO_NULL, port) != MPI_SUCCESS) return 2;
            FILE *f = fopen(argv[3], "w"); fputs(port, f); fclose(f);
            rename(argv[3], argv[2]);
        }
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter);
        if (rank == 0) { v = 42; MPI_Send(&v, 1, MPI_INT, 0, 0, inter); }
    } else {
        if (rank == 0) {
            FILE *f;
            while (!(f = fopen(argv[2], "r"))) usleep(10000);
            fgets(port, sizeof port, f); fclose(f);
        }
        MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter);
        if (rank == 0) MPI_Recv(&v, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
    }
    int rsize;
    MPI_Comm_remote_size(inter, &rsize);
    printf("%s rank=%d remote=%d v=%d\n", argv[1], rank, rsize, v);
    MPI_Comm_disconnect(&inter);
    MPI_Finalize();
    return 0;
}
"#;

/// Two independent `dynres run` jobs connect and accept (the port travels in a file).
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
    let mut server = rt.command(&["run", "-n", "2", exe, "server", port, tmp]);
    mpich_env(&mut server);
    let server = dynres_tests::job::Running::start(server);
    let client = run(&rt, &["run", "-n", "1", exe, "client", port]);
    let server = server.finish(rt.dir.clone(), Duration::from_secs(60));
    assert_eq!(client.code, Some(0), "{}", client.dump());
    assert_eq!(server.code, Some(0), "{}", server.dump());
    assert!(
        client.stdout.contains("client rank=0 remote=2 v=42"),
        "{}",
        client.dump()
    );
    assert!(
        server.stdout.contains("server rank=0 remote=1 v=42"),
        "{}",
        server.dump()
    );
    assert!(
        server.stdout.contains("server rank=1 remote=1 v=0"),
        "{}",
        server.dump()
    );
    client.assert_nothing_left();
    server.assert_nothing_left();
}

const JOIN: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
int main(int argc, char **argv) {
    int rank, fd = -1, v = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    struct sockaddr_in a; memset(&a, 0, sizeof a);
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (rank == 0) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        bind(l, (struct sockaddr *)&a, sizeof a); listen(l, 1);
        getsockname(l, (struct sockaddr *)&a, &len); port = ntohs(a.sin_port);
        MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
        fd = accept(l, NULL, NULL); close(l);
    } else if (rank == 1) {
        MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
        a.sin_port = htons(port);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        while (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) usleep(1000);
    }
    MPI_Comm inter;
    MPI_Comm_join(fd, &inter);
    if (rank == 0) { v = 7; MPI_Send(&v, 1, MPI_INT, 0, 0, inter); }
    else MPI_Recv(&v, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
    int rs; MPI_Comm_remote_size(inter, &rs);
    printf("join rank=%d remote=%d v=%d\n", rank, rs, v);
    MPI_Comm_disconnect(&inter); close(fd);
    MPI_Finalize();
    return 0;
}
"#;

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

const ABORT: &str = r#"
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        if (argc > 1) raise(SIGKILL);
        MPI_Abort(MPI_COMM_WORLD, 7);
    }
    /* The others wait for a message that never comes: the runtime must end them. */
    int x;
    MPI_Recv(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
"#;

#[test]
fn mpi_abort_and_a_killed_rank_end_the_job_and_leave_nothing() {
    let Some(mpi) = mpich() else { return };
    let rt = Runtime::new("pmi-abort");
    let exe = build(&mpi, &rt.scratch(), "abort", ABORT);
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
        let line = |what: &str| -> String {
            let prefix = format!("[rank {rank}] {what}: ");
            f.stdout
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("no {prefix:?}\n{}", f.dump()))
                .to_string()
        };
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
