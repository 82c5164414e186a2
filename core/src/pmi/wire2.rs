//! The PMI-2 wire protocol (`spec/pmi.md` §2.1): what a PMI-2 client (Slurm's
//! `libpmi2`, the library Intel MPI and MPICH built `--with-pmi=slurm` load) writes on
//! its `PMI_FD` socket once a PMI-1 `cmd=init pmi_version=2` line switched the
//! connection over, and what the server answers.
//!
//! ```text
//! message = length body                    ; length: 6 bytes, decimal, space-padded
//! body    = "cmd=" name ";" *( key "=" value ";" )
//! key     = 1*( ALPHA / DIGIT / "_" / "-" / "/" )
//! value   = *( vbyte / ";;" )              ; vbyte: any byte but ";"
//! ```
//!
//! The length counts the body's bytes. A `;` inside a value is written `;;` (both
//! ways). A body is capped at [`MAX_MESSAGE`] bytes; a longer length, or a length field
//! that is not a number, breaks the framing (PMIS-17). Everything here is a parser: it
//! never panics, whatever the bytes (PMIS-1).

use alloc::string::String;
use alloc::vec::Vec;

use nom::IResult;
use nom::Parser;
use nom::branch::alt;
use nom::bytes::complete::{tag, take_while, take_while1};
use nom::combinator::{all_consuming, value};
use nom::multi::{fold_many0, many0};
use nom::sequence::terminated;

use super::wire::{Command, MAX_MCMD, PmiWireError};

/// Bytes of the length field in front of every message.
pub const LEN_FIELD: usize = 6;
/// Longest message body accepted: a whole `spawn` (every command, argument and
/// pre-put key of `MPI_Comm_spawn_multiple`) is one message, so the cap is PMI-1's cap
/// of a multi-line `spawn` ([`MAX_MCMD`]).
pub const MAX_MESSAGE: usize = MAX_MCMD;
/// Longest value a PMI-2 client accepts in a reply (`PMI2_MAX_VALLEN`): error messages
/// are cut to it so that the client can still read the reply.
pub const MAX_REPLY_VALUE: usize = 1024;

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'/')
}

fn utf8(b: &[u8]) -> Result<String, PmiWireError> {
    String::from_utf8(b.to_vec()).map_err(|_| PmiWireError::NotUtf8)
}

/// A value up to its terminating `;`, with `;;` unescaped. May be empty (`jobid=;`).
fn value_bytes(i: &[u8]) -> IResult<&[u8], Vec<u8>> {
    fold_many0(
        alt((
            take_while1(|b| b != b';'),
            value(&b";"[..], tag(&b";;"[..])),
        )),
        Vec::new,
        |mut acc: Vec<u8>, part: &[u8]| {
            acc.extend_from_slice(part);
            acc
        },
    )
    .parse(i)
}

/// A key as sent and its value unescaped.
type RawPair<'a> = (&'a [u8], Vec<u8>);

/// `key=value;`.
fn pair(i: &[u8]) -> IResult<&[u8], RawPair<'_>> {
    let (i, key) = take_while1(is_key_byte).parse(i)?;
    let (i, _) = tag(&b"="[..]).parse(i)?;
    let (i, v) = terminated(value_bytes, tag(&b";"[..])).parse(i)?;
    Ok((i, (key, v)))
}

/// Parses one message body (without its length field) into its command name and its
/// pairs in order (a key may repeat: `spawn` sends `subcmd`, `maxprocs`, … once per
/// command). Every attribute has a value.
pub fn parse_message(body: &[u8]) -> Result<Command, PmiWireError> {
    let Some(rest) = body.strip_prefix(b"cmd=") else {
        return Err(PmiWireError::NotCommand);
    };
    let parsed: IResult<&[u8], (&[u8], Vec<RawPair<'_>>)> = all_consuming((
        terminated(take_while1(is_key_byte), tag(&b";"[..])),
        many0(pair),
    ))
    .parse(rest);
    let (name, pairs) = match parsed {
        Ok((_, v)) => v,
        Err(nom::Err::Error(e) | nom::Err::Failure(e)) => {
            return Err(PmiWireError::BadToken(body.len() - e.input.len()));
        }
        Err(nom::Err::Incomplete(_)) => return Err(PmiWireError::BadToken(body.len())),
    };
    let attrs = pairs
        .into_iter()
        .map(|(k, v)| Ok((utf8(k)?, Some(utf8(&v)?))))
        .collect::<Result<Vec<_>, PmiWireError>>()?;
    Ok(Command {
        name: utf8(name)?,
        attrs,
    })
}

/// The body length a length field announces: decimal digits, padded with spaces on
/// either side (Slurm's client writes them left-aligned, MPICH's right-aligned).
fn parse_len(field: &[u8]) -> Result<usize, PmiWireError> {
    let spaces = |b: u8| b == b' ';
    let parsed: IResult<&[u8], &[u8]> = all_consuming(terminated(
        nom::sequence::preceded(take_while(spaces), take_while1(|b: u8| b.is_ascii_digit())),
        take_while(spaces),
    ))
    .parse(field);
    let Ok((_, digits)) = parsed else {
        return Err(PmiWireError::BadLength);
    };
    // At most six digits: no overflow.
    let n = digits
        .iter()
        .fold(0usize, |n, d| n * 10 + usize::from(d - b'0'));
    if n > MAX_MESSAGE {
        return Err(PmiWireError::TooLong(MAX_MESSAGE));
    }
    Ok(n)
}

