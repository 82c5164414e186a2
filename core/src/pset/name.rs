//! Pset names: the URI grammar of `spec/psets.md` §1, parsed with nom.
//!
//! ```text
//! pset-name = scheme ( "WORLD" / "SELF" / domain "/" app *( "/" segment ) )
//! scheme    = "mpi://"             ; case-insensitive, canonical lower case
//! domain    = "app" / "rte"        ; case-insensitive, canonical lower case
//! app       = segment
//! segment   = 1*64( ALPHA / DIGIT / "-" / "_" / "." ), not "." or ".."
//! ```
//! `WORLD` and `SELF` are case-insensitive and canonically upper case; app names and
//! segments are case-sensitive; a whole name is at most 255 bytes (`PSET-1`, `PSET-2`).

use alloc::format;
use alloc::string::{String, ToString};
use compact_str::CompactString;
use core::fmt;
use core::str::FromStr;

use nom::bytes::complete::{tag_no_case, take_while1};
use nom::character::complete::char;
use nom::multi::many0;
use nom::sequence::preceded;
use nom::{IResult, Parser};

/// Longest pset name in bytes (PMIx's `PMIX_MAX_NSLEN`).
pub const MAX_NAME_LEN: usize = 255;
/// Longest segment (app name or path segment) in bytes.
pub const MAX_SEGMENT_LEN: usize = 64;
/// The sub-domain of `mpi://rte/{app}` that holds delta psets (`PSET-4`).
pub const DELTA_SUBDOMAIN: &str = "rc";

/// Which part of the name space a pset lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Domain {
    /// `mpi://WORLD`: every process of the job.
    World,
    /// `mpi://SELF`: the calling process alone (resolved per caller, never stored).
    SelfSet,
    /// `mpi://app/{app}/…`: the application's own domain.
    App,
    /// `mpi://rte/{app}/…`: reserved for the runtime.
    Rte,
}

/// A validated pset name in canonical form.
///
/// Two names are equal iff their canonical texts are equal, so `mpi://world` and
/// `mpi://WORLD` are the same pset while `mpi://app/A` and `mpi://app/a` are not.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PsetName {
    /// Inline when short (see [`Namespace`](crate::Namespace)): names are cloned into
    /// every change, message and replica. Equality, order and hash are those of the text.
    text: CompactString,
    domain: Domain,
    /// Byte range of the app segment in `text` (empty for WORLD/SELF).
    app: (u16, u16),
}

/// Why a string is not a pset name. Offsets are byte offsets into the input.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
pub enum NameError {
    /// The name does not start with `mpi://`.
    #[error("pset name must start with \"mpi://\"")]
    MissingScheme,
    /// After the scheme comes neither `WORLD`, `SELF`, `app/` nor `rte/`.
    #[error("unknown domain at byte {at}: expected WORLD, SELF, app/ or rte/")]
    UnknownDomain {
        /// Where the domain should start.
        at: usize,
    },
    /// `mpi://app` or `mpi://rte` without an application name.
    #[error("missing application name at byte {at}")]
    MissingApp {
        /// Where the app name should start.
        at: usize,
    },
    /// A character outside the segment alphabet.
    #[error("character {ch:?} at byte {at} is not allowed in a pset name segment")]
    BadChar {
        /// The offending character.
        ch: char,
        /// Its byte offset.
        at: usize,
    },
    /// Two slashes in a row or a trailing slash.
    #[error("empty segment at byte {at}")]
    EmptySegment {
        /// Where the empty segment is.
        at: usize,
    },
    /// A segment of `.` or `..`.
    #[error("segment {segment:?} at byte {at} is reserved")]
    DotSegment {
        /// The segment.
        segment: String,
        /// Its byte offset.
        at: usize,
    },
    /// A segment longer than [`MAX_SEGMENT_LEN`].
    #[error("segment at byte {at} is {len} bytes long (at most {MAX_SEGMENT_LEN})")]
    SegmentTooLong {
        /// Its byte offset.
        at: usize,
        /// Its length.
        len: usize,
    },
    /// The whole name is longer than [`MAX_NAME_LEN`].
    #[error("pset name is {len} bytes long (at most {MAX_NAME_LEN})")]
    TooLong {
        /// Its length.
        len: usize,
    },
}

fn is_segment_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

fn segment(input: &str) -> IResult<&str, &str> {
    take_while1(is_segment_char).parse(input)
}

