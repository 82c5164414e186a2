//! TCP framing: a fixed 32-byte header parsed with nom, then the payload.
//!
//! ```text
//! magic "DYNR" | kind u8 | flags u8 (0) | reserved u16 (0) | source u64 | tag u64 |
//! context_id u32 | len u32            (all little-endian)
//! ```
//!
//! Kinds: 1 DATA (an application message), 2 HELLO, 3 CHALLENGE, 4 AUTH. The last three
//! are the connection handshake (`spec/dataplane.md`, payloads in [`super::auth`]):
//! HELLO at most [`MAX_HELLO_LEN`] bytes, CHALLENGE exactly 64, AUTH exactly 32; their
//! source, tag and context fields are sent as zero and ignored. A connection carries
//! HELLO → CHALLENGE → AUTH first and DATA only after (DATA-1).
//!
//! Everything a peer sends is untrusted: any deviation is a [`FramingError`] and the
//! connection is closed; nothing here can panic or allocate by the peer's say-so beyond
//! the configured maximum message size.

use nom::Parser;
use nom::bytes::streaming::tag;
use nom::number::streaming::{le_u8, le_u16, le_u32, le_u64};

use crate::header::MsgHeader;

/// Frame magic.
pub const MAGIC: [u8; 4] = *b"DYNR";
/// Encoded header length.
pub const FRAME_HEADER_LEN: usize = 32;
/// Longest HELLO payload (41 bytes of version, key id and nonce, then a textual socket
/// address of at most 55 characters).
pub const MAX_HELLO_LEN: u64 = 128;

/// Frame kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// An application message.
    Data,
    /// First frame on a connection, from the connector: its listening address (so
    /// either side can reuse the connection instead of opening a second one), the key
    /// it authenticates with and its nonce.
    Hello,
    /// The acceptor's answer to a HELLO: its nonce and its proof of the key.
    Challenge,
    /// The connector's proof of the key; data may follow.
    Auth,
}

impl FrameKind {
    fn code(self) -> u8 {
        match self {
            FrameKind::Data => 1,
            FrameKind::Hello => 2,
            FrameKind::Challenge => 3,
            FrameKind::Auth => 4,
        }
    }

    /// The kind's name, for errors and logs.
    pub fn name(self) -> &'static str {
        match self {
            FrameKind::Data => "DATA",
            FrameKind::Hello => "HELLO",
            FrameKind::Challenge => "CHALLENGE",
            FrameKind::Auth => "AUTH",
        }
    }

    /// Longest payload of a handshake frame; `None` for data.
    fn handshake_max(self) -> Option<u64> {
        match self {
            FrameKind::Data => None,
            FrameKind::Hello => Some(MAX_HELLO_LEN),
            FrameKind::Challenge => Some(super::auth::CHALLENGE_LEN as u64),
            FrameKind::Auth => Some(super::auth::AUTH_LEN as u64),
        }
    }
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Kind.
    pub kind: FrameKind,
    /// Message header (`len` is the payload length for every kind).
    pub msg: MsgHeader,
}

/// Ways a peer's bytes can be wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// The frame does not start with the magic.
    #[error("bad magic {0:02x?}")]
    BadMagic([u8; 4]),
    /// Unknown frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Flags or reserved bits set.
    #[error("reserved bits set (flags {flags:#x}, reserved {reserved:#x})")]
    Reserved {
        /// Flags byte.
        flags: u8,
        /// Reserved word.
        reserved: u16,
    },
    /// Payload longer than allowed.
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Announced length.
        len: u64,
        /// Limit.
        max: u64,
    },
    /// HELLO payload is not version, key id, nonce and a socket address.
    #[error("bad HELLO payload: {0}")]
    BadHello(String),
    /// A CHALLENGE or AUTH payload of the wrong length.
    #[error("{kind} payload of {len} bytes has the wrong length")]
    BadHandshake {
        /// The frame kind.
        kind: &'static str,
        /// Its payload length.
        len: usize,
    },
}

/// Encodes a frame header.
pub fn encode(h: &FrameHeader) -> [u8; FRAME_HEADER_LEN] {
    let mut b = [0u8; FRAME_HEADER_LEN];
    b[0..4].copy_from_slice(&MAGIC);
    b[4] = h.kind.code();
    b[8..16].copy_from_slice(&h.msg.source.to_le_bytes());
    b[16..24].copy_from_slice(&h.msg.tag.to_le_bytes());
    b[24..28].copy_from_slice(&h.msg.context_id.to_le_bytes());
    // Lengths above u32::MAX are refused by the sender before encoding.
    b[28..32].copy_from_slice(&(h.msg.len as u32).to_le_bytes());
    b
}

