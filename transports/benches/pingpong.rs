//! Ping-pong latency (1 B … 1 MiB) and streaming bandwidth of the shm and TCP devices
//! between two processes, each next to a raw baseline measured in the same run:
//! a bare spin-flag shared-memory ping-pong / SPSC copy loop, and bare busy-polling and
//! blocking std TCP ping-pongs / streams. Prints medians and the device/raw ratio as a Markdown table.
//!
//! `cargo bench -p dynres-transports --bench pingpong [-- --compare]` (env
//! `DYNRES_BENCH_ROUNDS`, default 3; `DYNRES_BENCH_MB`, bandwidth volume per round,
//! default 256; `DYNRES_BENCH_ONLY=shm|tcp` to run one device; `--compare` or
//! `DYNRES_BENCH_COMPARE=1` prints one table of device/raw ratios per size). TCP has
//! two raw baselines: a busy-polling one (non-blocking socket, spinning on `read`, as
//! the MPI libraries do) and a blocking one.
//!
//! **A/A control.** The first baseline of each device (spin-flag, busy-poll) runs twice
//! per size and round, on its own second segment or socket: before the device and
//! again after it. `--compare` ends with a table of per-round ratios, the device
//! against the baseline next to the baseline's second run against its first: how far
//! two measurements of the same exchange differ here, so a reader can tell a real gap
//! from noise.
//!
//! Where Open MPI is installed (`mpicc` and an Open MPI `mpirun` on `PATH`), each device
//! also gets an **Open MPI** column from the same run: `benches/mpi_pingpong.c` is built
//! with `mpicc` and run under `mpirun -np 2 --bind-to core --mca pml ob1` with the btl
//! forced (`vader` for shm, `tcp` for TCP), with the same sizes, sample counts and
//! summary. Without it the column is left out and a `skipped:` line says why;
//! `DYNRES_BENCH_MPI=0` leaves it out on purpose.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dynres_transports::device::{Device, RecvSpec, accept_blocking, recv_blocking};
use dynres_transports::shm::segment::{SEGMENT_PREFIX, Segment};
use dynres_transports::shm::{ShmConfig, ShmDevice};
use dynres_transports::tcp::{DataKey, TcpConfig, TcpDevice, TcpKeys};
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

/// Round trips timed together per sample: small exchanges take 100–200 ns, close to
/// the clock's ~10 ns granularity and the cost of reading it, so they are timed in
/// batches of 16 (the sample is the batch's mean; the median is over batches).
fn batch(size: usize) -> usize {
    if size <= 1024 { 16 } else { 1 }
}

/// Samples per size (after warm-up) and warm-up samples.
fn samples(size: usize) -> (usize, usize) {
    let n = (iters(size) / batch(size)).max(1);
    (n, n / 10)
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
    /// Round trips so far (the flags count them).
    k: u64,
    /// Chunks streamed so far.
    base: u64,
}

const RAW_AB: usize = 0;
const RAW_BA: usize = 64;
const RAW_PROD: usize = 128;
const RAW_CONS: usize = 192;
const RAW_DATA: usize = 4096;

impl Raw {
    fn new(seg: Segment) -> Self {
        Self { seg, k: 0, base: 0 }
    }
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
}

