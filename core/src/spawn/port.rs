//! Port names (`MPI_Open_port`) and the per-process registry of open ports.
//!
//! A port names where a root listens: a datagram address (the UD queue pair used for
//! accept/connect), a stream address (where a reliable connection can be opened, the
//! seed's second queue pair) and the bootstrap the owner wants. Grammar (SPAWN-1):
//!
//! ```text
//! port  = "dynres:1:" boot ":" hex ":" hex ":" tag
//! boot  = "dgram" | "stream" | "hybrid-" decimal
//! hex   = 2*128 lowercase or uppercase hex digits (an even number)
//! tag   = decimal u32
//! ```

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
use super::msg::{Addr, MAX_ADDR};

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
}

fn hex_addr(input: &str) -> nom::IResult<&str, Addr> {
    let (rest, digits) = hex_digit1(input)?;
    if digits.len() % 2 != 0 || digits.len() / 2 > MAX_ADDR {
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
    Ok((rest, Addr(bytes)))
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

impl PortName {
    /// Parses a port name (SPAWN-1). Malformed names are [`SpawnError::BadPort`].
    pub fn parse(name: &str) -> Result<PortName, SpawnError> {
        let bad = |reason: &'static str| SpawnError::BadPort {
            name: name.chars().take(64).collect(),
            reason,
        };
        if name.len() > MAX_PORT_NAME {
            return Err(bad("too long"));
        }
        let mut parser = all_consuming((
            tag("dynres:1:"),
            boot,
            tag(":"),
            hex_addr,
            tag(":"),
            hex_addr,
            tag(":"),
            dec_u32,
        ));
        match parser.parse(name) {
            Ok((_, (_, boot, _, dgram, _, stream, _, tag))) => Ok(PortName {
                boot,
                dgram,
                stream,
                tag,
            }),
            Err(_) => Err(bad("does not match dynres:1:<boot>:<hex>:<hex>:<tag>")),
        }
    }
}

impl fmt::Display for PortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let boot = match self.boot {
            Bootstrap::Datagram => String::from("dgram"),
            Bootstrap::Stream => String::from("stream"),
            Bootstrap::Hybrid { threshold } => format!("hybrid-{threshold}"),
        };
        write!(f, "dynres:1:{boot}:")?;
        for b in &self.dgram.0 {
            write!(f, "{b:02x}")?;
        }
        f.write_str(":")?;
        for b in &self.stream.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ":{}", self.tag)
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

    /// Opens a port on the given addresses with the given bootstrap.
    pub fn open_port(
        &mut self,
        dgram: Addr,
        stream: Addr,
        boot: Bootstrap,
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
            _ => Err(SpawnError::PortNotOpen(format!("{port}"))),
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

    #[test]
    fn parses_and_prints() {
        let p = PortName::parse("dynres:1:hybrid-16:0aFF:01:7").unwrap();
        assert_eq!(p.boot, Bootstrap::Hybrid { threshold: 16 });
        assert_eq!(p.dgram, Addr(vec![0x0a, 0xff]));
        assert_eq!(p.to_string(), "dynres:1:hybrid-16:0aff:01:7");
    }

    #[test]
    fn malformed_port_names_are_rejected() {
        for bad in [
            "",
            "dynres:1:dgram:0a:0b",
            "dynres:2:dgram:0a:0b:1",
            "dynres:1:udp:0a:0b:1",
            "dynres:1:dgram:0:0b:1",
            "dynres:1:dgram:zz:0b:1",
            "dynres:1:dgram:0a:0b:1:",
            "dynres:1:dgram:0a:0b:99999999999",
            "dynres:1:hybrid-:0a:0b:1",
            "dynres:1:dgram::0b:1",
        ] {
            assert!(
                matches!(PortName::parse(bad), Err(SpawnError::BadPort { .. })),
                "{bad:?} was accepted"
            );
        }
        let long = alloc::format!("dynres:1:dgram:{}:0b:1", "ab".repeat(65));
        assert!(PortName::parse(&long).is_err());
    }

    /// SPAWN-1: a port name may be up to 512 characters long, no longer. The longest
    /// canonical name is far shorter, so the limit is reached with a zero-padded tag
    /// (still a decimal u32; the name prints back canonical).
    #[test]
    fn port_names_of_up_to_512_characters_are_accepted() {
        let prefix = "dynres:1:dgram:d0:50:";
        let name = |len: usize| alloc::format!("{prefix}{:0>w$}", 7, w = len - prefix.len());
        assert_eq!(name(MAX_PORT_NAME).len(), 512);
        let p = PortName::parse(&name(MAX_PORT_NAME)).unwrap();
        assert_eq!(p.tag, 7);
        assert_eq!(p.to_string(), "dynres:1:dgram:d0:50:7");
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
            .open_port(Addr(vec![1]), Addr(vec![2]), Bootstrap::Stream)
            .unwrap();
        assert!(ports.is_open(&a));
        ports.close_port(&a).unwrap();
        assert!(!ports.is_open(&a));
        assert!(matches!(
            ports.close_port(&a),
            Err(SpawnError::PortNotOpen(_))
        ));
        let b = ports
            .open_port(Addr(vec![1]), Addr(vec![2]), Bootstrap::Stream)
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
                      tag: u32, which in 0u8..3, thr: u32) {
            let boot = match which { 0 => Bootstrap::Datagram, 1 => Bootstrap::Stream,
                                     _ => Bootstrap::Hybrid { threshold: thr } };
            let p = PortName { boot, dgram: Addr(dg), stream: Addr(st), tag };
            prop_assert_eq!(PortName::parse(&p.to_string()), Ok(p));
        }

        #[test]
        fn never_panics(s in ".{0,80}") {
            let _ = PortName::parse(&s);
        }
    }
}
