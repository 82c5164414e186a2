//! The TCP [`Device`].

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::auth::{self, DataKey, HandshakeError, HandshakeFailure, TcpKeys};
use super::framing::{self, FRAME_HEADER_LEN, FrameHeader, FrameKind};
use crate::addr::PeerAddrs;
use crate::device::{
    ConnId, Device, DeviceKind, FastRecv, Received, RecvHandle, RecvSpec, SendHandle,
    recv_blocking, wait_recv,
};
use crate::error::{Result, TransportError};
use crate::header::MsgHeader;
use crate::idmap::IdMap;
use crate::matching::{Matcher, Sink, Usage};

/// Tunables of the TCP device.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Where to listen (port 0: any free port).
    pub bind: SocketAddr,
    /// Largest message accepted from a peer (and sent); bounds what garbage can make us
    /// allocate.
    pub max_message: u64,
    /// Timeout for establishing a connection.
    pub connect_timeout: Duration,
    /// How long a wait spins on non-blocking reads before blocking in `poll(2)`.
    /// `None`: calibrated once per process (see [`calibrated_spin`]);
    /// `DYNRES_TCP_SPIN_US` overrides both. Zero blocks at once.
    pub spin: Option<Duration>,
    /// `SO_SNDBUF` / `SO_RCVBUF` per socket (the kernel caps them at
    /// `net.core.{w,r}mem_max`). `None` keeps the kernel's autotuning. Large enough for a
    /// 1 MiB message to be written in one call, so a send does not wait for the peer's
    /// reads chunk by chunk.
    pub socket_buffer: Option<usize>,
    /// Most bytes handed to one `write`/`writev` (`DYNRES_TCP_WRITE_CHUNK` overrides; 0:
    /// no cap). A message larger than this goes out in several calls. The kernel pushes
    /// what a call queued when the call returns, so the peer starts copying the first
    /// chunk out while we copy the next one in. Measured, not derived: on loopback a
    /// single `send` of 1 MiB or more is far slower than two halves (a raw C ping-pong:
    /// 1 MiB − 4 KiB in one call ~90 µs one-way, 1 MiB in one call ~165 µs, 1 MiB in
    /// two 512 KiB calls 108–127 µs, one session).
    pub write_chunk: usize,
    /// The keys connections authenticate with (DATA-1, DATA-4). The default
    /// (`TcpKeys::default()`) is *open*: no key, nothing authenticated (DATA-5) — for
    /// tests and benchmarks; the runtime sets the job's key.
    pub keys: TcpKeys,
    /// How long a connection may take to finish its handshake before it is closed
    /// (DATA-3), so a silent stranger cannot hold a file descriptor.
    pub handshake_timeout: Duration,
    /// Most accepted connections whose handshake is not finished; a new one beyond it
    /// pushes out the oldest (DATA-3).
    pub max_pending_handshakes: usize,
    /// Most messages one peer may have in the unexpected queue; one more closes its
    /// connection (DATA-6).
    pub max_unexpected_messages: usize,
    /// Most payload bytes one peer may have buffered in the unexpected queue; more
    /// closes its connection (DATA-6). Large messages nobody asked for wait in the
    /// socket and count only once buffered.
    pub max_unexpected_bytes: u64,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            max_message: 1 << 30,
            connect_timeout: Duration::from_secs(5),
            spin: None,
            socket_buffer: Some(4 << 20),
            write_chunk: DEFAULT_WRITE_CHUNK,
            keys: TcpKeys::default(),
            handshake_timeout: Duration::from_secs(10),
            max_pending_handshakes: 128,
            max_unexpected_messages: 1 << 16,
            max_unexpected_bytes: 256 << 20,
        }
    }
}

struct OutFrame {
    handle: Option<SendHandle>,
    head: [u8; FRAME_HEADER_LEN],
    payload: Vec<u8>,
    /// Bytes of head + payload already written.
    off: usize,
}

enum Rx {
    Header,
    Payload {
        fh: FrameHeader,
        sink: Sink,
        got: usize,
    },
}

/// Where a socket stands in the connection handshake (DATA-1).
enum Hs {
    /// Connector: HELLO sent (its payload kept for the transcript), waiting for the
    /// acceptor's CHALLENGE.
    AwaitChallenge { key: DataKey, hello: Vec<u8> },
    /// Acceptor: waiting for the connector's HELLO.
    AwaitHello,
    /// Acceptor: a well-formed HELLO names a key we do not hold yet; kept (its payload)
    /// until the key is added or the handshake's deadline passes (DATA-4): an
    /// inter-communicator's peer may finish its bootstrap, and connect, before this
    /// process has registered the connection's key.
    HeldHello(Vec<u8>),
    /// Acceptor: CHALLENGE sent, waiting for the connector's AUTH.
    AwaitAuth {
        key: DataKey,
        transcript: Vec<u8>,
        claim: SocketAddr,
    },
    /// Both sides proved the key: data flows.
    Done,
}

struct Conn {
    stream: TcpStream,
    /// The peer's listening address: the one we dialled, or the one its HELLO claimed
    /// (once its handshake ended).
    peer_listen: Option<SocketAddr>,
    out: VecDeque<OutFrame>,
    /// Received bytes not yet consumed.
    stage: Vec<u8>,
    stage_pos: usize,
    rx: Rx,
    /// Handshake payload being collected.
    control: Vec<u8>,
    /// The handshake is over: data frames may be sent and are believed (DATA-1). Until
    /// then queued data waits and a data frame from the peer closes the connection.
    /// Checking it is all authentication adds to a message (DATA-9).
    ready: bool,
    hs: Hs,
    /// We accepted this socket: a stranger until its handshake ends (DATA-3).
    incoming: bool,
    /// When the handshake must be over (DATA-3); `None` once it is.
    deadline: Option<Instant>,
    /// A large message nobody asked for yet: leave it in the kernel's socket buffer
    /// (TCP flow control is the rendezvous) until a receive is posted.
    stalled: bool,
    /// The connection this socket is a second half of. Two processes that connect to
    /// each other at the same time end up with two sockets; the one we accepted, whose
    /// HELLO names a peer we already have a connection to, delivers its messages as that
    /// connection's (each side keeps sending on its own socket, so order holds per
    /// direction), and the two live and die together.
    alias_of: Option<ConnId>,
    /// DATA-13: our CHALLENGE on this accepted socket said we had dialled its peer too.
    flagged: bool,
    /// DATA-13: a socket we dialled whose peer dialled us at the same time and has the
    /// higher-ranked socket: our messages go on the peer's socket once it is up, and
    /// this one closes ([`TcpDevice::join_halves`]). Not `ready` until then.
    redirect: bool,
    /// DATA-13: the accepted half of a simultaneous connect that the peer closes
    /// unused (it sends on ours): its end is no failure.
    redundant: bool,
    /// Bytes arrived since the spin phase of a wait last looked: a large message is
    /// still streaming in, so blocking now would only cost a wake-up.
    moved: bool,
}

impl Conn {
    /// The connection id this socket's messages are matched under.
    fn logical(&self, own: ConnId) -> ConnId {
        self.alias_of.unwrap_or(own)
    }
}

/// What is left of a closed socket of an authenticated connection until it is
/// disconnected: why it closed (later operations fail with it) — no file descriptor,
/// no buffers (DATA-3).
struct Tomb {
    err: TransportError,
    alias_of: Option<ConnId>,
}

/// A connection whose last socket closed while a second socket from the same peer may
/// still be in its handshake (DATA-13): the peer may have sent its last messages on
/// that one before it closed. Its receives fail only once no such socket can come.
struct Orphan {
    root: ConnId,
    peer: SocketAddr,
    err: TransportError,
    since: Instant,
}

/// The per-peer bounds of the unexpected queue (DATA-6).
#[derive(Clone, Copy)]
struct Limits {
    messages: usize,
    bytes: u64,
}

/// A frame of the handshake (no send handle: it is not the caller's).
fn control_frame(kind: FrameKind, payload: Vec<u8>) -> OutFrame {
    OutFrame {
        handle: None,
        head: framing::encode(&FrameHeader {
            kind,
            msg: MsgHeader {
                len: payload.len() as u64,
                ..MsgHeader::default()
            },
        }),
        payload,
        off: 0,
    }
}

/// Whether the peer of `fd` has closed its end (what it sent may still be unread).
fn peer_closing(fd: libc::c_int) -> bool {
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    }];
    // SAFETY: one valid pollfd for the duration of the call; zero timeout.
    let r = unsafe { libc::poll(p.as_mut_ptr(), 1, 0) };
    r > 0 && p[0].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// How long the listener is left alone after `accept` ran out of file descriptors
