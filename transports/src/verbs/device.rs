//! The verbs [`Device`]: UD bootstrap + RC data.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::rc::{CHUNK, RcConn, RcFabric, split_wr_id};
use super::ud::UdEndpoint;
use super::wire::{Control, KIND_ACCEPT, KIND_CONNECT, KIND_USER};
use crate::addr::{PeerAddrs, VerbsAddr};
use crate::device::{ConnId, Device, DeviceKind, Received, RecvHandle, RecvSpec, SendHandle};
use crate::error::{Result, TransportError};
use crate::header::{MsgHeader, RECORD_HEADER_LEN};
use crate::matching::{Matcher, Sink};

/// Tunables of the verbs device.
#[derive(Clone, Debug)]
pub struct VerbsConfig {
    /// How long `connect` waits for the peer's ACCEPT datagram.
    pub connect_timeout: Duration,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
        }
    }
}

enum Rx {
    Header(Vec<u8>),
    Payload {
        header: MsgHeader,
        sink: Sink,
        got: usize,
    },
}

struct Conn {
    rc: RcConn,
    rx: Rx,
    peer: Option<VerbsAddr>,
    dead: Option<TransportError>,
}

/// InfiniBand verbs device. See the [module docs](super).
pub struct VerbsDevice {
    cfg: VerbsConfig,
    // Field order matters for drop: connections (queue pairs, memory regions) before
    // the fabric they borrow from.
    conns: HashMap<ConnId, Conn>,
    fabric: Option<RcFabric>,
    ud: Option<UdEndpoint>,
    by_peer: HashMap<VerbsAddr, ConnId>,
    accepted: VecDeque<ConnId>,
    datagrams: VecDeque<(Vec<u8>, u32)>,
    matcher: Matcher,
    next_conn: u64,
    next_send: u64,
    next_request: u64,
    send_done: HashMap<SendHandle, Result<()>>,
}

impl VerbsDevice {
    /// Opens the first RDMA device: UD endpoint for bootstrap, RC fabric for data.
    /// `Err(NoRdmaDevice)` where there is none.
    pub fn new(cfg: VerbsConfig) -> Result<Self> {
        let ud = UdEndpoint::open()?;
        let fabric = RcFabric::open(ud.addr().gid.is_some())?;
        Ok(Self {
            cfg,
            conns: HashMap::new(),
            fabric: Some(fabric),
            ud: Some(ud),
            by_peer: HashMap::new(),
            accepted: VecDeque::new(),
            datagrams: VecDeque::new(),
            matcher: Matcher::default(),
            next_conn: 0,
            next_send: 0,
            next_request: 0,
            send_done: HashMap::new(),
        })
    }

    fn ud(&mut self) -> Result<&mut UdEndpoint> {
        self.ud.as_mut().ok_or(TransportError::Finalized)
    }

    fn fabric(&self) -> Result<&RcFabric> {
        self.fabric.as_ref().ok_or(TransportError::Finalized)
    }

    /// Sends one bootstrap datagram of at most [`super::ud::DATAGRAM_MAX`] bytes.
    /// Unreliable and unsegmented: segmentation and retransmission are the caller's
    /// (dynres-core's datagram layer).
    pub fn send_datagram(&mut self, to: &VerbsAddr, data: &[u8]) -> Result<()> {
        self.ud()?.send(to, KIND_USER, data)
    }

    /// Receives one user datagram (payload, sender's UD queue pair number), waiting up
    /// to `timeout`. Connection-control datagrams are handled on the way.
    pub fn recv_datagram(&mut self, timeout: Duration) -> Result<Option<(Vec<u8>, u32)>> {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll_ud()?;
            if let Some(d) = self.datagrams.pop_front() {
                return Ok(Some(d));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::hint::spin_loop();
        }
    }

    /// Drains the UD queue pair: user datagrams are queued, CONNECTs answered.
    /// Returns ACCEPTs seen (request id → endpoint) for a waiting `connect`.
    fn poll_ud(&mut self) -> Result<Vec<Control>> {
        let mut accepts = Vec::new();
        while let Some((d, qpn)) = self.ud()?.try_recv()? {
            match d.first().copied() {
                Some(KIND_USER) => self.datagrams.push_back((d[1..].to_vec(), qpn)),
                Some(KIND_CONNECT) | Some(KIND_ACCEPT) => match Control::decode(&d) {
                    Some(Control::Connect { from, request, rc }) => {
                        self.answer_connect(from, request, rc)?
                    }
                    Some(a @ Control::Accept { .. }) => accepts.push(a),
                    None => tracing::warn!(qpn, "malformed verbs control datagram dropped"),
                },
                _ => tracing::warn!(qpn, "unknown verbs datagram dropped"),
            }
        }
        Ok(accepts)
    }

