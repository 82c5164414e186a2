//! Tests of the shared-memory device (in-process pairs of devices).

/// A header with source 1, tag `tag`, context 0 (its length is the payload's).
fn hdr(tag: u64) -> crate::MsgHeader {
    crate::MsgHeader {
        source: 1,
        tag,
        context_id: 0,
        len: 0,
    }
}

/// Two devices with `cfg`, the first connected to the second: (a, b, a→b, b's end).
fn pair_with(
    cfg: super::ShmConfig,
) -> (
    super::ShmDevice,
    super::ShmDevice,
    crate::ConnId,
    crate::ConnId,
) {
    use crate::device::Device;
    let mut a = super::ShmDevice::new(cfg.clone()).unwrap();
    let mut b = super::ShmDevice::new(cfg).unwrap();
    let mut pb = crate::PeerAddrs::default();
    b.local_address(&mut pb);
    let ab = a.connect(&pb).unwrap();
    let ba = crate::device::accept_blocking(&mut b, std::time::Duration::from_secs(10)).unwrap();
    (a, b, ab, ba)
}

mod basic {
    use super::super::*;
    use super::hdr;
    use crate::device::{recv_blocking, wait_send};

    const T: Duration = Duration::from_secs(10);

    fn pair() -> (ShmDevice, ShmDevice, ConnId, ConnId) {
        super::pair_with(ShmConfig::default())
    }

    #[test]
    fn eager_and_large_messages_arrive_intact_in_order() {
        let (mut a, mut b, ab, _) = pair();
        let big: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i * 7) as u8).collect();
        let h1 = a.isend(ab, hdr(1), b"small".to_vec()).unwrap();
        assert!(a.test_send(h1).unwrap(), "eager send completes at once");
        let h2 = a.isend(ab, hdr(2), big.clone()).unwrap();
        let r1 = recv_blocking(&mut b, RecvSpec::default(), vec![0; 16], T).unwrap();
        assert_eq!((r1.header.tag, &r1.data[..]), (1, &b"small"[..]));
        // The large message cannot fit the ring: it needs both sides to progress.
        let rh = b
            .post_recv(RecvSpec::default(), vec![0; big.len()])
            .unwrap();
        let got = loop {
            a.progress().unwrap();
            b.progress().unwrap();
            if let Some(r) = b.test_recv(rh).unwrap() {
                break r;
            }
        };
        wait_send(&mut a, h2, T).unwrap();
        assert_eq!(got.header.len, big.len() as u64);
        assert!(got.data == big);
    }

    #[test]
    fn replies_reuse_the_connection_and_tags_select() {
        let (mut a, mut b, ab, ba) = pair();
        a.send(ab, hdr(5), b"five", T).unwrap();
        a.send(ab, hdr(6), b"six", T).unwrap();
        let spec6 = RecvSpec {
            tag: Some(6),
            ..RecvSpec::default()
        };
        assert_eq!(
            recv_blocking(&mut b, spec6, vec![0; 8], T).unwrap().data,
            b"six"
        );
        let mut pa = PeerAddrs::default();
        a.local_address(&mut pa);
        assert_eq!(b.connect(&pa).unwrap(), ba, "accepted connection is reused");
        b.send(ba, hdr(7), b"back", T).unwrap();
        assert_eq!(
            recv_blocking(&mut a, RecvSpec::default(), vec![0; 8], T)
                .unwrap()
                .data,
            b"back"
        );
        assert_eq!(
            recv_blocking(&mut b, RecvSpec::default(), vec![0; 8], T)
                .unwrap()
                .data,
            b"five"
        );
    }

    #[test]
    fn finalize_unlinks_and_peer_sees_close() {
        let (mut a, mut b, ab, ba) = pair();
        let name = b.addr().segment.clone();
        a.send(ab, hdr(1), b"last", T).unwrap();
        a.finalize().unwrap();
        assert!(
            !std::path::Path::new("/dev/shm")
                .join(&a.addr().segment)
                .exists()
        );
        assert_eq!(
            recv_blocking(&mut b, RecvSpec::default(), vec![0; 8], T)
                .unwrap()
                .data,
            b"last"
        );
        let spec = RecvSpec {
            conn: Some(ba),
            ..RecvSpec::default()
        };
        let e = recv_blocking(&mut b, spec, vec![0; 8], T).unwrap_err();
        assert!(matches!(e, TransportError::PeerClosed { .. }), "{e}");
        drop(b);
        assert!(!std::path::Path::new("/dev/shm").join(name).exists());
    }
}

mod rendezvous {
    use super::super::*;
    use crate::device::{accept_blocking, recv_blocking};

