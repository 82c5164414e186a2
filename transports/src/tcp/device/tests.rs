//! Tests of the TCP device: round trips, reuse, and hostile peers.

use super::*;
use crate::device::recv_blocking;

mod hostile;

const T: Duration = Duration::from_secs(10);

fn pair() -> (TcpDevice, TcpDevice, ConnId, ConnId) {
    pair_with(TcpConfig::default())
}

/// `a` connects to `b`; both progress until `b` has accepted the authenticated
/// connection (the handshake needs both sides).
fn link(a: &mut TcpDevice, b: &mut TcpDevice) -> (ConnId, ConnId) {
    let mut pb = PeerAddrs::default();
    b.local_address(&mut pb);
    let ab = a.connect(&pb).unwrap();
    let deadline = Instant::now() + T;
    loop {
        a.progress().unwrap();
        b.progress().unwrap();
        if let Some(ba) = b.accept().unwrap() {
            return (ab, ba);
        }
        assert!(Instant::now() < deadline, "no handshake");
    }
}

/// Both progress until neither has a handshake pending.
fn settle(a: &mut TcpDevice, b: &mut TcpDevice) {
    let deadline = Instant::now() + T;
    while a.pending + b.pending > 0 {
        a.progress().unwrap();
        b.progress().unwrap();
        assert!(Instant::now() < deadline, "handshakes never ended");
    }
}

/// A frame as a raw peer writes it.
use framing::encode_frame as frame;

/// The next message on `conn` (at most `cap` bytes).
fn received(b: &mut TcpDevice, conn: ConnId, cap: usize) -> Vec<u8> {
    let on = RecvSpec {
        conn: Some(conn),
        ..any()
    };
    recv_blocking(b, on, vec![0; cap], T).unwrap().data
}

/// `a` sends `msg` on `ab`, and `b` receives it on `ba`.
fn assert_delivers(a: &mut TcpDevice, ab: ConnId, b: &mut TcpDevice, ba: ConnId, msg: &[u8]) {
    a.send(ab, hdr(1), msg, T).unwrap();
    assert_eq!(received(b, ba, msg.len()), msg);
}

/// Reads one frame off a blocking raw socket.
fn read_frame(raw: &mut TcpStream) -> (FrameHeader, Vec<u8>) {
    let mut head = [0u8; FRAME_HEADER_LEN];
    raw.read_exact(&mut head).unwrap();
    let fh = framing::parse_header(&head, 1 << 20).unwrap().unwrap();
    let mut payload = vec![0; fh.msg.len as usize];
    raw.read_exact(&mut payload).unwrap();
    (fh, payload)
}

/// The connector's half of the handshake, by hand, on a raw socket to `to`, with
/// `key`, claiming `claim`, in a thread (the device under test progresses meanwhile).
/// Returns the socket and every byte it sent (for replays).
fn spawn_raw(
    to: SocketAddr,
    key: DataKey,
    claim: SocketAddr,
) -> std::thread::JoinHandle<(TcpStream, Vec<u8>)> {
    std::thread::spawn(move || {
        let mut raw = TcpStream::connect(to).unwrap();
        raw.set_read_timeout(Some(T)).unwrap();
        let nonce = auth::nonce().unwrap();
        let hello = auth::encode_hello(key.id(), &nonce, claim);
        let mut sent = frame(FrameKind::Hello, MsgHeader::default(), &hello);
        raw.write_all(&sent).unwrap();
        let (fh, payload) = read_frame(&mut raw);
        assert_eq!(fh.kind, FrameKind::Challenge);
        let (theirs, tag, dialled_too) = auth::parse_challenge(&payload).unwrap();
        let t = auth::transcript(&hello, to, &theirs, dialled_too);
        assert!(
            auth::verify_acceptor(&key, &t, &tag),
            "the device proves the key"
        );
        let proof = frame(
            FrameKind::Auth,
            MsgHeader::default(),
            &auth::connector_tag(&key, &t),
        );
        raw.write_all(&proof).unwrap();
        sent.extend_from_slice(&proof);
        (raw, sent)
    })
}

/// [`spawn_raw`] to `b`, which accepts it. Returns the socket, the device's
/// connection, and every byte the raw side sent.
fn raw_handshake(
    b: &mut TcpDevice,
    key: &DataKey,
    claim: SocketAddr,
) -> (TcpStream, ConnId, Vec<u8>) {
    let client = spawn_raw(b.listen_addr(), key.clone(), claim);
    let deadline = Instant::now() + T;
    let conn = loop {
        b.progress().unwrap();
        if let Some(c) = b.accept().unwrap() {
            break c;
        }
        assert!(Instant::now() < deadline, "raw handshake not accepted");
        b.poll(Duration::from_millis(1)).unwrap();
    };
    let (raw, sent) = client.join().unwrap();
    (raw, conn, sent)
}

