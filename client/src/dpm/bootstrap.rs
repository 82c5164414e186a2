//! The driver of one root machine ([`Handshake`], [`SpawnParent`], [`Join`]): runs it to
//! its outcome over real sockets, executing its outputs (`spec/spawn.md` §5). Every
//! protocol decision is the kernel's; this file only moves bytes and keeps the clock.
//!
//! One thread, one `poll(2)` over the bootstrap UDP socket, the port's TCP listener
//! (acceptor), the bootstrap stream and the join socket, woken at the machine's
//! `poll_timeout` at the latest (and every [`LOST_POLL`] while a launcher is watched).
//!
//! Not done (spec §8 allows it): once the machine is `Done` the driver returns and no
//! longer answers late datagrams, so a peer whose last acknowledgement was lost through
//! every retry stays undecided until its deadline. A late Hello of that connection that
//! reaches the port's next accept is refused by the kernel: `accept` hands the port's
//! served connections to it (SPAWN-21).

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use dynres_core::process::Rank;
use dynres_core::spawn::{
    Handshake, Input, InterGroup, Join, JoinInput, MemberMsg, Output, ParentInput, SpawnError,
    SpawnParent,
};
use dynres_core::time::Instant as KInstant;
use tracing::{debug, warn};

use super::endpoint::{decode_sockaddr, encode_sockaddr};
use crate::error::CommError;

/// How often a spawn's launcher is asked whether a child died.
pub const LOST_POLL: Duration = Duration::from_millis(10);
/// Longest wait for written stream bytes to drain once the machine decided.
const FLUSH_WAIT: Duration = Duration::from_millis(500);
/// Largest datagram read.
const DGRAM_BUF: usize = 65536;
/// At most one warning about forged bootstrap messages this often (SPAWN-22): a stranger
/// flooding the port must not flood the log too.
const FORGED_WARN_EVERY: Duration = Duration::from_secs(1);

/// Maps the kernel's nanosecond clock onto [`Instant`]: origin at the driver's start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock(Instant);

impl Clock {
    pub(crate) fn new() -> Self {
        Clock(Instant::now())
    }