    /// A large message nobody asked for may wait in the ring, but never in front of a
    /// receive that is waiting for a later message from the same sender.
    #[test]
    fn stalled_large_message_does_not_block_a_later_small_one() {
        let t = Duration::from_secs(10);
        let mut a = ShmDevice::new(ShmConfig::default()).unwrap();
        let mut b = ShmDevice::new(ShmConfig::default()).unwrap();
        let mut pb = PeerAddrs::default();
        b.local_address(&mut pb);
        let ab = a.connect(&pb).unwrap();
        accept_blocking(&mut b, t).unwrap();
        let h = |tag| MsgHeader {
            source: 1,
            tag,
            context_id: 0,
            len: 0,
        };
        let big = vec![3u8; 1 << 20];
        let s1 = a.isend(ab, h(1), big.clone()).unwrap();
        let s2 = a.isend(ab, h(2), b"small".to_vec()).unwrap();
        // Let the big one reach the ring and stall there (no receive posted).
        for _ in 0..100 {
            a.progress().unwrap();
            b.progress().unwrap();
        }
        let small = b
            .post_recv(
                RecvSpec {
                    tag: Some(2),
                    ..RecvSpec::default()
                },
                vec![0; 8],
            )
            .unwrap();
        let got = loop {
            a.progress().unwrap();
            b.progress().unwrap();
            if let Some(r) = b.test_recv(small).unwrap() {
                break r;
            }
        };
        assert_eq!(got.data, b"small");
        let r = recv_blocking(&mut b, RecvSpec::default(), vec![0; 1 << 20], t).unwrap();
        assert!(r.header.tag == 1 && r.data == big);
        assert!(a.test_send(s1).unwrap() && a.test_send(s2).unwrap());
    }
}

mod fast_path {
    use super::super::*;
    use super::hdr;
    use crate::device::accept_blocking;

    /// The receive fast path must not consume a message that does not match, and must
    /// keep per-connection order with messages that went through the queues.
    #[test]
    fn fast_path_keeps_matching_rules() {
        let t = Duration::from_secs(10);
        let mut a = ShmDevice::new(ShmConfig::default()).unwrap();
        let mut b = ShmDevice::new(ShmConfig::default()).unwrap();
        let mut pb = PeerAddrs::default();
        b.local_address(&mut pb);
        let ab = a.connect(&pb).unwrap();
        let ba = accept_blocking(&mut b, t).unwrap();
        let h = |tag| MsgHeader {
            source: 1,
            tag,
            context_id: 0,
            len: 0,
        };
        let on = |tag| RecvSpec {
            conn: Some(ba),
            tag: Some(tag),
            ..RecvSpec::default()
        };
        a.send(ab, h(1), b"one", t).unwrap();
        let e = b
            .recv(on(2), vec![0; 8], Duration::from_millis(30))
            .unwrap_err();
        assert!(matches!(e, TransportError::Timeout(..)), "{e}");
        a.send(ab, h(2), b"two", t).unwrap();
        assert_eq!(b.recv(on(2), vec![0; 8], t).unwrap().data, b"two");
        assert_eq!(b.recv(on(1), vec![0; 8], t).unwrap().data, b"one");
        for i in 0..100u64 {
            a.send(ab, h(3), &i.to_le_bytes(), t).unwrap();
            let r = b.recv(on(3), vec![0; 8], t).unwrap();
            assert_eq!(r.data, i.to_le_bytes());
        }
        assert!(matches!(
            b.recv(on(3), vec![0; 1], Duration::from_millis(1)),
            Err(TransportError::Timeout(..))
        ));
    }

    /// A message taken through the queues leaves its connection idle, whether or not
    /// its record needs padding to end on a line: the fast path wants an idle
    /// connection, and one left waiting for zero bytes of padding sent every later
    /// message of a padless size (payload 32 + 64k bytes) the slow way.
    #[test]
    fn a_message_read_through_the_queues_leaves_its_connection_idle() {
        let t = Duration::from_secs(10);
        let (mut a, mut b, ab, ba) = super::pair_with(ShmConfig::default());
        for len in [96, 100, 224, 1, 992] {
            let padless = (RECORD_HEADER_LEN + len) % crate::shm::ring::LINE == 0;
            a.send(ab, hdr(len as u64), &vec![len as u8; len], t)
                .unwrap();
            // No connection named: the general path, not the fast one.
            let r = recv_blocking(&mut b, RecvSpec::default(), vec![0; 1024], t).unwrap();
            assert_eq!(r.data, vec![len as u8; len]);
            assert!(
                matches!(b.conns[&ba].rx, Rx::Idle),
                "{len} B (padless: {padless}): connection not idle after its message"
            );
        }
    }

    /// Every eager size takes the receive fast path again after a message of that
    /// size went through the queues: no size may leave its connection in a state the
    /// fast path declines (a cliff in latency, not in correctness, that the bench's
    /// few sizes can miss).
    #[test]
    fn every_eager_size_returns_to_the_fast_path() {
        let cfg = ShmConfig::default();
        let eager = cfg.eager_threshold;
        let (mut a, mut b, ab, ba) = super::pair_with(cfg);
        let on = RecvSpec {
            conn: Some(ba),
            ..RecvSpec::default()
        };
        let sizes = (0..=320)
            .chain((352..=eager).step_by(32))
            .chain([eager - 1]);
        crate::device::assert_every_size_returns_to_the_fast_path(
            (&mut a, ab),
            &mut b,
            (RecvSpec::default(), on),
            hdr(0),
            sizes,
            |d: &ShmDevice| d.fast_receives,
        );
    }

