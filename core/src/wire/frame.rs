//! The frame header: `magic | version | type | body length`, big-endian.

use alloc::vec::Vec;

use super::{PResult, WireError};
use nom::Parser;
use nom::bytes::complete::take;
use nom::number::complete::{be_u8, be_u16, be_u32};

/// The two bytes every kernel frame starts with.
pub const MAGIC: [u8; 2] = *b"DR";
/// The protocol version this kernel speaks.
pub const VERSION: u8 = 1;
/// Bytes in the header: magic (2) + version (1) + type (2) + body length (4).
pub const HEADER_LEN: usize = 9;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameHeader {
    /// The message type (`spec/wire.md`, type ranges).
    pub msg_type: u16,
    /// Length of the body that follows the header.
    pub body_len: u32,
}

/// Appends a complete frame (header and body) of type `msg_type` to `out`.
///
/// The body is produced by `body`, which appends to the same buffer; the length field is
/// patched afterwards so encoders never compute sizes twice.
pub fn encode_frame(out: &mut Vec<u8>, msg_type: u16, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&msg_type.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    body(out);
    let body_len = out.len() - start - HEADER_LEN;
    // Bodies are bounded far below 4 GiB by every message's own limits.
    let len = u32::try_from(body_len).unwrap_or(u32::MAX);
    out[start + 5..start + 9].copy_from_slice(&len.to_be_bytes());
}

/// Parses a header: checks magic and version; the type is checked by the message parser.
pub fn parse_header(input: &[u8]) -> PResult<'_, FrameHeader> {
    let (rest, (magic, version, msg_type, body_len)) =
        (take(2usize), be_u8, be_u16, be_u32).parse(input)?;
    if magic != MAGIC {
        return Err(nom::Err::Failure(WireError::BadMagic {
            found: [magic[0], magic[1]],
        }));
    }
    if version != VERSION {
        return Err(nom::Err::Failure(WireError::UnknownVersion { version }));
    }
    Ok((rest, FrameHeader { msg_type, body_len }))
}

/// Decodes exactly one frame occupying all of `input`: returns the header and the body.
///
/// Fewer or more bytes than the header declares are [`WireError::LengthMismatch`].
pub fn decode_frame(input: &[u8]) -> Result<(FrameHeader, &[u8]), WireError> {
    let (body, header) = match parse_header(input) {
        Ok(v) => v,
        Err(nom::Err::Error(e) | nom::Err::Failure(e)) => return Err(e),
        Err(nom::Err::Incomplete(_)) => return Err(WireError::Truncated),
    };
    if body.len() != header.body_len as usize {
        return Err(WireError::LengthMismatch {
            declared: header.body_len,
            actual: body.len(),
        });
    }
    Ok((header, body))
}

/// A frame split off a stream: its header, its body, and the bytes it took.
pub type SplitFrame<'a> = (FrameHeader, &'a [u8], usize);

/// Splits the first complete frame off a byte stream.
///
/// `Ok(None)` means more bytes are needed; `Ok(Some((header, body, used)))` hands out a
/// frame and how many bytes of `input` it took. A frame longer than `max_body` is an
/// error at once, so a peer cannot make the reader buffer without bound.
pub fn split_frame(input: &[u8], max_body: u32) -> Result<Option<SplitFrame<'_>>, WireError> {
    if input.len() < HEADER_LEN {
        // Check what is there already, so garbage is rejected without waiting.
        if input.len() >= 2 && input[..2] != MAGIC {
            return Err(WireError::BadMagic {
                found: [input[0], input[1]],
            });
        }
        return Ok(None);
    }
    let (rest, header) = match parse_header(input) {
        Ok(v) => v,
        Err(nom::Err::Error(e) | nom::Err::Failure(e)) => return Err(e),
        Err(nom::Err::Incomplete(_)) => return Ok(None),
    };
    if header.body_len > max_body {
        return Err(WireError::OverLimit {
            what: "frame body",
            value: u64::from(header.body_len),
            max: u64::from(max_body),
        });
    }
    let len = header.body_len as usize;
    if rest.len() < len {
        return Ok(None);
    }
    Ok(Some((header, &rest[..len], HEADER_LEN + len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn header_round_trip_and_layout() {
        let mut out = Vec::new();
        encode_frame(&mut out, 0x0102, |b| b.extend_from_slice(&[7, 8, 9]));
        assert_eq!(out, vec![b'D', b'R', 1, 0x01, 0x02, 0, 0, 0, 3, 7, 8, 9]);
        let (h, body) = decode_frame(&out).unwrap();
        assert_eq!(h.msg_type, 0x0102);
        assert_eq!(body, &[7, 8, 9]);
    }

    #[test]
    fn malformed_headers_are_typed_errors() {
        let good = {
            let mut v = Vec::new();
            encode_frame(&mut v, 0x0101, |b| b.push(1));
            v
        };
        let mut bad_magic = good.clone();
        bad_magic[0] = b'X';
        assert!(matches!(
            decode_frame(&bad_magic),
            Err(WireError::BadMagic { .. })
        ));
        let mut bad_version = good.clone();
        bad_version[2] = 9;
        assert_eq!(
            decode_frame(&bad_version),
            Err(WireError::UnknownVersion { version: 9 })
        );
        assert_eq!(decode_frame(&good[..5]), Err(WireError::Truncated));
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(
            decode_frame(&long),
            Err(WireError::LengthMismatch { .. })
        ));
        assert!(matches!(
            decode_frame(&good[..good.len() - 1]),
            Err(WireError::LengthMismatch { .. })
        ));
    }

    #[test]
    fn split_frame_waits_for_more_and_bounds_bodies() {
        let mut v = Vec::new();
        encode_frame(&mut v, 0x0101, |b| b.extend_from_slice(&[1, 2, 3, 4]));
        for cut in 0..v.len() {
            assert_eq!(split_frame(&v[..cut], 100), Ok(None), "cut at {cut}");
        }
        let (_, body, used) = split_frame(&v, 100).unwrap().unwrap();
        assert_eq!((body, used), (&[1u8, 2, 3, 4][..], v.len()));
        assert!(matches!(
            split_frame(&v, 3),
            Err(WireError::OverLimit { .. })
        ));
        assert!(matches!(
            split_frame(b"XX", 100),
            Err(WireError::BadMagic { .. })
        ));
    }

    /// spec/wire.md "Frame header": a reader refuses a body *above* its limit; a body of
    /// exactly `max_body` bytes is split like any other.
    #[test]
    fn split_frame_takes_a_body_of_exactly_the_limit() {
        let mut v = Vec::new();
        encode_frame(&mut v, 0x0101, |b| b.extend_from_slice(&[9; 4]));
        let (_, body, used) = split_frame(&v, 4).unwrap().unwrap();
        assert_eq!((body, used), (&[9u8; 4][..], v.len()));
        assert_eq!(
            split_frame(&v, 3),
            Err(WireError::OverLimit {
                what: "frame body",
                value: 4,
                max: 3,
            })
        );
    }
}
