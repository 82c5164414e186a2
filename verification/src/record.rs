//! Recording traces of the in-memory harnesses (`core/tests/common` for resource
//! changes, `core/tests/spawn_sim` for spawn / connect / join, and the gate's liveness
//! and give-back models and a scripted tool desk run for the runtime's decision
//! machines): their flows run under a [`Recorder`], giving a trace of real kernel
//! transitions for `replay` to check.

#[path = "../../core/tests/common/mod.rs"]
#[allow(clippy::all, missing_docs)]
mod world;

#[path = "../../core/tests/spawn_sim/mod.rs"]
#[allow(clippy::all, missing_docs)]
mod spawn_sim;

use dynres_core::Duration;
use dynres_core::rc::ChangeRequest;
use dynres_core::spawn::{Bootstrap, ContextIds, Ports};
use stateright::Model;
use tracing_subscriber::layer::SubscriberExt;

use crate::trace::Recorder;
use spawn_sim::{Faults, Launcher, Sim};
use world::{APP, World, config, pid};

/// Runs the resource-change flows ([`record_rc`]), the spawn flows ([`record_spawn`])
/// and the runtime's decision machines ([`record_runtime`]) and returns the recorded
/// trace, one line per transition.
pub fn record_scenarios() -> Vec<String> {
    let mut lines = record_rc();
    lines.extend(record_spawn());
    lines.extend(record_runtime());
    lines
}

/// Follows `path` through `model` from its first initial state, each action one the
/// model offers there (so the run is one the gate explores); returns the last state.
fn walk<M: Model>(model: &M, path: &[M::Action]) -> M::State
where
    M::Action: Clone + PartialEq + std::fmt::Debug,
{
    let mut s = model.init_states().remove(0);
    for a in path {
        let mut offered = Vec::new();
        model.actions(&s, &mut offered);
        assert!(offered.contains(a), "{a:?} is not offered: {offered:?}");
        s = model.next_state(&s, a.clone()).expect("a next state");
    }
    s
}

/// One run of each PR-tier model of the runtime's decision machines, driven by the
/// models' own adapters: the liveness model (2 daemons connect, heartbeats flow both
/// ways, node 1 is given back and its link ends, then node 0 is no longer heard: the
/// master loses it and its daemon gives up on the master) records `liveness` and
/// `master-watch` transitions; the give-back model (two nodes held past the bound, then
/// one that goes at once) records `giveback` transitions; and one scripted run of the
/// tool desk (`record_tool_desk`) records `tool-desk` transitions.
pub fn record_runtime() -> Vec<String> {
    use crate::giveback_model::{self as gb, GbAction};
    use crate::liveness_model::{self as lm, LiveAction};
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    tracing::subscriber::with_default(subscriber, || {
        {
            let live = &lm::pr_configs()[0];
            use LiveAction::*;
            let s = walk(
                live,
                &[
                    Connect(0),
                    Connect(1),
                    Tick,
                    DeliverUp(0),
                    DeliverUp(1),
                    DeliverDown(0),
                    DeliverDown(1),
                    GiveBack(1),
                    DeliverDown(1),
                    CloseUp(1),
                    Tick,
                    Tick,
                    Tick,
                    Tick,
                    Tick,
                ],
            );
            assert!(s.nodes[0].lost, "the silent node was lost: {s:?}");
        }
        {
            let hold = &gb::pr_configs()[0];
            use GbAction::*;
            let s = walk(
                hold,
                &[
                    Empty(0),
                    Empty(1),
                    Empty(2),
                    Release(0),
                    Tick,
                    Release(1),
                    Tick,
                    Tick,
                    Release(2),
                ],
            );
            assert!(s.hold.held().is_empty(), "every node went back: {s:?}");
        }
        record_tool_desk();
    });
    recorder.lines()
}