fn hdr(tag: u64) -> MsgHeader {
    MsgHeader {
        source: 3,
        tag,
        context_id: 9,
        len: 0,
    }
}

fn any() -> RecvSpec {
    RecvSpec {
        context_id: 9,
        ..RecvSpec::default()
    }
}

#[test]
fn small_and_large_messages_and_reuse() {
    let (mut a, mut b, ab, ba) = pair();
    let big: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    a.send(ab, hdr(1), b"hi", T).unwrap();
    let h = a.isend(ab, hdr(2), big.clone()).unwrap();
    let r = recv_blocking(&mut b, any(), vec![0; 4], T).unwrap();
    assert_eq!(
        (r.header.source, r.header.tag, &r.data[..]),
        (3, 1, &b"hi"[..])
    );
    let rh = b.post_recv(any(), vec![0; big.len()]).unwrap();
    let got = loop {
        a.progress().unwrap();
        b.progress().unwrap();
        if let Some(r) = b.test_recv(rh).unwrap() {
            break r;
        }
    };
    assert!(a.test_send(h).unwrap());
    assert!(got.data == big);
    let mut pa = PeerAddrs::default();
    a.local_address(&mut pa);
    assert_eq!(
        b.connect(&pa).unwrap(),
        ba,
        "HELLO lets the accepted socket be reused"
    );
    b.send(ba, hdr(3), b"back", T).unwrap();
    assert_eq!(
        recv_blocking(&mut a, any(), vec![0; 8], T).unwrap().data,
        b"back"
    );
}

#[test]
fn garbage_closes_the_connection_with_a_typed_error() {
    let (mut b, mut raw, conn) = raw_peer(TcpConfig::default());
    raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let spec = RecvSpec {
        conn: Some(conn),
        ..any()
    };
    let e = recv_blocking(&mut b, spec, vec![0; 8], T).unwrap_err();
    assert!(matches!(e, TransportError::Malformed { .. }), "{e}");
    // The device closed its end: the raw peer sees EOF (or a reset), not silence.
    raw.set_read_timeout(Some(T)).unwrap();
    let mut buf = [0u8; 64];
    let mut n = raw.read(&mut buf).unwrap_or(0);
    while n > 0 {
        n = raw.read(&mut buf).unwrap_or(0);
    }
    assert!(b.send(conn, hdr(0), b"x", T).is_err());
}

#[test]
fn peer_close_mid_message_is_reported() {
    let (mut b, mut raw, conn) = raw_peer(TcpConfig::default());
    let head = framing::encode(&FrameHeader {
        kind: FrameKind::Data,
        msg: MsgHeader { len: 100, ..hdr(1) },
    });
    raw.write_all(&head).unwrap();
    raw.write_all(&[7; 10]).unwrap();
    drop(raw);
    let spec = RecvSpec {
        conn: Some(conn),
        ..any()
    };
    let e = recv_blocking(&mut b, spec, vec![0; 100], T).unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::PeerClosed {
                mid_message: true,
                ..
            }
        ),
        "{e}"
    );
}

/// A large unmatched message waits in the socket, but never in front of a receive
/// that is waiting for a later message on the same connection.
#[test]
fn stalled_large_message_does_not_block_a_later_small_one() {
    let (mut a, mut b, ab, _) = pair();
    let big = vec![5u8; 4 << 20];
    let s1 = a.isend(ab, hdr(1), big.clone()).unwrap();
    let s2 = a.isend(ab, hdr(2), b"small".to_vec()).unwrap();
    for _ in 0..50 {
        a.progress().unwrap();
        b.progress().unwrap();
    }
    let want2 = RecvSpec {
        tag: Some(2),
        ..any()
    };
    let small = b.post_recv(want2, vec![0; 8]).unwrap();
    let got = loop {
        a.progress().unwrap();
        b.progress().unwrap();
        if let Some(r) = b.test_recv(small).unwrap() {
            break r;
        }
    };
    assert_eq!(got.data, b"small");
    let r = recv_blocking(&mut b, any(), vec![0; big.len()], T).unwrap();
    assert!(r.header.tag == 1 && r.data == big);
    assert!(a.test_send(s1).unwrap() && a.test_send(s2).unwrap());
}

