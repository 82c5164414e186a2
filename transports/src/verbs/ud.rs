//! Unreliable-datagram endpoint for bootstrap traffic, on raw `ibverbs-sys` calls: the
//! `ibverbs` crate's safe API has no address handles or UD work requests.
//!
//! Buffers: one registered region holding [`RECV_SLOTS`] receive slots of
//! `GRH + MTU` bytes (a UD receive always starts with a 40-byte Global Routing Header
//! area) and one send slot of `MTU` bytes.

use std::collections::HashMap;
use std::ptr;
use std::time::{Duration, Instant};

use ibverbs_sys as ffi;

use super::PORT;
use crate::addr::VerbsAddr;
use crate::error::{Result, TransportError};

/// UD MTU used for bootstrap datagrams.
pub const MTU: usize = 2048;
/// Largest user datagram: the MTU less the one kind byte the device prefixes.
pub const DATAGRAM_MAX: usize = MTU - 1;
/// Bytes the HCA writes before a UD payload.
const GRH: usize = 40;
/// Receive work requests kept posted.
pub const RECV_SLOTS: usize = 64;
const SLOT: usize = GRH + MTU;
const SEND_WR_ID: u64 = u64::MAX;
/// Q_Key shared by all dynres UD endpoints.
pub const QKEY: u32 = 0x1107_d1e5;

fn verr(what: &'static str) -> TransportError {
    TransportError::Verbs {
        what,
        source: std::io::Error::last_os_error(),
    }
}

fn verr_code(what: &'static str, errno: i32) -> TransportError {
    TransportError::Verbs {
        what,
        source: std::io::Error::from_raw_os_error(errno),
    }
}

/// One UD queue pair with its own context, protection domain and completion queue.
pub struct UdEndpoint {
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    cq: *mut ffi::ibv_cq,
    qp: *mut ffi::ibv_qp,
    mr: *mut ffi::ibv_mr,
    buf: Vec<u8>,
    addr: VerbsAddr,
    ahs: HashMap<VerbsAddr, *mut ffi::ibv_ah>,
    send_busy: bool,
    /// Datagrams completed while waiting for a send completion.
    backlog: Vec<(Vec<u8>, u32)>,
}

// SAFETY: the verbs objects are used from one thread at a time (`&mut self`); libibverbs
// objects are not tied to the creating thread.
unsafe impl Send for UdEndpoint {}

