//! The handshake messages the two roots exchange (`spec/wire.md`, "Spawn messages"),
//! whatever the bootstrap carries them.

use alloc::string::String;
use alloc::vec::Vec;

use crate::wire::prim::{
    bytes, put_bytes, put_seq, put_str, put_u8, put_u32, put_u64, seq, string, u8, u32, u64,
};
use crate::wire::{HEADER_LEN, PResult, WireError, decode_frame, encode_frame, parse_all, types};

use super::SpawnError;
use super::auth::{BootKey, TAG_LEN};
use super::port::{MAX_PORT_NAME, Transport};
use super::role::Role;

// Addresses are their own leaf (the port names carry them too); re-exported where
// they always were.
pub use super::addr::{Addr, MAX_ADDR};

/// Largest group whose endpoint table the handshake carries.
pub const MAX_GROUP: usize = 1 << 16;

/// What defines one side of an inter-group: the triple the roots exchange (SPAWN-4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupHeader {
    /// The group's id (unique per job; given by the launcher / the application).
    pub group_id: u64,
    /// Number of processes in the group.
    pub size: u32,
    /// The context id this side allocated for the inter-group (SPAWN-5).
    pub context_id: u32,
}

/// Why a root gave up (carried by [`HsMsg::Abort`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AbortReason {
    /// The sender timed out.
    Timeout = 1,
    /// The sender received something that breaks the protocol.
    ProtocolViolation = 2,
    /// The sender's application or launcher cancelled.
    Cancelled = 3,
}

impl AbortReason {
    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(AbortReason::Timeout),
            2 => Some(AbortReason::ProtocolViolation),
            3 => Some(AbortReason::Cancelled),
            _ => None,
        }
    }
}

/// A handshake message between the two roots. `session` is the initiator's group id and
/// ties every message to one connection attempt (SPAWN-11).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HsMsg {
    /// Initiator → acceptor: the initiator's triple (the one small message, SPAWN-4).
    Hello {
        /// The connection attempt.
        session: u64,
        /// The initiator's (group id, size, context id).
        header: GroupHeader,
    },
    /// Acceptor → initiator: acknowledges the Hello and carries the acceptor's triple and
    /// the transport both sides use for the endpoint tables (SPAWN-9).
    HelloAck {
        /// The connection attempt.
        session: u64,
        /// The acceptor's (group id, size, context id).
        header: GroupHeader,
        /// Transport of the endpoint tables.
        endpoints_via: Transport,
    },
    /// Each root → the other: the endpoint of every rank of its group, rank order.
    Endpoints {
        /// The connection attempt.
        session: u64,
        /// `endpoints[r]` is rank `r`'s address.
        endpoints: Vec<Addr>,
    },
    /// The peer's endpoint table arrived complete.
    EndpointsAck {
        /// The connection attempt.
        session: u64,
    },
    /// The sender gave up on this connection attempt.
    Abort {
        /// The connection attempt.
        session: u64,
        /// Why.
        reason: AbortReason,
    },
}

pub(crate) fn put_header(out: &mut Vec<u8>, h: &GroupHeader) {
    put_u64(out, h.group_id);
    put_u32(out, h.size);
    put_u32(out, h.context_id);
}

pub(crate) fn header(input: &[u8]) -> PResult<'_, GroupHeader> {
    let (i, group_id) = u64(input)?;
    let (i, size) = u32(i)?;
    let (i, context_id) = u32(i)?;
    Ok((
        i,
        GroupHeader {
            group_id,
            size,
            context_id,
        },
    ))
}

fn transport(input: &[u8]) -> PResult<'_, Transport> {
    let (i, v) = u8(input)?;
    match v {
        1 => Ok((i, Transport::Datagram)),
        2 => Ok((i, Transport::Stream)),
        _ => Err(nom::Err::Failure(WireError::InvalidValue {
            what: "transport",
            value: u64::from(v),
        })),
    }
}

/// A key, its 32 bytes as they are (a member message's data-plane key, a trace's keys).
pub(crate) fn put_key(out: &mut Vec<u8>, k: &BootKey) {
    out.extend_from_slice(&k.0);
}

/// Parses [`put_key`].
pub(crate) fn boot_key(input: &[u8]) -> PResult<'_, BootKey> {
    let (i, b) = nom::bytes::complete::take(BootKey::LEN)(input)?;
    let mut k = [0u8; BootKey::LEN];
    k.copy_from_slice(b);
    Ok((i, BootKey(k)))
}

pub(crate) fn addr(input: &[u8]) -> PResult<'_, Addr> {
    let (i, b) = bytes("address", MAX_ADDR)(input)?;
    Ok((i, Addr(b.to_vec())))
}

