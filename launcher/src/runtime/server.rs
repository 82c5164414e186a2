//! The job's sockets: each accepted connection must open with a hello carrying the
//! job's secret (else it is closed and logged); then client connections carry kernel
//! frames and tool connections one command line.
//!
//! Every connection has its own thread, and nothing a peer does may stall the engine
//! or the acceptor: the hello and a tool's command are read with timeouts, a command's
//! length is capped, a tool's answer is written by its connection's thread (with a
//! write timeout), connections per socket are capped, and a thread that cannot be
//! started costs only its connection. The acceptor waits in poll(2) on the listener
//! and on a pipe of its own, so [`Server::stop`] works whatever became of the
//! socket's path (removed, or replaced by another socket).

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dynres_core::rc::wire::decode_client;

use super::engine::Event;
use crate::auth::{HELLO_OK, Peer, read_hello};
use crate::framing::{Frame, FrameReader};

/// Which socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `control.sock`: application processes.
    Control,
    /// `cli.sock`: tools.
    Tool,
}

/// Longest tool command accepted; the real ones are a few words.
pub const MAX_LINE: usize = 4096;
/// How long a tool's command may wait for the engine's answer (a change may be
/// answered only once it is decided).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// What one socket's peers may cost.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most connections served at once; more are closed at once.
    pub max_conns: usize,
    /// How long a new connection has to present its hello.
    pub hello_timeout: Duration,
    /// How long a tool has, after its hello, to send its command line.
    pub line_timeout: Duration,
    /// Longest command line.
    pub max_line: usize,
    /// How long a tool's command waits for the engine's answer.
    pub answer_timeout: Duration,
    /// How long writing an answer to a tool may block.
    pub write_timeout: Duration,
}

impl Limits {
    /// The runtime's limits for `kind`: room for every process a host can run on
    /// `control.sock` (plus reconnects), a few dozen tools at once on `cli.sock`.
    pub fn of(kind: Kind) -> Limits {
        Limits {
            max_conns: match kind {
                Kind::Control => 4096,
                Kind::Tool => 64,
            },
            // A process connects as it starts; on a host running hundreds of them on a
            // few cores it may not run again for seconds between its connect and its
            // hello (issue 29: 256 + 64 processes on 2 cores lost new processes at 5 s,
            // which aborted the growth). Only our own processes can reach
            // `control.sock` (the job directory is 0700), so waiting longer costs a
            // thread per slow process, within `max_conns` (`DATA-12`).
            hello_timeout: match kind {
                Kind::Control => Duration::from_secs(60),
                Kind::Tool => Duration::from_secs(5),
            },
            line_timeout: Duration::from_secs(10),
            max_line: MAX_LINE,
            answer_timeout: ANSWER_TIMEOUT,
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// A listening socket served by a thread until [`Server::stop`].
pub struct Server {
    /// Write end of the acceptor's wake-up pipe.
    wake: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// Logs a warning at most once a second, counting the ones it held back: a flood of
/// connections must not become a flood of log lines.
struct Throttle {
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    fn new() -> Throttle {
        Throttle {
            last: None,
            held: 0,
        }
    }

    fn warn(&mut self, kind: Kind, what: &str, error: &dyn std::fmt::Display) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.held += 1;
            return;
        }
        let similar = std::mem::take(&mut self.held);
        self.last = Some(now);
        tracing::warn!(socket = ?kind, %error, similar_since_last = similar, "{what}");
    }
}

/// Counts a connection as served until dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Waits until `listener` has a connection or `wake` is readable (or `timeout`
/// passes): `true` if woken.
fn wait(listener: &UnixListener, wake: &OwnedFd, timeout: Option<Duration>) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // When only sleeping (after an accept error), do not wait on the listener.
    let n = if timeout.is_some() {
        &mut fds[1..]
    } else {
        &mut fds[..]
    };
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    // SAFETY: `n` points at valid pollfd structures for the duration of the call.
    let r = unsafe { libc::poll(n.as_mut_ptr(), n.len() as libc::nfds_t, ms) };
    // EINTR and friends: the caller just looks again.
    r > 0 && n.last().is_some_and(|p| p.revents != 0)
}

impl Server {
    /// Serves `listener` until [`Server::stop`].
    pub fn start(
        listener: UnixListener,
        kind: Kind,
        limits: Limits,
        secret: String,
        events: Sender<Event>,
    ) -> std::io::Result<Server> {
        let (wake_r, wake_w) = pipe()?;
        // Non-blocking: after poll says "readable" the connection may already be gone
        // (the peer gave up), and accept must then not block.
        listener.set_nonblocking(true)?;
        let thread = std::thread::Builder::new()
            .name(format!("dynres-accept-{kind:?}"))
            .spawn(move || accept_loop(&listener, &wake_r, kind, limits, &secret, &events))?;
        Ok(Server {
            wake: wake_w,
            thread: Some(thread),
        })
    }

