//! Trace conformance of the runtime's decision machines (`spec/verification.md` §6): the
//! master's `Liveness` and `ToolDesk`, a daemon's `MasterWatch` and the engine's `GiveBack` record one
//! line per transition through the kernel's recorder; a scripted run of each replays
//! identically against fresh machines (`dynres_core::replay`), and a line whose input or
//! fingerprint was changed is refused at that line.
//!
//! A test binary of its own, its recording tests one at a time: `tracing` caches a
//! callsite's interest, and a recorder set up while another thread hits the same
//! callsites can miss events (see `mutants_kill_trace.rs`).

use dynres_core::Machine;
use dynres_core::pset::PsetName;
use dynres_core::rc::giveback::{GiveBack, GiveBackInput, GiveBackOutput};
use dynres_core::rc::liveness::{
    Liveness, LivenessConfig, LivenessError, LivenessInput, LivenessOutput, MasterWatch,
    WatchInput, WatchOutput,
};
use dynres_core::rc::tools::{ToolAnswer, ToolDesk, ToolError, ToolInput};
use dynres_core::rc::{AbortReason, BadRequest, RcError, RcStatus};
use dynres_core::replay::replay;
use dynres_core::slots::SlotError;
use dynres_core::time::{Duration, Instant};
use dynres_core::trace::{RecordedOutputs, fingerprint};