/// `"/" segment` repeated: the app name and the path below it.
fn segments(input: &str) -> IResult<&str, alloc::vec::Vec<&str>> {
    many0(preceded(char('/'), segment)).parse(input)
}

impl PsetName {
    /// Parses and validates a name, returning its canonical form.
    pub fn parse(input: &str) -> Result<PsetName, NameError> {
        if input.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong { len: input.len() });
        }
        let offset = |rest: &str| input.len() - rest.len();
        let (rest, _) = tag_no_case::<_, _, nom::error::Error<&str>>("mpi://")
            .parse(input)
            .map_err(|_| NameError::MissingScheme)?;
        let word = |w: &'static str| tag_no_case::<_, _, nom::error::Error<&str>>(w);
        if let Ok(("", _)) = word("WORLD").parse(rest) {
            return Ok(PsetName::world());
        }
        if let Ok(("", _)) = word("SELF").parse(rest) {
            return Ok(PsetName::self_set());
        }
        let (after_domain, domain) = if let Ok((r, _)) = word("app").parse(rest) {
            (r, Domain::App)
        } else if let Ok((r, _)) = word("rte").parse(rest) {
            (r, Domain::Rte)
        } else {
            return Err(NameError::UnknownDomain { at: offset(rest) });
        };
        let (tail, segs) = segments(after_domain).map_err(|_| NameError::MissingApp {
            at: offset(after_domain),
        })?;
        if segs.is_empty() {
            // Either nothing follows the domain or what follows is not "/segment".
            return Err(match after_domain.chars().next() {
                None => NameError::MissingApp {
                    at: offset(after_domain),
                },
                Some('/') => {
                    let at = offset(after_domain) + 1;
                    match after_domain[1..].chars().next() {
                        Some(ch) if ch != '/' => NameError::BadChar { ch, at },
                        _ => NameError::MissingApp { at },
                    }
                }
                Some(_) => NameError::UnknownDomain { at: offset(rest) },
            });
        }
        if let Some(c) = tail.chars().next() {
            let at = offset(tail);
            return Err(if c == '/' {
                NameError::EmptySegment { at: at + 1 }
            } else {
                NameError::BadChar { ch: c, at }
            });
        }
        // Validate segment shapes; compute each segment's offset from its slice.
        for s in &segs {
            let at = s.as_ptr() as usize - input.as_ptr() as usize;
            if *s == "." || *s == ".." {
                return Err(NameError::DotSegment {
                    segment: s.to_string(),
                    at,
                });
            }
            if s.len() > MAX_SEGMENT_LEN {
                return Err(NameError::SegmentTooLong { at, len: s.len() });
            }
        }
        let prefix = match domain {
            Domain::App => "mpi://app",
            _ => "mpi://rte",
        };
        // Built in place: short names never touch the heap.
        let mut text = CompactString::const_new(prefix);
        for s in &segs {
            text.push('/');
            text.push_str(s);
        }
        let app_start = prefix.len() + 1;
        let app = (app_start as u16, (app_start + segs[0].len()) as u16);
        Ok(PsetName { text, domain, app })
    }

    /// `mpi://WORLD`.
    pub fn world() -> PsetName {
        PsetName {
            text: CompactString::const_new("mpi://WORLD"),
            domain: Domain::World,
            app: (0, 0),
        }
    }

    /// `mpi://SELF`.
    pub fn self_set() -> PsetName {
        PsetName {
            text: CompactString::const_new("mpi://SELF"),
            domain: Domain::SelfSet,
            app: (0, 0),
        }
    }

    /// `mpi://app/{app}`: the application's root pset.
    pub fn app_root(app: &str) -> Result<PsetName, NameError> {
        PsetName::parse(&format!("mpi://app/{app}"))
    }

    /// `mpi://rte/{app}/rc/{n}`: the name of the `n`-th delta pset of `app`.
    pub fn delta(app: &str, n: u64) -> Result<PsetName, NameError> {
        PsetName::parse(&format!("mpi://rte/{app}/{DELTA_SUBDOMAIN}/{n}"))
    }

    /// This name with `/{segment}` appended.
    pub fn child(&self, segment: &str) -> Result<PsetName, NameError> {
        PsetName::parse(&format!("{}/{segment}", self.text))
    }

    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The domain.
    pub fn domain(&self) -> Domain {
        self.domain
    }

    /// The application the name belongs to (`None` for WORLD and SELF).
    pub fn app(&self) -> Option<&str> {
        match self.domain {
            Domain::App | Domain::Rte => Some(&self.text[self.app.0 as usize..self.app.1 as usize]),
            _ => None,
        }
    }

    /// The path segments below the app name.
    pub fn path(&self) -> impl Iterator<Item = &str> {
        let rest = match self.domain {
            Domain::App | Domain::Rte => &self.text[self.app.1 as usize..],
            _ => "",
        };
        rest.split('/').filter(|s| !s.is_empty())
    }

    /// Whether this is `mpi://app/{app}` itself.
    pub fn is_app_root(&self) -> bool {
        self.domain == Domain::App && self.path().next().is_none()
    }

    /// Whether this name is in the application domain of `app` (`mpi://app/{app}/…`).
    pub fn in_app_domain(&self, app: &str) -> bool {
        self.domain == Domain::App && self.app() == Some(app)
    }

    /// Whether this name is in the delta sub-domain `mpi://rte/{app}/rc/…` (`PSET-4`).
    pub fn is_delta(&self) -> bool {
        self.domain == Domain::Rte && self.path().next() == Some(DELTA_SUBDOMAIN)
    }
}

