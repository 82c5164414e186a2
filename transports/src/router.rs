//! Several devices at once, chosen per peer (003 §5, "WorldView").
//!
//! A peer is identified by its [`PeerAddrs`]. The router keeps one record per address
//! set, handed out as reference-counted [`PeerRef`]s; when the last reference goes the
//! record and its connection are dropped (at the next [`Router::collect`], which every
//! `add_peer` runs). The device is chosen when the peer is first used: shared memory if
//! both processes are on one host, verbs if both ends have it, TCP otherwise. Peers can
//! be added at any time, so processes that join late (spawned, or added by a resource
//! change) get shared memory like everyone else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::addr::PeerAddrs;
use crate::device::{ConnId, Device, DeviceKind, FastRecv, Received, RecvHandle, RecvSpec};
use crate::error::{Result, TransportError};
use crate::header::MsgHeader;
use crate::idmap::IdMap;

/// Every this many receives from one peer, the router progresses its other devices
/// before the device's fast path: a receive that completes there progresses no other
/// device, and a peer connecting over another one (a TCP handshake, DATA-1) must not
/// wait for a receive that misses the fast path. A power of two; at ~1 µs for a TCP
/// progress with one connection, 64 costs a shared-memory message ~15 ns.
const OTHERS_EVERY: u64 = 64;

/// A reference-counted handle to a peer record. Clone it to share; drop it to release.
#[derive(Clone, Debug)]
pub struct PeerRef(Arc<PeerEntry>);

#[derive(Debug)]
struct PeerEntry {
    id: u64,
    addrs: PeerAddrs,
    /// The router that made this record ([`Router::uid`]).
    owner: u64,
    /// The route, once chosen: a route never changes while a handle exists (the
    /// record goes only with the last handle), so a message finds it here instead of
    /// looking the record up.
    route: OnceLock<(usize, ConnId)>,
}

/// Tells routers apart, so that a handle used with a router that did not make it is
/// never taken for one of its own.
static NEXT_ROUTER: AtomicU64 = AtomicU64::new(1);

impl PeerRef {
    /// The peer's addresses.
    pub fn addrs(&self) -> &PeerAddrs {
        &self.0.addrs
    }

