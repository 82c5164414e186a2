//! Reliable-connected queue pairs for data, through the `ibverbs` crate.
//!
//! The crate ties queue pairs to borrows of their context, protection domain and
//! completion queue. A device lives as long as its connections, so these three are
//! boxed and leaked into `'static` references, and reclaimed in [`RcFabric`]'s `Drop`,
//! which the device runs only after dropping every queue pair and memory region.

use ibverbs::{
    CompletionQueue, Context, MemoryRegion, PreparedQueuePair, ProtectionDomain, QueuePair,
    QueuePairEndpoint,
};
use ibverbs_sys as ffi;

use super::wire::RcEndpoint;
use crate::error::{Result, TransportError};

/// Bytes per RC send/receive (a message is split into chunks of this size).
pub const CHUNK: usize = 64 * 1024;
/// Receive buffers kept posted per connection.
pub const RECV_BUFS: usize = 16;
/// Send buffers per connection.
pub const SEND_BUFS: usize = 16;
/// Completion queue depth shared by all connections.
const CQ_DEPTH: i32 = 4096;

fn verr(what: &'static str) -> impl FnOnce(std::io::Error) -> TransportError {
    move |source| TransportError::Verbs { what, source }
}

/// The context, protection domain and completion queue shared by all RC connections.
pub struct RcFabric {
    ctx: *mut Context,
    pd: *mut ProtectionDomain<'static>,
    cq: *mut CompletionQueue<'static>,
    use_gid: bool,
}

// SAFETY: the pointed-to objects are Send + Sync in the ibverbs crate; we only hand out
// shared references while `self` lives.
unsafe impl Send for RcFabric {}

impl RcFabric {
    /// Opens the device for RC use. `use_gid`: address by GID (RoCE) as well as LID.
    pub fn open(use_gid: bool) -> Result<Self> {
        let ctx: &'static Context = Box::leak(Box::new(super::open_first_device()?));
        let pd = ctx.alloc_pd().map_err(verr("ibv_alloc_pd"));
        let cq = ctx.create_cq(CQ_DEPTH, 0).map_err(verr("ibv_create_cq"));
        let (pd, cq) = match (pd, cq) {
            (Ok(pd), Ok(cq)) => (pd, cq),
            (pd, cq) => {
                let ((Err(err), _) | (_, Err(err))) = (pd, cq) else {
                    unreachable!("one of them failed")
                };
                // SAFETY: `ctx` came from Box::leak above and nothing borrows it any more
                // (the PD/CQ results were consumed by the match).
                drop(unsafe { Box::from_raw(std::ptr::from_ref(ctx).cast_mut()) });
                return Err(err);
            }
        };
        Ok(Self {
            ctx: std::ptr::from_ref(ctx).cast_mut(),
            pd: Box::into_raw(Box::new(pd)),
            cq: Box::into_raw(Box::new(cq)),
            use_gid,
        })
    }

    fn pd(&self) -> &'static ProtectionDomain<'static> {
        // SAFETY: valid until Drop, which runs after every user (see module docs).
        unsafe { &*self.pd }
    }

    fn cq(&self) -> &'static CompletionQueue<'static> {
        // SAFETY: as for `pd`.
        unsafe { &*self.cq }
    }

    /// Creates a queue pair and returns it with the endpoint the peer needs.
    pub fn prepare(&self) -> Result<(PreparedQueuePair<'static>, RcEndpoint)> {
        let cq = self.cq();
        let mut b = self
            .pd()
            .create_qp(cq, cq, ibverbs::ibv_qp_type::IBV_QPT_RC);
        b.set_max_send_wr(SEND_BUFS as u32)
            .set_max_recv_wr(RECV_BUFS as u32)
            // Receiver-not-ready: retry forever; receive buffers are re-posted as they
            // are drained, so the sender just waits for the receiver to catch up.
            .set_rnr_retry(7);
        if self.use_gid {
            b.set_gid_index(0);
        }
        let pqp = b.build().map_err(verr("ibv_create_qp(RC)"))?;
        let e = pqp.endpoint();
        let gid = e.gid.map(|g| {
            let raw: ffi::ibv_gid = g.into();
            // SAFETY: every bit pattern of the union is a valid byte array.
            unsafe { raw.raw }
        });
        Ok((
            pqp,
            RcEndpoint {
                num: e.num,
                lid: e.lid,
                gid,
            },
        ))
    }

