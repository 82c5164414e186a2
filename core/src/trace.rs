//! Transition events (`spec/verification.md` §6): the one recorder every kernel machine
//! emits its events through ([`Recorded`], [`record`], [`record_start`]); the text form
//! of those events, shared by every consumer (the verification crate's in-memory
//! recorder, the launcher's `DYNRES_TRACE_FILE` layer) so the line format is written
//! once; and the instance tags that keep several machines of one kind apart in one
//! trace.
//!
//! This module is a leaf of the crate's module graph: the machines use it, it uses
//! none of them. What each machine records (its role, its id, how its inputs are
//! encoded) is its [`Recorded`] impl.
//!
//! A transition event (target [`TARGET`]) becomes one line of
//! space-separated words:
//!
//! ```text
//! <role> [<node>] [<id>] start <construction> <outputs> <state>
//! <role> [<node>] [<id>] <now> <input> <outputs> <state>
//! ```
//!
//! `role` is `master`, `liveness` or `tool-desk` (nothing follows), `daemon` or
//! `master-watch` (followed by its node number), or `spawn-handshake`, `spawn-parent`,
//! `spawn-join`, `spawn-member`, `giveback` (followed by the machine id); construction
//! and input are lower-case hex of their wire encodings, the rest decimal.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::sync::atomic::{AtomicU32, Ordering};

use tracing::field::{Field, Visit};

use crate::machine::Machine;
use crate::time::Instant;

/// The `tracing` target of transition events.
pub const TARGET: &str = "dynres::transition";

/// FNV-1a, 64 bit: a fixed, seedless hash, so fingerprints agree across runs and hosts.
#[derive(Clone, Copy, Debug)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv64 {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The fingerprint of anything hashable.
pub fn fingerprint<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut h = Fnv64::default();
    value.hash(&mut h);
    h.finish()
}

/// Lower-case hex, for putting bytes into a trace line.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Parses [`hex`]; `None` on an odd length or a non-hex digit.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16);
    let b = s.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    b.chunks(2)
        .map(|p| Some((digit(p[0])? * 16 + digit(p[1])?) as u8))
        .collect()
}

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
/// [`TARGET`]) with the fields described in the module docs.
pub fn event_line(event: &tracing::Event<'_>) -> Option<String> {
    if event.metadata().target() != TARGET {
        return None;
    }
    let mut f = EventFields::default();
    event.record(&mut f);
    f.line()
}

/// Whether transition events are enabled: the one check the kernel pays per transition
/// when tracing is off.
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::TRACE)
}

/// The words between a line's role and its time: which machine of the role it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceKey {
    /// Nothing: one machine of the role per process (the master, its liveness, its tool
    /// desk).
    None,
    /// A daemon's (or its master watch's) node number.
    Node(u32),
    /// A spawn or give-back machine's id (see [`InstanceTag`]).
    Id(String),
}

/// How a transition's result enters its outputs fingerprint; fixed per role, so
/// recorded traces keep replaying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultRecord {
    /// Hashed with the outputs, so a replay also checks which inputs were rejected (the
    /// spawn machines).
    Hashed,
    /// Not hashed: a rejection shows in the outputs (the daemon's refusal reply).
    Omitted,
    /// A rejected input records no event at all, since it changed nothing (the master).
    OnlyAccepted,
}

/// A machine whose transitions are recorded: what [`record`] and [`record_start`] need
/// to know about it.
pub trait Recorded: Machine + Hash {
    /// The `role` word of its lines.
    const ROLE: &'static str;
    /// How the result of `handle` enters the outputs fingerprint.
    const RESULT: ResultRecord;
    /// Which machine of the role this is.
    fn key(&self) -> TraceKey;
    /// Its queue of outputs not yet drained.
    fn queue(&mut self) -> &mut VecDeque<Self::Output>;
    /// Its instance tag, drawn when its `start` event is recorded; `None` for roles
    /// keyed otherwise.
    fn tag(&mut self) -> Option<&mut InstanceTag> {
        None
    }
    /// The recorded form of an input (replay decodes it).
    fn encode_input(input: &Self::Input) -> Vec<u8>;
    /// Hashes one output into its transition's outputs fingerprint: by its own `Hash`,
    /// unless it holds data the recorded inputs carry only in part, so that replay,
    /// fed those inputs, still reproduces the fingerprint (the tool desk's refusals,
    /// whose errors a trace carries in their wire form).
    fn hash_output<H: Hasher>(output: &Self::Output, h: &mut H)
    where
        Self::Output: Hash,
    {
        output.hash(h);
    }
}

