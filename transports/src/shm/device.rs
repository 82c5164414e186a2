//! The shared-memory [`Device`].

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::cma;
use super::layout::{
    ACK_DONE, ACK_FALLBACK, CMA_NO, CMA_OK, Inbox, SLOT_CLAIMED, SLOT_CLOSED, SLOT_OPEN, Slot,
};
use super::record::{
    FLAG_RTS, RTS_DESC_LEN, pad_for, parse_head, parse_rts, push_message, push_whole, rts_record,
    stream_chunk,
};
use super::ring::{Consumer, LINE, Producer, RawStorage};
use super::segment::{self, pid_alive};
use super::waiter::{
    WaitOutcome, arm_wake_flag, arm_wake_flags, calibrated_spins, spins_from_env, take_wake_flag,
};
use crate::addr::{PeerAddrs, ShmAddr};
use crate::device::{
    ConnId, Device, DeviceKind, FastRecv, Received, RecvHandle, RecvSpec, SendHandle, recv_blocking,
};
use crate::error::{Result, TransportError};
use crate::header::{MsgHeader, RECORD_HEADER_LEN};
use crate::idmap::IdMap;
use crate::matching::{Matcher, Sink};
use crate::sync::{AtomicU32, Ordering};

/// Tunables of the shared-memory device.
#[derive(Clone, Debug)]
pub struct ShmConfig {
    /// Connection slots in our inbox itself. More peers than that may send to us at
    /// once: they add slots in extensions (`DATA-10`).
    pub slots: usize,
    /// Connection slots in each extension of our inbox (`DATA-10`).
    pub ext_slots: usize,
    /// Bytes per ring (power of two, at least 64 KiB).
    pub ring_bytes: usize,
    /// Messages up to this size are copied as one record; larger ones stream.
    pub eager_threshold: usize,
    /// How often a blocked wait re-checks that its peers are alive.
    pub liveness_interval: Duration,
    /// Spin iterations before a wait blocks on the futex. `None`: calibrated once per
    /// process (a block+wake's worth). A host running more processes than it has cores
    /// wants `Some(0)` (`DATA-12`): a spinning process only takes the core from the
    /// one it waits for, and the calibration, timed under that load, asks for the
    /// longest spins. `DYNRES_SHM_SPINS` overrides either.
    pub spins: Option<u32>,
    /// When large messages are sent by single copy (the receiver reads them from our
    /// memory with `process_vm_readv`, once its probe showed it may; [`super::cma`]).
    /// The environment variable `DYNRES_SHM_CMA` overrides it (see [`CmaMode`]).
    pub cma: CmaMode,
}

/// When messages go by single copy instead of through the ring. Only messages above
/// [`ShmConfig::eager_threshold`] ever do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmaMode {
    /// Never: the ring carries everything.
    Off,
    /// From `threshold` bytes on, if a one-time measurement in this process shows a
    /// single-copy read is about as fast as a `memcpy` ([`cma::single_copy_pays`]): the
    /// ring path costs about one copy's time (its two copies overlap), so a slower read
    /// would make large messages slower, not faster. `DYNRES_SHM_CMA=auto`.
    Auto {
        /// Smallest message sent by single copy.
        threshold: usize,
    },
    /// From `threshold` bytes on, whatever it costs. `DYNRES_SHM_CMA=<bytes>`;
    /// `DYNRES_SHM_CMA=0` is [`CmaMode::Off`].
    On {
        /// Smallest message sent by single copy.
        threshold: usize,
    },
}

impl CmaMode {
    /// The mode after the `DYNRES_SHM_CMA` override, if set and valid.
    fn with_env_override(self) -> Self {
        match std::env::var(cma::CMA_ENV).ok().as_deref().map(str::trim) {
            Some("0" | "off") => CmaMode::Off,
            Some("auto") => CmaMode::Auto {
                threshold: DEFAULT_CMA_THRESHOLD,
            },
            Some(v) => match v.parse() {
                Ok(threshold) => CmaMode::On { threshold },
                Err(_) => {
                    tracing::warn!(value = v, "ignoring unparsable {}", cma::CMA_ENV);
                    self
                }
            },
            None => self,
        }
    }

    /// The threshold in force in this process (`None`: ring only).
    fn threshold(self) -> Option<usize> {
        match self {
            CmaMode::Off => None,
            CmaMode::Auto { threshold } => cma::single_copy_pays().then_some(threshold),
            CmaMode::On { threshold } => Some(threshold),
        }
    }
}

impl Default for ShmConfig {
    fn default() -> Self {
        Self {
            // Small, since a ring costs memory only once used (`DATA-11`) and more
            // slots come on demand; enough for a job of up to 33 processes per host
            // without an extension.
            slots: 32,
            ext_slots: 64,
            ring_bytes: 256 * 1024,
            eager_threshold: 8 * 1024,
            liveness_interval: Duration::from_millis(20),
            spins: None,
            cma: CmaMode::Auto {
                threshold: DEFAULT_CMA_THRESHOLD,
            },
        }
    }
}

/// Default single-copy threshold ([`CmaMode`]): below it the pipelined ring copy
/// (both copies in cache) beats a system call plus page pinning.
pub const DEFAULT_CMA_THRESHOLD: usize = 64 * 1024;

/// Most peers whose process one liveness check looks up (`DATA-12`): each look is two
/// system calls and a `/proc` read, and a waiting process checks every
/// `liveness_interval`, so checking all of hundreds of peers each time made waiting on
/// a crowded host cost more than the messages (issue 29). The check goes round the
/// connections in turns of this many, so a dead peer is seen within
/// `ceil(peers / LIVENESS_BATCH)` checks.
const LIVENESS_BATCH: usize = 16;

/// Turns of the receive fast path's spin taken without a `pause` (see
/// `ShmDevice::recv_fast`).
const HOT_TURNS: u32 = 256;

/// Receive-side state of one connection.
enum Rx {
    Idle,
    /// Padding after a record, so the next header starts a cache line.
    Pad(usize),
    Payload {
        header: MsgHeader,
        sink: Sink,
        got: usize,
        /// Padding after the payload, to the next line.
        pad: usize,
    },
    /// A single-copy request: the payload is at `addr` in the sender, waiting to be
    /// read (when a receive is posted for it) and acknowledged under `seq`.
    Cma {
        header: MsgHeader,
        sink: Sink,
        addr: u64,
        seq: u64,
    },
}

impl Rx {
    /// Whether a message is partly received (or, single copy, not yet read).
    fn mid_message(&self) -> bool {
        matches!(self, Rx::Payload { .. } | Rx::Cma { .. })
    }

    /// The sink of a message in progress, leaving the state idle.
    fn take_sink(&mut self) -> Option<Sink> {
        match std::mem::replace(self, Rx::Idle) {
            Rx::Payload { sink, .. } | Rx::Cma { sink, .. } => Some(sink),
            Rx::Idle | Rx::Pad(_) => None,
        }
    }
}