    pub(crate) fn now(&self) -> KInstant {
        KInstant(u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn to_std(self, k: KInstant) -> Instant {
        self.0 + Duration::from_nanos(k.0)
    }
}

/// The root machine being driven (boxed: the machines are large and of unequal size).
pub(crate) enum Root {
    /// An accept, a connect, or a spawned child's root.
    Handshake(Box<Handshake>),
    /// A spawn's parent root.
    Parent(Box<SpawnParent>),
    /// One end of a join.
    Join(Box<Join>),
}

/// An input for whichever root is driven: one every root takes, or one of a parent's or
/// a join's own.
enum Fed {
    /// An event of the bootstrap.
    Boot(Input),
    /// Bytes read from the join socket (only a join has one).
    JoinStream(Vec<u8>),
    /// The launch failed or a child was lost (only a parent launches).
    LaunchFailed(String),
}

impl From<Input> for Fed {
    fn from(input: Input) -> Self {
        Fed::Boot(input)
    }
}

impl Root {
    fn handle(&mut self, now: KInstant, input: Fed) -> Result<(), SpawnError> {
        match (self, input) {
            (Root::Handshake(m), Fed::Boot(i)) => m.handle(now, i),
            (Root::Parent(m), Fed::Boot(i)) => m.handle(now, i.into()),
            (Root::Parent(m), Fed::LaunchFailed(reason)) => {
                m.handle(now, ParentInput::LaunchFailed { reason })
            }
            (Root::Join(m), Fed::Boot(i)) => m.handle(now, i.into()),
            (Root::Join(m), Fed::JoinStream(bytes)) => {
                m.handle(now, JoinInput::JoinStream { bytes })
            }
            // Never fed (see `Fed`); refused like any input a machine does not take.
            (_, Fed::JoinStream(_) | Fed::LaunchFailed(_)) => Err(SpawnError::Unexpected {
                what: "input not taken by this root",
            }),
        }
    }

    fn poll_output(&mut self) -> Option<Output> {
        match self {
            Root::Handshake(m) => m.poll_output(),
            Root::Parent(m) => m.poll_output(),
            Root::Join(m) => m.poll_output(),
        }
    }

    fn poll_timeout(&self) -> Option<KInstant> {
        match self {
            Root::Handshake(m) => m.poll_timeout(),
            Root::Parent(m) => m.poll_timeout(),
            Root::Join(m) => m.poll_timeout(),
        }
    }

    /// Forged messages the machine dropped so far (SPAWN-22).
    fn forged(&self) -> u32 {
        match self {
            Root::Handshake(m) => m.forged(),
            Root::Parent(m) => m.forged(),
            Root::Join(m) => m.forged(),
        }
    }
}

/// Reports the machine's count of forged messages (SPAWN-22): every new one at debug, a
/// warning at most every [`FORGED_WARN_EVERY`] (and a last one when the call returns),
/// so that someone sending to the port without its key is seen, not drowned in. The
/// messages themselves and the key are never logged.
#[derive(Debug, Default)]
struct ForgedLog {
    seen: u32,
    warned: u32,
    last_warn: Option<Instant>,
}

impl ForgedLog {
    fn update(&mut self, root: &Root) {
        let n = root.forged();
        if n == self.seen {
            return;
        }
        debug!(total = n, "bootstrap: forged message dropped");
        self.seen = n;
        if self
            .last_warn
            .is_none_or(|t| t.elapsed() >= FORGED_WARN_EVERY)
        {
            self.warn();
        }
    }

    fn warn(&mut self) {
        if self.seen > self.warned {
            warn!(
                dropped = self.seen - self.warned,
                total = self.seen,
                "bootstrap: dropped messages that do not carry this connection's key \
                 (a process without the key is sending to the port)"
            );
            self.warned = self.seen;
            self.last_warn = Some(Instant::now());
        }
    }
}

/// What the driver cannot do by itself: reach the local members, launch and watch
/// children.
pub(crate) trait Hooks {
    /// Delivers `msg` to local rank `member` (reliable, ordered).
    fn to_member(&mut self, member: Rank, msg: &MemberMsg) -> Result<(), CommError>;
    /// Launches the children; `Err(reason)` is fed back as `LaunchFailed`.
    fn launch(&mut self, _count: u32, _env: &[(String, String)]) -> Result<(), String> {
        Err("this call launches nothing".into())
    }
    /// Kills the launched children.
    fn kill(&mut self) {}
    /// `Some(why)` once a launched child died.
    fn lost(&mut self) -> Option<String> {
        None
    }
    /// Whether [`Hooks::lost`] should be polled.
    fn watching(&self) -> bool {
        false
    }
}

/// The sockets of one root.
pub(crate) struct Sockets<'a> {
    /// The bootstrap datagram socket: the port's (acceptor, join) or an ephemeral one.
    pub udp: &'a UdpSocket,
    /// The port's listener (acceptor, join): the initiator's stream arrives here.
    pub listener: Option<&'a TcpListener>,
    /// The join's byte stream.
    pub join: Option<File>,
}

impl<'a> Sockets<'a> {
    /// An acceptor's or a join's sockets: its port's datagram socket and listener.
    pub(crate) fn of_port(port: &'a super::port::Port, join: Option<File>) -> Self {
        Sockets {
            udp: &port.udp,
            listener: Some(&port.listener),
            join,
        }
    }
}

/// The bootstrap stream with the peer root.
struct Stream {
    sock: TcpStream,
    connected: bool,
    out: Vec<u8>,
    close_after_flush: bool,
    eof: bool,
}

impl Stream {
    /// Writes what the socket takes now. `Err` means the stream broke.
    fn flush(&mut self) -> std::io::Result<()> {
        while self.connected && !self.out.is_empty() {
            match self.sock.write(&self.out) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.connected && self.out.is_empty() && self.close_after_flush {
            let _ = self.sock.shutdown(std::net::Shutdown::Write);
        }
        Ok(())
    }
}

/// Starts a non-blocking TCP connect to `to` (completion shows as writability).
fn connect_nonblocking(to: SocketAddr) -> std::io::Result<TcpStream> {
    // SAFETY: plain socket(2); the descriptor is owned right after.
    let fd = unsafe {
        libc::socket(
            if to.is_ipv4() {
                libc::AF_INET
            } else {
                libc::AF_INET6
            },
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: zeroed sockaddr structs are valid; each is filled before use.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            // SAFETY: as above.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: `storage` holds a sockaddr of `len` bytes.
    let r = unsafe {
        libc::connect(
            owned.as_raw_fd(),
            (&raw const storage).cast(),
            len as libc::socklen_t,
        )
    };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(TcpStream::from(owned))
}

/// `poll(2)` on `fds` for at most `wait`; interrupted waits count as woken.
fn poll(fds: &mut [libc::pollfd], wait: Duration) -> Result<(), CommError> {
    let ms = wait.as_millis().min(1000) as libc::c_int;
    // Round up so a wait below a millisecond does not spin.
    let ms = if Duration::from_millis(ms as u64) < wait {
        ms + 1
    } else {
        ms
    };
    // SAFETY: `fds` is a valid slice of pollfd for the duration of the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(CommError::io("poll the bootstrap sockets", e));
        }
    }
    Ok(())
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Feeds one input; a rejected input changed nothing (SPAWN-10) and is only logged.
fn feed(root: &mut Root, clock: &Clock, input: impl Into<Fed>) {
    let input = input.into();
    let what = match &input {
        Fed::Boot(Input::Datagram { .. }) => "datagram",
        Fed::Boot(Input::Stream { .. }) => "stream bytes",
        Fed::Boot(Input::StreamClosed) => "stream closed",
        Fed::JoinStream(_) => "join bytes",
        Fed::LaunchFailed(_) => "launch failure",
        Fed::Boot(Input::Timeout) => "timeout",
    };
    if let Err(e) = root.handle(clock.now(), input) {
        debug!(error = %e, input = what, "bootstrap: input rejected");
    }
}

/// Why a driven root did not produce an inter-group.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The error for the root's caller.
    pub error: CommError,
    /// Whether the machine already sent `Failed` to the members (SPAWN-8); if not, the
    /// caller must, or they wait for nothing.
    pub members_told: bool,
}

/// Runs `root` (made at `clock.now()`) until it decides: the inter-group on `Ready`, the
/// kernel's error on `Failed`. A failed delivery to a member turns a `Ready` into that
/// error (that member times out on its own).
pub(crate) fn drive(
    root: &mut Root,
    mut io: Sockets<'_>,
    hooks: &mut dyn Hooks,
    clock: Clock,
) -> Result<InterGroup, Failure> {
    let mut stream: Option<Stream> = None;
    let mut outcome: Option<Result<InterGroup, SpawnError>> = None;
    let mut member_error: Option<CommError> = None;
    let mut join_open = io.join.is_some();
    let mut last_lost = Instant::now();
    let mut buf = vec![0u8; DGRAM_BUF];
    let mut forged = ForgedLog::default();
    loop {
        forged.update(root);
        // 1. Execute every output.
        while let Some(o) = root.poll_output() {
            match o {
                Output::SendDatagram { to, bytes } => match decode_sockaddr(&to) {
                    Ok(to) => {
                        if let Err(e) = io.udp.send_to(&bytes, to) {
                            // Loss is the machine's business: it retransmits.
                            debug!(error = %e, %to, "bootstrap: datagram not sent");
                        }
                    }
                    Err(e) => warn!(error = %e, "bootstrap: datagram to a bad address"),
                },
                Output::OpenStream { to } => {
                    let s = decode_sockaddr(&to)
                        .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))
                        .and_then(connect_nonblocking);
                    match s {
                        Ok(sock) => {
                            stream = Some(Stream {
                                sock,
                                connected: false,
                                out: Vec::new(),
                                close_after_flush: false,
                                eof: false,
                            })
                        }
                        Err(e) => {
                            debug!(error = %e, "bootstrap: stream connect failed");
                            feed(root, &clock, Input::StreamClosed);
                        }
                    }
                }
                Output::SendStream { bytes } => match stream.as_mut() {
                    Some(s) => s.out.extend_from_slice(&bytes),
                    None => debug!("bootstrap: stream bytes without a stream dropped"),
                },
                Output::CloseStream => {
                    if let Some(s) = stream.as_mut() {
                        s.close_after_flush = true;
                    }
                }
                Output::SendJoin { bytes } => {
                    if let Some(j) = io.join.as_mut() {
                        if let Err(e) = j.write_all(&bytes) {
                            // The peer's port never arrives; the join deadline decides.
                            warn!(error = %e, "join: write on the join socket failed");
                        }
                    }
                }
                Output::Launch { count, env, .. } => {
                    if let Err(reason) = hooks.launch(count, &env) {
                        feed(root, &clock, Fed::LaunchFailed(reason));
                    }
                }
                Output::Kill { .. } => hooks.kill(),
                Output::ToMember { member, msg } => {
                    if let Err(e) = hooks.to_member(member, &msg) {
                        warn!(error = %e, member, "bootstrap: member not reached");
                        member_error.get_or_insert(e);
                    }
                }
                Output::Ready(ig) => {
                    outcome.get_or_insert(Ok(ig));
                }
                Output::Failed(e) => {
                    outcome.get_or_insert(Err(e));
                }
            }
        }
        if let Some(s) = stream.as_mut() {
            if let Err(e) = s.flush() {
                debug!(error = %e, "bootstrap: stream write failed");
                stream = None;
                feed(root, &clock, Input::StreamClosed);
                continue;
            }
        }
        if let Some(result) = outcome {
            forged.update(root);
            forged.warn();
            if let Some(s) = stream.as_mut() {
                finish_stream(s);
            }
            let error = match (result, member_error) {
                (Ok(ig), None) => return Ok(ig),
                (Ok(_), Some(e)) => e,
                (Err(e), _) => e.into(),
            };
            return Err(Failure {
                error,
                members_told: true,
            });
        }

