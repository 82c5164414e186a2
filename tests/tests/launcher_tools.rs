//! The tools a user runs beside a job (issue 32): `dynres kill`, `dynres status
//! --watch`, a waiting change's progress, and the man page and completions generated
//! from the CLI definition.

use std::time::Duration;

use dynres_tests::job::{Running, Runtime};

/// `dynres kill JOB` ends the job (its processes killed, nothing left, `dynres run`
/// exits as interrupted) and waits for it; a second kill finds no job and says where
/// it looked.
#[test]
fn kill_ends_a_job_and_leaves_nothing() {
    let rt = Runtime::new("kill");
    let job = "killed";
    let run = Running::adopt(rt.spawn(&[
        "run", "-n", "2", "--slots", "2", "--job-id", job, "--", "sleep", "60",
    ]));
    rt.wait_for_job(job);
    rt.wait_status(job, "two running processes", |s| {
        s.lines().filter(|l| l.ends_with("running")).count() == 2
    });
    let k = rt.run(&["kill", job]);
    assert_eq!(k.code, Some(0), "{}", k.dump());
    assert!(
        k.stderr.contains(&format!("job {job} ended")),
        "{}",
        k.dump()
    );
    let f = run.finish(rt.dir.clone(), Duration::from_secs(30));
    assert_eq!(f.code, Some(130), "interrupted, as by Ctrl-C\n{}", f.dump());
    f.assert_nothing_left();
    let again = rt.run(&["kill", job]);
    assert_eq!(again.code, Some(1), "{}", again.dump());
    assert!(
        again.stderr.contains("no running job")
            && again.stderr.contains(&rt.dir.display().to_string()),
        "{}",
        again.dump()
    );
    let bad = rt.run(&["kill", job, "--signal", "STOP"]);
    assert_eq!(
        bad.code,
        Some(2),
        "a signal it does not send is a usage error\n{}",
        bad.dump()
    );
}

/// `dynres status JOB --watch S` prints the status again and again while the job
/// runs, and ends with status 0 when the job does.
#[test]
fn status_watch_follows_the_job_until_it_ends() {
    let rt = Runtime::new("watch");
    let job = "watched";
    let run = Running::adopt(rt.spawn(&[
        "run", "-n", "1", "--slots", "1", "--job-id", job, "--", "sleep", "2",
    ]));
    rt.wait_for_job(job);
    let cmd = rt.command(&["status", job, "--watch", "0.2"]);
    let w = match rt.run_bounded(cmd, Duration::from_secs(60)) {
        Ok(f) => f,
        Err(f) => panic!("the watch did not end with the job\n{}", f.dump()),
    };
    assert_eq!(w.code, Some(0), "{}", w.dump());
    let shown = w.stdout.matches(&format!("--- job {job} at ")).count();
    assert!(shown >= 2, "printed {shown} times\n{}", w.dump());
    assert!(
        w.stderr.contains(&format!("job {job} has ended")),
        "{}",
        w.dump()
    );
    let f = run.finish(rt.dir.clone(), Duration::from_secs(30));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let missing = rt.run(&["status", "nojob", "--watch"]);
    assert_eq!(
        missing.code,
        Some(1),
        "a job that never ran is an error\n{}",
        missing.dump()
    );
}

/// A change the application never accepts waits for its decision (the change timeout);
/// meanwhile the tool says every few seconds that it still waits, and then prints
/// the abort.
#[test]
fn a_waiting_change_shows_progress_then_its_abort() {
    let rt = Runtime::new("progress");
    let job = "slowgrow";
    let run = Running::adopt(rt.spawn(&[
        "run",
        "-n",
        "1",
        "--slots",
        "2",
        "--change-timeout-ms",
        "6500",
        "--job-id",
        job,
        "--",
        "sleep",
        "60",
    ]));
    rt.wait_for_job(job);
    let g = rt.run(&["grow", job, "+1"]);
    assert_eq!(g.code, Some(1), "{}", g.dump());
    assert!(
        g.stderr.contains(&format!(
            "job {job}: grow 1: waiting for the decision (5 s)"
        )),
        "no progress line\n{}",
        g.dump()
    );
    assert!(
        g.stderr
            .contains("ABORTED: the change was not decided in time"),
        "the abort says why\n{}",
        g.dump()
    );
    assert_eq!(rt.run(&["kill", job]).code, Some(0));
    run.finish(rt.dir.clone(), Duration::from_secs(30))
        .assert_nothing_left();
}

/// The man page and the completion scripts come from the CLI definition: they name
/// its commands and options.
#[test]
fn man_page_and_completions_come_from_the_cli() {
    let rt = Runtime::new("docs");
    let man = rt.run(&["manpage"]);
    assert_eq!(man.code, Some(0), "{}", man.dump());
    assert!(
        man.stdout.starts_with(".ie") || man.stdout.contains(".TH dynres 1"),
        "{}",
        man.dump()
    );
    for cmd in ["grow", "shrink", "kill", "status"] {
        assert!(man.stdout.contains(cmd), "man page lacks {cmd}");
    }
    for (shell, mark) in [
        ("bash", "_dynres()"),
        ("zsh", "#compdef dynres"),
        ("fish", "complete -c dynres"),
    ] {
        let c = rt.run(&["completions", shell]);
        assert_eq!(c.code, Some(0), "{}", c.dump());
        assert!(c.stdout.contains(mark), "{shell}: {}", c.dump());
        assert!(
            c.stdout.contains("watch"),
            "{shell} completes status --watch"
        );
    }
    let bad = rt.run(&["completions", "tcsh"]);
    assert_eq!(bad.code, Some(2), "{}", bad.dump());
}