/// (DATA-7).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// At most one warning per this interval about refused connections (DATA-3); the
/// others are counted and logged at debug level.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// How long `connect` waits for the peer's own connection to us, half-way through its
/// handshake, instead of dialling a second socket (DATA-13): one round trip is enough.
const INCOMING_WAIT: Duration = Duration::from_millis(50);

/// Frames up to this size (header included) are sent from one contiguous buffer.
const SMALL_WRITE: usize = 256;

/// [`TcpConfig::write_chunk`]'s default. Of 128 KiB – 1 MiB caps, 512 KiB gave the
/// device's 1 MiB ping-pong its best median (86–89 µs against 131–140 µs uncapped and
/// 96–102 µs at 256 KiB, alternating runs of the `pingpong` bench); messages up to
/// 512 KiB are not cut at all.
pub const DEFAULT_WRITE_CHUNK: usize = 512 * 1024;

/// Writes the next part of a frame (`head` then `payload`) from byte `off` on, at most
/// `chunk` bytes in one call.
fn write_part(
    stream: &mut TcpStream,
    head: &[u8; FRAME_HEADER_LEN],
    payload: &[u8],
    off: usize,
    chunk: usize,
) -> io::Result<usize> {
    if off < FRAME_HEADER_LEN {
        let head = &head[off..];
        let body = &payload[..payload.len().min(chunk.saturating_sub(head.len()))];
        stream.write_vectored(&[IoSlice::new(head), IoSlice::new(body)])
    } else {
        let rest = &payload[off - FRAME_HEADER_LEN..];
        stream.write(&rest[..rest.len().min(chunk)])
    }
}

/// Unmatched messages above this size wait in the socket instead of being buffered.
const STALL_MIN: u64 = 64 * 1024;

/// TCP device. See the [module docs](super).
pub struct TcpDevice {
    cfg: TcpConfig,
    listener: Option<TcpListener>,
    local: SocketAddr,
    /// Open sockets.
    conns: IdMap<ConnId, Conn>,
    /// Closed sockets of authenticated connections, until disconnected.
    tombs: IdMap<ConnId, Tomb>,
    /// Connections waiting for a second socket from their peer (DATA-13).
    orphans: Vec<Orphan>,
    /// Keys of `conns`, kept in step, so `progress` (called in the spin loop) need not
    /// allocate.
    ids: Vec<ConnId>,
    by_addr: HashMap<SocketAddr, ConnId>,
    accepted: VecDeque<ConnId>,
    matcher: Matcher,
    next_conn: u64,
    next_send: u64,
    send_done: IdMap<SendHandle, Result<()>>,
    /// `poll` saw the listener readable (or we have not looked yet): try `accept`.
    listener_ready: bool,
    progress_calls: u32,
    /// Spin budget of a wait (see [`TcpConfig::spin`]).
    spin: Duration,
    /// Cap on one write call (see [`TcpConfig::write_chunk`]); `usize::MAX`: none.
    write_chunk: usize,
    limits: Limits,
    /// Sockets whose handshake is not over (both directions).
    pending: usize,
    /// The key ring's generation when held HELLOs were last looked at (DATA-4).
    keys_seen: u64,
    /// Accepted connections dropped before their handshake ended (DATA-3).
    refused: u64,
    /// When a refusal was last logged as a warning, and how many were not since.
    refusal_log: (Option<Instant>, u64),
    /// `accept` ran out of file descriptors: leave the listener until then (DATA-7).
    accept_paused: Option<Instant>,
    /// The file-descriptor shortage was logged (once per shortage).
    starved_logged: bool,
    /// Test hook: receives the fast path completed.
    #[cfg(test)]
    fast_receives: u64,
    /// Test hook: `connect` accepts first (off: a truly simultaneous connect, where
    /// the peer's socket arrives only after ours is dialled).
    #[cfg(test)]
    connect_accepts: bool,
}

const STAGE: usize = 64 * 1024;

fn io_err(what: &str) -> impl FnOnce(io::Error) -> TransportError + '_ {
    move |e| TransportError::io(what, e)
}

impl TcpDevice {
    /// Binds the listening socket.
    pub fn new(mut cfg: TcpConfig) -> Result<Self> {
        if let Some(n) = env_number::<usize>(SOCKBUF_ENV) {
            cfg.socket_buffer = (n > 0).then_some(n);
        }
        let listener = TcpListener::bind(cfg.bind)
            .map_err(|e| TransportError::io(format!("tcp bind {}", cfg.bind), e))?;
        listener
            .set_nonblocking(true)
            .map_err(io_err("tcp listener nonblocking"))?;
        let local = listener.local_addr().map_err(io_err("tcp local_addr"))?;
        if let Some(n) = cfg.socket_buffer {
            // Accepted sockets inherit the listener's buffer sizes.
            set_buffers(listener.as_raw_fd(), n)?;
        }
        let spin = env_number(SPIN_ENV)
            .map(Duration::from_micros)
            .or(cfg.spin)
            .unwrap_or_else(calibrated_spin);
        let write_chunk = match env_number(WRITE_CHUNK_ENV).unwrap_or(cfg.write_chunk) {
            0 => usize::MAX,
            n => n,
        };
        if cfg.keys.is_open() {
            tracing::debug!(%local, "tcp device has no data-plane key: connections are not authenticated");
        }
        tracing::debug!(%local, ?spin, "tcp device listening");
        Ok(Self {
            spin,
            write_chunk,
            limits: Limits {
                messages: cfg.max_unexpected_messages,
                bytes: cfg.max_unexpected_bytes,
            },
            cfg,
            listener: Some(listener),
            local,
            conns: IdMap::default(),
            tombs: IdMap::default(),
            orphans: Vec::new(),
            ids: Vec::new(),
            by_addr: HashMap::new(),
            accepted: VecDeque::new(),
            matcher: Matcher::default(),
            next_conn: 0,
            next_send: 0,
            send_done: IdMap::default(),
            listener_ready: true,
            progress_calls: 0,
            pending: 0,
            keys_seen: 0,
            refused: 0,
            refusal_log: (None, 0),
            accept_paused: None,
            starved_logged: false,
            #[cfg(test)]
            fast_receives: 0,
            #[cfg(test)]
            connect_accepts: true,
        })
    }

    /// How many accepted connections were dropped before they proved they hold the key:
    /// strangers, replays, wrong keys, second claims of an address, silent or evicted
    /// handshakes (DATA-3). Never fatal to the device.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// The device's key ring (a shared handle: keys added to it take effect for the
    /// connections set up afterwards).
    pub fn keys(&self) -> &TcpKeys {
        &self.cfg.keys
    }

    /// The listening address.
    pub fn listen_addr(&self) -> SocketAddr {
        self.local
    }

    /// Adds a socket: one we opened to `dialled` (its HELLO is queued), or one we
    /// accepted (`None`: it waits for the peer's HELLO).
    fn add_conn(&mut self, stream: TcpStream, dialled: Option<SocketAddr>) -> Result<ConnId> {
        stream.set_nodelay(true).map_err(io_err("TCP_NODELAY"))?;
        if let Some(n) = self.cfg.socket_buffer {
            set_buffers(stream.as_raw_fd(), n)?;
        }
        stream
            .set_nonblocking(true)
            .map_err(io_err("tcp nonblocking"))?;
        let mut out = VecDeque::new();
        let hs = match dialled {
            Some(addr) => {
                // DATA-4: the key of the peer we dialled names itself in the HELLO.
                let key = self.cfg.keys.for_peer(addr);
                let hello = auth::encode_hello(key.id(), &auth::nonce()?, self.local);
                out.push_back(control_frame(FrameKind::Hello, hello.clone()));
                Hs::AwaitChallenge { key, hello }
            }
            None => Hs::AwaitHello,
        };
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        self.ids.push(id);
        self.pending += 1;
        self.conns.insert(
            id,
            Conn {
                stream,
                peer_listen: dialled,
                out,
                stage: vec![0; STAGE],
                stage_pos: 0,
                rx: Rx::Header,
                control: Vec::new(),
                ready: false,
                hs,
                incoming: dialled.is_none(),
                // DATA-3: read once per connection, at set-up.
                deadline: Some(Instant::now() + self.cfg.handshake_timeout),
                stalled: false,
                alias_of: None,
                flagged: false,
                redirect: false,
                redundant: false,
                moved: false,
            },
        );
        if let Some(a) = dialled {
            self.by_addr.insert(a, id);
        }
        Ok(id)
    }

