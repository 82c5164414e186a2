//! An inter-communicator: the local group (a [`Communicator`]) and a remote group
//! reached through the endpoint table a handshake delivered (SPAWN-7).
//!
//! Messages to the remote group carry the *remote* group's context id, messages from it
//! are matched on the *local* one (SPAWN-4: each side's `remote` is the other's `local`).
//! Both ids come from the [`crate::comm::DPM_CONTEXT_BIT`] range, so they never collide
//! with a hashed intra-communicator. The collectives follow MPI's inter-communicator
//! semantics and reserve the tags at and above [`RESERVED_TAGS`].

use std::cell::Cell;

use dynres_core::spawn::{InterGroup, MergedGroup, merge};
use dynres_transports::tcp::DataKey;
use dynres_transports::{MsgHeader, PeerAddrs, PeerRef};

use super::endpoint::decode_endpoint;
use crate::comm::{
    Communicator, MAX_COLLECTIVE, OP_TIMEOUT, Transport, decode_f64s, encode_f64s, fnv32,
};
use crate::error::CommError;

/// Tags at and above this are used by the inter-communicator's own collectives and by
/// the root → member messages of the calls; applications use lower tags.
pub const RESERVED_TAGS: u64 = u64::MAX - 63;
/// Root → members: a [`dynres_core::spawn::MemberMsg`] on the local communicator.
pub(crate) const TAG_MEMBER: u64 = u64::MAX - 32;
const TAG_BARRIER: u64 = u64::MAX - 33;
const TAG_BCAST: u64 = u64::MAX - 34;
const TAG_REDUCE: u64 = u64::MAX - 35;
const TAG_MERGE: u64 = u64::MAX - 36;

/// Which group a broadcast's root belongs to (the MPI `MPI_ROOT` / `MPI_PROC_NULL` /
/// remote-rank convention as one argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The root is a rank of this process' group.
    Local,
    /// The root is a rank of the other group.
    Remote,
}

/// An inter-communicator between this process' group and a remote group.
pub struct InterComm {
    transport: Transport,
    /// The local group, on the inter-communicator's local context: its collectives do
    /// not mix with the application's use of the communicator the call was made on.
    local: Communicator,
    remote: Vec<PeerRef>,
    remote_addrs: Vec<PeerAddrs>,
    ig: InterGroup,
    merges: Cell<u32>,
    released: bool,
}

impl std::fmt::Debug for InterComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterComm")
            .field("rank", &self.rank())
            .field("local", &self.ig.local)
            .field("remote", &self.ig.remote)
            .finish()
    }
}