    /// How many handles refer to this record (including this one).
    pub fn ref_count(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

struct Record {
    entry: Weak<PeerEntry>,
    addrs: PeerAddrs,
    route: Option<(usize, ConnId)>,
}

/// Picks the device for a peer: shm on the same host, verbs when both have it, else TCP.
pub fn choose_device(
    local: &PeerAddrs,
    peer: &PeerAddrs,
    have: &[DeviceKind],
) -> Option<DeviceKind> {
    let has = |k| have.contains(&k);
    match (&local.shm, &peer.shm) {
        (Some(a), Some(b)) if a.host_id == b.host_id && has(DeviceKind::Shm) => {
            return Some(DeviceKind::Shm);
        }
        _ => {}
    }
    if local.verbs.is_some() && peer.verbs.is_some() && has(DeviceKind::Verbs) {
        return Some(DeviceKind::Verbs);
    }
    (peer.tcp.is_some() && has(DeviceKind::Tcp)).then_some(DeviceKind::Tcp)
}

/// Routes messages to peers over the best device for each.
pub struct Router {
    devices: Vec<Box<dyn Device>>,
    local: PeerAddrs,
    by_addrs: HashMap<PeerAddrs, u64>,
    /// Looked up on every message: keyed by our own sequential ids, so no SipHash.
    records: IdMap<u64, Record>,
    next_id: u64,
    /// Receives from one peer so far (for [`OTHERS_EVERY`]).
    routed_recvs: u64,
    /// This router's identity among the process' routers (see [`PeerEntry::owner`]).
    uid: u64,
}

impl Router {
    /// A router over `devices` (at most one per kind).
    pub fn new(devices: Vec<Box<dyn Device>>) -> Self {
        let mut local = PeerAddrs::default();
        for d in &devices {
            d.local_address(&mut local);
        }
        Self {
            devices,
            local,
            by_addrs: HashMap::new(),
            records: IdMap::default(),
            next_id: 0,
            routed_recvs: 0,
            uid: NEXT_ROUTER.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// This process' identity: the addresses of all its devices.
    pub fn local_addrs(&self) -> &PeerAddrs {
        &self.local
    }

    /// Returns the record for `addrs`, creating it if needed (late joiners included).
    pub fn add_peer(&mut self, addrs: PeerAddrs) -> PeerRef {
        self.collect();
        if let Some(e) = self
            .by_addrs
            .get(&addrs)
            .and_then(|id| self.records.get(id))
            .and_then(|r| r.entry.upgrade())
        {
            return PeerRef(e);
        }
        self.next_id += 1;
        let entry = Arc::new(PeerEntry {
            id: self.next_id,
            addrs: addrs.clone(),
            owner: self.uid,
            route: OnceLock::new(),
        });
        self.by_addrs.insert(addrs.clone(), self.next_id);
        self.records.insert(
            self.next_id,
            Record {
                entry: Arc::downgrade(&entry),
                addrs,
                route: None,
            },
        );
        PeerRef(entry)
    }

    /// Drops records nothing refers to any more, closing their connections. Returns
    /// how many were dropped.
    pub fn collect(&mut self) -> usize {
        let dead: Vec<u64> = self
            .records
            .iter()
            .filter(|(_, r)| r.entry.strong_count() == 0)
            .map(|(id, _)| *id)
            .collect();
        for id in &dead {
            let r = self.records.remove(id).expect("id from iteration");
            self.by_addrs.remove(&r.addrs);
            if let Some((dev, conn)) = r.route {
                // Another record may share this connection (same device address); only
                // close when none does.
                let shared = self.records.values().any(|o| o.route == Some((dev, conn)));
                if !shared {
                    if let Err(e) = self.devices[dev].disconnect(conn) {
                        tracing::debug!(error = %e, "disconnect of released peer");
                    }
                }
            }
        }
        dead.len()
    }

    /// Number of live peer records.
    pub fn peer_count(&self) -> usize {
        self.records.len()
    }

    /// Which device serves `peer` (connecting on demand).
    pub fn route(&mut self, peer: &PeerRef) -> Result<(DeviceKind, ConnId)> {
        let (dev, conn) = self.route_idx(peer)?;
        Ok((self.devices[dev].kind(), conn))
    }

    #[inline]
    fn route_idx(&mut self, peer: &PeerRef) -> Result<(usize, ConnId)> {
        if peer.0.owner == self.uid {
            if let Some(r) = peer.0.route.get() {
                return Ok(*r);
            }
        }
        self.choose_route(peer)
    }

    /// The first use of `peer`: choose its device and connect.
    #[inline(never)]
    fn choose_route(&mut self, peer: &PeerRef) -> Result<(usize, ConnId)> {
        let rec = self
            .records
            .get_mut(&peer.0.id)
            .ok_or(TransportError::PeerReleased)?;
        if let Some(r) = rec.route {
            return Ok(r);
        }
        let kinds: Vec<DeviceKind> = self.devices.iter().map(|d| d.kind()).collect();
        let kind = choose_device(&self.local, &rec.addrs, &kinds)
            .ok_or_else(|| TransportError::NoRoute(format!("{:?}", rec.addrs)))?;
        let dev = kinds
            .iter()
            .position(|k| *k == kind)
            .expect("chosen from kinds");
        let conn = self.devices[dev].connect(&rec.addrs)?;
        tracing::debug!(?kind, conn = conn.0, "route chosen");
        rec.route = Some((dev, conn));
        if peer.0.owner == self.uid {
            // Set once: this is the only place, and it runs only while unset.
            let _ = peer.0.route.set((dev, conn));
        }
        Ok((dev, conn))
    }

    /// Blocking send to `peer`.
    #[inline]
    pub fn send(
        &mut self,
        peer: &PeerRef,
        header: MsgHeader,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<()> {
        let (dev, conn) = self.route_idx(peer)?;
        self.devices[dev].send(conn, header, payload, timeout)
    }

    /// Blocking receive from `from` (or any peer on any device) with an optional tag.
    ///
    /// From one peer, the receive first takes its device's fast path
    /// ([`Device::recv_fast_path`]): a message that arrives within the device's spin
    /// costs what the device alone costs — no matching queues, no progress of the
    /// other devices, no clock read (issue 29: these made the communicator 1.5–3× its
    /// device). `timeout` counts from after that spin, as in [`Device::recv`].
    #[inline]
    pub fn recv(
        &mut self,
        from: Option<&PeerRef>,
        tag: Option<u64>,
        context_id: u32,
        buf: Vec<u8>,
        timeout: Duration,
    ) -> Result<Received> {
        let mut spec = RecvSpec {
            conn: None,
            source: None,
            tag,
            context_id,
        };
        let Some(p) = from else {
            return self.recv_general(spec, Some(buf), None, timeout);
        };
        let (dev, conn) = self.route_idx(p)?;
        spec.conn = Some(conn);
        self.routed_recvs = self.routed_recvs.wrapping_add(1);
        if self.routed_recvs % OTHERS_EVERY == 0 {
            self.progress_others(dev)?;
        }
        let h = match self.devices[dev].recv_fast_path(&spec, buf)? {
            FastRecv::Done(r) => return Ok(r),
            FastRecv::Posted(h) => h,
            FastRecv::Declined(buf) => self.devices[dev].post_recv(spec, buf)?,
        };
        self.recv_general(spec, None, Some((dev, h)), timeout)
    }

    /// Progresses every device but `dev`.
    #[inline(never)]
    fn progress_others(&mut self, dev: usize) -> Result<()> {
        for (i, d) in self.devices.iter_mut().enumerate() {
            if i != dev {
                d.progress()?;
            }
        }
        Ok(())
    }

    /// The general half of [`Router::recv`]: a receive `posted` on one device, or
    /// (`buf`) any source on any device. Kept out of the fast half so that stays small
    /// enough to inline into its callers.
    #[inline(never)]
    fn recv_general(
        &mut self,
        spec: RecvSpec,
        mut buf: Option<Vec<u8>>,
        mut posted: Option<(usize, RecvHandle)>,
        timeout: Duration,
    ) -> Result<Received> {
        let deadline = Instant::now() + timeout;
        // Spin-then-block on one device when only it can deliver (a single device, or
        // a receive posted on one); with an any-source receive over several, take
        // turns. The other devices still make progress between slices: what they
        // deliver meanwhile is queued, and a peer connecting is held by the kernel.
        let long = Duration::from_millis(20);
        let short = Duration::from_micros(200);
        let single = self.devices.len() == 1;
        loop {
            let mut events = 0;
            for d in &mut self.devices {
                events += d.progress()?;
            }
            match posted {
                Some((dev, h)) => {
                    if let Some(r) = self.devices[dev].test_recv(h)? {
                        return Ok(r);
                    }
                }
                None => {
                    // Any source: commit the buffer to the first device that has a
                    // matching message; the receive completes there (maybe later, for a
                    // large message still in the fabric).
                    let hit = self
                        .devices
                        .iter_mut()
                        .position(|d| d.probe(&spec).is_some());
                    if let Some(dev) = hit {
                        let h = self.devices[dev].post_recv(spec, buf.take().expect("unused"))?;
                        posted = Some((dev, h));
                        continue;
                    }
                }
            }
            if events > 0 {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                if let Some((dev, h)) = posted {
                    if !self.devices[dev].cancel_recv(h)? {
                        if let Some(r) = self.devices[dev].test_recv(h)? {
                            return Ok(r);
                        }
                    }
                }
                return Err(TransportError::Timeout(timeout, "a routed receive"));
            }
            let slice = if single || posted.is_some() {
                long
            } else {
                short
            };
            let wait = (deadline - now).min(slice);
            match posted {
                Some((dev, _)) => self.devices[dev].wait_activity(wait)?,
                None => {
                    for d in &mut self.devices {
                        d.wait_activity(wait)?;
                    }
                }
            }
        }
    }

    /// Drives progress on every device and accepts incoming connections.
    pub fn progress(&mut self) -> Result<usize> {
        let mut n = 0;
        for d in &mut self.devices {
            while d.accept()?.is_some() {
                n += 1;
            }
            n += d.progress()?;
        }
        Ok(n)
    }

    /// Finalizes every device.
    pub fn finalize(&mut self) -> Result<()> {
        for d in &mut self.devices {
            d.finalize()?;
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::addr::{ShmAddr, VerbsAddr};
    use crate::device::SendHandle;
    use crate::shm::{ShmConfig, ShmDevice};
    use crate::tcp::{TcpConfig, TcpDevice};
    use std::sync::atomic::{AtomicU64, Ordering};

    fn both() -> Router {
        Router::new(vec![
            Box::new(ShmDevice::new(ShmConfig::default()).unwrap()),
            Box::new(TcpDevice::new(TcpConfig::default()).unwrap()),
        ])
    }

    #[test]
    fn choice_follows_the_rules() {
        let shm = |host| ShmAddr {
            host_id: host,
            pid: 1,
            segment: "s".into(),
        };
        let verbs = VerbsAddr {
            lid: 1,
            qpn: 2,
            qkey: 3,
            gid: None,
        };
        let tcp = Some("127.0.0.1:1".parse().unwrap());
        let all = [DeviceKind::Shm, DeviceKind::Verbs, DeviceKind::Tcp];
        let me = PeerAddrs {
            shm: Some(shm(1)),
            verbs: Some(verbs),
            tcp,
        };
        let same_host = PeerAddrs {
            shm: Some(shm(1)),
            verbs: Some(verbs),
            tcp,
        };
        let other_host = PeerAddrs {
            shm: Some(shm(2)),
            verbs: Some(verbs),
            tcp,
        };
        let tcp_only = PeerAddrs {
            shm: Some(shm(2)),
            verbs: None,
            tcp,
        };
        assert_eq!(choose_device(&me, &same_host, &all), Some(DeviceKind::Shm));
        assert_eq!(
            choose_device(&me, &other_host, &all),
            Some(DeviceKind::Verbs)
        );
        assert_eq!(choose_device(&me, &tcp_only, &all), Some(DeviceKind::Tcp));
        assert_eq!(
            choose_device(&me, &same_host, &[DeviceKind::Tcp]),
            Some(DeviceKind::Tcp)
        );
        assert_eq!(choose_device(&me, &PeerAddrs::default(), &all), None);
    }

    #[test]
    fn records_are_shared_per_address_set_and_dropped_when_released() {
        let mut a = both();
        let b = both();
        let p1 = a.add_peer(b.local_addrs().clone());
        let p2 = a.add_peer(b.local_addrs().clone());
        assert_eq!(p1.ref_count(), 2, "same address set, same record");
        assert_eq!(a.peer_count(), 1);
        assert_eq!(a.route(&p1).unwrap().0, DeviceKind::Shm);
        drop(p1);
        assert_eq!(a.collect(), 0, "still referenced");
        drop(p2);
        assert_eq!(a.collect(), 1);
        assert_eq!(a.peer_count(), 0);
    }

    #[test]
    fn late_joiner_gets_shared_memory_and_remote_gets_tcp() {
        let mut a = both();
        // A process that appears later (e.g. added by a resource change).
        let mut late = both();
        let p = a.add_peer(late.local_addrs().clone());
        assert_eq!(a.route(&p).unwrap().0, DeviceKind::Shm);
        let hdr = MsgHeader {
            source: 1,
            tag: 4,
            context_id: 0,
            len: 0,
        };
        let t = Duration::from_secs(10);
        a.send(&p, hdr, b"welcome", t).unwrap();
        let r = late.recv(None, Some(4), 0, vec![0; 16], t).unwrap();
        assert_eq!(r.data, b"welcome");
        // A large message is left in the ring until asked for: any-source must still
        // find it.
        let big = vec![9u8; 3 << 20];
        let r = std::thread::scope(|s| {
            s.spawn(|| a.send(&p, hdr, &big, t).unwrap());
            late.recv(None, Some(4), 0, vec![0; big.len()], t).unwrap()
        });
        assert!(r.data == big);
        // Same peer seen from another host: only TCP reaches it.
        let mut remote = late.local_addrs().clone();
        if let Some(s) = remote.shm.as_mut() {
            s.host_id ^= 1;
        }
        let q = a.add_peer(remote);
        assert_eq!(a.route(&q).unwrap().0, DeviceKind::Tcp);
        // A first TCP send waits for the receiver's side of the handshake (DATA-1):
        // the receiver must be progressing meanwhile.
        let r = std::thread::scope(|s| {
            s.spawn(|| a.send(&q, hdr, b"over tcp", t).unwrap());
            late.recv(None, Some(4), 0, vec![0; 16], t).unwrap()
        });
        assert_eq!(r.data, b"over tcp");
    }

    /// What a [`Scripted`] device was asked to do, shared with the test.
    #[derive(Default)]
    struct Calls {
        fast: AtomicU64,
        posted: AtomicU64,
        progress: AtomicU64,
    }

    /// A device whose fast path completes every receive (or declines every one, when
    /// `decline`), counting the calls; a posted receive completes on the next test.
    struct Scripted {
        kind: DeviceKind,
        decline: bool,
        calls: Arc<Calls>,
        posted: Option<(RecvSpec, Vec<u8>)>,
    }

    impl Scripted {
        fn boxed(kind: DeviceKind, decline: bool) -> (Box<dyn Device>, Arc<Calls>) {
            let calls = Arc::new(Calls::default());
            let d = Scripted {
                kind,
                decline,
                calls: calls.clone(),
                posted: None,
            };
            (Box::new(d), calls)
        }

        fn received(spec: &RecvSpec, mut data: Vec<u8>, how: u8) -> Received {
            data.truncate(1);
            data[0] = how;
            Received {
                header: MsgHeader {
                    source: 0,
                    tag: spec.tag.unwrap_or(0),
                    context_id: spec.context_id,
                    len: 1,
                },
                conn: spec.conn.expect("routed"),
                data,
            }
        }
    }

    impl Device for Scripted {
        fn kind(&self) -> DeviceKind {
            self.kind
        }
        fn local_address(&self, into: &mut PeerAddrs) {
            match self.kind {
                DeviceKind::Shm => {
                    into.shm = Some(ShmAddr {
                        host_id: 1,
                        pid: 1,
                        segment: "s".into(),
                    })
                }
                _ => into.tcp = Some("127.0.0.1:1".parse().unwrap()),
            }
        }
        fn reaches(&self, _: &PeerAddrs) -> bool {
            true
        }
        fn connect(&mut self, _: &PeerAddrs) -> Result<ConnId> {
            Ok(ConnId(1))
        }
        fn accept(&mut self) -> Result<Option<ConnId>> {
            Ok(None)
        }
        fn isend(&mut self, _: ConnId, _: MsgHeader, _: Vec<u8>) -> Result<SendHandle> {
            Ok(SendHandle(1))
        }
        fn test_send(&mut self, _: SendHandle) -> Result<bool> {
            Ok(true)
        }
        fn send(&mut self, _: ConnId, _: MsgHeader, _: &[u8], _: Duration) -> Result<()> {
            Ok(())
        }
        fn post_recv(&mut self, spec: RecvSpec, buf: Vec<u8>) -> Result<RecvHandle> {
            self.calls.posted.fetch_add(1, Ordering::Relaxed);
            self.posted = Some((spec, buf));
            Ok(RecvHandle(1))
        }
        fn recv_fast_path(&mut self, spec: &RecvSpec, buf: Vec<u8>) -> Result<FastRecv> {
            self.calls.fast.fetch_add(1, Ordering::Relaxed);
            Ok(if self.decline {
                FastRecv::Declined(buf)
            } else {
                FastRecv::Done(Scripted::received(spec, buf, 1))
            })
        }
        fn test_recv(&mut self, _: RecvHandle) -> Result<Option<Received>> {
            Ok(self
                .posted
                .take()
                .map(|(spec, buf)| Scripted::received(&spec, buf, 2)))
        }
        fn cancel_recv(&mut self, _: RecvHandle) -> Result<bool> {
            Ok(self.posted.take().is_some())
        }
        fn probe(&mut self, _: &RecvSpec) -> Option<MsgHeader> {
            None
        }
        fn progress(&mut self) -> Result<usize> {
            self.calls.progress.fetch_add(1, Ordering::Relaxed);
            Ok(0)
        }
        fn wait_activity(&mut self, _: Duration) -> Result<()> {
            Ok(())
        }
        fn disconnect(&mut self, _: ConnId) -> Result<()> {
            Ok(())
        }
        fn finalize(&mut self) -> Result<()> {
            Ok(())
        }
    }

    /// A receive from one peer completes on its device's fast path (nothing posted, no
    /// other device progressed), except that every `OTHERS_EVERY`-th receive progresses
    /// the other devices first, so a peer connecting over them is not starved by a
    /// stream of fast receives.
    #[test]
    fn a_routed_receive_takes_the_fast_path_and_still_progresses_the_others() {
        let (shm, on_shm) = Scripted::boxed(DeviceKind::Shm, false);
        let (tcp, on_tcp) = Scripted::boxed(DeviceKind::Tcp, false);
        let mut r = Router::new(vec![shm, tcp]);
        let p = r.add_peer(r.local_addrs().clone());
        let n = OTHERS_EVERY * 3;
        for _ in 0..n {
            let got = r.recv(Some(&p), Some(9), 4, vec![0; 8], Duration::ZERO);
            let got = got.unwrap();
            assert_eq!(
                (got.data, got.header.tag),
                (vec![1], 9),
                "not the fast path"
            );
        }
        assert_eq!(on_shm.fast.load(Ordering::Relaxed), n);
        assert_eq!(on_shm.posted.load(Ordering::Relaxed), 0);
        assert_eq!(on_shm.progress.load(Ordering::Relaxed), 0);
        assert_eq!(on_tcp.progress.load(Ordering::Relaxed), 3);
        assert_eq!(on_tcp.fast.load(Ordering::Relaxed), 0);
    }

    /// A receive the fast path declines is posted with the same spec and buffer and
    /// completes through the general loop, which progresses every device.
    #[test]
    fn a_declined_fast_path_falls_back_to_a_posted_receive() {
        let (shm, on_shm) = Scripted::boxed(DeviceKind::Shm, true);
        let (tcp, on_tcp) = Scripted::boxed(DeviceKind::Tcp, true);
        let mut r = Router::new(vec![shm, tcp]);
        let p = r.add_peer(r.local_addrs().clone());
        let got = r.recv(Some(&p), Some(9), 4, vec![0; 8], Duration::from_secs(5));
        let got = got.unwrap();
        assert_eq!((got.data, got.header.tag), (vec![2], 9));
        assert_eq!(got.header.context_id, 4);
        assert_eq!(on_shm.fast.load(Ordering::Relaxed), 1);
        assert_eq!(on_shm.posted.load(Ordering::Relaxed), 1);
        assert_eq!(on_tcp.progress.load(Ordering::Relaxed), 1);
    }
}
