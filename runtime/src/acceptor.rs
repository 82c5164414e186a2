//! The master's acceptor of daemon connections (`spec/runtime.md`, AUTH-4..AUTH-8):
//! one thread runs every authentication exchange at once over non-blocking sockets, so
//! a connection costs a descriptor and a few bytes, not a thread. Which connection
//! stays, which node a daemon may take and what is logged are the [`Admission`]
//! machine's and the [`RefusalLog`]'s decisions; this file only does their I/O.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::admission::{Admission, ConnId, LOG_WINDOW, Limits, Refusal, RefusalLog};
use crate::hostauth::{self, ACCEPTED, AuthError, Challenge, DECOY, HELLO_LEN, REFUSED, TAG_LEN};

/// How often the acceptor looks at its stop flag when nothing happens.
const TICK: Duration = Duration::from_millis(50);
/// Most connections taken in per turn, so that readable ones are served between
/// batches of a flood.
const ACCEPT_BATCH: usize = 32;
/// How long the acceptor leaves the listener alone after `accept` failed (out of
/// descriptors: the connection stays queued and would wake it at once).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What the engine tells the acceptor about nodes (AUTH-5).
enum Awaiting {
    /// A daemon is being started for the node.
    Expect(u32),
    /// The node takes no daemon any more.
    Forget(u32),
}

