//! The text form of transition events (`spec/verification.md` §6), shared by every
//! recorder (the verification crate's in-memory recorder, the launcher's
//! `DYNRES_TRACE_FILE` layer) so the line format is written once, and the instance tags
//! that keep several machines of one kind apart in one trace.
//!
//! A transition event (target [`crate::rc::trace::TARGET`]) becomes one line of
//! space-separated words:
//!
//! ```text
//! <role> [<node>] [<id>] start <construction> <outputs> <state>
//! <role> [<node>] [<id>] <now> <input> <outputs> <state>
//! ```
//!
//! `role` is `master`, `daemon` (followed by its node number), or `spawn-handshake`,
//! `spawn-parent`, `spawn-join`, `spawn-member` (followed by the machine id);
//! construction and input are lower-case hex of their wire encodings, the rest decimal.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::sync::atomic::{AtomicU32, Ordering};

use tracing::field::{Field, Visit};

/// The fields of one transition event, collected by name.
#[derive(Default, Debug)]
pub struct EventFields(BTreeMap<&'static str, String>);

impl Visit for EventFields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name(), value.to_string());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name(), value.to_string());
    }
}

impl EventFields {
    /// The line of the event whose fields these are (see the module docs); `None` if it
    /// is not a transition event (no role, no outputs/state) or a field holds whitespace,
    /// which would make the line ambiguous.
    pub fn line(&self) -> Option<String> {
        let get = |k: &str| self.0.get(k).map(String::as_str);
        let mut words: Vec<&str> = Vec::with_capacity(7);
        words.push(get("role")?);
        words.extend(get("node"));
        words.extend(get("id"));
        match get("start") {
            Some(start) => {
                words.push("start");
                words.push(start);
            }
            None => {
                words.push(get("now")?);
                words.push(get("input")?);
            }
        }
        words.push(get("outputs")?);
        words.push(get("state")?);
        if words
            .iter()
            .any(|w| w.is_empty() || w.chars().any(char::is_whitespace))
        {
            return None;
        }
        Some(words.join(" "))
    }
}

/// The trace line of a `tracing` event: `None` unless it is a transition event (target
/// [`crate::rc::trace::TARGET`]) with the fields described in the module docs.
pub fn event_line(event: &tracing::Event<'_>) -> Option<String> {
    if event.metadata().target() != crate::rc::trace::TARGET {
        return None;
    }
    let mut f = EventFields::default();
    event.record(&mut f);
    f.line()
}

static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(1);

/// Which instance of a machine kind this is within its process, for trace machine ids.
/// Numbers come from a process-wide counter, drawn only when transition events are
/// enabled at construction (0 otherwise), so two machines of one kind and group never
/// share an id in one process's trace. Recorded processes write separate files, and
/// every id also names the group and rank, which are unique in a job.
///
/// Not part of a machine's state: all tags compare equal and hash to nothing, so
/// fingerprints, model-checker states and equality do not depend on them.
#[derive(Clone, Copy, Default)]
pub struct InstanceTag(pub u32);

impl InstanceTag {
    /// A fresh tag if transition events are enabled, else 0.
    pub fn draw() -> Self {
        if tracing::enabled!(target: crate::rc::trace::TARGET, tracing::Level::TRACE) {
            InstanceTag(NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed))
        } else {
            InstanceTag(0)
        }
    }
}

impl PartialEq for InstanceTag {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for InstanceTag {}

impl Hash for InstanceTag {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

impl fmt::Debug for InstanceTag {
    // Kept out of model-checker traces: it is bookkeeping of the recorder, not state.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("_")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine's `Debug` (the model checker's counterexample text) does not depend
    /// on which instance it is: the tag prints as `_` whatever its number.
    #[test]
    fn an_instance_tag_prints_the_same_whatever_its_number() {
        assert_eq!(format!("{:?}", InstanceTag(7)), "_");
        assert_eq!(
            format!("{:?}", InstanceTag(7)),
            format!("{:?}", InstanceTag(0))
        );
    }
    use alloc::string::ToString;

    fn fields(kv: &[(&'static str, &str)]) -> EventFields {
        EventFields(kv.iter().map(|(k, v)| (*k, v.to_string())).collect())
    }

    #[test]
    fn lines_of_every_role_shape() {
        let f = fields(&[
            ("role", "master"),
            ("start", "ab"),
            ("outputs", "1"),
            ("state", "2"),
        ]);
        assert_eq!(f.line().as_deref(), Some("master start ab 1 2"));
        let f = fields(&[
            ("role", "daemon"),
            ("node", "3"),
            ("now", "9"),
            ("input", "cd"),
            ("outputs", "1"),
            ("state", "2"),
        ]);
        assert_eq!(f.line().as_deref(), Some("daemon 3 9 cd 1 2"));
        let f = fields(&[
            ("role", "spawn-member"),
            ("id", "g1.r2.a.7"),
            ("now", "9"),
            ("input", "cd"),
            ("outputs", "1"),
            ("state", "2"),
        ]);
        assert_eq!(f.line().as_deref(), Some("spawn-member g1.r2.a.7 9 cd 1 2"));
        // Missing fields or whitespace inside one: not a line.
        assert_eq!(fields(&[("role", "master")]).line(), None);
        let f = fields(&[
            ("role", "master"),
            ("start", "a b"),
            ("outputs", "1"),
            ("state", "2"),
        ]);
        assert_eq!(f.line(), None);
    }

    #[test]
    fn tags_are_not_state() {
        assert_eq!(InstanceTag(1), InstanceTag(2));
        assert_eq!(
            crate::rc::trace::fingerprint(&InstanceTag(1)),
            crate::rc::trace::fingerprint(&InstanceTag(2))
        );
    }
}