/// `run --event-log FILE` writes one JSON object per line — the job, every change's
/// statuses, every process' start and end — and `dynres plot FILE` draws it.
#[test]
fn the_event_log_records_the_run_and_plot_draws_it() {
    let rt = Runtime::new("events");
    let scratch = rt.scratch();
    let log = scratch.join("events.jsonl");
    let log_s = log.display().to_string();
    let mut args = vec!["run", "-n", "2", "--max", "4", "--event-log", &log_s];
    let step = dynres_tests::job::synthetic_step(2, 4, 2, 8, 1_000_000);
    args.extend(step.iter().map(String::as_str));
    let f = rt.run(&args);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        !f.stderr.contains("\"event\""),
        "events stay out of the log on stderr"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let of = |kind: &str| events.iter().filter(|e| e["event"] == kind).count();
    assert_eq!(of("job"), 1, "{text}");
    assert!(of("start") >= 4, "2 at the start, 2 added\n{text}");
    assert_eq!(of("start"), of("end"), "every process ended\n{text}");
    let decided: Vec<String> = events
        .iter()
        .filter(|e| e["event"] == "change" && e["status"] == "FINALIZED")
        .map(|e| {
            format!(
                "{}+{}-{}",
                e["kind"].as_str().unwrap(),
                e["added"],
                e["removed"]
            )
        })
        .collect();
    assert_eq!(decided[..2], ["ADD+2-0", "SUB+0-2"], "{text}");
    let times: Vec<u64> = events.iter().map(|e| e["t_ms"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "in order of time");
    let svg = scratch.join("run.svg");
    let p = rt.run(&["plot", &log_s, "-o", &svg.display().to_string()]);
    assert_eq!(p.code, Some(0), "{}", p.dump());
    let pic = std::fs::read_to_string(&svg).unwrap();
    assert!(
        pic.starts_with("<svg") && pic.contains("ADD +2 -0"),
        "{}",
        &pic[..pic.len().min(300)]
    );
    let junk = scratch.join("junk");
    std::fs::write(&junk, "hello\n").unwrap();
    let bad = rt.run(&["plot", &junk.display().to_string()]);
    assert_eq!(bad.code, Some(2), "{}", bad.dump());
    assert!(bad.stderr.contains("line 1"), "{}", bad.dump());
}

/// NAMES-1..3: a job started with `--data-server JOB` publishes and looks up in JOB's
/// data server. The `check` example (publish, a refused reserved key, a missing key, a
/// waiting lookup of every rank's key) passes in a job that uses another's; a second
/// such job finds the first one's keys there (publish never overwrites, so its own
/// publish of `check/0` or `check/1` is refused), which a job with its own data server
/// does not; a job that names no running job is refused before it starts; nothing is
/// left.
#[test]
fn a_job_uses_another_jobs_data_server() {
    let rt = Runtime::new("names");
    let missing = rt.run(&["run", "-n", "1", "--data-server", "nosuch", "--", "true"]);
    assert_eq!(missing.code, Some(1), "{}", missing.dump());
    assert!(
        missing
            .stderr
            .contains("--data-server nosuch: no running job nosuch"),
        "{}",
        missing.dump()
    );
    let server = "names-server";
    let run = Running::adopt(rt.spawn(&[
        "run", "-n", "1", "--slots", "1", "--job-id", server, "--", "sleep", "60",
    ]));
    rt.wait_for_job(server);
    let guest = [
        "run",
        "-n",
        "2",
        "--data-server",
        server,
        "--example",
        "check",
    ];
    let first = rt.run(&guest);
    assert_eq!(first.code, Some(0), "{}", first.dump());
    assert!(
        first.stdout.contains("check: 2 processes ok"),
        "{}",
        first.dump()
    );
    let second = rt.run(&guest);
    assert_ne!(second.code, Some(0), "{}", second.dump());
    // Whichever rank publishes first is refused, and the job ends with it.
    assert!(
        ["check/0", "check/1"].iter().any(|k| second
            .stderr
            .contains(&format!("key \"{k}\" is already published"))),
        "the first job's keys are in the shared server\n{}",
        second.dump()
    );
    let own = rt.run(&["run", "-n", "2", "--example", "check"]);
    assert_eq!(own.code, Some(0), "{}", own.dump());
    let k = rt.run(&["kill", server]);
    assert_eq!(k.code, Some(0), "{}", k.dump());
    let f = run.finish(rt.dir.clone(), Duration::from_secs(30));
    for job in [&first, &second, &own, &f] {
        job.assert_nothing_left();
    }
}