/// Splits a PMI-2 byte stream into messages. It holds at most one message's bytes
/// beyond what it has returned: a length over [`MAX_MESSAGE`] is refused before its
/// body is read ([`PmiWireError::TooLong`]), and a length field that is not one is
/// [`PmiWireError::BadLength`]; after either the framer must not be used (PMIS-17).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Framer2 {
    buf: Vec<u8>,
}

impl Framer2 {
    /// An empty framer.
    pub fn new() -> Framer2 {
        Framer2::default()
    }

    /// A framer that starts with `bytes` already received (what followed the PMI-1
    /// `init` line that switched the connection over).
    pub fn with_bytes(bytes: Vec<u8>) -> Framer2 {
        Framer2 { buf: bytes }
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held, not yet returned as messages.
    pub fn held(&self) -> usize {
        self.buf.len()
    }

    /// The next whole message, if one is complete. A body that does not parse is an
    /// error the stream survives (its length was read); a bad length field is not.
    pub fn next_command(&mut self) -> Option<Result<Command, PmiWireError>> {
        let field = self.buf.get(..LEN_FIELD)?;
        let len = match parse_len(field) {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        if self.buf.len() < LEN_FIELD + len {
            return None;
        }
        let message: Vec<u8> = self.buf.drain(..LEN_FIELD + len).collect();
        Some(parse_message(&message[LEN_FIELD..]))
    }
}

/// Appends `v` escaped: each `;` doubled.
fn escape_into(out: &mut Vec<u8>, v: &str) {
    for &b in v.as_bytes() {
        if b == b';' {
            out.push(b';');
        }
        out.push(b);
    }
}

/// Formats a reply message: the length field, then `cmd=NAME;k=v;…`, values escaped.
/// The length field is left-aligned and space-padded, as Slurm's client writes it; a
/// body of more than six digits' length cannot be announced, so the server never
/// builds one (its replies carry at most a few values of [`MAX_REPLY_VALUE`] bytes).
pub fn reply2(name: &str, attrs: &[(&str, &str)]) -> Vec<u8> {
    let mut body = Vec::with_capacity(16 + name.len());
    body.extend_from_slice(b"cmd=");
    body.extend_from_slice(name.as_bytes());
    body.push(b';');
    for (k, v) in attrs {
        body.extend_from_slice(k.as_bytes());
        body.push(b'=');
        escape_into(&mut body, v);
        body.push(b';');
    }
    let mut out = alloc::format!("{:<width$}", body.len(), width = LEN_FIELD).into_bytes();
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec;
    use proptest::prelude::*;

    fn framed(body: &str) -> Vec<u8> {
        let mut v = format!("{:<6}", body.len()).into_bytes();
        v.extend_from_slice(body.as_bytes());
        v
    }

    #[test]
    fn slurm_messages_parse() {
        let c = parse_message(b"cmd=fullinit;pmirank=1;threaded=FALSE;").unwrap();
        assert_eq!(c.name, "fullinit");
        assert_eq!(c.get("pmirank"), Some("1"));
        assert_eq!(c.get("threaded"), Some("FALSE"));
        // An empty value (`PMI2_KVS_Get(NULL, …)` sends `jobid=;`), and `;;`.
        let c = parse_message(b"cmd=kvs-get;jobid=;srcid=-1;key=a;;b;").unwrap();
        assert_eq!(c.get("jobid"), Some(""));
        assert_eq!(c.get("key"), Some("a;b"));
        // A value ending in `;`: `;;` then the terminator.
        let c = parse_message(b"cmd=kvs-put;key=k;value=x;;;").unwrap();
        assert_eq!(c.get("value"), Some("x;"));
        // Keys repeat in a spawn; all are kept in order.
        let c = parse_message(b"cmd=spawn;ncmds=2;subcmd=a;subcmd=b;").unwrap();
        let subs: Vec<_> = c.attrs.iter().filter(|(k, _)| k == "subcmd").collect();
        assert_eq!(subs.len(), 2);
    }

    #[test]
    fn malformed_messages_get_typed_errors() {
        assert_eq!(parse_message(b"kvs-fence;"), Err(PmiWireError::NotCommand));
        assert_eq!(
            parse_message(b"cmd=kvs-fence"),
            Err(PmiWireError::BadToken(13))
        );
        assert_eq!(parse_message(b"cmd=;"), Err(PmiWireError::BadToken(4)));
        assert!(matches!(
            parse_message(b"cmd=kvs-put;key=k"),
            Err(PmiWireError::BadToken(_))
        ));
        assert!(matches!(
            parse_message(b"cmd=kvs-put;k y=1;"),
            Err(PmiWireError::BadToken(_))
        ));
        assert_eq!(
            parse_message(b"cmd=kvs-put;key=\xff;"),
            Err(PmiWireError::NotUtf8)
        );
    }

    #[test]
    fn messages_split_anywhere_reassemble() {
        let mut stream = framed("cmd=fullinit;pmirank=0;threaded=FALSE;");
        stream.extend(framed("cmd=kvs-put;key=a;value=1;;2;"));
        stream.extend(framed("cmd=kvs-fence;"));
        for cut in 0..stream.len() {
            let mut f = Framer2::new();
            let mut names = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                f.push(part);
                while let Some(c) = f.next_command() {
                    names.push(c.unwrap().name);
                }
            }
            assert_eq!(names, ["fullinit", "kvs-put", "kvs-fence"], "cut at {cut}");
            assert_eq!(f.held(), 0);
        }
    }

    #[test]
    fn length_fields_either_aligned_parse_and_bad_ones_break_framing() {
        for field in ["14    ", "    14", "  14  ", "000014"] {
            let mut f = Framer2::new();
            f.push(field.as_bytes());
            f.push(b"cmd=kvs-fence;");
            assert_eq!(f.next_command().unwrap().unwrap().name, "kvs-fence");
        }
        for field in ["      ", "1 4   ", "-14   ", "x14   ", "14\n   ", "0x0e  "] {
            let mut f = Framer2::new();
            f.push(field.as_bytes());
            assert_eq!(
                f.next_command(),
                Some(Err(PmiWireError::BadLength)),
                "{field:?}"
            );
        }
        // A length over the cap is refused before its body comes.
        let mut f = Framer2::new();
        f.push(format!("{:<6}", MAX_MESSAGE + 1).as_bytes());
        assert_eq!(
            f.next_command(),
            Some(Err(PmiWireError::TooLong(MAX_MESSAGE)))
        );
        // Exactly at the cap is a message.
        let mut body = b"cmd=kvs-put;key=k;value=".to_vec();
        body.resize(MAX_MESSAGE - 1, b'v');
        body.push(b';');
        let mut f = Framer2::new();
        f.push(format!("{:<6}", body.len()).as_bytes());
        f.push(&body);
        assert!(matches!(f.next_command(), Some(Ok(_))));
    }

    #[test]
    fn a_body_that_does_not_parse_keeps_the_stream_in_step() {
        let mut f = Framer2::new();
        f.push(&framed("garbage"));
        f.push(&framed("cmd=finalize;"));
        assert_eq!(f.next_command(), Some(Err(PmiWireError::NotCommand)));
        assert_eq!(f.next_command().unwrap().unwrap().name, "finalize");
    }

    #[test]
    fn replies_are_framed_and_escaped() {
        assert_eq!(
            reply2("kvs-get-response", &[("rc", "0"), ("value", "a;b")]),
            b"37    cmd=kvs-get-response;rc=0;value=a;;b;".to_vec()
        );
        let r = reply2("x", &[("value", "p;q;")]);
        let mut f = Framer2::with_bytes(r);
        assert_eq!(
            f.next_command().unwrap().unwrap().get("value"),
            Some("p;q;")
        );
    }

    proptest! {
        /// PMIS-1: no input makes the framer or the parser panic, and the framer never
        /// holds more than one message's limit.
        #[test]
        fn any_bytes_are_parsed_or_refused(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..20)) {
            let mut f = Framer2::new();
            'feed: for c in &chunks {
                f.push(c);
                while let Some(r) = f.next_command() {
                    if matches!(r, Err(PmiWireError::BadLength | PmiWireError::TooLong(_))) {
                        break 'feed;
                    }
                }
                prop_assert!(f.held() <= LEN_FIELD + MAX_MESSAGE + 300);
            }
            for c in &chunks {
                let _ = parse_message(c);
            }
        }

        /// Framed bodies with arbitrary values, split anywhere, come back whole.
        #[test]
        fn messages_split_anywhere_never_panic(v in "[ -~]{0,100}", cut in 0usize..200) {
            let r = reply2("kvs-put", &[("key", "k"), ("value", &v)]);
            let cut = cut.min(r.len());
            let mut f = Framer2::new();
            f.push(&r[..cut]);
            let first = f.next_command();
            f.push(&r[cut..]);
            let c = match first {
                Some(c) => c,
                None => f.next_command().unwrap(),
            };
            let c = c.unwrap();
            prop_assert_eq!(c.get("value"), Some(v.as_str()));
        }

        /// Replies are parsed back to what they carry, whatever the values.
        #[test]
        fn reply_values_round_trip(k in "[a-z][a-z0-9-]{0,20}", v in "\\PC{0,200}") {
            let r = reply2("kvs-get-response", &[("rc", "0"), (&k, &v)]);
            let c = parse_message(&r[LEN_FIELD..]).unwrap();
            prop_assert_eq!(c.name.as_str(), "kvs-get-response");
            prop_assert_eq!(c.attrs, vec![("rc".into(), Some("0".into())), (k, Some(v))]);
        }
    }
}
