//! `dynres daemon`: one host's share of a job that spans several (`spec/runtime.md`).
//! Started by the master's launch agent, it reads the job's key from standard input
//! (AUTH-1), connects back to the master over TCP and proves it holds the key
//! (AUTH-2..5), takes its launch template from `Setup` (LINK-2), and then runs core's
//! daemon for its node: launching, reaping and serving that node's processes, relaying
//! core's frames (LINK-3), reporting how processes ended (LINK-4), and ending with the
//! job (LINK-5) or with the master (RT-3).

use std::io::BufRead;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixListener;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dynres_core::Namespace;
use dynres_core::rc::liveness::{LivenessConfig, MasterWatch, WatchInput, WatchOutput};
use dynres_core::rc::wire::link::{LinkMsg, NodeSetup, decode_link, encode_link};

use super::conns::Conn;
use super::engine::{Engine, OnLoss, Outcome};
use super::jobdir::JobDir;
use super::procs::LaunchSpec;
use super::{ioloop, link, server, signals};
use crate::error::LauncherError;
use crate::hostauth;
use dynres_client::auth::new_secret;
use dynres_client::env;
use dynres_client::framing::{Frame, FrameReader};

/// How long a daemon tries to reach the master, and then to get its `Setup`.
const CONNECT_BOUND: Duration = Duration::from_secs(10);

/// The daemon's link to the master, as its engine uses it. Whether the master is
/// alive and when it is owed a heartbeat is core's [`MasterWatch`]'s to decide; this
/// feeds it the link's traffic and the time.
pub struct Upstream {
    conn: Conn,
    reader: Option<JoinHandle<()>>,
    watch: MasterWatch,
    /// The origin of the kernel clock the watch is fed.
    origin: Instant,
}

impl Upstream {
    fn new(node: u32, conn: Conn, reader: JoinHandle<()>, heartbeat: Duration) -> Upstream {
        let cfg = LivenessConfig::new(super::nodes::kernel_span(heartbeat));
        Upstream {
            conn,
            reader: Some(reader),
            watch: MasterWatch::new(node, cfg, dynres_core::time::Instant::ZERO),
            origin: Instant::now(),
        }
    }

    /// Queues `frame` for the master (never blocks the engine, as LINK-6 on the master).
    pub fn send(&mut self, frame: &[u8]) -> Result<(), String> {
        let now = super::nodes::kernel_now(self.origin);
        self.watch.handle(now, WatchInput::Sent);
        self.conn.send(frame).map_err(|e| format!("link: {e}"))
    }

    /// The master was heard from (HB-1).
    pub fn heard(&mut self) {
        let now = super::nodes::kernel_now(self.origin);
        self.watch.handle(now, WatchInput::Heard);
    }

    /// Flushes, and wakes the watch when it asked to be: sends the heartbeats it asks
    /// for; an error when it finds the master silent (HB-2) or the link failed.
    pub fn tick(&mut self) -> Result<(), String> {
        let now = super::nodes::kernel_now(self.origin);
        if self.watch.poll_timeout().is_some_and(|t| t <= now) {
            self.watch.handle(now, WatchInput::Timeout);
        }
        while let Some(out) = self.watch.poll_output() {
            match out {
                WatchOutput::MasterSilent(d) => {
                    return Err(format!(
                        "the master was silent for {} ms",
                        d.as_nanos() / 1_000_000
                    ));
                }
                WatchOutput::Heartbeat => self
                    .conn
                    .send(&encode_link(&LinkMsg::Heartbeat))
                    .map_err(|e| format!("link: {e}"))?,
            }
        }
        self.conn.flush().map_err(|e| format!("link: {e}"))
    }

    /// The link's socket while bytes wait for the master to read: the I/O loop says
    /// when it takes bytes again.
    pub fn blocked(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.conn.has_pending().then(|| self.conn.fd())
    }

    /// Flushes what is pending (bounded: 2 s), then closes the link.
    pub fn finish(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.conn.has_pending() && Instant::now() < deadline {
            if self.conn.flush().is_err() {
                break;
            }
            // Until the socket takes bytes again (or the bound), not a fixed retry.
            let left = deadline.saturating_duration_since(Instant::now());
            let mut fd = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&self.conn.fd()),
                events: libc::POLLOUT,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd for the duration of the call.
            unsafe { libc::poll(&mut fd, 1, ms) };
        }
        self.conn.close();
        if let Some(t) = self.reader.take() {
            let _ = t.join();
        }
    }
}

