//! Multi-process tests of the shm and TCP devices. The test binary re-executes itself
//! as the child (`DYNRES_MP_ROLE` selects the role), so no helper binary is needed.
//! Every child is killed and reaped by a guard; every shm segment is checked gone.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dynres_transports::device::{Device, RecvSpec, accept_blocking, recv_blocking};
use dynres_transports::shm::layout::{Inbox, SLOT_FREE};
use dynres_transports::shm::segment::SEGMENT_PREFIX;
use dynres_transports::shm::{CmaMode, ShmConfig, ShmDevice};
use dynres_transports::tcp::{TcpConfig, TcpDevice};
use dynres_transports::{MsgHeader, PeerAddrs, ShmAddr, TransportError};

const T: Duration = Duration::from_secs(20);
const BIG: usize = 3 * 1024 * 1024 + 17;
const TAG_BIG: u64 = 99;
const TAG_BYE: u64 = 100;
const TAG_GO: u64 = 101;
/// Single-copy threshold forced on both sides of the single-copy tests.
const CMA_ON: &str = "65536";

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 31 + seed * 7) as u8).collect()
}

// ---------------------------------------------------------------- children

fn device(kind: &str) -> Box<dyn Device> {
    match kind {
        "shm" => Box::new(ShmDevice::new(ShmConfig::default()).expect("shm device")),
        _ => Box::new(TcpDevice::new(TcpConfig::default()).expect("tcp device")),
    }
}

fn parse_addr(kind: &str, s: &str) -> PeerAddrs {
    let mut a = PeerAddrs::default();
    if kind == "shm" {
        let mut it = s.splitn(3, ',');
        a.shm = Some(ShmAddr {
            host_id: it.next().unwrap().parse().unwrap(),
            pid: it.next().unwrap().parse().unwrap(),
            segment: it.next().unwrap().to_owned(),
        });
    } else {
        a.tcp = Some(s.parse().unwrap());
    }
    a
}