/// One run of the master's tool desk (TOOL-1..3), fed what a master says about four
/// tools' tickets as the runtime relays it: a waiting tool whose change is aborted (it
/// hears why), a `nowait` tool queued behind it (its later refusal is not a second
/// answer), a ticket asked twice (refused), a waiting tool refused with an error that a
/// trace carries as its code and text (slots), and a `nowait` tool announced whose
/// change finalizes.
fn record_tool_desk() {
    use dynres_core::pset::PsetName;
    use dynres_core::rc::tools::{ToolAnswer, ToolDesk, ToolInput};
    use dynres_core::rc::{AbortReason, RcError, RcStatus};
    use dynres_core::slots::SlotError;
    let delta = |n: u64| PsetName::delta("app", n).expect("a delta name");
    let mut desk = ToolDesk::new();
    let slots = RcError::Slots(SlotError::Exhausted { wanted: 4, free: 1 });
    let inputs = [
        ToolInput::Asked {
            ticket: 1,
            wait: true,
        },
        ToolInput::Started {
            ticket: 1,
            delta: delta(1),
        },
        ToolInput::Handled { ticket: 1 },
        ToolInput::Asked {
            ticket: 2,
            wait: false,
        },
        ToolInput::Handled { ticket: 2 },
        ToolInput::Asked {
            ticket: 1,
            wait: false,
        },
        ToolInput::Asked {
            ticket: 4,
            wait: true,
        },
        ToolInput::Refused {
            ticket: 4,
            error: slots.clone(),
        },
        ToolInput::Handled { ticket: 4 },
        ToolInput::Status {
            delta: delta(1),
            status: RcStatus::Pending,
        },
        ToolInput::Aborted {
            delta: delta(1),
            reason: AbortReason::MemberLost,
        },
        ToolInput::Status {
            delta: delta(1),
            status: RcStatus::Aborted,
        },
        ToolInput::Refused {
            ticket: 2,
            error: slots,
        },
        ToolInput::Asked {
            ticket: 3,
            wait: false,
        },
        ToolInput::Started {
            ticket: 3,
            delta: delta(2),
        },
        ToolInput::Handled { ticket: 3 },
        ToolInput::Status {
            delta: delta(2),
            status: RcStatus::Finalized,
        },
    ];
    let mut answers = Vec::new();
    let mut refused = 0;
    for input in inputs {
        refused += usize::from(desk.handle(dynres_core::Instant::ZERO, input).is_err());
        answers.extend(std::iter::from_fn(|| desk.poll_output()));
    }
    assert_eq!(refused, 1, "the ticket asked twice");
    assert_eq!(desk.open(), 0, "every tool answered: {answers:?}");
    assert!(
        answers
            .iter()
            .any(|a| matches!(a.answer, ToolAnswer::Refused(RcError::Slots(_)))),
        "{answers:?}"
    );
}

/// Spawn flows on the seeded in-memory world, over a lossy datagram channel (drops,
/// duplicates, corruption, reordering: rejected inputs are recorded too): a spawn of 3
/// children by a parent group of 2 with datagram bootstrap, an accept/connect between
/// groups of 3 and 2 over a stream, a join over a byte stream, and a spawn whose launch
/// fails.
pub fn record_spawn() -> Vec<String> {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    tracing::subscriber::with_default(subscriber, || {
        // spawn 3, datagrams
        let mut sim = Sim::new(7, Faults::LOSSY);
        let mut ports = Ports::new();
        let mut ctx = ContextIds::new(1, 1 << 16);
        let p = sim.add_spawn(&mut ports, Bootstrap::Datagram, 2, 3, &mut ctx);
        sim.run();
        let child = sim.child_of(p).expect("the spawn launched its children");
        sim.assert_group_connected(p, child);

        // accept / connect over a stream
        let mut sim = Sim::new(8, Faults::NONE);
        let (s, c) = sim.accept_connect(Bootstrap::Stream, 3, 2, false);
        sim.run();
        sim.assert_group_connected(s, c);

        // join
        let mut sim = Sim::new(9, Faults::LOSSY);
        let (a, b) = sim.join_pair(Bootstrap::Datagram, false);
        sim.run();
        sim.assert_group_connected(a, b);

        // a failing attempt: the launcher cannot start the children
        let mut sim = Sim::new(10, Faults::NONE);
        sim.launcher = Launcher::Fail;
        let mut ports = Ports::new();
        let mut ctx = ContextIds::new(1, 1 << 16);
        let p = sim.add_spawn(&mut ports, Bootstrap::Stream, 3, 4, &mut ctx);
        sim.run();
        sim.assert_group_failed(p);
    });
    recorder.lines()
}

/// Runs ADD 4, SUB 2, REPLACE 1→1 and an aborted ADD on the in-memory world and returns
/// the recorded trace, one line per transition.
pub fn record_rc() -> Vec<String> {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    tracing::subscriber::with_default(subscriber, || {
        let mut w = World::new(config(3, 4, 4));
        w.request(ChangeRequest::add(APP, 4));
        w.run_for(Duration::from_millis(1));
        w.adapt(&pid(0), None);
        w.run_for(Duration::from_millis(1));
        w.request(ChangeRequest::sub(APP, 2));
        w.run_for(Duration::from_millis(1));
        w.adapt(&pid(0), None);
        w.run_for(Duration::from_millis(1));
        w.request(ChangeRequest::replace(APP, 1, 1));
        w.run_for(Duration::from_millis(1));
        w.adapt(&pid(0), None);
        w.run_for(Duration::from_millis(200));

        let mut w = World::new(config(2, 4, 2));
        w.behaviour.confirm = false;
        w.request(ChangeRequest::add(APP, 1));
        w.run_for(Duration::from_millis(1));
        w.run_for(Duration::from_millis(600));
    });
    recorder.lines()
}