/// The outputs of one transition as its line fingerprints them: hashed as a slice is
/// (its length, then each element), each element by [`Recorded::hash_output`], so a
/// machine that keeps the default records exactly the fingerprint of its outputs.
pub struct RecordedOutputs<'a, M: Recorded>(pub &'a [&'a M::Output]);

impl<M: Recorded> Hash for RecordedOutputs<'_, M>
where
    M::Output: Hash,
{
    fn hash<H: Hasher>(&self, h: &mut H) {
        // What `<[T] as Hash>::hash` writes before the elements.
        h.write_usize(self.0.len());
        for o in self.0 {
            M::hash_output(o, h);
        }
    }
}

/// [`Machine::handle`] with its transition event: encodes `input` if events are
/// enabled, runs `step`, and records what it queued and the state after.
pub fn record<M>(
    m: &mut M,
    now: Instant,
    input: M::Input,
    step: impl FnOnce(&mut M, Instant, M::Input) -> Result<(), M::Error>,
) -> Result<(), M::Error>
where
    M: Recorded,
    M::Output: Hash,
    M::Error: Hash,
{
    let recorded = enabled().then(|| M::encode_input(&input));
    record_encoded(m, now, recorded, |m| step(m, now, input))
}

/// [`record`] for a machine whose steps cannot fail (`Error = Infallible`): its inherent
/// `handle` returns `()`.
pub fn record_infallible<M>(
    m: &mut M,
    now: Instant,
    input: M::Input,
    step: impl FnOnce(&mut M, Instant, M::Input),
) where
    M: Recorded<Error = core::convert::Infallible>,
    M::Output: Hash,
{
    let r = record(m, now, input, |m, now, input| {
        step(m, now, input);
        Ok(())
    });
    match r {
        Ok(()) => {}
        Err(never) => match never {},
    }
}

/// [`record`] for a transition whose input is not a [`Machine::Input`] (a handshake's
/// `cancel`): `recorded` is its encoding, present when events are enabled.
pub fn record_encoded<M>(
    m: &mut M,
    now: Instant,
    recorded: Option<Vec<u8>>,
    step: impl FnOnce(&mut M) -> Result<(), M::Error>,
) -> Result<(), M::Error>
where
    M: Recorded,
    M::Output: Hash,
    M::Error: Hash,
{
    let first_output = m.queue().len();
    let r = step(m);
    if let Some(input) = recorded {
        let outputs: Vec<&M::Output> = m.queue().iter().skip(first_output).collect();
        let outputs = RecordedOutputs::<M>(&outputs);
        let outputs = match M::RESULT {
            ResultRecord::Hashed => Some(fingerprint(&(outputs, &r))),
            ResultRecord::Omitted => Some(fingerprint(&outputs)),
            ResultRecord::OnlyAccepted => r.is_ok().then(|| fingerprint(&outputs)),
        };
        if let Some(outputs) = outputs {
            let state = m.fingerprint();
            let at = Word::Now(now.as_nanos());
            emit(&m.key(), M::ROLE, at, &hex(&input), outputs, state);
        }
    }
    r
}

/// Records a new machine's `start` event (`start` is its encoded construction, present
/// when events are enabled): draws its instance tag, then fingerprints the outputs its
/// construction queued and its state.
pub fn record_start<M>(m: &mut M, start: Option<Vec<u8>>)
where
    M: Recorded,
    M::Output: Hash,
{
    let Some(start) = start else { return };
    if let Some(tag) = m.tag() {
        *tag = InstanceTag::draw();
    }
    let outputs: Vec<&M::Output> = m.queue().iter().collect();
    let outputs = fingerprint(&RecordedOutputs::<M>(&outputs));
    let state = m.fingerprint();
    emit(&m.key(), M::ROLE, Word::Start, &hex(&start), outputs, state);
}

/// The word after the key: `start`, or the time of the transition.
enum Word {
    Start,
    Now(u64),
}

/// Emits one transition event. The field names are those [`EventFields::line`] reads;
/// one macro call per shape because an event's fields are fixed at its call site.
fn emit(key: &TraceKey, role: &'static str, word: Word, arg: &str, outputs: u64, state: u64) {
    match (key, word) {
        (TraceKey::None, Word::Start) => {
            tracing::trace!(target: TARGET, role, start = arg, outputs, state);
        }
        (TraceKey::None, Word::Now(now)) => {
            tracing::trace!(target: TARGET, role, now, input = arg, outputs, state);
        }
        (TraceKey::Node(node), Word::Start) => {
            tracing::trace!(target: TARGET, role, node, start = arg, outputs, state);
        }
        (TraceKey::Node(node), Word::Now(now)) => {
            tracing::trace!(target: TARGET, role, node, now, input = arg, outputs, state);
        }
        (TraceKey::Id(id), Word::Start) => {
            let id = id.as_str();
            tracing::trace!(target: TARGET, role, id, start = arg, outputs, state);
        }
        (TraceKey::Id(id), Word::Now(now)) => {
            let id = id.as_str();
            tracing::trace!(target: TARGET, role, id, now, input = arg, outputs, state);
        }
    }
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
        if enabled() {
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
        assert_eq!(fingerprint(&InstanceTag(1)), fingerprint(&InstanceTag(2)));
    }
}
