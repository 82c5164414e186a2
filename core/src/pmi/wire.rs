//! The PMI-1 wire protocol (`spec/pmi.md` §2): what an MPI library (MPICH, and every
//! Hydra-based MPI) writes on its `PMI_FD` socket, and what the server answers.
//!
//! ```text
//! line   = "cmd=" name *( 1*SP token ) *SP LF
//! token  = key [ "=" value ]
//! key    = 1*( ALPHA / DIGIT / "_" / "-" / "/" )
//! value  = 1*( vchar / "\" byte )       ; vchar: any byte but SP, LF and "\"
//! mcmd   = "mcmd=" name LF *( key "=" *mbyte LF ) "endcmd" LF   ; mbyte: any byte but LF
//! ```
//!
//! A backslash escapes the byte after it (MPICH's `unescape_val`); replies escape space
//! and backslash the same way. Lines are capped at [`MAX_LINE`] bytes and a
//! multi-line command at [`MAX_MCMD`]; past that the input is refused, not buffered
//! (PMIS-3). Everything here is a parser: it never panics, whatever the bytes (PMIS-1).

use alloc::string::String;
use alloc::vec::Vec;

use nom::IResult;
use nom::Parser;
use nom::branch::alt;
use nom::bytes::complete::{tag, take, take_while, take_while1};
use nom::combinator::{all_consuming, opt};
use nom::multi::{fold_many1, many0};
use nom::sequence::preceded;

/// Longest single-line command accepted, newline included. MPICH's client sends at most
/// `kvsname_max + keylen_max + vallen_max + 30` bytes (see [`MAXES`]).
pub const MAX_LINE: usize = 4096;
/// Longest multi-line command (`mcmd=spawn`) accepted, its `endcmd` line included.
pub const MAX_MCMD: usize = 64 << 10;
/// The limits the server announces in `cmd=maxes`: kvs name, key and value lengths.
pub const MAXES: (usize, usize, usize) = (256, 64, 1024);

/// Why input is refused. Any of these ends the connection after an error reply
/// (PMIS-3): a client that breaks the framing cannot be resynchronised.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum PmiWireError {
    /// The line does not start with `cmd=` (or `mcmd=`).
    #[error("not a PMI command (expected `cmd=`)")]
    NotCommand,
    /// A token is not `key` or `key=value` with a key of `[A-Za-z0-9_/-]`.
    #[error("malformed token at byte {0}")]
    BadToken(usize),
    /// A line longer than [`MAX_LINE`], or a multi-line command longer than
    /// [`MAX_MCMD`], without its end.
    #[error("command longer than {0} bytes")]
    TooLong(usize),
    /// A key or value is not UTF-8.
    #[error("a key or value is not UTF-8")]
    NotUtf8,
    /// A required attribute is missing.
    #[error("`{0}` is missing")]
    Missing(&'static str),
    /// An attribute that must be an integer is not one.
    #[error("`{0}` is not an integer")]
    NotInteger(&'static str),
    /// The stream ended inside a command.
    #[error("the connection closed inside a command")]
    Truncated,
    /// A PMI-2 length field is not a decimal length (`wire2`, PMIS-17).
    #[error("a PMI-2 length field is not a decimal number")]
    BadLength,
}

impl PmiWireError {
    /// Whether the error broke the framing: the connection cannot be resynchronised and
    /// is closed after an error reply (PMIS-3, PMIS-17). Other errors are answered and
    /// the stream goes on.
    pub fn breaks_framing(&self) -> bool {
        matches!(self, PmiWireError::TooLong(_) | PmiWireError::BadLength)
    }
}

/// One parsed command: its name and its attributes in order (a bare `key` has no value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// `init`, `put`, `spawn`, …
    pub name: String,
    /// The attributes, in the order sent.
    pub attrs: Vec<(String, Option<String>)>,
}

impl Command {
    /// The value of the first attribute `key`, if it has one.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
    }

    /// The value of `key`, which must be there.
    pub fn need(&self, key: &'static str) -> Result<&str, PmiWireError> {
        self.get(key).ok_or(PmiWireError::Missing(key))
    }

    /// The integer value of `key`, or `default` when it is absent.
    pub fn int_or(&self, key: &'static str, default: i64) -> Result<i64, PmiWireError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| PmiWireError::NotInteger(key)),
        }
    }
}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'/')
}

fn utf8(b: Vec<u8>) -> Result<String, PmiWireError> {
    String::from_utf8(b).map_err(|_| PmiWireError::NotUtf8)
}

