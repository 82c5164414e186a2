//! Transition records of the spawn machines (`spec/verification.md` §6): the encodings
//! of their construction arguments and inputs, so a recorded trace can rebuild each
//! machine and feed it again, and the events themselves.
//!
//! Every [`Handshake`](super::Handshake), [`SpawnParent`](super::SpawnParent),
//! [`Join`](super::Join) and [`Member`](super::Member) built while transition events are
//! enabled emits a `start` event (its encoded construction) and then one event per
//! `handle` (and per [`Handshake::cancel`](super::Handshake::cancel)), at target
//! [`TARGET`] and level TRACE, with a machine id unique in the process (see
//! [`crate::trace::InstanceTag`]). The outputs fingerprint covers the outputs the call
//! queued **and** its result, so a replay also checks which inputs were rejected.
//! Encoding happens only when the event is enabled.
//!
//! Every encoding is built from [`crate::wire::prim`]; every decoder is a nom parser
//! returning a typed [`WireError`], never panicking on recorded bytes.

use alloc::vec::Vec;

use nom::Parser;

use super::msg::{AbortReason, Addr, GroupHeader, MAX_ADDR, MAX_GROUP, boot_key, put_key};
use super::port::{Bootstrap, PortName};
use super::role::Role;
use super::types::{HandshakeConfig, MemberMsg, Phase, Served, SpawnConfig};
use super::{DatagramConfig, Input, JoinInput, ParentInput, SpawnError};
use crate::process::{Namespace, Rank};
use crate::time::{Duration, Instant};
use crate::wire::prim::{self, put_bytes, put_seq, put_str, put_u8, put_u16, put_u32, put_u64};
use crate::wire::{PResult, WireError, parse_all};

pub use crate::trace::TARGET;

/// Role name of a [`super::Handshake`]'s events.
pub const ROLE_HANDSHAKE: &str = "spawn-handshake";
/// Role name of a [`super::SpawnParent`]'s events.
pub const ROLE_PARENT: &str = "spawn-parent";
/// Role name of a [`super::Join`]'s events.
pub const ROLE_JOIN: &str = "spawn-join";
/// Role name of a [`super::Member`]'s events.
pub const ROLE_MEMBER: &str = "spawn-member";

/// Largest recorded payload (a datagram, stream chunk, launch failure reason).
const MAX_PAYLOAD: usize = 1 << 24;
/// Longest recorded error text.
const MAX_TEXT: usize = 4096;
/// Most served connections a recorded accept's configuration lists (SPAWN-21).
const MAX_SERVED: usize = 1 << 16;

/// What a handshake's `handle` or `cancel` took: the trace's input of a
/// [`super::Handshake`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HandshakeInput {
    /// An input fed to `handle`.
    Input(Input),
    /// `cancel(error)`.
    Cancel(SpawnError),
}

// --- primitives --------------------------------------------------------------------

fn fail<T>(what: &'static str, value: u64) -> PResult<'static, T> {
    Err(nom::Err::Failure(WireError::InvalidValue { what, value }))
}

fn put_addr(out: &mut Vec<u8>, a: &Addr) {
    put_bytes(out, &a.0);
}

fn addr(i: &[u8]) -> PResult<'_, Addr> {
    // Recorded source addresses come from the network; bounded, not interpreted.
    let (i, b) = prim::bytes("address", MAX_PAYLOAD)(i)?;
    Ok((i, Addr(b.to_vec())))
}

fn put_addrs(out: &mut Vec<u8>, v: &[Addr]) {
    put_seq(out, v, put_addr);
}

fn addrs(i: &[u8]) -> PResult<'_, Vec<Addr>> {
    prim::seq("endpoints", MAX_GROUP, addr)(i)
}

fn put_header(out: &mut Vec<u8>, h: &GroupHeader) {
    put_u64(out, h.group_id);
    put_u32(out, h.size);
    put_u32(out, h.context_id);
}

fn header(i: &[u8]) -> PResult<'_, GroupHeader> {
    let (i, (group_id, size, context_id)) = (prim::u64, prim::u32, prim::u32).parse(i)?;
    Ok((
        i,
        GroupHeader {
            group_id,
            size,
            context_id,
        },
    ))
}

fn put_opt_u64(out: &mut Vec<u8>, v: Option<u64>) {
    put_u8(out, u8::from(v.is_some()));
    put_u64(out, v.unwrap_or(0));
}

fn opt_u64(i: &[u8]) -> PResult<'_, Option<u64>> {
    let (i, (some, v)) = (prim::u8, prim::u64).parse(i)?;
    match some {
        0 => Ok((i, None)),
        1 => Ok((i, Some(v))),
        s => fail("option flag", u64::from(s)),
    }
}

fn put_role(out: &mut Vec<u8>, r: Role) {
    put_u8(
        out,
        match r {
            Role::Acceptor => 1,
            Role::Initiator => 2,
        },
    );
}

fn role(i: &[u8]) -> PResult<'_, Role> {
    let (i, r) = prim::u8(i)?;
    match r {
        1 => Ok((i, Role::Acceptor)),
        2 => Ok((i, Role::Initiator)),
        r => fail("role", u64::from(r)),
    }
}

fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

// --- ports and configurations ------------------------------------------------------

/// Encodes a port name field by field (not as text, so any address survives).
pub fn put_port(out: &mut Vec<u8>, p: &PortName) {
    match p.boot {
        Bootstrap::Datagram => {
            put_u8(out, 1);
            put_u32(out, 0);
        }
        Bootstrap::Stream => {
            put_u8(out, 2);
            put_u32(out, 0);
        }
        Bootstrap::Hybrid { threshold } => {
            put_u8(out, 3);
            put_u32(out, threshold);
        }
    }
    prim::put_bytes(out, &p.dgram.0);
    prim::put_bytes(out, &p.stream.0);
    put_u32(out, p.tag);
    // A trace holds the keys of the connections it recorded, so that a replay
    // recomputes every tag (SPAWN-22): treat a recorded trace as a secret.
    put_key(out, &p.key);
}

