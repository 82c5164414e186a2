//! The data plane against local strangers and misbehaving members
//! (`spec/dataplane.md`, DATA-1..DATA-7).

use std::net::TcpListener;
use std::process::Command;

use super::*;
use crate::tcp::auth::KeyId;

/// A configuration whose key ring holds the job key `[k; 32]`.
fn keyed(k: u8) -> TcpConfig {
    TcpConfig {
        keys: TcpKeys::with_default(DataKey::new([k; auth::KEY_LEN])),
        ..TcpConfig::default()
    }
}

/// Progresses `b` (and waits in poll briefly) until `done` holds; at most `T`.
fn until(b: &mut TcpDevice, what: &str, mut done: impl FnMut(&mut TcpDevice) -> bool) {
    let deadline = Instant::now() + T;
    loop {
        b.progress().unwrap();
        if done(b) {
            return;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        b.poll(Duration::from_millis(1)).unwrap();
    }
}

/// Progresses `a` (and `other`) until the send `h` fails, and returns why; a send that
/// completes is a test failure.
fn send_failure(
    a: &mut TcpDevice,
    h: SendHandle,
    mut other: Option<&mut TcpDevice>,
) -> TransportError {
    let deadline = Instant::now() + T;
    loop {
        a.progress().unwrap();
        if let Some(o) = other.as_deref_mut() {
            o.progress().unwrap();
        }
        match a.test_send(h) {
            Ok(false) => {}
            Ok(true) => panic!("sent to a peer without the key"),
            Err(e) => return e,
        }
        assert!(Instant::now() < deadline, "the send never failed");
        a.poll(Duration::from_millis(1)).unwrap();
    }
}

/// The device closed its end: the raw peer reads EOF or a reset, not silence.
fn assert_closed(raw: &mut TcpStream) {
    raw.set_read_timeout(Some(T)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match raw.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                assert!(
                    !matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ),
                    "still open: {e}"
                );
                return;
            }
        }
    }
}

const CHILD: &str = "DYNRES_TCP_TEST_CHILD";