    /// Over many laps of the ring, messages of mixed sizes — one-line records read
    /// through their stamp, multi-line ones that leave payload where later records
    /// start (lines the receiver must stop trusting), streamed ones, and bursts read
    /// through `head` — all arrive intact and in order. The payloads are hostile:
    /// wherever one covers a line start, it holds the stamp the record starting
    /// there one lap later will carry, and before each burst a receive must find
    /// nothing (a receiver that trusted such a line would take the forgery).
    #[test]
    fn mixed_sizes_over_many_laps_arrive_intact_in_order() {
        use crate::shm::ring::{LINE, STAMP_SHIFT, stamp};
        const CAP: usize = 64 * 1024;
        let t = Duration::from_secs(10);
        let (mut a, mut b, ab, ba) = super::pair_with(ShmConfig {
            ring_bytes: CAP,
            eager_threshold: 2048,
            ..ShmConfig::default()
        });
        let on = RecvSpec {
            conn: Some(ba),
            ..RecvSpec::default()
        };
        // Message `i` of `len` bytes whose record starts at ring position `pos`.
        let msg = |i: u64, len: usize, pos: usize| -> Vec<u8> {
            let mut m: Vec<u8> = (0..len).map(|k| (i as usize * 131 + k * 7) as u8).collect();
            let body = pos + RECORD_HEADER_LEN;
            let mut line = pos + LINE;
            while line + 32 <= body + len {
                let at = line + 24 - body;
                let forged = stamp((line + CAP) as u64) << STAMP_SHIFT;
                m[at..at + 8].copy_from_slice(&forged.to_le_bytes());
                line += LINE;
            }
            m
        };
        // Sizes from a fixed LCG: mostly up to one line of payload, some up to the
        // eager threshold, a few streamed (above it).
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut size = || {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            match (x >> 33) % 16 {
                0 => 2049 + (x >> 40) as usize % 6000,
                1..=4 => 33 + (x >> 40) as usize % 2016,
                _ => (x >> 40) as usize % 33,
            }
        };
        let (mut sent, mut got, mut pos) = (0u64, 0u64, 0usize);
        while pos < 20 * CAP {
            assert!(
                matches!(
                    b.recv(on, vec![0; 8192], Duration::ZERO),
                    Err(TransportError::Timeout(..))
                ),
                "nothing was sent yet (message {sent}, ring position {pos})"
            );
            // Bursts of up to three before reading: the later ones are read after
            // the first, through whatever path the device takes.
            let mut burst = Vec::new();
            for _ in 0..1 + sent % 3 {
                let len = size();
                let m = msg(sent, len, pos);
                let h = if len > 2048 {
                    Some(a.isend(ab, hdr(sent), m).unwrap())
                } else {
                    a.send(ab, hdr(sent), &m, t).unwrap();
                    None
                };
                burst.push((len, pos, h));
                pos += RECORD_HEADER_LEN + len + pad_for(len);
                sent += 1;
            }
            for (len, at, h) in burst {
                let r = if h.is_some() {
                    let rh = b.post_recv(on, vec![0; len]).unwrap();
                    loop {
                        a.progress().unwrap();
                        b.progress().unwrap();
                        if let Some(r) = b.test_recv(rh).unwrap() {
                            break r;
                        }
                    }
                } else {
                    b.recv(on, vec![0; len], t).unwrap()
                };
                assert_eq!(r.header.tag, got, "in order");
                assert!(
                    r.data == msg(got, len, at),
                    "message {got} ({len} B) intact"
                );
                if let Some(h) = h {
                    crate::device::wait_send(&mut a, h, t).unwrap();
                }
                got += 1;
            }
        }
        assert!(sent > 1000, "{sent} messages");
    }

    /// Two threads ping-pong small messages with random pauses on both sides, so
    /// replies are read through their stamp, through `head` after a sleep, and
    /// while the sender's `head` store is still on its way: a receiver that has
    /// moved past records through their stamps must never take a lagging `head` for
    /// less than what it already read (it did once: the receive then read garbage).
    #[test]
    fn threads_with_pauses_read_every_reply_once_in_order() {
        let t = Duration::from_secs(10);
        let (mut a, mut b, ab, ba) = super::pair_with(ShmConfig {
            ring_bytes: 64 * 1024,
            ..ShmConfig::default()
        });
        let n = 30_000u64;
        // A fixed LCG per side: mostly no pause, sometimes a spin, rarely a sleep.
        let pause = |x: &mut u64| {
            *x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            match (*x >> 33) % 64 {
                0 => std::thread::sleep(Duration::from_micros((*x >> 40) % 50)),
                1..=8 => {
                    for i in 0..(*x >> 40) % 5000 {
                        std::hint::black_box(i);
                    }
                }
                _ => {}
            }
        };
        let echo = std::thread::spawn(move || {
            let on = RecvSpec {
                conn: Some(ba),
                ..RecvSpec::default()
            };
            let mut x = 7;
            for _ in 0..n {
                let r = b.recv(on, vec![0; 64], t).unwrap();
                pause(&mut x);
                b.send(ba, r.header, &r.data, t).unwrap();
            }
        });
        let on = RecvSpec {
            conn: Some(ab),
            ..RecvSpec::default()
        };
        let mut x = 11;
        for i in 0..n {
            let m: Vec<u8> = (0..i % 64).map(|k| (i + k) as u8).collect();
            a.send(ab, hdr(i), &m, t).unwrap();
            pause(&mut x);
            let r = a.recv(on, vec![0; 64], t).unwrap();
            assert_eq!((r.header.tag, r.data), (i, m), "reply {i}");
        }
        echo.join().unwrap();
    }
}