/// Parses [`put_port`].
pub fn port(i: &[u8]) -> PResult<'_, PortName> {
    let (i, (boot, threshold)) = (prim::u8, prim::u32).parse(i)?;
    let boot = match boot {
        1 => Bootstrap::Datagram,
        2 => Bootstrap::Stream,
        3 => Bootstrap::Hybrid { threshold },
        b => return fail("bootstrap", u64::from(b)),
    };
    let (i, dgram) = prim::bytes("port address", MAX_ADDR)(i)?;
    let (i, stream) = prim::bytes("port address", MAX_ADDR)(i)?;
    let (i, tag) = prim::u32(i)?;
    let (i, key) = boot_key(i)?;
    Ok((
        i,
        PortName {
            boot,
            dgram: Addr(dgram.to_vec()),
            stream: Addr(stream.to_vec()),
            tag,
            key,
        },
    ))
}

/// Encodes a [`HandshakeConfig`].
pub fn put_handshake_config(out: &mut Vec<u8>, c: &HandshakeConfig) {
    put_header(out, &c.local);
    put_addrs(out, &c.local_endpoints);
    put_u32(out, c.root);
    put_u64(out, c.timeout.as_nanos());
    put_u64(out, c.datagram.mtu as u64);
    put_u64(out, c.datagram.rto.as_nanos());
    put_u32(out, c.datagram.max_retries);
    put_u8(out, u8::from(c.expect_remote.is_some()));
    let (g, s) = c.expect_remote.unwrap_or((0, 0));
    put_u64(out, g);
    put_u32(out, s);
    put_opt_u64(out, c.session);
    put_seq(out, &c.served, |out, v| {
        put_addr(out, &v.from);
        put_u64(out, v.session);
    });
}

/// Parses one [`Served`] of a [`HandshakeConfig`].
fn served(i: &[u8]) -> PResult<'_, Served> {
    let (i, (from, session)) = (addr, prim::u64).parse(i)?;
    Ok((i, Served { from, session }))
}

/// Parses [`put_handshake_config`].
pub fn handshake_config(i: &[u8]) -> PResult<'_, HandshakeConfig> {
    let (i, local) = header(i)?;
    let (i, local_endpoints) = addrs(i)?;
    let (i, (root, timeout, mtu, rto, max_retries)) =
        (prim::u32, prim::u64, prim::u64, prim::u64, prim::u32).parse(i)?;
    let (i, (expects, g, s)) = (prim::u8, prim::u64, prim::u32).parse(i)?;
    let expect_remote = match expects {
        0 => None,
        1 => Some((g, s)),
        e => return fail("option flag", u64::from(e)),
    };
    let (i, session) = opt_u64(i)?;
    let (i, served) = prim::seq("served connections", MAX_SERVED, served)(i)?;
    Ok((
        i,
        HandshakeConfig {
            local,
            local_endpoints,
            root,
            timeout: Duration(timeout),
            datagram: DatagramConfig {
                mtu: to_usize(mtu),
                rto: Duration(rto),
                max_retries,
            },
            expect_remote,
            session,
            served,
        },
    ))
}

/// Encodes a [`SpawnConfig`].
pub fn put_spawn_config(out: &mut Vec<u8>, c: &SpawnConfig) {
    put_handshake_config(out, &c.handshake);
    put_port(out, &c.port);
    put_u32(out, c.maxprocs);
    put_str(out, c.child_namespace.as_str());
    put_u64(out, c.child_group_id);
    put_key(out, &c.key);
}

/// Parses [`put_spawn_config`].
pub fn spawn_config(i: &[u8]) -> PResult<'_, SpawnConfig> {
    let (i, handshake) = handshake_config(i)?;
    let (i, port) = port(i)?;
    let (i, maxprocs) = prim::u32(i)?;
    let (i, ns) = prim::string("namespace", 255)(i)?;
    let (i, child_group_id) = prim::u64(i)?;
    let (i, key) = boot_key(i)?;
    Ok((
        i,
        SpawnConfig {
            handshake,
            port,
            maxprocs,
            child_namespace: Namespace::new(ns),
            child_group_id,
            key,
        },
    ))
}

// --- errors ------------------------------------------------------------------------

/// The texts a [`SpawnError`] or [`WireError`] of the spawn machines can carry as
/// `&'static str`. A decoder cannot make a `&'static str` from recorded bytes without
/// leaking, so it maps the text back to this table; a test keeps the table in step with
/// the spawn sources.
pub const STATIC_TEXTS: &[&str] = &[
    "DYNRES_SPAWN_GROUP is not a u64",
    "DYNRES_SPAWN_SIZE is not a u32",
    "datagram MTU below 128 bytes",
    "join connects singleton groups",
    "local group size must be 1..=65536",
    "maxprocs must be 1..=65536",
    "port addresses must be 1..=64 bytes",
    "port tags exhausted",
    "root is not a rank of the local group",
    "spawn environment incomplete",
    "Hello with group size 0 or over 65536",
    "HelloAck with group size 0 or over 65536",
    "HelloAck's endpoint transport breaks SPAWN-9",
    "RemoteEndpoints before RemoteGroup",
    "StreamClosed without a bootstrap stream",
    "abort reason",
    "address",
    "datagram outside a datagram session",
    "datagram send without a datagram session",
    "endpoints",
    "first datagram is not a Hello",
    "first datagram is not a one-segment Hello",
    "Hello of a connection the port already served",
    "inputs held before the join port",
    "messages in reassembly",
    "segment count changed within a message",
    "segment index/count",
    "session",
    "stream bytes in a datagram-only handshake",
    "transport",
    "too long",
    "does not match dynres:2:<boot>:<hex>:<hex>:<tag>:<key>",
    "does not match dynres:2:<boot>:<hex>:<hex>:<tag>",
    "DYNRES_SPAWN_KEY is not 64 hex digits",
    "datagram without a tag",
    "datagram with a wrong tag",
    "datagram of another session",
    "stream frame without a tag",
    "stream frame with a wrong tag",
    "Hello of a group this spawn did not launch",
    "message of another session",
    "port name",
    "join port",
    "handshake message",
    "message",
    "segment",
    "segment payload",
    "port",
    "change request: ADD with sub",
    "change request: ADD with victims",
    "change request: SUB or REPLACE with a bound pset",
    "change request: SUB with add",
    "change request: sub is not the number of named victims",
];

