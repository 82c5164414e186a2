//! Encoding of [`MemberMsg`], the root → member messages of a handshake
//! (`spec/wire.md`, "Spawn messages", `0x0120–0x0122`).
//!
//! A root delivers these over its group's own channel (a communicator), so a member
//! decodes bytes that came from another process: parsing is nom, bounded and typed
//! (SPAWN-10), never a panic.
//!
//! A [`SpawnError`] travels as a code, up to four numbers and a text. Variants whose
//! fields are numbers, enums or strings come back exactly (strings up to
//! [`MAX_ERROR_TEXT`] bytes; longer ones are cut at a character boundary). Variants
//! holding `&'static str`s or a [`crate::wire::WireError`] (`Wire`, `BadPort`,
//! `Unexpected`, `Config`) cannot be rebuilt in the member's process and arrive as
//! [`SpawnError::Reported`] with the root's code and message.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::wire::prim::{clip_str, put_seq, put_str, put_u8, put_u64, seq, string, u8, u64};
use crate::wire::{PResult, WireError, decode_frame, encode_frame, parse_all, types};

use super::msg::{AbortReason, MAX_GROUP, addr, boot_key, header, put_header, put_key};
use super::types::Phase;
use super::{MemberMsg, SpawnError};

/// Longest error text carried in a `Failed` message, in bytes.
pub const MAX_ERROR_TEXT: usize = 1024;
/// Most numeric fields of an encoded error.
const MAX_ERROR_NUMS: usize = 4;

/// Wire codes of [`SpawnError`] variants (`spec/wire.md`).
mod code {
    pub const WIRE: u8 = 1;
    pub const BAD_PORT: u8 = 2;
    pub const PORT_NOT_OPEN: u8 = 3;
    pub const TIMEOUT: u8 = 4;
    pub const PEER_UNREACHABLE: u8 = 5;
    pub const ENDPOINT_COUNT: u8 = 6;
    pub const WRONG_REMOTE_GROUP: u8 = 7;
    pub const WRONG_SESSION: u8 = 8;
    pub const UNKNOWN_PEER: u8 = 9;
    pub const UNEXPECTED: u8 = 10;
    pub const ABORTED: u8 = 11;
    pub const LAUNCH_FAILED: u8 = 12;
    pub const STREAM_CLOSED: u8 = 13;
    pub const CONTEXT_IDS_EXHAUSTED: u8 = 14;
    pub const CONTEXT_ID_NOT_LIVE: u8 = 15;
    pub const CONFIG: u8 = 16;
    pub const JOIN_SAME_PORT: u8 = 17;
    pub const REPORTED: u8 = 18;
    pub const FORGED: u8 = 19;
}

fn phase_code(p: Phase) -> u64 {
    match p {
        Phase::JoinExchange => 0,
        Phase::Listening => 1,
        Phase::AwaitHelloAck => 2,
        Phase::Endpoints => 3,
        Phase::Done => 4,
        Phase::Failed => 5,
    }
}

fn phase_from(v: u64) -> Option<Phase> {
    Some(match v {
        0 => Phase::JoinExchange,
        1 => Phase::Listening,
        2 => Phase::AwaitHelloAck,
        3 => Phase::Endpoints,
        4 => Phase::Done,
        5 => Phase::Failed,
        _ => return None,
    })
}

/// Cuts `s` to at most [`MAX_ERROR_TEXT`] bytes at a character boundary.
fn clip(s: &str) -> String {
    String::from(clip_str(s, MAX_ERROR_TEXT))
}