/// Slot recycling and per-connection state in a long-lived process that sees many
/// short-lived peers come and go (the launcher's rank 0 across grow/shrink changes).
mod recycling {
    use super::super::*;
    use super::hdr;
    use crate::shm::layout::SLOT_FREE;

    const T: Duration = Duration::from_secs(10);
    const CYCLES: usize = 200;

    fn addrs(d: &ShmDevice) -> PeerAddrs {
        let mut a = PeerAddrs::default();
        d.local_address(&mut a);
        a
    }

    /// Slots of `dev`'s inbox that are not free, read through a second mapping.
    fn occupied(dev: &ShmDevice) -> usize {
        let inbox = Inbox::open(&dev.addr().segment).unwrap();
        (0..inbox.nslots())
            .filter(|&i| inbox.slot(i).state.load(Ordering::Acquire) != SLOT_FREE)
            .count()
    }

    /// Our mappings of any of `names` (other tests map segments of their own at the
    /// same time, so only the names this test made are counted).
    fn mappings_of(names: &[String]) -> usize {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter(|l| {
                let path = l.trim_end().trim_end_matches(" (deleted)");
                names.iter().any(|n| path.ends_with(&format!("/{n}")))
            })
            .count()
    }

    /// One short-lived peer: connects, says hello, gets a reply over the connection
    /// the long-lived side opened back. Returns the peer and the long-lived side's id.
    fn visit(root: &mut ShmDevice) -> (ShmDevice, ConnId) {
        let mut p = ShmDevice::new(ShmConfig::default()).unwrap();
        let pr = p.connect(&addrs(root)).unwrap();
        p.send(pr, hdr(1), b"hello", T).unwrap();
        let got = root.recv(RecvSpec::default(), vec![0; 8], T).unwrap();
        assert_eq!(got.data, b"hello");
        root.send(got.conn, hdr(2), b"reply", T).unwrap();
        let back = p.recv(RecvSpec::default(), vec![0; 8], T).unwrap();
        assert_eq!(back.data, b"reply");
        (p, got.conn)
    }

    /// The launcher's order: the long-lived side releases the connection while the
    /// peer is still alive and attached, and the peer closes its side only later. The
    /// slot must come back once the peer closes, or a small inbox runs out.
    #[test]
    fn long_lived_side_disconnecting_first_recycles_slots() {
        let cfg = ShmConfig {
            slots: 4,
            ..ShmConfig::default()
        };
        let mut root = ShmDevice::new(cfg).unwrap();
        let mut names = Vec::new();
        for cycle in 0..CYCLES {
            let (p, conn) = visit(&mut root);
            names.push(p.addr().segment.clone());
            root.disconnect(conn)
                .unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
            drop(p);
            // Nothing of the departed peer stays mapped, whoever closed first.
            assert_eq!(mappings_of(&names), 0, "cycle {cycle}");
        }
        root.progress().unwrap();
        assert_eq!(occupied(&root), 0, "every slot recycled");
        assert_eq!(root.conns.len() + root.dead.len(), 0);
        assert!(
            root.accepted.is_empty(),
            "disconnected conns left in accepted"
        );
    }

    /// A peer may close right after its last sends (the launcher's root broadcasts,
    /// then drops the communicator): the connection ends at once, but what arrived
    /// before the close is still received on it, in order; only then does it fail.
    #[test]
    fn messages_sent_before_a_close_are_received_after_it() {
        let mut root = ShmDevice::new(ShmConfig::default()).unwrap();
        let mut p = ShmDevice::new(ShmConfig::default()).unwrap();
        let pr = p.connect(&addrs(&root)).unwrap();
        let got = {
            p.send(pr, hdr(1), b"one", T).unwrap();
            root.recv(RecvSpec::default(), vec![0; 8], T).unwrap()
        };
        p.send(pr, hdr(2), b"two", T).unwrap();
        p.send(pr, hdr(3), b"three", T).unwrap();
        drop(p);
        root.progress().unwrap();
        assert!(root.dead.contains_key(&got.conn), "the close was seen");
        let on = |tag| RecvSpec {
            conn: Some(got.conn),
            tag,
            ..RecvSpec::default()
        };
        assert_eq!(
            root.recv(on(Some(3)), vec![0; 8], T).unwrap().data,
            b"three"
        );
        assert_eq!(root.recv(on(None), vec![0; 8], T).unwrap().data, b"two");
        let e = root.recv(on(None), vec![0; 8], T).unwrap_err();
        assert!(matches!(e, TransportError::PeerClosed { .. }), "{e}");
    }