    fn conn_mut(&mut self, id: ConnId) -> Result<&mut Conn> {
        if let Some(t) = self.tombs.get(&id) {
            return Err(t.err.duplicate());
        }
        self.conns
            .get_mut(&id)
            .ok_or(TransportError::UnknownConn(id.0))
    }

    fn accept_new(&mut self) -> Result<usize> {
        if let Some(until) = self.accept_paused {
            if Instant::now() < until {
                return Ok(0);
            }
            self.accept_paused = None;
        }
        let mut n = 0;
        loop {
            let Some(l) = self.listener.as_ref() else {
                return Ok(n);
            };
            match l.accept() {
                Ok((s, from)) => {
                    self.starved_logged = false;
                    tracing::debug!(%from, "tcp connection accepted");
                    self.make_room_for_a_stranger();
                    match self.add_conn(s, None) {
                        Ok(_) => n += 1,
                        // DATA-3: a socket we cannot even set up (reset already, …)
                        // is the stranger's problem, not ours.
                        Err(e) => self.count_refusal(None, &e),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) =>
                {
                    // DATA-7: out of file descriptors (or memory). The connection waits
                    // in the kernel's backlog; try again later instead of ending.
                    self.accept_paused = Some(Instant::now() + ACCEPT_BACKOFF);
                    if !std::mem::replace(&mut self.starved_logged, true) {
                        tracing::warn!(error = %e, "tcp accept: out of resources, not accepting for {ACCEPT_BACKOFF:?}");
                    }
                    return Ok(n);
                }
                // A connection that died before we accepted it, or a network error
                // accept(2) says to treat like EAGAIN: not our problem.
                Err(e)
                    if e.kind() == io::ErrorKind::ConnectionAborted
                        || matches!(
                            e.raw_os_error(),
                            Some(
                                libc::EPROTO
                                    | libc::ENETDOWN
                                    | libc::ENOPROTOOPT
                                    | libc::EHOSTDOWN
                                    | libc::ENONET
                                    | libc::EHOSTUNREACH
                                    | libc::EOPNOTSUPP
                                    | libc::ENETUNREACH
                                    | libc::EPERM
                            )
                        ) => {}
                Err(e) => return Err(TransportError::io("tcp accept", e)),
            }
        }
    }

    /// DATA-3: at most `max_pending_handshakes` strangers at a time; the oldest goes.
    fn make_room_for_a_stranger(&mut self) {
        if self.pending < self.cfg.max_pending_handshakes {
            return;
        }
        let waiting = self.conns.iter().filter(|(_, c)| c.incoming && !c.ready);
        if waiting.clone().count() < self.cfg.max_pending_handshakes {
            return;
        }
        if let Some(oldest) = waiting.map(|(k, _)| *k).min() {
            let e = Self::refusal(oldest, HandshakeError::Evicted);
            self.refuse(oldest, e);
        }
    }

    /// DATA-4: answers the HELLOs held for a key we did not hold, once keys were added
    /// since we last looked (the generation is an atomic read, no lock); those whose
    /// key is still unknown stay held until their deadline.
    fn retry_held(&mut self) {
        let generation = self.cfg.keys.generation();
        if generation == self.keys_seen {
            return;
        }
        self.keys_seen = generation;
        let held: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.hs, Hs::HeldHello(_)))
            .map(|(k, _)| *k)
            .collect();
        for id in held {
            let c = self.conns.get_mut(&id).expect("listed");
            let Hs::HeldHello(payload) = std::mem::replace(&mut c.hs, Hs::AwaitHello) else {
                continue;
            };
            c.control = payload;
            if let Err(e) = self.handshake(id, FrameKind::Hello) {
                self.kill(id, e);
            }
        }
    }

    /// DATA-3: closes every socket whose handshake is past its deadline.
    fn expire_handshakes(&mut self) {
        let now = Instant::now();
        let late: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| now >= d))
            .map(|(k, _)| *k)
            .collect();
        for id in late {
            let c = self.conns.get_mut(&id).expect("listed");
            if c.redirect {
                // DATA-13: the peer's socket never came up; ours is authenticated and
                // nothing went out on either, so ours carries our messages after all.
                tracing::debug!(
                    conn = id.0,
                    "tcp: the peer's socket did not join; sending on ours"
                );
                c.redirect = false;
                c.ready = true;
                c.deadline = None;
                self.pending -= 1;
                continue;
            }
            let e = Self::refusal(id, HandshakeError::Deadline(self.cfg.handshake_timeout));
            self.kill(id, e);
        }
    }

    fn refusal(id: ConnId, why: HandshakeError) -> TransportError {
        TransportError::Handshake {
            conn: id.0,
            reason: HandshakeFailure::Refused(why),
        }
    }

    /// Drops an accepted socket whose handshake did not finish (DATA-3): nothing of it
    /// is kept — it was never bound to an address, never handed out by `accept`, and
    /// never had a message matched.
    fn refuse(&mut self, id: ConnId, err: TransportError) {
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        self.ids.retain(|k| *k != id);
        self.pending -= 1;
        let from = c.stream.peer_addr().ok();
        // Dropping the stream closes the descriptor.
        drop(c);
        self.count_refusal(from, &err);
    }

    /// Counts a refused stranger and logs it, as a warning at most once per
    /// [`REFUSAL_LOG_EVERY`].
    fn count_refusal(&mut self, from: Option<SocketAddr>, err: &TransportError) {
        self.refused += 1;
        let now = Instant::now();
        let (last, quiet) = &mut self.refusal_log;
        if last.is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_EVERY) {
            tracing::warn!(from = ?from, error = %err, refused = self.refused, not_logged = *quiet, "tcp: refused a connection that did not authenticate");
            *last = Some(now);
            *quiet = 0;
        } else {
            *quiet += 1;
            tracing::debug!(from = ?from, error = %err, "tcp: refused a connection that did not authenticate");
        }
    }

    /// The connection `id`'s messages are matched under (its own id, or the first
    /// socket's of a simultaneous connect), open or closed.
    fn root_of(&self, id: ConnId) -> Option<ConnId> {
        match self.conns.get(&id) {
            Some(c) => Some(c.logical(id)),
            None => self.tombs.get(&id).map(|t| t.alias_of.unwrap_or(id)),
        }
    }

    /// Closes a socket after a peer failure or close. Receives waiting on its
    /// connection fail once no socket of the connection is left: the other half of a
    /// simultaneous connect may still hold messages the peer sent before it closed.
    /// A stranger's socket is refused instead (DATA-3).
    fn kill(&mut self, id: ConnId, err: TransportError) {
        if self.conns.get(&id).is_some_and(|c| c.incoming && !c.ready) {
            self.refuse(id, err);
            return;
        }
        if self.conns.get(&id).is_some_and(|c| c.redundant) {
            // DATA-13: the peer closed the half it never sends on: nothing is lost.
            let c = self.conns.remove(&id).expect("checked");
            self.ids.retain(|k| *k != id);
            if let Rx::Payload { sink, .. } = c.rx {
                self.matcher.abort(sink, &err);
            }
            tracing::debug!(
                conn = id.0,
                "tcp: unused half of a simultaneous connect closed"
            );
            return;
        }
        let peer = self.conns.get(&id).and_then(|c| c.peer_listen);
        self.kill_socket(id, err.duplicate());
        let Some(root) = self.root_of(id) else {
            return;
        };
        if self.live_socket(root).is_none() {
            if let Some(peer) = peer {
                // DATA-13: the peer's own socket to us may be in the listener's queue
                // or mid-handshake, holding what it sent last.
                let _ = self.accept_new();
                let now = Instant::now();
                if self.half_may_come(peer, now, now) {
                    self.orphans.push(Orphan {
                        root,
                        peer,
                        err,
                        since: now,
                    });
                    return;
                }
            }
            self.matcher.fail_conn(root, &err);
        }
    }

    /// Whether a socket in its handshake may still turn out to be `peer`'s (DATA-13):
    /// one whose HELLO claimed `peer`, or, until `since` plus [`INCOMING_WAIT`], one
    /// whose HELLO is not read yet.
    fn half_may_come(&self, peer: SocketAddr, since: Instant, now: Instant) -> bool {
        self.conns.values().any(|c| {
            c.incoming
                && !c.ready
                && match &c.hs {
                    Hs::AwaitAuth { claim, .. } => *claim == peer,
                    Hs::HeldHello(hello) => auth::parse_hello(hello).is_ok_and(|h| h.addr == peer),
                    Hs::AwaitHello => now < since + INCOMING_WAIT,
                    _ => false,
                }
        })
    }

    /// Orphans whose second socket can no longer come fail their receives now.
    fn settle_orphans(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.orphans.len() {
            let o = &self.orphans[i];
            if self.half_may_come(o.peer, o.since, now) {
                i += 1;
                continue;
            }
            let o = self.orphans.swap_remove(i);
            if self.live_socket(o.root).is_none() {
                self.matcher.fail_conn(o.root, &o.err);
            }
        }
    }

    /// A socket of `root`'s connection that is still open, if any.
    fn live_socket(&self, root: ConnId) -> Option<ConnId> {
        self.conns
            .iter()
            .find(|(k, c)| **k == root || c.alias_of == Some(root))
            .map(|(k, _)| *k)
    }

    /// Closes an open socket, keeping only why (a [`Tomb`]).
    fn kill_socket(&mut self, id: ConnId, err: TransportError) {
        let Some(mut c) = self.conns.remove(&id) else {
            return;
        };
        self.ids.retain(|k| *k != id);
        if !c.ready {
            self.pending -= 1;
        }
        tracing::info!(conn = id.0, error = %err, "tcp connection closed");
        // Best effort: the socket may already be gone. Dropping `c` closes it.
        let _ = c.stream.shutdown(Shutdown::Both);
        if let Rx::Payload { sink, .. } = std::mem::replace(&mut c.rx, Rx::Header) {
            self.matcher.abort(sink, &err);
        }
        for f in c.out.drain(..) {
            if let Some(h) = f.handle {
                self.send_done.insert(h, Err(err.duplicate()));
            }
        }
        if let Some(a) = c.peer_listen {
            if self.by_addr.get(&a) == Some(&id) {
                self.by_addr.remove(&a);
            }
        }
        let alias_of = c.alias_of;
        self.tombs.insert(id, Tomb { err, alias_of });
    }

    /// Writes queued frames; returns frames completed, or the error that kills the conn.
    fn flush(
        c: &mut Conn,
        done: &mut IdMap<SendHandle, Result<()>>,
        conn: ConnId,
        chunk: usize,
    ) -> Result<usize> {
        let mut n = 0;
        while let Some(f) = c.out.front_mut() {
            // DATA-1: the caller's frames wait for the handshake; its own go first.
            if !c.ready && f.handle.is_some() {
                return Ok(n);
            }
            let total = FRAME_HEADER_LEN + f.payload.len();
            while f.off < total {
                let r = write_part(&mut c.stream, &f.head, &f.payload, f.off, chunk);
                match r {
                    Ok(0) => {
                        return Err(TransportError::PeerClosed {
                            conn: conn.0,
                            mid_message: f.off > 0,
                        });
                    }
                    Ok(k) => f.off += k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(classify(conn, e, f.off > 0)),
                }
            }
            let f = c.out.pop_front().expect("front exists");
            if let Some(h) = f.handle {
                done.insert(h, Ok(()));
            }
            n += 1;
        }
        Ok(n)
    }

    /// Reads and parses everything available on one connection.
    fn read_conn(&mut self, id: ConnId) -> Result<usize, TransportError> {
        let (max, limits) = (self.cfg.max_message, self.limits);
        let mut events = 0;
        // A short read means the socket is drained: stop instead of paying for one more
        // read that would only say EAGAIN (poll is level-triggered, nothing is lost).
        let mut drained = false;
        loop {
            let Some(c) = self.conns.get_mut(&id) else {
                return Ok(events);
            };
            // 1. Consume staged bytes.
            let (n, control) = consume(c, &mut self.matcher, id, max, limits)?;
            events += n;
            if let Some(kind) = control {
                // A handshake frame is complete: its step needs the whole device.
                self.handshake(id, kind)?;
                events += 1;
                continue;
            }
            if drained {
                return Ok(events);
            }
            if let Rx::Payload { fh, sink, .. } = &c.rx {
                if fh.kind == FrameKind::Data
                    && fh.msg.len > STALL_MIN
                    && self.matcher.posted_window(*sink).is_none()
                    && matches!(sink, Sink::Unexpected(_))
                    && !self.matcher.has_posted_for(c.logical(id))
                {
                    c.stalled = true;
                    return Ok(events);
                }
            }
            // 2. Fast path: a posted buffer waits for the rest of this payload.
            if let Rx::Payload { fh, sink, got } = &mut c.rx {
                let len = fh.msg.len as usize;
                if let Some(win) = self.matcher.posted_window(*sink) {
                    if c.stage_pos == 0 && len - *got >= 4096 {
                        match c.stream.read(&mut win[*got..len]) {
                            Ok(0) => {
                                return Err(TransportError::PeerClosed {
                                    conn: id.0,
                                    mid_message: true,
                                });
                            }
                            Ok(k) => {
                                // Large direct reads go on until EAGAIN.
                                c.moved = true;
                                *got += k;
                                if *got == len {
                                    self.matcher.finish(*sink);
                                    c.rx = Rx::Header;
                                    events += 1;
                                }
                                continue;
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(events),
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            Err(e) => return Err(classify(id, e, true)),
                        }
                    }
                }
            }
            // 3. Stage more bytes.
            let pos = c.stage_pos;
            match c.stream.read(&mut c.stage[pos..]) {
                Ok(0) => {
                    let mid = c.stage_pos > 0 || !matches!(c.rx, Rx::Header);
                    return Err(TransportError::PeerClosed {
                        conn: id.0,
                        mid_message: mid,
                    });
                }
                Ok(k) => {
                    c.moved = true;
                    drained = pos + k < STAGE;
                    c.stage_pos += k;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(events),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let mid = c.stage_pos > 0 || !matches!(c.rx, Rx::Header);
                    return Err(classify(id, e, mid));
                }
            }
        }
    }

    /// One step of the connection handshake (DATA-1): a complete HELLO, CHALLENGE or
    /// AUTH arrived on `id`, its payload in `control`. An error closes the socket.
    fn handshake(&mut self, id: ConnId, kind: FrameKind) -> Result<()> {
        let refused = |why| TransportError::Handshake {
            conn: id.0,
            reason: HandshakeFailure::Refused(why),
        };
        let malformed = |e| TransportError::Handshake {
            conn: id.0,
            reason: HandshakeFailure::Malformed(e),
        };
        let c = self.conns.get_mut(&id).expect("the caller read from it");
        let payload = std::mem::take(&mut c.control);
        match (std::mem::replace(&mut c.hs, Hs::Done), kind) {
            (Hs::AwaitHello, FrameKind::Hello) => {
                let hello = auth::parse_hello(&payload)
                    .map_err(|reason| TransportError::Handshake { conn: id.0, reason })?;
                let Some(key) = self.cfg.keys.lookup(hello.key) else {
                    // DATA-4: perhaps a key we are about to add; the deadline (DATA-3)
                    // bounds the wait, and the pending bound what a stranger holds.
                    tracing::debug!(conn = id.0, key = %hello.key, "tcp HELLO for a key not held (yet)");
                    self.conns.get_mut(&id).expect("still there").hs = Hs::HeldHello(payload);
                    return Ok(());
                };
                // DATA-4: a key authenticates only the addresses it is for.
                if self.cfg.keys.for_peer(hello.addr).id() != key.id() {
                    return Err(refused(HandshakeError::WrongKeyForAddress {
                        key: key.id(),
                        addr: hello.addr,
                    }));
                }
                // DATA-1: a fresh nonce of ours in the transcript, so no recorded AUTH
                // answers this CHALLENGE.
                let nonce = auth::nonce()?;
                // DATA-13: say whether we dialled the connector too (a simultaneous
                // connect), so the two sockets become one.
                let dialled_too = self.dialled_unhalved(hello.addr).is_some();
                let transcript = auth::transcript(&payload, self.local, &nonce, dialled_too);
                let mut body = nonce.to_vec();
                body.extend_from_slice(&auth::acceptor_tag(&key, &transcript));
                body.push(u8::from(dialled_too));
                let c = self.conns.get_mut(&id).expect("still there");
                c.flagged = dialled_too;
                c.out.push_back(control_frame(FrameKind::Challenge, body));
                c.hs = Hs::AwaitAuth {
                    key,
                    transcript,
                    claim: hello.addr,
                };
            }
            (Hs::AwaitChallenge { key, hello }, FrameKind::Challenge) => {
                let (nonce, tag, dialled_too) =
                    auth::parse_challenge(&payload).map_err(malformed)?;
                let dialled = c.peer_listen.expect("a connector knows whom it dialled");
                let t = auth::transcript(&hello, dialled, &nonce, dialled_too);
                // DATA-1: the acceptor proves the key first; we answer nobody else.
                if !auth::verify_acceptor(&key, &t, &tag) {
                    return Err(refused(HandshakeError::BadTag));
                }
                // Our queued data waited behind the HELLO (flush holds the caller's
                // frames until `ready`): nothing of it is written yet, so AUTH goes first.
                debug_assert!(c.out.front().is_none_or(|f| f.off == 0));
                let tag = auth::connector_tag(&key, &t);
                c.out
                    .push_front(control_frame(FrameKind::Auth, tag.to_vec()));
                // DATA-13: the peer dialled us too; the socket dialled by the lower
                // listening address carries both directions, so above it ours waits.
                c.redirect = dialled_too && self.local > dialled;
                self.established(id);
                self.join_halves(id);
            }
            (
                Hs::AwaitAuth {
                    key,
                    transcript,
                    claim,
                },
                FrameKind::Auth,
            ) => {
                let tag = auth::parse_auth(&payload).map_err(malformed)?;
                if !auth::verify_connector(&key, &transcript, &tag) {
                    return Err(refused(HandshakeError::BadTag));
                }
                self.claim(id, claim).map_err(refused)?;
                self.established(id);
                self.accepted.push_back(id);
                // DATA-13: the second half of a simultaneous connect. Below the peer's
                // listening address it stays unused (the peer sends on our socket); above
                // it, it becomes our connection's socket.
                let c = self.conns.get_mut(&id).expect("still there");
                if let Some(owner) = c.alias_of {
                    if c.flagged && self.local < claim {
                        c.redundant = true;
                    }
                    self.join_halves(owner);
                    if !self.conns.contains_key(&id) {
                        // Joined: `owner` now writes on this socket what it queued.
                        let o = self.conns.get_mut(&owner).expect("joined into it");
                        Self::flush(o, &mut self.send_done, owner, self.write_chunk)?;
                        return Ok(());
                    }
                }
            }
            (_, kind) => return Err(refused(HandshakeError::OutOfOrder(kind.name()))),
        }
        let c = self.conns.get_mut(&id).expect("still there");
        Self::flush(c, &mut self.send_done, id, self.write_chunk)?;
        Ok(())
    }

    /// The handshake of `id` is over: data may flow (DATA-1).
    fn established(&mut self, id: ConnId) {
        let c = self.conns.get_mut(&id).expect("caller holds it");
        c.hs = Hs::Done;
        if c.redirect {
            // DATA-13: still pending (and under its deadline) until the peer's socket
            // joins it, or it gives up waiting and carries our messages itself.
            tracing::debug!(conn = id.0, peer = ?c.peer_listen, "tcp connection authenticated; waits for the peer's socket");
            return;
        }
        c.ready = true;
        c.deadline = None;
        self.pending -= 1;
        tracing::debug!(conn = id.0, peer = ?c.peer_listen, incoming = c.incoming, "tcp connection authenticated");
    }

    /// Our own dialled connection to `addr` that no accepted socket has joined yet: the
    /// one a simultaneous connect's second socket joins (DATA-2, DATA-13).
    fn dialled_unhalved(&self, addr: SocketAddr) -> Option<ConnId> {
        let owner = *self.by_addr.get(&addr)?;
        let o = self.conns.get(&owner)?;
        let halved = self.conns.values().any(|c| c.alias_of == Some(owner));
        (!o.incoming && !halved).then_some(owner)
    }

    /// DATA-13: our dialled socket `owner` waits (`redirect`) for the peer's socket of a
    /// simultaneous connect. Once that one is authenticated and our AUTH is written, the
    /// peer's socket becomes `owner`'s socket for both directions (its staged bytes and
    /// half-read frame with it) and ours closes: it carried the handshake only, as the
    /// peer sends nothing on it. One socket per peer, and every message of both
    /// directions on it in order.
    fn join_halves(&mut self, owner: ConnId) {
        let Some(o) = self.conns.get(&owner) else {
            return;
        };
        // Our AUTH must be out on our socket first: the peer completes its side of it.
        if !o.redirect || !matches!(o.hs, Hs::Done) || o.out.iter().any(|f| f.handle.is_none()) {
            return;
        }
        let Some(half) = self
            .conns
            .iter()
            .find(|(_, c)| c.alias_of == Some(owner) && c.ready && c.out.is_empty())
            .map(|(k, _)| *k)
        else {
            return;
        };
        let h = self.conns.remove(&half).expect("found");
        self.ids.retain(|k| *k != half);
        self.accepted.retain(|k| *k != half);
        let o = self.conns.get_mut(&owner).expect("checked");
        // Dropping our old stream closes it.
        drop(std::mem::replace(&mut o.stream, h.stream));
        o.stage = h.stage;
        o.stage_pos = h.stage_pos;
        o.rx = h.rx;
        o.moved = h.moved;
        o.stalled = h.stalled;
        o.redirect = false;
        o.ready = true;
        o.deadline = None;
        self.pending -= 1;
        tracing::debug!(
            conn = owner.0,
            socket_of = half.0,
            "simultaneous connect: one socket for both directions"
        );
    }

    /// DATA-2: an authenticated connector claims `addr`. It gets the address if nobody
    /// holds it; it becomes the second socket of our own connection to `addr` when we
    /// dialled it at the same time (simultaneous connect: each side's socket to the
    /// other is half of one connection); it replaces a connection whose peer has
    /// closed (it reconnects). Any other claim of a held address is refused.
    fn claim(&mut self, id: ConnId, addr: SocketAddr) -> Result<(), HandshakeError> {
        if let Some(k) = self.orphans.iter().position(|o| o.peer == addr) {
            if !self.by_addr.contains_key(&addr) {
                // DATA-13: the second socket of a connection whose first closed: what
                // it brings is that connection's.
                let root = self.orphans.swap_remove(k).root;
                let c = self.conns.get_mut(&id).expect("caller holds it");
                c.alias_of = Some(root);
                c.peer_listen = Some(addr);
                return Ok(());
            }
        }
        let held = self
            .by_addr
            .get(&addr)
            .and_then(|o| Some((*o, self.conns.get(o)?)));
        if let Some((owner, o)) = held {
            if self.dialled_unhalved(addr).is_some() {
                tracing::debug!(%addr, conn = id.0, of = owner.0, "simultaneous connect: second socket joins the first");
                self.conns.get_mut(&id).expect("caller holds it").alias_of = Some(owner);
            } else if peer_closing(o.stream.as_raw_fd()) {
                self.by_addr.insert(addr, id);
            } else {
                return Err(HandshakeError::AddressClaimed(addr));
            }
        } else {
            self.by_addr.insert(addr, id);
        }
        self.conns
            .get_mut(&id)
            .expect("caller holds it")
            .peer_listen = Some(addr);
        Ok(())
    }

    /// Polls the listener and all sockets for at most `timeout`.
    fn poll(&mut self, mut timeout: Duration) -> Result<()> {
        if self.pending > 0 {
            self.expire_handshakes();
            self.retry_held();
        }
        let mut fds = Vec::with_capacity(self.conns.len() + 1);
        let mut listening = false;
        if let Some(l) = &self.listener {
            // DATA-7: a listener we may not accept from would wake every poll at once.
            let paused = self
                .accept_paused
                .map(|t| t.saturating_duration_since(Instant::now()));
            match paused {
                Some(left) if !left.is_zero() => {
                    timeout = timeout.min(left);
                    // Look again once the pause is over.
                    self.listener_ready = true;
                }
                _ => {
                    listening = true;
                    fds.push(libc::pollfd {
                        fd: l.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    });
                }
            }
        }
        for c in self.conns.values() {
            // A stalled connection is readable by design; only its writes matter.
            let mut events = if c.stalled { 0 } else { libc::POLLIN };
            if !c.out.is_empty() {
                events |= libc::POLLOUT;
            }
            if events == 0 {
                continue;
            }
            fds.push(libc::pollfd {
                fd: c.stream.as_raw_fd(),
                events,
                revents: 0,
            });
        }
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if listening && fds[0].revents & libc::POLLIN != 0 {
            self.listener_ready = true;
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(TransportError::io("poll", e));
            }
        }
        Ok(())
    }
}