    fn answer_connect(
        &mut self,
        from: VerbsAddr,
        request: u64,
        remote: super::wire::RcEndpoint,
    ) -> Result<()> {
        let (pqp, mine) = self.fabric()?.prepare()?;
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        let rc = self.fabric()?.connect(pqp, remote, id.0)?;
        self.conns.insert(
            id,
            Conn {
                rc,
                rx: Rx::Header(Vec::new()),
                peer: Some(from),
                dead: None,
            },
        );
        self.by_peer.entry(from).or_insert(id);
        self.accepted.push_back(id);
        let reply = Control::Accept { request, rc: mine }.encode();
        // The kind byte is part of the encoding; send the rest as the payload.
        self.ud()?.send(&from, reply[0], &reply[1..])
    }

    /// Drains RC completions into the matcher and frees send buffers.
    fn poll_rc(&mut self) -> Result<usize> {
        let mut wcs = [ibverbs::ibv_wc::default(); 32];
        let done: Vec<(u64, bool, usize, usize, Option<String>)> = {
            let fabric = self.fabric()?;
            fabric
                .poll(&mut wcs)?
                .iter()
                .map(|wc| {
                    let (c, s, slot) = split_wr_id(wc.wr_id());
                    (
                        c,
                        s,
                        slot,
                        wc.len(),
                        wc.error().map(|(st, v)| format!("status {st}, vendor {v}")),
                    )
                })
                .collect()
        };
        let mut events = 0;
        for (c, is_send, slot, len, err) in done {
            let id = ConnId(c);
            if let Some(e) = err {
                self.kill(
                    id,
                    TransportError::Verbs {
                        what: "RC work completion",
                        source: std::io::Error::other(e),
                    },
                );
                continue;
            }
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            if is_send {
                conn.rc.send_done(slot);
                continue;
            }
            let bytes = conn.rc.received(slot, len).to_vec();
            events += feed(conn, &mut self.matcher, id, &bytes);
            conn.rc.post_recv(slot)?;
        }
        Ok(events)
    }

    fn kill(&mut self, id: ConnId, err: TransportError) {
        if let Some(c) = self.conns.get_mut(&id) {
            if let Rx::Payload { sink, .. } = std::mem::replace(&mut c.rx, Rx::Header(Vec::new())) {
                self.matcher.abort(sink, &err);
            }
            self.matcher.fail_conn(id, &err);
            c.dead = Some(err);
        }
    }
}

/// Feeds received bytes of one connection through its framing state machine.
fn feed(c: &mut Conn, m: &mut Matcher, id: ConnId, mut bytes: &[u8]) -> usize {
    let mut events = 0;
    while !bytes.is_empty() {
        match &mut c.rx {
            Rx::Header(h) => {
                let k = (RECORD_HEADER_LEN - h.len()).min(bytes.len());
                h.extend_from_slice(&bytes[..k]);
                bytes = &bytes[k..];
                if h.len() == RECORD_HEADER_LEN {
                    let mut rec = [0u8; RECORD_HEADER_LEN];
                    rec.copy_from_slice(h);
                    let header = MsgHeader::from_record(&rec);
                    let sink = m.incoming(id, header);
                    if header.len == 0 {
                        m.finish(sink);
                        events += 1;
                        c.rx = Rx::Header(Vec::new());
                    } else {
                        c.rx = Rx::Payload {
                            header,
                            sink,
                            got: 0,
                        };
                    }
                }
            }
            Rx::Payload { header, sink, got } => {
                let k = (header.len as usize - *got).min(bytes.len());
                if let Some(w) = m.posted_window(*sink) {
                    w[*got..*got + k].copy_from_slice(&bytes[..k]);
                } else {
                    m.append(*sink, *got, &bytes[..k]);
                }
                *got += k;
                bytes = &bytes[k..];
                if *got == header.len as usize {
                    m.finish(*sink);
                    events += 1;
                    c.rx = Rx::Header(Vec::new());
                }
            }
        }
    }
    events
}

