//! A communicator made from a pset over `dynres-transports` (shared memory on one host):
//! point-to-point send/recv, barrier, broadcast and allreduce.
//!
//! The kernel tells a process a pset's size and version but not its member list, so a
//! communicator is wired up through the data server: after a fence over the pset (so
//! that every member reads the same version), each member claims one index of
//! `dynres/comm/{pset}/v{version}/{i}` (publish never overwrites, so exactly one member
//! gets each index) with its rank and transport address, then looks up every index and
//! orders the members by rank. Communicator ranks are positions in that order. After a
//! barrier over the new communicator each member unpublishes its index again.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use dynres_core::pset::PsetName;
use dynres_core::rc::RcError;
use dynres_transports::shm::{ShmConfig, ShmDevice};
use dynres_transports::{MsgHeader, PeerAddrs, PeerRef, Router, ShmAddr};

use crate::client::Session;
use crate::error::{ClientError, CommError};

/// How long a member waits for the others to join a communicator being created.
pub const CREATE_WAIT: Duration = Duration::from_secs(60);
/// How long a send or receive may block.
pub const OP_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest message a collective carries.
pub const MAX_COLLECTIVE: usize = 1 << 20;

const TAG_BARRIER: u64 = u64::MAX - 1;
const TAG_BCAST: u64 = u64::MAX - 2;
const TAG_REDUCE: u64 = u64::MAX - 3;
const TAG_LEAVE: u64 = u64::MAX - 4;

/// This process' transport endpoint, shared by all its communicators.
#[derive(Clone)]
pub struct Transport {
    router: Rc<RefCell<Router>>,
}

impl Transport {
    /// Opens the shared-memory device.
    pub fn new() -> Result<Transport, CommError> {
        let shm = ShmDevice::new(ShmConfig::default())?;
        Ok(Transport {
            router: Rc::new(RefCell::new(Router::new(vec![Box::new(shm)]))),
        })
    }

    /// Opens the shared-memory device on a helper thread, so that a new process can
    /// overlap it with its confirm; [`OpeningTransport::finish`] waits for it.
    pub fn open_in_background() -> OpeningTransport {
        OpeningTransport(std::thread::spawn(|| ShmDevice::new(ShmConfig::default())))
    }

    /// This process' addresses, as published for its peers.
    pub fn address(&self) -> String {
        encode_addrs(self.router.borrow().local_addrs())
    }

    /// Finalizes the devices (also done on drop).
    pub fn finalize(&self) -> Result<(), CommError> {
        Ok(self.router.borrow_mut().finalize()?)
    }
}

/// A [`Transport`] being opened by [`Transport::open_in_background`].
pub struct OpeningTransport(std::thread::JoinHandle<dynres_transports::Result<ShmDevice>>);

impl OpeningTransport {
    /// Waits for the device and returns the transport.
    pub fn finish(self) -> Result<Transport, CommError> {
        let shm = self
            .0
            .join()
            .map_err(|_| CommError::Malformed("transport thread panicked"))??;
        Ok(Transport {
            router: Rc::new(RefCell::new(Router::new(vec![Box::new(shm)]))),
        })
    }
}

fn encode_addrs(a: &PeerAddrs) -> String {
    match &a.shm {
        Some(s) => format!("shm:{}:{}:{}", s.host_id, s.pid, s.segment),
        None => String::from("none"),
    }
}

fn decode_addrs(s: &str) -> Result<PeerAddrs, CommError> {
    let bad = || CommError::BadAddress(s.to_string());
    let mut it = s.splitn(4, ':');
    if it.next() != Some("shm") {
        return Err(bad());
    }
    let host_id = it.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let pid = it.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let segment = it.next().ok_or_else(bad)?.to_string();
    Ok(PeerAddrs {
        shm: Some(ShmAddr {
            host_id,
            pid,
            segment,
        }),
        ..PeerAddrs::default()
    })
}