/// One idle turn of a spinning read: true once no byte has arrived for `budget` (the
/// clock is read every 4th turn: a non-blocking read costs far more than the loop).
fn spun_out(turn: &mut u32, idle: &mut Option<Instant>, budget: Duration) -> bool {
    *turn = turn.wrapping_add(1);
    if *turn % 4 == 0 {
        let now = Instant::now();
        if now.duration_since(*idle.get_or_insert(now)) >= budget {
            return true;
        }
    }
    std::hint::spin_loop();
    false
}

/// Sets both socket buffer sizes of `fd` to `bytes`.
fn set_buffers(fd: libc::c_int, bytes: usize) -> Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: `fd` is an open socket owned by the caller; `v` outlives the call and
        // the length passed is its size.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(TransportError::io(
                "tcp socket buffer size",
                io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

/// Environment override of the spin budget, in microseconds.
pub const SPIN_ENV: &str = "DYNRES_TCP_SPIN_US";

/// Environment override of [`TcpConfig::socket_buffer`], in bytes (0: the kernel's
/// autotuning), for measuring the trade-off.
pub const SOCKBUF_ENV: &str = "DYNRES_TCP_SOCKBUF";

/// Environment override of [`TcpConfig::write_chunk`], in bytes (0: no cap).
pub const WRITE_CHUNK_ENV: &str = "DYNRES_TCP_WRITE_CHUNK";