/// A whole frame in one buffer: `msg` with its length set to the payload's, then the
/// payload (for the handshake's frames and for tests that play a raw peer).
pub fn encode_frame(kind: FrameKind, msg: MsgHeader, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    out.extend_from_slice(&encode(&FrameHeader {
        kind,
        msg: MsgHeader {
            len: payload.len() as u64,
            ..msg
        },
    }));
    out.extend_from_slice(payload);
    out
}

type Raw = (u8, u8, u16, u64, u64, u32, u32);

fn raw_header(i: &[u8]) -> nom::IResult<&[u8], Raw> {
    let (i, _) = tag(&MAGIC[..]).parse(i)?;
    (le_u8, le_u8, le_u16, le_u64, le_u64, le_u32, le_u32).parse(i)
}

/// Parses a frame header from the start of `input`. `Ok(None)`: not enough bytes yet.
pub fn parse_header(input: &[u8], max_len: u64) -> Result<Option<FrameHeader>, FramingError> {
    // Check the magic byte-by-byte first so garbage is rejected as early as possible,
    // even before a whole header has arrived.
    let n = input.len().min(4);
    if input[..n] != MAGIC[..n] {
        let mut got = [0u8; 4];
        got[..n].copy_from_slice(&input[..n]);
        return Err(FramingError::BadMagic(got));
    }
    let (kind, flags, reserved, source, tag, context_id, len) = match raw_header(input) {
        Ok((_, raw)) => raw,
        Err(nom::Err::Incomplete(_)) => return Ok(None),
        Err(_) => {
            let mut got = [0u8; 4];
            got.copy_from_slice(&input[..4]);
            return Err(FramingError::BadMagic(got));
        }
    };
    let kind = match kind {
        1 => FrameKind::Data,
        2 => FrameKind::Hello,
        3 => FrameKind::Challenge,
        4 => FrameKind::Auth,
        k => return Err(FramingError::UnknownKind(k)),
    };
    if flags != 0 || reserved != 0 {
        return Err(FramingError::Reserved { flags, reserved });
    }
    let len = u64::from(len);
    let max = kind.handshake_max().unwrap_or(max_len);
    if len > max {
        return Err(FramingError::TooLarge { len, max });
    }
    Ok(Some(FrameHeader {
        kind,
        msg: MsgHeader {
            source,
            tag,
            context_id,
            len,
        },
    }))
}

/// A decoded frame: header and payload.
pub type Frame = (FrameHeader, Vec<u8>);

