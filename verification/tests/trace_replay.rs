//! Trace conformance: a recorded run replays identically; a trace that does not match
//! the kernel is rejected at the first differing transition.

use dynres_verification::record::record_scenarios;
use dynres_verification::trace::replay;

#[test]
fn recorded_flows_replay_identically() {
    let lines = record_scenarios();
    assert!(
        lines.len() > 100,
        "a real run records many transitions: {}",
        lines.len()
    );
    assert!(lines[0].starts_with("master start "));
    assert!(lines.iter().any(|l| l.starts_with("daemon ")));
    let text = lines.join("\n");
    assert_eq!(replay(&text), Ok(lines.len()));
}

#[test]
fn a_tampered_trace_is_rejected_where_it_differs() {
    let lines = record_scenarios();
    // Change the recorded state fingerprint of one master transition.
    let k = lines
        .iter()
        .position(|l| l.starts_with("master ") && !l.starts_with("master start"))
        .expect("a master transition");
    let mut tampered = lines.clone();
    let mut words: Vec<String> = tampered[k].split(' ').map(String::from).collect();
    let last = words.len() - 1;
    words[last] = (words[last].parse::<u64>().unwrap() ^ 1).to_string();
    tampered[k] = words.join(" ");
    let err = replay(&tampered.join("\n")).unwrap_err();
    assert_eq!(err.line, k + 1);
    assert!(err.what.contains("state differs"), "{err}");

    // Drop one daemon transition: the next one meets a different state.
    let d = lines
        .iter()
        .position(|l| l.starts_with("daemon "))
        .expect("a daemon transition");
    let mut dropped = lines.clone();
    dropped.remove(d);
    assert!(replay(&dropped.join("\n")).is_err());

    // Garbage is a typed refusal, not a panic.
    assert!(replay("master 1 zz 1 1").is_err());
    assert!(replay("daemon 0 5 0102 1 1").is_err());
}
