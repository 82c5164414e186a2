//! Ping-pong latency (1 B … 1 MiB) and streaming bandwidth of the shm and TCP devices
//! between two processes, each next to a raw baseline measured in the same run:
//! a bare spin-flag shared-memory ping-pong / SPSC copy loop, and a bare blocking std
//! TCP ping-pong / stream. Prints medians and the device/raw ratio as a Markdown table.
//!
//! `cargo bench -p dynres-transports --bench pingpong` (env `DYNRES_BENCH_ROUNDS`,
//! default 3; `DYNRES_BENCH_MB`, bandwidth volume per round, default 256;
//! `DYNRES_BENCH_ONLY=shm|tcp` to run one device).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dynres_transports::device::{Device, RecvSpec, accept_blocking, recv_blocking};
use dynres_transports::shm::segment::{SEGMENT_PREFIX, Segment};
use dynres_transports::shm::{ShmConfig, ShmDevice};
use dynres_transports::tcp::{TcpConfig, TcpDevice};
use dynres_transports::{ConnId, MsgHeader, PeerAddrs, ShmAddr};

const SIZES: [usize; 6] = [1, 64, 1024, 8 * 1024, 64 * 1024, 1024 * 1024];
const CHUNK: usize = 1024 * 1024;
const T: Duration = Duration::from_secs(60);

fn iters(size: usize) -> usize {
    if std::env::var("DYNRES_BENCH_NO_LATENCY").is_ok() {
        return 1;
    }
    (64 * 1024 * 1024 / size.max(4096)).clamp(64, 20_000)
}

fn rounds() -> usize {
    env_or("DYNRES_BENCH_ROUNDS", 3)
}

fn bw_chunks() -> usize {
    env_or("DYNRES_BENCH_MB", 256)
}

fn env_or(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; pid 0 = us.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

// ------------------------------------------------------------ raw shm baseline

/// Bare shared-memory baseline: spin flags plus two 1 MiB buffers.
struct Raw {
    seg: Segment,
}

const RAW_AB: usize = 0;
const RAW_BA: usize = 64;
const RAW_PROD: usize = 128;
const RAW_CONS: usize = 192;
const RAW_DATA: usize = 4096;

impl Raw {
    fn flag(&self, off: usize) -> &AtomicU64 {
        // SAFETY: offsets are 64-aligned inside the mapping; AtomicU64 is valid for
        // any bit pattern and the mapping outlives `self`.
        unsafe { &*self.seg.ptr().as_ptr().add(off).cast::<AtomicU64>() }
    }
    fn buf(&self, which: usize) -> *mut u8 {
        // SAFETY: both 1 MiB buffers lie inside the 2 MiB + 4 KiB mapping.
        unsafe { self.seg.ptr().as_ptr().add(RAW_DATA + which * CHUNK) }
    }
    fn wait(&self, off: usize, v: u64) {
        while self.flag(off).load(Ordering::Acquire) < v {
            std::hint::spin_loop();
        }
    }
    fn put(&self, which: usize, src: &[u8]) {
        // SAFETY: the flag protocol gives the writer exclusive use of the buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.buf(which), src.len()) }
    }
    fn get(&self, which: usize, dst: &mut [u8]) {
        // SAFETY: the Acquire on the flag made the bytes visible; writer is done.
        unsafe { std::ptr::copy_nonoverlapping(self.buf(which), dst.as_mut_ptr(), dst.len()) }
    }
    /// One round trip as the initiator (`k` counts round trips).
    fn ping(&self, k: u64, out: &[u8], back: &mut [u8]) {
        self.put(0, out);
        self.flag(RAW_AB).store(k, Ordering::Release);
        self.wait(RAW_BA, k);
        self.get(1, back);
    }
    fn pong(&self, k: u64, buf: &mut [u8]) {
        self.wait(RAW_AB, k);
        self.get(0, buf);
        self.put(1, buf);
        self.flag(RAW_BA).store(k, Ordering::Release);
    }
    /// Streams `n` chunks through four 256 KiB slots (an SPSC ring at chunk grain).
    fn stream_out(&self, base: u64, n: u64, src: &[u8]) {
        let slot = CHUNK / 4;
        for i in 0..n * 4 {
            let seq = base * 4 + i;
            while seq - self.flag(RAW_CONS).load(Ordering::Acquire) >= 4 {
                std::hint::spin_loop();
            }
            let off = (seq as usize % 4) * slot;
            // SAFETY: slot `seq % 4` is free (consumer is at most 3 behind).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src[(i as usize % 4) * slot..].as_ptr(),
                    self.buf(0).add(off),
                    slot,
                )
            };
            self.flag(RAW_PROD).store(seq + 1, Ordering::Release);
        }
        // Done when the consumer has copied everything out (as the device's ack says).
        self.wait(RAW_CONS, (base + n) * 4);
    }
    fn stream_in(&self, base: u64, n: u64, dst: &mut [u8]) {
        let slot = CHUNK / 4;
        for i in 0..n * 4 {
            let seq = base * 4 + i;
            self.wait(RAW_PROD, seq + 1);
            let off = (seq as usize % 4) * slot;
            // SAFETY: the producer published slot `seq % 4` (Acquire above).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.buf(0).add(off),
                    dst[(i as usize % 4) * slot..].as_mut_ptr(),
                    slot,
                )
            };
            self.flag(RAW_CONS).store(seq + 1, Ordering::Release);
        }
    }
}