/// `(code, numbers, text)` of an error.
fn error_parts(e: &SpawnError) -> (u8, Vec<u64>, String) {
    use alloc::vec;
    let text = clip(&e.to_string());
    match e {
        SpawnError::Wire(_) => (code::WIRE, vec![], text),
        SpawnError::BadPort { .. } => (code::BAD_PORT, vec![], text),
        SpawnError::PortNotOpen(p) => (code::PORT_NOT_OPEN, vec![], clip(p)),
        SpawnError::Timeout { phase } => (code::TIMEOUT, vec![phase_code(*phase)], text),
        SpawnError::PeerUnreachable { retries } => {
            (code::PEER_UNREACHABLE, vec![u64::from(*retries)], text)
        }
        SpawnError::EndpointCount { expected, got } => {
            (code::ENDPOINT_COUNT, vec![u64::from(*expected), *got], text)
        }
        SpawnError::WrongRemoteGroup {
            expected_group,
            expected_size,
            got_group,
            got_size,
        } => (
            code::WRONG_REMOTE_GROUP,
            vec![
                *expected_group,
                u64::from(*expected_size),
                *got_group,
                u64::from(*got_size),
            ],
            text,
        ),
        SpawnError::WrongSession { expected, got } => {
            (code::WRONG_SESSION, vec![*expected, *got], text)
        }
        SpawnError::UnknownPeer => (code::UNKNOWN_PEER, vec![], text),
        SpawnError::Unexpected { .. } => (code::UNEXPECTED, vec![], text),
        SpawnError::Aborted { reason } => (code::ABORTED, vec![*reason as u64], text),
        SpawnError::LaunchFailed { reason } => (code::LAUNCH_FAILED, vec![], clip(reason)),
        SpawnError::StreamClosed => (code::STREAM_CLOSED, vec![], text),
        SpawnError::ContextIdsExhausted => (code::CONTEXT_IDS_EXHAUSTED, vec![], text),
        SpawnError::ContextIdNotLive(id) => (code::CONTEXT_ID_NOT_LIVE, vec![u64::from(*id)], text),
        SpawnError::Config(_) => (code::CONFIG, vec![], text),
        SpawnError::JoinSamePort => (code::JOIN_SAME_PORT, vec![], text),
        SpawnError::Forged { .. } => (code::FORGED, vec![], text),
        // The carried code rides in the numbers, so a re-sent report stays a report.
        SpawnError::Reported { code: c, text } => (code::REPORTED, vec![u64::from(*c)], clip(text)),
    }
}

fn invalid(what: &'static str, value: u64) -> WireError {
    WireError::InvalidValue { what, value }
}

/// Rebuilds an error from its parts; anything inconsistent is a typed error.
fn error_from(c: u8, nums: &[u64], text: String) -> Result<SpawnError, WireError> {
    let want = |n: usize| -> Result<(), WireError> {
        if nums.len() == n {
            Ok(())
        } else {
            Err(invalid("error field count", nums.len() as u64))
        }
    };
    let small = |v: u64| u32::try_from(v).map_err(|_| invalid("error field", v));
    let reported = |c: u8, text: String| Ok(SpawnError::Reported { code: c, text });
    match c {
        code::WIRE | code::BAD_PORT | code::UNEXPECTED | code::CONFIG | code::FORGED => {
            want(0)?;
            reported(c, text)
        }
        code::PORT_NOT_OPEN => {
            want(0)?;
            Ok(SpawnError::PortNotOpen(text))
        }
        code::TIMEOUT => {
            want(1)?;
            let phase = phase_from(nums[0]).ok_or(invalid("phase", nums[0]))?;
            Ok(SpawnError::Timeout { phase })
        }
        code::PEER_UNREACHABLE => {
            want(1)?;
            Ok(SpawnError::PeerUnreachable {
                retries: small(nums[0])?,
            })
        }
        code::ENDPOINT_COUNT => {
            want(2)?;
            Ok(SpawnError::EndpointCount {
                expected: small(nums[0])?,
                got: nums[1],
            })
        }
        code::WRONG_REMOTE_GROUP => {
            want(4)?;
            Ok(SpawnError::WrongRemoteGroup {
                expected_group: nums[0],
                expected_size: small(nums[1])?,
                got_group: nums[2],
                got_size: small(nums[3])?,
            })
        }
        code::WRONG_SESSION => {
            want(2)?;
            Ok(SpawnError::WrongSession {
                expected: nums[0],
                got: nums[1],
            })
        }
        code::UNKNOWN_PEER => {
            want(0)?;
            Ok(SpawnError::UnknownPeer)
        }
        code::ABORTED => {
            want(1)?;
            let reason = u8::try_from(nums[0])
                .ok()
                .and_then(AbortReason::from_u8)
                .ok_or(invalid("abort reason", nums[0]))?;
            Ok(SpawnError::Aborted { reason })
        }
        code::LAUNCH_FAILED => {
            want(0)?;
            Ok(SpawnError::LaunchFailed { reason: text })
        }
        code::STREAM_CLOSED => {
            want(0)?;
            Ok(SpawnError::StreamClosed)
        }
        code::CONTEXT_IDS_EXHAUSTED => {
            want(0)?;
            Ok(SpawnError::ContextIdsExhausted)
        }
        code::CONTEXT_ID_NOT_LIVE => {
            want(1)?;
            Ok(SpawnError::ContextIdNotLive(small(nums[0])?))
        }
        code::JOIN_SAME_PORT => {
            want(0)?;
            Ok(SpawnError::JoinSamePort)
        }
        code::REPORTED => {
            want(1)?;
            let inner = u8::try_from(nums[0]).map_err(|_| invalid("reported code", nums[0]))?;
            reported(inner, text)
        }
        other => Err(invalid("error code", u64::from(other))),
    }
}