/// Send-side progress of one message.
#[derive(Default)]
struct TxState {
    header_sent: bool,
    /// Payload plus padding bytes pushed into the ring.
    sent: usize,
    /// The single-copy request sent for it, until the receiver answers.
    cma_seq: Option<u64>,
    /// Record bytes between header and payload: the descriptor of a refused
    /// single-copy request, which the payload then follows in the ring.
    lead: usize,
}

struct PendingSend {
    handle: SendHandle,
    header: MsgHeader,
    payload: Vec<u8>,
    st: TxState,
}

struct Conn {
    peer_pid: u32,
    peer_name: String,
    /// The peer's inbox (where our outgoing ring lives, and its futex word).
    peer: Inbox,
    out: Producer<RawStorage>,
    /// Our slot in the peer's inbox.
    out_slot: usize,
    /// The ring the peer writes to us, once it has opened it.
    inbound: Option<(usize, Consumer<RawStorage>)>,
    rx: Rx,
    tx: VecDeque<PendingSend>,
    /// A large message nobody has asked for yet is waiting in the ring (rendezvous:
    /// it is copied once, into the receive buffer, when a receive is posted).
    stalled: bool,
    /// Single-copy requests sent on this connection (their sequence numbers).
    cma_seq: u64,
    /// The request whose answer a send on this connection is waiting for.
    cma_wait: Option<u64>,
}

impl Conn {
    /// The state of our single-copy request `seq` (our slot in the peer's inbox).
    fn request_status(&self, seq: u64) -> Option<u64> {
        self.peer.slot(self.out_slot).request_status(seq)
    }

    /// Whether the request we wait for was answered (DONE or FALLBACK).
    fn ack_arrived(&self) -> bool {
        self.cma_wait
            .is_some_and(|seq| matches!(self.request_status(seq), Some(ACK_DONE | ACK_FALLBACK)))
    }

    /// Withdraws request `seq` if the receiver has not claimed it: true means it will
    /// never read the buffer. False: it is reading or has answered.
    fn withdraw(&mut self, seq: u64) -> bool {
        let ok = self.peer.slot(self.out_slot).withdraw_request(seq);
        if ok {
            self.cma_wait = None;
        }
        ok
    }
}

/// Pushes as much of one message as it can. Large enough messages to a receiver that
/// probed us go as a single-copy request; the message is done when the receiver
/// answers DONE, and streams through the ring (after the request, which stands for
/// the header) if it answers FALLBACK. Everything else takes the ring path. Returns
/// (done, published something the peer must be woken for).
fn advance(
    c: &mut Conn,
    header: &MsgHeader,
    payload: &[u8],
    eager: usize,
    cma_min: Option<usize>,
    st: &mut TxState,
) -> (bool, bool) {
    if let Some(seq) = st.cma_seq {
        match c.request_status(seq) {
            Some(ACK_DONE) => {
                st.cma_seq = None;
                c.cma_wait = None;
                return (true, false);
            }
            Some(ACK_FALLBACK) => {
                st.cma_seq = None;
                c.cma_wait = None;
                st.lead = RTS_DESC_LEN;
            }
            // Not answered yet, or being read.
            _ => return (false, false),
        }
    } else if !st.header_sent
        && payload.len() > eager
        && cma_min.is_some_and(|m| payload.len() >= m)
        && c.peer.slot(c.out_slot).cma.load(Ordering::Relaxed) == CMA_OK
    {
        let seq = c.cma_seq + 1;
        let ((words, mark), desc) = rts_record(header, payload.as_ptr() as u64, seq);
        if !c.out.push_stamped(&words, mark, &desc, 0) {
            return (false, false);
        }
        c.cma_seq = seq;
        c.cma_wait = Some(seq);
        st.header_sent = true;
        st.sent = 0;
        st.cma_seq = Some(seq);
        return (false, true);
    }
    let before = (st.header_sent, st.sent);
    let done = push_message(
        &mut c.out,
        header,
        payload,
        eager,
        st.lead,
        &mut st.header_sent,
        &mut st.sent,
    );
    (done, (st.header_sent, st.sent) != before)
}

/// What one of our inbox slots feeds.
///
/// Slot recycling rule: a slot goes back to FREE only once nothing can write to it —
/// its sender closed it (`SLOT_CLOSED`, stored after its last write and together with
/// dropping its producer) or its process is dead. Our own end of a connection going
/// away proves neither: the sender may be in the middle of a push, and resetting the
/// ring under it, or handing the slot to a new claimer, would interleave two
/// producers in one ring. Such a slot becomes an [`SlotUse::Orphan`] until its sender
/// closes (seen at the next slot scan: the close bumps `conn_gen`) or dies (seen by the
/// liveness check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotUse {
    /// Attached to nothing: free, being claimed, or opened and not scanned yet.
    Unattached,
    /// The inbound ring of a live connection.
    Conn(ConnId),
    /// Its connection is gone but its sender may still write: recycled later.
    Orphan,
}

/// Shared-memory device. See the [module docs](super).
pub struct ShmDevice {
    cfg: ShmConfig,
    spins: u32,
    addr: ShmAddr,
    /// Our inbox (declared before `conns` is irrelevant: conns map peers, not this).
    inbox: Option<Inbox>,
    /// Live connections.
    conns: IdMap<ConnId, Conn>,
    /// Tombstones of connections whose peer closed or died, until they are
    /// disconnected: operations on them fail with this. Everything else of such a
    /// connection (rings, the mapping of the peer's inbox) is released at once.
    dead: IdMap<ConnId, TransportError>,
    /// Keys of `conns`, kept in step, so hot loops need not allocate.
    ids: Vec<ConnId>,
    progress_calls: u32,
    /// Live connections by the peer's inbox name.
    by_name: HashMap<String, ConnId>,
    /// What each of our inbox slots feeds.
    slot_use: Vec<SlotUse>,
    /// How many of `slot_use` are orphans (so the common case skips looking for them).
    orphans: usize,
    seen_gen: u32,
    /// Connections opened by peers and not yet returned by `accept` (live or dead;
    /// removed on disconnect).
    accepted: VecDeque<ConnId>,
    matcher: Matcher,
    next_conn: u64,
    next_send: u64,
    send_done: IdMap<SendHandle, Result<()>>,
    scratch: Vec<u8>,
    last_liveness: Instant,
    /// Where in `ids` the next liveness check starts (see [`LIVENESS_BATCH`]).
    liveness_cursor: usize,
    /// Effective single-copy threshold (config and environment); `None`: ring only.
    cma_min: Option<usize>,
    /// A single-copy read found its sender gone: check peers at the next progress.
    peer_gone: bool,
    /// Messages received by single copy.
    cma_reads: u64,
    /// Test hook: the next single-copy message's reads fail as if refused (`EPERM`)
    /// from this payload offset on.
    #[cfg(test)]
    refuse_read_at: Option<usize>,
    /// Test hook: receives the fast path completed.
    #[cfg(test)]
    fast_receives: u64,
}