// ------------------------------------------------------------ the measured protocol

fn hdr(len: usize) -> MsgHeader {
    MsgHeader {
        source: 0,
        tag: 1,
        context_id: 0,
        len: len as u64,
    }
}

fn spec(conn: ConnId) -> RecvSpec {
    RecvSpec {
        conn: Some(conn),
        ..RecvSpec::default()
    }
}

/// Device round trip as the initiator; returns the receive buffer for reuse.
fn dev_ping(dev: &mut dyn Device, c: ConnId, out: &[u8], back: Vec<u8>) -> Vec<u8> {
    dev.send(c, hdr(out.len()), out, T).expect("send");
    dev.recv(spec(c), back, T).expect("recv").data
}

fn dev_pong(dev: &mut dyn Device, c: ConnId, buf: Vec<u8>) -> Vec<u8> {
    let r = dev.recv(spec(c), buf, T).expect("recv");
    dev.send(c, hdr(r.data.len()), &r.data, T).expect("send");
    r.data
}

trait RawLink {
    fn ping(&mut self, k: u64, out: &[u8], back: &mut [u8]);
    fn pong(&mut self, k: u64, buf: &mut [u8]);
    fn stream_out(&mut self, base: u64, n: u64, src: &[u8]);
    fn stream_in(&mut self, base: u64, n: u64, dst: &mut [u8]);
}

impl RawLink for Raw {
    fn ping(&mut self, k: u64, out: &[u8], back: &mut [u8]) {
        Raw::ping(self, k, out, back)
    }
    fn pong(&mut self, k: u64, buf: &mut [u8]) {
        Raw::pong(self, k, buf)
    }
    fn stream_out(&mut self, base: u64, n: u64, src: &[u8]) {
        Raw::stream_out(self, base, n, src)
    }
    fn stream_in(&mut self, base: u64, n: u64, dst: &mut [u8]) {
        Raw::stream_in(self, base, n, dst)
    }
}

impl RawLink for TcpStream {
    fn ping(&mut self, _k: u64, out: &[u8], back: &mut [u8]) {
        self.write_all(out).expect("raw write");
        self.read_exact(back).expect("raw read");
    }
    fn pong(&mut self, _k: u64, buf: &mut [u8]) {
        self.read_exact(buf).expect("raw read");
        self.write_all(buf).expect("raw write");
    }
    fn stream_out(&mut self, _b: u64, n: u64, src: &[u8]) {
        for _ in 0..n {
            self.write_all(src).expect("raw write");
        }
        let mut ack = [0u8; 1];
        self.read_exact(&mut ack).expect("raw ack");
    }
    fn stream_in(&mut self, _b: u64, n: u64, dst: &mut [u8]) {
        for _ in 0..n {
            self.read_exact(dst).expect("raw read");
        }
        self.write_all(&[1]).expect("raw ack");
    }
}

