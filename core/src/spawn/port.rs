//! Port names (`MPI_Open_port`) and the per-process registry of open ports.
//!
//! A port names where a root listens: a datagram address (the UD queue pair used for
//! accept/connect), a stream address (where a reliable connection can be opened, the
//! seed's second queue pair), the bootstrap the owner wants, and the key every message
//! of a connection to it is authenticated with (SPAWN-22): MPI treats port names as
//! opaque, so the name is the capability to connect. Grammar (SPAWN-1):
//!
//! ```text
//! port    = address ":" key
//! address = "dynres:2:" boot ":" hex ":" hex ":" tag
//! boot    = "dgram" | "stream" | "hybrid-" decimal
//! hex     = 2*128 lowercase or uppercase hex digits (an even number)
//! tag     = decimal u32
//! key     = 64 hex digits (256 bits)
//! ```
//!
//! Version 1 (`dynres:1:`, no key) is refused: a connection without a key cannot be
//! authenticated. The address alone ([`PortName::address`]) is what logs and errors show,
//! and what a spawn's children find in `DYNRES_PARENT_PORT` (the spawn's own key travels
//! beside it, [`super::SpawnEnv`]).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use nom::Parser;
use nom::branch::alt;
use nom::bytes::complete::tag;
use nom::character::complete::{hex_digit1, u32 as dec_u32};
use nom::combinator::{all_consuming, map, value};
use nom::sequence::preceded;

use super::SpawnError;
use super::addr::{Addr, MAX_ADDR};
use super::auth::BootKey;

/// Longest port name accepted, in bytes (MPI's `MPI_MAX_PORT_NAME` is of this order).
pub const MAX_PORT_NAME: usize = 512;

/// Which bootstrap the two roots use (`spec/spawn.md`, "Bootstraps").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bootstrap {
    /// Everything over the unreliable datagram channel with the kernel's own reliability.
    Datagram,
    /// Everything over one reliable, ordered stream.
    Stream,
    /// Hello over datagrams; endpoint tables over datagrams if both groups have at most
    /// `threshold` members, over a stream otherwise (SPAWN-9).
    Hybrid {
        /// Largest group size for which endpoint tables stay on datagrams.
        threshold: u32,
    },
}

/// The transport one message travels on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    /// The datagram channel (segmented, checksummed, acknowledged).
    Datagram,
    /// The reliable stream.
    Stream,
}

impl Bootstrap {
    /// The default hybrid threshold: tables of up to 32 ranks stay on datagrams.
    pub const DEFAULT_HYBRID: Bootstrap = Bootstrap::Hybrid { threshold: 32 };

    /// Transport of the Hello / HelloAck exchange.
    pub fn hello_transport(self) -> Transport {
        match self {
            Bootstrap::Stream => Transport::Stream,
            Bootstrap::Datagram | Bootstrap::Hybrid { .. } => Transport::Datagram,
        }
    }

    /// Transport of the endpoint tables, given both group sizes (the hybrid rule, SPAWN-9).
    pub fn endpoint_transport(self, a_size: u32, b_size: u32) -> Transport {
        match self {
            Bootstrap::Datagram => Transport::Datagram,
            Bootstrap::Stream => Transport::Stream,
            Bootstrap::Hybrid { threshold } => {
                if a_size.max(b_size) <= threshold {
                    Transport::Datagram
                } else {
                    Transport::Stream
                }
            }
        }
    }
}

/// A parsed port name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortName {
    /// The bootstrap the port's owner runs.
    pub boot: Bootstrap,
    /// Where the owner receives bootstrap datagrams.
    pub dgram: Addr,
    /// Where the owner accepts a bootstrap stream.
    pub stream: Addr,
    /// Distinguishes ports of one process.
    pub tag: u32,
    /// The key of every connection to this port (SPAWN-22).
    pub key: BootKey,
}

/// An even number of hex digits, at most `max` bytes' worth, as bytes.
fn hex_bytes(input: &str, max: usize) -> nom::IResult<&str, Vec<u8>> {
    let (rest, digits) = hex_digit1(input)?;
    if digits.len() % 2 != 0 || digits.len() / 2 > max {
        return Err(nom::Err::Failure(nom::error::Error::new(
            input,
            nom::error::ErrorKind::LengthValue,
        )));
    }
    let bytes = digits
        .as_bytes()
        .chunks(2)
        .map(|p| (nibble(p[0]) << 4) | nibble(p[1]))
        .collect();
    Ok((rest, bytes))
}

fn hex_addr(input: &str) -> nom::IResult<&str, Addr> {
    map(|i| hex_bytes(i, MAX_ADDR), Addr).parse(input)
}