impl ShmDevice {
    /// Creates this process' inbox and sweeps segments left by dead processes.
    pub fn new(cfg: ShmConfig) -> Result<Self> {
        assert!(cfg.ring_bytes.is_power_of_two() && cfg.ring_bytes >= 64 * 1024);
        assert!(cfg.eager_threshold + RECORD_HEADER_LEN <= cfg.ring_bytes / 4);
        if std::env::var_os(segment::REAPED_ENV).is_none_or(|v| v != "1") {
            segment::reap_stale();
        }
        let cma_min = cfg.cma.with_env_override().threshold();
        tracing::debug!(?cma_min, "shm single-copy threshold");
        // Publish the probe word only if we take part: a receiver probing a process
        // that publishes none reads address 0, fails, and uses the ring.
        let probe = if cma_min.is_some() {
            cma::allow_peers();
            cma::probe_target()
        } else {
            (0, 0)
        };
        // Register for peers' membarriers now, not at the first receive (see
        // `waiter::take_wake_flag`).
        crate::sync::asymmetric_barriers();
        let inbox = Inbox::create_with_probe(cfg.slots, cfg.ext_slots, cfg.ring_bytes, probe)?;
        let name = inbox.seg.name().to_owned();
        tracing::debug!(segment = %name, "shm inbox created");
        let spins = match (spins_from_env(), cfg.spins) {
            (None, Some(s)) => s,
            _ => calibrated_spins(),
        };
        Ok(Self {
            spins,
            addr: ShmAddr {
                host_id: ShmAddr::local_host_id(),
                pid: std::process::id(),
                segment: name,
            },
            slot_use: vec![SlotUse::Unattached; cfg.slots],
            orphans: 0,
            cfg,
            inbox: Some(inbox),
            conns: IdMap::default(),
            dead: IdMap::default(),
            ids: Vec::new(),
            progress_calls: 0,
            by_name: HashMap::new(),
            seen_gen: 0,
            accepted: VecDeque::new(),
            matcher: Matcher::default(),
            next_conn: 0,
            next_send: 0,
            send_done: IdMap::default(),
            scratch: vec![0; 64 * 1024],
            last_liveness: Instant::now(),
            liveness_cursor: 0,
            cma_min,
            peer_gone: false,
            cma_reads: 0,
            #[cfg(test)]
            refuse_read_at: None,
            #[cfg(test)]
            fast_receives: 0,
        })
    }

    /// Our shared-memory address.
    pub fn addr(&self) -> &ShmAddr {
        &self.addr
    }

    /// How many messages this device received by single copy (`process_vm_readv`)
    /// rather than through a ring: a diagnostic that shows which path carried them.
    pub fn single_copy_receives(&self) -> u64 {
        self.cma_reads
    }

    /// The single-copy threshold in force (`None`: this device sends and receives
    /// everything through rings).
    pub fn single_copy_threshold(&self) -> Option<usize> {
        self.cma_min
    }

    /// The spin budget in use (calibrated block+wake cost in spin iterations).
    pub fn spins(&self) -> u32 {
        self.spins
    }

    fn inbox(&self) -> Result<&Inbox> {
        self.inbox.as_ref().ok_or(TransportError::Finalized)
    }

    /// Opens a connection to the inbox `name` (owned by `pid`).
    fn open_conn(&mut self, name: &str) -> Result<ConnId> {
        if let Some(c) = self.by_name.get(name) {
            return Ok(*c);
        }
        let peer = Inbox::open(name)?;
        let out_slot = peer.claim(&self.addr.segment)?;
        // SAFETY: the ring lives in `peer`'s mapping, which the Conn keeps alive as long
        // as the producer (same struct, dropped together); we hold the slot's claim, so
        // we are its only producer.
        let out = unsafe {
            let (ctrl, data) = peer.ring(out_slot);
            Producer::new(ctrl, data)
        };
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        self.conns.insert(
            id,
            Conn {
                peer_pid: peer.owner_pid(),
                peer_name: name.to_owned(),
                peer,
                out,
                out_slot,
                inbound: None,
                rx: Rx::Idle,
                tx: VecDeque::new(),
                stalled: false,
                cma_seq: 0,
                cma_wait: None,
            },
        );
        self.by_name.insert(name.to_owned(), id);
        self.ids.push(id);
        tracing::debug!(peer = name, conn = id.0, "shm connection opened");
        Ok(id)
    }

    /// Scans our inbox after a sender opened or closed a slot: recycles orphans whose
    /// sender closed, ends connections whose sender closed, and attaches newly opened
    /// slots to connections (opening the way back to new peers).
    fn scan_slots(&mut self) -> Result<usize> {
        let inbox = self.inbox.as_ref().ok_or(TransportError::Finalized)?;
        // Acquire: a sender bumps the generation after storing OPEN or CLOSED, so the
        // loads below see at least the states behind the bump we saw.
        let gen_now = inbox.header().conn_gen.0.load(Ordering::Acquire);
        if gen_now == self.seen_gen {
            return Ok(0);
        }
        self.seen_gen = gen_now;
        self.map_extensions()?;
        let mut events = self.reclaim_slots(false);
        let inbox = self.inbox.as_ref().ok_or(TransportError::Finalized)?;
        let mut found = Vec::new();
        let mut closed = Vec::new();
        for i in 0..self.slot_use.len() {
            let st = inbox.slot(i).state.load(Ordering::Acquire);
            match self.slot_use[i] {
                // A slot closed before we ever saw it open may still hold messages: it
                // is attached (and then ended) like any other.
                SlotUse::Unattached if st == SLOT_OPEN || st == SLOT_CLOSED => {
                    found.push((i, inbox.sender_name(i)));
                }
                SlotUse::Conn(id) if st == SLOT_CLOSED => closed.push(id),
                _ => {}
            }
        }
        // Ended first: a sender that closed and connected again has its old slot and a
        // new one here, and the new one must start a new connection.
        for id in closed {
            events += self.retire(id, true);
        }
        for (i, name) in found {
            if let Some(old) = self.by_name.get(&name).copied() {
                if self.conns.get(&old).is_some_and(|c| c.inbound.is_some()) {
                    // A second slot from the same sender: it only opens one after
                    // dropping its connection that used the first, so that connection
                    // is over even if we have not seen its close yet (its slot stays an
                    // orphan until we do).
                    events += self.retire(old, true);
                }
            }
            let conn = match self.by_name.get(&name).copied() {
                Some(c) => c,
                None => match self.open_conn(&name) {
                    Ok(c) => {
                        self.accepted.push_back(c);
                        c
                    }
                    Err(e) => {
                        let inbox = self.inbox.as_ref().ok_or(TransportError::Finalized)?;
                        let s = inbox.slot(i);
                        if s.is_closed() {
                            // It connected, sent, closed and finalized (unlinking its
                            // inbox) before this scan: what it sent is in the ring all
                            // the same, and must be delivered, not dropped with the
                            // slot.
                            tracing::debug!(peer = %name, error = %e, "sender gone before its slot was scanned");
                            events += self.adopt_closed_slot(i)?;
                            continue;
                        }
                        // The sender vanished (or its inbox is not acceptable) before we
                        // could open the way back.
                        tracing::warn!(peer = %name, error = %e, "cannot open sender inbox");
                        if producer_dead(s) {
                            inbox.free_slot(i);
                        }
                        continue;
                    }
                },
            };
            let inbox = self.inbox.as_ref().ok_or(TransportError::Finalized)?;
            // SAFETY: our own mapping outlives every connection (finalize drops conns
            // first); the sender's claim makes us the only consumer of slot `i`.
            let cons = unsafe {
                let (ctrl, data) = inbox.ring(i);
                Consumer::new(ctrl, data)
            };
            let closed_now = inbox.slot(i).is_closed();
            if let Some(c) = self.conns.get(&conn) {
                // May we read this sender's memory? Asked once per connection, before
                // it can send a single-copy request (it waits for CMA_OK).
                let ph = c.peer.header();
                let ok = self.cma_min.is_some()
                    && ph.cma_probe_addr != 0
                    && cma::probe(c.peer_pid, ph.cma_probe_addr, ph.cma_probe_token);
                inbox
                    .slot(i)
                    .cma
                    .store(if ok { CMA_OK } else { CMA_NO }, Ordering::Relaxed);
                tracing::debug!(conn = conn.0, single_copy = ok, "shm inbound ring attached");
            }
            if let Some(c) = self.conns.get_mut(&conn) {
                c.inbound = Some((i, cons));
                self.slot_use[i] = SlotUse::Conn(conn);
                events += 1;
                if closed_now {
                    events += self.retire(conn, true);
                }
            }
        }
        Ok(events)
    }

