//! RT-4: no process launched for a job outlives it — whatever it does to its process
//! group or session, whichever of the runtime's processes is killed, and whatever signal
//! ends `dynres run`. The ranks here are plain programs (no client library, so no
//! parent-death signal of their own): a shell that starts a `sleep` with a number no
//! other test uses, so that what is left can be found by its command line.

use std::time::Duration;

use dynres_tests::job::{Running, Runtime, processes_running, runtime_of, signal};

const LIMIT: Duration = Duration::from_secs(30);

/// `dynres run --job-id JOB -n 2 -- sh -c SCRIPT`, started and up.
fn start(rt: &Runtime, job: &str, script: &str) -> Running {
    let r =
        Running::start(rt.command(&["run", "--job-id", job, "-n", "2", "--", "sh", "-c", script]));
    rt.wait_for_job(job);
    r
}

/// Waits until `n` processes run `sleep SECS` (the ranks' children are up).
fn wait_sleeps(secs: &str, n: usize) {
    let until = std::time::Instant::now() + LIMIT;
    while processes_running(&["sleep", secs]).len() < n {
        assert!(
            std::time::Instant::now() < until,
            "the ranks' sleeps never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that no `sleep SECS` is left once the job's `dynres run` returned (the
/// supervisor returns only after its sweep, so no waiting is needed or allowed).
fn assert_none_left(secs: &str, what: &str) {
    let left = processes_running(&["sleep", secs]);
    assert!(
        left.is_empty(),
        "{what}: processes outlived the job: {left:?}"
    );
}

/// RT-4 (a): kill -9 of `dynres run` — the pid the user started — ends ranks that are
/// plain programs, and their children that left the process group and the session.
#[test]
fn kill_9_of_dynres_run_leaves_nothing() {
    let rt = Runtime::new("orph-run");
    let r = start(&rt, "orph-run", "setsid sleep 3701 & sleep 3701; true");
    wait_sleeps("3701", 4);
    signal(r.id(), libc::SIGKILL);
    // The user's pid is gone at once; the runtime it supervised ends the job as on
    // SIGTERM (its parent-death signal) — within bounded time.
    let f = r.wait(rt.dir.clone(), LIMIT);
    assert!(f.is_ok(), "dynres run did not die");
    let until = std::time::Instant::now() + LIMIT;
    while !processes_running(&["sleep", "3701"]).is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "processes outlived kill -9 of dynres run: {:?}",
            processes_running(&["sleep", "3701"])
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let until = std::time::Instant::now() + LIMIT;
    while rt.dir.join("orph-run").exists() {
        assert!(
            std::time::Instant::now() < until,
            "the job directory is left"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// RT-4 (a, b): the runtime process itself killed outright (SIGKILL, as a crash): its
/// supervisor ends every process of the job, `setsid` ones included, removes the job
/// directory and exits 137 with one line saying so.
#[test]
fn a_runtime_killed_outright_leaves_nothing() {
    let rt = Runtime::new("orph-rt");
    let r = start(&rt, "orph-rt", "setsid sleep 3702 & sleep 3702; true");
    wait_sleeps("3702", 4);
    signal(runtime_of(r.id()), libc::SIGKILL);
    let f = r.finish(rt.dir.clone(), LIMIT);
    assert_eq!(f.code, Some(137), "{}", f.dump());
    assert!(
        f.stderr.contains("died of signal 9") && f.stderr.contains("were ended"),
        "{}",
        f.dump()
    );
    assert_none_left("3702", "runtime killed");
    assert!(
        !rt.dir.join("orph-rt").exists(),
        "the job directory is left"
    );
}

/// RT-4 (c, d): at the end of a job (SIGTERM, SIGHUP of a closed terminal, SIGQUIT) the
/// grandchildren of wrapper ranks go with them; the job directory goes too.
#[test]
fn ending_signals_end_the_job_with_the_ranks_children() {
    for (sig, secs) in [
        (libc::SIGTERM, "3703"),
        (libc::SIGHUP, "3704"),
        (libc::SIGQUIT, "3705"),
    ] {
        let rt = Runtime::new("orph-end");
        let job = format!("orph-end-{sig}");
        let r = start(&rt, &job, &format!("sleep {secs}; true"));
        wait_sleeps(secs, 2);
        signal(r.id(), sig);
        let f = r.finish(rt.dir.clone(), LIMIT);
        assert_eq!(f.code, Some(130), "signal {sig}: {}", f.dump());
        assert!(f.stderr.contains("job interrupted"), "{}", f.dump());
        assert_none_left(secs, &format!("signal {sig}"));
        assert!(
            !rt.dir.join(&job).exists(),
            "signal {sig}: the job directory is left"
        );
    }
}

/// RT-4: SIGUSR1 and SIGUSR2 sent to `dynres run` reach every rank, as mpirun forwards
/// them, and do not end the job.
#[test]
fn usr_signals_are_forwarded_to_the_ranks() {
    let rt = Runtime::new("orph-usr");
    let script = "trap 'echo got-usr1' USR1; trap 'echo got-usr2; exit 0' USR2; \
                  echo ready; while :; do sleep 0.05; done";
    let r = start(&rt, "orph-usr", script);
    // Both ranks have their traps once `ready` could be printed; the status shows them up.
    rt.wait_status("orph-usr", "two ranks running", |s| {
        s.lines().filter(|l| l.contains("running")).count() >= 2
    });
    std::thread::sleep(Duration::from_millis(300));
    signal(r.id(), libc::SIGUSR1);
    std::thread::sleep(Duration::from_millis(500));
    signal(r.id(), libc::SIGUSR2);
    let f = r.finish(rt.dir.clone(), LIMIT);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    for rank in 0..2 {
        for what in ["got-usr1", "got-usr2"] {
            assert!(
                f.stdout.contains(&format!("[rank {rank}] {what}")),
                "rank {rank} did not get {what}\n{}",
                f.dump()
            );
        }
    }
}