fn static_text(i: &[u8]) -> PResult<'_, &'static str> {
    let (i, s) = prim::bytes("error text", MAX_TEXT)(i)?;
    match STATIC_TEXTS.iter().find(|t| t.as_bytes() == s) {
        Some(t) => Ok((i, t)),
        None => fail("error text not in STATIC_TEXTS (length)", s.len() as u64),
    }
}

fn put_wire_error(out: &mut Vec<u8>, e: &WireError) {
    match e {
        WireError::BadMagic { found } => {
            put_u8(out, 1);
            put_u8(out, found[0]);
            put_u8(out, found[1]);
        }
        WireError::UnknownVersion { version } => {
            put_u8(out, 2);
            put_u8(out, *version);
        }
        WireError::UnknownType { msg_type } => {
            put_u8(out, 3);
            put_u16(out, *msg_type);
        }
        WireError::Truncated => put_u8(out, 4),
        WireError::LengthMismatch { declared, actual } => {
            put_u8(out, 5);
            put_u32(out, *declared);
            put_u64(out, *actual as u64);
        }
        WireError::TrailingBytes { extra } => {
            put_u8(out, 6);
            put_u64(out, *extra as u64);
        }
        WireError::NotUtf8 => put_u8(out, 7),
        WireError::OverLimit { what, value, max } => {
            put_u8(out, 8);
            put_str(out, what);
            put_u64(out, *value);
            put_u64(out, *max);
        }
        WireError::InvalidValue { what, value } => {
            put_u8(out, 9);
            put_str(out, what);
            put_u64(out, *value);
        }
        WireError::Checksum { computed, received } => {
            put_u8(out, 10);
            put_u32(out, *computed);
            put_u32(out, *received);
        }
        WireError::Inconsistent { what } => {
            put_u8(out, 11);
            put_str(out, what);
        }
    }
}

fn wire_error(i: &[u8]) -> PResult<'_, WireError> {
    let (i, tag) = prim::u8(i)?;
    match tag {
        1 => {
            let (i, (a, b)) = (prim::u8, prim::u8).parse(i)?;
            Ok((i, WireError::BadMagic { found: [a, b] }))
        }
        2 => prim::u8(i).map(|(i, version)| (i, WireError::UnknownVersion { version })),
        3 => prim::u16(i).map(|(i, msg_type)| (i, WireError::UnknownType { msg_type })),
        4 => Ok((i, WireError::Truncated)),
        5 => {
            let (i, (declared, actual)) = (prim::u32, prim::u64).parse(i)?;
            let actual = to_usize(actual);
            Ok((i, WireError::LengthMismatch { declared, actual }))
        }
        6 => prim::u64(i).map(|(i, e)| (i, WireError::TrailingBytes { extra: to_usize(e) })),
        7 => Ok((i, WireError::NotUtf8)),
        8 => {
            let (i, (what, value, max)) = (static_text, prim::u64, prim::u64).parse(i)?;
            Ok((i, WireError::OverLimit { what, value, max }))
        }
        9 => {
            let (i, (what, value)) = (static_text, prim::u64).parse(i)?;
            Ok((i, WireError::InvalidValue { what, value }))
        }
        10 => {
            let (i, (computed, received)) = (prim::u32, prim::u32).parse(i)?;
            Ok((i, WireError::Checksum { computed, received }))
        }
        11 => static_text(i).map(|(i, what)| (i, WireError::Inconsistent { what })),
        t => fail("wire error tag", u64::from(t)),
    }
}

fn put_phase(out: &mut Vec<u8>, p: Phase) {
    put_u8(
        out,
        match p {
            Phase::JoinExchange => 1,
            Phase::Listening => 2,
            Phase::AwaitHelloAck => 3,
            Phase::Endpoints => 4,
            Phase::Done => 5,
            Phase::Failed => 6,
        },
    );
}

fn phase(i: &[u8]) -> PResult<'_, Phase> {
    let (i, p) = prim::u8(i)?;
    let p = match p {
        1 => Phase::JoinExchange,
        2 => Phase::Listening,
        3 => Phase::AwaitHelloAck,
        4 => Phase::Endpoints,
        5 => Phase::Done,
        6 => Phase::Failed,
        p => return fail("phase", u64::from(p)),
    };
    Ok((i, p))
}

/// Encodes a [`SpawnError`] (as carried by [`MemberMsg::Failed`] and `cancel`).
pub fn put_spawn_error(out: &mut Vec<u8>, e: &SpawnError) {
    match e {
        SpawnError::Wire(w) => {
            put_u8(out, 1);
            put_wire_error(out, w);
        }
        SpawnError::BadPort { name, reason } => {
            put_u8(out, 2);
            put_str(out, name);
            put_str(out, reason);
        }
        SpawnError::PortNotOpen(p) => {
            put_u8(out, 3);
            put_str(out, p);
        }
        SpawnError::Timeout { phase } => {
            put_u8(out, 4);
            put_phase(out, *phase);
        }
        SpawnError::PeerUnreachable { retries } => {
            put_u8(out, 5);
            put_u32(out, *retries);
        }
        SpawnError::EndpointCount { expected, got } => {
            put_u8(out, 6);
            put_u32(out, *expected);
            put_u64(out, *got);
        }
        SpawnError::WrongRemoteGroup {
            expected_group,
            expected_size,
            got_group,
            got_size,
        } => {
            put_u8(out, 7);
            put_u64(out, *expected_group);
            put_u32(out, *expected_size);
            put_u64(out, *got_group);
            put_u32(out, *got_size);
        }
        SpawnError::WrongSession { expected, got } => {
            put_u8(out, 8);
            put_u64(out, *expected);
            put_u64(out, *got);
        }
        SpawnError::UnknownPeer => put_u8(out, 9),
        SpawnError::Unexpected { what } => {
            put_u8(out, 10);
            put_str(out, what);
        }
        SpawnError::Aborted { reason } => {
            put_u8(out, 11);
            put_u8(out, *reason as u8);
        }
        SpawnError::LaunchFailed { reason } => {
            put_u8(out, 12);
            put_str(out, reason);
        }
        SpawnError::StreamClosed => put_u8(out, 13),
        SpawnError::ContextIdsExhausted => put_u8(out, 14),
        SpawnError::ContextIdNotLive(id) => {
            put_u8(out, 15);
            put_u32(out, *id);
        }
        SpawnError::Config(what) => {
            put_u8(out, 16);
            put_str(out, what);
        }
        SpawnError::JoinSamePort => put_u8(out, 17),
        SpawnError::Reported { code, text } => {
            put_u8(out, 18);
            put_u8(out, *code);
            put_str(out, text);
        }
        SpawnError::Forged { what } => {
            put_u8(out, 19);
            put_str(out, what);
        }
    }
}