/// DATA-1: two processes whose first act is a blocking send to each other (each the
/// other's connector and acceptor at once) both get through, well within the
/// handshake's deadline: a send waiting for its CHALLENGE also answers the peer's HELLO.
/// In one process the send loop's polls return at once, so this passes even without
/// the listener in the send's poll; the end-to-end
/// `tests/tests/spawn.rs::independent_jobs_talk_over_tcp_with_their_connections_key`
/// is what lost that race (2 runs in 6 before, 0 in 8 after).
#[test]
fn two_blocking_first_sends_to_each_other_both_complete() {
    let mut a = TcpDevice::new(TcpConfig::default()).unwrap();
    let mut b = TcpDevice::new(TcpConfig::default()).unwrap();
    let (mut pa, mut pb) = (PeerAddrs::default(), PeerAddrs::default());
    a.local_address(&mut pa);
    b.local_address(&mut pb);
    // Both have looked at their listeners already (a fresh device looks once), so
    // each one's connection arrives while the other is busy elsewhere.
    a.progress().unwrap();
    b.progress().unwrap();
    let ab = a.connect(&pb).unwrap();
    let ba = b.connect(&pa).unwrap();
    // Under the 10 s handshake deadline, far over what the exchange needs even on a
    // loaded machine (3 s failed there once in a run of every test at load 80).
    let bound = Duration::from_secs(8);
    // Each then receives, as a program's next call would: the one whose send finished
    // first still answers the other's HELLO meanwhile.
    let exchange = move |d: &mut TcpDevice, c: ConnId, tag: u64, msg: &[u8]| {
        d.send(c, hdr(tag), msg, bound)?;
        let on = RecvSpec {
            conn: Some(c),
            ..any()
        };
        recv_blocking(d, on, vec![0; 16], bound).map(|r| r.data)
    };
    let other = std::thread::spawn(move || exchange(&mut b, ba, 2, b"from b"));
    let got_a = exchange(&mut a, ab, 1, b"from a").expect("a's send and receive");
    let got_b = other.join().unwrap().expect("b's send and receive");
    assert_eq!(got_a, b"from b");
    assert_eq!(got_b, b"from a");
}

/// Two devices dialled at once, before either saw the other's socket (`connect` does
/// not accept first here).
fn dialled_at_once() -> (TcpDevice, TcpDevice, ConnId, ConnId, PeerAddrs) {
    let mut a = TcpDevice::new(TcpConfig::default()).unwrap();
    let mut b = TcpDevice::new(TcpConfig::default()).unwrap();
    let (mut pa, mut pb) = (PeerAddrs::default(), PeerAddrs::default());
    a.local_address(&mut pa);
    b.local_address(&mut pb);
    a.connect_accepts = false;
    b.connect_accepts = false;
    let ab = a.connect(&pb).unwrap();
    // b has not looked at its listener yet: it connects too instead of reusing.
    b.listener_ready = false;
    b.progress_calls = 1;
    let ba = b.connect(&pa).unwrap();
    assert_eq!(b.conns.len(), 1, "b did not accept before connecting");
    (a, b, ab, ba, pb)
}

/// Until both have closed what they no longer use.
fn one_socket_each(a: &mut TcpDevice, b: &mut TcpDevice) {
    let deadline = Instant::now() + T;
    while a.conns.len() + b.conns.len() > 2 {
        a.progress().unwrap();
        b.progress().unwrap();
        assert!(
            Instant::now() < deadline,
            "still {} and {} sockets",
            a.conns.len(),
            b.conns.len()
        );
    }
}

