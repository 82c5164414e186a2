//! Trace conformance behaviour (spec/verification.md §6) that `verification/nightly.sh`'s
//! cargo-mutants run found untested: each test names the mutants it catches.
//!
//! A test binary of its own: it records under a thread-local `tracing` subscriber, and
//! the callsite interest that `tracing` caches can miss that subscriber's events when
//! other tests register the same callsites on other threads at the same time.

mod common;

use common::*;
use dynres_core::Duration;
use dynres_core::rc::ChangeRequest;

/// A `tracing` subscriber that keeps every transition event as its trace line
/// (`dynres_core::trace::event_line`), like the verification recorder and the launcher's
/// `DYNRES_TRACE_FILE` layer, without their dependencies.
#[derive(Clone, Default)]
struct LineRecorder(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for LineRecorder {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == dynres_core::rc::trace::TARGET
    }
    // Transition events are plain events; spans are neither made nor needed.
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if let Some(line) = dynres_core::trace::event_line(event) {
            self.0.lock().expect("not poisoned").push(line);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs the tests of this binary that touch transition callsites one at a time.
/// `tracing` caches a callsite's interest when it is first hit and when a dispatcher
/// comes or goes; a machine run on another thread while a recorder is being set up can
/// leave a callsite cached as uninterested, and the recording then misses events (seen
/// as a replay diverging at line 2 in about 1 of 6 parallel runs).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The recorded lines joined, with line `line`'s fingerprint `word_from_end` words from
/// its end (1: the state, 2: the outputs) changed.
fn tampered(lines: &[String], line: usize, word_from_end: usize) -> String {
    let mut lines = lines.to_vec();
    let mut words: Vec<String> = lines[line].split(' ').map(String::from).collect();
    let at = words.len() - word_from_end;
    let n: u64 = words[at].parse().expect("a fingerprint");
    words[at] = n.wrapping_add(1).to_string();
    lines[line] = words.join(" ");
    lines.join("\n")
}

/// `trace.rs` `event_line` (→ `Some("xyzzy")`, its target check `!=` → `==`) and
/// `replay.rs` `replay` (`got.0 != want.0` or `got.1 != want.1` → `==`, the line count's
/// `+=` → `-=`): a recorded ADD replays identically against fresh machines, every line
/// counted, and a line whose outputs or state fingerprint differs is refused at that
/// line (spec/verification.md §6, trace conformance).
#[test]
fn a_recorded_change_replays_and_a_tampered_line_is_refused() {
    let _one_at_a_time = serial();
    use dynres_core::replay::replay;
    let rec = LineRecorder::default();
    tracing::subscriber::with_default(rec.clone(), || {
        let mut w = World::new(config(2, 4, 3));
        w.request(ChangeRequest::add(APP, 2));
        w.run_for(Duration::from_millis(1));
        w.adapt(&pid(0), None);
        w.run_for(Duration::from_millis(50));
    });
    let lines = rec.0.lock().expect("not poisoned").clone();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("master start ")),
        "the master's start comes first: {:?}",
        lines.first()
    );
    let done = replay(&lines.join("\n")).unwrap_or_else(|d| panic!("diverged: {d}"));
    assert_eq!(done.total_lines(), lines.len(), "every line replayed");
    assert!(done.transitions_of("master") > 0);
    assert!(done.transitions_of("daemon") > 0);
    // A master transition: tamper with its outputs, then with its state.
    let at = lines
        .iter()
        .position(|l| l.starts_with("master ") && !l.starts_with("master start "))
        .expect("a master transition");
    for (word, what) in [(2, "outputs differ"), (1, "state differs")] {
        let err = replay(&tampered(&lines, at, word)).expect_err("tampered");
        assert_eq!(err.line, at + 1, "{err}");
        assert!(err.what.contains(what), "{err}");
    }
}

/// `trace.rs` `InstanceTag::draw` (→ `Default::default()`): while transition events are
/// recorded every machine draws its own tag, so two machines of one process are told
/// apart in its trace (spec/verification.md §6); with nothing recording, all are 0.
#[test]
fn machines_draw_distinct_instance_tags_while_recording() {
    let _one_at_a_time = serial();
    use dynres_core::trace::InstanceTag;
    let (a, b) = tracing::subscriber::with_default(LineRecorder::default(), || {
        (InstanceTag::draw(), InstanceTag::draw())
    });
    assert_ne!(a.0, b.0, "two machines, two tags");
    assert_eq!(InstanceTag::draw().0, 0, "not recording: no tag");
}

