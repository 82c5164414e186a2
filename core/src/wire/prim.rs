//! Primitive field encodings (big-endian integers, length-prefixed bytes and strings,
//! counted sequences) and their nom parsers. Every length and count is checked against
//! a caller-supplied maximum before anything is allocated.

use alloc::string::String;
use alloc::vec::Vec;

use super::{PResult, WireError};
use nom::bytes::complete::take;
use nom::number::complete::{be_u8, be_u16, be_u32, be_u64};

/// Appends a `u8`.
pub fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}
/// Appends a big-endian `u16`.
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}
/// Appends a big-endian `u32`.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}
/// Appends a big-endian `u64`.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends bytes with a `u32` length prefix.
pub fn put_bytes(out: &mut Vec<u8>, v: &[u8]) {
    put_u32(out, u32::try_from(v.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(v);
}

/// Appends a UTF-8 string with a `u32` length prefix (same layout as [`put_bytes`]).
pub fn put_str(out: &mut Vec<u8>, v: &str) {
    put_bytes(out, v.as_bytes());
}

/// The longest prefix of `text` of at most `max` bytes that does not split a character:
/// what an encoder sends of a text its peer would refuse as too long.
///
/// A search down from the limit rather than a loop that steps `end` back: the loop's
/// `end -= 1` had the mutant `end /= 1`, which never ends and so cannot fail a test.
pub fn clip_str(text: &str, max: usize) -> &str {
    (0..=text.len().min(max))
        .rev()
        .find(|&end| text.is_char_boundary(end))
        .and_then(|end| text.get(..end))
        .unwrap_or_default()
}

/// Appends a `u32` count followed by each item encoded by `f`.
pub fn put_seq<T>(out: &mut Vec<u8>, items: &[T], mut f: impl FnMut(&mut Vec<u8>, &T)) {
    put_u32(out, u32::try_from(items.len()).unwrap_or(u32::MAX));
    for it in items {
        f(out, it);
    }
}

/// Parses a `u8`.
pub fn u8(input: &[u8]) -> PResult<'_, u8> {
    be_u8(input)
}
/// Parses a big-endian `u16`.
pub fn u16(input: &[u8]) -> PResult<'_, u16> {
    be_u16(input)
}
/// Parses a big-endian `u32`.
pub fn u32(input: &[u8]) -> PResult<'_, u32> {
    be_u32(input)
}
/// Parses a big-endian `u64`.
pub fn u64(input: &[u8]) -> PResult<'_, u64> {
    be_u64(input)
}

fn over(what: &'static str, value: u64, max: usize) -> nom::Err<WireError> {
    nom::Err::Failure(WireError::OverLimit {
        what,
        value,
        max: max as u64,
    })
}

/// Parses `u32`-length-prefixed bytes of at most `max` bytes, borrowing from the input.
pub fn bytes<'a>(what: &'static str, max: usize) -> impl Fn(&'a [u8]) -> PResult<'a, &'a [u8]> {
    move |input| {
        let (rest, len) = be_u32(input)?;
        if len as usize > max {
            return Err(over(what, u64::from(len), max));
        }
        take(len as usize)(rest)
    }
}

/// Parses a `u32`-length-prefixed UTF-8 string of at most `max` bytes.
pub fn string<'a>(what: &'static str, max: usize) -> impl Fn(&'a [u8]) -> PResult<'a, String> {
    move |input| {
        let (rest, raw) = bytes(what, max)(input)?;
        let s = core::str::from_utf8(raw).map_err(|_| nom::Err::Failure(WireError::NotUtf8))?;
        Ok((rest, String::from(s)))
    }
}

/// Parses a `u32` count (at most `max`) followed by that many items parsed by `item`.
pub fn seq<'a, T>(
    what: &'static str,
    max: usize,
    item: impl Fn(&'a [u8]) -> PResult<'a, T>,
) -> impl Fn(&'a [u8]) -> PResult<'a, Vec<T>> {
    move |input| {
        let (mut rest, count) = be_u32(input)?;
        if count as usize > max {
            return Err(over(what, u64::from(count), max));
        }
        // Allocate by what the input can hold, not by what the peer claims.
        let mut v = Vec::with_capacity((count as usize).min(rest.len()));
        for _ in 0..count {
            let (r, it) = item(rest)?;
            v.push(it);
            rest = r;
        }
        Ok((rest, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_all;
    use alloc::vec;
    use proptest::prelude::*;

    /// spec/wire.md: encoders cut a text longer than its limit at a character boundary,
    /// below the limit when the limit falls inside a character.
    #[test]
    fn clip_str_cuts_at_the_last_char_boundary_within_the_limit() {
        // 'a' then two-byte characters: every even offset but 0 is inside one.
        let text = alloc::format!("a{}", "é".repeat(10));
        assert_eq!(clip_str(&text, 4), "aé");
        assert_eq!(clip_str(&text, 5), "aéé");
        assert_eq!(clip_str(&text, 0), "");
        assert_eq!(clip_str(&text, 100), text, "a short text is kept whole");
        assert_eq!(clip_str("日本", 2), "", "no whole character fits");
    }

    #[test]
    fn limits_and_utf8_are_enforced() {
        let mut v = Vec::new();
        put_str(&mut v, "hello");
        assert_eq!(parse_all(&v, string("s", 5)), Ok(String::from("hello")));
        assert!(matches!(
            parse_all(&v, string("s", 4)),
            Err(WireError::OverLimit { what: "s", .. })
        ));
        let bad = vec![0, 0, 0, 2, 0xff, 0xfe];
        assert_eq!(parse_all(&bad, string("s", 10)), Err(WireError::NotUtf8));
        assert_eq!(
            parse_all(&[0, 0, 0, 9, 1], bytes("b", 10)),
            Err(WireError::Truncated)
        );
        // A huge claimed count fails on the limit before allocating anything.
        assert!(matches!(
            parse_all(&[0xff, 0xff, 0xff, 0xff], seq("n", 10, u8)),
            Err(WireError::OverLimit { .. })
        ));
        assert_eq!(
            parse_all(&[0, 0, 0, 2, 1], seq("n", 10, u8)),
            Err(WireError::Truncated)
        );
        assert_eq!(
            parse_all(&[0, 1, 7], u8),
            Err(WireError::TrailingBytes { extra: 2 })
        );
    }

    proptest! {
        #[test]
        fn primitives_round_trip(a: u8, b: u16, c: u32, d: u64, s in ".{0,20}",
                                 xs in proptest::collection::vec(any::<u32>(), 0..20)) {
            let mut out = Vec::new();
            put_u8(&mut out, a);
            put_u16(&mut out, b);
            put_u32(&mut out, c);
            put_u64(&mut out, d);
            put_str(&mut out, &s);
            put_seq(&mut out, &xs, |o, x| put_u32(o, *x));
            let parsed = parse_all(&out, |i| {
                let (i, a) = u8(i)?;
                let (i, b) = u16(i)?;
                let (i, c) = u32(i)?;
                let (i, d) = u64(i)?;
                let (i, s) = string("s", 100)(i)?;
                let (i, xs) = seq("xs", 100, u32)(i)?;
                Ok((i, (a, b, c, d, s, xs)))
            });
            prop_assert_eq!(parsed, Ok((a, b, c, d, s, xs)));
        }
    }
}