fn child(role: &str) {
    let kind = std::env::var("DYNRES_MP_DEV").unwrap();
    let addr = parse_addr(&kind, &std::env::var("DYNRES_MP_ADDR").unwrap());
    let src: u64 = std::env::var("DYNRES_MP_SRC").unwrap().parse().unwrap();
    let n: u64 = std::env::var("DYNRES_MP_N").unwrap().parse().unwrap();
    let mut dev = device(&kind);
    let conn = dev.connect(&addr).expect("connect to parent");
    let hdr = |tag, len| MsgHeader {
        source: src,
        tag,
        context_id: 1,
        len,
    };
    match role {
        "sender" => {
            for i in 0..n {
                let body = format!("{src}:{i}");
                dev.send(conn, hdr(i % 3, 0), body.as_bytes(), T).unwrap();
            }
            dev.send(conn, hdr(TAG_BIG, 0), &pattern(src, BIG), T)
                .unwrap();
            let bye = RecvSpec {
                tag: Some(TAG_BYE),
                context_id: 1,
                ..RecvSpec::default()
            };
            recv_blocking(dev.as_mut(), bye, vec![0; 8], T).expect("bye from parent");
        }
        "die_mid" | "die_mid_cma" => {
            if role == "die_mid_cma" {
                // Single copy: wait until the parent has attached (and probed) our ring.
                recv_blocking(dev.as_mut(), spec(Some(TAG_GO)), vec![0; 8], T).expect("go");
            }
            // A first message completes the connection's set-up (over TCP, its
            // handshake needs our reads: a sleeping process answers no CHALLENGE).
            dev.send(conn, hdr(TAG_GO + 1, 0), b"up", T).unwrap();
            // Start a message far larger than the ring / socket buffers, tell the
            // parent, then wait to be killed with the message half sent.
            let h = dev
                .isend(conn, hdr(TAG_BIG, 0), pattern(src, 64 << 20))
                .unwrap();
            assert!(!dev.test_send(h).unwrap(), "must still be in flight");
            println!("in-flight");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        "cma_sender" => {
            // Wait until the parent has attached (and probed) our ring.
            recv_blocking(dev.as_mut(), spec(Some(TAG_GO)), vec![0; 8], T).expect("go");
            dev.send(conn, hdr(TAG_BIG, 0), &pattern(src, 4 << 20), T)
                .unwrap();
            dev.send(
                conn,
                hdr(TAG_BIG + 1, 0),
                &pattern(src + 1, (1 << 20) + 1),
                T,
            )
            .unwrap();
            recv_blocking(dev.as_mut(), spec(Some(TAG_BYE)), vec![0; 8], T).expect("bye");
        }
        "cma_sink" => {
            // Receiving "go" attaches (and probes) the parent's ring; then never read.
            recv_blocking(dev.as_mut(), spec(Some(TAG_GO)), vec![0; 8], T).expect("go");
            println!("ready");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        "linger" => {
            dev.send(conn, hdr(1, 0), b"hello", T).unwrap();
            println!("sent");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        r => panic!("unknown role {r}"),
    }
}

// ---------------------------------------------------------------- parent side

/// Kills and reaps its children however the test ends.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Children {
    fn spawn(&mut self, role: &str, kind: &str, addr: &str, src: u64, n: u64) -> &mut Child {
        self.spawn_env(role, kind, addr, src, n, &[])
    }

    fn spawn_env(
        &mut self,
        role: &str,
        kind: &str,
        addr: &str,
        src: u64,
        n: u64,
        env: &[(&str, &str)],
    ) -> &mut Child {
        let c = Command::new(std::env::current_exe().unwrap())
            .envs(env.iter().copied())
            .env("DYNRES_MP_ROLE", role)
            .env("DYNRES_MP_DEV", kind)
            .env("DYNRES_MP_ADDR", addr)
            .env("DYNRES_MP_SRC", src.to_string())
            .env("DYNRES_MP_N", n.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        self.0.push(c);
        self.0.last_mut().unwrap()
    }

    /// Waits for every child to exit successfully (bounded).
    fn join(&mut self) {
        let deadline = Instant::now() + T;
        for c in &mut self.0 {
            loop {
                if let Some(st) = c.try_wait().unwrap() {
                    assert!(st.success(), "child failed: {st}");
                    break;
                }
                assert!(Instant::now() < deadline, "child did not exit");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

fn addr_string(kind: &str, dev: &dyn Device) -> String {
    let mut a = PeerAddrs::default();
    dev.local_address(&mut a);
    if kind == "shm" {
        let s = a.shm.unwrap();
        format!("{},{},{}", s.host_id, s.pid, s.segment)
    } else {
        a.tcp.unwrap().to_string()
    }
}

fn segments_of(pid: u32) -> Vec<String> {
    let prefix = format!("{SEGMENT_PREFIX}{pid}-");
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

fn spec(tag: Option<u64>) -> RecvSpec {
    RecvSpec {
        tag,
        context_id: 1,
        ..RecvSpec::default()
    }
}

fn bye(dev: &mut dyn Device, conn: dynres_transports::ConnId) {
    let h = MsgHeader {
        source: 0,
        tag: TAG_BYE,
        context_id: 1,
        len: 0,
    };
    dev.send(conn, h, b"bye", T).unwrap();
}

/// One child: per-tag FIFO order, tag selection out of arrival order, a large message.
fn ordering_tags_large(kind: &str) {
    let mut dev = device(kind);
    let mut kids = Children(Vec::new());
    let n = 300;
    kids.spawn("sender", kind, &addr_string(kind, dev.as_ref()), 5, n);
    let conn = accept_blocking(dev.as_mut(), T).unwrap();
    // Take tag 2 first although tags 0 and 1 arrive earlier: matching must select.
    for tag in [2, 0, 1] {
        for i in (tag..n).step_by(3) {
            let r = recv_blocking(dev.as_mut(), spec(Some(tag)), vec![0; 32], T).unwrap();
            assert_eq!(r.data, format!("5:{i}").as_bytes(), "tag {tag} in order");
            assert_eq!((r.header.source, r.conn), (5, conn));
        }
    }
    let r = recv_blocking(dev.as_mut(), spec(Some(TAG_BIG)), vec![0; BIG], T).unwrap();
    assert!(r.data == pattern(5, BIG), "large message intact");
    bye(dev.as_mut(), conn);
    kids.join();
}

/// Many children at once, any-source receives, per-source order.
fn many_peers(kind: &str) {
    let mut dev = device(kind);
    let mut kids = Children(Vec::new());
    let (peers, n) = (6u64, 40u64);
    let addr = addr_string(kind, dev.as_ref());
    for src in 1..=peers {
        kids.spawn("sender", kind, &addr, src, n);
    }
    let mut next = vec![0u64; peers as usize + 1];
    let mut conns = Vec::new();
    let mut done = 0;
    while done < peers {
        let r = recv_blocking(dev.as_mut(), spec(None), vec![0; BIG], T).unwrap();
        let src = r.header.source;
        if r.header.tag == TAG_BIG {
            assert_eq!(next[src as usize], n, "big message comes last from {src}");
            assert!(r.data == pattern(src, BIG));
            conns.push(r.conn);
            done += 1;
        } else {
            let i = next[src as usize];
            assert_eq!(r.data, format!("{src}:{i}").as_bytes(), "per-source FIFO");
            next[src as usize] += 1;
        }
    }
    for c in conns {
        bye(dev.as_mut(), c);
    }
    kids.join();
}

/// A child killed in the middle of a message: typed error, no hang, no leaked segment.
fn killed_mid_message(kind: &str) {
    let mut dev = device(kind);
    let mut kids = Children(Vec::new());
    let child = kids.spawn("die_mid", kind, &addr_string(kind, dev.as_ref()), 9, 0);
    let pid = child.id();
    // Accepting first: over TCP the child's first send waits for our side of the
    // connection's handshake.
    accept_blocking(dev.as_mut(), T).unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "in-flight");
    child.kill().unwrap();
    // Not reaped yet: the child is a zombie, which the shm device must treat as dead.
    let e = recv_blocking(dev.as_mut(), spec(Some(TAG_BIG)), vec![0; 64 << 20], T).unwrap_err();
    match (kind, &e) {
        (
            "shm",
            TransportError::PeerDied {
                pid: p,
                mid_message: true,
                ..
            },
        ) => assert_eq!(*p, pid),
        (
            "tcp",
            TransportError::PeerClosed {
                mid_message: true, ..
            },
        )
        | ("tcp", TransportError::ConnectionReset { .. }) => {}
        _ => panic!("unexpected error for {kind}: {e}"),
    }
    assert!(
        segments_of(pid).is_empty(),
        "dead child's segment was unlinked"
    );
    drop(kids);
    dev.finalize().unwrap();
    assert!(
        segments_of(std::process::id()).is_empty(),
        "own inbox unlinked"
    );
}

/// The launcher's order with a crash: the long-lived side drops each connection while
/// the peer is still attached, then the peer is killed without closing its side. Its
/// slot must come back once it is dead (a two-slot inbox would otherwise grow an
/// extension at the third peer, DATA-10), and its inbox must be unlinked.
fn shm_killed_after_release_frees_slot() {
    let cfg = ShmConfig {
        slots: 2,
        ..ShmConfig::default()
    };
    let mut dev = ShmDevice::new(cfg).unwrap();
    let addr = addr_string("shm", &dev);
    let occupied = |dev: &ShmDevice| {
        let inbox = Inbox::open(&dev.addr().segment).unwrap();
        (0..inbox.nslots())
            .filter(|&i| inbox.slot(i).state.load(Ordering::Acquire) != SLOT_FREE)
            .count()
    };
    for round in 0..5u64 {
        let mut kids = Children(Vec::new());
        let child = kids.spawn("linger", "shm", &addr, round, 0);
        let pid = child.id();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "sent");
        let r = recv_blocking(&mut dev, spec(None), vec![0; 8], T).unwrap();
        assert_eq!(r.data, b"hello");
        dev.disconnect(r.conn).unwrap();
        assert_eq!(occupied(&dev), 1, "still attached: not recycled yet");
        drop(kids);
        // The liveness check finds it dead within a few wake-ups; bounded, no sleep.
        let deadline = Instant::now() + T;
        while occupied(&dev) > 0 {
            assert!(
                Instant::now() < deadline,
                "round {round}: slot never recycled"
            );
            dev.progress().unwrap();
            dev.wait_activity(Duration::from_millis(20)).unwrap();
        }
        assert!(segments_of(pid).is_empty(), "dead peer's inbox unlinked");
    }
    dev.finalize().unwrap();
}

fn send_tag(dev: &mut dyn Device, conn: dynres_transports::ConnId, tag: u64) {
    let h = MsgHeader {
        source: 0,
        tag,
        context_id: 1,
        len: 0,
    };
    dev.send(conn, h, b"go", T).unwrap();
}

fn cma_device() -> ShmDevice {
    ShmDevice::new(ShmConfig {
        cma: CmaMode::On {
            threshold: 64 * 1024,
        },
        ..ShmConfig::default()
    })
    .unwrap()
}

fn read_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_owned()
}

/// Waits (bounded) until `pid` is a zombie: killed and torn down, not yet reaped.
fn wait_zombie(pid: u32) {
    let deadline = Instant::now() + T;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next());
        if state == Some(Some('Z')) {
            return;
        }
        assert!(Instant::now() < deadline, "{pid} never became a zombie");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A child sends 4 MiB and 1 MiB + 1 to us by single copy (forced on both sides):
/// every byte checked, and the counter shows the path. With `child_env` disabling it in
/// the child (`DYNRES_SHM_CMA=0`), the probe fails and the ring carries them instead.
fn shm_single_copy(child_cma: &str, expect_reads: u64) {
    let mut dev = cma_device();
    let mut kids = Children(Vec::new());
    let addr = addr_string("shm", &dev);
    kids.spawn_env(
        "cma_sender",
        "shm",
        &addr,
        4,
        0,
        &[("DYNRES_SHM_CMA", child_cma)],
    );
    let conn = accept_blocking(&mut dev, T).unwrap();
    send_tag(&mut dev, conn, TAG_GO);
    let r = recv_blocking(&mut dev, spec(Some(TAG_BIG)), vec![0; 4 << 20], T).unwrap();
    assert!(r.data == pattern(4, 4 << 20), "4 MiB intact");
    let r = recv_blocking(&mut dev, spec(Some(TAG_BIG + 1)), vec![0; 2 << 20], T).unwrap();
    assert!(r.data == pattern(5, (1 << 20) + 1), "1 MiB + 1 intact");
    assert_eq!(dev.single_copy_receives(), expect_reads, "path taken");
    bye(&mut dev, conn);
    kids.join();
}

/// A single-copy device and one child `role` (with single copy forced on, `arg` its
/// argument) connected to it, told to go, and past the line `said`.
fn cma_child(
    role: &str,
    arg: u64,
    said: &str,
) -> (ShmDevice, Children, u32, dynres_transports::ConnId) {
    let mut dev = cma_device();
    let mut kids = Children(Vec::new());
    let addr = addr_string("shm", &dev);
    let child = kids.spawn_env(role, "shm", &addr, arg, 0, &[("DYNRES_SHM_CMA", CMA_ON)]);
    let pid = child.id();
    let conn = accept_blocking(&mut dev, T).unwrap();
    send_tag(&mut dev, conn, TAG_GO);
    assert_eq!(read_line(&mut kids.0[0]), said);
    (dev, kids, pid, conn)
}

/// The sender is killed (and torn down) after publishing a single-copy request: the
/// receive gets `PeerDied { mid_message: true }` — no hang, no panic — and the dead
/// child's segment is unlinked.
fn shm_killed_mid_single_copy() {
    let (mut dev, mut kids, pid, _conn) = cma_child("die_mid_cma", 9, "in-flight");
    kids.0[0].kill().unwrap();
    wait_zombie(pid);
    let e = recv_blocking(&mut dev, spec(Some(TAG_BIG)), vec![0; 64 << 20], T).unwrap_err();
    assert!(
        matches!(e, TransportError::PeerDied { pid: p, mid_message: true, .. } if p == pid),
        "unexpected error: {e}"
    );
    assert_eq!(dev.single_copy_receives(), 0);
    assert!(segments_of(pid).is_empty(), "dead child's segment unlinked");
    drop(kids);
    dev.finalize().unwrap();
}

/// We send by single copy to a child that is killed before it reads: the send fails
/// with `PeerDied` instead of waiting forever for the answer.
fn shm_receiver_killed_during_single_copy_send() {
    let (mut dev, mut kids, pid, conn) = cma_child("cma_sink", 3, "ready");
    let hdr = MsgHeader {
        source: 0,
        tag: TAG_BIG,
        context_id: 1,
        len: 0,
    };
    let h = dev.isend(conn, hdr, pattern(1, 4 << 20)).unwrap();
    assert!(!dev.test_send(h).unwrap(), "waits for the child's read");
    kids.0[0].kill().unwrap();
    let e = dynres_transports::device::wait_send(&mut dev, h, T).unwrap_err();
    assert!(
        matches!(e, TransportError::PeerDied { pid: p, .. } if p == pid),
        "unexpected error: {e}"
    );
    drop(kids);
    dev.finalize().unwrap();
}

fn main() {
    if let Ok(role) = std::env::var("DYNRES_MP_ROLE") {
        child(&role);
        return;
    }
    let tests: &[(&str, fn())] = &[
        ("shm_ordering_tags_large", || ordering_tags_large("shm")),
        ("tcp_ordering_tags_large", || ordering_tags_large("tcp")),
        ("shm_many_peers", || many_peers("shm")),
        ("tcp_many_peers", || many_peers("tcp")),
        ("shm_killed_mid_message", || killed_mid_message("shm")),
        ("tcp_killed_mid_message", || killed_mid_message("tcp")),
        (
            "shm_killed_after_release_frees_slot",
            shm_killed_after_release_frees_slot,
        ),
        ("shm_single_copy", || shm_single_copy(CMA_ON, 2)),
        ("shm_single_copy_disabled_in_sender", || {
            shm_single_copy("0", 0)
        }),
        ("shm_killed_mid_single_copy", shm_killed_mid_single_copy),
        (
            "shm_receiver_killed_during_single_copy_send",
            shm_receiver_killed_during_single_copy_send,
        ),
    ];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, f) in tests {
        if !filter.is_empty() && !filter.iter().any(|p| name.contains(p.as_str())) {
            continue;
        }
        let start = Instant::now();
        f();
        println!("test {name} ... ok ({:?})", start.elapsed());
    }
    // Everything this process created is gone.
    let left = segments_of(std::process::id());
    assert!(left.is_empty(), "leaked segments: {left:?}");
}