/// Exactly 64 hex digits: a [`BootKey`].
fn hex_key(input: &str) -> nom::IResult<&str, BootKey> {
    let (rest, bytes) = hex_bytes(input, BootKey::LEN)?;
    match <[u8; BootKey::LEN]>::try_from(bytes) {
        Ok(k) => Ok((rest, BootKey(k))),
        Err(_) => Err(nom::Err::Failure(nom::error::Error::new(
            input,
            nom::error::ErrorKind::LengthValue,
        ))),
    }
}

impl BootKey {
    /// Parses 64 hex digits, as the port grammar's key field (SPAWN-1); `None` for
    /// anything else.
    pub fn from_hex(text: &str) -> Option<BootKey> {
        all_consuming(hex_key).parse(text).ok().map(|(_, k)| k)
    }
}

/// The address part of a port name (everything before the key), see the module doc.
type AddressParts = (Bootstrap, Addr, Addr, u32);

fn address(input: &str) -> nom::IResult<&str, AddressParts> {
    let (rest, (_, boot, _, dgram, _, stream, _, tag)) = (
        tag("dynres:2:"),
        boot,
        tag(":"),
        hex_addr,
        tag(":"),
        hex_addr,
        tag(":"),
        dec_u32,
    )
        .parse(input)?;
    Ok((rest, (boot, dgram, stream, tag)))
}

fn nibble(c: u8) -> u8 {
    // `hex_digit1` only lets hex digits through.
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c.wrapping_sub(b'A').wrapping_add(10),
    }
}

fn boot(input: &str) -> nom::IResult<&str, Bootstrap> {
    alt((
        value(Bootstrap::Datagram, tag("dgram")),
        value(Bootstrap::Stream, tag("stream")),
        map(preceded(tag("hybrid-"), dec_u32), |threshold| {
            Bootstrap::Hybrid { threshold }
        }),
    ))
    .parse(input)
}

/// The part of a (possibly malformed) port name that an error may show: at most 64
/// characters of its first six `:`-separated fields, never the key field (SPAWN-22).
fn shown(name: &str) -> String {
    let fields = name.split(':').take(6).collect::<Vec<_>>().join(":");
    fields.chars().take(64).collect()
}

impl PortName {
    /// Parses a port name (SPAWN-1). Malformed names are [`SpawnError::BadPort`].
    pub fn parse(name: &str) -> Result<PortName, SpawnError> {
        let bad = |reason: &'static str| SpawnError::BadPort {
            name: shown(name),
            reason,
        };
        if name.len() > MAX_PORT_NAME {
            return Err(bad("too long"));
        }
        let mut parser = all_consuming((address, preceded(tag(":"), hex_key)));
        match parser.parse(name) {
            Ok((_, ((boot, dgram, stream, tag), key))) => Ok(PortName {
                boot,
                dgram,
                stream,
                tag,
                key,
            }),
            Err(_) => Err(bad(
                "does not match dynres:2:<boot>:<hex>:<hex>:<tag>:<key>",
            )),
        }
    }

    /// Parses a port's address (a port name without its key field, as
    /// [`PortName::address`] prints it) and joins `key` to it: a spawn's children get
    /// the two in separate variables (SPAWN-3, SPAWN-22).
    pub fn parse_address(text: &str, key: BootKey) -> Result<PortName, SpawnError> {
        let bad = |reason: &'static str| SpawnError::BadPort {
            name: shown(text),
            reason,
        };
        if text.len() > MAX_PORT_NAME {
            return Err(bad("too long"));
        }
        match all_consuming(address).parse(text) {
            Ok((_, (boot, dgram, stream, tag))) => Ok(PortName {
                boot,
                dgram,
                stream,
                tag,
                key,
            }),
            Err(_) => Err(bad("does not match dynres:2:<boot>:<hex>:<hex>:<tag>")),
        }
    }

    /// The port's address without its key: what logs and errors show (the key is the
    /// capability to connect, SPAWN-22).
    pub fn address(&self) -> PortAddress<'_> {
        PortAddress(self)
    }
}

/// A port name without its key field (see [`PortName::address`]).
#[derive(Clone, Copy, Debug)]
pub struct PortAddress<'a>(&'a PortName);

impl fmt::Display for PortAddress<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.0;
        let boot = match p.boot {
            Bootstrap::Datagram => String::from("dgram"),
            Bootstrap::Stream => String::from("stream"),
            Bootstrap::Hybrid { threshold } => format!("hybrid-{threshold}"),
        };
        write!(f, "dynres:2:{boot}:")?;
        for b in &p.dgram.0 {
            write!(f, "{b:02x}")?;
        }
        f.write_str(":")?;
        for b in &p.stream.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ":{}", p.tag)
    }
}

/// The whole port name, key included: the text `MPI_Open_port` returns. Log
/// [`PortName::address`] instead.
impl fmt::Display for PortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.address(), self.key.to_hex())
    }
}