/// Parses [`put_spawn_error`]. A `&'static str` field must be one of [`STATIC_TEXTS`].
pub fn spawn_error(i: &[u8]) -> PResult<'_, SpawnError> {
    let text = || prim::string("error text", MAX_TEXT);
    let (i, tag) = prim::u8(i)?;
    let (i, e) = match tag {
        1 => wire_error(i).map(|(i, w)| (i, SpawnError::Wire(w)))?,
        2 => {
            let (i, (name, reason)) = (text(), static_text).parse(i)?;
            (i, SpawnError::BadPort { name, reason })
        }
        3 => text()(i).map(|(i, p)| (i, SpawnError::PortNotOpen(p)))?,
        4 => phase(i).map(|(i, phase)| (i, SpawnError::Timeout { phase }))?,
        5 => prim::u32(i).map(|(i, retries)| (i, SpawnError::PeerUnreachable { retries }))?,
        6 => {
            let (i, (expected, got)) = (prim::u32, prim::u64).parse(i)?;
            (i, SpawnError::EndpointCount { expected, got })
        }
        7 => {
            let (i, (expected_group, expected_size, got_group, got_size)) =
                (prim::u64, prim::u32, prim::u64, prim::u32).parse(i)?;
            (
                i,
                SpawnError::WrongRemoteGroup {
                    expected_group,
                    expected_size,
                    got_group,
                    got_size,
                },
            )
        }
        8 => {
            let (i, (expected, got)) = (prim::u64, prim::u64).parse(i)?;
            (i, SpawnError::WrongSession { expected, got })
        }
        9 => (i, SpawnError::UnknownPeer),
        10 => static_text(i).map(|(i, what)| (i, SpawnError::Unexpected { what }))?,
        11 => {
            let (i, r) = prim::u8(i)?;
            let reason = match r {
                1 => AbortReason::Timeout,
                2 => AbortReason::ProtocolViolation,
                3 => AbortReason::Cancelled,
                r => return fail("abort reason", u64::from(r)),
            };
            (i, SpawnError::Aborted { reason })
        }
        12 => text()(i).map(|(i, reason)| (i, SpawnError::LaunchFailed { reason }))?,
        13 => (i, SpawnError::StreamClosed),
        14 => (i, SpawnError::ContextIdsExhausted),
        15 => prim::u32(i).map(|(i, id)| (i, SpawnError::ContextIdNotLive(id)))?,
        16 => static_text(i).map(|(i, what)| (i, SpawnError::Config(what)))?,
        17 => (i, SpawnError::JoinSamePort),
        18 => {
            let (i, (code, text)) = (prim::u8, text()).parse(i)?;
            (i, SpawnError::Reported { code, text })
        }
        19 => static_text(i).map(|(i, what)| (i, SpawnError::Forged { what }))?,
        t => return fail("spawn error tag", u64::from(t)),
    };
    Ok((i, e))
}

// --- inputs ------------------------------------------------------------------------

/// Encodes a bootstrap input: tag 1 `Datagram` (from, bytes), 2 `Stream`, 3
/// `StreamClosed`, 6 `Timeout`. Tags 4 (`JoinInput::JoinStream`) and 5
/// (`ParentInput::LaunchFailed`) are the other roots' own; one tag space for the three,
/// as when they shared one input type, so traces recorded then still replay.
pub fn put_input(out: &mut Vec<u8>, input: &Input) {
    match input {
        Input::Datagram { from, bytes } => {
            put_u8(out, 1);
            put_addr(out, from);
            put_bytes(out, bytes);
        }
        Input::Stream { bytes } => {
            put_u8(out, 2);
            put_bytes(out, bytes);
        }
        Input::StreamClosed => put_u8(out, 3),
        Input::Timeout => put_u8(out, 6),
    }
}

/// The bytes of a recorded payload (a datagram, a stream chunk).
fn payload(i: &[u8]) -> PResult<'_, &[u8]> {
    prim::bytes("payload", MAX_PAYLOAD)(i)
}

/// Parses the input after its tag `tag`, if `tag` is one of [`put_input`]'s.
fn input_tagged(tag: u8, i: &[u8]) -> Option<PResult<'_, Input>> {
    Some(match tag {
        1 => (addr, payload).parse(i).map(|(i, (from, bytes))| {
            let bytes = bytes.to_vec();
            (i, Input::Datagram { from, bytes })
        }),
        2 => payload(i).map(|(i, b)| (i, Input::Stream { bytes: b.to_vec() })),
        3 => Ok((i, Input::StreamClosed)),
        6 => Ok((i, Input::Timeout)),
        _ => return None,
    })
}

/// Parses [`put_input`].
pub fn input(i: &[u8]) -> PResult<'_, Input> {
    let (i, tag) = prim::u8(i)?;
    input_tagged(tag, i).unwrap_or_else(|| fail("input tag", u64::from(tag)))
}