/// A number from the environment (`None`: unset or not a number).
fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The spin budget used when [`TcpConfig::spin`] is `None`: 8 × the cost of one
/// block-in-`poll` + wake-up, measured once per process by a two-thread ping-pong over
/// a socket pair, clamped to 20–200 µs.
///
/// Why a multiple and not the bare cost (the shared-memory rule): over a socket the
/// gap between a request and its answer is a round trip through the kernel on both
/// sides, several wake-up costs long; spinning for only one would block on nearly
/// every message and keep the wake-up this spin exists to avoid. The cap bounds the
/// CPU burnt when the peer is really idle.
pub fn calibrated_spin() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        let cost = measure_wake_cost().unwrap_or(Duration::from_micros(10));
        let spin = (cost * 8).clamp(Duration::from_micros(20), Duration::from_micros(200));
        tracing::debug!(?cost, ?spin, "tcp spin budget calibrated");
        spin
    })
}

/// Median half round trip of a blocking `poll` ping-pong between two threads.
fn measure_wake_cost() -> Option<Duration> {
    use std::os::unix::net::UnixStream;
    fn wait_read(s: &mut UnixStream) -> io::Result<()> {
        let mut fd = [libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid pollfd for the duration of the call.
        if unsafe { libc::poll(fd.as_mut_ptr(), 1, 1000) } <= 0 {
            return Err(io::Error::other("calibration peer silent"));
        }
        let mut b = [0u8; 1];
        s.read_exact(&mut b)
    }
    const N: usize = 64;
    let (mut a, mut b) = UnixStream::pair().ok()?;
    let echo = std::thread::spawn(move || -> io::Result<()> {
        for _ in 0..N {
            wait_read(&mut b)?;
            b.write_all(&[1])?;
        }
        Ok(())
    });
    let mut samples = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        if a.write_all(&[1]).and_then(|()| wait_read(&mut a)).is_err() {
            break;
        }
        samples.push(t.elapsed() / 2);
    }
    let ok = echo.join().ok()?.is_ok();
    if !ok || samples.len() < N {
        return None;
    }
    samples.sort();
    Some(samples[N / 2])
}