/// `replay.rs` `Replayed::add` (`+=` → `-=`): the counts of several processes' traces
/// add up, per role (the `replay` command's totals).
#[test]
fn replay_counts_of_several_files_add_up() {
    use dynres_core::replay::Replayed;
    let one = |lines: usize, transitions: usize| Replayed {
        lines: [("master".to_string(), lines)].into(),
        transitions: [("master".to_string(), transitions)].into(),
    };
    let mut all = Replayed::default();
    all.add(&one(3, 2));
    all.add(&one(4, 1));
    assert_eq!(all.total_lines(), 7);
    assert_eq!(all.transitions_of("master"), 3);
    assert_eq!(all.transitions_of("daemon"), 0);
}

/// `replay.rs` `replay` (the skip test `||` → `&&`): blank lines and `#` comments are
/// skipped, yet still counted, so a divergence names the line of the file it is on
/// (spec/verification.md §6, replay names the line).
#[test]
fn replay_skips_blank_and_comment_lines_but_counts_them() {
    use dynres_core::replay::replay;
    let done = replay("# a comment\n\n  \t\n#another\n").expect("nothing to replay");
    assert_eq!(done.total_lines(), 0, "no line replayed");
    let err = replay("# header\n\nbogus line\n").expect_err("an unreadable line");
    assert_eq!(err.line, 3, "{err}");
    assert!(err.what.contains("unrecognised line"), "{err}");
}

/// `replay.rs` `replay` (the guards `role.starts_with("spawn-")` of a spawn start and of
/// a spawn transition → `true`): a six-word line of a role the trace format does not
/// know (spec/verification.md §6 names `master`, `daemon` and the `spawn-*` machines) is
/// unreadable, not the start or a transition of a spawn machine.
#[test]
fn replay_refuses_a_line_of_an_unknown_role() {
    use dynres_core::replay::replay;
    for line in [
        "bogus g1.1 5 00 6 7",
        "master g1.1 5 00 6 7",
        "bogus g1.1 start 00 6 7",
    ] {
        let err = replay(line).expect_err("an unknown role");
        assert_eq!(err.line, 1, "{err}");
        assert!(err.what.contains("unrecognised line"), "{line}: {err}");
    }
}

/// `daemon/mod.rs` `Daemon::fingerprint` (→ 0): a trace line's state fingerprint must
/// tell a daemon's states apart — a replay compares it after every transition
/// (spec/verification.md §6).
#[test]
fn a_daemon_fingerprint_follows_its_replica() {
    let _one_at_a_time = serial();
    let mut w = World::new(config(1, 4, 2));
    w.run_for(Duration::from_millis(1));
    let before = w.daemons[0].fingerprint();
    assert_eq!(w.daemons[0].fingerprint(), before, "the same state");
    // An announced change reaches the daemon's replica.
    w.behaviour.confirm = false;
    w.request(ChangeRequest::add(APP, 1));
    w.run_for(Duration::from_millis(1));
    assert_ne!(w.daemons[0].fingerprint(), before, "a new replica");
}