/// The running acceptor: hands each authenticated daemon's link to `up`.
pub struct Acceptor {
    awaiting: Sender<Awaiting>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Acceptor {
    /// Accepts daemons on `listener` (with the job's `key`) until [`Acceptor::stop`];
    /// each one accepted for a node is passed to `up`, its stream blocking again.
    pub fn start(
        listener: TcpListener,
        key: Arc<Vec<u8>>,
        limits: Limits,
        up: impl FnMut(u32, TcpStream) + Send + 'static,
    ) -> std::io::Result<Acceptor> {
        listener.set_nonblocking(true)?;
        let (awaiting, commands) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("dynres-daemons".into())
            .spawn(move || {
                Loop {
                    listener,
                    key,
                    admission: Admission::new(limits),
                    log: RefusalLog::new(LOG_WINDOW),
                    exchanges: BTreeMap::new(),
                    commands,
                    up,
                    paused_until: None,
                }
                .run(&stopped);
            })?;
        Ok(Acceptor {
            awaiting,
            stop,
            thread: Some(thread),
        })
    }

    /// A daemon is about to be started for `node`: it may take the node (AUTH-5).
    /// Called before the daemon can connect, so the acceptor knows by then.
    pub fn expect(&self, node: u32) {
        let _ = self.awaiting.send(Awaiting::Expect(node));
    }

    /// `node` takes no daemon any more: a late one is refused before its verdict.
    pub fn forget(&self, node: u32) {
        let _ = self.awaiting.send(Awaiting::Forget(node));
    }

    /// Stops accepting; logs what refusals are still held back (AUTH-8).
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Acceptor {
    /// A master that ends without [`Acceptor::stop`] (an error while starting) must
    /// not leave the thread accepting.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where one connection's exchange stands.
enum Step {
    /// Reading the daemon's hello.
    Hello,
    /// Challenged; reading the daemon's tag.
    Tag(Challenge),
}

struct Exchange {
    stream: TcpStream,
    peer: SocketAddr,
    /// What arrived of the current step's message.
    buf: Vec<u8>,
    step: Step,
    /// The node its checked hello claims, for the log.
    node: Option<u32>,
}

impl Exchange {
    fn who(&self) -> String {
        match self.node {
            Some(n) => format!("{} (node {n})", self.peer),
            None => self.peer.to_string(),
        }
    }

    /// Reads what the socket has of the current message without blocking: whether
    /// it is complete, or the refusal when the connection closed or failed.
    fn fill(&mut self) -> Result<bool, Refusal> {
        let need = match self.step {
            Step::Hello => HELLO_LEN,
            Step::Tag(_) => TAG_LEN,
        };
        let mut chunk = [0u8; HELLO_LEN];
        while self.buf.len() < need {
            // Never past the message: a daemon sends nothing more before our answer.
            match self.stream.read(&mut chunk[..need - self.buf.len()]) {
                Ok(0) => return Err(Refusal::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(Refusal::Closed),
            }
        }
        Ok(true)
    }
}

/// What became of a connection after it was served.
enum Outcome {
    /// Its exchange goes on.
    Waiting(Exchange),
    /// Authenticated and accepted for the node.
    Up(u32, TcpStream),
    /// Closed, with why and who.
    Refused(Refusal, String),
}

struct Loop<F> {
    listener: TcpListener,
    key: Arc<Vec<u8>>,
    admission: Admission,
    log: RefusalLog,
    exchanges: BTreeMap<ConnId, Exchange>,
    commands: Receiver<Awaiting>,
    up: F,
    /// After a failed `accept`: when to look at the listener again.
    paused_until: Option<Instant>,
}

impl<F: FnMut(u32, TcpStream)> Loop<F> {
    fn run(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            self.turn();
        }
        if let Some(line) = self.log.flush(Instant::now()) {
            tracing::warn!("{line}");
        }
    }

    fn turn(&mut self) {
        let now = Instant::now();
        // AUTH-6: one deadline per exchange, however its bytes trickle in.
        for id in self.admission.expired(now) {
            if let Some(x) = self.exchanges.remove(&id) {
                self.refused(now, Refusal::Expired, &x.who());
            }
        }
        if let Some(line) = self.log.tick(now) {
            tracing::warn!("{line}");
        }
        let listening = self.paused_until.is_none_or(|t| now >= t);
        let ids: Vec<ConnId> = self.exchanges.keys().copied().collect();
        let mut fds: Vec<libc::pollfd> = std::iter::once(&self.listener.as_raw_fd())
            .filter(|_| listening)
            .copied()
            .chain(self.exchanges.values().map(|x| x.stream.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let wait = self
            .admission
            .next_deadline()
            .map_or(TICK, |d| d.saturating_duration_since(now).min(TICK));
        poll(&mut fds, wait);
        // After the wait: a node expected before its daemon could connect is known
        // before that daemon's tag is judged (AUTH-5).
        for c in self.commands.try_iter() {
            match c {
                Awaiting::Expect(node) => self.admission.expect(node),
                Awaiting::Forget(node) => self.admission.forget(node),
            }
        }
        let conn_fds = if listening { &fds[1..] } else { &fds[..] };
        for (id, fd) in ids.iter().zip(conn_fds) {
            if fd.revents != 0 {
                self.serve(*id);
            }
        }
        if listening && fds[0].revents != 0 {
            self.accept();
        }
    }

    fn accept(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            let (stream, peer) = match self.listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    let now = Instant::now();
                    self.paused_until = Some(now + ACCEPT_PAUSE);
                    self.refused(now, Refusal::NotAccepted, &format!("? ({e})"));
                    return;
                }
            };
            let now = Instant::now();
            // AUTH-7: the newcomer always gets in; the table makes room if it must.
            let (id, evicted) = self.admission.connected(now, peer.ip());
            if let Some(x) = evicted.and_then(|e| self.exchanges.remove(&e)) {
                self.refused(now, Refusal::Evicted, &x.who());
            }
            if stream.set_nonblocking(true).is_err() {
                self.admission.closed(id);
                self.refused(now, Refusal::Closed, &peer.to_string());
                continue;
            }
            self.exchanges.insert(
                id,
                Exchange {
                    stream,
                    peer,
                    buf: Vec::with_capacity(HELLO_LEN),
                    step: Step::Hello,
                    node: None,
                },
            );
            // A daemon sends its hello with its connection: reading it now gets it out
            // of reach of the flood behind it (AUTH-7).
            self.serve(id);
        }
    }

    /// Moves connection `id`'s exchange on with what arrived.
    fn serve(&mut self, id: ConnId) {
        let Some(x) = self.exchanges.remove(&id) else {
            return;
        };
        match self.advance(id, x) {
            Outcome::Waiting(x) => {
                self.exchanges.insert(id, x);
            }
            Outcome::Up(node, stream) => {
                tracing::debug!(node, "daemon authenticated");
                (self.up)(node, stream);
            }
            Outcome::Refused(why, who) => {
                self.admission.closed(id);
                self.refused(Instant::now(), why, &who);
            }
        }
    }

    fn advance(&mut self, id: ConnId, mut x: Exchange) -> Outcome {
        match x.fill() {
            Ok(true) => {}
            Ok(false) => return Outcome::Waiting(x),
            Err(why) => return Outcome::Refused(why, x.who()),
        }
        let bytes = std::mem::take(&mut x.buf);
        match std::mem::replace(&mut x.step, Step::Hello) {
            Step::Hello => {
                let bytes: &[u8; HELLO_LEN] = bytes.as_slice().try_into().expect("a whole hello");
                let hello = match hostauth::check_hello(&self.key, bytes) {
                    Ok(h) => h,
                    Err(e) => {
                        if matches!(e, AuthError::WrongKey) {
                            // A daemon with the wrong key reports it as such (AUTH-3).
                            let _ = x.stream.write_all(&DECOY);
                        }
                        return Outcome::Refused(refusal(&e), x.who());
                    }
                };
                x.node = Some(hello.node());
                if let Err(why) = self.admission.hello(id, hello.node(), hello.nonce()) {
                    return Outcome::Refused(why, x.who());
                }
                let (challenge, answer) = match Challenge::new(&self.key, &hello) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot challenge a daemon");
                        return Outcome::Refused(Refusal::Closed, x.who());
                    }
                };
                // A fresh socket's buffer takes these few bytes at once.
                if x.stream.write_all(&answer).is_err() {
                    return Outcome::Refused(Refusal::Closed, x.who());
                }
                x.step = Step::Tag(challenge);
                Outcome::Waiting(x)
            }
            Step::Tag(challenge) => {
                let tag: &[u8; TAG_LEN] = bytes.as_slice().try_into().expect("a whole tag");
                if let Err(e) = challenge.verify(&self.key, tag) {
                    return Outcome::Refused(refusal(&e), x.who());
                }
                // AUTH-5: the node is decided before the verdict byte.
                match self.admission.verified(id) {
                    Ok(node) => {
                        let handed = x
                            .stream
                            .write_all(&[ACCEPTED])
                            .and_then(|()| x.stream.set_nonblocking(false));
                        match handed {
                            Ok(()) => Outcome::Up(node, x.stream),
                            Err(_) => Outcome::Refused(Refusal::Closed, x.who()),
                        }
                    }
                    Err(why) => {
                        let _ = x.stream.write_all(&[REFUSED]);
                        Outcome::Refused(why, x.who())
                    }
                }
            }
        }
    }