    /// A large message may wait in the ring until it is asked for (rendezvous), but not
    /// past its sender's close: the ring is recycled then, so the message is kept.
    #[test]
    fn large_message_waiting_in_the_ring_survives_the_close() {
        let mut root = ShmDevice::new(ShmConfig::default()).unwrap();
        let mut p = ShmDevice::new(ShmConfig::default()).unwrap();
        let pr = p.connect(&addrs(&root)).unwrap();
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 13) as u8).collect();
        p.send(pr, hdr(1), &big, T).unwrap();
        let id = loop {
            root.progress().unwrap();
            if let Some(c) = root.accepted.front() {
                break *c;
            }
        };
        drop(p);
        root.progress().unwrap();
        assert!(root.dead.contains_key(&id), "the close was seen");
        let spec = RecvSpec {
            conn: Some(id),
            ..RecvSpec::default()
        };
        let r = root.recv(spec, vec![0; big.len()], T).unwrap();
        assert!(r.data == big);
    }

    /// A peer that closes its side frees its slot and the mapping of its inbox at once,
    /// even though the long-lived side never disconnects its id; receiving on that id
    /// still fails with the peer's close.
    #[test]
    fn closed_peers_free_slots_without_a_disconnect() {
        let cfg = ShmConfig {
            slots: 4,
            ..ShmConfig::default()
        };
        let mut root = ShmDevice::new(cfg).unwrap();
        let mut names = Vec::new();
        let mut ids = Vec::new();
        for cycle in 0..CYCLES {
            let (p, conn) = visit(&mut root);
            names.push(p.addr().segment.clone());
            ids.push(conn);
            drop(p);
            root.progress().unwrap();
            assert_eq!(occupied(&root), 0, "cycle {cycle}");
            assert_eq!(mappings_of(&names), 0, "cycle {cycle}");
        }
        let spec = RecvSpec {
            conn: ids.last().copied(),
            ..RecvSpec::default()
        };
        let e = root.recv(spec, vec![0; 8], T).unwrap_err();
        assert!(matches!(e, TransportError::PeerClosed { .. }), "{e}");
        assert_eq!(root.conns.len(), 0, "no live connection left");
        // The tombstones go once their ids are released.
        for id in ids {
            root.disconnect(id).unwrap();
        }
        assert_eq!(root.dead.len() + root.accepted.len(), 0);
    }
}

mod single_copy {
    use super::super::*;
    use super::hdr;
    use crate::device::{accept_blocking, recv_blocking, wait_send};
    use crate::shm::layout::CMA_UNKNOWN;

    const T: Duration = Duration::from_secs(10);
    const ON: CmaMode = CmaMode::On {
        threshold: 64 * 1024,
    };

    fn pair_with(sender: CmaMode, receiver: CmaMode) -> (ShmDevice, ShmDevice, ConnId, ConnId) {
        let cfg = |cma| ShmConfig {
            cma,
            ..ShmConfig::default()
        };
        let mut a = ShmDevice::new(cfg(sender)).unwrap();
        let mut b = ShmDevice::new(cfg(receiver)).unwrap();
        let mut pb = PeerAddrs::default();
        b.local_address(&mut pb);
        let ab = a.connect(&pb).unwrap();
        // Attaching the slot is when the receiver probes the sender; `a` attaches (and
        // probes) the way back at its next progress.
        let ba = accept_blocking(&mut b, T).unwrap();
        a.progress().unwrap();
        (a, b, ab, ba)
    }

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// The state the receiver published for the sender's ring.
    fn probed(a: &ShmDevice, ab: ConnId) -> u32 {
        let c = &a.conns[&ab];
        c.peer.slot(c.out_slot).cma.load(Ordering::Relaxed)
    }

    /// Drives both devices until `h` completes on `b`.
    fn finish(a: &mut ShmDevice, b: &mut ShmDevice, h: RecvHandle) -> Received {
        let deadline = Instant::now() + T;
        loop {
            a.progress().unwrap();
            b.progress().unwrap();
            if let Some(r) = b.test_recv(h).unwrap() {
                return r;
            }
            assert!(Instant::now() < deadline, "receive never completed");
        }
    }

    /// 4 MiB and 1 MiB + 1 go by single copy (the counter proves it), byte for byte,
    /// and a small message after them still takes the ring, in order.
    #[test]
    fn large_messages_are_read_by_single_copy() {
        let (mut a, mut b, ab, _) = pair_with(ON, ON);
        assert_eq!(probed(&a, ab), CMA_OK);
        let m1 = pattern(1, 4 << 20);
        let m2 = pattern(2, (1 << 20) + 1);
        let h1 = a.isend(ab, hdr(1), m1.clone()).unwrap();
        let h2 = a.isend(ab, hdr(2), m2.clone()).unwrap();
        let h3 = a.isend(ab, hdr(3), b"tail".to_vec()).unwrap();
        assert!(
            !a.test_send(h1).unwrap(),
            "done only once the receiver read it"
        );
        let any = RecvSpec::default();
        let r1 = b.post_recv(any, vec![0; m1.len()]).unwrap();
        let r1 = finish(&mut a, &mut b, r1);
        let r2 = b.post_recv(any, vec![0; m2.len() + 100]).unwrap();
        let r2 = finish(&mut a, &mut b, r2);
        // The tail is queued behind the requests: only `a`'s progress sends it.
        let r3 = b.post_recv(any, vec![0; 8]).unwrap();
        let r3 = finish(&mut a, &mut b, r3);
        assert_eq!((r1.header.tag, r2.header.tag, r3.header.tag), (1, 2, 3));
        assert!(r1.data == m1, "4 MiB intact");
        assert!(r2.data == m2, "1 MiB + 1 intact");
        assert_eq!(r3.data, b"tail");
        for h in [h1, h2, h3] {
            wait_send(&mut a, h, T).unwrap();
        }
        assert_eq!(b.single_copy_receives(), 2);
    }