fn classify(conn: ConnId, e: io::Error, mid_message: bool) -> TransportError {
    match e.kind() {
        io::ErrorKind::ConnectionReset => TransportError::ConnectionReset { conn: conn.0 },
        io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::UnexpectedEof => TransportError::PeerClosed {
            conn: conn.0,
            mid_message,
        },
        _ => TransportError::io(format!("tcp connection {}", conn.0), e),
    }
}

/// Parses frames out of the staged bytes of one connection. Stops after a complete
/// handshake frame (its payload in `c.control`) and returns its kind: the handshake
/// step needs the whole device, and what follows may depend on it.
fn consume(
    c: &mut Conn,
    matcher: &mut Matcher,
    id: ConnId,
    max: u64,
    limits: Limits,
) -> Result<(usize, Option<FrameKind>)> {
    let mut events = 0;
    let mut at = 0;
    let mut control = None;
    let malformed = |source| TransportError::Malformed { conn: id.0, source };
    // DATA-6: this peer has more in the unexpected queue than we keep for one peer.
    let over = |u: Usage| u.messages > limits.messages || u.bytes > limits.bytes;
    let cut_off = || TransportError::UnexpectedLimit {
        conn: id.0,
        messages: limits.messages,
        bytes: limits.bytes,
    };
    while at < c.stage_pos && control.is_none() {
        match &mut c.rx {
            Rx::Header => {
                let Some(fh) =
                    framing::parse_header(&c.stage[at..c.stage_pos], max).map_err(malformed)?
                else {
                    break;
                };
                at += FRAME_HEADER_LEN;
                match fh.kind {
                    // DATA-1: nothing a peer says is believed before its handshake.
                    FrameKind::Data if !c.ready => {
                        return Err(TransportError::Handshake {
                            conn: id.0,
                            reason: HandshakeFailure::Refused(HandshakeError::OutOfOrder("DATA")),
                        });
                    }
                    FrameKind::Data => {
                        let logical = c.logical(id);
                        let sink = matcher.incoming(logical, fh.msg);
                        if matches!(sink, Sink::Unexpected(_)) && over(matcher.usage(logical)) {
                            return Err(cut_off());
                        }
                        if fh.msg.len == 0 {
                            matcher.finish(sink);
                            events += 1;
                        } else {
                            c.rx = Rx::Payload { fh, sink, got: 0 };
                        }
                    }
                    kind => {
                        c.control.clear();
                        if fh.msg.len == 0 {
                            // Nothing to collect (and no staged byte may follow).
                            control = Some(kind);
                        } else {
                            c.rx = Rx::Payload {
                                fh,
                                sink: Sink::Discard,
                                got: 0,
                            };
                        }
                    }
                }
            }
            Rx::Payload { fh, sink, got } => {
                let len = fh.msg.len as usize;
                let k = (len - *got).min(c.stage_pos - at);
                let bytes = &c.stage[at..at + k];
                if fh.kind != FrameKind::Data {
                    c.control.extend_from_slice(bytes);
                } else if let Some(win) = matcher.posted_window(*sink) {
                    win[*got..*got + k].copy_from_slice(bytes);
                } else {
                    matcher.append(*sink, *got, bytes);
                    if matches!(sink, Sink::Unexpected(_))
                        && over(matcher.usage(c.alias_of.unwrap_or(id)))
                    {
                        return Err(cut_off());
                    }
                }
                *got += k;
                at += k;
                if *got == len {
                    if fh.kind == FrameKind::Data {
                        matcher.finish(*sink);
                        events += 1;
                    } else {
                        control = Some(fh.kind);
                    }
                    c.rx = Rx::Header;
                }
            }
        }
    }
    c.stage.copy_within(at..c.stage_pos, 0);
    c.stage_pos -= at;
    Ok((events, control))
}