/// DATA-13: two processes that dial each other at once end with one socket between
/// them, carrying both directions: the one dialled by the lower listening address.
/// Messages queued by either side before that (the higher side's wait behind the
/// join) arrive in order with those sent after; closing one side closes it, and the
/// other still receives what was sent before.
#[test]
fn simultaneous_connect_becomes_one_socket() {
    let (mut a, mut b, ab, ba, pb) = dialled_at_once();
    let on = |c| RecvSpec {
        conn: Some(c),
        ..any()
    };
    // Queued during the handshakes.
    let early = [
        a.isend(ab, hdr(1), vec![0]).unwrap(),
        b.isend(ba, hdr(1), vec![10]).unwrap(),
    ];
    settle(&mut a, &mut b);
    for i in 1..3u8 {
        a.send(ab, hdr(1), &[i], T).unwrap();
        b.send(ba, hdr(1), &[10 + i], T).unwrap();
    }
    for i in 0..3u8 {
        let r = recv_blocking(&mut b, on(ba), vec![0; 1], T).unwrap();
        assert_eq!((r.conn, &r.data[..]), (ba, &[i][..]));
        let r = recv_blocking(&mut a, on(ab), vec![0; 1], T).unwrap();
        assert_eq!((r.conn, &r.data[..]), (ab, &[10 + i][..]));
    }
    assert!(a.test_send(early[0]).unwrap() && b.test_send(early[1]).unwrap());
    one_socket_each(&mut a, &mut b);
    // The socket left is the one the lower address dialled, on both sides.
    let (lower, kept) = if a.local < b.local {
        (&a, ab)
    } else {
        (&b, ba)
    };
    assert!(
        !lower.conns[&kept].incoming,
        "the lower side keeps the socket it dialled"
    );
    assert_eq!(a.connect(&pb).unwrap(), ab, "later sends reuse it");
    assert_eq!(
        (a.pending, b.pending, a.refused(), b.refused()),
        (0, 0, 0, 0)
    );
    // a's last message, then it closes.
    a.send(ab, hdr(1), b"last", T).unwrap();
    a.disconnect(ab).unwrap();
    assert!(a.conns.is_empty());
    let r = recv_blocking(&mut b, on(ba), vec![0; 4], T).unwrap();
    assert_eq!(r.data, b"last");
    let e = recv_blocking(&mut b, on(ba), vec![0; 1], T).unwrap_err();
    assert!(matches!(e, TransportError::PeerClosed { .. }), "{e}");
    assert!(b.by_addr.is_empty());
}

/// DATA-13: when the peer's connection arrives first (its HELLO is in when we want to
/// send), `connect` waits for it instead of dialling a second socket.
#[test]
fn connect_reuses_the_peers_connection_in_progress() {
    let mut a = TcpDevice::new(TcpConfig::default()).unwrap();
    let mut b = TcpDevice::new(TcpConfig::default()).unwrap();
    let (mut pa, mut pb) = (PeerAddrs::default(), PeerAddrs::default());
    a.local_address(&mut pa);
    b.local_address(&mut pb);
    let ab = a.connect(&pb).unwrap();
    // b has not polled its listener: a's socket waits in the backlog.
    b.listener_ready = false;
    b.progress_calls = 1;
    let other = std::thread::spawn(move || {
        let ba = b.connect(&pa).unwrap();
        (b, ba)
    });
    // a answers b's CHALLENGE meanwhile.
    let deadline = Instant::now() + T;
    while a.pending > 0 {
        a.progress().unwrap();
        assert!(Instant::now() < deadline);
    }
    let (mut b, ba) = other.join().unwrap();
    assert_eq!(b.conns.len(), 1, "b reused a's socket");
    assert!(b.conns[&ba].incoming);
    a.send(ab, hdr(1), b"ping", T).unwrap();
    assert_eq!(received(&mut b, ba, 4), b"ping");
    b.send(ba, hdr(1), b"pong", T).unwrap();
    assert_eq!(received(&mut a, ab, 4), b"pong");
}

/// A connection that began as a simultaneous connect takes the receive fast path for
/// every size, also right after a message of that size went through the queues, and
/// in order: both sides of a communicator's first exchange connect, so this is the
/// communicator's common case (issue 29).
#[test]
fn a_simultaneous_connect_takes_the_fast_path() {
    let (mut a, mut b, ab, ba, _) = dialled_at_once();
    settle(&mut a, &mut b);
    one_socket_each(&mut a, &mut b);
    let on = RecvSpec {
        conn: Some(ba),
        context_id: 9,
        ..RecvSpec::default()
    };
    crate::device::assert_every_size_returns_to_the_fast_path(
        (&mut a, ab),
        &mut b,
        (any(), on),
        hdr(0),
        (0..=64).chain([STAGE - 1, STAGE, STAGE + 1]),
        |d: &TcpDevice| d.fast_receives,
    );
}

