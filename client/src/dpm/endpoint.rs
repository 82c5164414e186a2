//! Compact binary forms of this crate's addresses inside the kernel's 64-byte [`Addr`]
//! (`MAX_ADDR`): a process' [`PeerAddrs`] (one entry of a handshake's endpoint table)
//! and a bootstrap socket address (a port's datagram / stream address, a datagram's
//! sender).
//!
//! Endpoint layout (big-endian):
//!
//! ```text
//! flags u8            bit 0 shm, bit 1 tcp, bit 2 compact segment name, bit 3 tcp is IPv6
//! shm:   host_id u64 | pid u32 | compact ? random u64 : (len u8 | name bytes, UTF-8)
//! tcp:   IPv4: ip 4 | port u16        IPv6: ip 16 | port u16 | scope_id u32
//! ```
//!
//! The shared-memory device names its inbox `dynres-shm-{pid}-{16 hex digits}`; such a
//! name (with the address' own pid) is stored as the 8 random bytes only, so shared
//! memory plus an IPv6 TCP address takes 43 bytes. Any other name is stored in full and
//! must fit the 64 bytes: encoding fails with [`EndpointError::TooLong`] rather than
//! truncate it. Not carried: the verbs address (this crate's [`crate::comm::Transport`]
//! opens no verbs device) and the IPv6 flow label (always 0 on a bound listener).
//!
//! Decoding is of peer input: nom parsers over the kernel's primitives, typed errors,
//! never a panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use dynres_core::spawn::Addr;
use dynres_core::spawn::msg::MAX_ADDR;
use dynres_core::wire::prim::{u8 as p_u8, u16 as p_u16, u32 as p_u32, u64 as p_u64};
use dynres_core::wire::{PResult, WireError, parse_all};
use dynres_transports::shm::segment::SEGMENT_PREFIX;
use dynres_transports::{PeerAddrs, ShmAddr};
use nom::bytes::complete::take;

use crate::error::EndpointError;

const SHM: u8 = 1;
const TCP: u8 = 2;
const COMPACT: u8 = 4;
const V6: u8 = 8;
const KNOWN: u8 = SHM | TCP | COMPACT | V6;

/// The random part of a standard segment name, if `s` is one for `pid`.
fn compact_segment(s: &ShmAddr) -> Option<u64> {
    let rest = s.segment.strip_prefix(SEGMENT_PREFIX)?;
    let (pid, random) = rest.split_once('-')?;
    if pid != s.pid.to_string() || random.len() != 16 {
        return None;
    }
    let r = u64::from_str_radix(random, 16).ok()?;
    // Only a name that prints back identically is compact (no upper-case hex, no sign).
    (format!("{r:016x}") == random).then_some(r)
}

fn put_sockaddr(out: &mut Vec<u8>, a: &SocketAddr) {
    match a {
        SocketAddr::V4(v4) => {
            out.extend_from_slice(&v4.ip().octets());
            out.extend_from_slice(&v4.port().to_be_bytes());
        }
        SocketAddr::V6(v6) => {
            out.extend_from_slice(&v6.ip().octets());
            out.extend_from_slice(&v6.port().to_be_bytes());
            out.extend_from_slice(&v6.scope_id().to_be_bytes());
        }
    }
}

fn sockaddr(v6: bool) -> impl Fn(&[u8]) -> PResult<'_, SocketAddr> {
    move |i| {
        if v6 {
            let (i, ip) = take(16usize)(i)?;
            let (i, port) = p_u16(i)?;
            let (i, scope) = p_u32(i)?;
            let mut o = [0u8; 16];
            o.copy_from_slice(ip);
            Ok((
                i,
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(o), port, 0, scope)),
            ))
        } else {
            let (i, ip) = take(4usize)(i)?;
            let (i, port) = p_u16(i)?;
            let ip = Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]);
            Ok((i, SocketAddr::new(IpAddr::V4(ip), port)))
        }
    }
}