#[derive(Default)]
struct Results {
    /// (size, device half-RTT samples µs, raw samples µs)
    lat: Vec<(usize, Vec<f64>, Vec<f64>)>,
    /// device and raw bandwidth samples, GB/s
    bw: (Vec<f64>, Vec<f64>),
}

/// The initiator side: latency for every size, then bandwidth, `rounds` times,
/// alternating raw and device so drift hits both alike.
fn drive(dev: &mut dyn Device, c: ConnId, raw: &mut dyn RawLink, is_shm: bool) -> Results {
    let mut res = Results::default();
    for &s in &SIZES {
        res.lat.push((s, Vec::new(), Vec::new()));
    }
    let out = vec![7u8; CHUNK];
    let mut back = vec![0u8; CHUNK];
    let mut k = 0u64;
    let mut base = 0u64;
    for _ in 0..rounds() {
        for (i, &s) in SIZES.iter().enumerate() {
            let n = iters(s);
            let mut raw_t = Vec::with_capacity(n);
            for j in 0..n + n / 10 {
                k += 1;
                let t = Instant::now();
                raw.ping(k, &out[..s], &mut back[..s]);
                if j >= n / 10 {
                    raw_t.push(t.elapsed().as_nanos() as f64 / 2000.0);
                }
            }
            let mut dev_t = Vec::with_capacity(n);
            let mut rb = vec![0u8; s];
            for j in 0..n + n / 10 {
                let t = Instant::now();
                rb = dev_ping(dev, c, &out[..s], rb);
                if j >= n / 10 {
                    dev_t.push(t.elapsed().as_nanos() as f64 / 2000.0);
                }
            }
            res.lat[i].1.push(median(&mut dev_t));
            res.lat[i].2.push(median(&mut raw_t));
        }
        let n = bw_chunks() as u64;
        let gb = (n as f64 * CHUNK as f64) / 1e9;
        let skip_raw = std::env::var("DYNRES_BENCH_NO_RAW_BW").is_ok();
        let t = Instant::now();
        if !skip_raw {
            raw.stream_out(base, n, &out);
        }
        if is_shm {
            base += n;
        }
        res.bw.1.push(gb / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..n {
            dev.send(c, hdr(CHUNK), &out, T).expect("stream send");
        }
        let ack = dev.recv(spec(c), vec![0; 1], T).expect("ack");
        assert_eq!(ack.data.len(), 1);
        res.bw.0.push(gb / t.elapsed().as_secs_f64());
    }
    res
}

/// The echo side: mirrors `drive` exactly.
fn serve(dev: &mut dyn Device, c: ConnId, raw: &mut dyn RawLink, is_shm: bool) {
    let mut buf = vec![0u8; CHUNK];
    let mut k = 0u64;
    let mut base = 0u64;
    for _ in 0..rounds() {
        for &s in &SIZES {
            let n = iters(s);
            for _ in 0..n + n / 10 {
                k += 1;
                raw.pong(k, &mut buf[..s]);
            }
            let mut rb = vec![0u8; s];
            for _ in 0..n + n / 10 {
                rb = dev_pong(dev, c, rb);
            }
        }
        let n = bw_chunks() as u64;
        if std::env::var("DYNRES_BENCH_NO_RAW_BW").is_err() {
            raw.stream_in(base, n, &mut buf);
        }
        if is_shm {
            base += n;
        }
        let mut rb = vec![0u8; CHUNK];
        for _ in 0..n {
            rb = recv_blocking(dev, spec(c), rb, T)
                .expect("stream recv")
                .data;
        }
        dev.send(c, hdr(1), &[1], T).expect("ack");
    }
}

// ------------------------------------------------------------ wiring

fn child_main(kind: &str) {
    pin(1);
    let addr = std::env::var("BENCH_ADDR").expect("addr");
    if kind == "shm" {
        let mut it = addr.splitn(4, ',');
        let host_id = it.next().unwrap().parse().unwrap();
        let pid = it.next().unwrap().parse().unwrap();
        let segment = it.next().unwrap().to_owned();
        let raw_name = it.next().unwrap().to_owned();
        let mut dev = ShmDevice::new(ShmConfig::default()).expect("shm");
        let peer = PeerAddrs {
            shm: Some(ShmAddr {
                host_id,
                pid,
                segment,
            }),
            ..PeerAddrs::default()
        };
        let c = dev.connect(&peer).expect("connect");
        let mut raw = Raw {
            seg: Segment::open(&raw_name).expect("raw segment"),
        };
        serve(&mut dev, c, &mut raw, true);
    } else {
        let (dev_addr, raw_addr) = addr.split_once(',').unwrap();
        let mut dev = TcpDevice::new(TcpConfig::default()).expect("tcp");
        let peer = PeerAddrs {
            tcp: Some(dev_addr.parse().unwrap()),
            ..PeerAddrs::default()
        };
        let c = dev.connect(&peer).expect("connect");
        let mut raw = TcpStream::connect(raw_addr).expect("raw connect");
        raw.set_nodelay(true).unwrap();
        serve(&mut dev, c, &mut raw, false);
    }
}

fn spawn(kind: &str, addr: String) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env("BENCH_ROLE", kind)
        .env("BENCH_ADDR", addr)
        .spawn()
        .expect("spawn child")
}

