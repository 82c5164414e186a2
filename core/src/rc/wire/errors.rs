//! [`RcError`] and `Result<T, RcError>` on the wire.
//!
//! An error is `code u16 | payload`, with `code` = [`RcError::code`]:
//!
//! - variants whose payload is plain data are encoded structurally and decode to the
//!   identical variant: `NoSuchChange`, `Aborted`, `AlreadyFinalized` (a pset name),
//!   `NotBound` (two names), `QueueFull` (`u64`), `ReservedKey`, `KeyExists`,
//!   `NoSuchKey` (a key), `Timeout` (nothing), `NotPermitted`, `ProcessLost` (a process
//!   id);
//! - [`RcError::Refused`] is the reserved code [`REFUSED_MARKER`] followed by
//!   `code u16 | detail`, and decodes to itself;
//! - the others (`Pset`, `Slots`, `BadRequest`, `NewPsetMismatch`, `Client`) hold nested
//!   errors or reasons that peers have always exchanged as text, so they are encoded as
//!   `code | detail` with `detail` their `Display` text, and decode to
//!   `Refused { code, detail }`. Any code this kernel does not know is read the same
//!   way, so a newer peer's errors arrive as `Refused` instead of failing the frame.
//!
//! `detail` is a string of at most [`MAX_DETAIL_LEN`] bytes; longer texts are cut at a
//! character boundary by the encoder, since they only inform a human.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::rc::RcError;
use crate::wire::PResult;
use crate::wire::prim::{
    clip_str, put_str, put_u8, put_u16, put_u32, put_u64, string, u8, u16, u32, u64,
};

use super::values::{invalid, name, pid, put_name, put_pid, put_usize, size};
use super::{MAX_DETAIL_LEN, MAX_KEY_LEN};

/// The error code that announces an encoded [`RcError::Refused`]. No variant has code 0,
/// so the marker cannot be confused with one.
pub const REFUSED_MARKER: u16 = 0;

/// Cuts `text` to at most [`MAX_DETAIL_LEN`] bytes without splitting a character.
fn clip(text: &str) -> &str {
    clip_str(text, MAX_DETAIL_LEN)
}

pub(crate) fn put_error(out: &mut Vec<u8>, e: &RcError) {
    match e {
        RcError::Refused { code, detail } => {
            put_u16(out, REFUSED_MARKER);
            put_u16(out, *code);
            put_str(out, clip(detail));
        }
        RcError::NoSuchChange(n) | RcError::Aborted(n) | RcError::AlreadyFinalized(n) => {
            put_u16(out, e.code());
            put_name(out, n);
        }
        RcError::NotBound { delta, bound } => {
            put_u16(out, e.code());
            put_name(out, delta);
            put_name(out, bound);
        }
        RcError::QueueFull(n) => {
            put_u16(out, e.code());
            put_usize(out, *n);
        }
        RcError::ReservedKey(k) | RcError::KeyExists(k) | RcError::NoSuchKey(k) => {
            put_u16(out, e.code());
            put_str(out, k);
        }
        RcError::Timeout => put_u16(out, e.code()),
        RcError::NotGranted { slots } => {
            put_u16(out, e.code());
            put_u32(out, *slots);
        }
        RcError::Stale { pset, version } => {
            put_u16(out, e.code());
            put_name(out, pset);
            put_u64(out, *version);
        }
        RcError::NotPermitted(p) | RcError::ProcessLost(p) => {
            put_u16(out, e.code());
            put_pid(out, p);
        }
        RcError::Pset(_)
        | RcError::Slots(_)
        | RcError::BadRequest(_)
        | RcError::NewPsetMismatch { .. }
        | RcError::Client(_) => {
            put_u16(out, e.code());
            put_str(out, clip(&e.to_string()));
        }
    }
}

fn key(input: &[u8]) -> PResult<'_, String> {
    string("key", MAX_KEY_LEN)(input)
}

fn detail(input: &[u8]) -> PResult<'_, String> {
    string("error detail", MAX_DETAIL_LEN)(input)
}

pub(crate) fn error(input: &[u8]) -> PResult<'_, RcError> {
    let (i, code) = u16(input)?;
    match code {
        REFUSED_MARKER => {
            let (i, code) = u16(i)?;
            let (i, detail) = detail(i)?;
            Ok((i, RcError::Refused { code, detail }))
        }
        RcError::CODE_NO_SUCH_CHANGE => {
            let (i, n) = name(i)?;
            Ok((i, RcError::NoSuchChange(n)))
        }
        RcError::CODE_ABORTED => {
            let (i, n) = name(i)?;
            Ok((i, RcError::Aborted(n)))
        }
        RcError::CODE_ALREADY_FINALIZED => {
            let (i, n) = name(i)?;
            Ok((i, RcError::AlreadyFinalized(n)))
        }
        RcError::CODE_NOT_BOUND => {
            let (i, delta) = name(i)?;
            let (i, bound) = name(i)?;
            Ok((i, RcError::NotBound { delta, bound }))
        }
        RcError::CODE_QUEUE_FULL => {
            let (i, n) = size("queue length")(i)?;
            Ok((i, RcError::QueueFull(n)))
        }
        RcError::CODE_RESERVED_KEY => {
            let (i, k) = key(i)?;
            Ok((i, RcError::ReservedKey(k)))
        }
        RcError::CODE_KEY_EXISTS => {
            let (i, k) = key(i)?;
            Ok((i, RcError::KeyExists(k)))
        }
        RcError::CODE_NO_SUCH_KEY => {
            let (i, k) = key(i)?;
            Ok((i, RcError::NoSuchKey(k)))
        }
        RcError::CODE_TIMEOUT => Ok((i, RcError::Timeout)),
        RcError::CODE_NOT_GRANTED => {
            let (i, slots) = u32(i)?;
            Ok((i, RcError::NotGranted { slots }))
        }
        RcError::CODE_STALE => {
            let (i, pset) = name(i)?;
            let (i, version) = u64(i)?;
            Ok((i, RcError::Stale { pset, version }))
        }
        RcError::CODE_NOT_PERMITTED => {
            let (i, p) = pid(i)?;
            Ok((i, RcError::NotPermitted(p)))
        }
        RcError::CODE_PROCESS_LOST => {
            let (i, p) = pid(i)?;
            Ok((i, RcError::ProcessLost(p)))
        }
        // The textual variants and codes from newer peers.
        _ => {
            let (i, detail) = detail(i)?;
            Ok((i, RcError::Refused { code, detail }))
        }
    }
}

/// `Result<T, RcError>`: tag `0` and the value, or tag `1` and the error.
pub(super) fn put_result<T>(
    out: &mut Vec<u8>,
    r: &Result<T, RcError>,
    f: impl FnOnce(&mut Vec<u8>, &T),
) {
    match r {
        Ok(v) => {
            put_u8(out, 0);
            f(out, v);
        }
        Err(e) => {
            put_u8(out, 1);
            put_error(out, e);
        }
    }
}

/// Parses a `Result<T, RcError>` written by [`put_result`].
pub(super) fn result<'a, T>(
    item: impl Fn(&'a [u8]) -> PResult<'a, T>,
) -> impl Fn(&'a [u8]) -> PResult<'a, Result<T, RcError>> {
    move |input| {
        let (i, tag) = u8(input)?;
        match tag {
            0 => {
                let (i, v) = item(i)?;
                Ok((i, Ok(v)))
            }
            1 => {
                let (i, e) = error(i)?;
                Ok((i, Err(e)))
            }
            _ => invalid("result tag", u64::from(tag)),
        }
    }
}