/// Encodes a process' addresses as one endpoint-table entry (at most 64 bytes).
pub fn encode_endpoint(a: &PeerAddrs) -> Result<Addr, EndpointError> {
    if a.shm.is_none() && a.tcp.is_none() {
        return Err(EndpointError::NoAddress);
    }
    let mut flags = 0;
    let mut out = vec![0u8];
    if let Some(s) = &a.shm {
        flags |= SHM;
        out.extend_from_slice(&s.host_id.to_be_bytes());
        out.extend_from_slice(&s.pid.to_be_bytes());
        match compact_segment(s) {
            Some(r) => {
                flags |= COMPACT;
                out.extend_from_slice(&r.to_be_bytes());
            }
            None => {
                let n = u8::try_from(s.segment.len())
                    .map_err(|_| EndpointError::SegmentName(s.segment.len()))?;
                out.push(n);
                out.extend_from_slice(s.segment.as_bytes());
            }
        }
    }
    if let Some(t) = &a.tcp {
        flags |= TCP;
        if t.is_ipv6() {
            flags |= V6;
        }
        put_sockaddr(&mut out, t);
    }
    out[0] = flags;
    if out.len() > MAX_ADDR {
        return Err(EndpointError::TooLong {
            len: out.len(),
            max: MAX_ADDR,
        });
    }
    Ok(Addr(out))
}

fn endpoint(i: &[u8]) -> PResult<'_, PeerAddrs> {
    let (mut i, flags) = p_u8(i)?;
    let invalid = |what| {
        nom::Err::Failure(WireError::InvalidValue {
            what,
            value: u64::from(flags),
        })
    };
    if flags & !KNOWN != 0 {
        return Err(invalid("endpoint flags"));
    }
    if flags & (SHM | TCP) == 0 {
        return Err(invalid("endpoint without an address"));
    }
    if flags & SHM == 0 && flags & COMPACT != 0 || flags & TCP == 0 && flags & V6 != 0 {
        return Err(invalid("endpoint flags without their address"));
    }
    let mut addrs = PeerAddrs::default();
    if flags & SHM != 0 {
        let (r, host_id) = p_u64(i)?;
        let (r, pid) = p_u32(r)?;
        let (r, segment) = if flags & COMPACT != 0 {
            let (r, random) = p_u64(r)?;
            (r, format!("{SEGMENT_PREFIX}{pid}-{random:016x}"))
        } else {
            let (r, n) = p_u8(r)?;
            let (r, raw) = take(n)(r)?;
            let s = std::str::from_utf8(raw).map_err(|_| nom::Err::Failure(WireError::NotUtf8))?;
            if s.is_empty() || s.contains('\0') {
                return Err(nom::Err::Failure(WireError::InvalidValue {
                    what: "segment name",
                    value: raw.len() as u64,
                }));
            }
            (r, s.to_string())
        };
        addrs.shm = Some(ShmAddr {
            host_id,
            pid,
            segment,
        });
        i = r;
    }
    if flags & TCP != 0 {
        let (r, t) = sockaddr(flags & V6 != 0)(i)?;
        addrs.tcp = Some(t);
        i = r;
    }
    Ok((i, addrs))
}

/// Decodes an endpoint-table entry (peer input: typed errors, never a panic).
pub fn decode_endpoint(a: &Addr) -> Result<PeerAddrs, EndpointError> {
    Ok(parse_all(&a.0, endpoint)?)
}

/// Encodes a bootstrap socket address: `4 | ip 4 | port u16` or
/// `6 | ip 16 | port u16 | scope_id u32` (7 or 23 bytes).
pub fn encode_sockaddr(a: &SocketAddr) -> Addr {
    let mut out = vec![if a.is_ipv4() { 4 } else { 6 }];
    put_sockaddr(&mut out, a);
    Addr(out)
}