impl FromStr for PsetName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PsetName::parse(s)
    }
}

impl fmt::Display for PsetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for PsetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// PSET-2: scheme and domain words fold to their canonical case; names do not.
    #[test]
    fn canonical_forms() {
        let cases = [
            ("mpi://WORLD", "mpi://WORLD"),
            ("MPI://world", "mpi://WORLD"),
            ("mpi://self", "mpi://SELF"),
            ("mpi://APP/app1/mul", "mpi://app/app1/mul"),
            ("mpi://Rte/App1/rc/3", "mpi://rte/App1/rc/3"),
        ];
        for (input, canon) in cases {
            assert_eq!(PsetName::parse(input).unwrap().as_str(), canon, "{input}");
        }
    }

    #[test]
    fn parts() {
        let n = PsetName::parse("mpi://rte/app1/rc/3").unwrap();
        assert_eq!(n.domain(), Domain::Rte);
        assert_eq!(n.app(), Some("app1"));
        assert_eq!(n.path().collect::<Vec<_>>(), ["rc", "3"]);
        assert!(n.is_delta());
        let root = PsetName::app_root("app1").unwrap();
        assert!(root.is_app_root());
        assert!(root.in_app_domain("app1"));
        assert!(!root.in_app_domain("App1"));
        assert_eq!(root.child("mul").unwrap().as_str(), "mpi://app/app1/mul");
        assert_eq!(PsetName::world().app(), None);
    }

    /// PSET-1: the grammar, with the offending byte of each violation.
    #[test]
    fn bad_names_name_the_bad_place() {
        use NameError::*;
        let long_seg = format!("mpi://app/{}", "a".repeat(65));
        let long_name = format!("mpi://app/a/{}", ["b"; 130].join("/"));
        let cases: [(&str, NameError); 13] = [
            ("", MissingScheme),
            ("mpi:/WORLD", MissingScheme),
            ("mpi://WORLDS", UnknownDomain { at: 6 }),
            ("mpi://job/x", UnknownDomain { at: 6 }),
            ("mpi://app", MissingApp { at: 9 }),
            ("mpi://app/", MissingApp { at: 10 }),
            ("mpi://apps/x", UnknownDomain { at: 6 }),
            ("mpi://app/a//b", EmptySegment { at: 12 }),
            ("mpi://app/a/", EmptySegment { at: 12 }),
            ("mpi://app/a b", BadChar { ch: ' ', at: 11 }),
            ("mpi://app/a/x:accept", BadChar { ch: ':', at: 13 }),
            (
                "mpi://app/a/..",
                DotSegment {
                    segment: "..".into(),
                    at: 12,
                },
            ),
            ("mpi://app/é", BadChar { ch: 'é', at: 10 }),
        ];
        for (input, err) in cases {
            assert_eq!(PsetName::parse(input), Err(err), "{input:?}");
        }
        assert_eq!(
            PsetName::parse(&long_seg),
            Err(SegmentTooLong { at: 10, len: 65 })
        );
        assert!(matches!(PsetName::parse(&long_name), Err(TooLong { .. })));
    }
}
