//! Trace conformance of a real launcher run (`spec/verification.md` §6): a job that grows
//! and shrinks runs with `DYNRES_TRACE_FILE`; every recorded transition of the master and
//! the daemon replays identically against fresh kernel machines
//! (`dynres_core::replay`, the code `dynres-verification replay` runs), and a tampered
//! recording does not. A second run spans two loopback hosts inside a stand-in Slurm
//! allocation, so that the runtime's decision machines are recorded too: the master's
//! failure detector (`liveness`), the node daemon's watch of its master
//! (`master-watch`) and the hold on emptied nodes (`giveback`). A third run takes tool
//! requests (`dynres grow/shrink`), so that the master's answers to them (`tool-desk`)
//! are recorded and replayed too.

use std::path::PathBuf;

use dynres_core::replay::{Replayed, replay};
use dynres_tests::job::{Running, Runtime};

/// Flips the lowest bit of word `word` (counted from the end when `from_end`) of the
/// first transition line of `text` that starts with `role` (not its `start` line), and
/// checks that replay refuses the recording at that line because `what` ("state
/// differs", "outputs differ").
fn tampered_is_refused(text: &str, role: &str, word: usize, from_end: bool, what: &str) {
    let lines: Vec<&str> = text.lines().collect();
    let k = lines
        .iter()
        .position(|l| l.starts_with(role) && !l.contains(" start "))
        .unwrap_or_else(|| panic!("no {role}transition"));
    let mut tampered: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mut words: Vec<String> = tampered[k].split(' ').map(String::from).collect();
    let w = if from_end {
        words.len() - 1 - word
    } else {
        word
    };
    words[w] = (words[w].parse::<u64>().unwrap() ^ 1).to_string();
    tampered[k] = words.join(" ");
    let err = replay(&tampered.join("\n")).unwrap_err();
    assert_eq!(err.line, k + 1, "{role}: {err}");
    assert!(err.what.contains(what), "{role}: {err}");
}