impl InterComm {
    /// Builds the inter-communicator from a handshake's outcome and the local group it
    /// was made over. The local context id must already be live in the transport's
    /// allocator: it is released on [`InterComm::disconnect`] (or drop), also when this
    /// fails on a bad remote endpoint.
    pub(crate) fn new(comm: &Communicator, ig: InterGroup) -> Result<InterComm, CommError> {
        let transport = comm.transport().clone();
        let release = |t: &Transport| {
            let _ = t.context_ids().borrow_mut().release(ig.local.context_id);
        };
        let remote_addrs = match ig
            .remote_endpoints
            .iter()
            .map(decode_endpoint)
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(a) => a,
            Err(e) => {
                release(&transport);
                return Err(e.into());
            }
        };
        // SPAWN-23, DATA-4: TCP connections with the remote group present the key both
        // roots derived for this inter-group (every member got it with the remote
        // triple), so two jobs that connected through a port talk with each other's
        // ranks without either job's own key, and nobody else can claim their addresses.
        let key = DataKey::new(ig.data_key.0);
        if let Err(e) = transport.add_peer_key(key, &remote_addrs) {
            release(&transport);
            return Err(e);
        }
        let members = comm
            .members()
            .iter()
            .copied()
            .zip(comm.peer_addrs().iter().cloned())
            .collect();
        let local = match Communicator::from_table(
            &transport,
            &format!("{}/inter-local", comm.label()),
            members,
            comm.rank(),
            ig.local.context_id,
        ) {
            Ok(c) => c,
            Err(e) => {
                release(&transport);
                return Err(e);
            }
        };
        let remote = {
            let mut router = transport.router().borrow_mut();
            remote_addrs
                .iter()
                .map(|a| router.add_peer(a.clone()))
                .collect()
        };
        Ok(InterComm {
            transport,
            local,
            remote,
            remote_addrs,
            ig,
            merges: Cell::new(0),
            released: false,
        })
    }

    /// This process' rank in the local group.
    pub fn rank(&self) -> usize {
        self.local.rank()
    }

    /// Size of the local group.
    pub fn local_size(&self) -> usize {
        self.local.size()
    }

    /// Size of the remote group.
    pub fn remote_size(&self) -> usize {
        self.remote.len()
    }

    /// The kernel's view: both triples, both endpoint tables, the role.
    pub fn intergroup(&self) -> &InterGroup {
        &self.ig
    }

    /// The remote group's addresses, by remote rank.
    pub fn remote_addrs(&self) -> &[PeerAddrs] {
        &self.remote_addrs
    }

    fn remote_peer(&self, r: usize) -> Result<&PeerRef, CommError> {
        self.remote
            .get(r)
            .ok_or_else(|| CommError::InvalidArgument(format!("no remote rank {r}")))
    }

    /// Sends `data` to rank `remote_rank` of the remote group.
    pub fn send(&self, remote_rank: usize, tag: u64, data: &[u8]) -> Result<(), CommError> {
        let peer = self.remote_peer(remote_rank)?.clone();
        let header = MsgHeader {
            source: self.rank() as u64,
            tag,
            context_id: self.ig.remote.context_id,
            len: data.len() as u64,
        };
        self.transport
            .router()
            .borrow_mut()
            .send(&peer, header, data, OP_TIMEOUT)?;
        Ok(())
    }

    /// Receives a message of at most `max` bytes from rank `remote_rank` of the remote
    /// group.
    pub fn recv(&self, remote_rank: usize, tag: u64, max: usize) -> Result<Vec<u8>, CommError> {
        self.recv_timeout(remote_rank, tag, max, OP_TIMEOUT)
    }

    /// [`InterComm::recv`] waiting at most `timeout`.
    pub fn recv_timeout(
        &self,
        remote_rank: usize,
        tag: u64,
        max: usize,
        timeout: std::time::Duration,
    ) -> Result<Vec<u8>, CommError> {
        let peer = self.remote_peer(remote_rank)?.clone();
        let r = self.transport.router().borrow_mut().recv(
            Some(&peer),
            Some(tag),
            self.ig.local.context_id,
            vec![0; max],
            timeout,
        )?;
        Ok(r.data)
    }

    /// The two roots (rank 0 of each group) swap `mine`; returns the other root's bytes
    /// at local rank 0 and `None` elsewhere.
    fn roots_swap(&self, tag: u64, mine: &[u8], max: usize) -> Result<Option<Vec<u8>>, CommError> {
        if self.rank() != 0 {
            return Ok(None);
        }
        // Small eager messages: both roots can send first.
        self.send(0, tag, mine)?;
        Ok(Some(self.recv(0, tag, max)?))
    }

    /// Returns once every process of both groups has entered the barrier.
    pub fn barrier(&self) -> Result<(), CommError> {
        self.local.barrier()?;
        self.roots_swap(TAG_BARRIER, &[], 0)?;
        // The local root leaves the swap only after the remote group's barrier.
        self.local.barrier()
    }

    /// Broadcast from one process to every process of the *other* group. In the root's
    /// group, `root_side` is [`Side::Local`] and `root` its rank; the root's `data` is
    /// returned to it and the group's other processes take no part and get an empty
    /// vector. In the other group `root_side` is [`Side::Remote`], `root` the root's rank
    /// in the remote group, and every process returns the root's bytes.
    pub fn bcast(&self, root_side: Side, root: usize, data: &[u8]) -> Result<Vec<u8>, CommError> {
        match root_side {
            Side::Local => {
                if root >= self.local_size() {
                    return Err(CommError::InvalidArgument(format!("no local rank {root}")));
                }
                if self.rank() != root {
                    return Ok(Vec::new());
                }
                self.send(0, TAG_BCAST, data)?;
                Ok(data.to_vec())
            }
            Side::Remote => {
                if root >= self.remote_size() {
                    return Err(CommError::InvalidArgument(format!("no remote rank {root}")));
                }
                let got = if self.rank() == 0 {
                    self.recv(root, TAG_BCAST, MAX_COLLECTIVE)?
                } else {
                    Vec::new()
                };
                self.local.bcast(0, &got)
            }
        }
    }

    /// Element-wise sum: every process of each group receives the sum over the *other*
    /// group's `values` (MPI inter-communicator allreduce). Both groups must pass the
    /// same length.
    pub fn allreduce_sum(&self, values: &[f64]) -> Result<Vec<f64>, CommError> {
        let mine = self.local.allreduce_sum(values)?;
        let theirs = self.roots_swap(TAG_REDUCE, &encode_f64s(&mine), values.len() * 8)?;
        let theirs = self.local.bcast(0, &theirs.unwrap_or_default())?;
        let theirs = decode_f64s(&theirs)?;
        if theirs.len() != values.len() {
            return Err(CommError::Malformed(
                "allreduce length differs between groups",
            ));
        }
        Ok(theirs)
    }

    /// `MPI_Intercomm_merge`: one communicator over both groups. Every process of a group
    /// passes the same `high`; the group that passed `false` comes first, on a tie the
    /// order of core's `merge` (SPAWN-15). Only the roots exchange their `high`; the new
    /// context is derived from the inter-group (session, both triples, how many merges
    /// before) so both sides agree on it without another message. The merged
    /// communicator's `members()` are each process' rank in its original group.
    pub fn merge(&self, high: bool) -> Result<Communicator, CommError> {
        let theirs = self.roots_swap(TAG_MERGE, &[u8::from(high)], 1)?;
        let theirs = self.local.bcast(0, &theirs.unwrap_or_default())?;
        let remote_high = match theirs.as_slice() {
            [0] => false,
            [1] => true,
            _ => return Err(CommError::Malformed("merge flag")),
        };
        let m: MergedGroup = merge(&self.ig, high, remote_high);
        let n = self.merges.get();
        self.merges.set(n.wrapping_add(1));
        // Both sides sort the same two triples, whatever their roles.
        let (first, second) = if self.ig.local <= self.ig.remote {
            (self.ig.local, self.ig.remote)
        } else {
            (self.ig.remote, self.ig.local)
        };
        let context = fnv32(
            format!(
                "dynres/merge/{}/{}:{}/{}:{}/{n}",
                self.ig.session,
                first.group_id,
                first.context_id,
                second.group_id,
                second.context_id
            )
            .as_bytes(),
        );
        let members = m
            .members
            .iter()
            .zip(&m.endpoints)
            .map(|((_, r), a)| Ok((*r, decode_endpoint(a)?)))
            .collect::<Result<Vec<_>, CommError>>()?;
        Communicator::from_table(
            &self.transport,
            &format!("merged/{}", self.ig.session),
            members,
            m.rank as usize,
            context,
        )
    }

    fn release(&mut self) -> Result<(), CommError> {
        if std::mem::replace(&mut self.released, true) {
            return Ok(());
        }
        self.transport
            .context_ids()
            .borrow_mut()
            .release(self.ig.local.context_id)?;
        Ok(())
    }

    /// `MPI_Comm_disconnect`: gives the local context id back (SPAWN-5). Local, as in
    /// the spec: no message goes to the remote group, so the application must have
    /// finished its communication with it (e.g. with a [`InterComm::barrier`]).
    /// Dropping the inter-communicator does the same.
    pub fn disconnect(mut self) -> Result<(), CommError> {
        self.release()
    }
}

impl Drop for InterComm {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::warn!(error = %e, "inter-communicator context not released");
        }
    }
}