impl Device for TcpDevice {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Tcp
    }

    fn local_address(&self, into: &mut PeerAddrs) {
        into.tcp = Some(self.local);
    }

    fn reaches(&self, peer: &PeerAddrs) -> bool {
        peer.tcp.is_some()
    }

    fn connect(&mut self, peer: &PeerAddrs) -> Result<ConnId> {
        let addr = peer.tcp.ok_or_else(|| TransportError::BadAddress {
            kind: DeviceKind::Tcp,
            reason: "peer has no TCP address".into(),
        })?;
        if self.listener.is_none() {
            return Err(TransportError::Finalized);
        }
        // Pick up connections and HELLOs already received, so an accepted connection is
        // reused: `progress` alone accepts only when a wait saw the listener readable.
        #[cfg(test)]
        let accepts = self.connect_accepts;
        #[cfg(not(test))]
        let accepts = true;
        if accepts {
            self.accept_new()?;
        }
        self.progress()?;
        // The peer is connecting to us right now (its HELLO is in, its AUTH one round
        // trip away): wait for that socket rather than dial a second one (DATA-13). A
        // stranger's HELLO may claim the address too: the wait is short and bounded.
        let since = Instant::now();
        while !self.by_addr.contains_key(&addr)
            && since.elapsed() < INCOMING_WAIT
            && (self.conns.values())
                .any(|c| matches!(c.hs, Hs::AwaitAuth { claim, .. } if claim == addr))
        {
            self.progress()?;
            // The peer needs a core to answer: on a host with more processes than
            // cores, this one gives way meanwhile.
            std::thread::yield_now();
        }
        if let Some(id) = self.by_addr.get(&addr) {
            return Ok(*id);
        }
        let s = TcpStream::connect_timeout(&addr, self.cfg.connect_timeout)
            .map_err(|e| TransportError::io(format!("tcp connect {addr}"), e))?;
        let id = self.add_conn(s, Some(addr))?;
        tracing::debug!(%addr, conn = id.0, "tcp connection opened");
        let c = self.conns.get_mut(&id).expect("just added");
        if let Err(e) = Self::flush(c, &mut self.send_done, id, self.write_chunk) {
            self.kill(id, e.duplicate());
            return Err(e);
        }
        Ok(id)
    }

    fn accept(&mut self) -> Result<Option<ConnId>> {
        self.accept_new()?;
        Ok(self.accepted.pop_front())
    }

    fn isend(&mut self, conn: ConnId, header: MsgHeader, payload: Vec<u8>) -> Result<SendHandle> {
        let max = self.cfg.max_message.min(u64::from(u32::MAX));
        if payload.len() as u64 > max {
            return Err(TransportError::TooLarge {
                len: payload.len() as u64,
                max,
            });
        }
        self.next_send += 1;
        let handle = SendHandle(self.next_send);
        let head = framing::encode(&FrameHeader {
            kind: FrameKind::Data,
            msg: MsgHeader {
                len: payload.len() as u64,
                ..header
            },
        });
        let c = self.conn_mut(conn)?;
        c.out.push_back(OutFrame {
            handle: Some(handle),
            head,
            payload,
            off: 0,
        });
        let c = self.conns.get_mut(&conn).expect("checked");
        if let Err(e) = Self::flush(c, &mut self.send_done, conn, self.write_chunk) {
            self.kill(conn, e);
        }
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
        let max = self.cfg.max_message.min(u64::from(u32::MAX));
        if payload.len() as u64 > max {
            return Err(TransportError::TooLarge {
                len: payload.len() as u64,
                max,
            });
        }
        // The clock is read only once the socket is full: a send that goes out at once
        // (every small message) costs no clock read (issue 15, TCP 1 B latency).
        let mut deadline: Option<Instant> = None;
        let head = framing::encode(&FrameHeader {
            kind: FrameKind::Data,
            msg: MsgHeader {
                len: payload.len() as u64,
                ..header
            },
        });
        let total = FRAME_HEADER_LEN + payload.len();
        let mut off = 0;
        loop {
            self.conn_mut(conn)?;
            let c = self.conns.get_mut(&conn).expect("checked");
            if !c.out.is_empty() {
                if let Err(e) = Self::flush(c, &mut self.send_done, conn, self.write_chunk) {
                    self.kill(conn, e.duplicate());
                    return Err(e);
                }
            }
            let c = self.conns.get_mut(&conn).expect("checked");
            // DATA-1: nothing of ours goes out before the handshake is over (DATA-9:
            // the one check a message pays for it).
            if c.out.is_empty() && c.ready {
                // Write straight from the caller's buffer: no intermediate copy — except
                // that a small message goes out as one contiguous write (cheaper for the
                // kernel than a two-element writev).
                let mut small = [0u8; SMALL_WRITE];
                let joined = (off == 0 && total <= SMALL_WRITE).then(|| {
                    small[..FRAME_HEADER_LEN].copy_from_slice(&head);
                    small[FRAME_HEADER_LEN..total].copy_from_slice(payload);
                    &small[..total]
                });
                while off < total {
                    let r = if let Some(buf) = joined {
                        c.stream.write(&buf[off..])
                    } else {
                        write_part(&mut c.stream, &head, payload, off, self.write_chunk)
                    };
                    match r {
                        Ok(0) => {
                            let e = TransportError::PeerClosed {
                                conn: conn.0,
                                mid_message: off > 0,
                            };
                            self.kill(conn, e.duplicate());
                            return Err(e);
                        }
                        Ok(k) => off += k,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            let e = classify(conn, e, off > 0);
                            self.kill(conn, e.duplicate());
                            return Err(e);
                        }
                    }
                }
                if off == total {
                    return Ok(());
                }
            }
            // Keep reading meanwhile: the peer may be blocked writing to us (or its
            // CHALLENGE may be what we wait for).
            self.progress()?;
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + timeout);
            if now >= deadline {
                return Err(TransportError::Timeout(timeout, "socket space for a send"));
            }
            self.poll_for_write(conn, (deadline - now).min(Duration::from_millis(50)))?;
        }
    }

    fn post_recv(&mut self, spec: RecvSpec, buf: Vec<u8>) -> Result<RecvHandle> {
        if let Some(c) = spec.conn {
            if let Err(e) = self.conn_mut(c) {
                // What the peer sent before it closed can still be received, and the
                // other half of a simultaneous connect may still deliver.
                let open =
                    self.live_socket(c).is_some() || self.orphans.iter().any(|o| o.root == c);
                if !open && self.matcher.probe(&spec).is_none() {
                    return Err(e);
                }
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
            FastRecv::Posted(h) => wait_recv(self, h, timeout),
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
        // `accept` costs a syscall that almost always says EAGAIN: only try when poll
        // saw the listener readable, and every 1024th call for busy loops that never
        // poll (a spinning wait calls progress every microsecond or so: a connecting
        // peer waits about a millisecond at most, and a small message does not pay for
        // an `accept` every few round trips).
        self.progress_calls = self.progress_calls.wrapping_add(1);
        let mut events = 0;
        if self.listener_ready || self.progress_calls % 1024 == 0 {
            self.listener_ready = false;
            events += self.accept_new()?;
            // DATA-3: only while handshakes are pending, so data costs no clock read.
            if self.pending > 0 {
                self.expire_handshakes();
            }
        }
        if self.pending > 0 {
            self.retry_held();
        }
        // A socket that fails is removed from `ids` (and only that one): the next one
        // then sits at the same index.
        let mut i = 0;
        while let Some(&id) = self.ids.get(i) {
            let c = self.conns.get_mut(&id).expect("ids mirror conns");
            let mut failed = None;
            if !c.out.is_empty() {
                match Self::flush(c, &mut self.send_done, id, self.write_chunk) {
                    Ok(n) => events += n,
                    Err(e) => failed = Some(e),
                }
            }
            if failed.is_none() {
                match self.read_conn(id) {
                    Ok(n) => events += n,
                    Err(e) => failed = Some(e),
                }
            }
            if let Some(e) = failed {
                self.kill(id, e);
                events += 1;
            }
            if self.ids.get(i) == Some(&id) {
                i += 1;
            }
        }
        if !self.orphans.is_empty() {
            self.settle_orphans();
        }
        if self.pending > 0 {
            // DATA-13: a half waiting for our AUTH to go out, or for the peer's socket.
            let waiting: Vec<ConnId> = (self.conns.iter())
                .filter(|(_, c)| c.redirect)
                .map(|(k, _)| *k)
                .collect();
            for id in waiting {
                self.join_halves(id);
            }
        }
        Ok(events)
    }

    /// Spins on non-blocking reads for the spin budget (restarted whenever bytes
    /// arrive), then blocks in `poll(2)`: a message that arrives within the spin costs
    /// no wake-up, which is most of a small message's latency.
    fn wait_activity(&mut self, timeout: Duration) -> Result<()> {
        if self.spin_phase(timeout)? {
            return Ok(());
        }
        self.poll(timeout)
    }

    fn disconnect(&mut self, conn: ConnId) -> Result<()> {
        if !self.conns.contains_key(&conn) && !self.tombs.contains_key(&conn) {
            return Err(TransportError::UnknownConn(conn.0));
        }
        // The second socket of a simultaneous connect goes with its connection.
        let halves: Vec<ConnId> = self
            .conns
            .iter()
            .map(|(k, c)| (k, c.alias_of))
            .chain(self.tombs.iter().map(|(k, t)| (k, t.alias_of)))
            .filter(|(_, a)| *a == Some(conn))
            .map(|(k, _)| *k)
            .collect();
        for k in halves {
            self.close_socket(k);
        }
        self.close_socket(conn);
        self.orphans.retain(|o| o.root != conn);
        Ok(())
    }

    fn finalize(&mut self) -> Result<()> {
        let ids: Vec<ConnId> = self
            .conns
            .keys()
            .chain(self.tombs.keys())
            .copied()
            .collect();
        for id in ids {
            self.close_socket(id);
        }
        self.listener = None;
        Ok(())
    }
}

impl TcpDevice {
    /// Closes one socket we no longer want: receives only it could satisfy fail, and
    /// what it delivered that nobody received is dropped (nothing can name it again).
    fn close_socket(&mut self, conn: ConnId) {
        let err = TransportError::PeerClosed {
            conn: conn.0,
            mid_message: false,
        };
        if self.tombs.remove(&conn).is_some() {
            self.matcher.forget_conn(conn, &err);
            return;
        }
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.ids.retain(|k| *k != conn);
        if !c.ready {
            self.pending -= 1;
        }
        if let Some(a) = c.peer_listen {
            if self.by_addr.get(&a) == Some(&conn) {
                self.by_addr.remove(&a);
            }
        }
        // Best effort: the peer may already be gone.
        let _ = c.stream.shutdown(Shutdown::Both);
        self.matcher.forget_conn(conn, &err);
        for f in c.out {
            if let Some(h) = f.handle {
                self.send_done.insert(h, Err(err.duplicate()));
            }
        }
    }
}

impl TcpDevice {
    /// Receive fast path for the common blocking case: a receive on one connection
    /// with nothing queued anywhere. Spins (for the spin budget) on non-blocking reads
    /// of that socket into its staging buffer and, if a complete matching data frame
    /// is there, copies it into `buf` without going through the matching queues.
    /// Anything else — no frame within the spin, a partial, non-matching, HELLO or
    /// malformed frame — returns the buffer (`FastRecv::Declined`) with the bytes left
    /// staged, so the general path parses them under the same matching rules.
    ///
    /// After a simultaneous connect the peer's messages come on the socket it opened,
    /// our connection's second half (each side sends on its own socket): the spin
    /// reads that one, provided our own half is idle (nothing staged or half-read).
    /// Both halves are common — both sides of a communicator's first exchange connect
    /// — and before this such a connection never took the fast path (issue 29).
    fn recv_fast(&mut self, spec: &RecvSpec, buf: Vec<u8>) -> Result<FastRecv> {
        let Some(id) = spec.conn else {
            return Ok(FastRecv::Declined(buf));
        };
        if !self.matcher.quiet_for(id) || self.conns.values().any(|c| !c.out.is_empty()) {
            return Ok(FastRecv::Declined(buf));
        }
        let Some(own) = self.conns.get(&id) else {
            return Ok(FastRecv::Declined(buf));
        };
        if own.alias_of.is_some() {
            // A receive on the second half's own id: the general path's business.
            return Ok(FastRecv::Declined(buf));
        }
        // The half the peer sends on: not one it leaves unused (DATA-13).
        let half = self
            .conns
            .iter()
            .find(|(_, c)| c.alias_of == Some(id) && !c.redundant)
            .map(|(k, _)| *k);
        // `sid`: the socket the peer's messages for `id` arrive on.
        let sid = match half {
            None => id,
            Some(_) if !own.ready || own.stage_pos != 0 || !matches!(own.rx, Rx::Header) => {
                return Ok(FastRecv::Declined(buf));
            }
            Some(h) => h,
        };
        let (max, budget) = (self.cfg.max_message, self.spin);
        let Some(c) = self.conns.get_mut(&sid) else {
            return Ok(FastRecv::Declined(buf));
        };
        if !c.ready || !matches!(c.rx, Rx::Header) {
            return Ok(FastRecv::Declined(buf));
        }
        let mut idle: Option<Instant> = None;
        let mut turn = 0u32;
        // 1. Spin until a whole header is staged.
        let fh = loop {
            if c.stage_pos >= FRAME_HEADER_LEN {
                match framing::parse_header(&c.stage[..c.stage_pos], max) {
                    Ok(Some(fh)) => break fh,
                    _ => return Ok(FastRecv::Declined(buf)),
                }
            }
            let pos = c.stage_pos;
            match c.stream.read(&mut c.stage[pos..]) {
                Ok(0) => return Ok(FastRecv::Declined(buf)), // EOF stays: the general path reports it
                Ok(k) => c.stage_pos += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if spun_out(&mut turn, &mut idle, budget) {
                        return Ok(FastRecv::Declined(buf));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Reported once by the kernel: record it before falling back.
                    let mid = c.stage_pos > 0;
                    self.kill(sid, classify(sid, e, mid));
                    return Ok(FastRecv::Declined(buf));
                }
            }
        };
        let len = fh.msg.len as usize;
        if fh.kind != FrameKind::Data || !spec.matches(id, &fh.msg) || len > buf.len() {
            return Ok(FastRecv::Declined(buf));
        }
        // 2. It is ours: take the staged part, then read the rest straight into `buf`.
        let mut buf = buf;
        buf.truncate(len);
        let have = (c.stage_pos - FRAME_HEADER_LEN).min(len);
        buf[..have].copy_from_slice(&c.stage[FRAME_HEADER_LEN..FRAME_HEADER_LEN + have]);
        c.stage.copy_within(FRAME_HEADER_LEN + have..c.stage_pos, 0);
        c.stage_pos -= FRAME_HEADER_LEN + have;
        let mut got = have;
        idle = None;
        let failed = loop {
            if got == len {
                #[cfg(test)]
                {
                    self.fast_receives += 1;
                }
                return Ok(FastRecv::Done(Received {
                    header: fh.msg,
                    conn: id,
                    data: buf,
                }));
            }
            match c.stream.read(&mut buf[got..len]) {
                Ok(0) => {
                    break TransportError::PeerClosed {
                        conn: sid.0,
                        mid_message: true,
                    };
                }
                Ok(k) => {
                    got += k;
                    idle = None;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if spun_out(&mut turn, &mut idle, budget) {
                        // The sender is slow: hand the partial message to the general
                        // path as a posted receive, exactly where it stands.
                        let h = self.matcher.post(*spec, buf);
                        let sink = self.matcher.incoming(id, fh.msg);
                        c.rx = Rx::Payload { fh, sink, got };
                        return Ok(FastRecv::Posted(h));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break classify(sid, e, true),
            }
        };
        self.kill(sid, failed.duplicate());
        Err(failed)
    }

    /// The spin half of spin-then-block: drives `progress` (non-blocking reads and
    /// writes) until something completes (true), or no byte has moved for the spin
    /// budget (false: the caller blocks). Never longer than `timeout`.
    fn spin_phase(&mut self, timeout: Duration) -> Result<bool> {
        let budget = self.spin.min(timeout);
        if budget.is_zero() {
            return Ok(false);
        }
        let start = Instant::now();
        let mut last = start;
        let mut turn = 0u32;
        loop {
            if self.progress()? > 0 {
                return Ok(true);
            }
            // A non-blocking read costs far more than the loop; the clock is still
            // read only every 4th turn so the spin is mostly reads.
            turn = turn.wrapping_add(1);
            if turn % 4 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let now = Instant::now();
            let mut moved = false;
            for c in self.conns.values_mut() {
                moved |= std::mem::take(&mut c.moved);
            }
            if moved {
                last = now;
            }
            if now.duration_since(start) >= timeout {
                return Ok(true);
            }
            if now.duration_since(last) >= budget {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    fn poll_for_write(&mut self, conn: ConnId, timeout: Duration) -> Result<()> {
        let Some(c) = self.conns.get(&conn) else {
            return Ok(());
        };
        if !c.ready {
            // DATA-1: the peer's CHALLENGE is not all we wait for. The peer may be
            // blocked in a send to us just the same (two processes that start by
            // sending to each other): its HELLO waits on our listener, so watch every
            // socket and the listener, or each side answers the other only on every
            // 1024th progress — 50 ms polls apart, past the handshake's deadline.
            return self.poll(timeout);
        }
        let mut fds = [libc::pollfd {
            fd: c.stream.as_raw_fd(),
            // Before the handshake is over, space to write is not what we wait for.
            events: libc::POLLOUT | libc::POLLIN,
            revents: 0,
        }];
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        Ok(())
    }
}

impl Drop for TcpDevice {
    fn drop(&mut self) {
        if let Err(e) = self.finalize() {
            tracing::warn!(error = %e, "tcp finalize on drop failed");
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