fn failed_body(input: &[u8]) -> PResult<'_, MemberMsg> {
    let (i, session) = u64(input)?;
    let (i, c) = u8(i)?;
    let (i, nums) = seq("error fields", MAX_ERROR_NUMS, u64)(i)?;
    let (i, text) = string("error text", MAX_ERROR_TEXT)(i)?;
    let error = error_from(c, &nums, text).map_err(nom::Err::Failure)?;
    Ok((i, MemberMsg::Failed { session, error }))
}

impl MemberMsg {
    /// Encodes the message as one frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            MemberMsg::RemoteGroup {
                session,
                remote,
                data_key,
            } => encode_frame(&mut out, types::MEMBER_REMOTE_GROUP, |b| {
                put_u64(b, *session);
                put_header(b, remote);
                put_key(b, data_key);
            }),
            MemberMsg::RemoteEndpoints { session, endpoints } => {
                encode_frame(&mut out, types::MEMBER_REMOTE_ENDPOINTS, |b| {
                    put_u64(b, *session);
                    put_seq(b, endpoints, |b, a| crate::wire::prim::put_bytes(b, &a.0));
                })
            }
            MemberMsg::Failed { session, error } => {
                let (c, nums, text) = error_parts(error);
                encode_frame(&mut out, types::MEMBER_FAILED, |b| {
                    put_u64(b, *session);
                    put_u8(b, c);
                    put_seq(b, &nums, |b, n| put_u64(b, *n));
                    put_str(b, &text);
                })
            }
        }
        out
    }

    /// Decodes one frame holding exactly one member message.
    pub fn decode(frame: &[u8]) -> Result<MemberMsg, WireError> {
        let (h, body) = decode_frame(frame)?;
        match h.msg_type {
            types::MEMBER_REMOTE_GROUP => parse_all(body, |i| {
                let (i, session) = u64(i)?;
                let (i, remote) = header(i)?;
                let (i, data_key) = boot_key(i)?;
                Ok((
                    i,
                    MemberMsg::RemoteGroup {
                        session,
                        remote,
                        data_key,
                    },
                ))
            }),
            types::MEMBER_REMOTE_ENDPOINTS => parse_all(body, |i| {
                let (i, session) = u64(i)?;
                let (i, endpoints) = seq("endpoints", MAX_GROUP, addr)(i)?;
                Ok((i, MemberMsg::RemoteEndpoints { session, endpoints }))
            }),
            types::MEMBER_FAILED => parse_all(body, failed_body),
            other => Err(WireError::UnknownType { msg_type: other }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::msg::tests::{PHASES, arb_exact_error, arb_header};
    use crate::spawn::{Addr, BootKey};
    use proptest::prelude::*;

    fn arb_member_msg() -> impl Strategy<Value = MemberMsg> {
        let addr = proptest::collection::vec(any::<u8>(), 0..=64).prop_map(Addr);
        prop_oneof![
            (any::<u64>(), arb_header(), any::<[u8; 32]>()).prop_map(|(session, remote, k)| {
                MemberMsg::RemoteGroup {
                    session,
                    remote,
                    data_key: BootKey(k),
                }
            }),
            (any::<u64>(), proptest::collection::vec(addr, 0..20))
                .prop_map(|(session, endpoints)| MemberMsg::RemoteEndpoints { session, endpoints }),
            (any::<u64>(), arb_exact_error())
                .prop_map(|(session, error)| MemberMsg::Failed { session, error }),
        ]
    }

    proptest! {
        #[test]
        fn member_messages_round_trip(m in arb_member_msg()) {
            prop_assert_eq!(MemberMsg::decode(&m.encode()), Ok(m));
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = MemberMsg::decode(&b);
        }

        #[test]
        fn corrupted_messages_never_panic(m in arb_member_msg(),
                                          at in any::<prop::sample::Index>(), v: u8) {
            let mut b = m.encode();
            let i = at.index(b.len());
            b[i] = v;
            let _ = MemberMsg::decode(&b);
            prop_assert!(MemberMsg::decode(&b[..i]).is_err());
        }
    }

    #[test]
    fn static_str_errors_arrive_as_reports() {
        for (e, c) in [
            (SpawnError::Config("bad"), code::CONFIG),
            (SpawnError::Unexpected { what: "odd" }, code::UNEXPECTED),
            (SpawnError::Wire(WireError::NotUtf8), code::WIRE),
            (
                SpawnError::BadPort {
                    name: "x".into(),
                    reason: "r",
                },
                code::BAD_PORT,
            ),
        ] {
            let m = MemberMsg::Failed {
                session: 3,
                error: e.clone(),
            };
            assert_eq!(
                MemberMsg::decode(&m.encode()),
                Ok(MemberMsg::Failed {
                    session: 3,
                    error: SpawnError::Reported {
                        code: c,
                        text: e.to_string()
                    }
                })
            );
        }
    }

    #[test]
    fn long_texts_are_cut_at_a_char_boundary() {
        let reason: String = "é".repeat(MAX_ERROR_TEXT);
        let m = MemberMsg::Failed {
            session: 1,
            error: SpawnError::LaunchFailed { reason },
        };
        let Ok(MemberMsg::Failed {
            error: SpawnError::LaunchFailed { reason },
            ..
        }) = MemberMsg::decode(&m.encode())
        else {
            panic!("did not decode");
        };
        assert_eq!(reason.len(), MAX_ERROR_TEXT);
    }

    #[test]
    fn inconsistent_errors_are_typed() {
        let frame = |c: u8, nums: &[u64]| {
            let mut out = Vec::new();
            encode_frame(&mut out, types::MEMBER_FAILED, |b| {
                put_u64(b, 1);
                put_u8(b, c);
                put_seq(b, nums, |b, n| put_u64(b, *n));
                put_str(b, "");
            });
            out
        };
        assert_eq!(
            MemberMsg::decode(&frame(99, &[])),
            Err(invalid("error code", 99))
        );
        assert_eq!(
            MemberMsg::decode(&frame(code::TIMEOUT, &[])),
            Err(invalid("error field count", 0))
        );
        assert_eq!(
            MemberMsg::decode(&frame(code::TIMEOUT, &[9])),
            Err(invalid("phase", 9))
        );
        assert_eq!(
            MemberMsg::decode(&frame(code::PEER_UNREACHABLE, &[1 << 40])),
            Err(invalid("error field", 1 << 40))
        );
        assert!(matches!(
            MemberMsg::decode(&frame(code::TIMEOUT, &[0; 5])),
            Err(WireError::OverLimit { .. })
        ));
        // A handshake frame is not a member message.
        let hello = crate::spawn::HsMsg::EndpointsAck { session: 1 }.encode();
        assert_eq!(
            MemberMsg::decode(&hello),
            Err(WireError::UnknownType {
                msg_type: types::ENDPOINTS_ACK
            })
        );
    }

    /// Kills the deletion of `phase_from`'s arm `0`: a root's `Timeout` in any phase,
    /// `JoinExchange` included, reaches its members as that very error (SPAWN-8 `Timeout
    /// {phase}`, SPAWN-6 `ToMember Failed`); the proptest's few cases need not draw it.
    #[test]
    fn timeouts_of_every_phase_cross_the_wire() {
        for phase in PHASES {
            let m = MemberMsg::Failed {
                session: 4,
                error: SpawnError::Timeout { phase },
            };
            assert_eq!(MemberMsg::decode(&m.encode()), Ok(m), "{phase:?}");
        }
    }
}