/// Whether this process is the child run of test `name` (then the caller runs the
/// test's body). Otherwise runs this test binary again with only `name`, and asserts
/// the child passed: the test changes or counts process-wide state (the descriptor
/// table, `RLIMIT_NOFILE`) that tests running in parallel threads would disturb or
/// trip over.
fn in_child(name: &str) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let full = format!("{module}::{name}");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([&full, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child run of {full}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// DATA-1, DATA-3, DATA-5: connections that do not prove the key — no handshake, the
/// old address-only HELLO, the open key of a device without one (a keyed device does not
/// hold it), the job's (public) key id with no AUTH, the job's key id with a made-up
/// AUTH, garbage — are refused and counted, nothing of them is kept, and their data
/// reaches no receive, not even a wildcard one posted before they came; a member with
/// the key gets through afterwards.
#[test]
fn strangers_are_refused_counted_and_never_heard() {
    let mut b = TcpDevice::new(keyed(1)).unwrap();
    let h = b.post_recv(any(), vec![0; 64]).unwrap();
    let me: SocketAddr = "127.0.0.1:7".parse().unwrap();
    let data = frame(FrameKind::Data, hdr(1), b"X");
    let hello = |key: KeyId| {
        frame(
            FrameKind::Hello,
            MsgHeader::default(),
            &auth::encode_hello(key, &[9; auth::NONCE_LEN], me),
        )
    };
    let open_key = TcpKeys::default().for_peer(me).id();
    let job_key = b.keys().for_peer(me).id();
    let no_tag = frame(FrameKind::Auth, MsgHeader::default(), &[0; auth::MAC_LEN]);
    let strangers: Vec<Vec<u8>> = vec![
        data.clone(),
        [
            frame(FrameKind::Hello, MsgHeader::default(), b"127.0.0.1:7"),
            data.clone(),
        ]
        .concat(),
        [hello(open_key), data.clone()].concat(),
        [hello(job_key), data.clone()].concat(),
        [hello(job_key), no_tag, data.clone()].concat(),
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
    ];
    let mut raws = Vec::new();
    for bytes in &strangers {
        let mut r = TcpStream::connect(b.listen_addr()).unwrap();
        r.write_all(bytes).unwrap();
        raws.push(r);
    }
    let n = strangers.len() as u64;
    until(&mut b, "every stranger refused", |b| b.refused() == n);
    assert!(b.conns.is_empty() && b.tombs.is_empty(), "nothing kept");
    assert!(b.by_addr.is_empty(), "no address claimed");
    assert_eq!(b.pending, 0);
    assert!(b.accept().unwrap().is_none(), "none handed out");
    assert!(
        b.test_recv(h).unwrap().is_none(),
        "their data reached a receive"
    );
    for r in &mut raws {
        assert_closed(r);
    }
    let mut a = TcpDevice::new(keyed(1)).unwrap();
    let (ab, _) = link(&mut a, &mut b);
    a.send(ab, hdr(1), b"member", T).unwrap();
    let mut got = None;
    until(&mut b, "the member's message", |b| {
        got = b.test_recv(h).unwrap();
        got.is_some()
    });
    assert_eq!(got.unwrap().data, b"member");
    assert_eq!(b.refused(), n, "the member is not counted");
}

/// DATA-1: every byte a member sent on an authenticated connection, replayed on a
/// new connection (once the member has gone, so its address is free), does not pass:
/// the acceptor's fresh nonce makes the recorded AUTH wrong.
#[test]
fn a_recorded_handshake_is_refused_on_a_new_connection() {
    let mut b = TcpDevice::new(keyed(2)).unwrap();
    let claim: SocketAddr = "127.0.0.1:7".parse().unwrap();
    let key = b.keys().for_peer(claim);
    let (mut raw, conn, mut recording) = raw_handshake(&mut b, &key, claim);
    let data = frame(FrameKind::Data, hdr(1), b"once");
    raw.write_all(&data).unwrap();
    recording.extend_from_slice(&data);
    assert_eq!(received(&mut b, conn, 8), b"once");
    drop(raw);
    until(&mut b, "the member's close", |b| b.by_addr.is_empty());
    let h = b.post_recv(any(), vec![0; 8]).unwrap();
    let mut replay = TcpStream::connect(b.listen_addr()).unwrap();
    replay.write_all(&recording).unwrap();
    until(&mut b, "the replay refused", |b| b.refused() == 1);
    assert!(b.by_addr.is_empty(), "the replay claimed the address");
    assert!(b.test_recv(h).unwrap().is_none(), "the replay was heard");
    assert_closed(&mut replay);
}

/// DATA-2: a second connection that proves the key but claims an address a live
/// connection already holds is refused; the first keeps the address and its messages,
/// and nothing the second sends is heard.
#[test]
fn an_owned_address_is_not_claimed_twice() {
    let mut b = TcpDevice::new(keyed(3)).unwrap();
    let x: SocketAddr = "127.0.0.1:7".parse().unwrap();
    let key = b.keys().for_peer(x);
    let (mut first, c1, _) = raw_handshake(&mut b, &key, x);
    let second = spawn_raw(b.listen_addr(), key, x);
    until(&mut b, "the second claim refused", |b| b.refused() == 1);
    let (mut second, _) = second.join().unwrap();
    let _ = second.write_all(&frame(FrameKind::Data, hdr(1), b"impostor"));
    assert_closed(&mut second);
    assert!(b.accept().unwrap().is_none(), "the second was handed out");
    first
        .write_all(&frame(FrameKind::Data, hdr(1), b"owner"))
        .unwrap();
    let r = recv_blocking(&mut b, any(), vec![0; 16], T).unwrap();
    assert_eq!((r.conn, &r.data[..]), (c1, &b"owner"[..]));
    let to_x = PeerAddrs {
        tcp: Some(x),
        ..PeerAddrs::default()
    };
    assert_eq!(b.connect(&to_x).unwrap(), c1, "x still leads to its owner");
    assert!(
        b.probe(&any()).is_none(),
        "the impostor's message was queued"
    );
}

/// DATA-4: an extra key authenticates only the addresses it was given; two devices
/// with different job keys do not talk, and the connector learns it.
#[test]
fn a_key_authenticates_only_the_addresses_it_is_for() {
    let mut b = TcpDevice::new(keyed(4)).unwrap();
    let other = DataKey::new([40; auth::KEY_LEN]);
    let id = b.keys().add(other.clone());
    let y: SocketAddr = "127.0.0.2:9".parse().unwrap();
    b.keys().use_for(id, [y]).unwrap();
    let (_raw, conn, _) = raw_handshake(&mut b, &other, y);
    assert_eq!(b.by_addr.get(&y), Some(&conn));
    let x: SocketAddr = "127.0.0.1:7".parse().unwrap();
    let wrong = spawn_raw(b.listen_addr(), other, x);
    until(&mut b, "x claimed with y's key refused", |b| {
        b.refused() == 1
    });
    let _ = wrong.join();
    assert!(!b.by_addr.contains_key(&x));

    // Another job's member: its key is never added here, so its HELLO is held until
    // the handshake's deadline (a key may be about to be added, DATA-4), then refused.
    b.cfg.handshake_timeout = Duration::from_millis(300);
    let mut c = TcpDevice::new(keyed(5)).unwrap();
    let mut pb = PeerAddrs::default();
    b.local_address(&mut pb);
    let cb = c.connect(&pb).unwrap();
    let h = c.isend(cb, hdr(1), b"hello?".to_vec()).unwrap();
    let e = send_failure(&mut c, h, Some(&mut b));
    assert!(
        matches!(
            e,
            TransportError::PeerClosed { .. } | TransportError::ConnectionReset { .. }
        ),
        "{e}"
    );
    assert_eq!(b.refused(), 2);
}

/// DATA-4: an inter-communicator's peer may finish its bootstrap and connect before
/// this process registered the connection's key: the HELLO is held, not refused, and
/// answered once the key is added — the race `tests/tests/spawn.rs`'s jobs on two
/// "hosts" lost now and then (refused, then "no handshake within 10s").
#[test]
fn a_hello_for_a_key_added_later_is_answered() {
    let mut a = TcpDevice::new(keyed(7)).unwrap();
    let mut b = TcpDevice::new(keyed(8)).unwrap();
    let shared = DataKey::new([78; auth::KEY_LEN]);
    let (mut pa, mut pb) = (PeerAddrs::default(), PeerAddrs::default());
    a.local_address(&mut pa);
    b.local_address(&mut pb);
    a.keys().add_for(shared.clone(), pb.tcp);
    let ab = a.connect(&pb).unwrap();
    let h = a.isend(ab, hdr(3), b"early".to_vec()).unwrap();
    // b takes the connection and its HELLO in, without the key.
    let deadline = Instant::now() + T;
    while !b.conns.values().any(|c| matches!(c.hs, Hs::HeldHello(_))) {
        a.progress().unwrap();
        b.progress().unwrap();
        assert!(Instant::now() < deadline, "the HELLO never arrived");
        b.poll(Duration::from_millis(1)).unwrap();
    }
    assert_eq!(b.refused(), 0, "held, not refused");
    b.keys().add_for(shared, pa.tcp);
    let deadline = Instant::now() + T;
    while !a.test_send(h).unwrap() {
        a.progress().unwrap();
        b.progress().unwrap();
        assert!(
            Instant::now() < deadline,
            "the held HELLO was never answered"
        );
        a.poll(Duration::from_millis(1)).unwrap();
    }
    let ba = loop {
        if let Some(c) = b.accept().unwrap() {
            break c;
        }
        b.progress().unwrap();
    };
    assert_eq!(super::received(&mut b, ba, 16), b"early");
    assert_eq!(b.refused(), 0);
}

/// DATA-1: the acceptor proves the key first, and a connector sends nothing of its
/// own to a listener that cannot: its queued message fails with a typed error, and the
/// listener reads the HELLO and nothing after it.
#[test]
fn a_connector_sends_nothing_to_a_listener_without_the_key() {
    let mut a = TcpDevice::new(keyed(6)).unwrap();
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = fake.local_addr().unwrap();
    let ab = a
        .connect(&PeerAddrs {
            tcp: Some(to),
            ..PeerAddrs::default()
        })
        .unwrap();
    let h = a.isend(ab, hdr(1), b"for members only".to_vec()).unwrap();
    let (mut s, _) = fake.accept().unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let (fh, hello) = read_frame(&mut s);
    assert_eq!(fh.kind, FrameKind::Hello);
    let nonce = [1u8; auth::NONCE_LEN];
    let t = auth::transcript(&hello, to, &nonce, false);
    let mut body = nonce.to_vec();
    body.extend_from_slice(&auth::acceptor_tag(&DataKey::new([66; auth::KEY_LEN]), &t));
    body.push(0);
    s.write_all(&frame(FrameKind::Challenge, MsgHeader::default(), &body))
        .unwrap();
    let e = send_failure(&mut a, h, None);
    assert!(
        matches!(
            e,
            TransportError::Handshake {
                reason: HandshakeFailure::Refused(HandshakeError::BadTag),
                ..
            }
        ),
        "{e}"
    );
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{} bytes after the HELLO", rest.len());
    assert!(
        a.send(ab, hdr(1), b"x", T).is_err(),
        "the connection is closed"
    );
}

/// DATA-6: a peer that floods us with messages nobody asked for is cut off once it
/// has more queued than the per-peer bounds (by count, and by buffered bytes), so
/// memory stays bounded; another peer's messages still arrive.
#[test]
fn an_unexpected_flood_cuts_off_its_peer_and_only_it() {
    let cfg = TcpConfig {
        max_unexpected_messages: 100,
        max_unexpected_bytes: 1 << 20,
        ..TcpConfig::default()
    };
    let mut b = TcpDevice::new(cfg.clone()).unwrap();
    let mut flood = TcpDevice::new(cfg.clone()).unwrap();
    let mut heavy = TcpDevice::new(cfg.clone()).unwrap();
    let mut good = TcpDevice::new(cfg).unwrap();
    let (fb, bf) = link(&mut flood, &mut b);
    let (hb, bh) = link(&mut heavy, &mut b);
    let (gb, bg) = link(&mut good, &mut b);
    for i in 0..1000u32 {
        flood.send(fb, hdr(1), &i.to_le_bytes(), T).unwrap();
    }
    good.send(gb, hdr(2), b"fine", T).unwrap();
    until(&mut b, "the flooder cut off", |b| b.conn_mut(bf).is_err());
    assert!(
        matches!(b.conn_mut(bf), Err(TransportError::UnexpectedLimit { .. })),
        "{:?}",
        b.conn_mut(bf).err()
    );
    let u = b.matcher.usage(bf);
    assert!(u.messages <= 101, "{u:?}");

    // A receive for another tag waits on the heavy peer's connection, so its large
    // messages are buffered rather than left in the socket: bounded by bytes.
    let other_tag = RecvSpec {
        conn: Some(bh),
        tag: Some(999),
        ..any()
    };
    let _waits = b.post_recv(other_tag, vec![0; 8]).unwrap();
    let big = vec![7u8; 100 * 1024];
    for _ in 0..20 {
        heavy.send(hb, hdr(1), &big, T).unwrap();
    }
    until(&mut b, "the heavy peer cut off", |b| {
        b.conn_mut(bh).is_err()
    });
    let u = b.matcher.usage(bh);
    assert!(u.bytes <= (1 << 20) + STAGE as u64, "{u:?}");

    assert_eq!(received(&mut b, bg, 8), b"fine");
    assert_delivers(&mut good, gb, &mut b, bg, b"still");
}

/// DATA-3: accepted connections that say nothing are bounded in number (the oldest
/// goes) and in time (the handshake deadline), and a member still gets in.
#[test]
fn silent_strangers_are_bounded_and_timed_out() {
    let cfg = TcpConfig {
        max_pending_handshakes: 4,
        handshake_timeout: Duration::from_millis(300),
        ..keyed(7)
    };
    let mut b = TcpDevice::new(cfg.clone()).unwrap();
    let mut silent: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(b.listen_addr()).unwrap())
        .collect();
    until(&mut b, "ten accepted, six pushed out", |b| b.refused() >= 6);
    assert!(b.conns.len() <= 4, "{} pending", b.conns.len());
    until(&mut b, "the rest timed out", |b| b.refused() == 10);
    assert!(b.conns.is_empty());
    for s in &mut silent {
        assert_closed(s);
    }
    let mut a = TcpDevice::new(cfg).unwrap();
    let (ab, ba) = link(&mut a, &mut b);
    assert_delivers(&mut a, ab, &mut b, ba, b"in");
}

/// DATA-3: strangers that connect and go (silently, after a HELLO, after garbage), a
/// silent one that outlives the handshake deadline, and members that connect and go,
/// leave no file descriptor behind (counted in `/proc/self/fd`, in a child process so
/// that no other test's sockets are counted).
#[test]
fn connect_close_churn_leaves_no_descriptors() {
    if !in_child("connect_close_churn_leaves_no_descriptors") {
        return;
    }
    let cfg = TcpConfig {
        handshake_timeout: Duration::from_millis(200),
        ..keyed(8)
    };
    let mut b = TcpDevice::new(cfg.clone()).unwrap();
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let before = fds();
    let me: SocketAddr = "127.0.0.1:7".parse().unwrap();
    let hello = frame(
        FrameKind::Hello,
        MsgHeader::default(),
        &auth::encode_hello(KeyId([0; 8]), &[0; auth::NONCE_LEN], me),
    );
    for i in 0..300 {
        let mut r = TcpStream::connect(b.listen_addr()).unwrap();
        match i % 3 {
            0 => {}
            1 => r.write_all(&hello).unwrap(),
            _ => r.write_all(b"garbage").unwrap(),
        }
        drop(r);
        // Accept (a busy loop that never polls would look only every 1024th call, and
        // the backlog would fill).
        assert!(b.accept().unwrap().is_none());
        b.progress().unwrap();
    }
    let silent = TcpStream::connect(b.listen_addr()).unwrap();
    until(&mut b, "every stranger refused", |b| b.refused() == 301);
    assert!(b.conns.is_empty());
    drop(silent);
    for _ in 0..20 {
        let mut a = TcpDevice::new(cfg.clone()).unwrap();
        let (_, ba) = link(&mut a, &mut b);
        drop(a);
        until(&mut b, "the member's close", |b| b.conn_mut(ba).is_err());
    }
    assert_eq!(fds(), before, "descriptors left behind");
}

/// DATA-7: `accept` failing with EMFILE does not end the device: it stops accepting
/// for a while, and the connection waiting in the backlog is taken once descriptors
/// are free again (a child process lowers its `RLIMIT_NOFILE` and fills the table).
#[test]
fn accept_out_of_descriptors_backs_off() {
    if !in_child("accept_out_of_descriptors_backs_off") {
        return;
    }
    let mut a = TcpDevice::new(keyed(9)).unwrap();
    let mut b = TcpDevice::new(keyed(9)).unwrap();
    let mut pb = PeerAddrs::default();
    b.local_address(&mut pb);
    let ab = a.connect(&pb).unwrap();
    let mut was = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `was` outlives the call.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut was) }, 0);
    let low = libc::rlimit {
        rlim_cur: 256.min(was.rlim_cur),
        rlim_max: was.rlim_max,
    };
    // SAFETY: `low` outlives the call.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let mut fillers = Vec::new();
    let full = loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => fillers.push(f),
            Err(e) => break e,
        }
    };
    assert_eq!(full.raw_os_error(), Some(libc::EMFILE), "{full}");
    for _ in 0..100 {
        b.progress().expect("EMFILE ended the device");
    }
    assert!(b.accept_paused.is_some(), "accept was not tried");
    b.poll(Duration::from_millis(10)).unwrap();
    drop(fillers);
    // SAFETY: `was` outlives the call.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &was) }, 0);
    let deadline = Instant::now() + T;
    let ba = loop {
        a.progress().unwrap();
        b.progress().unwrap();
        if let Some(c) = b.accept().unwrap() {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "the waiting connection never came"
        );
        b.poll(Duration::from_millis(1)).unwrap();
    };
    assert_delivers(&mut a, ab, &mut b, ba, b"after");
}