/// A one-line value, unescaped.
fn value(i: &[u8]) -> IResult<&[u8], Vec<u8>> {
    fold_many1(
        alt((
            take_while1(|b| !matches!(b, b' ' | b'\n' | b'\\')),
            preceded(tag(&b"\\"[..]), take(1usize)),
        )),
        Vec::new,
        |mut acc: Vec<u8>, part: &[u8]| {
            acc.extend_from_slice(part);
            acc
        },
    )
    .parse(i)
}

type RawToken = (Vec<u8>, Option<Vec<u8>>);

/// `key` or `key=value`, after at least one space.
fn token(i: &[u8]) -> IResult<&[u8], RawToken> {
    let (i, _) = take_while1(|b| b == b' ').parse(i)?;
    let (i, key) = take_while1(is_key_byte).parse(i)?;
    let (i, value) = opt(preceded(tag(&b"="[..]), value)).parse(i)?;
    Ok((i, (key.to_vec(), value)))
}

fn tokens_to_attrs(tokens: Vec<RawToken>) -> Result<Vec<(String, Option<String>)>, PmiWireError> {
    tokens
        .into_iter()
        .map(|(k, v)| Ok((utf8(k)?, v.map(utf8).transpose()?)))
        .collect()
}

/// Parses one command line, without its newline (PMIS-1).
pub fn parse_line(line: &[u8]) -> Result<Command, PmiWireError> {
    let Some(rest) = line.strip_prefix(b"cmd=") else {
        return Err(PmiWireError::NotCommand);
    };
    let parsed: IResult<&[u8], (&[u8], Vec<RawToken>)> = all_consuming((
        take_while1(is_key_byte),
        nom::sequence::terminated(many0(token), take_while(|b| b == b' ')),
    ))
    .parse(rest);
    let (name, tokens) = match parsed {
        Ok((_, v)) => v,
        Err(nom::Err::Error(e) | nom::Err::Failure(e)) => {
            return Err(PmiWireError::BadToken(line.len() - e.input.len()));
        }
        Err(nom::Err::Incomplete(_)) => return Err(PmiWireError::BadToken(line.len())),
    };
    Ok(Command {
        name: utf8(name.to_vec())?,
        attrs: tokens_to_attrs(tokens)?,
    })
}

/// Parses a multi-line command: `mcmd=NAME` and `key=value` lines, without the final
/// `endcmd` line. A value runs to the end of its line; backslashes escape as on one line.
pub fn parse_mcmd(body: &[u8]) -> Result<Command, PmiWireError> {
    let mut lines = body.split(|&b| b == b'\n');
    let first = lines.next().unwrap_or_default();
    let Some(name) = first.strip_prefix(b"mcmd=") else {
        return Err(PmiWireError::NotCommand);
    };
    if name.is_empty() || !name.iter().all(|&b| is_key_byte(b)) {
        return Err(PmiWireError::BadToken(5));
    }
    let mut attrs = Vec::new();
    let mut offset = first.len() + 1;
    for l in lines {
        let at = offset;
        offset += l.len() + 1;
        let l = l.strip_suffix(b" ").unwrap_or(l);
        if l.is_empty() {
            continue;
        }
        let parsed: IResult<&[u8], (&[u8], Vec<u8>)> = all_consuming((
            take_while1(is_key_byte),
            preceded(
                tag(&b"="[..]),
                fold_many1(
                    alt((
                        take_while1(|b| b != b'\\'),
                        preceded(tag(&b"\\"[..]), take(1usize)),
                    )),
                    Vec::new,
                    |mut acc: Vec<u8>, part: &[u8]| {
                        acc.extend_from_slice(part);
                        acc
                    },
                ),
            ),
        ))
        .parse(l);
        let (k, v) = parsed.map_err(|_| PmiWireError::BadToken(at))?.1;
        attrs.push((utf8(k.to_vec())?, Some(utf8(v)?)));
    }
    Ok(Command {
        name: utf8(name.to_vec())?,
        attrs,
    })
}

/// Splits a byte stream into commands. It holds at most one command's bytes beyond
/// what it has returned: a client that sends more than [`MAX_LINE`] (or [`MAX_MCMD`])
/// without ending its command gets [`PmiWireError::TooLong`] (PMIS-3).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Framer {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for the end of the current command.
    scanned: usize,
}

/// The end of a multi-line command.
const ENDCMD: &[u8] = b"endcmd\n";