    /// Accepts closed slot `i`, whose sender's inbox is gone, as a connection that is
    /// already over: its complete messages go to the matcher under a new id (returned
    /// by `accept`, readable like those of any closed connection), the id is left as a
    /// tombstone, and the slot is recycled. Without a way back to the sender there is
    /// no [`Conn`] to run `drain` on; nothing writes to a closed ring, so a plain walk
    /// over its records suffices. A single-copy request or a record cut short (the
    /// sender gave up on those sends when it closed) ends the walk as `mid_message`.
    /// Returns the events (messages delivered + 1).
    fn adopt_closed_slot(&mut self, i: usize) -> Result<usize> {
        let inbox = self.inbox.as_ref().ok_or(TransportError::Finalized)?;
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        // SAFETY: our own mapping outlives the consumer (dropped below); the sender
        // closed the slot, so nothing else reads or writes the ring until we free it.
        let mut cons = unsafe {
            let (ctrl, data) = inbox.ring(i);
            Consumer::new(ctrl, data)
        };
        let mut events = 1;
        let mut mid_message = false;
        while cons.available() > 0 {
            let Some((words, mark)) = cons.peek_header() else {
                mid_message = true;
                break;
            };
            let (header, flags) = parse_head(&words, mark);
            let len = header.len as usize;
            if flags & FLAG_RTS != 0 || cons.available() < RECORD_HEADER_LEN + len + pad_for(len) {
                mid_message = true;
                break;
            }
            cons.discard(RECORD_HEADER_LEN);
            let sink = self.matcher.incoming(id, header);
            let mut got = 0;
            while got < len {
                let want = (len - got).min(self.scratch.len());
                let n = cons.pop_some(&mut self.scratch[..want]);
                if n == 0 {
                    // Cannot happen (the whole record is published, checked above);
                    // a safeguard against spinning on a corrupt ring.
                    break;
                }
                self.matcher.append(sink, got, &self.scratch[..n]);
                got += n;
            }
            cons.discard(pad_for(len));
            self.matcher.finish(sink);
            events += 1;
        }
        drop(cons);
        inbox.free_slot(i);
        let err = TransportError::PeerClosed {
            conn: id.0,
            mid_message,
        };
        tracing::info!(conn = id.0, error = %err, "shm peer gone before its first scan");
        self.matcher.fail_conn(id, &err);
        self.dead.insert(id, err);
        self.accepted.push_back(id);
        Ok(events)
    }

    /// Maps the extensions of our inbox published so far (a sender publishes one before
    /// the claim whose `conn_gen` bump led us here) and gives their slots a
    /// [`SlotUse`].
    fn map_extensions(&mut self) -> Result<()> {
        let inbox = self.inbox.as_ref().ok_or(TransportError::Finalized)?;
        inbox.map_extensions()?;
        let n = inbox.nslots();
        if n > self.slot_use.len() {
            tracing::debug!(slots = n, "shm inbox extended");
            self.slot_use.resize(n, SlotUse::Unattached);
        }
        Ok(())
    }

    /// Recycles orphaned slots whose sender closed them (or, with `check_pids`, died),
    /// and slots left claimed by a sender that died before opening them. Returns how
    /// many were recycled.
    fn reclaim_slots(&mut self, check_pids: bool) -> usize {
        if self.orphans == 0 && !check_pids {
            return 0;
        }
        let Some(inbox) = self.inbox.as_ref() else {
            return 0;
        };
        let mut n = 0;
        // `slot_use` covers the slots mapped at the last scan; later ones are unseen.
        for i in 0..self.slot_use.len() {
            let s = inbox.slot(i);
            let recycle = match self.slot_use[i] {
                SlotUse::Orphan if s.is_closed() => true,
                SlotUse::Orphan if check_pids && producer_dead(s) => {
                    // It died without closing, so nobody unlinked its inbox (we had
                    // already dropped our connection to it): cleanup on peer crash.
                    let name = inbox.sender_name(i);
                    if segment::owner_of(&name) == Some(s.pid.load(Ordering::Relaxed)) {
                        segment::unlink(&name);
                    }
                    true
                }
                SlotUse::Unattached => {
                    check_pids
                        && s.state.load(Ordering::Acquire) == SLOT_CLAIMED
                        && producer_dead(s)
                }
                SlotUse::Orphan | SlotUse::Conn(_) => false,
            };
            if recycle {
                if self.slot_use[i] == SlotUse::Orphan {
                    self.orphans -= 1;
                }
                self.slot_use[i] = SlotUse::Unattached;
                inbox.free_slot(i);
                n += 1;
            }
        }
        if n > 0 {
            tracing::debug!(slots = n, "shm inbox slots recycled");
        }
        n
    }

    /// Detaches inbox slot `slot` from its connection: recycled now if nothing can write
    /// to it any more, else left as an orphan (see [`SlotUse`]).
    fn release_slot(&mut self, slot: usize) {
        let Some(inbox) = self.inbox.as_ref() else {
            return;
        };
        let s = inbox.slot(slot);
        if s.is_closed() || producer_dead(s) {
            self.slot_use[slot] = SlotUse::Unattached;
            inbox.free_slot(slot);
        } else {
            self.slot_use[slot] = SlotUse::Orphan;
            self.orphans += 1;
        }
    }