    /// AUTH-4, AUTH-8: logged, bounded.
    fn refused(&mut self, now: Instant, why: Refusal, who: &str) {
        if let Some(line) = self.log.refused(now, why, who) {
            tracing::warn!("{line}");
        }
    }
}

fn refusal(e: &AuthError) -> Refusal {
    match e {
        AuthError::Malformed => Refusal::Malformed,
        AuthError::WrongKey => Refusal::WrongKey,
        _ => Refusal::Closed,
    }
}

/// Waits at most `wait` for one of `fds` to be ready (an interrupted wait is a short
/// one: the caller looks again).
fn poll(fds: &mut [libc::pollfd], wait: Duration) {
    let ms = wait.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `fds` points at valid pollfd structures for the duration of the call.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    /// An acceptor on a loopback port expecting `nodes`; daemons it accepts come out
    /// of the receiver.
    fn acceptor(limits: Limits, nodes: &[u32]) -> (Acceptor, SocketAddr, mpsc::Receiver<u32>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = mpsc::channel();
        let a = Acceptor::start(l, Arc::new(KEY.to_vec()), limits, move |node, _| {
            let _ = tx.send(node);
        })
        .unwrap();
        for n in nodes {
            a.expect(*n);
        }
        (a, addr, rx)
    }

    /// Small bounds, for tests that fill the table and wait for deadlines.
    fn small(deadline: Duration) -> Limits {
        Limits {
            waiting: 8,
            deadline,
        }
    }

    /// A daemon's side as `dynres daemon` runs it: tries again while the master drops
    /// the connection before its verdict (AUTH-7), at most `tries` times.
    fn daemon(addr: SocketAddr, node: u32, tries: u32) -> Result<(), AuthError> {
        let mut last = AuthError::Dropped;
        for _ in 0..tries {
            let mut s = TcpStream::connect(addr)?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            match hostauth::daemon_handshake(&mut s, KEY, node) {
                Err(AuthError::Dropped) => last = AuthError::Dropped,
                done => return done,
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(last)
    }

    /// AUTH-5: a key holder claiming a node that has its daemon, or one no daemon was
    /// started for, is refused with the refusal byte and never sees the acceptance
    /// byte; the node's daemon is accepted once.
    #[test]
    fn a_key_holder_for_a_taken_or_unknown_node_never_gets_the_acceptance_byte() {
        let (a, addr, up) = acceptor(Limits::default(), &[1]);
        daemon(addr, 1, 1).expect("node 1's daemon");
        assert_eq!(up.recv_timeout(Duration::from_secs(10)), Ok(1));
        for node in [1, 7] {
            let r = daemon(addr, node, 1);
            assert!(
                matches!(r, Err(AuthError::Refused(n)) if n == node),
                "node {node}: {r:?}"
            );
        }
        a.forget(2);
        a.stop();
        assert!(up.try_recv().is_err(), "no second daemon went up");
    }

    /// AUTH-6, AUTH-7 over real sockets: connections that trickle a byte now and then
    /// fill the table and a flood of connections from the same address churns it,
    /// yet node 1's daemon gets in; the trickling ones are closed at their deadline.
    #[test]
    fn a_slow_loris_and_a_flood_do_not_keep_the_daemon_out() {
        let (a, addr, up) = acceptor(small(Duration::from_secs(2)), &[1]);
        let stop = Arc::new(AtomicBool::new(false));
        let lorises: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let trickle = {
            let stop = stop.clone();
            let mut lorises: Vec<TcpStream> =
                lorises.iter().map(|s| s.try_clone().unwrap()).collect();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for s in &mut lorises {
                        let _ = s.write_all(b"D");
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        };
        let flood = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    drop(TcpStream::connect(addr));
                }
            })
        };
        let r = daemon(addr, 1, 1000);
        stop.store(true, Ordering::Relaxed);
        trickle.join().unwrap();
        flood.join().unwrap();
        r.expect("the daemon got in");
        assert_eq!(up.recv_timeout(Duration::from_secs(10)), Ok(1));
        // Each trickling connection was closed (deadline, or evicted by the flood):
        // reading it ends instead of blocking.
        for mut s in lorises {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut b = [0u8; 1];
            assert!(matches!(s.read(&mut b), Ok(0) | Err(_)), "still open");
        }
        a.stop();
    }

    /// AUTH-6 alone: a connection that keeps sending a byte well within any per-read
    /// timeout is still closed once the exchange's deadline passed.
    #[test]
    fn a_trickling_connection_is_closed_at_the_exchange_deadline() {
        let (a, addr, _up) = acceptor(small(Duration::from_millis(500)), &[1]);
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut b = [0u8; 1];
        // Sends one byte per 100 ms, far more than the hello's 73 bytes take: the
        // connection must close while bytes still flow (else this never ends before
        // the 73rd byte, at 7.3 s, when the garbage hello would close it anyway).
        let closed = (0..60).any(|_| {
            if s.write_all(b"D").is_err() {
                return true;
            }
            match s.read(&mut b) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            }
        });
        assert!(closed, "the trickling connection was never closed");
        a.stop();
    }
}
