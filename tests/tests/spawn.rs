//! MPI-2 dynamic processes end to end (`spec/spawn.md`, issue 12) with the `spawn`
//! example on real processes: spawn through the runtime (`SPAWN-17..20`) with the
//! handshake over real UDP/TCP (`SPAWN-1..16`), accept/connect and join between two
//! independent jobs, and the faults: children that die during the handshake, a port
//! closed under a connect, a spawn the runtime has no slots for. Every job must leave
//! nothing behind (processes, job directories, shared memory).

use std::time::Duration;

use dynres_core::replay::{Replayed, replay};
use dynres_tests::job::{Finished, Running, Runtime};

const LIMIT: Duration = Duration::from_secs(120);

fn run(rt: &Runtime, args: &[&str]) -> Finished {
    rt.run_bounded(rt.command(args), LIMIT)
        .unwrap_or_else(|f| panic!("job hung\n{}", f.dump()))
}

fn spawn_job(rt: &Runtime, job: &str, n: &str, max: &str, example: &[&str]) -> Finished {
    let mut args = vec!["run", "--job-id", job, "-n", n, "--max", max];
    args.extend(["--example", "spawn", "--"]);
    args.extend(example);
    run(rt, &args)
}

/// SPAWN-3, SPAWN-4, SPAWN-17, SPAWN-18: two parents spawn three children over two
/// commands, three times in a row; each time both sides check point to point, the
/// inter-communicator allreduce and broadcast, a merge (parents first) and an
/// allreduce over it. Slots come back between rounds (SPAWN-19): 2 + 3 fill all 5.
#[test]
fn parents_spawn_children_and_talk_to_them_round_after_round() {
    let rt = Runtime::new("spawn-rounds");
    let f = spawn_job(
        &rt,
        "spawn-rounds",
        "2",
        "5",
        &["--children", "3", "--multiple", "--rounds", "3"],
    );
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stdout.contains("spawn: ok rounds=3 children=3 parents=2"),
        "{}",
        f.dump()
    );
    for round in 0..3 {
        assert!(
            f.stdout
                .contains(&format!("spawn: round={round} ready_us=")),
            "{}",
            f.dump()
        );
    }
    // 2 parents + 3 × 3 children were launched, each by the runtime.
    assert_eq!(f.launched_pids().len(), 11, "{}", f.dump());
    f.assert_nothing_left();
}

/// SPAWN-8, SPAWN-19, SPAWN-20: children that die before or during the handshake fail
/// the spawn with an error at every parent; the survivors are killed, and the slots
/// come back — the clean spawn after it needs every slot of the job.
#[test]
fn children_dying_in_the_handshake_fail_the_spawn_and_leak_nothing() {
    for fault in ["all-die", "root-dies"] {
        let rt = Runtime::new(&format!("spawn-{fault}"));
        let f = spawn_job(
            &rt,
            &format!("spawn-{fault}"),
            "1",
            "4",
            &["--children", "3", "--fault", fault, "--timeout-ms", "20000"],
        );
        assert_eq!(f.code, Some(0), "{fault}: {}", f.dump());
        assert!(
            f.stdout.contains("spawn: failed as expected"),
            "{fault}: {}",
            f.dump()
        );
        assert!(
            f.stdout.contains("spawn: ok rounds=1 children=3 parents=1"),
            "{fault}: the clean spawn found its 3 slots again\n{}",
            f.dump()
        );
        f.assert_nothing_left();
    }
}

/// SPAWN-17: a spawn the job has no slots for fails with the runtime's reason.
#[test]
fn a_spawn_without_slots_fails_with_a_clear_error() {
    let rt = Runtime::new("spawn-noslots");
    let f = spawn_job(
        &rt,
        "spawn-noslots",
        "1",
        "2",
        &["--children", "3", "--timeout-ms", "1000"],
    );
    assert_ne!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stderr.contains("3 slots wanted, 1 free"),
        "the reason reaches the application: {}",
        f.dump()
    );
    f.assert_nothing_left();
}

/// SPAWN-1, SPAWN-4: accept/connect between two independent jobs that share nothing but
/// the port name; and `join` over a TCP connection the two jobs made themselves
/// (SPAWN-14).
#[test]
fn independent_jobs_connect_and_join() {
    for (server, client, what) in [
        ("serve", "connect", "Serve"),
        ("join-serve", "join", "JoinServe"),
    ] {
        let rt = Runtime::new(&format!("spawn-{server}"));
        let file = rt.scratch().join("rendezvous");
        let file = file.to_str().unwrap();
        let a_job = format!("{server}-a");
        let a = Running::start(rt.command(&[
            "run",
            "--job-id",
            &a_job,
            "-n",
            "1",
            "--example",
            "spawn",
            "--",
            server,
            file,
        ]));
        let b = spawn_job(&rt, &format!("{server}-b"), "1", "1", &[client, file]);
        let a = a.finish(rt.dir.clone(), LIMIT);
        assert_eq!(a.code, Some(0), "{server}: {}", a.dump());
        assert_eq!(b.code, Some(0), "{client}: {}", b.dump());
        assert!(
            a.stdout.contains(&format!("spawn: {what} ok")),
            "{}",
            a.dump()
        );
        a.assert_nothing_left();
        b.assert_nothing_left();
    }
}

/// SPAWN-8: a connect to a port that was closed fails with a typed error within its
/// bound instead of hanging.
#[test]
fn a_connect_to_a_closed_port_fails() {
    let rt = Runtime::new("spawn-closed");
    let file = rt.scratch().join("port");
    let file = file.to_str().unwrap();
    let a = spawn_job(&rt, "closed-a", "1", "1", &["serve-closed", file]);
    assert_eq!(a.code, Some(0), "{}", a.dump());
    let b = spawn_job(
        &rt,
        "closed-b",
        "1",
        "1",
        &["connect", file, "--timeout-ms", "2000"],
    );
    assert_ne!(b.code, Some(0), "{}", b.dump());
    assert!(
        ["timed out", "unreachable", "stream closed"]
            .iter()
            .any(|w| b.stdout.contains(w) || b.stderr.contains(w)),
        "a typed handshake error: {}",
        b.dump()
    );
    b.assert_nothing_left();
}

/// Trace conformance of real spawns (`spec/verification.md` §6): every transition the
/// parents' and the children's spawn machines recorded replays identically.
#[test]
fn a_real_spawn_replays_identically() {
    let rt = Runtime::new("spawn-trace");
    let scratch = rt.scratch();
    let trace = scratch.join("trace");
    let mut cmd = rt.command(&[
        "run",
        "--job-id",
        "spawn-trace",
        "-n",
        "2",
        "--max",
        "5",
        "--example",
        "spawn",
        "--",
        "--children",
        "3",
    ]);
    cmd.env("DYNRES_TRACE_FILE", &trace);
    let f = rt
        .run_bounded(cmd, LIMIT)
        .unwrap_or_else(|f| panic!("job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let mut all = Replayed::default();
    let mut files = 0;
    for e in std::fs::read_dir(&scratch).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "trace" || name.starts_with("trace.") {
            let text = std::fs::read_to_string(e.path()).unwrap();
            let r = replay(&text).unwrap_or_else(|d| panic!("{name} is not conformant: {d}"));
            assert_eq!(r.total_lines(), text.lines().count(), "{name}: every line");
            all.add(&r);
            files += 1;
        }
    }
    eprintln!("replayed {files} files: {:?}", all.transitions);
    for role in ["master", "spawn-parent", "spawn-handshake", "spawn-member"] {
        assert!(all.transitions_of(role) > 0, "{role} recorded: {all:?}");
    }
}