    /// Drains every inbound ring into the matcher.
    fn drain_all(&mut self) -> usize {
        let mut events = 0;
        for i in 0..self.ids.len() {
            events += self.drain(self.ids[i], false);
        }
        events
    }

    /// Drains one connection's inbound ring (records and payload chunks). `closing`:
    /// the peer is gone, so a large unmatched message cannot wait in the ring for its
    /// receive (the ring is about to be recycled) and is buffered like a small one.
    fn drain(&mut self, id: ConnId, closing: bool) -> usize {
        let Some(c) = self.conns.get_mut(&id) else {
            return 0;
        };
        let Some((slot, cons)) = c.inbound.as_mut() else {
            return 0;
        };
        let slot = *slot;
        let mut events = 0;
        let mut popped = false;
        loop {
            if let Rx::Cma {
                header,
                sink,
                addr,
                seq,
            } = c.rx
            {
                // A closing sender's buffer is not to be read: `retire` fails the
                // message as cut off.
                let Some(inbox) = self.inbox.as_ref().filter(|_| !closing) else {
                    break;
                };
                let discard = sink == Sink::Discard;
                if !discard
                    && self.matcher.posted_window(sink).is_none()
                    && !self.matcher.has_posted_for(id)
                {
                    // Rendezvous, as for a large message in the ring: read it when a
                    // receive is posted, straight into that buffer.
                    c.stalled = true;
                    break;
                }
                let ack = inbox.slot(slot);
                // Claim the request, unless the sender withdrew it (then its buffer may
                // be gone): from here on it waits for our answer.
                if !ack.claim_request(seq) {
                    let err = TransportError::SendWithdrawn {
                        conn: id.0,
                        len: header.len,
                    };
                    self.matcher.abort(sink, &err);
                    c.rx = Rx::Idle;
                    events += 1;
                    continue;
                }
                let len = header.len as usize;
                let pid = c.peer_pid;
                #[cfg(test)]
                let refuse_at = self.refuse_read_at.take();
                #[cfg(not(test))]
                let refuse_at = None;
                let read = |off: usize, dst: &mut [u8]| match refuse_at {
                    Some(at) if off + dst.len() > at => {
                        let ok = at.saturating_sub(off);
                        cma::read_remote(pid, addr + off as u64, &mut dst[..ok])?;
                        Err(cma::ReadError::Refused(std::io::Error::from_raw_os_error(
                            libc::EPERM,
                        )))
                    }
                    _ => cma::read_remote(pid, addr + off as u64, dst),
                };
                let res = if discard {
                    Ok(())
                } else if let Some(win) = self.matcher.posted_window(sink) {
                    read(0, &mut win[..len])
                } else {
                    // Unexpected, with a receive posted behind it: buffer it (what the
                    // ring path does). Read a bounded piece at a time (the length is
                    // the peer's word) and hand it over only once complete: after a
                    // refused read the payload comes again through the ring, from 0.
                    let mut off = 0;
                    let mut r = Ok(());
                    let mut whole = Vec::new();
                    while off < len && r.is_ok() {
                        let k = (len - off).min(self.scratch.len());
                        r = read(off, &mut self.scratch[..k]);
                        whole.extend_from_slice(&self.scratch[..k]);
                        off += k;
                    }
                    if r.is_ok() {
                        self.matcher.append(sink, 0, &whole);
                    }
                    r
                };
                match res {
                    Ok(()) => {
                        // Release: our reads of its buffer happen before it reuses it.
                        ack.answer_request(seq, ACK_DONE);
                        notify_peer(&c.peer);
                        cma::note_transfer();
                        self.cma_reads += 1;
                        self.matcher.finish(sink);
                        c.rx = Rx::Idle;
                        events += 1;
                    }
                    Err(cma::ReadError::Refused(e)) => {
                        tracing::warn!(conn = id.0, pid, error = %e, "single-copy read refused: ring path for this sender");
                        inbox.slot(slot).cma.store(CMA_NO, Ordering::Relaxed);
                        ack.answer_request(seq, ACK_FALLBACK);
                        notify_peer(&c.peer);
                        // The payload now follows in the ring, as after a header (after the
                        // request's descriptor, so its padding counts that too).
                        c.rx = Rx::Payload {
                            header,
                            sink,
                            got: 0,
                            pad: pad_for(RTS_DESC_LEN + len),
                        };
                    }
                    Err(cma::ReadError::Gone) => {
                        // It died: the liveness check retires it (mid-message).
                        self.peer_gone = true;
                        break;
                    }
                }
                continue;
            }
            if cons.available() == 0 {
                break;
            }
            popped = true;
            match &mut c.rx {
                Rx::Idle => {
                    let Some((words, mark)) = cons.peek_header() else {
                        break;
                    };
                    let (header, flags) = parse_head(&words, mark);
                    if flags & FLAG_RTS != 0 {
                        // A single-copy request: published whole, header + descriptor.
                        let mut desc = [0u8; RTS_DESC_LEN];
                        if cons.available() < RECORD_HEADER_LEN + RTS_DESC_LEN {
                            break;
                        }
                        cons.discard(RECORD_HEADER_LEN);
                        cons.pop_exact(&mut desc);
                        let (addr, seq) = parse_rts(&desc);
                        let sink = self.matcher.incoming(id, header);
                        c.rx = Rx::Cma {
                            header,
                            sink,
                            addr,
                            seq,
                        };
                        continue;
                    }
                    cons.discard(RECORD_HEADER_LEN);
                    let sink = self.matcher.incoming(id, header);
                    if header.len == 0 {
                        self.matcher.finish(sink);
                        events += 1;
                        c.rx = Rx::Pad(pad_for(0));
                    } else {
                        c.rx = Rx::Payload {
                            header,
                            sink,
                            got: 0,
                            pad: pad_for(header.len as usize),
                        };
                    }
                }
                Rx::Payload {
                    header,
                    sink,
                    got,
                    pad,
                } => {
                    let len = header.len as usize;
                    let n = if let Some(win) = self.matcher.posted_window(*sink) {
                        // Fast path: straight from the ring into the user's buffer.
                        let end = len.min(*got + stream_chunk(self.cfg.ring_bytes));
                        cons.pop_some(&mut win[*got..end])
                    } else if !closing
                        && len > self.cfg.eager_threshold
                        && matches!(sink, Sink::Unexpected(_))
                        && !self.matcher.has_posted_for(id)
                    {
                        // Rendezvous: leave it in the ring until a receive is posted,
                        // unless a posted receive is waiting behind it.
                        c.stalled = true;
                        break;
                    } else {
                        let want = (len - *got).min(self.scratch.len());
                        let n = cons.pop_some(&mut self.scratch[..want]);
                        self.matcher.append(*sink, *got, &self.scratch[..n]);
                        n
                    };
                    if n == 0 {
                        break;
                    }
                    *got += n;
                    if *got == len {
                        self.matcher.finish(*sink);
                        // A record that ends on a line has no padding: idle at once.
                        // (`Pad(0)` would stay until the next record arrives, and the
                        // receive fast path, which wants an idle connection, would be
                        // declined for every later message of such a size.)
                        c.rx = if *pad == 0 { Rx::Idle } else { Rx::Pad(*pad) };
                        events += 1;
                    }
                }
                Rx::Cma { .. } => unreachable!("handled before the ring is read"),
                Rx::Pad(n) => {
                    let k = cons.pop_some(&mut self.scratch[..*n]);
                    if k == 0 && *n > 0 {
                        break;
                    }
                    *n -= k;
                    if *n == 0 {
                        c.rx = Rx::Idle;
                    }
                }
            }
        }
        if popped {
            if let Some(inbox) = self.inbox.as_ref() {
                if take_wake_flag(&inbox.slot(slot).waiting) {
                    notify_peer(&c.peer);
                }
            }
        }
        events
    }