impl HsMsg {
    /// The connection attempt this message belongs to.
    pub fn session(&self) -> u64 {
        match self {
            HsMsg::Hello { session, .. }
            | HsMsg::HelloAck { session, .. }
            | HsMsg::Endpoints { session, .. }
            | HsMsg::EndpointsAck { session }
            | HsMsg::Abort { session, .. } => *session,
        }
    }

    /// The message's name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            HsMsg::Hello { .. } => "Hello",
            HsMsg::HelloAck { .. } => "HelloAck",
            HsMsg::Endpoints { .. } => "Endpoints",
            HsMsg::EndpointsAck { .. } => "EndpointsAck",
            HsMsg::Abort { .. } => "Abort",
        }
    }

    /// Encodes the message as one frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            HsMsg::Hello { session, header } => encode_frame(&mut out, types::HELLO, |b| {
                put_u64(b, *session);
                put_header(b, header);
            }),
            HsMsg::HelloAck {
                session,
                header,
                endpoints_via,
            } => encode_frame(&mut out, types::HELLO_ACK, |b| {
                put_u64(b, *session);
                put_header(b, header);
                put_u8(
                    b,
                    match endpoints_via {
                        Transport::Datagram => 1,
                        Transport::Stream => 2,
                    },
                );
            }),
            HsMsg::Endpoints { session, endpoints } => {
                encode_frame(&mut out, types::ENDPOINTS, |b| {
                    put_u64(b, *session);
                    put_seq(b, endpoints, |b, a| put_bytes(b, &a.0));
                })
            }
            HsMsg::EndpointsAck { session } => {
                encode_frame(&mut out, types::ENDPOINTS_ACK, |b| put_u64(b, *session))
            }
            HsMsg::Abort { session, reason } => encode_frame(&mut out, types::ABORT, |b| {
                put_u64(b, *session);
                put_u8(b, *reason as u8);
            }),
        }
        out
    }

    /// Encodes the message as one frame of the bootstrap stream, sealed by `sender` of
    /// a connection keyed `key`: the body ends with the tag (SPAWN-22), and the frame's
    /// length counts it.
    pub fn seal(&self, key: &BootKey, sender: Role) -> Vec<u8> {
        let mut out = self.encode();
        let msg_type = u16::from_be_bytes([out[3], out[4]]);
        let tag = key.tag(sender, msg_type, &out[HEADER_LEN..]);
        let len = (out.len() - HEADER_LEN + TAG_LEN) as u32;
        out[5..HEADER_LEN].copy_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&tag);
        out
    }

    /// Opens the body of a stream frame of type `msg_type` that `sender` of a
    /// connection keyed `key` sealed ([`HsMsg::seal`]): a wrong or missing tag is
    /// [`SpawnError::Forged`] (SPAWN-22), then the body is decoded.
    pub fn open(
        msg_type: u16,
        body: &[u8],
        key: &BootKey,
        sender: Role,
    ) -> Result<HsMsg, SpawnError> {
        Self::open_with(msg_type, body, key, sender, crate::bugs::Bugs::NONE)
    }

    /// [`HsMsg::open`] with the receiver's planted bugs.
    pub(crate) fn open_with(
        msg_type: u16,
        body: &[u8],
        key: &BootKey,
        sender: Role,
        bugs: crate::bugs::Bugs,
    ) -> Result<HsMsg, SpawnError> {
        let Some(at) = body.len().checked_sub(TAG_LEN) else {
            return Err(SpawnError::Forged {
                what: "stream frame without a tag",
            });
        };
        let (sealed, tag) = body.split_at(at);
        if !key.verify(sender, msg_type, sealed, tag)
            && !bugs.has(crate::bugs::Bug::SkipBootstrapMac)
        {
            return Err(SpawnError::Forged {
                what: "stream frame with a wrong tag",
            });
        }
        Ok(Self::decode_body(msg_type, sealed)?)
    }

    /// Decodes one sealed stream frame **without authenticating it** (for inspection:
    /// logs, models, tests; a receiver uses [`HsMsg::open`]).
    pub fn decode_sealed(frame: &[u8]) -> Result<HsMsg, WireError> {
        let (h, body) = decode_frame(frame)?;
        let at = body
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(WireError::Truncated)?;
        Self::decode_body(h.msg_type, &body[..at])
    }

    /// Decodes one frame holding exactly one handshake message.
    pub fn decode(frame: &[u8]) -> Result<HsMsg, WireError> {
        let (h, body) = decode_frame(frame)?;
        Self::decode_body(h.msg_type, body)
    }

    /// Decodes a message body of type `msg_type`.
    pub fn decode_body(msg_type: u16, body: &[u8]) -> Result<HsMsg, WireError> {
        match msg_type {
            types::HELLO => parse_all(body, |i| {
                let (i, session) = u64(i)?;
                let (i, header) = header(i)?;
                Ok((i, HsMsg::Hello { session, header }))
            }),
            types::HELLO_ACK => parse_all(body, |i| {
                let (i, session) = u64(i)?;
                let (i, header) = header(i)?;
                let (i, endpoints_via) = transport(i)?;
                Ok((
                    i,
                    HsMsg::HelloAck {
                        session,
                        header,
                        endpoints_via,
                    },
                ))
            }),
            types::ENDPOINTS => parse_all(body, |i| {
                let (i, session) = u64(i)?;
                let (i, endpoints) = seq("endpoints", MAX_GROUP, addr)(i)?;
                Ok((i, HsMsg::Endpoints { session, endpoints }))
            }),
            types::ENDPOINTS_ACK => parse_all(body, |i| {
                let (i, session) = u64(i)?;
                Ok((i, HsMsg::EndpointsAck { session }))
            }),
            types::ABORT => parse_all(body, |i| {
                let (i, session) = u64(i)?;
                let (i, r) = u8(i)?;
                let reason =
                    AbortReason::from_u8(r).ok_or(nom::Err::Failure(WireError::InvalidValue {
                        what: "abort reason",
                        value: u64::from(r),
                    }))?;
                Ok((i, HsMsg::Abort { session, reason }))
            }),
            other => Err(WireError::UnknownType { msg_type: other }),
        }
    }
}