impl Framer {
    /// An empty framer.
    pub fn new() -> Framer {
        Framer::default()
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held, not yet returned as commands.
    pub fn held(&self) -> usize {
        self.buf.len()
    }

    /// Takes the bytes held: what a client sent after the `init` line that switched its
    /// connection to PMI-2 belongs to the PMI-2 framer.
    pub fn take_held(&mut self) -> Vec<u8> {
        self.scanned = 0;
        core::mem::take(&mut self.buf)
    }

    /// The next whole command, if one is complete; an error if the input can no longer
    /// be a command (the framer must not be used after an error).
    pub fn next_command(&mut self) -> Option<Result<Command, PmiWireError>> {
        // Empty lines between commands carry nothing.
        let blank = self.buf.iter().take_while(|&&b| b == b'\n').count();
        if blank > 0 {
            self.buf.drain(..blank);
            self.scanned = 0;
        }
        if self.buf.is_empty() {
            return None;
        }
        let multi = self.buf.starts_with(b"mcmd=") || b"mcmd=".starts_with(&self.buf);
        if multi {
            // The command ends at a line that is exactly `endcmd`.
            let mut from = self.scanned;
            loop {
                let Some(nl) = self.buf[from..].iter().position(|&b| b == b'\n') else {
                    self.scanned = from;
                    break;
                };
                let line_end = from + nl + 1;
                let line_start = self.buf[..from + nl]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |p| p + 1);
                if &self.buf[line_start..line_end] == ENDCMD {
                    let body: Vec<u8> = self.buf.drain(..line_end).collect();
                    self.scanned = 0;
                    return Some(parse_mcmd(&body[..line_start]));
                }
                from = line_end;
            }
            return (self.buf.len() > MAX_MCMD).then_some(Err(PmiWireError::TooLong(MAX_MCMD)));
        }
        match self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
            Some(nl) => {
                let end = self.scanned + nl;
                if end + 1 > MAX_LINE {
                    return Some(Err(PmiWireError::TooLong(MAX_LINE)));
                }
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                self.scanned = 0;
                Some(parse_line(&line[..end]))
            }
            None => {
                self.scanned = self.buf.len();
                (self.buf.len() >= MAX_LINE).then_some(Err(PmiWireError::TooLong(MAX_LINE)))
            }
        }
    }
}

/// Escapes a reply value: space and backslash get a backslash.
fn escape_into(out: &mut Vec<u8>, v: &str) {
    for &b in v.as_bytes() {
        match b {
            b' ' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            // A reply is one line: a newline cannot travel; it becomes a space.
            b'\n' => out.extend_from_slice(b"\\ "),
            _ => out.push(b),
        }
    }
}