/// Decodes a complete byte stream into frames (header, payload); trailing bytes that
/// do not yet form a frame are returned as the remainder length. Used by the fuzz
/// target and tests; the TCP device parses incrementally with [`parse_header`].
pub fn decode_stream(mut input: &[u8], max_len: u64) -> Result<(Vec<Frame>, usize), FramingError> {
    let mut frames = Vec::new();
    while !input.is_empty() {
        let Some(h) = parse_header(input, max_len)? else {
            break;
        };
        let total = FRAME_HEADER_LEN as u64 + h.msg.len;
        if (input.len() as u64) < total {
            break;
        }
        let payload = &input[FRAME_HEADER_LEN..total as usize];
        match h.kind {
            FrameKind::Data => {}
            FrameKind::Hello => {
                // A HELLO of another version is well-formed framing: refused later, by
                // the handshake, not here.
                if let Err(super::auth::HandshakeFailure::Malformed(e)) =
                    super::auth::parse_hello(payload)
                {
                    return Err(e);
                }
            }
            FrameKind::Challenge => {
                super::auth::parse_challenge(payload)?;
            }
            FrameKind::Auth => {
                super::auth::parse_auth(payload)?;
            }
        }
        frames.push((h, payload.to_vec()));
        input = &input[total as usize..];
    }
    Ok((frames, input.len()))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn data(source: u64, tag: u64, context_id: u32, len: u64) -> FrameHeader {
        FrameHeader {
            kind: FrameKind::Data,
            msg: MsgHeader {
                source,
                tag,
                context_id,
                len,
            },
        }
    }

    proptest! {
        #[test]
        fn header_round_trip(source: u64, tag: u64, context_id: u32, len in 0u64..=u64::from(u32::MAX)) {
            let h = data(source, tag, context_id, len);
            prop_assert_eq!(parse_header(&encode(&h), u64::MAX).unwrap(), Some(h));
        }

        #[test]
        fn stream_round_trip(msgs in proptest::collection::vec((any::<u64>(), proptest::collection::vec(any::<u8>(), 0..64)), 0..8), cut in 0usize..64) {
            let mut bytes = Vec::new();
            for (tag, p) in &msgs {
                bytes.extend_from_slice(&encode(&data(1, *tag, 2, p.len() as u64)));
                bytes.extend_from_slice(p);
            }
            let (frames, rest) = decode_stream(&bytes, 1 << 20).unwrap();
            prop_assert_eq!(rest, 0);
            prop_assert_eq!(frames.len(), msgs.len());
            for ((h, p), (tag, q)) in frames.iter().zip(&msgs) {
                prop_assert_eq!(h.msg.tag, *tag);
                prop_assert_eq!(p, q);
            }
            // Any prefix decodes to a prefix of the frames, never an error.
            let cut = cut.min(bytes.len());
            let (some, _) = decode_stream(&bytes[..bytes.len() - cut], 1 << 20).unwrap();
            prop_assert!(some.len() <= msgs.len());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_stream(&bytes, 1 << 20);
        }
    }

    #[test]
    fn malformed_inputs_are_typed_errors() {
        let good = encode(&data(1, 2, 3, 4));
        let with = |i: usize, v: u8| {
            let mut b = good;
            b[i] = v;
            b
        };
        let hello_too_long = {
            let mut b = encode(&FrameHeader {
                kind: FrameKind::Hello,
                msg: MsgHeader::default(),
            });
            b[28..32].copy_from_slice(&1000u32.to_le_bytes());
            b
        };
        let table: Vec<(&str, Vec<u8>, FramingError)> = vec![
            (
                "garbage",
                b"GET / HTTP/1.1\r\n".to_vec(),
                FramingError::BadMagic(*b"GET "),
            ),
            (
                "one wrong byte",
                vec![b'X'],
                FramingError::BadMagic([b'X', 0, 0, 0]),
            ),
            (
                "magic typo",
                with(3, b'S').to_vec(),
                FramingError::BadMagic(*b"DYNS"),
            ),
            ("kind 0", with(4, 0).to_vec(), FramingError::UnknownKind(0)),
            ("kind 9", with(4, 9).to_vec(), FramingError::UnknownKind(9)),
            (
                "flags",
                with(5, 1).to_vec(),
                FramingError::Reserved {
                    flags: 1,
                    reserved: 0,
                },
            ),
            (
                "reserved",
                with(7, 1).to_vec(),
                FramingError::Reserved {
                    flags: 0,
                    reserved: 0x100,
                },
            ),
            (
                "too large",
                with(31, 0xff).to_vec(),
                FramingError::TooLarge {
                    len: 0xff00_0004,
                    max: 1 << 20,
                },
            ),
            (
                "hello too long",
                hello_too_long.to_vec(),
                FramingError::TooLarge {
                    len: 1000,
                    max: MAX_HELLO_LEN,
                },
            ),
        ];
        for (what, bytes, want) in table {
            assert_eq!(parse_header(&bytes, 1 << 20), Err(want), "{what}");
        }
        assert_eq!(parse_header(&good[..31], 1 << 20), Ok(None), "incomplete");
        for (kind, max) in [(3, 65u32), (4, 32)] {
            let mut b = with(4, kind);
            b[28..32].copy_from_slice(&(max + 1).to_le_bytes());
            assert_eq!(
                parse_header(&b, 1 << 20),
                Err(FramingError::TooLarge {
                    len: u64::from(max) + 1,
                    max: u64::from(max)
                }),
                "kind {kind}"
            );
        }
        // Handshake payloads of the wrong shape are typed errors in a stream too.
        let frame = |kind: FrameKind, payload: &[u8]| {
            let mut b = encode(&FrameHeader {
                kind,
                msg: MsgHeader {
                    len: payload.len() as u64,
                    ..MsgHeader::default()
                },
            })
            .to_vec();
            b.extend_from_slice(payload);
            b
        };
        assert!(matches!(
            decode_stream(&frame(FrameKind::Hello, b"not a hello"), 1 << 20),
            Err(FramingError::BadHello(_))
        ));
        assert_eq!(
            decode_stream(&frame(FrameKind::Challenge, &[0; 10]), 1 << 20),
            Err(FramingError::BadHandshake {
                kind: "CHALLENGE",
                len: 10
            })
        );
        assert_eq!(
            decode_stream(&frame(FrameKind::Auth, &[0; 31]), 1 << 20),
            Err(FramingError::BadHandshake {
                kind: "AUTH",
                len: 31
            })
        );
    }
}