/// Decodes a bootstrap socket address (from a port name: peer input).
pub fn decode_sockaddr(a: &Addr) -> Result<SocketAddr, EndpointError> {
    Ok(parse_all(&a.0, |i| {
        let (i, family) = p_u8(i)?;
        match family {
            4 => sockaddr(false)(i),
            6 => sockaddr(true)(i),
            v => Err(nom::Err::Failure(WireError::InvalidValue {
                what: "address family",
                value: u64::from(v),
            })),
        }
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shm(pid: u32, segment: &str) -> Option<ShmAddr> {
        Some(ShmAddr {
            host_id: 0xfeed_f00d_dead_beef,
            pid,
            segment: segment.into(),
        })
    }

    #[test]
    fn round_trips_at_most_64_bytes() {
        let v6: SocketAddr = "[fe80::1234:5678:9abc:def0%7]:65535".parse().unwrap();
        let v4: SocketAddr = "10.77.0.2:4100".parse().unwrap();
        // The longest name the shm device makes: a 10-digit pid.
        let standard = format!("{SEGMENT_PREFIX}4294967295-0123456789abcdef");
        for (shm, tcp) in [
            (shm(u32::MAX, &standard), Some(v6)),
            (shm(u32::MAX, &standard), Some(v4)),
            (shm(u32::MAX, &standard), None),
            (None, Some(v6)),
            (shm(7, "/custom"), Some(v4)),
        ] {
            let a = PeerAddrs {
                shm,
                tcp,
                ..PeerAddrs::default()
            };
            let e = encode_endpoint(&a).unwrap();
            assert!(e.0.len() <= MAX_ADDR, "{} bytes", e.0.len());
            assert_eq!(decode_endpoint(&e).unwrap(), a);
        }
        let full = encode_endpoint(&PeerAddrs {
            shm: shm(u32::MAX, &standard),
            tcp: Some(v6),
            ..PeerAddrs::default()
        })
        .unwrap();
        assert_eq!(full.0.len(), 43);
    }

    #[test]
    fn names_that_are_not_standard_stay_exact_or_fail() {
        // A name with another pid, or upper-case hex, is not compacted: it comes back
        // exactly as it was.
        for name in [
            format!("{SEGMENT_PREFIX}8-0123456789abcdef"),
            format!("{SEGMENT_PREFIX}7-0123456789ABCDEF"),
        ] {
            let a = PeerAddrs {
                shm: shm(7, &name),
                ..PeerAddrs::default()
            };
            assert_eq!(decode_endpoint(&encode_endpoint(&a).unwrap()).unwrap(), a);
        }
        let long = PeerAddrs {
            shm: shm(7, &"x".repeat(40)),
            tcp: Some("[::1]:9".parse().unwrap()),
            ..PeerAddrs::default()
        };
        assert_eq!(
            encode_endpoint(&long),
            Err(EndpointError::TooLong { len: 76, max: 64 })
        );
        let huge = PeerAddrs {
            shm: shm(7, &"x".repeat(300)),
            ..PeerAddrs::default()
        };
        assert_eq!(encode_endpoint(&huge), Err(EndpointError::SegmentName(300)));
        assert_eq!(
            encode_endpoint(&PeerAddrs::default()),
            Err(EndpointError::NoAddress)
        );
    }

    #[test]
    fn garbage_is_a_typed_error() {
        let cases: [&[u8]; 7] = [
            &[],
            &[0],
            &[0x10, 1, 2],
            &[COMPACT | TCP, 127, 0, 0, 1, 0, 1],
            &[TCP, 127, 0, 0, 1, 0],
            &[TCP, 127, 0, 0, 1, 0, 1, 9],
            &[SHM, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 2, 0xff, 0xfe],
        ];
        for c in cases {
            assert!(decode_endpoint(&Addr(c.to_vec())).is_err(), "{c:?}");
        }
        assert!(decode_sockaddr(&Addr(vec![5, 1, 2, 3, 4, 0, 1])).is_err());
        assert!(decode_sockaddr(&Addr(vec![4, 1, 2, 3, 4, 0])).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode_endpoint(&Addr(b.clone()));
            let _ = decode_sockaddr(&Addr(b));
        }

        #[test]
        fn socket_addresses_round_trip(ip4: [u8; 4], ip6: [u8; 16], port: u16, scope: u32) {
            let a = SocketAddr::new(IpAddr::from(ip4), port);
            prop_assert_eq!(decode_sockaddr(&encode_sockaddr(&a)).unwrap(), a);
            let b = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip6), port, 0, scope));
            prop_assert_eq!(decode_sockaddr(&encode_sockaddr(&b)).unwrap(), b);
        }

        #[test]
        fn endpoints_round_trip(host: u64, pid: u32, random: u64, ip6: [u8; 16], port: u16,
                                v6: bool) {
            let tcp = if v6 {
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip6), port, 0, 0))
            } else {
                SocketAddr::new(IpAddr::from([ip6[0], ip6[1], ip6[2], ip6[3]]), port)
            };
            let a = PeerAddrs {
                shm: Some(ShmAddr { host_id: host, pid,
                    segment: format!("{SEGMENT_PREFIX}{pid}-{random:016x}") }),
                tcp: Some(tcp),
                ..PeerAddrs::default()
            };
            prop_assert_eq!(decode_endpoint(&encode_endpoint(&a).unwrap()).unwrap(), a);
        }
    }
}
