//! What a job does when it loses a process (RC-18), and what tools learn about their
//! requests (RC-2, RC-15): end-to-end on real processes.

use dynres_tests::job::{Finished, Runtime, signal};

/// `dynres run -n 3 [extra] -- sh -c SCRIPT` to completion.
fn run_sh(rt: &Runtime, job: &str, extra: &[&str], script: &str) -> Finished {
    let mut args = vec!["run", "--job-id", job, "-n", "3", "--slots", "3"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    rt.run(&args)
}

fn exit_line(f: &Finished, rank: u32) -> Option<&str> {
    let tag = format!("rank={rank} ");
    f.stderr
        .lines()
        .find(|l| l.contains(" exited ") && l.contains(&tag))
}

/// RC-18: a process that fails ends the job: the others are killed (they would sleep
/// 30 s), the runtime names the rank and how it ended, and the job exits with the
/// rank's exit code (as mpirun).
#[test]
fn a_failed_process_ends_the_job_and_is_named() {
    let rt = Runtime::new("loss-end");
    let f = run_sh(
        &rt,
        "lossend",
        &[],
        r#"[ "$DYNRES_RANK" = 1 ] && exit 3; exec sleep 30"#,
    );
    assert_eq!(f.code, Some(3), "{}", f.dump());
    let last = f.stderr.trim().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("dynres: job failed: rank 1 (pid ")
            && last.contains("exited unexpectedly (exit 3)"),
        "{}",
        f.dump()
    );
    for r in [0, 2] {
        let l = exit_line(&f, r).unwrap_or_default();
        assert!(l.contains("cause=JobEnding"), "rank {r}: {l}\n{}", f.dump());
    }
    f.assert_nothing_left();
}

/// RC-18 with `--on-loss continue`: the survivors run to their end; the job still
/// reports the loss.
#[test]
fn with_on_loss_continue_the_survivors_finish() {
    let rt = Runtime::new("loss-cont");
    let f = run_sh(
        &rt,
        "losscont",
        &["--on-loss", "continue"],
        r#"[ "$DYNRES_RANK" = 1 ] && exit 3; sleep 0.5"#,
    );
    assert_eq!(f.code, Some(3), "the lost rank's code\n{}", f.dump());
    assert!(
        f.stderr.contains("dynres: job failed: lost ranks [1]"),
        "{}",
        f.dump()
    );
    for r in [0, 2] {
        let l = exit_line(&f, r).unwrap_or_default();
        assert!(
            l.contains("how=exit 0") && l.contains("cause=None"),
            "rank {r}: {l}\n{}",
            f.dump()
        );
    }
    f.assert_nothing_left();
}

/// A rank killed by a signal makes the job exit 128 + the signal (as a shell reports
/// it), and the first failure counts: rank 2's later exit 5 does not.
#[test]
fn a_rank_killed_by_a_signal_gives_128_plus_the_signal() {
    let rt = Runtime::new("loss-sig");
    let f = run_sh(
        &rt,
        "losssig",
        &["--on-loss", "continue"],
        r#"case "$DYNRES_RANK" in 1) kill -9 $$;; 2) sleep 0.5; exit 5;; esac"#,
    );
    assert_eq!(f.code, Some(137), "{}", f.dump());
    assert!(
        f.stderr.contains("dynres: job failed: lost ranks [1, 2]"),
        "{}",
        f.dump()
    );
    f.assert_nothing_left();
}

/// A process that exits with status 0 has finished: nothing is ended.
#[test]
fn a_process_that_finishes_early_ends_nothing() {
    let rt = Runtime::new("loss-clean");
    let f = run_sh(
        &rt,
        "lossclean",
        &[],
        r#"[ "$DYNRES_RANK" = 1 ] && exit 0; sleep 0.5"#,
    );
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        !f.stderr
            .lines()
            .any(|l| l.contains("cause=") && !l.contains("cause=None")),
        "nothing was killed: {}",
        f.dump()
    );
}