/// The ports one process has open (`MPI_Open_port` / `MPI_Close_port`).
///
/// Tags come from a counter that never goes back, so a closed port's name is never
/// handed out again in this process (SPAWN-2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ports {
    next_tag: u32,
    open: BTreeMap<u32, PortName>,
}

impl Ports {
    /// No open ports.
    pub fn new() -> Self {
        Ports::default()
    }

    /// Opens a port on the given addresses with the given bootstrap and key (drawn at
    /// random by the caller for every port: the kernel reads no randomness, SPAWN-22).
    pub fn open_port(
        &mut self,
        dgram: Addr,
        stream: Addr,
        boot: Bootstrap,
        key: BootKey,
    ) -> Result<PortName, SpawnError> {
        if dgram.0.is_empty()
            || dgram.0.len() > MAX_ADDR
            || stream.0.is_empty()
            || stream.0.len() > MAX_ADDR
        {
            return Err(SpawnError::Config("port addresses must be 1..=64 bytes"));
        }
        let tag = self.next_tag;
        self.next_tag = self
            .next_tag
            .checked_add(1)
            .ok_or(SpawnError::Config("port tags exhausted"))?;
        let port = PortName {
            boot,
            dgram,
            stream,
            tag,
            key,
        };
        self.open.insert(tag, port.clone());
        Ok(port)
    }

    /// Closes a port; closing a port that is not open is [`SpawnError::PortNotOpen`].
    pub fn close_port(&mut self, port: &PortName) -> Result<(), SpawnError> {
        match self.open.get(&port.tag) {
            Some(p) if p == port => {
                self.open.remove(&port.tag);
                Ok(())
            }
            // The address only: an error may be logged, the key must not (SPAWN-22).
            _ => Err(SpawnError::PortNotOpen(format!("{}", port.address()))),
        }
    }

    /// Whether `port` is open here.
    pub fn is_open(&self, port: &PortName) -> bool {
        self.open.get(&port.tag) == Some(port)
    }