        // 2. Wait for a socket or the machine's next deadline.
        let deadline = root.poll_timeout().map(|k| clock.to_std(k));
        let now = Instant::now();
        let mut wait = deadline.map_or(Duration::from_millis(100), |d| {
            d.saturating_duration_since(now)
        });
        if hooks.watching() {
            wait = wait.min(LOST_POLL);
        }
        let mut fds = vec![pollfd(io.udp.as_raw_fd(), libc::POLLIN)];
        let listener_at = match io.listener {
            Some(l) if stream.is_none() => {
                fds.push(pollfd(l.as_raw_fd(), libc::POLLIN));
                Some(fds.len() - 1)
            }
            _ => None,
        };
        let stream_at = stream.as_ref().map(|s| {
            let mut ev = 0;
            if s.connected && !s.eof {
                ev |= libc::POLLIN;
            }
            if !s.connected || !s.out.is_empty() {
                ev |= libc::POLLOUT;
            }
            fds.push(pollfd(s.sock.as_raw_fd(), ev));
            fds.len() - 1
        });
        let join_at = match io.join.as_ref() {
            Some(j) if join_open => {
                fds.push(pollfd(j.as_raw_fd(), libc::POLLIN));
                Some(fds.len() - 1)
            }
            _ => None,
        };
        poll(&mut fds, wait).map_err(|error| Failure {
            error,
            members_told: false,
        })?;