fn link_err(why: impl std::fmt::Display) -> LauncherError {
    LauncherError::Link(why.to_string())
}

/// Reads the job's key, one line of hex, from standard input (AUTH-1). The line itself
/// is the key, as the master uses it (`auth::new_secret`'s text).
fn read_key() -> Result<Vec<u8>, LauncherError> {
    let mut line = String::new();
    std::io::Read::take(std::io::stdin().lock(), 1024)
        .read_line(&mut line)
        .map_err(|e| LauncherError::io("read the job key from standard input", e))?;
    let key = line.trim();
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(LauncherError::Usage(
            "dynres daemon: no job key (hex) on standard input".into(),
        ));
    }
    Ok(key.as_bytes().to_vec())
}

fn connect(master: &str) -> Result<TcpStream, LauncherError> {
    let deadline = Instant::now() + CONNECT_BOUND;
    loop {
        let addrs: Vec<_> = master
            .to_socket_addrs()
            .map_err(|e| LauncherError::Usage(format!("--master {master}: {e}")))?
            .collect();
        let mut last = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        if Instant::now() >= deadline {
            return Err(link_err(format!(
                "cannot reach the master at {master}: {}",
                last.map_or("no address".into(), |e| e.to_string())
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Connects and authenticates (AUTH-1..3). A master that dropped the connection before
/// its verdict (a flood of strangers, AUTH-7) is tried again until it would have given
/// up on this daemon (HB-3).
fn authenticated(master: &str, key: &[u8], node: u32) -> Result<TcpStream, LauncherError> {
    let deadline = Instant::now() + super::nodes::CONNECT_BOUND;
    loop {
        let mut stream = connect(master)?;
        stream
            .set_read_timeout(Some(CONNECT_BOUND))
            .and_then(|()| stream.set_write_timeout(Some(CONNECT_BOUND)))
            .map_err(|e| LauncherError::io("set timeouts on the link", e))?;
        match hostauth::daemon_handshake(&mut stream, key, node) {
            Ok(()) => return Ok(stream),
            Err(hostauth::AuthError::Dropped) if Instant::now() < deadline => {
                tracing::debug!(node, "the master dropped the connection; trying again");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(link_err(e)),
        }
    }
}

/// Waits for the master's `Setup` (LINK-2).
fn handshake(stream: &mut TcpStream, node: u32) -> Result<(NodeSetup, FrameReader), LauncherError> {
    let mut frames = FrameReader::new();
    let frame = match frames.next(stream) {
        Ok(Ok(Frame::Frame(f))) => f,
        Ok(Ok(Frame::Closed)) => return Err(link_err("the master closed the link")),
        Ok(Err(e)) => return Err(link_err(format!("malformed frame: {e}"))),
        Err(e) => return Err(link_err(e)),
    };
    // LINK-2: anything but a link frame first (a core frame, say) is refused as such,
    // not as a malformed Setup.
    if let Ok((h, _)) = dynres_core::wire::decode_frame(&frame) {
        if !dynres_core::rc::wire::link::is_link_type(h.msg_type) {
            return Err(link_err(format!(
                "expected Setup first, got a frame of type {:#06x}",
                h.msg_type
            )));
        }
    }
    let setup = match decode_link(&frame) {
        Ok(LinkMsg::Setup(s)) if s.node == node => s,
        Ok(LinkMsg::Setup(s)) => {
            return Err(link_err(format!(
                "the master set this daemon up as node {}, not {node}",
                s.node
            )));
        }
        Ok(m) => return Err(link_err(format!("expected Setup first, got {m:?}"))),
        Err(e) => return Err(link_err(format!("malformed Setup: {e}"))),
    };
    stream
        .set_read_timeout(None)
        .and_then(|()| stream.set_write_timeout(None))
        .map_err(|e| LauncherError::io("clear timeouts on the link", e))?;
    Ok((*setup, frames))
}

/// Runs node `node`'s daemon of the job whose master listens at `master` (`host:port`)
/// until the master ends the job (LINK-5) or is lost (RT-3).
pub fn run(master: &str, node: u32) -> Result<Outcome, LauncherError> {
    // RT-3, RT-4: before any thread exists; from here on this is the daemon, and the
    // pid its launch agent started supervises it.
    let supervised = super::supervisor::start()
        .map_err(|e| LauncherError::io("start the daemon's supervisor", e))?;
    let key = read_key()?;
    let mut stream = authenticated(master, &key, node)?;
    // `frames` may hold what the master sent right after `Setup`: the reader goes on
    // from there.
    let (setup, frames) = handshake(&mut stream, node)?;
    tracing::info!(node, job = %setup.job, "daemon up");
    let _ = stream.set_nodelay(true);
    let node_ip = stream
        .local_addr()
        .map_err(|e| LauncherError::io("read the link's address", e))?
        .ip()
        .to_string();
    let root = env::runtime_root();
    // A job directory of its own on this host (other nodes may share the file system).
    let dir_name = format!("{}.node{node}", setup.job);
    let secret = new_secret().map_err(|e| LauncherError::io("read /dev/urandom", e))?;
    let dir = JobDir::create(&root, &dir_name, &secret)?;
    supervised.job_dir(dir.path());
    let sock = dir.control_sock();
    let listener = UnixListener::bind(&sock)
        .map_err(|e| LauncherError::io(format!("bind {}", sock.display()), e))?;
    signals::install();
    let (tx, rx) = std::sync::mpsc::channel();
    let control = ioloop::Socket {
        listener,
        kind: server::Kind::Control,
        limits: server::Limits::of(server::Kind::Control),
        secret: secret.clone(),
    };
    let style = super::output::OutputStyle {
        tag: setup.tag_output,
        timestamp: setup.timestamp_output,
        dir: (!setup.output_dir.is_empty()).then(|| setup.output_dir.clone().into()),
    };
    let io = ioloop::IoLoop::start(vec![control], tx.clone(), style)
        .map_err(|e| LauncherError::io("start the I/O loop", e))?;
    let reader = stream
        .try_clone()
        .and_then(|s| link::reader(s, frames, node, tx.clone()))
        .map_err(|e| LauncherError::io("start the link's reader", e))?;
    let upstream = Upstream::new(
        node,
        Conn::new(node, stream),
        reader,
        Duration::from_millis(u64::from(setup.heartbeat_ms.max(10))),
    );
    // PMIS-13: the namespace and map the master decided, served to this node's ranks.
    let pmix = match &setup.pmix {
        Some(p) => Some(super::pmix::start(dir.path(), p, node, tx.clone())?),
        None => None,
    };
    let spec = LaunchSpec {
        pmix,
        program: setup.program,
        args: setup.args,
        socket: sock.display().to_string(),
        secret,
        // DATA-8: derived from the key this daemon proved it holds, as the master does.
        data_key: super::data_key(&key),
        namespace: setup.namespace.clone(),
        app: setup.app.clone(),
        shm_spins: setup.shm_spins,
        // Measured here (or by an earlier runtime of this host): this host's, not the
        // master's.
        calibration: super::calibrated::host(&root).calibration,
        host_id: Some(setup.node_addr),
        // The address this host reaches the master from: routable from the other
        // hosts, whatever name the host list gave it (a Slurm node name may not resolve).
        node_addr: Some(node_ip),
        cwd: start_dir(&setup.cwd, setup.cwd_required),
        env: setup.env,
        forward_stdin: false,
        bind_cpus: super::bind_cpus(if setup.bind_core {
            super::bind::Bind::Core
        } else {
            super::bind::Bind::None
        }),
    };
    let engine = Engine::new(
        None,
        node,
        setup.job,
        Namespace::new(setup.namespace),
        setup.app,
        spec,
        OnLoss::Continue,
        tx,
        io,
    )
    .with_upstream(upstream);
    let outcome = engine.run(rx);
    super::supervisor::end_orphans();
    drop(dir);
    Ok(outcome)
}

/// RT-5: where this node's processes start: the caller's `--wdir` (required: a node
/// without it fails their launches), else the caller's directory if this host has it,
/// else the daemon's own (as mpirun does, which falls back to the home directory).
fn start_dir(cwd: &str, required: bool) -> Option<String> {
    if required || std::path::Path::new(cwd).is_dir() {
        return Some(cwd.to_string());
    }
    tracing::warn!(
        "the caller's directory {cwd} does not exist on this host: processes start in {}",
        std::env::current_dir().map_or_else(|_| "the daemon's".into(), |d| d.display().to_string())
    );
    None
}