    /// Blocking sends both ways across two threads (each side's send waits for the
    /// other's read, its wait woken by the answer).
    #[test]
    fn blocking_ping_pong_across_threads() {
        let (mut a, mut b, ab, ba) = pair_with(ON, ON);
        let n = (1 << 20) + 1;
        let echo = std::thread::spawn(move || {
            for _ in 0..20 {
                let r = b.recv(RecvSpec::default(), vec![0; n], T).unwrap();
                b.send(ba, r.header, &r.data, T).unwrap();
            }
            b.single_copy_receives()
        });
        for i in 0..20u8 {
            let m = pattern(i, n);
            a.send(ab, hdr(u64::from(i)), &m, T).unwrap();
            let r = a.recv(RecvSpec::default(), vec![0; n], T).unwrap();
            assert!(r.data == m && r.header.tag == u64::from(i));
        }
        assert_eq!(echo.join().unwrap(), 20);
        assert_eq!(a.single_copy_receives(), 20);
    }

    /// A request nobody asked for waits (rendezvous) until a receive is posted; one
    /// posted behind it (for a later message) makes it buffered at once.
    #[test]
    fn unexpected_requests_wait_or_are_buffered() {
        let (mut a, mut b, ab, _) = pair_with(ON, ON);
        let big = pattern(7, 300_000);
        let h = a.isend(ab, hdr(1), big.clone()).unwrap();
        for _ in 0..20 {
            a.progress().unwrap();
            b.progress().unwrap();
        }
        assert!(!a.test_send(h).unwrap(), "not read before anyone asks");
        let h2 = a.isend(ab, hdr(2), b"later".to_vec()).unwrap();
        let want2 = RecvSpec {
            tag: Some(2),
            ..RecvSpec::default()
        };
        let r2 = b.post_recv(want2, vec![0; 8]).unwrap();
        let r2 = finish(&mut a, &mut b, r2);
        assert_eq!(r2.data, b"later");
        wait_send(&mut a, h, T).unwrap();
        wait_send(&mut a, h2, T).unwrap();
        let r1 = recv_blocking(&mut b, RecvSpec::default(), vec![0; big.len()], T).unwrap();
        assert!(r1.header.tag == 1 && r1.data == big);
        assert_eq!(b.single_copy_receives(), 1);
    }

    /// A receiver that does not take part (CMA off, as with `DYNRES_SHM_CMA=0`) never
    /// marks the sender's ring: everything goes through the ring, intact.
    #[test]
    fn receiver_without_single_copy_gets_the_ring_path() {
        let (mut a, mut b, ab, _) = pair_with(ON, CmaMode::Off);
        assert_eq!(probed(&a, ab), CMA_NO);
        let m = pattern(3, (1 << 20) + 1);
        let h = a.isend(ab, hdr(1), m.clone()).unwrap();
        let r = b.post_recv(RecvSpec::default(), vec![0; m.len()]).unwrap();
        let r = finish(&mut a, &mut b, r);
        wait_send(&mut a, h, T).unwrap();
        assert!(r.data == m);
        assert_eq!(b.single_copy_receives(), 0);
    }

    /// A sender that does not take part publishes no probe word: the probe fails.
    #[test]
    fn sender_without_single_copy_is_probed_no() {
        let (mut a, mut b, ab, _) = pair_with(CmaMode::Off, ON);
        assert_eq!(probed(&a, ab), CMA_NO);
        let m = pattern(4, 200_000);
        a.send(ab, hdr(1), &m[..1000], T).unwrap();
        let h = a.isend(ab, hdr(2), m.clone()).unwrap();
        let r = recv_blocking(&mut b, RecvSpec::default(), vec![0; 1000], T).unwrap();
        assert!(r.data == m[..1000]);
        let r = recv_blocking(&mut b, RecvSpec::default(), vec![0; m.len()], T).unwrap();
        wait_send(&mut a, h, T).unwrap();
        assert!(r.data == m);
        assert_eq!(b.single_copy_receives(), 0);
    }

    /// A read refused at use (`EPERM`, simulated) is answered FALLBACK: the payload
    /// follows through the ring and arrives intact; later messages use the ring.
    #[test]
    fn refused_read_falls_back_to_the_ring() {
        let (mut a, mut b, ab, _) = pair_with(ON, ON);
        b.refuse_read_at = Some(0);
        let m = pattern(5, (1 << 20) + 1);
        let h = a.isend(ab, hdr(1), m.clone()).unwrap();
        let r = b.post_recv(RecvSpec::default(), vec![0; m.len()]).unwrap();
        let r = finish(&mut a, &mut b, r);
        wait_send(&mut a, h, T).unwrap();
        assert!(r.data == m, "fallback delivered the bytes");
        assert_eq!(b.single_copy_receives(), 0);
        assert_eq!(probed(&a, ab), CMA_NO, "no more requests from this sender");
        let h = a.isend(ab, hdr(2), m.clone()).unwrap();
        let r = b.post_recv(RecvSpec::default(), vec![0; m.len()]).unwrap();
        let r = finish(&mut a, &mut b, r);
        wait_send(&mut a, h, T).unwrap();
        assert!(r.header.tag == 2 && r.data == m);
        assert_eq!(b.single_copy_receives(), 0);
    }