impl UdEndpoint {
    /// Opens the first RDMA device and brings a UD queue pair to RTS.
    pub fn open() -> Result<Self> {
        // Probe through the ibverbs crate so absence maps to NoRdmaDevice consistently.
        drop(super::open_first_device()?);
        let mut n = 0i32;
        // SAFETY: out-parameter is a valid i32; the list is freed below.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() || n < 1 {
            return Err(TransportError::NoRdmaDevice("device list empty".into()));
        }
        // SAFETY: `list` has `n >= 1` entries.
        let ctx = unsafe { ffi::ibv_open_device(*list) };
        // SAFETY: the list is no longer needed once the device is opened.
        unsafe { ffi::ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(verr("ibv_open_device"));
        }
        let mut ep = Self {
            ctx,
            pd: ptr::null_mut(),
            cq: ptr::null_mut(),
            qp: ptr::null_mut(),
            mr: ptr::null_mut(),
            buf: vec![0; RECV_SLOTS * SLOT + MTU],
            addr: VerbsAddr {
                lid: 0,
                qpn: 0,
                qkey: QKEY,
                gid: None,
            },
            ahs: HashMap::new(),
            send_busy: false,
            backlog: Vec::new(),
        };
        // On error `ep` is dropped, which releases whatever was created so far.
        ep.setup()?;
        Ok(ep)
    }

    fn setup(&mut self) -> Result<()> {
        let mut port = ffi::ibv_port_attr::default();
        // SAFETY: `ctx` is open; the compat struct is a prefix of `ibv_port_attr`, as
        // the ibverbs crate also relies on.
        let rc =
            unsafe { ffi::ibv_query_port(self.ctx, PORT, std::ptr::from_mut(&mut port).cast()) };
        if rc != 0 {
            return Err(verr_code("ibv_query_port", rc));
        }
        self.addr.lid = port.lid;
        if u32::from(port.link_layer) == ffi::IBV_LINK_LAYER_ETHERNET {
            // RoCE has no LIDs: address by GID (index 0).
            let mut gid = ffi::ibv_gid { raw: [0; 16] };
            // SAFETY: valid context and out-parameter.
            let rc = unsafe { ffi::ibv_query_gid(self.ctx, PORT, 0, &mut gid) };
            if rc != 0 {
                return Err(verr_code("ibv_query_gid", rc));
            }
            // SAFETY: every bit pattern of the union is a valid byte array.
            self.addr.gid = Some(unsafe { gid.raw });
        }
        // SAFETY: valid context.
        self.pd = unsafe { ffi::ibv_alloc_pd(self.ctx) };
        if self.pd.is_null() {
            return Err(verr("ibv_alloc_pd"));
        }
        // SAFETY: valid context; no completion channel.
        self.cq = unsafe {
            ffi::ibv_create_cq(
                self.ctx,
                (RECV_SLOTS * 2) as i32,
                ptr::null_mut(),
                ptr::null_mut(),
                0,
            )
        };
        if self.cq.is_null() {
            return Err(verr("ibv_create_cq"));
        }
        let mut init = ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: 16,
                max_recv_wr: RECV_SLOTS as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_UD,
            sq_sig_all: 1,
        };
        // SAFETY: valid PD and attributes.
        self.qp = unsafe { ffi::ibv_create_qp(self.pd, &mut init) };
        if self.qp.is_null() {
            return Err(verr("ibv_create_qp(UD)"));
        }
        // SAFETY: `qp` was just created and is valid.
        self.addr.qpn = unsafe { (*self.qp).qp_num };
        self.modify(
            ffi::ibv_qp_attr {
                qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
                pkey_index: 0,
                port_num: PORT,
                qkey: QKEY,
                ..Default::default()
            },
            ffi::ibv_qp_attr_mask::IBV_QP_STATE
                | ffi::ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
                | ffi::ibv_qp_attr_mask::IBV_QP_PORT
                | ffi::ibv_qp_attr_mask::IBV_QP_QKEY,
        )?;
        self.modify(
            ffi::ibv_qp_attr {
                qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
                ..Default::default()
            },
            ffi::ibv_qp_attr_mask::IBV_QP_STATE,
        )?;
        self.modify(
            ffi::ibv_qp_attr {
                qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
                sq_psn: 0,
                ..Default::default()
            },
            ffi::ibv_qp_attr_mask::IBV_QP_STATE | ffi::ibv_qp_attr_mask::IBV_QP_SQ_PSN,
        )?;
        // SAFETY: `buf` is never reallocated after registration (fixed length) and
        // outlives the MR (deregistered in Drop before `buf` is freed).
        self.mr = unsafe {
            ffi::ibv_reg_mr(
                self.pd,
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
                ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32,
            )
        };
        if self.mr.is_null() {
            return Err(verr("ibv_reg_mr"));
        }
        for slot in 0..RECV_SLOTS {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    fn modify(&mut self, mut attr: ffi::ibv_qp_attr, mask: ffi::ibv_qp_attr_mask) -> Result<()> {
        // SAFETY: valid QP and attribute struct.
        let rc = unsafe { ffi::ibv_modify_qp(self.qp, &mut attr, mask.0 as i32) };
        if rc != 0 {
            return Err(verr_code("ibv_modify_qp(UD)", rc));
        }
        Ok(())
    }

    fn post_recv(&mut self, slot: usize) -> Result<()> {
        let mut sge = ffi::ibv_sge {
            addr: self.buf[slot * SLOT..].as_ptr() as u64,
            length: SLOT as u32,
            // SAFETY: `mr` is registered (non-null) before any receive is posted.
            lkey: unsafe { (*self.mr).lkey },
        };
        let mut wr = ffi::ibv_recv_wr {
            wr_id: slot as u64,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: post_recv is an inline function in verbs.h, reached through the
        // context's ops table exactly as libibverbs does; `sge` covers a slot inside
        // the registered region, which stays valid until the QP is destroyed.
        let rc = unsafe {
            let ops = &mut (*(*self.qp).context).ops;
            ops.post_recv.expect("provider implements post_recv")(self.qp, &mut wr, &mut bad)
        };
        if rc != 0 {
            return Err(verr_code("ibv_post_recv(UD)", rc));
        }
        Ok(())
    }

    /// This endpoint's address.
    pub fn addr(&self) -> VerbsAddr {
        self.addr
    }

    fn ah(&mut self, to: &VerbsAddr) -> Result<*mut ffi::ibv_ah> {
        if let Some(ah) = self.ahs.get(to) {
            return Ok(*ah);
        }
        let mut attr = ffi::ibv_ah_attr {
            dlid: to.lid,
            port_num: PORT,
            ..Default::default()
        };
        if let Some(g) = to.gid {
            attr.is_global = 1;
            attr.grh.dgid = ffi::ibv_gid { raw: g };
            attr.grh.hop_limit = 64;
            attr.grh.sgid_index = 0;
        }
        // SAFETY: valid PD and attributes.
        let ah = unsafe { ffi::ibv_create_ah(self.pd, &mut attr) };
        if ah.is_null() {
            return Err(verr("ibv_create_ah"));
        }
        self.ahs.insert(*to, ah);
        Ok(ah)
    }

    /// Sends one datagram (`kind` byte + `data`) and waits for its completion, so the
    /// single send slot can be reused. `data` must fit the MTU less the kind byte.
    pub fn send(&mut self, to: &VerbsAddr, kind: u8, data: &[u8]) -> Result<()> {
        if data.len() > DATAGRAM_MAX {
            return Err(TransportError::DatagramTooLarge {
                len: data.len(),
                mtu: DATAGRAM_MAX,
            });
        }
        let ah = self.ah(to)?;
        let base = RECV_SLOTS * SLOT;
        self.buf[base] = kind;
        self.buf[base + 1..base + 1 + data.len()].copy_from_slice(data);
        let mut sge = ffi::ibv_sge {
            addr: self.buf[base..].as_ptr() as u64,
            length: (data.len() + 1) as u32,
            // SAFETY: registered in `setup`.
            lkey: unsafe { (*self.mr).lkey },
        };
        let mut wr = ffi::ibv_send_wr {
            wr_id: SEND_WR_ID,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: ffi::ibv_wr_opcode::IBV_WR_SEND,
            send_flags: ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ..Default::default()
        };
        wr.wr.ud = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah,
            remote_qpn: to.qpn,
            remote_qkey: to.qkey,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: as for post_recv; the send slot is not reused before the completion
        // below is seen.
        let rc = unsafe {
            let ops = &mut (*(*self.qp).context).ops;
            ops.post_send.expect("provider implements post_send")(self.qp, &mut wr, &mut bad)
        };
        if rc != 0 {
            return Err(verr_code("ibv_post_send(UD)", rc));
        }
        self.send_busy = true;
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.send_busy {
            self.poll()?;
            if Instant::now() > deadline {
                return Err(TransportError::Timeout(
                    Duration::from_secs(5),
                    "a UD send completion",
                ));
            }
        }
        Ok(())
    }

    /// Polls the completion queue; returns received datagrams (payload after the kind
    /// byte is not stripped here) with the sender's queue pair number.
    fn poll(&mut self) -> Result<()> {
        let mut wcs = [ffi::ibv_wc::default(); 16];
        // SAFETY: poll_cq is reached through the ops table like libibverbs' inline
        // wrapper; `wcs` has room for 16 completions.
        let n = unsafe {
            let ops = &mut (*(*self.cq).context).ops;
            ops.poll_cq.expect("provider implements poll_cq")(
                self.cq,
                wcs.len() as i32,
                wcs.as_mut_ptr(),
            )
        };
        if n < 0 {
            return Err(verr_code("ibv_poll_cq(UD)", -n));
        }
        for wc in &wcs[..n as usize] {
            if wc.wr_id() == SEND_WR_ID {
                self.send_busy = false;
                if let Some((status, vendor)) = wc.error() {
                    tracing::warn!(status, vendor, "UD send failed");
                }
                continue;
            }
            let slot = wc.wr_id() as usize;
            if wc.error().is_none() && wc.len() > GRH && slot < RECV_SLOTS {
                let start = slot * SLOT + GRH;
                let len = (wc.len() - GRH).min(MTU);
                self.backlog
                    .push((self.buf[start..start + len].to_vec(), wc.src_qp));
            }
            if slot < RECV_SLOTS {
                self.post_recv(slot)?;
            }
        }
        Ok(())
    }

    /// Next received datagram (kind byte first) and its source QPN, if any.
    pub fn try_recv(&mut self) -> Result<Option<(Vec<u8>, u32)>> {
        if self.backlog.is_empty() {
            self.poll()?;
        }
        Ok(if self.backlog.is_empty() {
            None
        } else {
            Some(self.backlog.remove(0))
        })
    }
}

impl Drop for UdEndpoint {
    fn drop(&mut self) {
        // SAFETY: each object is destroyed at most once, children before parents, and
        // only if it was created; errors at teardown are ignored (nothing to do).
        unsafe {
            for (_, ah) in self.ahs.drain() {
                ffi::ibv_destroy_ah(ah);
            }
            if !self.qp.is_null() {
                ffi::ibv_destroy_qp(self.qp);
            }
            if !self.mr.is_null() {
                ffi::ibv_dereg_mr(self.mr);
            }
            if !self.cq.is_null() {
                ffi::ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                ffi::ibv_dealloc_pd(self.pd);
            }
            ffi::ibv_close_device(self.ctx);
        }
    }
}