    /// Stops accepting and waits for the acceptor to end. Connections being served
    /// end on their own (their peers' exits, or their timeouts).
    pub fn stop(mut self) {
        // A full pipe is as good as a written byte: the acceptor wakes either way.
        // SAFETY: writes one byte from a valid buffer to a descriptor we own.
        let _ = unsafe { libc::write(self.wake.as_fd().as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(
    listener: &UnixListener,
    wake: &OwnedFd,
    kind: Kind,
    limits: Limits,
    secret: &str,
    events: &Sender<Event>,
) {
    let active = Arc::new(AtomicUsize::new(0));
    let mut throttle = Throttle::new();
    loop {
        if wait(listener, wake, None) {
            return;
        }
        loop {
            match listener.accept() {
                Ok((s, _)) => admit(s, kind, limits, secret, events, &active, &mut throttle),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors or memory: the connection stays queued and
                    // poll would report it again at once; pause instead of spinning.
                    throttle.warn(kind, "cannot accept a connection", &e);
                    if wait(listener, wake, Some(Duration::from_millis(100))) {
                        return;
                    }
                    break;
                }
            }
        }
    }
}

fn admit(
    s: UnixStream,
    kind: Kind,
    limits: Limits,
    secret: &str,
    events: &Sender<Event>,
    active: &Arc<AtomicUsize>,
    throttle: &mut Throttle,
) {
    // Only this thread adds to `active`, so the check and the add cannot race.
    if active.load(Ordering::SeqCst) >= limits.max_conns {
        throttle.warn(
            kind,
            "too many connections: closed a new one",
            &format_args!("limit {}", limits.max_conns),
        );
        return;
    }
    active.fetch_add(1, Ordering::SeqCst);
    let slot = Slot(active.clone());
    let (secret, events) = (secret.to_string(), events.clone());
    let spawned = std::thread::Builder::new()
        .name(format!("dynres-conn-{kind:?}"))
        .spawn(move || {
            let _slot = slot;
            serve(s, kind, limits, &secret, &events);
        });
    if let Err(e) = spawned {
        // The closure (stream and slot) was dropped with the failed spawn: the
        // connection is closed and no longer counted.
        throttle.warn(
            kind,
            "cannot start a thread for a connection: closed it",
            &e,
        );
    }
}

fn serve(mut s: UnixStream, kind: Kind, limits: Limits, secret: &str, events: &Sender<Event>) {
    // Accepted from a non-blocking listener: make sure the connection itself blocks.
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(limits.hello_timeout));
    let peer = match read_hello(&mut s, secret) {
        Ok(Some(p)) => p,
        Ok(None) => {
            tracing::warn!(socket = ?kind, "refused a connection: wrong secret or malformed hello");
            return;
        }
        Err(e) => {
            tracing::debug!(socket = ?kind, error = %e, "connection closed before its hello");
            return;
        }
    };
    match (kind, peer) {
        (Kind::Control, Peer::Client(rank)) => {
            // A client may be idle for as long as it likes.
            let _ = s.set_read_timeout(None);
            client(s, rank, events);
        }
        (Kind::Tool, Peer::Tool) => tool(s, limits, events),
        _ => tracing::warn!(socket = ?kind, "refused a connection: wrong kind of peer"),
    }
}

fn client(s: UnixStream, rank: u32, events: &Sender<Event>) {
    let conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
    let Ok(w) = s.try_clone() else { return };
    if events
        .send(Event::Hello {
            conn,
            rank,
            stream: w,
        })
        .is_err()
    {
        return;
    }
    let mut r = s;
    let mut frames = FrameReader::new();
    loop {
        let frame = match frames.next(&mut r) {
            Ok(Ok(Frame::Frame(f))) => f,
            Ok(Ok(Frame::Closed)) | Err(_) => break,
            Ok(Err(e)) => {
                tracing::warn!(rank, error = %e, "malformed frame; closing the connection");
                break;
            }
        };
        match decode_client(&frame) {
            Ok((req, request)) => {
                if events.send(Event::Request { conn, req, request }).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(rank, error = %e, "undecodable request; closing the connection");
                break;
            }
        }
    }
    let _ = r.shutdown(std::net::Shutdown::Both);
    let _ = events.send(Event::Gone { conn });
}

/// What reading a tool's command gave.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// The line (without its newline; or what came before the end of the stream).
    Text(String),
    /// More than the limit without a newline.
    TooLong,
    /// Not UTF-8.
    NotText,
    /// Closed (or timed out) before anything came.
    Nothing,
}

/// Reads one line of at most `max` bytes, never more than `max + 1` bytes in all.
fn read_line(r: &mut impl Read, max: usize) -> std::io::Result<Line> {
    let mut buf = Vec::with_capacity(128);
    let mut chunk = [0u8; 512];
    loop {
        let want = chunk.len().min(max + 1 - buf.len());
        let n = match r.read(&mut chunk[..want]) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            if buf.is_empty() {
                return Ok(Line::Nothing);
            }
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            buf.truncate(i);
            break;
        }
        if buf.len() > max {
            return Ok(Line::TooLong);
        }
    }
    Ok(String::from_utf8(buf).map_or(Line::NotText, Line::Text))
}

fn tool(mut s: UnixStream, limits: Limits, events: &Sender<Event>) {
    let _ = s.set_write_timeout(Some(limits.write_timeout));
    if s.write_all(&[HELLO_OK]).is_err() {
        return;
    }
    let _ = s.set_read_timeout(Some(limits.line_timeout));
    let line = match read_line(&mut s, limits.max_line) {
        Ok(Line::Text(l)) => l,
        Ok(Line::TooLong) => {
            tracing::warn!(limit = limits.max_line, "tool command too long; closed");
            return answer(s, "error: command too long\n");
        }
        Ok(Line::NotText) => return answer(s, "error: command is not text\n"),
        Ok(Line::Nothing) => return,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            tracing::debug!("tool sent no command in time; closed");
            return answer(s, "error: no command received in time\n");
        }
        Err(e) => {
            tracing::debug!(error = %e, "tool connection failed before its command");
            return;
        }
    };
    let (reply, rx) = std::sync::mpsc::channel();
    let ended = "error: the job ended\n";
    if events.send(Event::Tool { line, reply }).is_err() {
        return answer(s, ended);
    }
    let text = match rx.recv_timeout(limits.answer_timeout) {
        Ok(a) => a,
        Err(RecvTimeoutError::Disconnected) => ended.into(),
        Err(RecvTimeoutError::Timeout) => "error: no answer from the job in time\n".into(),
    };
    answer(s, &text);
}