/// `spawn/handshake.rs` `Handshake::trace_id` and `spawn/parent.rs`
/// `SpawnParent::trace_id` (→ `"xyzzy"`), `spawn/join.rs` `Join::trace_id` (→
/// `String::new()`), `spawn/trace.rs` `role_letter` (→ `Default::default()`): a spawn
/// machine's trace lines name it as spec/verification.md §6 says — a handshake
/// `g<group>.r<root>.<a|i>.<n>`, a spawn parent `g<group>.r<root>.c<child group>.<n>`, a
/// join `g<group>.<n>`, a member `g<group>.r<rank>.<a|i>.<n>` — with its own instance
/// number `n` drawn while recording.
#[test]
fn spawn_machines_are_named_by_group_rank_role_and_instance() {
    let _one_at_a_time = serial();
    use dynres_core::spawn::{
        Addr, GroupHeader, Handshake, HandshakeConfig, Join, Member, PortName, Role, SpawnConfig,
        SpawnParent,
    };
    use dynres_core::{Instant, Namespace};
    let cfg = |group_id: u64, root: u32| {
        let local = GroupHeader {
            group_id,
            size: 2,
            context_id: 1,
        };
        let mut cfg = HandshakeConfig::new(local, vec![Addr(vec![1]), Addr(vec![2])]);
        cfg.root = root;
        cfg
    };
    let port = PortName::parse(
        "dynres:2:dgram:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
    )
    .expect("valid port");
    let rec = LineRecorder::default();
    tracing::subscriber::with_default(rec.clone(), || {
        Handshake::accept(Instant(0), port.clone(), cfg(3, 1)).expect("valid accept");
        Handshake::connect(Instant(0), port.clone(), cfg(4, 0)).expect("valid connect");
        SpawnParent::new(
            Instant(0),
            SpawnConfig {
                handshake: cfg(5, 1),
                port: port.clone(),
                maxprocs: 3,
                child_namespace: Namespace::new("kids"),
                child_group_id: 6,
                key: dynres_core::spawn::BootKey([6; 32]),
            },
        )
        .expect("a valid spawn");
        let single = GroupHeader {
            group_id: 8,
            size: 1,
            context_id: 1,
        };
        let joined = HandshakeConfig::new(single, vec![Addr(vec![1])]);
        Join::new(Instant(0), port, joined).expect("a valid join");
        let local = GroupHeader {
            group_id: 7,
            size: 2,
            context_id: 1,
        };
        Member::new(Role::Acceptor, 1, local, vec![Addr(vec![1]), Addr(vec![2])]);
    });
    let lines = rec.0.lock().expect("not poisoned").clone();
    let named: Vec<(String, String, u32)> = lines
        .iter()
        .map(|l| {
            let words: Vec<&str> = l.split(' ').collect();
            assert_eq!(words[2], "start", "only start lines: {l}");
            let (name, n) = words[1].rsplit_once('.').expect("an instance number");
            let n = n.parse().expect("a number");
            (words[0].to_string(), name.to_string(), n)
        })
        .collect();
    let got: Vec<(&str, &str)> = named
        .iter()
        .map(|(role, name, _)| (role.as_str(), name.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("spawn-handshake", "g3.r1.a"),
            ("spawn-handshake", "g4.r0.i"),
            ("spawn-parent", "g5.r1.c6"),
            ("spawn-join", "g8"),
            ("spawn-member", "g7.r1.a"),
        ]
    );
    let mut instances: Vec<u32> = named.iter().map(|(_, _, n)| *n).collect();
    instances.sort_unstable();
    instances.dedup();
    assert_eq!(instances.len(), 5, "one instance each: {lines:?}");
    assert!(!instances.contains(&0), "drawn while recording: {lines:?}");
}

/// `replay.rs` `SpawnMachine::feed` (→ `Ok(1)`): a spawn machine's transitions replay
/// with the outputs fingerprint the recorded line carries, and a line whose outputs
/// fingerprint differs is refused at that line (spec/verification.md §6, trace
/// conformance). A connect nobody answers retransmits its Hello on each timeout.
#[test]
fn a_recorded_handshake_replays_its_outputs() {
    let _one_at_a_time = serial();
    use dynres_core::Instant;
    use dynres_core::replay::replay;
    use dynres_core::spawn::{Addr, GroupHeader, Handshake, HandshakeConfig, Input, PortName};
    let local = GroupHeader {
        group_id: 4,
        size: 1,
        context_id: 1,
    };
    let cfg = HandshakeConfig::new(local, vec![Addr(vec![1])]);
    let port = PortName::parse(
        "dynres:2:dgram:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
    )
    .expect("valid port");
    let rec = LineRecorder::default();
    tracing::subscriber::with_default(rec.clone(), || {
        let mut hs = Handshake::connect(Instant(0), port, cfg).expect("valid connect");
        for _ in 0..3 {
            while hs.poll_output().is_some() {}
            let at = hs.poll_timeout().expect("waiting for an answer");
            hs.handle(at, Input::Timeout).expect("a timeout is taken");
        }
    });
    let lines = rec.0.lock().expect("not poisoned").clone();
    assert_eq!(lines.len(), 4, "a start and three transitions: {lines:?}");
    let done = replay(&lines.join("\n")).unwrap_or_else(|d| panic!("diverged: {d}"));
    assert_eq!(done.transitions_of("spawn-handshake"), 3);
    let err = replay(&tampered(&lines, 2, 2)).expect_err("tampered outputs");
    assert_eq!(err.line, 3, "{err}");
    assert!(err.what.contains("outputs differ"), "{err}");
}

/// `trace.rs` `EventFields::record_i64` (→ `()`): a transition event's signed field is
/// recorded like an unsigned one, so its line is complete. Every recorder builds lines
/// through `EventFields` (spec/verification.md §6); the kernel's own events carry
/// unsigned numbers, so this event is made here.
#[test]
fn a_signed_field_of_a_transition_event_is_recorded() {
    let _one_at_a_time = serial();
    let rec = LineRecorder::default();
    tracing::subscriber::with_default(rec.clone(), || {
        tracing::trace!(
            target: dynres_core::rc::trace::TARGET,
            role = "master",
            now = -5i64,
            input = "00",
            outputs = 6u64,
            state = 7u64,
        );
    });
    let lines = rec.0.lock().expect("not poisoned").clone();
    assert_eq!(lines, ["master -5 00 6 7"]);
}