        // 3. Feed what arrived.
        if fds[0].revents != 0 {
            loop {
                match io.udp.recv_from(&mut buf) {
                    Ok((n, from)) => feed(
                        root,
                        &clock,
                        Input::Datagram {
                            from: encode_sockaddr(&from),
                            bytes: buf[..n].to_vec(),
                        },
                    ),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        // ICMP errors of earlier sends; nothing to read.
                        debug!(error = %e, "bootstrap: datagram receive error");
                        break;
                    }
                }
            }
        }
        if let (Some(i), Some(l)) = (listener_at, io.listener) {
            if fds[i].revents != 0 {
                match l.accept() {
                    Ok((sock, from)) => {
                        debug!(%from, "bootstrap: stream accepted");
                        if let Err(e) = sock.set_nonblocking(true) {
                            warn!(error = %e, "bootstrap: accepted stream unusable");
                        } else {
                            stream = Some(Stream {
                                sock,
                                connected: true,
                                out: Vec::new(),
                                close_after_flush: false,
                                eof: false,
                            });
                        }
                    }
                    Err(e) => debug!(error = %e, "bootstrap: accept failed"),
                }
            }
        }
        if let (Some(i), Some(s)) = (stream_at, stream.as_mut()) {
            let rev = fds[i].revents;
            let mut broken = false;
            if !s.connected && rev != 0 {
                match s.sock.take_error() {
                    Ok(None) if s.sock.peer_addr().is_ok() => s.connected = true,
                    Ok(e) => {
                        debug!(error = ?e, "bootstrap: stream connect failed");
                        broken = true;
                    }
                    Err(e) => {
                        debug!(error = %e, "bootstrap: stream connect failed");
                        broken = true;
                    }
                }
            } else if rev & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                loop {
                    match s.sock.read(&mut buf) {
                        Ok(0) => {
                            s.eof = true;
                            broken = true;
                            break;
                        }
                        Ok(n) => feed(
                            root,
                            &clock,
                            Input::Stream {
                                bytes: buf[..n].to_vec(),
                            },
                        ),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => {
                            debug!(error = %e, "bootstrap: stream read failed");
                            broken = true;
                            break;
                        }
                    }
                }
            }
            if broken {
                stream = None;
                feed(root, &clock, Input::StreamClosed);
            }
        }
        if let (Some(i), Some(j)) = (join_at, io.join.as_mut()) {
            if fds[i].revents != 0 {
                match j.read(&mut buf) {
                    Ok(0) => {
                        // The join stream carries nothing after the ports; its end
                        // decides nothing (the deadline does, if the port never came).
                        join_open = false;
                    }
                    Ok(n) => feed(root, &clock, Fed::JoinStream(buf[..n].to_vec())),
                    Err(e)
                        if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                    Err(e) => {
                        warn!(error = %e, "join: read failed");
                        join_open = false;
                    }
                }
            }
        }

        // 4. Timers and the launcher.
        if deadline.is_some_and(|d| Instant::now() >= d) {
            feed(root, &clock, Input::Timeout);
        }
        if hooks.watching() && last_lost.elapsed() >= LOST_POLL {
            last_lost = Instant::now();
            if let Some(reason) = hooks.lost() {
                feed(root, &clock, Fed::LaunchFailed(reason));
            }
        }
    }
}

/// Lets written bytes drain after the decision (the peer may still need our last
/// frames), bounded by [`FLUSH_WAIT`].
fn finish_stream(s: &mut Stream) {
    let end = Instant::now() + FLUSH_WAIT;
    while s.connected && !s.out.is_empty() && Instant::now() < end {
        let mut fds = [pollfd(s.sock.as_raw_fd(), libc::POLLOUT)];
        if poll(&mut fds, end.saturating_duration_since(Instant::now())).is_err()
            || s.flush().is_err()
        {
            return;
        }
    }
    let _ = s.sock.shutdown(std::net::Shutdown::Write);
}