/// A message that arrived before its peer closed is still received by a receive
/// posted after the close was seen.
#[test]
fn a_message_sent_before_close_is_still_received() {
    let (mut a, mut b, ab, ba) = pair();
    a.send(ab, hdr(1), b"bye", T).unwrap();
    a.disconnect(ab).unwrap();
    // b reads the message and the close before anyone asks for the message.
    let deadline = Instant::now() + T;
    while b.conn_mut(ba).is_ok() {
        assert!(Instant::now() < deadline, "close never seen");
        b.progress().unwrap();
        b.wait_activity(Duration::from_millis(10)).unwrap();
    }
    let on = RecvSpec {
        conn: Some(ba),
        ..any()
    };
    let r = recv_blocking(&mut b, on, vec![0; 3], T).unwrap();
    assert_eq!(r.data, b"bye");
    let e = recv_blocking(&mut b, on, vec![0; 3], T).unwrap_err();
    assert!(matches!(e, TransportError::PeerClosed { .. }), "{e}");
}

fn pair_with(cfg: TcpConfig) -> (TcpDevice, TcpDevice, ConnId, ConnId) {
    let mut a = TcpDevice::new(cfg.clone()).unwrap();
    let mut b = TcpDevice::new(cfg).unwrap();
    let (ab, ba) = link(&mut a, &mut b);
    (a, b, ab, ba)
}

/// Ping-pong of small and large messages between two threads, with the spin phase
/// alone doing the waiting (a budget far longer than any message takes), and with no
/// spin at all (straight to `poll`): both must deliver every byte, in order.
#[test]
fn spin_then_block_delivers_with_any_budget() {
    for spin in [Duration::ZERO, Duration::from_secs(5)] {
        let cfg = TcpConfig {
            spin: Some(spin),
            ..TcpConfig::default()
        };
        let (mut a, mut b, ab, ba) = pair_with(cfg);
        assert_eq!(a.spin, spin);
        let sizes = [1usize, 100, 100_000, (3 << 20) + 1];
        let echo = std::thread::spawn(move || {
            for &n in &sizes {
                let r = b.recv(any(), vec![0; n], T).unwrap();
                b.send(ba, r.header, &r.data, T).unwrap();
            }
        });
        for &n in &sizes {
            let msg: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
            a.send(ab, hdr(n as u64), &msg, T).unwrap();
            let r = a.recv(any(), vec![0; n], T).unwrap();
            assert_eq!(r.header.tag, n as u64);
            assert!(r.data == msg, "{n} bytes came back changed (spin {spin:?})");
        }
        echo.join().unwrap();
    }
}

/// The spin phase reports a message that is already there, and gives up (for the
/// caller to block in poll) when nothing arrives within its budget.
#[test]
fn spin_phase_ends_on_data_or_idle() {
    let cfg = TcpConfig {
        spin: Some(Duration::from_millis(1)),
        ..TcpConfig::default()
    };
    let (mut a, mut b, ab, _) = pair_with(cfg);
    // Let the handshake's last frames be consumed first.
    while b.spin_phase(T).unwrap() {}
    assert!(!b.spin_phase(T).unwrap(), "nothing sent: the spin gives up");
    let h = b.post_recv(any(), vec![0; 2]).unwrap();
    a.send(ab, hdr(1), b"ok", T).unwrap();
    assert!(
        b.spin_phase(T).unwrap(),
        "the message completes during the spin"
    );
    assert_eq!(b.test_recv(h).unwrap().unwrap().data, b"ok");
}

/// One write call hands the kernel at most `write_chunk` bytes, wherever in the frame
/// it starts: the header's remaining bytes count towards the cap.
#[test]
fn one_write_is_capped_at_the_write_chunk() {
    let (mut a, _b, ab, _ba) = pair();
    let stream = &mut a.conns.get_mut(&ab).unwrap().stream;
    let head = [7u8; FRAME_HEADER_LEN];
    let payload = vec![1u8; 100_000];
    assert_eq!(write_part(stream, &head, &payload, 0, 1000).unwrap(), 1000);
    assert_eq!(write_part(stream, &head, &payload, 10, 1000).unwrap(), 1000);
    let past_head = FRAME_HEADER_LEN + 500;
    assert_eq!(
        write_part(stream, &head, &payload, past_head, 1000).unwrap(),
        1000
    );
    // A cap below the header's size still sends the header: no call writes nothing.
    assert_eq!(
        write_part(stream, &head, &payload, 0, 5).unwrap(),
        FRAME_HEADER_LEN
    );
    let tail = FRAME_HEADER_LEN + payload.len() - 3;
    assert_eq!(write_part(stream, &head, &payload, tail, 1000).unwrap(), 3);
}