fn run_shm() -> Results {
    let mut dev = ShmDevice::new(ShmConfig::default()).expect("shm");
    let raw_name = format!("{SEGMENT_PREFIX}{}-rawbench", std::process::id());
    let mut raw = Raw {
        seg: Segment::create(&raw_name, RAW_DATA + 2 * CHUNK).expect("raw segment"),
    };
    let a = dev.addr().clone();
    let mut child = spawn(
        "shm",
        format!("{},{},{},{raw_name}", a.host_id, a.pid, a.segment),
    );
    let c = accept_blocking(&mut dev, T).expect("accept");
    let r = drive(&mut dev, c, &mut raw, true);
    assert!(child.wait().expect("child").success());
    r
}

fn run_tcp() -> Results {
    let mut dev = TcpDevice::new(TcpConfig::default()).expect("tcp");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut child = spawn(
        "tcp",
        format!("{},{}", dev.listen_addr(), l.local_addr().unwrap()),
    );
    let c = accept_blocking(&mut dev, T).expect("accept");
    let (mut raw, _) = l.accept().unwrap();
    raw.set_nodelay(true).unwrap();
    let r = drive(&mut dev, c, &mut raw, false);
    assert!(child.wait().expect("child").success());
    r
}

fn fmt_size(s: usize) -> String {
    match s {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn report(name: &str, mut r: Results) {
    for (s, dev, raw) in &mut r.lat {
        let (d, w) = (median(dev), median(raw));
        println!(
            "| {name} | latency {} | {d:.2} µs | {w:.2} µs | {:.2}× |",
            fmt_size(*s),
            d / w
        );
    }
    let (d, w) = (median(&mut r.bw.0), median(&mut r.bw.1));
    println!(
        "| {name} | bandwidth (1 MiB msgs) | {d:.2} GB/s | {w:.2} GB/s | {:.0} % |",
        100.0 * d / w
    );
}

fn main() {
    if let Ok(kind) = std::env::var("BENCH_ROLE") {
        child_main(&kind);
        return;
    }
    // `cargo test --benches` runs bench binaries with `--bench` absent: stay quick.
    if !std::env::args().any(|a| a == "--bench") {
        println!("pingpong: run with `cargo bench` to measure");
        return;
    }
    pin(0);
    println!("| device | measure | device median | raw median | device/raw |");
    println!("|---|---|---|---|---|");
    let only = std::env::var("DYNRES_BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only == "shm" {
        let sleeps = dynres_transports::shm::waiter::sleep_count();
        report("shm", run_shm());
        eprintln!(
            "shm: spin budget {} iterations, futex sleeps in the driver: {}",
            dynres_transports::shm::waiter::calibrated_spins(),
            dynres_transports::shm::waiter::sleep_count() - sleeps
        );
    }
    if only.is_empty() || only == "tcp" {
        report("tcp", run_tcp());
    }
}