/// Writes `text` (bounded by the write timeout) and closes.
fn answer(mut s: UnixStream, text: &str) {
    if let Err(e) = s.write_all(text.as_bytes()) {
        tracing::debug!(error = %e, "tool answer not delivered");
    }
    let _ = s.shutdown(std::net::Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::encode_hello;

    const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    fn sock(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("dynres-srv-{}-{name}.sock", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    fn limits(max_conns: usize) -> Limits {
        Limits {
            max_conns,
            hello_timeout: Duration::from_secs(60),
            line_timeout: Duration::from_secs(60),
            max_line: 64,
            answer_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
        }
    }

    fn tool_conn(path: &std::path::Path) -> UnixStream {
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(&encode_hello(SECRET, Peer::Tool)).unwrap();
        let mut ok = [0u8; 1];
        s.read_exact(&mut ok).unwrap();
        assert_eq!(ok[0], HELLO_OK);
        s
    }

    /// What the server wrote before it closed. Closing a Unix socket with unread
    /// input makes the peer's read end in ECONNRESET instead of EOF (after the data),
    /// so both count as the end.
    fn rest(mut s: UnixStream) -> String {
        let mut a = Vec::new();
        let mut chunk = [0u8; 256];
        while let Ok(n @ 1..) = s.read(&mut chunk) {
            a.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8(a).unwrap()
    }

    #[test]
    fn lines_are_capped_and_must_be_text() {
        let r = |b: &[u8], max| read_line(&mut &b[..], max).unwrap();
        assert_eq!(r(b"status\nrest", 64), Line::Text("status".into()));
        assert_eq!(r(b"status", 64), Line::Text("status".into()));
        assert_eq!(r(b"", 64), Line::Nothing);
        assert_eq!(r(&[b'x'; 65], 64), Line::TooLong);
        assert_eq!(r(&[b'x'; 64], 64), Line::Text("x".repeat(64)));
        assert_eq!(r(b"\xff\xfe\n", 64), Line::NotText);
        // Never reads past the limit, whatever is there.
        let big = vec![b'x'; 1 << 20];
        let mut cur = std::io::Cursor::new(&big);
        assert_eq!(read_line(&mut cur, 64).unwrap(), Line::TooLong);
        assert_eq!(cur.position(), 65);
    }

    #[test]
    fn answers_come_from_the_connection_thread_and_stop_needs_no_path() {
        let path = sock("answer");
        let listener = UnixListener::bind(&path).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let server = Server::start(listener, Kind::Tool, limits(8), SECRET.into(), tx).unwrap();

        // A command too long is answered by the server itself.
        let mut s = tool_conn(&path);
        s.write_all(&[b'x'; 200]).unwrap();
        assert_eq!(rest(s), "error: command too long\n");

        // A command reaches the engine with a reply channel; the engine may answer
        // later, from anywhere.
        let mut s = tool_conn(&path);
        s.write_all(b"status\n").unwrap();
        let Ok(Event::Tool { line, reply }) = rx.recv_timeout(Duration::from_secs(30)) else {
            panic!("no tool event");
        };
        assert_eq!(line, "status");
        std::thread::spawn(move || reply.send("ok later\n".into()).unwrap());
        assert_eq!(rest(s), "ok later\n");

        // An engine that drops the channel: the job ended.
        let mut s = tool_conn(&path);
        s.write_all(b"grow 1\n").unwrap();
        let Ok(Event::Tool { reply, .. }) = rx.recv_timeout(Duration::from_secs(30)) else {
            panic!("no tool event");
        };
        drop(reply);
        assert_eq!(rest(s), "error: the job ended\n");

        // The path is gone (and then taken by someone else): stop still returns.
        std::fs::remove_file(&path).unwrap();
        let _other = UnixListener::bind(&path).unwrap();
        server.stop();
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn connections_beyond_the_cap_are_closed_at_once() {
        let path = sock("cap");
        let listener = UnixListener::bind(&path).unwrap();
        let (tx, _rx) = std::sync::mpsc::channel();
        let server = Server::start(listener, Kind::Tool, limits(2), SECRET.into(), tx).unwrap();
        // Two idle connections (no hello) take both places…
        let idle: Vec<UnixStream> = (0..2)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        // …so a third is closed without waiting for its hello (which would take 60 s).
        let mut third = UnixStream::connect(&path).unwrap();
        third
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut b = [0u8; 1];
        assert!(
            matches!(third.read(&mut b), Ok(0)),
            "third connection served"
        );
        // The first two are still being served.
        for mut s in idle.iter() {
            s.set_nonblocking(true).unwrap();
            assert!(matches!(s.read(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock));
        }
        // Once they are gone, there is room again.
        drop(idle);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut s = UnixStream::connect(&path).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            // Refused connections are closed at once: the hello may not even go out.
            if s.write_all(&encode_hello(SECRET, Peer::Tool)).is_ok()
                && matches!(s.read(&mut b), Ok(1))
            {
                break;
            }
            // Closed: the idle connections' threads have not noticed their end yet.
            assert!(Instant::now() < deadline, "no room after the load was gone");
            std::thread::sleep(Duration::from_millis(10));
        }
        server.stop();
        let _ = std::fs::remove_file(&path);
    }
}