/// A communicator over the members of one version of a pset.
pub struct Communicator {
    transport: Transport,
    pset: PsetName,
    version: u64,
    ranks: Vec<u32>,
    me: usize,
    peers: Vec<Option<PeerRef>>,
    context: u32,
}

impl Communicator {
    /// Creates a communicator from `pset`, collectively with all its current members.
    /// `hint` is the index to try claiming first (e.g. the caller's old position).
    pub fn create(
        session: &mut Session,
        transport: &Transport,
        pset: &PsetName,
        hint: usize,
    ) -> Result<Communicator, CommError> {
        // Each node's runtime learns of a pset's new version in its own time (core
        // orders the master's messages per node only, RC-3), and a member may have
        // heard of the change from another process first (the root's broadcast): its
        // own node may still answer with the old version. A fence completes at the
        // master after every member arrived, and its reply follows the pset update on
        // every node's link, so after it each member reads the same version.
        session.fence(pset, CREATE_WAIT)?;
        let info = session.pset_info(pset)?;
        let size = info.size;
        let version = info.attrs.version;
        let prefix = format!("dynres/comm/{pset}/v{version}");
        let mine = format!("{} {}", session.rank(), transport.address());
        let mut claimed = None;
        for k in 0..size {
            let i = (hint + k) % size;
            match session.publish(&format!("{prefix}/{i}"), &mine) {
                Ok(()) => {
                    claimed = Some(i);
                    break;
                }
                Err(ClientError::Rc(RcError::KeyExists(_))) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        if claimed.is_none() {
            return Err(CommError::NotMember(pset.to_string()));
        }
        let mut members = Vec::with_capacity(size);
        for i in 0..size {
            let v = session.lookup(&format!("{prefix}/{i}"), Some(CREATE_WAIT))?;
            let (rank, addr) = v
                .split_once(' ')
                .ok_or_else(|| CommError::BadAddress(v.clone()))?;
            let rank: u32 = rank.parse().map_err(|_| CommError::BadAddress(v.clone()))?;
            members.push((rank, addr.to_string()));
        }
        members.sort();
        let me = members
            .iter()
            .position(|(r, _)| *r == session.rank())
            .ok_or_else(|| CommError::NotMember(pset.to_string()))?;
        let mut peers = Vec::with_capacity(size);
        {
            let mut router = transport.router.borrow_mut();
            for (i, (_, addr)) in members.iter().enumerate() {
                peers.push(if i == me {
                    None
                } else {
                    Some(router.add_peer(decode_addrs(addr)?))
                });
            }
        }
        let context = fnv32(prefix.as_bytes());
        let comm = Communicator {
            transport: transport.clone(),
            pset: pset.clone(),
            version,
            ranks: members.into_iter().map(|(r, _)| r).collect(),
            me,
            peers,
            context,
        };
        // Once every member is past the barrier, every member has looked up every
        // index, so each removes its own: the data server keeps nothing per
        // communicator and a long-running job's runtime does not grow with it.
        comm.barrier()?;
        if let Some(i) = claimed {
            session.unpublish(&format!("{prefix}/{i}"))?;
        }
        Ok(comm)
    }

    /// This process' position.
    pub fn rank(&self) -> usize {
        self.me
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// The job ranks of the members, in communicator order.
    pub fn members(&self) -> &[u32] {
        &self.ranks
    }

    /// The pset and version this communicator was made from.
    pub fn pset(&self) -> (&PsetName, u64) {
        (&self.pset, self.version)
    }

    fn peer(&self, i: usize) -> Result<&PeerRef, CommError> {
        self.peers
            .get(i)
            .and_then(|p| p.as_ref())
            .ok_or(CommError::Malformed("no such peer"))
    }

    /// Sends `data` to member `dest` with `tag`.
    pub fn send(&self, dest: usize, tag: u64, data: &[u8]) -> Result<(), CommError> {
        let header = MsgHeader {
            source: self.me as u64,
            tag,
            context_id: self.context,
            len: data.len() as u64,
        };
        let peer = self.peer(dest)?.clone();
        self.transport
            .router
            .borrow_mut()
            .send(&peer, header, data, OP_TIMEOUT)?;
        Ok(())
    }

    /// Receives a message of at most `max` bytes from member `src` with `tag`.
    pub fn recv(&self, src: usize, tag: u64, max: usize) -> Result<Vec<u8>, CommError> {
        let peer = self.peer(src)?.clone();
        let r = self.transport.router.borrow_mut().recv(
            Some(&peer),
            Some(tag),
            self.context,
            vec![0; max],
            OP_TIMEOUT,
        )?;
        Ok(r.data)
    }

    /// Blocks until every member has entered the barrier.
    pub fn barrier(&self) -> Result<(), CommError> {
        if self.me == 0 {
            for i in 1..self.size() {
                self.recv(i, TAG_BARRIER, 0)?;
            }
            for i in 1..self.size() {
                self.send(i, TAG_BARRIER, &[])?;
            }
        } else {
            self.send(0, TAG_BARRIER, &[])?;
            self.recv(0, TAG_BARRIER, 0)?;
        }
        Ok(())
    }

    /// Collective goodbye before the members finalize their transports: every member
    /// tells member 0 and waits for its answer, so member 0 leaves last and no member
    /// talks to an inbox that is already gone.
    pub fn leave(self) -> Result<(), CommError> {
        if self.me == 0 {
            for i in 1..self.size() {
                self.recv(i, TAG_LEAVE, 0)?;
            }
            for i in 1..self.size() {
                self.send(i, TAG_LEAVE, &[])?;
            }
        } else {
            self.send(0, TAG_LEAVE, &[])?;
            self.recv(0, TAG_LEAVE, 0)?;
        }
        Ok(())
    }

    /// Broadcasts `data` from `root`; every member returns the root's bytes.
    pub fn bcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>, CommError> {
        if self.me == root {
            for i in (0..self.size()).filter(|i| *i != root) {
                self.send(i, TAG_BCAST, data)?;
            }
            Ok(data.to_vec())
        } else {
            self.recv(root, TAG_BCAST, MAX_COLLECTIVE)
        }
    }

    /// Element-wise sum of `values` over all members; every member gets the result.
    pub fn allreduce_sum(&self, values: &[f64]) -> Result<Vec<f64>, CommError> {
        let mut acc = values.to_vec();
        if self.me == 0 {
            for i in 1..self.size() {
                let b = self.recv(i, TAG_REDUCE, values.len() * 8)?;
                let theirs = decode_f64s(&b)?;
                if theirs.len() != acc.len() {
                    return Err(CommError::Malformed("allreduce length"));
                }
                acc.iter_mut().zip(theirs).for_each(|(a, b)| *a += b);
            }
        } else {
            self.send(0, TAG_REDUCE, &encode_f64s(values))?;
        }
        let out = self.bcast(0, &encode_f64s(&acc))?;
        decode_f64s(&out)
    }
}

fn encode_f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode_f64s(b: &[u8]) -> Result<Vec<f64>, CommError> {
    if b.len() % 8 != 0 {
        return Err(CommError::Malformed("f64 array"));
    }
    Ok(b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

fn fnv32(bytes: &[u8]) -> u32 {
    let h = bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    });
    // Context 0 is left to raw transport users.
    h.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_and_garbage_is_refused() {
        let a = PeerAddrs {
            shm: Some(ShmAddr {
                host_id: 42,
                pid: 7,
                segment: "/dynres-shm-7-0".into(),
            }),
            ..PeerAddrs::default()
        };
        assert_eq!(decode_addrs(&encode_addrs(&a)).unwrap(), a);
        assert!(decode_addrs("tcp:1.2.3.4").is_err());
        assert!(decode_addrs("shm:x:1:s").is_err());
    }
}