/// Encodes a bootstrap input as a trace word.
pub fn encode_input(input: &Input) -> Vec<u8> {
    let mut out = Vec::new();
    put_input(&mut out, input);
    out
}

/// Decodes [`encode_input`].
pub fn decode_input(bytes: &[u8]) -> Result<Input, WireError> {
    parse_all(bytes, input)
}

/// Encodes a spawn parent's input as a trace word: a bootstrap input as [`put_input`]
/// does, or tag 5 `LaunchFailed` (reason).
pub fn encode_parent_input(input: &ParentInput) -> Vec<u8> {
    let mut out = Vec::new();
    match input {
        ParentInput::Handshake(i) => put_input(&mut out, i),
        ParentInput::LaunchFailed { reason } => {
            put_u8(&mut out, 5);
            put_str(&mut out, reason);
        }
    }
    out
}

/// Decodes [`encode_parent_input`].
pub fn decode_parent_input(bytes: &[u8]) -> Result<ParentInput, WireError> {
    parse_all(bytes, |i| {
        let (i, tag) = prim::u8(i)?;
        match tag {
            5 => prim::string("launch failure", MAX_PAYLOAD)(i)
                .map(|(i, reason)| (i, ParentInput::LaunchFailed { reason })),
            t => input_tagged(t, i)
                .map(|r| r.map(|(i, input)| (i, ParentInput::Handshake(input))))
                .unwrap_or_else(|| fail("input tag", u64::from(t))),
        }
    })
}

/// Encodes a join's input as a trace word: a bootstrap input as [`put_input`] does, or
/// tag 4 `JoinStream` (bytes).
pub fn encode_join_input(input: &JoinInput) -> Vec<u8> {
    let mut out = Vec::new();
    match input {
        JoinInput::Handshake(i) => put_input(&mut out, i),
        JoinInput::JoinStream { bytes } => {
            put_u8(&mut out, 4);
            put_bytes(&mut out, bytes);
        }
    }
    out
}

/// Decodes [`encode_join_input`].
pub fn decode_join_input(bytes: &[u8]) -> Result<JoinInput, WireError> {
    parse_all(bytes, |i| {
        let (i, tag) = prim::u8(i)?;
        match tag {
            4 => payload(i).map(|(i, b)| (i, JoinInput::JoinStream { bytes: b.to_vec() })),
            t => input_tagged(t, i)
                .map(|r| r.map(|(i, input)| (i, JoinInput::Handshake(input))))
                .unwrap_or_else(|| fail("input tag", u64::from(t))),
        }
    })
}

/// Encodes a handshake's trace input: an [`Input`] as [`put_input`] does, or tag 7
/// `cancel` followed by the error.
pub fn encode_handshake_input(input: &HandshakeInput) -> Vec<u8> {
    match input {
        HandshakeInput::Input(i) => encode_input(i),
        HandshakeInput::Cancel(e) => {
            let mut out = Vec::new();
            put_u8(&mut out, 7);
            put_spawn_error(&mut out, e);
            out
        }
    }
}

/// Decodes [`encode_handshake_input`].
pub fn decode_handshake_input(bytes: &[u8]) -> Result<HandshakeInput, WireError> {
    if bytes.first() == Some(&7) {
        parse_all(&bytes[1..], spawn_error).map(HandshakeInput::Cancel)
    } else {
        decode_input(bytes).map(HandshakeInput::Input)
    }
}

/// Encodes a [`MemberMsg`] (a member's input): tag 1 `RemoteGroup`, 2
/// `RemoteEndpoints`, 3 `Failed`, each starting with the session.
pub fn encode_member_msg(msg: &MemberMsg) -> Vec<u8> {
    let mut out = Vec::new();
    match msg {
        MemberMsg::RemoteGroup {
            session,
            remote,
            data_key,
        } => {
            put_u8(&mut out, 1);
            put_u64(&mut out, *session);
            put_header(&mut out, remote);
            put_key(&mut out, data_key);
        }
        MemberMsg::RemoteEndpoints { session, endpoints } => {
            put_u8(&mut out, 2);
            put_u64(&mut out, *session);
            put_addrs(&mut out, endpoints);
        }
        MemberMsg::Failed { session, error } => {
            put_u8(&mut out, 3);
            put_u64(&mut out, *session);
            put_spawn_error(&mut out, error);
        }
    }
    out
}

/// Decodes [`encode_member_msg`].
pub fn decode_member_msg(bytes: &[u8]) -> Result<MemberMsg, WireError> {
    parse_all(bytes, |i: &[u8]| -> PResult<'_, MemberMsg> {
        let (i, (tag, session)) = (prim::u8, prim::u64).parse(i)?;
        match tag {
            1 => {
                let (i, (remote, data_key)) = (header, boot_key).parse(i)?;
                Ok((
                    i,
                    MemberMsg::RemoteGroup {
                        session,
                        remote,
                        data_key,
                    },
                ))
            }
            2 => addrs(i)
                .map(|(i, endpoints)| (i, MemberMsg::RemoteEndpoints { session, endpoints })),
            3 => spawn_error(i).map(|(i, error)| (i, MemberMsg::Failed { session, error })),
            t => fail("member message tag", u64::from(t)),
        }
    })
}

// --- construction records ----------------------------------------------------------

/// How a [`super::Handshake`] was built (`Handshake::new`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandshakeStart {
    /// The time of construction.
    pub now: Instant,
    /// Acceptor or initiator.
    pub role: Role,
    /// The port accepted on or connected to.
    pub port: PortName,
    /// The configuration.
    pub cfg: HandshakeConfig,
}

/// Encodes a [`HandshakeStart`]: role, now, port, configuration.
pub fn encode_handshake_start(
    now: Instant,
    role: Role,
    port: &PortName,
    cfg: &HandshakeConfig,
) -> Vec<u8> {
    let mut out = Vec::new();
    put_role(&mut out, role);
    put_u64(&mut out, now.as_nanos());
    put_port(&mut out, port);
    put_handshake_config(&mut out, cfg);
    out
}