impl Device for VerbsDevice {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Verbs
    }

    fn local_address(&self, into: &mut PeerAddrs) {
        into.verbs = self.ud.as_ref().map(|u| u.addr());
    }

    fn reaches(&self, peer: &PeerAddrs) -> bool {
        peer.verbs.is_some()
    }

    fn connect(&mut self, peer: &PeerAddrs) -> Result<ConnId> {
        let to = peer.verbs.ok_or_else(|| TransportError::BadAddress {
            kind: DeviceKind::Verbs,
            reason: "peer has no verbs address".into(),
        })?;
        if let Some(c) = self.by_peer.get(&to) {
            return Ok(*c);
        }
        let (pqp, mine) = self.fabric()?.prepare()?;
        self.next_request += 1;
        let request = self.next_request;
        let from = self.ud()?.addr();
        let msg = Control::Connect {
            from,
            request,
            rc: mine,
        }
        .encode();
        self.ud()?.send(&to, msg[0], &msg[1..])?;
        let deadline = Instant::now() + self.cfg.connect_timeout;
        let remote = loop {
            let accepts = self.poll_ud()?;
            if let Some(rc) = accepts.into_iter().find_map(|a| match a {
                Control::Accept { request: r, rc } if r == request => Some(rc),
                _ => None,
            }) {
                break rc;
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout(
                    self.cfg.connect_timeout,
                    "a verbs ACCEPT",
                ));
            }
            std::hint::spin_loop();
        };
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        let rc = self.fabric()?.connect(pqp, remote, id.0)?;
        self.conns.insert(
            id,
            Conn {
                rc,
                rx: Rx::Header(Vec::new()),
                peer: Some(to),
                dead: None,
            },
        );
        self.by_peer.insert(to, id);
        Ok(id)
    }

    fn accept(&mut self) -> Result<Option<ConnId>> {
        self.poll_ud()?;
        Ok(self.accepted.pop_front())
    }

    fn isend(&mut self, conn: ConnId, header: MsgHeader, payload: Vec<u8>) -> Result<SendHandle> {
        // Registered send buffers already decouple the caller: send from them now.
        self.next_send += 1;
        let h = SendHandle(self.next_send);
        let r = self.send(conn, header, &payload, Duration::from_secs(30));
        self.send_done.insert(h, r);
        Ok(h)
    }

    fn test_send(&mut self, handle: SendHandle) -> Result<bool> {
        match self.send_done.remove(&handle) {
            Some(r) => r.map(|()| true),
            None => Err(TransportError::UnknownHandle(handle.0)),
        }
    }

    fn send(
        &mut self,
        conn: ConnId,
        header: MsgHeader,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let rec = MsgHeader {
            len: payload.len() as u64,
            ..header
        }
        .to_record();
        let mut sent_header = false;
        let mut off = 0;
        while !sent_header || off < payload.len() {
            let c = self
                .conns
                .get_mut(&conn)
                .ok_or(TransportError::UnknownConn(conn.0))?;
            if let Some(e) = &c.dead {
                return Err(e.duplicate());
            }
            if c.rc.can_send() {
                let room = if sent_header {
                    CHUNK
                } else {
                    CHUNK - RECORD_HEADER_LEN
                };
                let k = (payload.len() - off).min(room);
                if sent_header {
                    c.rc.send_chunk(&[&payload[off..off + k]])?;
                } else {
                    c.rc.send_chunk(&[&rec, &payload[off..off + k]])?;
                    sent_header = true;
                }
                off += k;
                continue;
            }
            // Out of send buffers: progress returns them (and drains receives).
            self.progress()?;
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout(timeout, "an RC send buffer"));
            }
        }
        Ok(())
    }

    fn post_recv(&mut self, spec: RecvSpec, buf: Vec<u8>) -> Result<RecvHandle> {
        Ok(self.matcher.post(spec, buf))
    }

    fn test_recv(&mut self, handle: RecvHandle) -> Result<Option<Received>> {
        self.matcher.take(handle)
    }

    fn cancel_recv(&mut self, handle: RecvHandle) -> Result<bool> {
        Ok(self.matcher.cancel(handle))
    }

    fn probe(&mut self, spec: &RecvSpec) -> Option<MsgHeader> {
        self.matcher.probe(spec)
    }

    fn progress(&mut self) -> Result<usize> {
        let n = self.poll_ud()?.len();
        Ok(n + self.poll_rc()?)
    }

    fn wait_activity(&mut self, timeout: Duration) -> Result<()> {
        // Completion channels would allow blocking; polling for a bounded slice keeps
        // latency low and is what HPC verbs codes do.
        let end = Instant::now() + timeout.min(Duration::from_millis(1));
        while Instant::now() < end {
            if self.progress()? > 0 || !self.accepted.is_empty() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    fn disconnect(&mut self, conn: ConnId) -> Result<()> {
        let c = self
            .conns
            .remove(&conn)
            .ok_or(TransportError::UnknownConn(conn.0))?;
        if let Some(p) = c.peer {
            if self.by_peer.get(&p) == Some(&conn) {
                self.by_peer.remove(&p);
            }
        }
        self.matcher.fail_conn(
            conn,
            &TransportError::PeerClosed {
                conn: conn.0,
                mid_message: false,
            },
        );
        Ok(())
    }

    fn finalize(&mut self) -> Result<()> {
        // Queue pairs and memory regions first, then what they borrow from.
        self.conns.clear();
        self.by_peer.clear();
        self.fabric = None;
        self.ud = None;
        Ok(())
    }
}

impl Drop for VerbsDevice {
    fn drop(&mut self) {
        // Enforce the teardown order even if the owner never called finalize.
        let _ = self.finalize();
    }
}