    /// An unexpected request buffered because a later receive waits behind it, whose
    /// read is refused half-way: the payload comes again through the ring and the
    /// message holds it once, intact (the part already read is not kept).
    #[test]
    fn refusal_half_way_through_a_buffered_request() {
        let (mut a, mut b, ab, _) = pair_with(ON, ON);
        let m = pattern(8, 300_000);
        b.refuse_read_at = Some(150_000);
        let h = a.isend(ab, hdr(1), m.clone()).unwrap();
        let h2 = a.isend(ab, hdr(2), b"later".to_vec()).unwrap();
        let want2 = RecvSpec {
            tag: Some(2),
            ..RecvSpec::default()
        };
        let r2 = b.post_recv(want2, vec![0; 8]).unwrap();
        let r2 = finish(&mut a, &mut b, r2);
        assert_eq!(r2.data, b"later");
        wait_send(&mut a, h, T).unwrap();
        wait_send(&mut a, h2, T).unwrap();
        let r1 = recv_blocking(&mut b, RecvSpec::default(), vec![0; 400_000], T).unwrap();
        assert_eq!(r1.data.len(), m.len());
        assert!(r1.data == m);
        assert_eq!(b.single_copy_receives(), 0);
    }

    /// A blocking send whose receiver never asks times out and withdraws its request:
    /// the receive posted afterwards gets `SendWithdrawn`, not the (freed) buffer, and
    /// the connection carries on.
    #[test]
    fn timed_out_send_withdraws_its_request() {
        let (mut a, mut b, ab, _) = pair_with(ON, ON);
        let m = pattern(6, 1 << 20);
        let e = a
            .send(ab, hdr(1), &m, Duration::from_millis(30))
            .unwrap_err();
        assert!(matches!(e, TransportError::Timeout(..)), "{e}");
        drop(m);
        let e = recv_blocking(&mut b, RecvSpec::default(), vec![0; 1 << 20], T).unwrap_err();
        assert!(
            matches!(e, TransportError::SendWithdrawn { len, .. } if len == 1 << 20),
            "{e}"
        );
        a.send(ab, hdr(2), b"after", T).unwrap();
        let r = recv_blocking(&mut b, RecvSpec::default(), vec![0; 8], T).unwrap();
        assert_eq!((r.header.tag, &r.data[..]), (2, &b"after"[..]));
        assert_eq!(b.single_copy_receives(), 0);
    }

    /// A recycled slot forgets the probe and the last answer: the next sender starts
    /// unprobed, with sequence numbers that cannot match a stale answer.
    #[test]
    fn recycled_slot_starts_unprobed() {
        let (mut a, mut b, ab, _) = pair_with(ON, ON);
        a.send(ab, hdr(1), &pattern(1, 100_000), Duration::from_millis(1))
            .unwrap_err();
        let c = &a.conns[&ab];
        let slot = c.peer.slot(c.out_slot);
        assert_ne!(slot.cma_ack.load(Ordering::Relaxed), 0);
        slot.recycle();
        assert_eq!(slot.cma.load(Ordering::Relaxed), CMA_UNKNOWN);
        assert_eq!(slot.cma_ack.load(Ordering::Relaxed), 0);
        drop(b.finalize());
    }
}

/// Every order of one sender's connect / send / send / close and one receiver's
/// scan / accept / receive (posted before or after the messages exist).
mod orders {
    use super::super::*;
    use super::hdr;
    use crate::shm::layout::SLOT_FREE;

    const T: Duration = Duration::from_secs(10);
    /// A small inbox, so "every slot claimable again" is cheap to check.
    const SLOTS: usize = 2;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Step {
        /// Sender: connect to the receiver.
        Connect,
        /// Sender: send message `n` (eager, whole in the ring).
        Send(u8),
        /// Sender: close — disconnect only, or drop the whole device (which unlinks
        /// its inbox, so the receiver has no way back to it).
        Close,
        /// Receiver: one `progress` (its inbox scan included).
        Scan,
        /// Receiver: one non-blocking `accept`.
        Accept,
        /// Receiver: posts the receive for the `n`th message (from any connection).
        Post(u8),
    }

    /// Every interleaving of the two sides' program orders (each side's own order is
    /// kept; nothing else constrains the receiver, whose steps do not block).
    fn interleavings(a: &[Step], b: &[Step]) -> Vec<Vec<Step>> {
        if a.is_empty() || b.is_empty() {
            return vec![[a, b].concat()];
        }
        let mut out = Vec::new();
        for (first, rest_a, rest_b) in [(a[0], &a[1..], b), (b[0], a, &b[1..])] {
            for mut tail in interleavings(rest_a, rest_b) {
                tail.insert(0, first);
                out.push(tail);
            }
        }
        out
    }