    /// Polls the shared completion queue.
    pub fn poll<'c>(&self, wcs: &'c mut [ibverbs::ibv_wc]) -> Result<&'c mut [ibverbs::ibv_wc]> {
        self.cq().poll(wcs).map_err(verr("ibv_poll_cq"))
    }

    /// Completes the handshake with the peer's endpoint and sets up buffers.
    pub fn connect(
        &self,
        pqp: PreparedQueuePair<'static>,
        remote: RcEndpoint,
        conn: u64,
    ) -> Result<RcConn> {
        let remote = QueuePairEndpoint {
            num: remote.num,
            lid: remote.lid,
            gid: remote
                .gid
                .map(|raw| ibverbs::Gid::from(ffi::ibv_gid { raw })),
        };
        let qp = pqp.handshake(remote).map_err(verr("RC handshake"))?;
        let mut c = RcConn {
            qp,
            send_mr: self
                .pd()
                .allocate(SEND_BUFS * CHUNK)
                .map_err(verr("ibv_reg_mr(send)"))?,
            recv_mr: self
                .pd()
                .allocate(RECV_BUFS * CHUNK)
                .map_err(verr("ibv_reg_mr(recv)"))?,
            free_send: (0..SEND_BUFS).collect(),
            conn,
        };
        for slot in 0..RECV_BUFS {
            c.post_recv(slot)?;
        }
        Ok(c)
    }
}

impl Drop for RcFabric {
    fn drop(&mut self) {
        // SAFETY: the device drops every RcConn (queue pairs, memory regions) before the
        // fabric; children go before parents; each pointer came from Box::leak /
        // Box::into_raw in `open` and is reclaimed exactly once.
        unsafe {
            drop(Box::from_raw(self.cq));
            drop(Box::from_raw(self.pd));
            drop(Box::from_raw(self.ctx));
        }
    }
}

/// Work-request ids: connection in the high bits, direction bit, slot in the low bits.
pub fn wr_id(conn: u64, send: bool, slot: usize) -> u64 {
    (conn << 16) | (u64::from(send) << 15) | slot as u64
}

/// Splits a work-request id back into (connection, send?, slot).
pub fn split_wr_id(id: u64) -> (u64, bool, usize) {
    (id >> 16, id & (1 << 15) != 0, (id & 0x7fff) as usize)
}

/// One RC connection with its registered send and receive buffers.
pub struct RcConn {
    qp: QueuePair<'static>,
    send_mr: MemoryRegion<u8>,
    recv_mr: MemoryRegion<u8>,
    free_send: Vec<usize>,
    conn: u64,
}

impl RcConn {
    /// Re-posts receive buffer `slot`.
    pub fn post_recv(&mut self, slot: usize) -> Result<()> {
        let id = wr_id(self.conn, false, slot);
        // SAFETY: the slot's bytes are not read again until its completion is polled,
        // and the region outlives the queue pair's use of it (dropped together).
        unsafe {
            self.qp
                .post_receive(&mut self.recv_mr, slot * CHUNK..(slot + 1) * CHUNK, id)
        }
        .map_err(verr("ibv_post_recv(RC)"))
    }

    /// Bytes received into `slot`.
    pub fn received(&self, slot: usize, len: usize) -> &[u8] {
        &self.recv_mr[slot * CHUNK..slot * CHUNK + len.min(CHUNK)]
    }

    /// Whether a send buffer is free.
    pub fn can_send(&self) -> bool {
        !self.free_send.is_empty()
    }

    /// Copies `parts` (at most [`CHUNK`] bytes together) into a free send buffer and
    /// posts it. The caller checks [`RcConn::can_send`] first.
    pub fn send_chunk(&mut self, parts: &[&[u8]]) -> Result<()> {
        let slot = self.free_send.pop().ok_or(TransportError::Timeout(
            std::time::Duration::ZERO,
            "a free RC send buffer",
        ))?;
        let mut at = slot * CHUNK;
        for p in parts {
            self.send_mr[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        let id = wr_id(self.conn, true, slot);
        // SAFETY: the buffer slot is owned by this send until its completion returns it
        // to `free_send` (see `send_done`).
        unsafe { self.qp.post_send(&mut self.send_mr, slot * CHUNK..at, id) }
            .map_err(verr("ibv_post_send(RC)"))
    }

    /// A send completion returned buffer `slot`.
    pub fn send_done(&mut self, slot: usize) {
        self.free_send.push(slot);
    }
}