    /// Pushes queued sends on every connection.
    fn push_all_pending(&mut self) -> usize {
        let mut events = 0;
        let eager = self.cfg.eager_threshold;
        let cma_min = self.cma_min;
        for c in self.conns.values_mut() {
            // Popped while it moves (`advance` needs the whole connection); moving a
            // PendingSend does not move its payload's heap buffer, which a single-copy
            // request points to.
            while let Some(mut p) = c.tx.pop_front() {
                let (done, moved) = advance(c, &p.header, &p.payload, eager, cma_min, &mut p.st);
                if moved {
                    notify_peer(&c.peer);
                }
                if !done {
                    c.tx.push_front(p);
                    break;
                }
                self.send_done.insert(p.handle, Ok(()));
                events += 1;
            }
        }
        events
    }

    /// Checks peers for death or close; fails what depended on them. Also recycles
    /// slots whose sender died without closing them.
    fn check_peers(&mut self) -> Result<usize> {
        self.last_liveness = Instant::now();
        self.inbox()?;
        let mut events = self.reclaim_slots(true);
        let ids = self.ids.clone();
        // A close is one load to see; a death is looked up for a turn of
        // LIVENESS_BATCH connections only (DATA-12).
        let n = ids.len();
        let start = self.liveness_cursor % n.max(1);
        self.liveness_cursor = start + LIVENESS_BATCH;
        let in_turn = |k: usize| (k + n - start) % n < LIVENESS_BATCH;
        for (k, id) in ids.into_iter().enumerate() {
            let Some(c) = self.conns.get(&id) else {
                continue;
            };
            let closed = match (self.inbox.as_ref(), c.inbound.as_ref()) {
                (Some(inbox), Some((slot, _))) => inbox.slot(*slot).is_closed(),
                _ => false,
            };
            let alive = !in_turn(k) || pid_alive(c.peer_pid);
            if alive && !closed {
                continue;
            }
            events += self.retire(id, alive);
        }
        Ok(events)
    }

    /// Ends a connection whose peer closed its side (`alive`) or died: delivers what it
    /// sent completely, fails what depended on it, releases both rings and our mapping
    /// of the peer's inbox, and leaves a tombstone so later operations on `id` fail the
    /// same way until it is disconnected. Returns the events (drained messages + 1).
    fn retire(&mut self, id: ConnId, alive: bool) -> usize {
        // Deliver whatever it managed to send completely before going away.
        let events = self.drain(id, true);
        let Some(mut c) = self.conns.remove(&id) else {
            return events;
        };
        self.ids.retain(|i| *i != id);
        self.by_name.remove(&c.peer_name);
        let pid = c.peer_pid;
        let mid_message = c.rx.mid_message();
        let err = if alive {
            TransportError::PeerClosed {
                conn: id.0,
                mid_message,
            }
        } else {
            TransportError::PeerDied {
                conn: id.0,
                pid,
                mid_message,
            }
        };
        tracing::info!(conn = id.0, pid, error = %err, "shm peer gone");
        if let Some(sink) = c.rx.take_sink() {
            self.matcher.abort(sink, &err);
        }
        for p in c.tx.drain(..) {
            self.send_done.insert(p.handle, Err(err.duplicate()));
        }
        self.matcher.fail_conn(id, &err);
        if let Some((slot, _)) = c.inbound.take() {
            self.release_slot(slot);
        }
        if alive {
            // Close our end too, so the peer can recycle the slot we had in its inbox
            // (it may be holding it as an orphan since it dropped the connection).
            c.peer.close_slot(c.out_slot);
            notify_peer(&c.peer);
        } else {
            // Its owner cannot unlink it any more: we do (cleanup on peer crash).
            c.peer.unlink_all();
        }
        // Dropping `c` unmaps the peer's inbox.
        drop(c);
        self.dead.insert(id, err);
        events + 1
    }

    fn conn_mut(&mut self, id: ConnId) -> Result<&mut Conn> {
        if let Some(e) = self.dead.get(&id) {
            return Err(e.duplicate());
        }
        self.conns
            .get_mut(&id)
            .ok_or(TransportError::UnknownConn(id.0))
    }

    /// Receive fast path for the common blocking case: a receive on one connection
    /// with nothing else queued. Spins (for the calibrated budget) on that ring and, if
    /// a matching eager record arrives, copies it straight into `buf` without going
    /// through the matching queues. Anything else — no message within the spin, a
    /// non-matching or large message, pending sends — returns the buffer untouched
    /// (`FastRecv::Declined`) for the general path, so the matching rules stay the same.
    fn recv_fast(&mut self, spec: &RecvSpec, buf: Vec<u8>) -> Result<FastRecv> {
        let Some(id) = spec.conn else {
            return Ok(FastRecv::Declined(buf));
        };
        if !self.matcher.quiet_for(id) || self.conns.values().any(|c| !c.tx.is_empty()) {
            return Ok(FastRecv::Declined(buf));
        }
        let eager = self.cfg.eager_threshold;
        let spins = self.spins;
        let Some(c) = self.conns.get_mut(&id) else {
            return Ok(FastRecv::Declined(buf));
        };
        if !matches!(c.rx, Rx::Idle) {
            return Ok(FastRecv::Declined(buf));
        }
        let Some((slot, cons)) = c.inbound.as_mut() else {
            return Ok(FastRecv::Declined(buf));
        };
        let mut tries = 0u32;
        // Watches `head` and, where that line is trusted, the record's own line,
        // whose stamp arrives with the record (see `Consumer::poll_header`). No
        // prefetch of the record's line: issued with every look at `head`, it
        // competed with the writer for that line (issue 15, fifth pass).
        let (words, mark) = loop {
            if let Some(h) = cons.poll_header() {
                break h;
            }
            tries += 1;
            if tries > spins {
                return Ok(FastRecv::Declined(buf));
            }
            // The first turns look again at once: a `pause` between looks delays
            // seeing a reply by half its length on average (issue 15, eighth pass:
            // one-way 1 B 57 → 50 ns fast mode, 227 → 212 ns slow). A reply that takes
            // longer than these turns (about a microsecond) gets the polite spin.
            if tries > HOT_TURNS {
                crate::sync::spin_hint();
            }
        };
        let (header, flags) = parse_head(&words, mark);
        let len = header.len as usize;
        let record = RECORD_HEADER_LEN + len + pad_for(len);
        if record == LINE {
            // A small message in: a small reply out is likely (a ping-pong), and its
            // record's line is the one the peer now keeps loading for the stamp. Ask
            // for it while the rest of this receive and the caller's reply run, so the
            // reply's stores find it here (issue 15, eighth pass: one-way 1 B 56 →
            // 53 ns, 32 B 64 → 53 ns, fast mode; not after longer records, where it
            // made 64 B 70-75 → 87-94 ns: the peer took the line back before the
            // longer reply was written).
            c.out.prefetch_next_record();
        }
        if flags != 0 || !spec.matches(id, &header) || len > eager || len > buf.len() {
            return Ok(FastRecv::Declined(buf));
        }
        // SAFETY: no flag, so the sender pushed this record whole (`push_message`),
        // with one stamp: whichever of stamp or `head` showed us its header shows all of it.
        unsafe { cons.extend_published(record) };
        let mut buf = buf;
        buf.truncate(len);
        // The record is published whole (above): the payload straight from behind
        // the header, then one release of header, payload and padding.
        cons.take_record(RECORD_HEADER_LEN, &mut buf, record);
        let slot = *slot;
        if let Some(inbox) = self.inbox.as_ref() {
            if take_wake_flag(&inbox.slot(slot).waiting) {
                notify_peer(&c.peer);
            }
        }
        #[cfg(test)]
        {
            self.fast_receives += 1;
        }
        Ok(FastRecv::Done(Received {
            header,
            conn: id,
            data: buf,
        }))
    }