/// Messages larger than the write cap (an odd 1000 bytes here) go out in many calls,
/// through both the blocking `send` and the queued `isend`, and arrive whole and in
/// order; so do small ones between them.
#[test]
fn messages_cut_into_write_chunks_arrive_whole() {
    let cfg = TcpConfig {
        write_chunk: 1000,
        ..TcpConfig::default()
    };
    let (mut a, mut b, ab, _) = pair_with(cfg);
    assert_eq!(a.write_chunk, 1000);
    let sizes = [999usize, 1000, 1001, 1, 250_007, (1 << 20) + 3];
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .map(|&n| (0..n).map(|i| (i * 7 % 251) as u8).collect())
        .collect();
    let expect = msgs.clone();
    let rx = std::thread::spawn(move || {
        for (k, m) in expect.iter().enumerate() {
            let r = b.recv(any(), vec![0; m.len()], T).unwrap();
            assert_eq!(r.header.tag, k as u64);
            assert!(r.data == *m, "message {k} ({} bytes) changed", m.len());
        }
    });
    let mut handles = Vec::new();
    for (k, m) in msgs.into_iter().enumerate() {
        if k % 2 == 0 {
            a.send(ab, hdr(k as u64), &m, T).unwrap();
        } else {
            handles.push(a.isend(ab, hdr(k as u64), m).unwrap());
        }
    }
    for h in handles {
        while !a.test_send(h).unwrap() {
            a.wait_activity(Duration::from_millis(10)).unwrap();
        }
    }
    rx.join().unwrap();
}

/// `socket_buffer` reaches the kernel (which reports twice the size asked for).
#[test]
fn socket_buffer_is_applied() {
    let n = 96 * 1024;
    let cfg = TcpConfig {
        socket_buffer: Some(n),
        ..TcpConfig::default()
    };
    let (a, b, ab, ba) = pair_with(cfg);
    for (d, c) in [(&a, ab), (&b, ba)] {
        let fd = d.conns[&c].stream.as_raw_fd();
        for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
            let mut v: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: valid socket, `v` and `len` outlive the call.
            let r = unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&mut v as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            assert_eq!(r, 0);
            assert_eq!(v as usize, 2 * n, "option {opt}");
        }
    }
}

/// The receive fast path takes a complete matching frame straight from the staging
/// buffer, and leaves everything else to the general path: a non-matching tag is
/// queued and found later, back-to-back frames stay in order, an oversize message is
/// `Truncated`, and garbage is `Malformed`.
#[test]
fn fast_path_keeps_matching_rules() {
    let (mut a, mut b, ab, ba) = pair();
    let on = |tag| RecvSpec {
        conn: Some(ba),
        tag,
        ..any()
    };
    a.send(ab, hdr(1), b"one", T).unwrap();
    a.send(ab, hdr(2), b"two", T).unwrap();
    let r = b.recv(on(Some(2)), vec![0; 8], T).unwrap();
    assert_eq!((r.header.tag, &r.data[..]), (2, &b"two"[..]));
    let r = b.recv(on(Some(1)), vec![0; 8], T).unwrap();
    assert_eq!((r.header.tag, &r.data[..]), (1, &b"one"[..]));
    for i in 0..5u8 {
        a.send(ab, hdr(3), &[i; 10], T).unwrap();
    }
    for i in 0..5u8 {
        let r = b.recv(on(None), vec![0; 10], T).unwrap();
        assert_eq!(r.data, [i; 10], "in order");
    }
    a.send(ab, hdr(4), &[9; 100], T).unwrap();
    let e = b.recv(on(None), vec![0; 10], T).unwrap_err();
    assert!(matches!(e, TransportError::Truncated { .. }), "{e}");
    a.send(ab, hdr(5), b"still fine", T).unwrap();
    assert_eq!(
        b.recv(on(None), vec![0; 16], T).unwrap().data,
        b"still fine"
    );
}

#[test]
fn fast_path_reports_garbage() {
    let (mut b, mut raw, conn) = raw_peer(TcpConfig::default());
    // An authenticated peer whose next bytes are garbage.
    raw.write_all(&[0xAB; 40]).unwrap();
    let spec = RecvSpec {
        conn: Some(conn),
        ..any()
    };
    let e = b.recv(spec, vec![0; 8], T).unwrap_err();
    assert!(matches!(e, TransportError::Malformed { .. }), "{e}");
}

/// A raw peer (handshake done with the device's key, claiming `127.0.0.1:1`) and the
/// device's accepted connection to it.
fn raw_peer(cfg: TcpConfig) -> (TcpDevice, TcpStream, ConnId) {
    let mut b = TcpDevice::new(cfg).unwrap();
    let claim: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let key = b.keys().for_peer(claim);
    let (raw, conn, _) = raw_handshake(&mut b, &key, claim);
    (b, raw, conn)
}