/// A `tracing` subscriber that keeps every transition event as its trace line.
#[derive(Clone, Default)]
struct LineRecorder(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for LineRecorder {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == dynres_core::trace::TARGET
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

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The lines `run` records.
fn recorded(run: impl FnOnce()) -> Vec<String> {
    let rec = LineRecorder::default();
    tracing::subscriber::with_default(rec.clone(), run);
    rec.0.lock().map(|l| l.clone()).expect("not poisoned")
}

/// The lines joined, with word `word` (0-based) of line `line` replaced by `with`.
fn with_word(lines: &[String], line: usize, word: usize, with: &str) -> String {
    let mut lines = lines.to_vec();
    let mut words: Vec<&str> = lines[line].split(' ').collect();
    words[word] = with;
    lines[line] = words.join(" ");
    lines.join("\n")
}

/// Line `line` with fingerprint `from_end` words from its end (1: state, 2: outputs)
/// changed.
fn with_fingerprint(lines: &[String], line: usize, from_end: usize) -> String {
    let words: Vec<&str> = lines[line].split(' ').collect();
    let at = words.len() - from_end;
    let n: u64 = words[at].parse().expect("a fingerprint");
    with_word(lines, line, at, &n.wrapping_add(1).to_string())
}

/// Every line replays; a changed input at `input_line` (to `input`) and changed
/// fingerprints at `fp_line` are each refused at that line, with `what` they differ in.
fn assert_conformant(lines: &[String], input_line: usize, input: &str, fp_line: usize) {
    let text = lines.join("\n");
    let done = replay(&text).unwrap_or_else(|d| panic!("diverged: {d}\n{text}"));
    assert_eq!(done.total_lines(), lines.len(), "every line replayed");
    let words = lines[input_line].split(' ').count();
    let err = replay(&with_word(lines, input_line, words - 3, input)).expect_err("changed input");
    assert_eq!(err.line, input_line + 1, "{err}");
    assert!(err.what.contains("differs"), "{err}");
    for (from_end, what) in [(2, "outputs differ"), (1, "state differs")] {
        let err = replay(&with_fingerprint(lines, fp_line, from_end)).expect_err("tampered");
        assert_eq!(err.line, fp_line + 1, "{err}");
        assert!(err.what.contains(what), "{err}");
    }
}

fn at(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

const HB: Duration = Duration::from_millis(100);

/// The master's detector over a run that feeds every input kind: four daemons launched
/// and one whose launch failed, one authenticated twice (refused, AUTH-5), heartbeats
/// owed, one link ended, one node given back, one agent exited, one never connected
/// (HB-3).
#[test]
fn a_liveness_run_replays_and_a_changed_line_is_refused() {
    let _one = serial();
    let mut outs = Vec::new();
    let lines = recorded(|| {
        let mut m = Liveness::new(LivenessConfig::new(HB));
        let mut feed = |m: &mut Liveness, t: Instant, i: LivenessInput| {
            let r = m.handle(t, i);
            outs.extend(m.take_outputs());
            r
        };
        for node in [1, 2, 3, 5] {
            feed(&mut m, at(0), LivenessInput::Launched { node }).expect("first launch");
        }
        feed(&mut m, at(0), LivenessInput::LaunchFailed { node: 4 }).expect("a loss");
        feed(&mut m, at(5), LivenessInput::Authenticated { node: 1 }).expect("awaited");
        feed(&mut m, at(6), LivenessInput::Authenticated { node: 2 }).expect("awaited");
        assert_eq!(
            feed(&mut m, at(7), LivenessInput::Authenticated { node: 1 }),
            Err(LivenessError::NotAwaited(1))
        );
        feed(&mut m, at(50), LivenessInput::Heard { node: 1 }).unwrap();
        feed(&mut m, at(60), LivenessInput::Sent { node: 2 }).unwrap();
        let t = m.poll_timeout().expect("live nodes");
        feed(&mut m, t, LivenessInput::Timeout).unwrap();
        feed(&mut m, at(200), LivenessInput::LinkEnded { node: 2 }).unwrap();
        feed(&mut m, at(200), LivenessInput::Dropped { node: 2 }).unwrap();
        feed(&mut m, at(300), LivenessInput::Returned { node: 1 }).unwrap();
        feed(&mut m, at(310), LivenessInput::LinkEnded { node: 1 }).unwrap();
        feed(&mut m, at(400), LivenessInput::AgentExited { node: 5 }).unwrap();
        feed(&mut m, at(40_000), LivenessInput::Timeout).unwrap();
    });
    assert!(
        outs.contains(&LivenessOutput::Heartbeat { node: 1 }),
        "{outs:?}"
    );
    assert!(
        outs.iter()
            .filter(|o| matches!(o, LivenessOutput::Lost { .. }))
            .count()
            == 4,
        "{outs:?}"
    );
    assert!(lines[0].starts_with("liveness start "), "{lines:?}");
    let done = replay(&lines.join("\n")).expect("conformant");
    assert_eq!(done.transitions_of("liveness"), 17, "{lines:?}");
    // Line 1 launches node 1; launching node 9 instead is another state. Line 8 is the
    // refused second authentication: its result is in the outputs fingerprint.
    assert_conformant(&lines, 1, "0100000009", 8);
}

/// Two daemons' watches in one trace, each keyed by its node: heartbeats owed, a master
/// that falls silent (RT-3), and input after giving up.
#[test]
fn master_watch_runs_replay_and_a_changed_line_is_refused() {
    let _one = serial();
    let mut outs = Vec::new();
    let lines = recorded(|| {
        let cfg = LivenessConfig::new(HB);
        let mut a = MasterWatch::new(1, cfg, at(0));
        let mut b = MasterWatch::new(2, cfg, at(10));
        a.handle(at(20), WatchInput::Sent);
        b.handle(at(30), WatchInput::Heard);
        let t = a.poll_timeout().expect("armed");
        a.handle(t, WatchInput::Timeout);
        outs.extend(a.take_outputs());
        a.handle(at(500), WatchInput::Heard);
        let t = b.poll_timeout().expect("armed");
        b.handle(t, WatchInput::Timeout);
        b.handle(at(5_000), WatchInput::Timeout);
        outs.extend(b.take_outputs());
        assert!(b.given_up());
        b.handle(at(5_001), WatchInput::Heard);
    });
    assert!(outs.contains(&WatchOutput::Heartbeat), "{outs:?}");
    assert!(
        outs.iter()
            .any(|o| matches!(o, WatchOutput::MasterSilent(_))),
        "{outs:?}"
    );
    assert!(lines[0].starts_with("master-watch 1 start "), "{lines:?}");
    assert!(lines[1].starts_with("master-watch 2 start "), "{lines:?}");
    let done = replay(&lines.join("\n")).expect("conformant");
    assert_eq!(done.transitions_of("master-watch"), 7, "{lines:?}");
    // Line 2: node 1 sent at 20 ms; heard instead is another state.
    assert_conformant(&lines, 2, "01", 5);
}

/// Two give-back machines in one trace (the engine replaces its machine): each has its
/// own start line and id; a hold that ends on time and one that goes overdue (GROW-4).
#[test]
fn giveback_runs_replay_and_a_changed_line_is_refused() {
    let _one = serial();
    let mut outs = Vec::new();
    let lines = recorded(|| {
        let mut g = GiveBack::new(Duration::from_secs(30));
        g.handle(at(1), GiveBackInput::Released { node: 2 });
        g.handle(at(1), GiveBackInput::Emptying(true));
        g.handle(at(5), GiveBackInput::Released { node: 3 });
        g.handle(at(6), GiveBackInput::Emptying(false));
        outs.extend(g.take_outputs());
        let mut g = GiveBack::default();
        g.handle(at(10), GiveBackInput::Released { node: 4 });
        g.handle(at(10), GiveBackInput::Emptying(true));
        g.handle(at(40_010), GiveBackInput::Emptying(true));
        outs.extend(g.take_outputs());
    });
    assert_eq!(
        outs,
        vec![
            GiveBackOutput::Offer {
                nodes: vec![2, 3],
                overdue: false
            },
            GiveBackOutput::Offer {
                nodes: vec![4],
                overdue: true
            }
        ]
    );
    let starts: Vec<&String> = lines.iter().filter(|l| l.contains(" start ")).collect();
    assert_eq!(starts.len(), 2, "{lines:?}");
    let id = |l: &str| l.split(' ').nth(1).map(str::to_string);
    assert_ne!(id(starts[0]), id(starts[1]), "two machines, two ids");
    let done = replay(&lines.join("\n")).expect("conformant");
    assert_eq!(done.transitions_of("giveback"), 7, "{lines:?}");
    // Line 1 releases node 2; node 9 instead is another state.
    assert_conformant(&lines, 1, "0100000009", 4);
}

fn delta(n: u64) -> PsetName {
    PsetName::parse(&format!("mpi://rte/app/rc/{n}")).expect("a delta name")
}

/// The master's tool desk over a run that feeds every input kind (TOOL-1..3): a waiting
/// tool answered at its change's final status with the abort's reason, `nowait` tools
/// announced and queued, a ticket asked twice (refused), and refusals whose errors
/// cross the wire as data (not granted) and as text (slots, a bad request) — the
/// latter recorded in their wire form, so replay gives the same answers.
#[test]
fn a_tool_desk_run_replays_and_a_changed_line_is_refused() {
    let _one = serial();
    let mut outs = Vec::new();
    let lines = recorded(|| {
        let mut m = ToolDesk::new();
        let mut feed = |m: &mut ToolDesk, i: ToolInput| {
            let r = m.handle(Instant::ZERO, i);
            outs.extend(m.take_outputs());
            r
        };
        let asked = |ticket, wait| ToolInput::Asked { ticket, wait };
        feed(&mut m, asked(1, true)).expect("a fresh ticket");
        feed(&mut m, ToolInput::Handled { ticket: 1 }).unwrap();
        let started = |ticket, n| ToolInput::Started {
            ticket,
            delta: delta(n),
        };
        feed(&mut m, started(1, 1)).unwrap();
        feed(&mut m, asked(2, false)).unwrap();
        feed(&mut m, ToolInput::Handled { ticket: 2 }).unwrap();
        feed(&mut m, asked(3, false)).unwrap();
        feed(&mut m, started(3, 3)).unwrap();
        feed(&mut m, ToolInput::Handled { ticket: 3 }).unwrap();
        assert_eq!(
            feed(&mut m, asked(1, false)),
            Err(ToolError::TicketTaken(1))
        );
        feed(&mut m, asked(4, true)).unwrap();
        let slots = RcError::Slots(SlotError::TooFewProcesses {
            wanted: 9,
            running: 2,
        });
        let refused = |ticket, error| ToolInput::Refused { ticket, error };
        feed(&mut m, refused(4, slots)).unwrap();
        feed(&mut m, asked(5, true)).unwrap();
        feed(&mut m, refused(5, RcError::NotGranted { slots: 2 })).unwrap();
        let status = |n, status| ToolInput::Status {
            delta: delta(n),
            status,
        };
        feed(&mut m, status(1, RcStatus::Pending)).unwrap();
        let reason = AbortReason::NotDecidedInTime;
        feed(
            &mut m,
            ToolInput::Aborted {
                delta: delta(1),
                reason,
            },
        )
        .unwrap();
        feed(&mut m, status(1, RcStatus::Aborted)).unwrap();
        let bad = RcError::BadRequest(BadRequest::RemovesWholeApplication);
        feed(&mut m, refused(2, bad)).unwrap();
        feed(&mut m, status(3, RcStatus::Finalized)).unwrap();
        assert_eq!(m.open(), 0);
    });
    let answer_of = |t: u64| {
        outs.iter()
            .find(|o| o.ticket == t)
            .map(|o| o.answer.clone())
    };
    assert_eq!(answer_of(2), Some(ToolAnswer::Queued), "{outs:?}");
    assert_eq!(answer_of(3), Some(ToolAnswer::Announced(delta(3))));
    assert!(matches!(
        answer_of(4),
        Some(ToolAnswer::Refused(RcError::Slots(_)))
    ));
    assert!(matches!(answer_of(5), Some(ToolAnswer::NotGranted(_))));
    assert_eq!(
        answer_of(1),
        Some(ToolAnswer::Aborted {
            delta: delta(1),
            reason: Some(AbortReason::NotDecidedInTime)
        })
    );
    assert_eq!(outs.len(), 5, "one answer per ticket: {outs:?}");
    assert!(lines[0].starts_with("tool-desk start 00 "), "{lines:?}");
    let done = replay(&lines.join("\n")).expect("conformant");
    assert_eq!(done.transitions_of("tool-desk"), 18, "{lines:?}");
    // Line 1 asks ticket 1 (waiting); ticket 9 instead is another state. Line 9 is the
    // ticket asked twice: its refusal is in the outputs fingerprint.
    assert_conformant(&lines, 1, "01000000000000000901", 9);
}

/// A machine that keeps the default `hash_output` records exactly the fingerprint of its
/// outputs, so the traces of the other roles are unchanged by the desk's hook.
#[test]
fn recorded_outputs_hash_as_the_outputs_by_default() {
    let outs = vec![
        LivenessOutput::Heartbeat { node: 1 },
        LivenessOutput::Heartbeat { node: 7 },
    ];
    let refs: Vec<&LivenessOutput> = outs.iter().collect();
    let recorded = RecordedOutputs::<Liveness>(&refs);
    assert_eq!(fingerprint(&recorded), fingerprint(&outs));
    let r: Result<(), LivenessError> = Err(LivenessError::NotAwaited(3));
    assert_eq!(fingerprint(&(recorded, &r)), fingerprint(&(&outs, &r)));
}

/// A tool desk line whose input is `Started` of ticket `ticket` with pset name `name`
/// written as given (length-prefixed, as on the wire).
fn tool_line(ticket: u64, name: &str) -> String {
    let mut hex = format!("03{ticket:016x}");
    hex.push_str(&format!("{:08x}", name.len()));
    for b in name.bytes() {
        hex.push_str(&format!("{b:02x}"));
    }
    format!("tool-desk 1 {hex} 1 2")
}

/// Recorded bytes that do not decode to an input, or lines for a machine never started,
/// are typed divergences at their line, never a panic.
#[test]
fn undecodable_lines_of_the_new_roles_are_divergences() {
    let _one = serial();
    let starts = recorded(|| {
        let cfg = LivenessConfig::new(HB);
        let _ = Liveness::new(cfg);
        let _ = MasterWatch::new(3, cfg, at(0));
        let _ = GiveBack::default();
        let _ = ToolDesk::default();
    });
    let [liveness, watch, giveback, desk] = [0, 1, 2, 3].map(|i| starts[i].as_str());
    let id = giveback.split(' ').nth(1).expect("an id");
    let gb = |rest: &str| format!("giveback {id} {rest}");
    for (start, bad) in [
        (liveness, "liveness 1 0b00000001 1 2"),
        (liveness, "liveness 1 05000001 1 2"),
        (liveness, "liveness 1 0a00 1 2"),
        (watch, "master-watch 3 1 04 1 2"),
        (watch, "master-watch 3 1 0101 1 2"),
        (giveback, gb("1 0202 1 2").as_str()),
        (giveback, gb("1 03 1 2").as_str()),
        (giveback, gb("1 01000000 1 2").as_str()),
        (giveback, gb("1 zz 1 2").as_str()),
        ("", "master-watch 4 1 01 1 2"),
        ("", "giveback 8 1 0200 1 2"),
        ("", "liveness 1 0a 1 2"),
        ("", "liveness start 00 1 2"),
        ("", "master-watch 99999999999 start 00 1 2"),
        // tool-desk: an unknown tag, a wait flag of 2, trailing bytes, a pset name in
        // another case than its own, an error not in its recorded form (slots, code 2,
        // as text rather than as a refusal), an unknown abort reason, a start with
        // settings, a transition before the start.
        (desk, "tool-desk 1 07 1 2"),
        (desk, "tool-desk 1 01000000000000000102 1 2"),
        (desk, "tool-desk 1 020000000000000001ff 1 2"),
        (desk, tool_line(3, "MPI://rte/app/rc/1").as_str()),
        (desk, "tool-desk 1 04000000000000000100020000000161 1 2"),
        (
            desk,
            "tool-desk 1 05000000126d70693a2f2f7274652f6170702f72632f3109 1 2",
        ),
        ("", "tool-desk start 01 1 2"),
        ("", "tool-desk 1 020000000000000001 1 2"),
    ] {
        let text = format!("{start}\n{bad}");
        let err = replay(&text).expect_err(bad);
        assert_eq!(err.line, 2, "{bad}: {err}");
        // Refused as unreadable, not as a fingerprint that differs.
        assert!(!err.what.contains("differ"), "{bad}: {err}");
    }
}