/// Join: the port a process listens on, sent over the joined byte stream (SPAWN-14).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JoinPort {
    /// The sender's port name (text form).
    pub port: String,
}

impl JoinPort {
    /// Encodes as one frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        encode_frame(&mut out, types::JOIN_PORT, |b| put_str(b, &self.port));
        out
    }

    /// Decodes one frame.
    pub fn decode(frame: &[u8]) -> Result<JoinPort, WireError> {
        let (h, body) = decode_frame(frame)?;
        Self::decode_body(h.msg_type, body)
    }

    /// Decodes a body of type `msg_type`.
    pub fn decode_body(msg_type: u16, body: &[u8]) -> Result<JoinPort, WireError> {
        if msg_type != types::JOIN_PORT {
            return Err(WireError::UnknownType { msg_type });
        }
        parse_all(body, |i| {
            let (i, port) = string("port", MAX_PORT_NAME)(i)?;
            Ok((i, JoinPort { port }))
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::spawn::{Phase, SpawnError};
    use alloc::vec;
    use proptest::prelude::*;

    /// Logs name each message as spec/spawn.md's message table does.
    #[test]
    fn each_message_is_named_as_in_the_spec() {
        let header = GroupHeader {
            group_id: 1,
            size: 1,
            context_id: 1,
        };
        let named = [
            (HsMsg::Hello { session: 1, header }, "Hello"),
            (
                HsMsg::HelloAck {
                    session: 1,
                    header,
                    endpoints_via: Transport::Datagram,
                },
                "HelloAck",
            ),
            (
                HsMsg::Endpoints {
                    session: 1,
                    endpoints: vec![],
                },
                "Endpoints",
            ),
            (HsMsg::EndpointsAck { session: 1 }, "EndpointsAck"),
            (
                HsMsg::Abort {
                    session: 1,
                    reason: AbortReason::Timeout,
                },
                "Abort",
            ),
        ];
        for (msg, name) in named {
            assert_eq!(msg.name(), name);
        }
    }

    /// Every handshake phase.
    pub(crate) const PHASES: [Phase; 6] = [
        Phase::JoinExchange,
        Phase::Listening,
        Phase::AwaitHelloAck,
        Phase::Endpoints,
        Phase::Done,
        Phase::Failed,
    ];

    /// Any handshake phase.
    pub(crate) fn arb_phase() -> impl Strategy<Value = Phase> {
        proptest::sample::select(PHASES.to_vec())
    }

    /// Every variant that round-trips exactly, plus `Reported`.
    pub(crate) fn arb_exact_error() -> impl Strategy<Value = SpawnError> {
        let text = "[a-zA-Z0-9 äé→]{0,60}";
        prop_oneof![
            text.prop_map(SpawnError::PortNotOpen),
            arb_phase().prop_map(|phase| SpawnError::Timeout { phase }),
            any::<u32>().prop_map(|retries| SpawnError::PeerUnreachable { retries }),
            (any::<u32>(), any::<u64>())
                .prop_map(|(expected, got)| SpawnError::EndpointCount { expected, got }),
            (any::<u64>(), any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(a, b, c, d)| {
                SpawnError::WrongRemoteGroup {
                    expected_group: a,
                    expected_size: b,
                    got_group: c,
                    got_size: d,
                }
            }),
            (any::<u64>(), any::<u64>())
                .prop_map(|(expected, got)| SpawnError::WrongSession { expected, got }),
            Just(SpawnError::UnknownPeer),
            (1u8..=3).prop_map(|r| SpawnError::Aborted {
                reason: AbortReason::from_u8(r).unwrap_or(AbortReason::Timeout)
            }),
            text.prop_map(|reason| SpawnError::LaunchFailed { reason }),
            Just(SpawnError::StreamClosed),
            Just(SpawnError::ContextIdsExhausted),
            any::<u32>().prop_map(SpawnError::ContextIdNotLive),
            Just(SpawnError::JoinSamePort),
            (any::<u8>(), text).prop_map(|(code, text)| SpawnError::Reported { code, text }),
        ]
    }

    /// Every abort reason with its wire code (`spec/wire.md`, `0x0105 Abort`).
    const ABORT_REASONS: [AbortReason; 3] = [
        AbortReason::Timeout,
        AbortReason::ProtocolViolation,
        AbortReason::Cancelled,
    ];

    pub(crate) fn arb_header() -> impl Strategy<Value = GroupHeader> {
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(group_id, size, context_id)| {
            GroupHeader {
                group_id,
                size,
                context_id,
            }
        })
    }

    fn arb_msg() -> impl Strategy<Value = HsMsg> {
        let addr = proptest::collection::vec(any::<u8>(), 0..=MAX_ADDR).prop_map(Addr);
        prop_oneof![
            (any::<u64>(), arb_header())
                .prop_map(|(session, header)| HsMsg::Hello { session, header }),
            (any::<u64>(), arb_header(), any::<bool>()).prop_map(|(session, header, s)| {
                HsMsg::HelloAck {
                    session,
                    header,
                    endpoints_via: if s {
                        Transport::Stream
                    } else {
                        Transport::Datagram
                    },
                }
            }),
            (any::<u64>(), proptest::collection::vec(addr, 0..40))
                .prop_map(|(session, endpoints)| HsMsg::Endpoints { session, endpoints }),
            any::<u64>().prop_map(|session| HsMsg::EndpointsAck { session }),
            (
                any::<u64>(),
                proptest::sample::select(ABORT_REASONS.to_vec())
            )
                .prop_map(|(session, reason)| HsMsg::Abort { session, reason }),
        ]
    }

    proptest! {
        #[test]
        fn handshake_messages_round_trip(m in arb_msg()) {
            prop_assert_eq!(HsMsg::decode(&m.encode()), Ok(m));
        }

        #[test]
        fn join_port_round_trips(port in ".{0,100}") {
            let m = JoinPort { port };
            prop_assert_eq!(JoinPort::decode(&m.encode()), Ok(m));
        }

        /// SPAWN-22: a stream frame opens under its key and sender only; its tag is
        /// counted in the frame's length, so the stream reader splits it whole.
        #[test]
        fn sealed_stream_frames_open_only_under_their_key_and_sender(m in arb_msg(), k: [u8; 32]) {
            let key = BootKey(k);
            let f = m.seal(&key, Role::Initiator);
            let (h, body) = decode_frame(&f).expect("one whole frame");
            prop_assert_eq!(HsMsg::open(h.msg_type, body, &key, Role::Initiator), Ok(m.clone()));
            prop_assert_eq!(HsMsg::decode_sealed(&f), Ok(m.clone()));
            let forged = |what| Err(SpawnError::Forged { what });
            prop_assert_eq!(
                HsMsg::open(h.msg_type, body, &key, Role::Acceptor),
                forged("stream frame with a wrong tag")
            );
            let mut other = k;
            other[0] ^= 1;
            prop_assert_eq!(
                HsMsg::open(h.msg_type, body, &BootKey(other), Role::Initiator),
                forged("stream frame with a wrong tag")
            );
            let plain = m.encode();
            let (h, body) = decode_frame(&plain).expect("one whole frame");
            prop_assert!(HsMsg::open(h.msg_type, body, &key, Role::Initiator).is_err());
            prop_assert_eq!(
                HsMsg::open(h.msg_type, &body[..body.len().min(TAG_LEN - 1)], &key, Role::Initiator),
                forged("stream frame without a tag")
            );
        }

        #[test]
        fn truncations_of_valid_messages_are_errors(m in arb_msg(), cut in any::<prop::sample::Index>()) {
            let b = m.encode();
            let cut = cut.index(b.len());
            prop_assert!(HsMsg::decode(&b[..cut]).is_err());
        }
    }

    /// `Abort`'s reason byte is 1 timeout, 2 protocol violation, 3 cancelled
    /// (`spec/wire.md`, `0x0105`): each decodes to its own reason, any other byte is
    /// `InvalidValue`.
    #[test]
    fn abort_reasons_decode_by_their_wire_code() {
        let abort = |r: u8| {
            let mut b = HsMsg::Abort {
                session: 9,
                reason: AbortReason::Timeout,
            }
            .encode();
            let last = b.len() - 1;
            b[last] = r;
            HsMsg::decode(&b)
        };
        for (code, reason) in [1u8, 2, 3].into_iter().zip(ABORT_REASONS) {
            assert_eq!(abort(code), Ok(HsMsg::Abort { session: 9, reason }));
        }
        for code in [0u8, 4, 255] {
            assert_eq!(
                abort(code),
                Err(WireError::InvalidValue {
                    what: "abort reason",
                    value: u64::from(code),
                })
            );
        }
    }

    #[test]
    fn malformed_table() {
        let hello = HsMsg::Hello {
            session: 1,
            header: GroupHeader {
                group_id: 2,
                size: 3,
                context_id: 4,
            },
        }
        .encode();
        let ack = HsMsg::HelloAck {
            session: 1,
            header: GroupHeader {
                group_id: 2,
                size: 3,
                context_id: 4,
            },
            endpoints_via: Transport::Stream,
        }
        .encode();
        let with = |mut v: Vec<u8>, i: usize, b: u8| {
            v[i] = b;
            v
        };
        let mut trailing = hello.clone();
        trailing.push(0);
        let n = trailing.len();
        trailing[8] = (n - 9) as u8; // header agrees, body has an extra byte
        let mut huge_count = vec![b'D', b'R', 1, 0x01, 0x03, 0, 0, 0, 12];
        huge_count.extend_from_slice(&[0; 8]);
        huge_count.extend_from_slice(&[0xff; 4]);
        let mut long_addr = vec![b'D', b'R', 1, 0x01, 0x03, 0, 0, 0, 16];
        long_addr.extend_from_slice(&[0; 8]);
        long_addr.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 65]);
        let mut bad_utf8 = vec![b'D', b'R', 1, 0x01, 0x06, 0, 0, 0, 6];
        bad_utf8.extend_from_slice(&[0, 0, 0, 2, 0xc3, 0x28]);
        let cases: Vec<(&str, Vec<u8>, WireError)> = vec![
            ("empty", vec![], WireError::Truncated),
            (
                "bad magic",
                with(hello.clone(), 1, b'X'),
                WireError::BadMagic { found: *b"DX" },
            ),
            (
                "bad version",
                with(hello.clone(), 2, 2),
                WireError::UnknownVersion { version: 2 },
            ),
            (
                "unknown type",
                with(hello.clone(), 4, 0x7f),
                WireError::UnknownType { msg_type: 0x017f },
            ),
            (
                "foreign range",
                with(hello.clone(), 3, 0x02),
                WireError::UnknownType { msg_type: 0x0201 },
            ),
            (
                "length too short",
                with(hello.clone(), 8, 3),
                WireError::LengthMismatch {
                    declared: 3,
                    actual: 24,
                },
            ),
            ("trailing", trailing, WireError::TrailingBytes { extra: 1 }),
            (
                "bad transport",
                with(ack.clone(), ack.len() - 1, 9),
                WireError::InvalidValue {
                    what: "transport",
                    value: 9,
                },
            ),
            (
                "huge count",
                huge_count,
                WireError::OverLimit {
                    what: "endpoints",
                    value: 0xffff_ffff,
                    max: MAX_GROUP as u64,
                },
            ),
            (
                "long address",
                long_addr,
                WireError::OverLimit {
                    what: "address",
                    value: 65,
                    max: MAX_ADDR as u64,
                },
            ),
        ];
        for (name, bytes, want) in cases {
            assert_eq!(HsMsg::decode(&bytes), Err(want), "{name}");
        }
        assert_eq!(JoinPort::decode(&bad_utf8), Err(WireError::NotUtf8));
        assert_eq!(
            JoinPort::decode(&hello),
            Err(WireError::UnknownType { msg_type: 0x0101 })
        );
    }
}