/// Formats a reply line: `cmd=NAME k=v …\n`, values escaped.
pub fn reply(name: &str, attrs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + name.len());
    out.extend_from_slice(b"cmd=");
    out.extend_from_slice(name.as_bytes());
    for (k, v) in attrs {
        out.push(b' ');
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        escape_into(&mut out, v);
    }
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    fn attrs(c: &Command) -> Vec<(&str, Option<&str>)> {
        c.attrs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect()
    }

    #[test]
    fn mpich_lines_parse() {
        let c = parse_line(b"cmd=init pmi_version=1 pmi_subversion=1").unwrap();
        assert_eq!(c.name, "init");
        assert_eq!(
            attrs(&c),
            vec![("pmi_version", Some("1")), ("pmi_subversion", Some("1"))]
        );
        let c = parse_line(b"cmd=put kvsname=kvs_1 key=-allgather-1-0-seg-1/9 value=segments=9 ")
            .unwrap();
        assert_eq!(c.get("key"), Some("-allgather-1-0-seg-1/9"));
        // A value may hold `=`: only the first one splits.
        assert_eq!(c.get("value"), Some("segments=9"));
        let c = parse_line(b"cmd=barrier_in").unwrap();
        assert_eq!((c.name.as_str(), c.attrs.len()), ("barrier_in", 0));
        let c = parse_line(br"cmd=abort exitcode=3 message=it\ broke\\").unwrap();
        assert_eq!(c.get("message"), Some(r"it broke\"));
        assert_eq!(c.int_or("exitcode", 1), Ok(3));
    }

    #[test]
    fn malformed_lines_get_typed_errors() {
        assert_eq!(parse_line(b"put key=a"), Err(PmiWireError::NotCommand));
        assert_eq!(parse_line(b"cmd="), Err(PmiWireError::BadToken(4)));
        assert_eq!(parse_line(b"cmd=put key="), Err(PmiWireError::BadToken(11)));
        assert_eq!(parse_line(b"cmd=put k*y=1"), Err(PmiWireError::BadToken(9)));
        assert_eq!(parse_line(b"cmd=get key=\xff"), Err(PmiWireError::NotUtf8));
        let c = parse_line(b"cmd=get_appnum").unwrap();
        assert_eq!(c.need("key"), Err(PmiWireError::Missing("key")));
        let c = parse_line(b"cmd=abort exitcode=x").unwrap();
        assert_eq!(
            c.int_or("exitcode", 1),
            Err(PmiWireError::NotInteger("exitcode"))
        );
    }

    #[test]
    fn spawn_is_a_multi_line_command() {
        let mut f = Framer::new();
        f.push(b"mcmd=spawn\nnprocs=2\nexecname=./child\ntotspawns=1\nspawnssofar=1\nargcnt=1\narg1=a b\n");
        assert_eq!(f.next_command(), None, "not complete before endcmd");
        f.push(b"endcmd\ncmd=get_appnum\n");
        let c = f.next_command().unwrap().unwrap();
        assert_eq!(c.name, "spawn");
        assert_eq!(c.get("nprocs"), Some("2"));
        assert_eq!(
            c.get("arg1"),
            Some("a b"),
            "an mcmd value runs to its line's end"
        );
        assert_eq!(f.next_command().unwrap().unwrap().name, "get_appnum");
        assert_eq!(f.next_command(), None);
        assert_eq!(f.held(), 0);
    }

    #[test]
    fn commands_split_anywhere_reassemble() {
        let stream = b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=get_maxes\n\ncmd=barrier_in\n";
        for cut in 0..stream.len() {
            let mut f = Framer::new();
            let mut names = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                f.push(part);
                while let Some(c) = f.next_command() {
                    names.push(c.unwrap().name);
                }
            }
            assert_eq!(names, ["init", "get_maxes", "barrier_in"], "cut at {cut}");
        }
    }

    #[test]
    fn overlong_input_is_refused_not_buffered() {
        let mut f = Framer::new();
        f.push(&vec![b'c'; MAX_LINE]);
        assert_eq!(f.next_command(), Some(Err(PmiWireError::TooLong(MAX_LINE))));
        let mut f = Framer::new();
        f.push(b"mcmd=spawn\n");
        f.push(&vec![b'x'; MAX_MCMD]);
        assert_eq!(f.next_command(), Some(Err(PmiWireError::TooLong(MAX_MCMD))));
        // Exactly at the limit is still a command.
        let mut line = b"cmd=get key=".to_vec();
        line.resize(MAX_LINE - 1, b'k');
        line.push(b'\n');
        let mut f = Framer::new();
        f.push(&line);
        assert!(matches!(f.next_command(), Some(Ok(_))));
    }

    #[test]
    fn replies_escape_what_would_split_them() {
        assert_eq!(
            reply("get_result", &[("rc", "0"), ("value", r"a b\c")]),
            b"cmd=get_result rc=0 value=a\\ b\\\\c\n".to_vec()
        );
        // What a reply carries parses back to the same value.
        let r = reply("x", &[("value", "p q\\r=s")]);
        let c = parse_line(&r[..r.len() - 1]).unwrap();
        assert_eq!(c.get("value"), Some("p q\\r=s"));
    }

    proptest! {
        /// PMIS-1: no input makes the framer or the parsers panic, and the framer never
        /// holds more than one command's limit.
        #[test]
        fn any_bytes_are_parsed_or_refused(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..20)) {
            let mut f = Framer::new();
            'feed: for c in &chunks {
                f.push(c);
                while let Some(r) = f.next_command() {
                    if r.is_err() { break 'feed; }
                }
                prop_assert!(f.held() <= MAX_MCMD + 300);
            }
            for c in &chunks {
                let _ = parse_line(c);
                let _ = parse_mcmd(c);
            }
        }

        /// Replies are parsed back to what they carry, whatever the value.
        #[test]
        fn reply_values_round_trip(v in "[ -~]{1,200}") {
            let r = reply("get_result", &[("value", &v)]);
            let c = parse_line(&r[..r.len() - 1]).unwrap();
            prop_assert_eq!(c.get("value"), Some(v.as_str()));
        }
    }
}
