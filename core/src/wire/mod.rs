//! The kernel's binary wire codec: one frame header shared by every kernel message,
//! big-endian primitive encodings, and nom parsers that never panic on peer input.
//!
//! A frame is `magic (2) | version (u8) | type (u16) | body length (u32) | body`, all
//! big-endian (`spec/wire.md`). Encoders append to a `Vec<u8>`; parsers take a byte slice
//! and return a typed [`WireError`] on anything malformed.

mod error;
mod frame;
pub mod prim;
pub mod types;

pub use error::WireError;
pub use frame::{
    FrameHeader, HEADER_LEN, MAGIC, SplitFrame, VERSION, decode_frame, encode_frame, split_frame,
};

/// The result of a wire parser: remaining input and the value, or a [`WireError`].
pub type PResult<'a, T> = nom::IResult<&'a [u8], T, WireError>;

/// Runs a body parser to completion: trailing bytes after the value are an error, and
/// nom's error wrapping is stripped so callers see the typed [`WireError`] only.
pub fn parse_all<'a, T>(
    input: &'a [u8],
    parser: impl FnOnce(&'a [u8]) -> PResult<'a, T>,
) -> Result<T, WireError> {
    match parser(input) {
        Ok(([], v)) => Ok(v),
        Ok((rest, _)) => Err(WireError::TrailingBytes { extra: rest.len() }),
        Err(nom::Err::Error(e) | nom::Err::Failure(e)) => Err(e),
        // Complete parsers never ask for more input; treat it as truncation anyway.
        Err(nom::Err::Incomplete(_)) => Err(WireError::Truncated),
    }
}
