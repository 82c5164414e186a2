//! Trace conformance (`spec/verification.md` §6): record the kernel machines' transition
//! events (emitted by `dynres_core::rc::trace` and `dynres_core::spawn::trace`, whose
//! encodings cover the protocol's machines and the runtime's liveness, master watch and
//! give-back machines) as lines, and replay a recording against fresh machines. The
//! line format and the replay live in the kernel (`dynres_core::trace`,
//! `dynres_core::replay`), shared with the launcher's `DYNRES_TRACE_FILE` recorder and
//! the end-to-end tests.

use std::sync::{Arc, Mutex};

use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;

pub use dynres_core::replay::{Divergence, Replayed, replay};

/// A `tracing` layer that keeps every transition event as one line of text, in the
/// format of `dynres_core::trace` (e.g. `master start <config> <outputs> <state>`,
/// `daemon <node> <now> <input> <outputs> <state>`,
/// `spawn-member <id> <now> <input> <outputs> <state>`).
#[derive(Clone, Default)]
pub struct Recorder {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    /// The lines recorded so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl<S: tracing::Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if let Some(line) = dynres_core::trace::event_line(event) {
            if let Ok(mut l) = self.lines.lock() {
                l.push(line);
            }
        }
    }
}