/// DATA-13: a stranger's HELLO that claims a member's address and never goes on holds
/// `connect` to that member back for at most the short wait, never fails it: the
/// member is dialled, the connection works, the stranger is dropped at its deadline.
#[test]
fn a_strangers_hello_delays_connect_only_briefly() {
    let mut a = TcpDevice::new(keyed(7)).unwrap();
    let mut b = TcpDevice::new(keyed(7)).unwrap();
    let (mut pa, mut pb) = (PeerAddrs::default(), PeerAddrs::default());
    a.local_address(&mut pa);
    b.local_address(&mut pb);
    let mut raw = TcpStream::connect(pa.tcp.unwrap()).unwrap();
    // The job's key id (public: the first bytes of its hash), b's address claimed.
    let hello = auth::encode_hello(
        DataKey::new([7; auth::KEY_LEN]).id(),
        &[3; auth::NONCE_LEN],
        pb.tcp.unwrap(),
    );
    raw.write_all(&frame(FrameKind::Hello, MsgHeader::default(), &hello))
        .unwrap();
    let ab = a.connect(&pb).unwrap();
    // Returned while the stranger is still within its handshake deadline (it is
    // neither refused nor bound): connect did not wait it out.
    assert_eq!(
        (a.refused(), a.pending),
        (0, 2),
        "the stranger and our own dial"
    );
    assert_ne!(a.by_addr.get(&pb.tcp.unwrap()), None);
    let h = a.isend(ab, hdr(1), b"real".to_vec()).unwrap();
    let deadline = Instant::now() + T;
    while !a.test_send(h).unwrap() {
        a.progress().unwrap();
        b.progress().unwrap();
        assert!(Instant::now() < deadline, "the member never got it");
    }
    let ba = loop {
        b.progress().unwrap();
        if let Some(c) = b.by_addr.get(&pa.tcp.unwrap()) {
            break *c;
        }
        assert!(Instant::now() < deadline, "b never bound a");
    };
    assert_eq!(received(&mut b, ba, 4), b"real");
    assert_eq!(a.refused(), 0, "the stranger is still within its deadline");
    drop(raw);
}
