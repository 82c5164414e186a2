//! Tests of the shared-memory device (in-process pairs of devices).

mod basic {
    use super::super::*;
    use crate::device::{accept_blocking, recv_blocking, wait_send};

    const T: Duration = Duration::from_secs(10);

    fn pair() -> (ShmDevice, ShmDevice, ConnId, ConnId) {
        let mut a = ShmDevice::new(ShmConfig::default()).unwrap();
        let mut b = ShmDevice::new(ShmConfig::default()).unwrap();
        let mut pb = PeerAddrs::default();
        b.local_address(&mut pb);
        let ab = a.connect(&pb).unwrap();
        let ba = accept_blocking(&mut b, T).unwrap();
        (a, b, ab, ba)
    }

    fn hdr(tag: u64) -> MsgHeader {
        MsgHeader {
            source: 1,
            tag,
            context_id: 0,
            len: 0,
        }
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
}