    /// The receiver's orders: scan, accept and the two posts (first before second).
    fn receiver_orders() -> Vec<Vec<Step>> {
        let steps = [Step::Scan, Step::Accept, Step::Post(1), Step::Post(2)];
        let mut out = Vec::new();
        for a in 0..4 {
            for b in 0..4 {
                for c in 0..4 {
                    for d in 0..4 {
                        let idx = [a, b, c, d];
                        let distinct = (0..4).all(|i| (0..i).all(|j| idx[i] != idx[j]));
                        let order: Vec<Step> = idx.iter().map(|&i| steps[i]).collect();
                        let posts_in_order = order.iter().position(|s| *s == Step::Post(1))
                            < order.iter().position(|s| *s == Step::Post(2));
                        if distinct && posts_in_order {
                            out.push(order);
                        }
                    }
                }
            }
        }
        out
    }

    fn payload(n: u8) -> Vec<u8> {
        vec![n; 40 + n as usize]
    }

    /// Runs one order; panics (with the order) on a lost, duplicated or reordered
    /// message, a second connection, or a slot not recycled.
    fn run(order: &[Step], drop_on_close: bool) {
        let cfg = ShmConfig {
            slots: SLOTS,
            ..ShmConfig::default()
        };
        let mut r = ShmDevice::new(cfg.clone()).unwrap();
        let mut s = Some(ShmDevice::new(cfg).unwrap());
        let mut to_r = PeerAddrs::default();
        r.local_address(&mut to_r);
        let mut conn = None;
        let mut accepted = None;
        let mut posted = Vec::new();
        for step in order {
            match *step {
                Step::Connect => conn = Some(s.as_mut().unwrap().connect(&to_r).unwrap()),
                Step::Send(n) => {
                    let (s, c) = (s.as_mut().unwrap(), conn.unwrap());
                    s.send(c, hdr(u64::from(n)), &payload(n), T).unwrap();
                }
                Step::Close if drop_on_close => s = None,
                Step::Close => s.as_mut().unwrap().disconnect(conn.unwrap()).unwrap(),
                Step::Scan => {
                    r.progress().unwrap();
                }
                Step::Accept => {
                    if let Some(id) = r.accept().unwrap() {
                        assert!(accepted.replace(id).is_none(), "{order:?}: two accepts");
                    }
                }
                Step::Post(_) => {
                    posted.push(r.post_recv(RecvSpec::default(), vec![0; 64]).unwrap())
                }
            }
        }
        let id = match accepted {
            Some(id) => id,
            None => crate::device::accept_blocking(&mut r, T)
                .unwrap_or_else(|e| panic!("{order:?} drop={drop_on_close}: never accepted: {e}")),
        };
        assert_eq!(r.accept().unwrap(), None, "{order:?}: one connection only");
        let deadline = Instant::now() + T;
        let mut got = vec![None; posted.len()];
        while got.iter().any(Option::is_none) {
            r.progress().unwrap();
            for (g, h) in got.iter_mut().zip(&posted) {
                if g.is_none() {
                    *g = r.test_recv(*h).unwrap_or_else(|e| {
                        panic!("{order:?} drop={drop_on_close}: receive failed: {e}")
                    });
                }
            }
            assert!(
                Instant::now() < deadline,
                "{order:?} drop={drop_on_close}: lost"
            );
        }
        for (n, g) in (1u8..).zip(got) {
            let g = g.unwrap();
            assert_eq!((g.conn, g.header.tag), (id, u64::from(n)), "{order:?}");
            assert_eq!(g.data, payload(n), "{order:?}");
        }
        // Nothing more: the next receive on the connection fails with the close.
        let spec = RecvSpec {
            conn: Some(id),
            ..RecvSpec::default()
        };
        let e = r.recv(spec, vec![0; 64], T).unwrap_err();
        assert!(
            matches!(e, TransportError::PeerClosed { .. }),
            "{order:?}: {e}"
        );
        // Every slot of the receiver's inbox is free and can be claimed again.
        let inbox = Inbox::open(&r.addr().segment).unwrap();
        for i in 0..SLOTS {
            assert_eq!(
                inbox.slot(i).state.load(Ordering::Acquire),
                SLOT_FREE,
                "{order:?} drop={drop_on_close}: slot {i} not recycled"
            );
        }
        for _ in 0..SLOTS {
            inbox.claim("next").unwrap();
        }
        drop(s);
    }

    /// Every interleaving, with both kinds of close (including close, and the
    /// sender's whole device gone, before the receiver's first scan): each message
    /// arrives once, in order, on the one accepted connection, and the slot comes back.
    #[test]
    fn every_order_delivers_once_in_order_and_recycles_the_slot() {
        let sender = [Step::Connect, Step::Send(1), Step::Send(2), Step::Close];
        let mut cases = 0;
        for recv in receiver_orders() {
            for order in interleavings(&sender, &recv) {
                for drop_on_close in [false, true] {
                    run(&order, drop_on_close);
                    cases += 1;
                }
            }
        }
        assert_eq!(cases, 12 * 70 * 2, "the enumeration itself");
    }
}
