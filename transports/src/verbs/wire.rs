//! Encoding of the verbs bootstrap datagrams (CONNECT / ACCEPT / user datagrams).
//! Peer bytes are untrusted: decoding returns `None` on anything malformed.

use crate::addr::VerbsAddr;

/// First byte of every datagram.
pub(crate) const KIND_USER: u8 = 0;
pub(crate) const KIND_CONNECT: u8 = 1;
pub(crate) const KIND_ACCEPT: u8 = 2;

/// An RC endpoint as exchanged (mirrors `ibverbs::QueuePairEndpoint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RcEndpoint {
    pub num: u32,
    pub lid: u16,
    pub gid: Option<[u8; 16]>,
}

/// CONNECT: the requester's UD address (to answer to), a request id, its RC endpoint.
/// ACCEPT: the request id and the responder's RC endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    Connect {
        from: VerbsAddr,
        request: u64,
        rc: RcEndpoint,
    },
    Accept {
        request: u64,
        rc: RcEndpoint,
    },
}

fn put_gid(out: &mut Vec<u8>, gid: Option<[u8; 16]>) {
    match gid {
        Some(g) => {
            out.push(1);
            out.extend_from_slice(&g);
        }
        None => {
            out.push(0);
            out.extend_from_slice(&[0; 16]);
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (h, t) = self.0.split_at_checked(N)?;
        self.0 = t;
        h.try_into().ok()
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn gid(&mut self) -> Option<Option<[u8; 16]>> {
        let has = self.u8()?;
        let g = self.take::<16>()?;
        match has {
            0 => Some(None),
            1 => Some(Some(g)),
            _ => None,
        }
    }
    fn rc(&mut self) -> Option<RcEndpoint> {
        Some(RcEndpoint {
            num: self.u32()?,
            lid: self.u16()?,
            gid: self.gid()?,
        })
    }
}

impl Control {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        let rc = match self {
            Control::Connect { from, request, rc } => {
                out.push(KIND_CONNECT);
                out.extend_from_slice(&from.lid.to_le_bytes());
                out.extend_from_slice(&from.qpn.to_le_bytes());
                out.extend_from_slice(&from.qkey.to_le_bytes());
                put_gid(&mut out, from.gid);
                out.extend_from_slice(&request.to_le_bytes());
                rc
            }
            Control::Accept { request, rc } => {
                out.push(KIND_ACCEPT);
                out.extend_from_slice(&request.to_le_bytes());
                rc
            }
        };
        out.extend_from_slice(&rc.num.to_le_bytes());
        out.extend_from_slice(&rc.lid.to_le_bytes());
        put_gid(&mut out, rc.gid);
        out
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        let mut r = Reader(b);
        let c = match r.u8()? {
            KIND_CONNECT => Control::Connect {
                from: VerbsAddr {
                    lid: r.u16()?,
                    qpn: r.u32()?,
                    qkey: r.u32()?,
                    gid: r.gid()?,
                },
                request: r.u64()?,
                rc: r.rc()?,
            },
            KIND_ACCEPT => Control::Accept {
                request: r.u64()?,
                rc: r.rc()?,
            },
            _ => return None,
        };
        r.0.is_empty().then_some(c)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn control_round_trip_and_garbage() {
        let rc = RcEndpoint {
            num: 77,
            lid: 5,
            gid: Some([9; 16]),
        };
        let c = Control::Connect {
            from: VerbsAddr {
                lid: 1,
                qpn: 2,
                qkey: 3,
                gid: None,
            },
            request: 42,
            rc,
        };
        assert_eq!(Control::decode(&c.encode()), Some(c));
        let a = Control::Accept { request: 42, rc };
        let bytes = a.encode();
        assert_eq!(Control::decode(&bytes), Some(a));
        assert_eq!(
            Control::decode(&bytes[..bytes.len() - 1]),
            None,
            "truncated"
        );
        assert_eq!(Control::decode(&[9, 1, 2]), None, "unknown kind");
        let mut bad_gid = bytes.clone();
        bad_gid[bytes.len() - 17] = 7;
        assert_eq!(Control::decode(&bad_gid), None, "gid flag must be 0 or 1");
    }
}