/// Decodes [`encode_handshake_start`].
pub fn decode_handshake_start(bytes: &[u8]) -> Result<HandshakeStart, WireError> {
    parse_all(bytes, |i: &[u8]| -> PResult<'_, HandshakeStart> {
        let (i, (role, now, port, cfg)) = (role, prim::u64, port, handshake_config).parse(i)?;
        Ok((
            i,
            HandshakeStart {
                now: Instant(now),
                role,
                port,
                cfg,
            },
        ))
    })
}

/// Encodes how a [`super::SpawnParent`] was built: now, configuration.
pub fn encode_parent_start(now: Instant, cfg: &SpawnConfig) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, now.as_nanos());
    put_spawn_config(&mut out, cfg);
    out
}

/// Decodes [`encode_parent_start`].
pub fn decode_parent_start(bytes: &[u8]) -> Result<(Instant, SpawnConfig), WireError> {
    parse_all(bytes, |i: &[u8]| -> PResult<'_, (Instant, SpawnConfig)> {
        let (i, (now, cfg)) = (prim::u64, spawn_config).parse(i)?;
        Ok((i, (Instant(now), cfg)))
    })
}

/// Encodes how a [`super::Join`] was built: now, its own port, configuration.
pub fn encode_join_start(now: Instant, port: &PortName, cfg: &HandshakeConfig) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, now.as_nanos());
    put_port(&mut out, port);
    put_handshake_config(&mut out, cfg);
    out
}

/// Decodes [`encode_join_start`].
pub fn decode_join_start(bytes: &[u8]) -> Result<(Instant, PortName, HandshakeConfig), WireError> {
    parse_all(
        bytes,
        |i: &[u8]| -> PResult<'_, (Instant, PortName, HandshakeConfig)> {
            let (i, (now, port, cfg)) = (prim::u64, port, handshake_config).parse(i)?;
            Ok((i, (Instant(now), port, cfg)))
        },
    )
}

/// How a [`super::Member`] was built (`Member::new`; it takes no time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStart {
    /// The side of the handshake.
    pub role: Role,
    /// Its rank in the local group.
    pub rank: Rank,
    /// The local group's triple.
    pub local: GroupHeader,
    /// The local group's endpoints.
    pub local_endpoints: Vec<Addr>,
}

/// Encodes a [`MemberStart`]: role, rank, local triple, local endpoints.
pub fn encode_member_start(role: Role, rank: Rank, local: &GroupHeader, eps: &[Addr]) -> Vec<u8> {
    let mut out = Vec::new();
    put_role(&mut out, role);
    put_u32(&mut out, rank);
    put_header(&mut out, local);
    put_addrs(&mut out, eps);
    out
}

/// Decodes [`encode_member_start`].
pub fn decode_member_start(bytes: &[u8]) -> Result<MemberStart, WireError> {
    parse_all(bytes, |i: &[u8]| -> PResult<'_, MemberStart> {
        let (i, (role, rank, local, local_endpoints)) =
            (role, prim::u32, header, addrs).parse(i)?;
        Ok((
            i,
            MemberStart {
                role,
                rank,
                local,
                local_endpoints,
            },
        ))
    })
}