    /// Spin-then-block until any inbound ring has data, a slot opens, a queued send can
    /// move, or `timeout` passes.
    /// `space_for`: a blocking send waits for ring space on that connection. A
    /// connection whose send waits for a single-copy answer is ready when it arrives
    /// (the receiver wakes us after storing it).
    fn block(&mut self, timeout: Duration, space_for: Option<ConnId>) -> WaitOutcome {
        let Some(inbox) = self.inbox.as_ref() else {
            return WaitOutcome::Ready;
        };
        let h = inbox.header();
        let wants_space = |id: &ConnId, c: &Conn| {
            c.cma_wait.is_none() && (space_for == Some(*id) || !c.tx.is_empty())
        };
        let seen_gen = self.seen_gen;
        // Before each attempt to sleep, ask the receivers of rings we wait on for space
        // to wake us when they free some (they clear the flag when they do, so it is
        // raised again for every sleep). The flags are peers' memory, the rings ours:
        // raw pointers let `ready` below borrow the connections mutably meanwhile.
        let flags: Vec<*const AtomicU32> = self
            .conns
            .iter()
            .filter(|(id, c)| wants_space(id, c))
            .map(|(_, c)| &c.peer.slot(c.out_slot).waiting as *const AtomicU32)
            .collect();
        let arm = || {
            if !flags.is_empty() {
                arm_wake_flags(|| {
                    for f in &flags {
                        // SAFETY: the peers' inboxes stay mapped while `self.conns`
                        // holds them, which outlives this call; nothing is removed
                        // from `conns` during the wait.
                        arm_wake_flag(unsafe { &**f });
                    }
                });
            }
        };
        // Without the kernel's barrier a receiver's cheap check may miss our flag: then
        // do not sleep for long (the wait is re-armed and re-checked every millisecond).
        let timeout = if flags.is_empty() || crate::sync::heavy_barrier_supported() {
            timeout
        } else {
            timeout.min(Duration::from_millis(1))
        };
        let conns = &mut self.conns;
        let peer_running = || conns_running(conns);
        // Evaluate liveness of the producers before borrowing `conns` mutably below.
        let running = peer_running();
        let ready = || {
            h.conn_gen.0.load(Ordering::Acquire) != seen_gen
                || conns.iter_mut().any(|(id, c)| {
                    (!c.stalled && c.inbound.as_ref().is_some_and(|(_, r)| r.has_data()))
                        || c.ack_arrived()
                        || (wants_space(id, c) && c.out.free() >= stream_chunk(c.out.cap()))
                })
        };
        h.wait.0.wait_until_armed(
            self.spins,
            || running,
            ready,
            Some(timeout),
            Some(&h.running.0),
            arm,
        )
    }
}

fn conns_running(conns: &IdMap<ConnId, Conn>) -> bool {
    conns
        .values()
        .any(|c| c.peer.header().running.0.load(Ordering::Relaxed) != 0)
}

/// Whether the sender that claimed slot `s` of our inbox is known to be dead (so it
/// can never write to the slot again). A pid of 0 (claim not finished, or slot being
/// reset) tells nothing and counts as alive; a reused pid can only make a dead sender
/// look alive, which delays recycling but never makes it unsafe.
fn producer_dead(s: &Slot) -> bool {
    let pid = s.pid.load(Ordering::Relaxed);
    pid != 0 && !pid_alive(pid)
}

fn notify_peer(peer: &Inbox) {
    if peer.header().wait.0.notify() {
        // We just woke it: it is about to run, so its peers may spin on it again.
        peer.header().running.0.store(1, Ordering::Relaxed);
    }
}