/// RC-18 in a malleable job: kill -9 of rank 1 while the synthetic grows and shrinks
/// every iteration. The job ends with a message naming rank 1 and signal 9, no change
/// is finalized after the loss, and nothing is left behind.
#[test]
fn kill_9_of_a_rank_mid_job_ends_it_cleanly() {
    for victim in [1, 0] {
        let rt = Runtime::new("kill9");
        let job = format!("kill9r{victim}");
        let child = rt.spawn(&[
            "run",
            "-n",
            "3",
            "--max",
            "8",
            "--job-id",
            &job,
            "--example",
            "synthetic",
            "--",
            "--mode",
            "step",
            "--n-start",
            "3",
            "--n-limit",
            "8",
            "--n-delta",
            "2",
            "-f",
            "1",
            "-i",
            "100000",
            "--problem-size",
            "2000000",
        ]);
        rt.wait_for_job(&job);
        // Let a few changes happen first.
        rt.wait_status(&job, "a finalized change", |s| s.contains("FINALIZED"));
        let pid = rt.pid_of(&job, victim);
        signal(pid, libc::SIGKILL);
        let f = Finished::new(child.wait_with_output().unwrap(), rt.dir.clone());
        assert_eq!(f.code, Some(128 + 9), "{}", f.dump());
        let last = f.stderr.trim().lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&format!("dynres: job failed: rank {victim} (pid {pid})"))
                && last.contains("(signal 9)"),
            "{}",
            f.dump()
        );
        let lines: Vec<&str> = f.stderr.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains(&format!("rank={victim} how=signal 9")))
            .expect("the exit is logged");
        assert!(
            !lines[at..].iter().any(|l| l.ends_with("FINALIZED")),
            "a change was finalized after the loss\n{}",
            f.dump()
        );
        f.assert_nothing_left();
    }
}

/// RC-2, RC-15: tools wait for the decision of their own request and learn refusals,
/// also of a request that waited in the queue; bad counts are refused with one line
/// before or by the job, which stays healthy.
#[test]
fn tools_learn_the_final_outcome_of_their_request() {
    let rt = Runtime::new("toolwait");
    let job = "toolwait";
    let child = rt.spawn(&[
        "run",
        "-n",
        "2",
        "--max",
        "8",
        "--job-id",
        job,
        "--example",
        "synthetic",
        "--",
        "--mode",
        "none",
        "-i",
        "1000000",
        "--problem-size",
        "1000",
    ]);
    rt.wait_for_job(job);
    let g = rt.run(&["grow", job, "+2"]);
    assert_eq!(g.code, Some(0), "{}", g.dump());
    assert!(
        g.stdout.trim().ends_with("FINALIZED"),
        "waits for the decision: {}",
        g.dump()
    );
    let n = rt.run(&["grow", job, "+2", "--no-wait"]);
    assert_eq!(n.code, Some(0), "{}", n.dump());
    assert!(
        n.stdout.contains("ANNOUNCED") || n.stdout.contains("queued"),
        "{}",
        n.dump()
    );
    // 6 processes of 8 slots once the last one is in: 4 more cannot fit, whether the
    // request is refused at once or when it leaves the queue.
    let q = rt.run(&["grow", job, "+4"]);
    assert_ne!(q.code, Some(0), "{}", q.dump());
    assert!(
        q.stderr.trim().lines().count() == 1 && q.stderr.contains("slots"),
        "{}",
        q.dump()
    );
    rt.wait_status(job, "6 processes", |s| {
        s.lines().filter(|l| l.ends_with("running")).count() == 6
    });
    let bad: &[&[&str]] = &[
        &["replace", job, "-6", "+1"],
        &["grow", job, "+4294967295"],
        &["grow", job, "+16777216"],
        &["grow", job, "-3"],
        &["shrink", job, "+1"],
    ];
    for args in bad {
        let f = rt.run(args);
        assert_ne!(f.code, Some(0), "{args:?}\n{}", f.dump());
        assert_eq!(f.stderr.trim().lines().count(), 1, "{args:?}\n{}", f.dump());
    }
    // Still healthy: a valid change goes through.
    let s = rt.run(&["shrink", job, "-1"]);
    assert_eq!(s.code, Some(0), "{}", s.dump());
    assert!(s.stdout.contains("FINALIZED"), "{}", s.dump());
    signal(child.id(), libc::SIGTERM);
    let f = Finished::new(child.wait_with_output().unwrap(), rt.dir.clone());
    assert_eq!(f.code, Some(130), "{}", f.dump());
    f.assert_nothing_left();
}