impl RawLink for Raw {
    /// One round trip as the initiator.
    fn ping(&mut self, out: &[u8], back: &mut [u8]) {
        self.k += 1;
        self.put(0, out);
        self.flag(RAW_AB).store(self.k, Ordering::Release);
        self.wait(RAW_BA, self.k);
        self.get(1, back);
    }
    fn pong(&mut self, buf: &mut [u8]) {
        self.k += 1;
        self.wait(RAW_AB, self.k);
        self.get(0, buf);
        self.put(1, buf);
        self.flag(RAW_BA).store(self.k, Ordering::Release);
    }
    /// Streams `n` chunks through four 256 KiB slots (an SPSC ring at chunk grain).
    fn stream_out(&mut self, n: u64, src: &[u8]) {
        let slot = CHUNK / 4;
        let base = self.base;
        self.base += n;
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
    fn stream_in(&mut self, n: u64, dst: &mut [u8]) {
        let slot = CHUNK / 4;
        let base = self.base;
        self.base += n;
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

// ------------------------------------------------------------ raw TCP baselines

/// Busy-polling raw TCP: a non-blocking socket, spinning on `read`/`write` (what the
/// MPI libraries' TCP paths do while a request is outstanding).
struct BusyTcp(TcpStream);

impl BusyTcp {
    fn new(s: TcpStream) -> Self {
        s.set_nodelay(true).expect("nodelay");
        s.set_nonblocking(true).expect("nonblocking");
        Self(s)
    }
    fn write_all(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            match self.0.write(b) {
                Ok(k) => b = &b[k..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("raw busy write: {e}"),
            }
        }
    }
    fn read_exact(&mut self, mut b: &mut [u8]) {
        while !b.is_empty() {
            match self.0.read(b) {
                Ok(0) => panic!("raw busy read: peer closed"),
                Ok(k) => b = &mut b[k..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("raw busy read: {e}"),
            }
        }
    }
}

impl RawLink for BusyTcp {
    fn ping(&mut self, out: &[u8], back: &mut [u8]) {
        self.write_all(out);
        self.read_exact(back);
    }
    fn pong(&mut self, buf: &mut [u8]) {
        self.read_exact(buf);
        self.write_all(buf);
    }
    fn stream_out(&mut self, n: u64, src: &[u8]) {
        for _ in 0..n {
            self.write_all(src);
        }
        self.read_exact(&mut [0u8; 1]);
    }
    fn stream_in(&mut self, n: u64, dst: &mut [u8]) {
        for _ in 0..n {
            self.read_exact(dst);
        }
        self.write_all(&[1]);
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

/// A raw baseline: the same exchanges as the device, with nothing in between.
trait RawLink {
    fn ping(&mut self, out: &[u8], back: &mut [u8]);
    fn pong(&mut self, buf: &mut [u8]);
    fn stream_out(&mut self, n: u64, src: &[u8]);
    fn stream_in(&mut self, n: u64, dst: &mut [u8]);
}

/// Blocking raw TCP (std, `TCP_NODELAY`).
impl RawLink for TcpStream {
    fn ping(&mut self, out: &[u8], back: &mut [u8]) {
        self.write_all(out).expect("raw write");
        self.read_exact(back).expect("raw read");
    }
    fn pong(&mut self, buf: &mut [u8]) {
        self.read_exact(buf).expect("raw read");
        self.write_all(buf).expect("raw write");
    }
    fn stream_out(&mut self, n: u64, src: &[u8]) {
        for _ in 0..n {
            self.write_all(src).expect("raw write");
        }
        let mut ack = [0u8; 1];
        self.read_exact(&mut ack).expect("raw ack");
    }
    fn stream_in(&mut self, n: u64, dst: &mut [u8]) {
        for _ in 0..n {
            self.read_exact(dst).expect("raw read");
        }
        self.write_all(&[1]).expect("raw ack");
    }
}

#[derive(Default)]
struct Results {
    /// Names of the raw baselines, in the order of the sample vectors below: those
    /// measured before the device, then the repeats measured after it.
    raw_names: Vec<&'static str>,
    /// How many of `raw_names` are repeats (the last ones), each of the baseline at
    /// the same index among the first ones: the A/A control.
    repeats: usize,
    /// (size, device half-RTT samples µs, per raw baseline: samples µs)
    lat: Vec<(usize, Vec<f64>, Vec<Vec<f64>>)>,
    /// device and per-raw bandwidth samples, GB/s
    bw: (Vec<f64>, Vec<Vec<f64>>),
}

fn no_raw_bw() -> bool {
    std::env::var("DYNRES_BENCH_NO_RAW_BW").is_ok()
}

/// The initiator side: latency for every size, then bandwidth, `rounds` times. In
/// each, the raw baselines `before` run, then the device, then the `after` ones: those
/// are repeats of the first `before` baselines (the A/A control), so that a baseline
/// brackets the device and the spread between its two runs shows how far two
/// measurements of the *same* exchange differ on this machine.
fn drive(
    dev: &mut dyn Device,
    c: ConnId,
    before: &mut [(&'static str, &mut dyn RawLink)],
    after: &mut [(&'static str, &mut dyn RawLink)],
) -> Results {
    let n_raws = before.len() + after.len();
    let mut res = Results {
        raw_names: before
            .iter()
            .map(|(n, _)| *n)
            .chain(after.iter().map(|(n, _)| *n))
            .collect(),
        repeats: after.len(),
        bw: (Vec::new(), vec![Vec::new(); n_raws]),
        ..Results::default()
    };
    for &s in &SIZES {
        res.lat.push((s, Vec::new(), vec![Vec::new(); n_raws]));
    }
    let out = vec![7u8; CHUNK];
    let mut back = vec![0u8; CHUNK];
    for _ in 0..rounds() {
        for (i, &s) in SIZES.iter().enumerate() {
            let (n, warm) = samples(s);
            let b = batch(s);
            // Half the round trip, µs, per round trip of the batch.
            let per = |t: Instant| t.elapsed().as_nanos() as f64 / (2000.0 * b as f64);
            let mut time_raw = |raw: &mut dyn RawLink| {
                let mut raw_t = Vec::with_capacity(n);
                for j in 0..n + warm {
                    let t = Instant::now();
                    for _ in 0..b {
                        raw.ping(&out[..s], &mut back[..s]);
                    }
                    if j >= warm {
                        raw_t.push(per(t));
                    }
                }
                median(&mut raw_t)
            };
            for (r, (_, raw)) in before.iter_mut().enumerate() {
                res.lat[i].2[r].push(time_raw(&mut **raw));
            }
            let mut dev_t = Vec::with_capacity(n);
            let mut rb = vec![0u8; s];
            for j in 0..n + warm {
                let t = Instant::now();
                for _ in 0..b {
                    rb = dev_ping(dev, c, &out[..s], rb);
                }
                if j >= warm {
                    dev_t.push(per(t));
                }
            }
            res.lat[i].1.push(median(&mut dev_t));
            for (r, (_, raw)) in after.iter_mut().enumerate() {
                res.lat[i].2[before.len() + r].push(time_raw(&mut **raw));
            }
        }
        let n = bw_chunks() as u64;
        let gb = (n as f64 * CHUNK as f64) / 1e9;
        let stream_raw = |raw: &mut dyn RawLink| {
            let t = Instant::now();
            if !no_raw_bw() {
                raw.stream_out(n, &out);
            }
            gb / t.elapsed().as_secs_f64()
        };
        for (r, (_, raw)) in before.iter_mut().enumerate() {
            res.bw.1[r].push(stream_raw(&mut **raw));
        }
        let t = Instant::now();
        for _ in 0..n {
            dev.send(c, hdr(CHUNK), &out, T).expect("stream send");
        }
        let ack = dev.recv(spec(c), vec![0; 1], T).expect("ack");
        assert_eq!(ack.data.len(), 1);
        res.bw.0.push(gb / t.elapsed().as_secs_f64());
        for (r, (_, raw)) in after.iter_mut().enumerate() {
            res.bw.1[before.len() + r].push(stream_raw(&mut **raw));
        }
    }
    res
}

/// The echo side: mirrors `drive` exactly (`before`, the device, `after`).
fn serve(
    dev: &mut dyn Device,
    c: ConnId,
    before: &mut [&mut dyn RawLink],
    after: &mut [&mut dyn RawLink],
) {
    let mut buf = vec![0u8; CHUNK];
    for _ in 0..rounds() {
        for &s in &SIZES {
            let (n, warm) = samples(s);
            let total = (n + warm) * batch(s);
            let mut pong_raw = |raw: &mut dyn RawLink| {
                for _ in 0..total {
                    raw.pong(&mut buf[..s]);
                }
            };
            for raw in before.iter_mut() {
                pong_raw(&mut **raw);
            }
            let mut rb = vec![0u8; s];
            for _ in 0..total {
                rb = dev_pong(dev, c, rb);
            }
            for raw in after.iter_mut() {
                pong_raw(&mut **raw);
            }
        }
        let n = bw_chunks() as u64;
        let mut stream_raw = |raw: &mut dyn RawLink| {
            if !no_raw_bw() {
                raw.stream_in(n, &mut buf);
            }
        };
        for raw in before.iter_mut() {
            stream_raw(&mut **raw);
        }
        let mut rb = vec![0u8; CHUNK];
        for _ in 0..n {
            rb = recv_blocking(dev, spec(c), rb, T)
                .expect("stream recv")
                .data;
        }
        dev.send(c, hdr(1), &[1], T).expect("ack");
        for raw in after.iter_mut() {
            stream_raw(&mut **raw);
        }
    }
}

// ------------------------------------------------------------ wiring

/// Both processes' TCP configuration: keyed like a job's (DATA-9: the handshake runs
/// once, at set-up; the latencies measured are those of authenticated connections).
fn keyed() -> TcpConfig {
    TcpConfig {
        keys: TcpKeys::with_default(DataKey::new([0x42; 32])),
        ..TcpConfig::default()
    }
}

fn child_main(kind: &str) {
    pin(1);
    let addr = std::env::var("BENCH_ADDR").expect("addr");
    if kind == "shm" {
        let mut it = addr.splitn(5, ',');
        let host_id = it.next().unwrap().parse().unwrap();
        let pid = it.next().unwrap().parse().unwrap();
        let segment = it.next().unwrap().to_owned();
        let raw_name = it.next().unwrap().to_owned();
        let again_name = it.next().unwrap().to_owned();
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
        let mut raw = Raw::new(Segment::open(&raw_name).expect("raw segment"));
        let mut again = Raw::new(Segment::open(&again_name).expect("raw segment"));
        serve(&mut dev, c, &mut [&mut raw], &mut [&mut again]);
    } else {
        let mut it = addr.splitn(4, ',');
        let dev_addr = it.next().unwrap();
        let raw_addr = it.next().unwrap();
        let busy_addr = it.next().unwrap();
        let again_addr = it.next().unwrap();
        let mut dev = TcpDevice::new(keyed()).expect("tcp");
        let peer = PeerAddrs {
            tcp: Some(dev_addr.parse().unwrap()),
            ..PeerAddrs::default()
        };
        let c = dev.connect(&peer).expect("connect");
        // The connection's handshake needs our reads before the raw links keep us
        // busy: a first message completes it (the parent receives it).
        dev.send(c, hdr(1), &[0], T).expect("set up the connection");
        let mut raw = TcpStream::connect(raw_addr).expect("raw connect");
        raw.set_nodelay(true).unwrap();
        let mut busy = BusyTcp::new(TcpStream::connect(busy_addr).expect("busy connect"));
        let mut again = BusyTcp::new(TcpStream::connect(again_addr).expect("busy connect"));
        serve(&mut dev, c, &mut [&mut busy, &mut raw], &mut [&mut again]);
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
    let again_name = format!("{SEGMENT_PREFIX}{}-rawbench-again", std::process::id());
    let raw_seg =
        |name: &str| Raw::new(Segment::create(name, RAW_DATA + 2 * CHUNK).expect("raw segment"));
    let mut raw = raw_seg(&raw_name);
    let mut again = raw_seg(&again_name);
    let a = dev.addr().clone();
    let mut child = spawn(
        "shm",
        format!(
            "{},{},{},{raw_name},{again_name}",
            a.host_id, a.pid, a.segment
        ),
    );
    let c = accept_blocking(&mut dev, T).expect("accept");
    let r = drive(
        &mut dev,
        c,
        &mut [("raw spin-flag copy", &mut raw)],
        &mut [("raw spin-flag copy, again", &mut again)],
    );
    assert!(child.wait().expect("child").success());
    r
}

fn run_tcp() -> Results {
    let mut dev = TcpDevice::new(keyed()).expect("tcp");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let lb = TcpListener::bind("127.0.0.1:0").unwrap();
    let la = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut child = spawn(
        "tcp",
        format!(
            "{},{},{},{}",
            dev.listen_addr(),
            l.local_addr().unwrap(),
            lb.local_addr().unwrap(),
            la.local_addr().unwrap()
        ),
    );
    let c = accept_blocking(&mut dev, T).expect("accept");
    recv_blocking(&mut dev, spec(c), vec![0; 1], T).expect("the set-up message");
    let (mut raw, _) = l.accept().unwrap();
    raw.set_nodelay(true).unwrap();
    let mut busy = BusyTcp::new(lb.accept().unwrap().0);
    let mut again = BusyTcp::new(la.accept().unwrap().0);
    let r = drive(
        &mut dev,
        c,
        &mut [("raw busy-poll", &mut busy), ("raw blocking", &mut raw)],
        &mut [("raw busy-poll, again", &mut again)],
    );
    assert!(child.wait().expect("child").success());
    r
}

/// Microseconds with three significant decimals below 1 µs (shared-memory latencies
/// would otherwise round to one or two digits).
fn us(v: f64) -> String {
    if v < 1.0 {
        format!("{v:.3} µs")
    } else {
        format!("{v:.2} µs")
    }
}

fn fmt_size(s: usize) -> String {
    match s {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

// ------------------------------------------------------------ Open MPI reference

/// The Open MPI reference for one btl: per size the one-way median (µs, in `SIZES`
/// order) and the streaming bandwidth (GB/s). `Err` says why it was not measured.
fn open_mpi(btl: &str) -> Result<(Vec<f64>, f64), String> {
    if std::env::var("DYNRES_BENCH_MPI").is_ok_and(|v| v == "0") {
        return Err("DYNRES_BENCH_MPI=0".into());
    }
    let version = Command::new("mpirun")
        .arg("--version")
        .output()
        .map_err(|_| "no mpirun on PATH (apt install openmpi-bin libopenmpi-dev)".to_string())?;
    if !String::from_utf8_lossy(&version.stdout).contains("Open MPI") {
        return Err("mpirun is not Open MPI's".into());
    }
    let bin = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi_pingpong");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/mpi_pingpong.c");
    let built = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(src)
        .status()
        .map_err(|e| format!("mpicc: {e}"))?;
    if !built.success() {
        return Err(format!("mpicc failed ({built})"));
    }
    let out = Command::new("mpirun")
        // Root may run it only when it says so (CI machines run as root).
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args([
            "-np",
            "2",
            "--bind-to",
            "core",
            "--mca",
            "pml",
            "ob1",
            "--mca",
            "btl",
        ])
        .arg(format!("{btl},self"))
        .arg(&bin)
        .arg(rounds().to_string())
        .arg(bw_chunks().to_string())
        .output()
        .map_err(|e| format!("mpirun: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "mpirun failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next()
                .unwrap_or("")
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lat = Vec::new();
    let mut bw = None;
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let (Some(k), Some(v)) = (w.next(), w.next().and_then(|v| v.parse::<f64>().ok())) else {
            continue;
        };
        if k == "stream" {
            bw = Some(v);
        } else if k.parse::<usize>().ok() == SIZES.get(lat.len()).copied() {
            lat.push(v);
        }
    }
    match bw {
        Some(bw) if lat.len() == SIZES.len() => Ok((lat, bw)),
        _ => Err(format!("unexpected output from mpi_pingpong: {text:?}")),
    }
}

/// Adds the Open MPI figures for `btl` to a device's summary as one more baseline, or
/// says on stderr why there are none.
fn add_open_mpi(s: &mut Summary, device: &str, btl: &str) {
    match open_mpi(btl) {
        Ok((lat, bw)) => {
            s.raw_names.push(if btl == "tcp" {
                "Open MPI (btl tcp)"
            } else {
                "Open MPI (btl vader)"
            });
            for ((_, _, raws), v) in s.lat.iter_mut().zip(lat) {
                raws.push(v);
            }
            s.bw.1.push(bw);
        }
        Err(why) => eprintln!("{device}: Open MPI column skipped: {why}"),
    }
}

/// Medians of one device's run: per size (device, raws), and bandwidth (device, raws).
struct Summary {
    raw_names: Vec<&'static str>,
    lat: Vec<(usize, f64, Vec<f64>)>,
    bw: (f64, Vec<f64>),
    /// The A/A control: (index of a repeated baseline in `raw_names`, index of the
    /// baseline it repeats).
    repeats: Vec<(usize, usize)>,
    /// Per size, per round: the device's median and each raw baseline's.
    per_round: Vec<(Vec<f64>, Vec<Vec<f64>>)>,
}

fn summarize(mut r: Results) -> Summary {
    let first_repeat = r.raw_names.len() - r.repeats;
    Summary {
        raw_names: r.raw_names.clone(),
        repeats: (0..r.repeats).map(|i| (first_repeat + i, i)).collect(),
        per_round: r
            .lat
            .iter()
            .map(|(_, d, raws)| (d.clone(), raws.clone()))
            .collect(),
        lat: r
            .lat
            .iter_mut()
            .map(|(s, d, raws)| (*s, median(d), raws.iter_mut().map(|w| median(w)).collect()))
            .collect(),
        bw: (
            median(&mut r.bw.0),
            r.bw.1.iter_mut().map(|w| median(w)).collect(),
        ),
    }
}

impl Summary {
    fn is_repeat(&self, raw: usize) -> bool {
        self.repeats.iter().any(|&(r, _)| r == raw)
    }
}

/// `a/b` per round, as "median (min–max)" over the rounds.
fn ratio_spread(a: &[f64], b: &[f64]) -> String {
    let mut v: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    let mid = median(&mut v);
    format!("{mid:.2}× ({:.2}–{:.2})", v[0], v[v.len() - 1])
}

/// The long table: one row per device, measure and raw baseline.
fn report(name: &str, s: &Summary) {
    for (size, d, raws) in &s.lat {
        for (w, raw) in raws.iter().zip(&s.raw_names) {
            println!(
                "| {name} | latency {} | {raw} | {} | {} | {:.2}× |",
                fmt_size(*size),
                us(*d),
                us(*w),
                d / w
            );
        }
    }
    for (w, raw) in s.bw.1.iter().zip(&s.raw_names) {
        println!(
            "| {name} | bandwidth (1 MiB msgs) | {raw} | {:.2} GB/s | {w:.2} GB/s | {:.0} % |",
            s.bw.0,
            100.0 * s.bw.0 / w
        );
    }
}

/// `--compare`: one row per size, every device next to its raw baselines, so the gap
/// is visible at a glance (latency: device/raw, lower is better; bandwidth: device as
/// a percentage of raw, higher is better).
fn report_compare(shm: Option<&Summary>, tcp: Option<&Summary>) {
    let all: Vec<(&str, &Summary)> = [("shm", shm), ("tcp", tcp)]
        .into_iter()
        .filter_map(|(n, s)| s.map(|s| (n, s)))
        .collect();
    let mut head = String::from("| size |");
    let mut rule = String::from("|---|");
    for (n, s) in &all {
        head += &format!(" {n} device |");
        rule += "---|";
        for (j, raw) in s.raw_names.iter().enumerate() {
            if !s.is_repeat(j) {
                head += &format!(" {n} {raw} | {n} dev/{raw} |");
                rule += "---|---|";
            }
        }
    }
    println!("{head}\n{rule}");
    for (i, size) in SIZES.iter().enumerate() {
        let mut row = format!("| {} |", fmt_size(*size));
        for (_, s) in &all {
            let (_, d, raws) = &s.lat[i];
            row += &format!(" {} |", us(*d));
            for (j, w) in raws.iter().enumerate() {
                if !s.is_repeat(j) {
                    row += &format!(" {} | **{:.2}×** |", us(*w), d / w);
                }
            }
        }
        println!("{row}");
    }
    let mut row = String::from("| stream 1 MiB msgs |");
    for (_, s) in &all {
        row += &format!(" {:.2} GB/s |", s.bw.0);
        for (j, w) in s.bw.1.iter().enumerate() {
            if !s.is_repeat(j) {
                row += &format!(" {w:.2} GB/s | **{:.0} %** |", 100.0 * s.bw.0 / w);
            }
        }
    }
    println!("{row}");
    report_control(&all);
}

/// The A/A control under `--compare`: per size, the device against a baseline round
/// by round, next to the same baseline measured again after the device against its
/// first run. A device ratio inside the A/A spread is not distinguishable from the
/// baseline on this machine; one outside it is a real difference.
fn report_control(all: &[(&str, &Summary)]) {
    let mut head = String::from("\n| size (per round: median (min–max)) |");
    let mut rule = String::from("|---|");
    for (n, s) in all {
        for &(_, of) in &s.repeats {
            let raw = s.raw_names[of];
            head += &format!(" {n} dev/{raw} | {n} {raw}: again/first |");
            rule += "---|---|";
        }
    }
    println!("{head}\n{rule}");
    for (i, size) in SIZES.iter().enumerate() {
        let mut row = format!("| {} |", fmt_size(*size));
        for (_, s) in all {
            let (d, raws) = &s.per_round[i];
            for &(again, of) in &s.repeats {
                row += &format!(
                    " {} | {} |",
                    ratio_spread(d, &raws[of]),
                    ratio_spread(&raws[again], &raws[of])
                );
            }
        }
        println!("{row}");
    }
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
    let compare =
        std::env::args().any(|a| a == "--compare") || std::env::var("DYNRES_BENCH_COMPARE").is_ok();
    pin(0);
    let only = std::env::var("DYNRES_BENCH_ONLY").unwrap_or_default();
    if !compare {
        println!("| device | measure | raw baseline | device median | raw median | device/raw |");
        println!("|---|---|---|---|---|---|");
    }
    let mut shm = None;
    if only.is_empty() || only == "shm" {
        let sleeps = dynres_transports::shm::waiter::sleep_count();
        let mut s = summarize(run_shm());
        eprintln!(
            "shm: spin budget {} iterations, futex sleeps in the driver: {}, \
             single copy pays here: {}, messages the driver received by single copy: {}",
            dynres_transports::shm::waiter::calibrated_spins(),
            dynres_transports::shm::waiter::sleep_count() - sleeps,
            dynres_transports::shm::cma::single_copy_pays(),
            dynres_transports::shm::cma::transfers(),
        );
        add_open_mpi(&mut s, "shm", "vader");
        if !compare {
            report("shm", &s);
        }
        shm = Some(s);
    }
    let mut tcp = None;
    if only.is_empty() || only == "tcp" {
        let mut s = summarize(run_tcp());
        eprintln!(
            "tcp: spin budget {:?}",
            dynres_transports::tcp::calibrated_spin()
        );
        add_open_mpi(&mut s, "tcp", "tcp");
        if !compare {
            report("tcp", &s);
        }
        tcp = Some(s);
    }
    if compare {
        report_compare(shm.as_ref(), tcp.as_ref());
    }
}