impl Device for ShmDevice {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Shm
    }

    fn local_address(&self, into: &mut PeerAddrs) {
        into.shm = Some(self.addr.clone());
    }

    fn reaches(&self, peer: &PeerAddrs) -> bool {
        peer.shm
            .as_ref()
            .is_some_and(|s| s.host_id == self.addr.host_id)
    }

    fn connect(&mut self, peer: &PeerAddrs) -> Result<ConnId> {
        let Some(s) = peer.shm.as_ref().filter(|s| s.host_id == self.addr.host_id) else {
            return Err(TransportError::BadAddress {
                kind: DeviceKind::Shm,
                reason: "peer has no shared-memory address on this host".into(),
            });
        };
        self.inbox()?;
        self.open_conn(&s.segment)
    }

    fn accept(&mut self) -> Result<Option<ConnId>> {
        self.scan_slots()?;
        Ok(self.accepted.pop_front())
    }

    fn isend(&mut self, conn: ConnId, header: MsgHeader, payload: Vec<u8>) -> Result<SendHandle> {
        let eager = self.cfg.eager_threshold;
        self.next_send += 1;
        let handle = SendHandle(self.next_send);
        let header = MsgHeader {
            len: payload.len() as u64,
            ..header
        };
        let cma_min = self.cma_min;
        let c = self.conn_mut(conn)?;
        let mut p = PendingSend {
            handle,
            header,
            payload,
            st: TxState::default(),
        };
        if c.tx.is_empty() {
            let (done, moved) = advance(c, &header, &p.payload, eager, cma_min, &mut p.st);
            if moved {
                notify_peer(&c.peer);
            }
            if done {
                self.send_done.insert(handle, Ok(()));
                return Ok(handle);
            }
        }
        c.tx.push_back(p);
        Ok(handle)
    }

    fn test_send(&mut self, handle: SendHandle) -> Result<bool> {
        match self.send_done.remove(&handle) {
            Some(r) => r.map(|()| true),
            None => Ok(false),
        }
    }

    fn send(
        &mut self,
        conn: ConnId,
        header: MsgHeader,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<()> {
        let mut deadline: Option<Instant> = None;
        let eager = self.cfg.eager_threshold;
        let header = MsgHeader {
            len: payload.len() as u64,
            ..header
        };
        // The common case first, with nothing in between: an eager message on a
        // connection with nothing queued, pushed whole (what `advance` does with it).
        if payload.len() <= eager {
            if let Some(c) = self.conns.get_mut(&conn) {
                if c.tx.is_empty() && push_whole(&mut c.out, &header, payload) {
                    notify_peer(&c.peer);
                    return Ok(());
                }
            }
        }
        let cma_min = self.cma_min;
        let mut st = TxState::default();
        loop {
            let c = self.conn_mut(conn)?;
            if c.tx.is_empty() {
                let (done, moved) = advance(c, &header, payload, eager, cma_min, &mut st);
                if moved {
                    notify_peer(&c.peer);
                }
                if done {
                    return Ok(());
                }
            }
            // Keep our own inbound rings moving: the peer may be blocked sending to us.
            self.progress()?;
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + timeout);
            if now >= deadline {
                let Some(seq) = st.cma_seq else {
                    return Err(TransportError::Timeout(timeout, "ring space for a send"));
                };
                // The receiver may be reading `payload` from our memory: we may return
                // (and the caller free it) only once it cannot any more.
                if self.conn_mut(conn)?.withdraw(seq) {
                    return Err(TransportError::Timeout(timeout, "a single-copy receive"));
                }
                // Claimed: it is copying now; its answer (or its death) comes soon.
            }
            let slice = deadline
                .saturating_duration_since(now)
                .max(Duration::from_millis(1))
                .min(self.cfg.liveness_interval);
            let space = if st.cma_seq.is_none() {
                Some(conn)
            } else {
                None
            };
            if self.block(slice, space) == WaitOutcome::TimedOut {
                self.check_peers()?;
            }
        }
    }

    fn post_recv(&mut self, spec: RecvSpec, buf: Vec<u8>) -> Result<RecvHandle> {
        if let Some(c) = spec.conn {
            if let Some(err) = self.dead.get(&c) {
                // What the peer sent completely before it went away can still be
                // received (it may have closed right after sending); only a receive
                // that nothing queued matches fails, through its handle.
                let h = self.matcher.post(spec, buf);
                self.matcher.fail_conn(c, err);
                return Ok(h);
            }
            if !self.conns.contains_key(&c) {
                return Err(TransportError::UnknownConn(c.0));
            }
        }
        // A new receive may be what a stalled large message waits for.
        for c in self.conns.values_mut() {
            c.stalled = false;
        }
        Ok(self.matcher.post(spec, buf))
    }

    fn recv(&mut self, spec: RecvSpec, buf: Vec<u8>, timeout: Duration) -> Result<Received> {
        match self.recv_fast(&spec, buf)? {
            FastRecv::Done(r) => Ok(r),
            FastRecv::Declined(buf) => recv_blocking(self, spec, buf, timeout),
            FastRecv::Posted(h) => crate::device::wait_recv(self, h, timeout),
        }
    }

    fn recv_fast_path(&mut self, spec: &RecvSpec, buf: Vec<u8>) -> Result<FastRecv> {
        // The same type all the way: the result is not copied from one layout into
        // another on the way out (issue 29: such copies stalled on store forwarding).
        self.recv_fast(spec, buf)
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
        let mut events = self.scan_slots()?;
        events += self.drain_all();
        events += self.push_all_pending();
        // Reading the clock on every call would cost more than the rest of a
        // shared-memory receive; look at it every 256 calls.
        self.progress_calls = self.progress_calls.wrapping_add(1);
        if std::mem::take(&mut self.peer_gone)
            || (self.progress_calls % 256 == 0
                && self.last_liveness.elapsed() >= self.cfg.liveness_interval)
        {
            events += self.check_peers()?;
        }
        Ok(events)
    }

    fn wait_activity(&mut self, timeout: Duration) -> Result<()> {
        let slice = timeout.min(self.cfg.liveness_interval);
        if self.block(slice, None) == WaitOutcome::TimedOut {
            self.check_peers()?;
        }
        Ok(())
    }

    /// Closes one connection. Messages that arrived on it but were not received yet
    /// are discarded, receives waiting for it fail, and the id is forgotten: nothing
    /// about it stays behind. A connection whose peer already went away only loses its
    /// tombstone.
    fn disconnect(&mut self, conn: ConnId) -> Result<()> {
        if self.dead.remove(&conn).is_some() {
            self.accepted.retain(|c| *c != conn);
            return Ok(());
        }
        let mut c = self
            .conns
            .remove(&conn)
            .ok_or(TransportError::UnknownConn(conn.0))?;
        self.accepted.retain(|i| *i != conn);
        self.by_name.remove(&c.peer_name);
        self.ids.retain(|i| *i != conn);
        // Tell the receiver this ring will carry nothing more, so it recycles the slot.
        c.peer.close_slot(c.out_slot);
        notify_peer(&c.peer);
        // Our inbound slot is recycled only once its producer is done with it (it may
        // still be writing: we are the first to let go); see `SlotUse`.
        if let Some((slot, _)) = c.inbound.take() {
            self.release_slot(slot);
        }
        let err = TransportError::PeerClosed {
            conn: conn.0,
            mid_message: c.rx.mid_message(),
        };
        if let Some(sink) = c.rx.take_sink() {
            self.matcher.abort(sink, &err);
        }
        self.matcher.forget_conn(conn, &err);
        for p in std::mem::take(&mut c.tx) {
            if let Some(seq) = p.st.cma_seq {
                if !c.withdraw(seq) {
                    // The receiver is reading it right now: freeing the buffer under
                    // it would hand it whatever reuses the memory. Leak it instead
                    // (a connection closed in the middle of a transfer; rare).
                    tracing::warn!(
                        conn = conn.0,
                        len = p.payload.len(),
                        "buffer of a single-copy send being read at disconnect: leaked"
                    );
                    std::mem::forget(p.payload);
                }
            }
            self.send_done.insert(p.handle, Err(err.duplicate()));
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<()> {
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            self.disconnect(id)?;
        }
        self.dead.clear();
        self.accepted.clear();
        // Dropping the inbox unmaps and unlinks it.
        self.inbox = None;
        Ok(())
    }
}

impl Drop for ShmDevice {
    fn drop(&mut self) {
        if let Err(e) = self.finalize() {
            tracing::warn!(error = %e, "shm finalize on drop failed");
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, not(loom)))]
mod many_senders;