/// Implements [`crate::trace::Recorded`] for a spawn machine recorded under its trace id,
/// its rejected inputs included (SPAWN-10: they are part of the recorded behaviour, so
/// replay checks them): `recorded_by_id!(Type, InputType, ROLE_CONST, encoder)`, the
/// encoder one of this module's `encode_*input` functions.
macro_rules! recorded_by_id {
    ($ty:ident, $input:ident, $role:ident, $encode:ident) => {
        impl $crate::trace::Recorded for $ty {
            const ROLE: &'static str = $crate::spawn::trace::$role;
            const RESULT: $crate::trace::ResultRecord = $crate::trace::ResultRecord::Hashed;
            fn key(&self) -> $crate::trace::TraceKey {
                $crate::trace::TraceKey::Id(self.trace_id())
            }
            fn queue(&mut self) -> &mut ::alloc::collections::VecDeque<$crate::spawn::Output> {
                &mut self.out
            }
            fn tag(&mut self) -> Option<&mut $crate::trace::InstanceTag> {
                Some(&mut self.tag)
            }
            fn encode_input(input: &$crate::spawn::$input) -> ::alloc::vec::Vec<u8> {
                $crate::spawn::trace::$encode(input)
            }
        }
    };
}
pub(crate) use recorded_by_id;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::BootKey;
    use alloc::string::ToString;
    use alloc::vec;
    use proptest::prelude::*;

    fn arb_addr() -> impl Strategy<Value = Addr> {
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(Addr)
    }

    fn arb_port() -> impl Strategy<Value = PortName> {
        (
            prop_oneof![
                Just(Bootstrap::Datagram),
                Just(Bootstrap::Stream),
                any::<u32>().prop_map(|threshold| Bootstrap::Hybrid { threshold }),
            ],
            proptest::collection::vec(any::<u8>(), 0..MAX_ADDR),
            proptest::collection::vec(any::<u8>(), 0..MAX_ADDR),
            any::<u32>(),
            any::<[u8; 32]>(),
        )
            .prop_map(|(boot, d, s, tag, key)| PortName {
                boot,
                dgram: Addr(d),
                stream: Addr(s),
                tag,
                key: BootKey(key),
            })
    }

    fn arb_header() -> impl Strategy<Value = GroupHeader> {
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(group_id, size, context_id)| {
            GroupHeader {
                group_id,
                size,
                context_id,
            }
        })
    }

    fn arb_cfg() -> impl Strategy<Value = HandshakeConfig> {
        (
            arb_header(),
            proptest::collection::vec(arb_addr(), 0..5),
            any::<u32>(),
            any::<u64>(),
            (any::<u32>(), any::<u64>(), any::<u32>()),
            proptest::option::of((any::<u64>(), any::<u32>())),
            proptest::option::of(any::<u64>()),
            proptest::collection::vec((arb_addr(), any::<u64>()), 0..3),
        )
            .prop_map(
                |(local, eps, root, t, (mtu, rto, mr), expect_remote, session, served)| {
                    HandshakeConfig {
                        local,
                        local_endpoints: eps,
                        root,
                        timeout: Duration(t),
                        datagram: DatagramConfig {
                            mtu: mtu as usize,
                            rto: Duration(rto),
                            max_retries: mr,
                        },
                        expect_remote,
                        session,
                        served: served
                            .into_iter()
                            .map(|(from, session)| Served { from, session })
                            .collect(),
                    }
                },
            )
    }

    fn arb_static() -> impl Strategy<Value = &'static str> {
        proptest::sample::select(STATIC_TEXTS)
    }

    fn arb_wire_error() -> impl Strategy<Value = WireError> {
        prop_oneof![
            any::<[u8; 2]>().prop_map(|found| WireError::BadMagic { found }),
            any::<u8>().prop_map(|version| WireError::UnknownVersion { version }),
            any::<u16>().prop_map(|msg_type| WireError::UnknownType { msg_type }),
            Just(WireError::Truncated),
            (any::<u32>(), any::<u32>()).prop_map(|(declared, a)| WireError::LengthMismatch {
                declared,
                actual: a as usize
            }),
            any::<u32>().prop_map(|e| WireError::TrailingBytes { extra: e as usize }),
            Just(WireError::NotUtf8),
            (arb_static(), any::<u64>(), any::<u64>())
                .prop_map(|(what, value, max)| WireError::OverLimit { what, value, max }),
            (arb_static(), any::<u64>())
                .prop_map(|(what, value)| WireError::InvalidValue { what, value }),
            (any::<u32>(), any::<u32>())
                .prop_map(|(computed, received)| WireError::Checksum { computed, received }),
            arb_static().prop_map(|what| WireError::Inconsistent { what }),
        ]
    }

    /// Every error: the exact variants of the wire codec's tests, plus those holding
    /// static texts or a wire error, which only this codec carries exactly.
    fn arb_error() -> impl Strategy<Value = SpawnError> {
        prop_oneof![
            crate::spawn::msg::tests::arb_exact_error(),
            arb_wire_error().prop_map(SpawnError::Wire),
            (".{0,10}", arb_static())
                .prop_map(|(name, reason)| SpawnError::BadPort { name, reason }),
            arb_static().prop_map(|what| SpawnError::Unexpected { what }),
            arb_static().prop_map(SpawnError::Config),
        ]
    }

    fn arb_input() -> impl Strategy<Value = Input> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..40);
        prop_oneof![
            (arb_addr(), bytes()).prop_map(|(from, bytes)| Input::Datagram { from, bytes }),
            bytes().prop_map(|bytes| Input::Stream { bytes }),
            Just(Input::StreamClosed),
            Just(Input::Timeout),
        ]
    }

    fn arb_parent_input() -> impl Strategy<Value = ParentInput> {
        prop_oneof![
            arb_input().prop_map(ParentInput::Handshake),
            ".{0,20}".prop_map(|reason| ParentInput::LaunchFailed { reason }),
        ]
    }

    fn arb_join_input() -> impl Strategy<Value = JoinInput> {
        prop_oneof![
            arb_input().prop_map(JoinInput::Handshake),
            proptest::collection::vec(any::<u8>(), 0..40)
                .prop_map(|bytes| JoinInput::JoinStream { bytes }),
        ]
    }

    /// The recorded encoding of every input, byte for byte as when the three roots
    /// shared one input type (tags 1 to 6 in one space), so traces recorded then replay.
    #[test]
    fn inputs_keep_their_recorded_bytes() {
        let dgram = Input::Datagram {
            from: Addr(vec![9]),
            bytes: vec![7, 8],
        };
        let cases: [(Vec<u8>, &[u8]); 6] = [
            (encode_input(&dgram), &[1, 0, 0, 0, 1, 9, 0, 0, 0, 2, 7, 8]),
            (
                encode_input(&Input::Stream { bytes: vec![5] }),
                &[2, 0, 0, 0, 1, 5],
            ),
            (encode_input(&Input::StreamClosed), &[3]),
            (
                encode_join_input(&JoinInput::JoinStream { bytes: vec![6] }),
                &[4, 0, 0, 0, 1, 6],
            ),
            (
                encode_parent_input(&ParentInput::LaunchFailed { reason: "x".into() }),
                &[5, 0, 0, 0, 1, b'x'],
            ),
            (encode_input(&Input::Timeout), &[6]),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
        // A bootstrap input is the same word in every root's trace.
        for i in [dgram, Input::StreamClosed, Input::Timeout] {
            let word = encode_input(&i);
            assert_eq!(encode_parent_input(&i.clone().into()), word);
            assert_eq!(encode_join_input(&i.clone().into()), word);
            assert_eq!(
                decode_parent_input(&word),
                Ok(ParentInput::Handshake(i.clone()))
            );
            assert_eq!(decode_join_input(&word), Ok(JoinInput::Handshake(i)));
        }
    }

    /// A root's trace never holds another root's own input: replay refuses it as an
    /// unknown tag of that root (the machines no longer have a path that rejects it).
    #[test]
    fn another_roots_input_is_an_unknown_tag() {
        fn tag<T>(value: u64) -> Result<T, WireError> {
            Err(WireError::InvalidValue {
                what: "input tag",
                value,
            })
        }
        let join_stream = [4, 0, 0, 0, 1, 6];
        let launch_failed = [5, 0, 0, 0, 1, b'x'];
        assert_eq!(decode_input(&join_stream), tag(4));
        assert_eq!(decode_input(&launch_failed), tag(5));
        assert_eq!(decode_parent_input(&join_stream), tag(4));
        assert_eq!(decode_join_input(&launch_failed), tag(5));
        assert_eq!(decode_handshake_input(&join_stream), tag(4));
    }

    fn arb_member_msg() -> impl Strategy<Value = MemberMsg> {
        prop_oneof![
            (any::<u64>(), arb_header()).prop_map(|(session, remote)| MemberMsg::RemoteGroup {
                session,
                remote,
                data_key: BootKey([7; 32]),
            }),
            (any::<u64>(), proptest::collection::vec(arb_addr(), 0..5))
                .prop_map(|(session, endpoints)| MemberMsg::RemoteEndpoints { session, endpoints }),
            (any::<u64>(), arb_error())
                .prop_map(|(session, error)| MemberMsg::Failed { session, error }),
        ]
    }

    /// A cancel by timeout names its phase, and the trace keeps it, for every phase
    /// (the proptests draw a timeout too rarely to be sure of all six with few cases).
    #[test]
    fn a_timeout_keeps_its_phase_in_the_trace() {
        for phase in crate::spawn::msg::tests::PHASES {
            let c = HandshakeInput::Cancel(SpawnError::Timeout { phase });
            assert_eq!(decode_handshake_input(&encode_handshake_input(&c)), Ok(c));
        }
    }

    proptest! {
        #[test]
        fn inputs_round_trip(i in arb_input(), e in arb_error()) {
            prop_assert_eq!(decode_input(&encode_input(&i)), Ok(i.clone()));
            let h = HandshakeInput::Input(i);
            prop_assert_eq!(decode_handshake_input(&encode_handshake_input(&h)), Ok(h));
            let c = HandshakeInput::Cancel(e);
            prop_assert_eq!(decode_handshake_input(&encode_handshake_input(&c)), Ok(c));
        }

        #[test]
        fn root_inputs_round_trip(p in arb_parent_input(), j in arb_join_input()) {
            prop_assert_eq!(decode_parent_input(&encode_parent_input(&p)), Ok(p));
            prop_assert_eq!(decode_join_input(&encode_join_input(&j)), Ok(j));
        }

        #[test]
        fn member_messages_round_trip(m in arb_member_msg()) {
            prop_assert_eq!(decode_member_msg(&encode_member_msg(&m)), Ok(m));
        }

        #[test]
        fn starts_round_trip(now: u64, port in arb_port(), cfg in arb_cfg(), acceptor: bool,
                             maxprocs: u32, ns in "[a-z-]{0,20}", child: u64, rank: u32,
                             key: [u8; 32]) {
            let role = if acceptor { Role::Acceptor } else { Role::Initiator };
            let hs = decode_handshake_start(&encode_handshake_start(Instant(now), role, &port, &cfg));
            prop_assert_eq!(hs, Ok(HandshakeStart { now: Instant(now), role, port: port.clone(), cfg: cfg.clone() }));
            let j = decode_join_start(&encode_join_start(Instant(now), &port, &cfg));
            prop_assert_eq!(j, Ok((Instant(now), port.clone(), cfg.clone())));
            let sc = SpawnConfig {
                handshake: cfg.clone(),
                port,
                maxprocs,
                child_namespace: Namespace::new(ns),
                child_group_id: child,
                key: BootKey(key),
            };
            prop_assert_eq!(decode_parent_start(&encode_parent_start(Instant(now), &sc)), Ok((Instant(now), sc)));
            let m = encode_member_start(role, rank, &cfg.local, &cfg.local_endpoints);
            prop_assert_eq!(decode_member_start(&m), Ok(MemberStart {
                role, rank, local: cfg.local, local_endpoints: cfg.local_endpoints,
            }));
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_input(&bytes);
            let _ = decode_parent_input(&bytes);
            let _ = decode_join_input(&bytes);
            let _ = decode_handshake_input(&bytes);
            let _ = decode_member_msg(&bytes);
            let _ = decode_handshake_start(&bytes);
            let _ = decode_parent_start(&bytes);
            let _ = decode_join_start(&bytes);
            let _ = decode_member_start(&bytes);
        }

        #[test]
        fn truncations_are_typed_errors(m in arb_member_msg(), cut in 0usize..1000) {
            let full = encode_member_msg(&m);
            let cut = cut % full.len();
            prop_assert!(decode_member_msg(&full[..cut]).is_err());
        }
    }

    #[test]
    fn unknown_texts_and_tags_are_typed_errors() {
        let mut bytes = vec![3];
        put_u64(&mut bytes, 1);
        put_u8(&mut bytes, 10);
        put_str(&mut bytes, "not a kernel text");
        assert!(matches!(
            decode_member_msg(&bytes),
            Err(WireError::InvalidValue { .. })
        ));
        assert!(matches!(
            decode_input(&[99]),
            Err(WireError::InvalidValue {
                what: "input tag",
                value: 99
            })
        ));
        assert_eq!(decode_input(&[1, 0, 0]), Err(WireError::Truncated));
    }

    /// Every `&'static str` the spawn sources put into an error is in [`STATIC_TEXTS`],
    /// so a recorded failure always decodes.
    #[test]
    fn static_texts_cover_the_spawn_sources() {
        let sources = [
            include_str!("mod.rs"),
            include_str!("handshake.rs"),
            include_str!("datagram.rs"),
            include_str!("group.rs"),
            include_str!("join.rs"),
            include_str!("msg.rs"),
            include_str!("parent.rs"),
            include_str!("port.rs"),
            include_str!("stream.rs"),
            include_str!("merge.rs"),
            include_str!("crc.rs"),
        ];
        let patterns = [
            "what: \"",
            "Config(\"",
            "bad(\"",
            "bytes(\"",
            "string(\"",
            "seq(\"",
        ];
        let mut missing = vec![];
        for src in sources {
            // Only the non-test part: test strings never reach a machine's errors.
            let src = src.split("#[cfg(test)]").next().unwrap_or(src);
            for p in patterns {
                for (at, _) in src.match_indices(p) {
                    let rest = &src[at + p.len()..];
                    let text = &rest[..rest.find('"').unwrap_or(0)];
                    if !STATIC_TEXTS.contains(&text) {
                        missing.push(text.to_string());
                    }
                }
            }
        }
        assert!(missing.is_empty(), "add to STATIC_TEXTS: {missing:?}");
    }
}
