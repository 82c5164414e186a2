//! Trace conformance of a real launcher run (`spec/verification.md` §6): a job that grows
//! and shrinks runs with `DYNRES_TRACE_FILE`; every recorded transition of the master and
//! the daemon replays identically against fresh kernel machines
//! (`dynres_core::replay`, the code `dynres-verification replay` runs), and a tampered
//! recording does not.

use std::path::PathBuf;

use dynres_core::replay::{Replayed, replay};
use dynres_tests::job::Runtime;

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
    eprintln!(
        "replayed {recorded} lines from {} file(s): {:?}",
        files.len(),
        all.transitions
    );

    // The same recording with one master state fingerprint changed is refused at that
    // line, and one with a daemon transition's outputs fingerprint changed at that one.
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let k = lines
        .iter()
        .position(|l| l.starts_with("master ") && !l.starts_with("master start"))
        .expect("a master transition");
    let mut tampered: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mut words: Vec<String> = tampered[k].split(' ').map(String::from).collect();
    let last = words.len() - 1;
    words[last] = (words[last].parse::<u64>().unwrap() ^ 1).to_string();
    tampered[k] = words.join(" ");
    let err = replay(&tampered.join("\n")).unwrap_err();
    assert_eq!(err.line, k + 1, "{err}");
    assert!(err.what.contains("state differs"), "{err}");

    let d = lines
        .iter()
        .position(|l| l.starts_with("daemon "))
        .expect("a daemon transition in the master process (its own node)");
    let mut tampered: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mut words: Vec<String> = tampered[d].split(' ').map(String::from).collect();
    words[4] = (words[4].parse::<u64>().unwrap() ^ 1).to_string();
    tampered[d] = words.join(" ");
    let err = replay(&tampered.join("\n")).unwrap_err();
    assert_eq!(err.line, d + 1, "{err}");
    assert!(err.what.contains("outputs differ"), "{err}");
}
