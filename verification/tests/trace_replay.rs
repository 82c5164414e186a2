//! Trace conformance: a recorded run replays identically; a trace that does not match
//! the kernel is rejected at the first differing transition.

use dynres_verification::record::{record_scenarios, record_spawn};
use dynres_verification::trace::replay;

/// Flips the last bit of word `w` (a decimal fingerprint) of `line`.
fn flip(line: &str, w: usize) -> String {
    let mut words: Vec<String> = line.split(' ').map(String::from).collect();
    let w = if w == usize::MAX { words.len() - 1 } else { w };
    words[w] = (words[w].parse::<u64>().unwrap() ^ 1).to_string();
    words.join(" ")
}

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
    let r = replay(&text).expect("conformant");
    assert_eq!(r.total_lines(), lines.len());
    for role in [
        "master",
        "daemon",
        "spawn-handshake",
        "spawn-parent",
        "spawn-join",
        "spawn-member",
        "liveness",
        "master-watch",
        "giveback",
        "tool-desk",
    ] {
        assert!(r.transitions_of(role) > 0, "no {role} transition: {r:?}");
    }
}

/// The runtime's decision machines, recorded along one run of each gate model (and one
/// scripted run of the tool desk): a changed state or outputs fingerprint of any of
/// their transitions is refused at that line, naming the machine.
#[test]
fn a_tampered_runtime_machine_trace_is_rejected_where_it_differs() {
    let lines = dynres_verification::record::record_runtime();
    assert!(replay(&lines.join("\n")).is_ok(), "conformant");
    for role in ["liveness", "master-watch", "giveback", "tool-desk"] {
        let transitions: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.starts_with(&format!("{role} ")) && !l.contains(" start "))
            .map(|(k, _)| k)
            .collect();
        assert!(!transitions.is_empty(), "no {role} transition");
        for &k in &transitions {
            for (from_end, what) in [(2, "outputs differ"), (1, "state differs")] {
                let mut tampered = lines.clone();
                let words = tampered[k].split(' ').count();
                tampered[k] = flip(&tampered[k], words - from_end);
                let err = replay(&tampered.join("\n")).unwrap_err();
                assert_eq!(err.line, k + 1, "{role}: {err}");
                assert!(err.what.contains(what), "{role}: {err}");
                assert!(err.what.contains(role), "names the machine: {err}");
            }
        }
    }
}

#[test]
fn spawn_flows_record_every_machine_kind_with_distinct_ids() {
    let lines = record_spawn();
    let starts: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains(" start "))
        .map(|l| l.as_str())
        .collect();
    // 2 spawns (3 + 4 children), accept/connect, a join pair: parents, handshakes
    // (children roots, server, client), joins and members all start.
    for role in [
        "spawn-parent",
        "spawn-handshake",
        "spawn-join",
        "spawn-member",
    ] {
        assert!(
            starts.iter().any(|l| l.starts_with(role)),
            "no {role} start"
        );
    }
    let mut ids: Vec<(&str, &str)> = starts
        .iter()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (w[0], w[1])
        })
        .collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "two machines share an id");
    // The failed launch is recorded: a parent's LaunchFailed input (tag 5).
    assert!(lines.iter().any(|l| l.starts_with("spawn-parent ")
        && l.split(' ').nth(3).is_some_and(|i| i.starts_with("05"))));
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
    tampered[k] = flip(&tampered[k], usize::MAX);
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

#[test]
fn a_tampered_spawn_trace_is_rejected_where_it_differs() {
    let lines = record_spawn();
    for role in [
        "spawn-handshake",
        "spawn-parent",
        "spawn-join",
        "spawn-member",
    ] {
        // The outputs fingerprint (second-to-last word) of the role's first transition.
        let k = lines
            .iter()
            .position(|l| l.starts_with(role) && !l.contains(" start "))
            .unwrap_or_else(|| panic!("a {role} transition"));
        let mut tampered = lines.clone();
        let words = tampered[k].split(' ').count();
        tampered[k] = flip(&tampered[k], words - 2);
        let err = replay(&tampered.join("\n")).unwrap_err();
        assert_eq!(err.line, k + 1, "{role}: {err}");
        assert!(err.what.contains("outputs differ"), "{err}");
        assert!(err.what.contains(role), "names the machine: {err}");
    }

    // A changed input (one payload byte of a member's message) replays differently, or
    // does not decode: either way the line is named.
    let k = lines
        .iter()
        .position(|l| l.starts_with("spawn-member") && !l.contains(" start "))
        .expect("a member transition");
    let mut tampered = lines.clone();
    let mut words: Vec<String> = tampered[k].split(' ').map(String::from).collect();
    // Byte 1 is the session's top byte.
    words[3].replace_range(2..4, "ff");
    tampered[k] = words.join(" ");
    let err = replay(&tampered.join("\n")).unwrap_err();
    assert_eq!(err.line, k + 1, "{err}");

    // A transition whose machine never started is refused.
    let err = replay(&lines[k]).unwrap_err();
    assert!(err.what.contains("before its start"), "{err}");
    // A start that does not decode is a typed refusal.
    assert!(replay("spawn-join g1.1 start 00 1 1").is_err());
}
