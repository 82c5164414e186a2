//! Recording traces of the in-memory harness (`core/tests/common`): the flows of the
//! resource-change tests run under a [`Recorder`], giving a trace of real kernel
//! transitions for `replay` to check.

#[path = "../../core/tests/common/mod.rs"]
#[allow(clippy::all, missing_docs)]
mod world;

use dynres_core::Duration;
use dynres_core::rc::ChangeRequest;
use tracing_subscriber::layer::SubscriberExt;

use crate::trace::Recorder;
use world::{APP, World, config, pid};

/// Runs ADD 4, SUB 2, REPLACE 1→1 and an aborted ADD on the in-memory world and returns
/// the recorded trace, one line per transition.
pub fn record_scenarios() -> Vec<String> {
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
