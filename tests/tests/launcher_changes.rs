//! End-to-end resource changes on real processes: `dynres run` with the synthetic
//! example, which requests the changes itself (`--plan`).

use dynres_tests::job::Runtime;

const SMALL: &str = "20000";

fn synthetic(rt: &Runtime, job: &str, run: &[&str], app: &[&str]) -> dynres_tests::job::Finished {
    let mut args = vec!["run", "--job-id", job];
    args.extend_from_slice(run);
    args.extend_from_slice(&["--example", "synthetic", "--", "--problem-size", SMALL]);
    args.extend_from_slice(app);
    rt.run(&args)
}

fn status_line(stderr: &str, kind: &str, status: &str) -> bool {
    stderr
        .lines()
        .any(|l| l.contains(kind) && l.contains("mpi://rte/app/rc/") && l.ends_with(status))
}

#[test]
fn grow_by_4_shrink_by_2_and_replace() {
    let rt = Runtime::new("changes");
    let f = synthetic(
        &rt,
        "changes",
        &["-n", "2", "--max", "8"],
        &["--plan", "+4,-2,r1/1", "-i", "4", "-b"],
    );
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        status_line(&f.stderr, "ADD +4 -0", "FINALIZED"),
        "{}",
        f.dump()
    );
    assert!(
        status_line(&f.stderr, "SUB +0 -2", "FINALIZED"),
        "{}",
        f.dump()
    );
    assert!(
        status_line(&f.stderr, "REPLACE +1 -1", "FINALIZED"),
        "{}",
        f.dump()
    );
    let rows = f.csv();
    let sizes: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
    assert_eq!(sizes, ["2", "6", "4", "4"], "{}", f.dump());
    let events: Vec<&str> = rows.iter().map(|r| r[7].as_str()).collect();
    assert_eq!(
        events,
        ["add4:finalized", "sub2:finalized", "replace1:finalized", ""],
        "{}",
        f.dump()
    );
    // The removed processes (ranks 4, 5, then 3) exited on their own.
    assert!(!f.stderr.contains("killing"), "{}", f.dump());
    f.assert_nothing_left();
}

#[test]
fn non_blocking_accept_returns_pending_while_new_processes_start() {
    let rt = Runtime::new("nonblocking");
    let f = synthetic(
        &rt,
        "nonblocking",
        &["-n", "2", "--max", "5"],
        &["--plan", "+3", "-i", "2"],
    );
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let rows = f.csv();
    // The first accept can only be PENDING: it publishes the key the new processes'
    // confirm waits for. The job keeps iterating with 2 processes until it is decided.
    assert_eq!(rows[0][7], "add3:pending", "{}", f.dump());
    let fin = rows
        .iter()
        .position(|r| r[7] == "add3:finalized")
        .unwrap_or_else(|| panic!("never finalized\n{}", f.dump()));
    assert!(rows[..=fin].iter().all(|r| r[1] == "2"), "{}", f.dump());
    // The new processes joined the communicator and finished with the job.
    assert!(!rows[fin][6].is_empty(), "{}", f.dump());
    for rank in 2..5 {
        let line = format!("exited rank={rank} how=exit 0 cause=None");
        assert!(f.stderr.contains(&line), "{line}\n{}", f.dump());
    }
    f.assert_nothing_left();
}

#[test]
fn new_process_killed_during_confirm_aborts_and_the_job_continues() {
    let rt = Runtime::new("abort");
    // Ranks 0 and 1 start; the first change adds ranks 2 and 3; rank 2 dies (SIGKILL)
    // between the lookup and the fence of its confirm.
    let f = synthetic(
        &rt,
        "abort",
        &["-n", "2", "--max", "6"],
        &["--plan", "+2,+1", "-i", "3", "-b", "--die-in-confirm", "2"],
    );
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        status_line(&f.stderr, "ADD +2 -0", "ABORTED"),
        "{}",
        f.dump()
    );
    assert!(
        status_line(&f.stderr, "ADD +1 -0", "FINALIZED"),
        "{}",
        f.dump()
    );
    let rows = f.csv();
    let aborted = rows
        .iter()
        .position(|r| r[7] == "add2:aborted")
        .unwrap_or_else(|| panic!("no aborted row\n{}", f.dump()));
    // The job went on with its old pset, then grew by the second change.
    assert!(rows[..=aborted].iter().all(|r| r[1] == "2"), "{}", f.dump());
    assert_eq!(
        rows.last().map(|r| r[1].as_str()),
        Some("3"),
        "{}",
        f.dump()
    );
    f.assert_nothing_left();
}

#[test]
fn removed_process_ignoring_terminate_is_killed_after_the_grace_period() {
    let rt = Runtime::new("grace");
    let f = synthetic(
        &rt,
        "grace",
        &["-n", "2", "--max", "4", "--grace-ms", "200"],
        &["--plan", "+2,-2", "-i", "3", "-b", "--ignore-terminate"],
    );
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        status_line(&f.stderr, "SUB +0 -2", "FINALIZED"),
        "{}",
        f.dump()
    );
    for rank in [2, 3] {
        assert!(
            f.stderr
                .lines()
                .any(|l| l.contains("killing") && l.contains(&format!("rank={rank} "))),
            "rank {rank} not killed\n{}",
            f.dump()
        );
    }
    f.assert_nothing_left();
}
