//! The codec's error type, also used as nom's error type so parsers can fail with
//! precise reasons (over limit, bad UTF-8) instead of an opaque `ErrorKind`.

use nom::error::{ErrorKind, ParseError};

/// Everything that can be wrong with bytes received from a peer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub enum WireError {
    /// The frame does not start with the kernel's magic bytes.
    #[error("bad magic {found:02x?}, expected \"DR\"")]
    BadMagic {
        /// The two bytes found instead.
        found: [u8; 2],
    },
    /// The protocol version is not one this kernel speaks.
    #[error("unknown protocol version {version}")]
    UnknownVersion {
        /// The version byte received.
        version: u8,
    },
    /// The message type is not defined (or not expected by this parser).
    #[error("unknown message type {msg_type:#06x}")]
    UnknownType {
        /// The type received.
        msg_type: u16,
    },
    /// The input ended before the value was complete.
    #[error("truncated input")]
    Truncated,
    /// The header's body length disagrees with the bytes present.
    #[error("body length {declared} does not match {actual} bytes present")]
    LengthMismatch {
        /// The length the header declared.
        declared: u32,
        /// The bytes actually present after the header.
        actual: usize,
    },
    /// Bytes were left over after a complete value.
    #[error("{extra} trailing bytes after the message")]
    TrailingBytes {
        /// How many bytes were left.
        extra: usize,
    },
    /// A string field was not valid UTF-8.
    #[error("string field is not UTF-8")]
    NotUtf8,
    /// A length or count exceeded the limit the parser allows.
    #[error("{what}: {value} exceeds the limit {max}")]
    OverLimit {
        /// Which field.
        what: &'static str,
        /// The value received.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// A field held a value outside its defined set (e.g. an enum tag).
    #[error("{what}: invalid value {value}")]
    InvalidValue {
        /// Which field.
        what: &'static str,
        /// The value received.
        value: u64,
    },
    /// An integrity check (a checksum) failed: the bytes were corrupted in transit.
    #[error("checksum mismatch: computed {computed:#010x}, received {received:#010x}")]
    Checksum {
        /// The checksum computed over the bytes received.
        computed: u32,
        /// The checksum carried by the frame.
        received: u32,
    },
    /// Fields that are each well-formed but do not fit together, a combination the
    /// decoded type cannot represent (e.g. a change request of kind ADD that names
    /// victims). No encoder of this kernel writes one.
    // Last of the variants: recorded traces hash results and errors (derived `Hash`, by
    // variant index), so a variant inserted before others would change their hashes.
    #[error("inconsistent fields: {what}")]
    Inconsistent {
        /// Which combination.
        what: &'static str,
    },
}

impl<I> ParseError<I> for WireError {
    // nom's primitive parsers (`take`, `be_u32`, ...) in complete mode only fail for
    // lack of input, so every nom-originated error is a truncation.
    fn from_error_kind(_input: I, _kind: ErrorKind) -> Self {
        WireError::Truncated
    }

    fn append(_input: I, _kind: ErrorKind, other: Self) -> Self {
        other
    }
}