/// A matching frame whose sender stalls half-way (a spin budget of 1 µs runs out)
/// is handed to the general path as a posted receive, and completes intact.
#[test]
fn fast_path_hands_a_stalled_frame_to_the_general_path() {
    let cfg = TcpConfig {
        spin: Some(Duration::from_micros(1)),
        ..TcpConfig::default()
    };
    let (mut b, mut raw, conn) = raw_peer(cfg);
    let msg: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    let head = framing::encode(&FrameHeader {
        kind: FrameKind::Data,
        msg: MsgHeader {
            len: msg.len() as u64,
            ..hdr(1)
        },
    });
    raw.write_all(&head).unwrap();
    raw.write_all(&msg[..100_000]).unwrap();
    let spec = RecvSpec {
        conn: Some(conn),
        ..any()
    };
    let rx = std::thread::spawn(move || b.recv(spec, vec![0; msg.len()], T).map(|r| r.data));
    // The receiver has long spun out when the rest comes (no assertion on time).
    std::thread::sleep(Duration::from_millis(50));
    let rest: Vec<u8> = (100_000..300_000u32).map(|i| (i % 241) as u8).collect();
    raw.write_all(&rest).unwrap();
    let got = rx.join().unwrap().unwrap();
    let want: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    assert!(got == want);
}

/// The peer closes in the middle of a frame the fast path is reading: a typed error.
#[test]
fn fast_path_peer_close_mid_frame() {
    let (mut b, mut raw, conn) = raw_peer(TcpConfig::default());
    let head = framing::encode(&FrameHeader {
        kind: FrameKind::Data,
        msg: MsgHeader {
            len: 1000,
            ..hdr(1)
        },
    });
    raw.write_all(&head).unwrap();
    raw.write_all(&[1; 400]).unwrap();
    drop(raw);
    let spec = RecvSpec {
        conn: Some(conn),
        ..any()
    };
    let e = b.recv(spec, vec![0; 1000], T).unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::PeerClosed {
                mid_message: true,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        b.recv(spec, vec![0; 10], T).is_err(),
        "the connection is closed"
    );
}