/// The trace files of one run: `trace` (the master process) and `trace.<pid>` (others).
fn trace_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("scratch dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "trace" || n.starts_with("trace."))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_launcher_run_with_a_grow_and_a_shrink_replays_identically() {
    let rt = Runtime::new("trace");
    let scratch = rt.scratch();
    let trace = scratch.join("trace");
    let mut cmd = rt.command(&[
        "run",
        "--job-id",
        "trace",
        "-n",
        "2",
        "--max",
        "6",
        "--example",
        "synthetic",
        "--",
        "--problem-size",
        "20000",
        "--plan",
        "+3,-2",
        "-i",
        "4",
        "-b",
    ]);
    cmd.env("DYNRES_TRACE_FILE", &trace);
    let f = rt
        .run_bounded(cmd, std::time::Duration::from_secs(120))
        .unwrap_or_else(|f| panic!("job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let events: Vec<String> = f.csv().iter().map(|r| r[7].clone()).collect();
    assert!(
        events.iter().any(|e| e == "add3:finalized")
            && events.iter().any(|e| e == "sub2:finalized"),
        "the grow and the shrink happened: {events:?}\n{}",
        f.dump()
    );

    let files = trace_files(&scratch);
    assert!(
        files.contains(&trace),
        "the master process wrote {}",
        trace.display()
    );
    let mut all = Replayed::default();
    let mut recorded = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read trace");
        recorded += text.lines().count();
        let r =
            replay(&text).unwrap_or_else(|d| panic!("{} is not conformant: {d}", file.display()));
        all.add(&r);
    }
    assert_eq!(all.total_lines(), recorded, "every recorded line replayed");
    assert!(all.transitions_of("master") > 0, "{all:?}");
    assert!(all.transitions_of("daemon") > 0, "{all:?}");
    // The master tells its tool desk every change's status, whoever asked for it.
    assert!(all.transitions_of("tool-desk") >= 1, "{all:?}");
    eprintln!(
        "replayed {recorded} lines from {} file(s): {:?}",
        files.len(),
        all.transitions
    );

    // The same recording with one master state fingerprint changed is refused at that
    // line, and one with a daemon transition's outputs fingerprint changed at that one.
    let text = std::fs::read_to_string(&trace).unwrap();
    tampered_is_refused(&text, "master ", 0, true, "state differs");
    // A daemon transition in the master process (its own node): `daemon NODE NOW
    // INPUT OUTPUTS STATE`.
    tampered_is_refused(&text, "daemon ", 4, false, "outputs differ");
}

/// A launch agent that runs the daemon here (`AGENT HOST dynres daemon …`: drops the
/// host, as `tests/tests/multihost.rs`'s agent does), and an `scontrol` that accepts
/// every update: the run's Slurm allocation is a stand-in, so no Slurm (and no root)
/// is needed. Returns (agent, directory to put first on `PATH`).
fn stand_in_slurm(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let write = |path: &std::path::Path, text: &str| {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let agent = dir.join("agent.sh");
    write(&agent, "#!/bin/sh\nshift\nexec \"$@\"\n");
    let log = dir.join("scontrol.log");
    write(
        &bin.join("scontrol"),
        &format!("#!/bin/sh\necho \"$*\" >> {}\nexit 0\n", log.display()),
    );
    (agent, bin)
}

/// Trace conformance of the runtime's decision machines in a real run: a job of 2 on
/// the first of two loopback hosts (2 slots each) of a stand-in Slurm allocation grows
/// by 2 onto the second host (its daemon is launched, authenticates and heartbeats) and
/// shrinks by 2, which empties that host; the engine's give-back hold offers it back
/// (RC-20, GROW-4), its daemon is told to end. Every file replays identically, with
/// transitions of `liveness`, `master-watch` and `giveback`, and a changed line of each
/// new role is refused at that line.
#[test]
fn a_run_over_two_hosts_records_liveness_watch_and_giveback() {
    let rt = Runtime::new("trace-mh");
    let scratch = rt.scratch();
    let trace = scratch.join("trace");
    let (agent, bin) = stand_in_slurm(&scratch);
    let agent = agent.display().to_string();
    let mut cmd = rt.command(&[
        "run",
        "--job-id",
        "tracemh",
        "-n",
        "2",
        "--launch-agent",
        &agent,
        "--grow-wait-ms",
        "0",
        "--heartbeat-ms",
        "200",
        "--example",
        "synthetic",
        "--",
        "--problem-size",
        "2000000",
        "--plan",
        "+2,-2",
        "-i",
        "6",
        "-b",
    ]);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![bin];
    dirs.extend(std::env::split_paths(&path));
    cmd.env("PATH", std::env::join_paths(dirs).unwrap())
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_JOB_NODELIST", "127.0.0.1,127.0.0.2")
        .env("SLURM_JOB_CPUS_PER_NODE", "2(x2)")
        .env("DYNRES_TRACE_FILE", &trace);
    let f = rt
        .run_bounded(cmd, std::time::Duration::from_secs(120))
        .unwrap_or_else(|f| panic!("job hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let said = std::fs::read_to_string(scratch.join("scontrol.log")).unwrap_or_default();
    assert!(
        said.contains("update JobId=4242 NodeList=127.0.0.1"),
        "the emptied host was given back to the allocation: {said:?}\n{}",
        f.dump()
    );

    let files = trace_files(&scratch);
    assert!(files.len() >= 2, "the master's and the daemon's: {files:?}");
    let mut all = Replayed::default();
    let mut recorded = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read trace");
        recorded += text.lines().count();
        let r =
            replay(&text).unwrap_or_else(|d| panic!("{} is not conformant: {d}", file.display()));
        all.add(&r);
    }
    assert_eq!(all.total_lines(), recorded, "every recorded line replayed");
    for role in ["master", "daemon", "liveness", "master-watch", "giveback"] {
        assert!(all.transitions_of(role) > 0, "{role}: {all:?}");
    }
    eprintln!(
        "replayed {recorded} lines from {} file(s): lines {:?}, transitions {:?}",
        files.len(),
        all.lines,
        all.transitions
    );

    // In the master's file, a changed state fingerprint of the first liveness and
    // give-back transition is refused at its line; so is one of the daemon's first
    // master-watch transition in its own file.
    let daemon_file = files
        .iter()
        .find(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .any(|l| l.starts_with("master-watch ") && !l.contains(" start "))
        })
        .expect("a file with master-watch transitions");
    for (file, role) in [
        (&trace, "liveness "),
        (&trace, "giveback "),
        (daemon_file, "master-watch "),
    ] {
        let text = std::fs::read_to_string(file).unwrap();
        tampered_is_refused(&text, role, 0, true, "state differs");
    }
}

/// Trace conformance of the master's tool desk (TOOL-1..3) in a real run: a job of 2
/// `sleep`s (which never accept a change) is asked by tools to shrink by 2 (refused at
/// once: it would remove the whole application, an error that a trace carries as its
/// code and text), to grow by 1 without waiting (announced) and to grow by 1 waiting
/// (queued behind that change, then started and aborted when neither is decided in
/// time). Every file replays identically, with `tool-desk` transitions, and a changed
/// state fingerprint of one is refused at its line.
#[test]
fn tool_requests_to_a_running_job_record_and_replay_the_tool_desk() {
    let rt = Runtime::new("trace-tools");
    let scratch = rt.scratch();
    let trace = scratch.join("trace");
    let job = "tracetools";
    let mut cmd = rt.command(&[
        "run",
        "-n",
        "2",
        "--slots",
        "4",
        "--change-timeout-ms",
        "1500",
        "--job-id",
        job,
        "--",
        "sleep",
        "60",
    ]);
    cmd.env("DYNRES_TRACE_FILE", &trace);
    let run = Running::start(cmd);
    rt.wait_for_job(job);
    rt.wait_status(job, "two running processes", |s| {
        s.lines().filter(|l| l.ends_with("running")).count() == 2
    });
    let shrink = rt.run(&["shrink", job, "-2"]);
    assert_ne!(shrink.code, Some(0), "refused\n{}", shrink.dump());
    let nowait = rt.run(&["grow", job, "+1", "--no-wait"]);
    assert_eq!(nowait.code, Some(0), "{}", nowait.dump());
    let waited = rt.run(&["grow", job, "+1"]);
    assert_eq!(waited.code, Some(1), "{}", waited.dump());
    assert!(
        waited.stderr.contains("ABORTED"),
        "the waiting tool heard its abort\n{}",
        waited.dump()
    );
    let k = rt.run(&["kill", job]);
    assert_eq!(k.code, Some(0), "{}", k.dump());
    let f = run.finish(rt.dir.clone(), std::time::Duration::from_secs(30));
    assert_eq!(f.code, Some(130), "interrupted by the kill\n{}", f.dump());

    let files = trace_files(&scratch);
    let mut all = Replayed::default();
    let mut recorded = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read trace");
        recorded += text.lines().count();
        let r =
            replay(&text).unwrap_or_else(|d| panic!("{} is not conformant: {d}", file.display()));
        all.add(&r);
    }
    assert_eq!(all.total_lines(), recorded, "every recorded line replayed");
    // Three tools: at least asked and handled each, two changes started, statuses.
    assert!(all.transitions_of("tool-desk") >= 6, "{all:?}");
    assert!(all.transitions_of("master") > 0, "{all:?}");
    eprintln!(
        "replayed {recorded} lines from {} file(s): lines {:?}, transitions {:?}",
        files.len(),
        all.lines,
        all.transitions
    );

    let text = std::fs::read_to_string(&trace).unwrap();
    tampered_is_refused(&text, "tool-desk ", 0, true, "state differs");
}