    /// The open ports, by tag.
    pub fn open_ports(&self) -> Vec<&PortName> {
        self.open.values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;
    use proptest::prelude::*;

    /// A key's 64 hex digits, for names in tests.
    const KEY: &str = "00112233445566778899aabbccddeeff0123456789abcdef0123456789ABCDEF";

    #[test]
    fn parses_and_prints() {
        let p = PortName::parse(&alloc::format!("dynres:2:hybrid-16:0aFF:01:7:{KEY}")).unwrap();
        assert_eq!(p.boot, Bootstrap::Hybrid { threshold: 16 });
        assert_eq!(p.dgram, Addr(vec![0x0a, 0xff]));
        assert_eq!(p.key.0[..3], [0x00, 0x11, 0x22]);
        assert_eq!(p.key.0[31], 0xef);
        let canonical = alloc::format!("dynres:2:hybrid-16:0aff:01:7:{}", KEY.to_ascii_lowercase());
        assert_eq!(p.to_string(), canonical);
        // SPAWN-22: the address shows no key; joined to the key it is the port again.
        assert_eq!(p.address().to_string(), "dynres:2:hybrid-16:0aff:01:7");
        assert_eq!(
            PortName::parse_address(&p.address().to_string(), p.key),
            Ok(p.clone())
        );
        assert!(matches!(
            PortName::parse_address(&canonical, p.key),
            Err(SpawnError::BadPort { .. })
        ));
    }

    #[test]
    fn malformed_port_names_are_rejected() {
        for bad in [
            String::new(),
            "dynres:2:dgram:0a:0b".into(),
            // Version 1 names carry no key (SPAWN-22).
            "dynres:1:dgram:0a:0b:1".into(),
            alloc::format!("dynres:1:dgram:0a:0b:1:{KEY}"),
            "dynres:2:dgram:0a:0b:1".into(),
            alloc::format!("dynres:2:udp:0a:0b:1:{KEY}"),
            alloc::format!("dynres:2:dgram:0:0b:1:{KEY}"),
            alloc::format!("dynres:2:dgram:zz:0b:1:{KEY}"),
            alloc::format!("dynres:2:dgram:0a:0b:1:{KEY}:"),
            alloc::format!("dynres:2:dgram:0a:0b:99999999999:{KEY}"),
            alloc::format!("dynres:2:hybrid-:0a:0b:1:{KEY}"),
            alloc::format!("dynres:2:dgram::0b:1:{KEY}"),
            // A key of 62 or 66 digits, or an odd number.
            alloc::format!("dynres:2:dgram:0a:0b:1:{}", &KEY[2..]),
            alloc::format!("dynres:2:dgram:0a:0b:1:{KEY}00"),
            alloc::format!("dynres:2:dgram:0a:0b:1:{}", &KEY[1..]),
        ] {
            assert!(
                matches!(PortName::parse(&bad), Err(SpawnError::BadPort { .. })),
                "{bad:?} was accepted"
            );
        }
        let long = alloc::format!("dynres:2:dgram:{}:0b:1:{KEY}", "ab".repeat(65));
        assert!(PortName::parse(&long).is_err());
    }

    /// SPAWN-22: an error about a name never carries its key field, even for names too
    /// short for the 64-character cut to drop it.
    #[test]
    fn errors_never_show_the_key() {
        for name in [
            alloc::format!("dynres:2:dgram:0a:0b:1:{KEY}:x"),
            alloc::format!("dynres:2:udp:0a:0b:1:{KEY}"),
        ] {
            match PortName::parse(&name) {
                Err(SpawnError::BadPort { name: shown, .. }) => {
                    assert!(!shown.contains(&KEY[..8]), "{shown}")
                }
                other => panic!("{other:?}"),
            }
        }
        let mut ports = Ports::new();
        let p = PortName::parse(&alloc::format!("dynres:2:dgram:0a:0b:1:{KEY}")).unwrap();
        match ports.close_port(&p) {
            Err(e @ SpawnError::PortNotOpen(_)) => {
                assert!(!e.to_string().contains(&KEY[..8]), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert!(!alloc::format!("{p:?}").contains("0011"), "{p:?}");
    }

    /// SPAWN-1: a port name may be up to 512 characters long, no longer. The longest
    /// canonical name is far shorter, so the limit is reached with a zero-padded tag
    /// (still a decimal u32; the name prints back canonical).
    #[test]
    fn port_names_of_up_to_512_characters_are_accepted() {
        let prefix = "dynres:2:dgram:d0:50:";
        let key = KEY.to_ascii_lowercase();
        let name = |len: usize| {
            let w = len - prefix.len() - 1 - key.len();
            alloc::format!("{prefix}{:0>w$}:{key}", 7)
        };
        assert_eq!(name(MAX_PORT_NAME).len(), 512);
        let p = PortName::parse(&name(MAX_PORT_NAME)).unwrap();
        assert_eq!(p.tag, 7);
        assert_eq!(
            p.to_string(),
            alloc::format!("dynres:2:dgram:d0:50:7:{key}")
        );
        assert!(matches!(
            PortName::parse(&name(MAX_PORT_NAME + 1)),
            Err(SpawnError::BadPort {
                reason: "too long",
                ..
            })
        ));
    }

    #[test]
    fn registry_opens_closes_and_never_reuses_tags() {
        // SPAWN-2
        let mut ports = Ports::new();
        let a = ports
            .open_port(
                Addr(vec![1]),
                Addr(vec![2]),
                Bootstrap::Stream,
                BootKey([1; 32]),
            )
            .unwrap();
        assert!(ports.is_open(&a));
        ports.close_port(&a).unwrap();
        assert!(!ports.is_open(&a));
        assert!(matches!(
            ports.close_port(&a),
            Err(SpawnError::PortNotOpen(_))
        ));
        let b = ports
            .open_port(
                Addr(vec![1]),
                Addr(vec![2]),
                Bootstrap::Stream,
                BootKey([1; 32]),
            )
            .unwrap();
        assert_ne!(a.tag, b.tag);
    }

    #[test]
    fn hybrid_rule_by_group_size() {
        // SPAWN-9
        let h = Bootstrap::Hybrid { threshold: 8 };
        assert_eq!(h.hello_transport(), Transport::Datagram);
        assert_eq!(h.endpoint_transport(8, 1), Transport::Datagram);
        assert_eq!(h.endpoint_transport(1, 9), Transport::Stream);
        assert_eq!(h.endpoint_transport(9, 9), Transport::Stream);
        assert_eq!(Bootstrap::Stream.hello_transport(), Transport::Stream);
        assert_eq!(
            Bootstrap::Datagram.endpoint_transport(1000, 1000),
            Transport::Datagram
        );
    }

    proptest! {
        #[test]
        fn round_trip(dg in proptest::collection::vec(any::<u8>(), 1..64),
                      st in proptest::collection::vec(any::<u8>(), 1..64),
                      tag: u32, which in 0u8..3, thr: u32, key: [u8; 32]) {
            let boot = match which { 0 => Bootstrap::Datagram, 1 => Bootstrap::Stream,
                                     _ => Bootstrap::Hybrid { threshold: thr } };
            let p = PortName { boot, dgram: Addr(dg), stream: Addr(st), tag, key: BootKey(key) };
            prop_assert_eq!(PortName::parse(&p.to_string()), Ok(p));
        }

        #[test]
        fn never_panics(s in ".{0,80}") {
            let _ = PortName::parse(&s);
        }
    }
}
