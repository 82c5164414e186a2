//! Recording a real run for trace conformance (`spec/verification.md` §6): with
//! `DYNRES_TRACE_FILE=PATH` set, every kernel transition event (target
//! `dynres::transition`) of this process is appended to a file as one line, in the
//! format of `dynres_core::trace` (the one the verification recorder writes), for
//! `dynres-verification replay` or `dynres_core::replay::replay`.
//!
//! One file per process: `PATH` for the master process (`dynres run`), `PATH.<pid>` for
//! every other process (node daemons, applications using the client library).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata};

use crate::env;

/// A `tracing` layer appending each transition event's line to one file. The file is
/// created on the first event, so processes without kernel machines leave none.
pub struct TraceFile {
    path: PathBuf,
    file: Mutex<Option<File>>,
    failed: Once,
}

impl TraceFile {
    /// A layer writing to `path` (appending if it exists).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        TraceFile {
            path: path.into(),
            file: Mutex::new(None),
            failed: Once::new(),
        }
    }

    /// The file it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(&self, line: &str) -> std::io::Result<()> {
        let mut file = self
            .file
            .lock()
            .map_err(|_| std::io::Error::other("trace file lock poisoned"))?;
        if file.is_none() {
            *file = Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        let mut buf = String::with_capacity(line.len() + 1);
        buf.push_str(line);
        buf.push('\n');
        // One unbuffered write per line: a process killed mid-run leaves whole lines
        // (the prefix of its trace still replays).
        match file.as_mut() {
            Some(f) => f.write_all(buf.as_bytes()),
            None => Ok(()),
        }
    }
}

impl TraceFile {
    /// Appends `event`'s line if it is a transition event (others are ignored). Write
    /// errors are reported once, as a warning (which this writer does not see itself:
    /// its target is not the transition target).
    pub fn record_event(&self, event: &Event<'_>) {
        let Some(line) = dynres_core::trace::event_line(event) else {
            return;
        };
        if let Err(e) = self.append(&line) {
            self.failed.call_once(|| {
                tracing::warn!("cannot write the trace file {}: {e}", self.path.display());
            });
        }
    }
}

/// A subscriber of its own, so the client library needs no subscriber framework:
/// it is interested in transition events only, at any level, and in no span.
impl tracing::Subscriber for TraceFile {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.enabled(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        // Not only events: the machines ask `enabled!` (a hint callsite, neither event
        // nor span) whether to number themselves for the trace.
        meta.target() == dynres_core::rc::trace::TARGET
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Never called for a disabled callsite; any non-zero id satisfies the contract.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        self.record_event(event);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// The path this process records to, if `DYNRES_TRACE_FILE` is set (and not empty):
/// the path itself for the master process, `PATH.<pid>` for any other.
pub fn path_from_env(master: bool) -> Option<PathBuf> {
    let base = std::env::var_os(env::TRACE_FILE).filter(|p| !p.is_empty())?;
    if master {
        return Some(PathBuf::from(base));
    }
    let mut p = base;
    p.push(format!(".{}", std::process::id()));
    Some(PathBuf::from(p))
}

/// For processes using the client library: when `DYNRES_TRACE_FILE` is set, installs a
/// global subscriber recording this process's transitions to `PATH.<pid>` (once per
/// process). If the application already installed a global subscriber, that one stays
/// and nothing is recorded (`tracing` allows one global subscriber); have that
/// subscriber pass events to [`TraceFile::record_event`] instead.
pub fn install_for_client() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Some(path) = path_from_env(false) {
            if tracing::subscriber::set_global_default(TraceFile::new(path)).is_err() {
                tracing::warn!(
                    "{} is set but this process already has a tracing subscriber: not recorded",
                    env::TRACE_FILE
                );
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The machines number themselves for the trace only if `enabled!` says the
    /// transition target is on (a hint callsite, not an event): with the client's
    /// subscriber it must be, or a recorded client writes nothing.
    #[test]
    fn the_transition_target_is_enabled_and_nothing_else() {
        let path = std::env::temp_dir().join(format!("dynres-tf-en-{}", std::process::id()));
        tracing::subscriber::with_default(TraceFile::new(&path), || {
            assert!(tracing::enabled!(
                target: dynres_core::rc::trace::TARGET,
                tracing::Level::TRACE
            ));
            assert!(!tracing::enabled!(target: "dynres::other", tracing::Level::ERROR));
        });
        assert!(!path.exists(), "nothing written without an event");
    }

    #[test]
    fn writes_only_transition_events_one_line_each() {
        let dir = std::env::temp_dir().join(format!("dynres-tracefile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t");
        tracing::subscriber::with_default(TraceFile::new(&path), || {
            tracing::info!("not a transition");
            assert!(!path.exists(), "created before the first transition");
            tracing::trace!(
                target: dynres_core::rc::trace::TARGET,
                role = "daemon",
                node = 0u32,
                now = 5u64,
                input = "0102",
                outputs = 7u64,
                state = 9u64,
            );
            // A transition event without the fields is not a line.
            tracing::trace!(target: dynres_core::rc::trace::TARGET, role = "daemon");
        });
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "daemon 0 5 0102 7 9\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