/// Frames as a raw peer writes them: header then payload, back to back.
fn frames(msgs: &[(u64, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (tag, payload) in msgs {
        out.extend_from_slice(&framing::encode(&FrameHeader {
            kind: FrameKind::Data,
            msg: MsgHeader {
                len: payload.len() as u64,
                ..hdr(*tag)
            },
        }));
        out.extend_from_slice(payload);
    }
    out
}

/// The receive fast path with large buffers: whatever one read brings past the
/// message — here whole later frames arriving in the same segment — stays staged in
/// order, a frame the receive does not match reaches the general path intact with the
/// bytes after it, and a message longer than one read is read on into the buffer.
#[test]
fn fast_path_keeps_the_byte_stream_in_order() {
    let (mut b, mut raw, conn) = raw_peer(TcpConfig::default());
    let on = |tag| RecvSpec {
        conn: Some(conn),
        tag,
        ..any()
    };
    // The first receive may take the general path; the rest take the fast path this
    // test is about.
    raw.write_all(&frames(&[(0, b"warm-up")])).unwrap();
    assert_eq!(b.recv(on(None), vec![0; 16], T).unwrap().data, b"warm-up");
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    // One write: a short message, a 20 kB one, a short one — all in one read of a
    // large buffer.
    raw.write_all(&frames(&[(1, b"short"), (2, &big), (3, b"tail")]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let r = b.recv(on(Some(1)), vec![0; 64 * 1024], T).unwrap();
    assert_eq!((r.header.tag, &r.data[..]), (1, &b"short"[..]));
    let r = b.recv(on(Some(2)), vec![0; 64 * 1024], T).unwrap();
    assert_eq!(r.header.tag, 2);
    assert!(r.data == big, "the large message arrives intact");
    let r = b.recv(on(Some(3)), vec![0; 8 * 1024], T).unwrap();
    assert_eq!((r.header.tag, &r.data[..]), (3, &b"tail"[..]));

    // A frame the receive does not match is left to the general path: the matching
    // one behind it is found, then the other one is.
    raw.write_all(&frames(&[(7, &big), (8, b"wanted")]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let r = b.recv(on(Some(8)), vec![0; 64 * 1024], T).unwrap();
    assert_eq!((r.header.tag, &r.data[..]), (8, &b"wanted"[..]));
    let r = b.recv(on(Some(7)), vec![0; 64 * 1024], T).unwrap();
    assert!(
        r.header.tag == 7 && r.data == big,
        "the unmatched frame is intact"
    );

    // A message longer than the first read can bring (the buffer is larger than the
    // stage, the payload too): the rest is read on into the buffer.
    let long: Vec<u8> = (0..100_000u32).map(|i| (i % 247) as u8).collect();
    raw.write_all(&frames(&[(10, &long)])).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let r = b.recv(on(Some(10)), vec![0; 128 * 1024], T).unwrap();
    assert!(
        r.header.tag == 10 && r.data == long,
        "a long message arrives intact"
    );

    // A header split across two reads, then a 1 MiB payload into a buffer larger than
    // the stage.
    let huge: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    let bytes = frames(&[(9, &huge)]);
    raw.write_all(&bytes[..10]).unwrap();
    let spec = on(Some(9));
    let rx = std::thread::spawn(move || b.recv(spec, vec![0; 2 << 20], T).map(|r| r.data));
    std::thread::sleep(Duration::from_millis(20));
    raw.write_all(&bytes[10..]).unwrap();
    let got = rx.join().unwrap().unwrap();
    assert!(got == huge, "1 MiB after a split header arrives intact");
}

/// Every size takes the receive fast path again after a message of that size went
/// through the queues, around the staging buffer's size too: no size may leave its
/// connection in a state the fast path declines (the shared-memory device had such a
/// cliff, issue 15).
#[test]
fn every_size_returns_to_the_fast_path() {
    let (mut a, mut b, ab, ba) = pair();
    let on = RecvSpec {
        conn: Some(ba),
        context_id: 9,
        ..RecvSpec::default()
    };
    let near_stage = (STAGE - 2 * FRAME_HEADER_LEN)..=(STAGE + 2 * FRAME_HEADER_LEN);
    let sizes = (0..=320)
        .chain((352..=STAGE).step_by(1024))
        .chain(near_stage);
    crate::device::assert_every_size_returns_to_the_fast_path(
        (&mut a, ab),
        &mut b,
        (any(), on),
        hdr(0),
        sizes,
        |d: &TcpDevice| d.fast_receives,
    );
}

/// DATA-13: a peer's last message on its own socket, still mid-handshake on our side
/// when the socket we dialled to it closes, is received before the close fails our
/// receives: the second socket's messages belong to the orphaned connection.
#[test]
fn a_message_on_the_peers_late_socket_survives_the_first_ones_close() {
    let on = |ip: [u8; 4]| TcpConfig {
        bind: SocketAddr::from((ip, 0)),
        ..TcpConfig::default()
    };
    // b below a: b keeps the socket it dials, so the two do not become one.
    let mut a = TcpDevice::new(on([127, 0, 0, 2])).unwrap();
    let mut b = TcpDevice::new(on([127, 0, 0, 1])).unwrap();
    let (mut pa, mut pb) = (PeerAddrs::default(), PeerAddrs::default());
    a.local_address(&mut pa);
    b.local_address(&mut pb);
    let ab = a.connect(&pb).unwrap();
    // b reads a's HELLO, waits briefly for its AUTH (a is not running), then dials.
    let ba = b.connect(&pa).unwrap();
    assert_eq!(b.conns.len(), 2);
    let deadline = Instant::now() + T;
    let pump = |d: &mut TcpDevice, what: &str, done: &dyn Fn(&TcpDevice) -> bool| {
        while !done(d) {
            d.progress().unwrap();
            assert!(Instant::now() < deadline, "never: {what}");
        }
    };
    // a: its own socket authenticated, b's socket answered but not yet authenticated.
    pump(&mut a, "a's handshakes", &|a| {
        a.conns[&ab].ready
            && a.conns
                .values()
                .any(|c| matches!(c.hs, Hs::AwaitAuth { .. }))
    });
    // b: its socket authenticated; its last message goes on it, then b is gone.
    pump(&mut b, "b's socket", &|b| b.conns[&ba].ready);
    b.send(ba, hdr(1), b"last", T).unwrap();
    drop(b);
    let on = RecvSpec {
        conn: Some(ab),
        ..any()
    };
    let r = recv_blocking(&mut a, on, vec![0; 4], T).unwrap();
    assert_eq!(r.data, b"last");
    let e = recv_blocking(&mut a, on, vec![0; 1], T).unwrap_err();
    assert!(matches!(e, TransportError::PeerClosed { .. }), "{e}");
    assert!(a.orphans.is_empty());
}
