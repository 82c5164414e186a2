//! The runtime's I/O loop: one thread that waits in poll(2) on everything whose number
//! grows with the ranks (issue 30), so that the runtime's thread count does not.
//!
//! It owns
//! - the job's sockets: accepts, reads each connection's hello without blocking (with
//!   a deadline), reads the frames of every process' control connection
//!   (`control.sock`), and each tool's command line and writes its answer (`cli.sock`),
//!   with the deadlines and caps of [`Limits`];
//! - every rank's stdout and stderr pipe, forwarded line by line with a `[rank N] `
//!   prefix (partial lines kept until their newline, or until [`MAX_LINE`]);
//! - every launched process' exit, through a `pidfd` (Linux ≥ 5.3), or where there is
//!   none through SIGCHLD ([`signals::watch_children`]) and a non-blocking wait;
//! - the signal self-pipe ([`signals::wake_fd`]), which it turns into
//!   [`Event::Signal`] for the engine;
//! - write interest for control connections whose replies the socket did not take
//!   ([`Handle::watch_write`], answered by [`Event::Writable`]) and for links to other
//!   nodes whose frames wait ([`Handle::watch_link`], [`Event::LinkWritable`]): the
//!   engine flushes them then, instead of retrying every 2 ms.
//!
//! Everything it learns goes to the engine's queue as [`Event`]s, as the threads it
//! replaces sent them, in the same order per connection and per process (a process'
//! [`Event::Launched`] is queued by its launcher thread before the process is handed
//! over here, so its [`Event::Exited`] comes after it).
//!
//! Forwarded output is written by one writer thread, not by the loop: a terminal or
//! pipe that does not take the runtime's output must stall only the output (the ranks'
//! pipes stop being read past [`OUTPUT_QUEUED`] bytes, as a blocked forwarder thread
//! stopped reading before), never the control connections.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dynres_core::rc::wire::decode_client;

use super::engine::Event;
use super::output::{OutputStyle, Sink};
use super::server::{Kind, Limits, Throttle};
use super::signals;
use super::stdin::{Forward, Want};
use dynres_client::auth::{HELLO_OK, Peer, read_hello};
use dynres_client::framing::{Frame, FrameReader};

/// How long output is still forwarded after a process exited: what it wrote is in
/// the pipe already; only descendants that inherited the pipe (a daemonized child)
/// write later, and they must not keep the runtime from ending.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// Longest piece of output forwarded as one line.
const MAX_LINE: usize = 64 << 10;

/// Output bytes read from the ranks and not yet written out, past which their pipes
/// are no longer read (the ranks then block on a full pipe, as they did when their
/// forwarder thread was blocked in a write).
const OUTPUT_QUEUED: usize = 4 << 20;

/// How often the reaper without `pidfd` looks for exits even without a SIGCHLD (a
/// signal coalesced with another, or a handler another library replaced).
const REAP_POLL: Duration = Duration::from_secs(1);

/// Once the loop stops, how long an answer to a tool may still take to go out.
const STOP_ANSWER: Duration = Duration::from_secs(1);

/// How long an accept error (out of descriptors or memory) pauses accepting: the
/// connection stays queued and poll would report it again at once.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Most bytes read from one pipe per turn of the loop, so that one chatty rank does
/// not hold up the others.
const READ_PER_TURN: usize = 64 << 10;

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// What the runtime's other threads ask of the loop.
enum Cmd {
    /// A launched process: its exit and its output are the loop's from now on.
    Child {
        rank: u32,
        proc: std::process::Child,
        stdout: Option<OwnedFd>,
        stderr: Option<OwnedFd>,
    },
    /// Report [`Event::Writable`] once connection `conn` takes more bytes.
    WatchWrite(u64),
    /// Report [`Event::LinkWritable`] once the link to `node` (a copy of its socket)
    /// takes more bytes.
    WatchLink { node: u32, fd: OwnedFd },
    /// The engine's answer to tool connection `id` (`None`: it dropped the reply
    /// unanswered, the job ended).
    ToolAnswer { id: u64, text: Option<String> },
    /// Forward the runtime's stdin into this pipe (rank 0's stdin).
    Stdin(OwnedFd),
    /// Serve the runtime's end of `rank`'s PMI socket (`spec/pmi.md`).
    Pmi { rank: u32, fd: OwnedFd },
}

/// Shared between the loop and its handles.
struct Shared {
    cmds: Mutex<Vec<Cmd>>,
    /// Write end of the loop's wake-up pipe.
    wake: OwnedFd,
    /// Its read end, kept as long as a handle may write (a reply dropped after the
    /// loop ended must not write to a pipe without readers).
    wake_r: OwnedFd,
}

impl Shared {
    fn wake(&self) {
        // SAFETY: writes one byte from a valid buffer to a descriptor we own; a full
        // (non-blocking) pipe wakes the loop as well.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
    }

    fn push(&self, cmd: Cmd) {
        if let Ok(mut q) = self.cmds.lock() {
            q.push(cmd);
        }
        self.wake();
    }
}

/// What the launcher threads and the engine hand the loop.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ioloop::Handle")
    }
}

impl Handle {
    /// Hands over a launched process (after its [`Event::Launched`] was queued): the
    /// loop reports its exit and forwards its output.
    pub fn add_child(
        &self,
        rank: u32,
        proc: std::process::Child,
        stdout: Option<OwnedFd>,
        stderr: Option<OwnedFd>,
    ) {
        self.shared.push(Cmd::Child {
            rank,
            proc,
            stdout,
            stderr,
        });
    }

    /// Serves the runtime's end of `rank`'s PMI socket: its bytes go to the engine as
    /// [`Event::PmiBytes`] after one [`Event::PmiUp`] (sent after the rank's
    /// [`Event::Launched`]), its end as [`Event::Gone`].
    pub fn add_pmi(&self, rank: u32, fd: OwnedFd) {
        self.shared.push(Cmd::Pmi { rank, fd });
    }

    /// Forwards the runtime's stdin into `pipe`, rank 0's stdin, until either ends.
    pub fn forward_stdin(&self, pipe: OwnedFd) {
        self.shared.push(Cmd::Stdin(pipe));
    }

    /// Asks for one [`Event::Writable`] once connection `conn` can take more bytes
    /// (none if the connection is gone by then: its [`Event::Gone`] is sent instead).
    pub fn watch_write(&self, conn: u64) {
        self.shared.push(Cmd::WatchWrite(conn));
    }

    /// Asks for one [`Event::LinkWritable`] once the link to `node`, whose socket `fd`
    /// is, can take more bytes (or fails: the link's own reader reports its end).
    pub fn watch_link(&self, node: u32, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
        let fd = fd.try_clone_to_owned()?;
        self.shared.push(Cmd::WatchLink { node, fd });
        Ok(())
    }
}

/// Where the engine sends a tool's answer: to the I/O loop, which writes it to the
/// tool's connection (with the write timeout). It may be sent later (a change is
/// answered once decided); dropped unanswered, the tool is told "the job ended".
pub struct ToolReply(Reply);

enum Reply {
    Loop {
        id: u64,
        shared: Arc<Shared>,
        sent: bool,
    },
    #[cfg(test)]
    Channel(Sender<String>),
}

impl std::fmt::Debug for ToolReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolReply")
    }
}

impl ToolReply {
    /// Answers the tool.
    pub fn send(mut self, text: String) {
        match &mut self.0 {
            Reply::Loop { id, shared, sent } => {
                *sent = true;
                shared.push(Cmd::ToolAnswer {
                    id: *id,
                    text: Some(text),
                });
            }
            #[cfg(test)]
            Reply::Channel(tx) => {
                let _ = tx.send(text);
            }
        }
    }

    /// A reply that lands in `tx` (unit tests of the engine's tool requests).
    #[cfg(test)]
    pub fn to(tx: Sender<String>) -> ToolReply {
        ToolReply(Reply::Channel(tx))
    }
}

impl Drop for ToolReply {
    fn drop(&mut self) {
        if let Reply::Loop {
            id,
            shared,
            sent: false,
        } = &self.0
        {
            shared.push(Cmd::ToolAnswer {
                id: *id,
                text: None,
            });
        }
    }
}

/// A socket the loop serves.
pub struct Socket {
    /// The listening socket.
    pub listener: UnixListener,
    /// Which: what its peers may be.
    pub kind: Kind,
    /// What its peers may cost.
    pub limits: Limits,
    /// The job's secret, which every hello must carry.
    pub secret: String,
}

/// The running loop; stopped by [`IoLoop::finish`] (or when dropped).
pub struct IoLoop {
    shared: Arc<Shared>,
    stop: Arc<StopFlag>,
    thread: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
    /// Told by the writer thread once it wrote everything and ended.
    writer_done: Option<Receiver<()>>,
}

/// How the loop is to stop: 0 running, 1 once its output pipes are all closed, 2 now.
struct StopFlag(AtomicUsize);

const RUNNING: usize = 0;
const AFTER_OUTPUT: usize = 1;
const NOW: usize = 2;

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_nonblocking(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; only its status flags change.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A descriptor that becomes readable when process `pid` exits (`pidfd_open(2)`).
fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just created (close-on-exec) and is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

impl IoLoop {
    /// Starts the loop (and its output writer), serving `sockets`.
    pub fn start(
        sockets: Vec<Socket>,
        events: Sender<Event>,
        style: OutputStyle,
    ) -> std::io::Result<IoLoop> {
        IoLoop::start_with(sockets, events, true, style)
    }

    /// [`IoLoop::start`]; `pidfds` false: as on a kernel without them (tests).
    fn start_with(
        sockets: Vec<Socket>,
        events: Sender<Event>,
        pidfds: bool,
        style: OutputStyle,
    ) -> std::io::Result<IoLoop> {
        let (wake_r, wake_w) = pipe()?;
        let shared = Arc::new(Shared {
            cmds: Mutex::new(Vec::new()),
            wake: wake_w,
            wake_r,
        });
        let stop = Arc::new(StopFlag(AtomicUsize::new(RUNNING)));
        let queued = Arc::new(AtomicUsize::new(0));
        let (out_tx, out_rx) = std::sync::mpsc::channel::<(u32, bool, Vec<u8>)>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let writer = {
            let (queued, shared) = (queued.clone(), shared.clone());
            std::thread::Builder::new()
                .name("dynres-output".into())
                .spawn(move || {
                    write_output(&out_rx, &queued, &shared, Sink::new(style));
                    let _ = done_tx.send(());
                })?
        };
        for c in &sockets {
            // After poll says "readable" the connection may be gone already (the peer
            // gave up): accept must then not block.
            c.listener.set_nonblocking(true)?;
        }
        let mut reactor = Reactor {
            events,
            shared: shared.clone(),
            stop: stop.clone(),
            sockets: sockets
                .into_iter()
                .map(|c| Listening {
                    c,
                    paused_until: None,
                    throttle: Throttle::new(),
                })
                .collect(),
            hellos: Vec::new(),
            clients: HashMap::new(),
            tools: HashMap::new(),
            links: Vec::new(),
            outputs: Vec::new(),
            children: Vec::new(),
            out: out_tx,
            queued,
            pidfds,
            no_pidfd: false,
            next_child: 0,
            stdin: None,
        };
        let thread = std::thread::Builder::new()
            .name("dynres-io".into())
            .spawn(move || reactor.run())?;
        Ok(IoLoop {
            shared,
            stop,
            thread: Some(thread),
            writer: Some(writer),
            writer_done: Some(done_rx),
        })
    }

    /// A handle for the launcher threads and the engine.
    pub fn handle(&self) -> Handle {
        Handle {
            shared: self.shared.clone(),
        }
    }

    /// Stops the loop. `wait_output`: first forward the output of every process until
    /// its pipes close (each at most [`DRAIN_AFTER_EXIT`] after its exit) and write it
    /// out; else stop at once, and give the writer a moment for what it holds.
    pub fn finish(mut self, wait_output: bool) {
        self.stop_now(wait_output);
    }

    fn stop_now(&mut self, wait_output: bool) {
        let how = if wait_output { AFTER_OUTPUT } else { NOW };
        self.stop.0.store(how, Ordering::SeqCst);
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The loop dropped its sender: the writer ends once it wrote what it holds.
        if let Some(done) = self.writer_done.take() {
            let finished = if wait_output {
                done.recv().is_ok()
            } else {
                done.recv_timeout(Duration::from_secs(1)).is_ok()
            };
            if let (true, Some(w)) = (finished, self.writer.take()) {
                let _ = w.join();
            }
        }
    }
}

impl Drop for IoLoop {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop_now(false);
        }
    }
}

/// The writer thread: writes forwarded lines in the order the loop read them, one
/// write per line so that lines of different ranks do not interleave, as `sink` shows
/// them (`crate::output`).
fn write_output(
    rx: &Receiver<(u32, bool, Vec<u8>)>,
    queued: &AtomicUsize,
    shared: &Shared,
    mut sink: Sink,
) {
    for (rank, to_stderr, line) in rx {
        sink.write(rank, to_stderr, &line);
        let before = queued.fetch_sub(line.len(), Ordering::SeqCst);
        if before >= OUTPUT_QUEUED && before - line.len() < OUTPUT_QUEUED {
            // The loop stopped reading the pipes: it may go on.
            shared.wake();
        }
    }
}

struct Listening {
    c: Socket,
    paused_until: Option<Instant>,
    throttle: Throttle,
}

/// A connection that has not presented its hello yet.
struct Hello {
    /// Its socket's index in `Reactor::sockets`.
    socket: usize,
    s: UnixStream,
    buf: Vec<u8>,
    deadline: Instant,
}

/// An authenticated client's control connection, or a rank's PMI socket.
struct Client {
    rank: u32,
    s: UnixStream,
    /// `None`: a PMI socket, whose bytes go to the engine as they come.
    frames: Option<FrameReader>,
    want_write: bool,
}

/// Most bytes read from one PMI socket per turn of the loop, so that a rank that
/// writes without end does not starve the others (its session refuses overlong input).
const PMI_READ_BUDGET: usize = 64 << 10;

/// A tool's connection, after its hello.
struct Tool {
    s: UnixStream,
    state: ToolState,
    /// When the current state gives up.
    deadline: Instant,
    limits: Limits,
}

enum ToolState {
    /// Reading the command line.
    Line(Vec<u8>),
    /// The engine has the command.
    Waiting,
    /// Writing the answer: the bytes, and how many are written.
    Answer(Vec<u8>, usize),
}

/// What a tool sent as its command, so far.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// The line (without its newline; or what came before the end of the stream).
    Text(String),
    /// More than the limit without a newline.
    TooLong,
    /// Not UTF-8.
    NotText,
    /// Closed before anything came.
    Nothing,
}

/// The command line in `buf` (what a tool sent, `ended`: and then closed), if it is
/// complete; at most `max` bytes before its newline.
fn line_of(buf: &[u8], max: usize, ended: bool) -> Option<Line> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_or(Line::NotText, Line::Text);
    match buf.iter().position(|&b| b == b'\n') {
        Some(i) if i <= max => Some(text(&buf[..i])),
        _ if buf.len() > max => Some(Line::TooLong),
        None if ended && buf.is_empty() => Some(Line::Nothing),
        None if ended => Some(text(buf)),
        _ => None,
    }
}

/// Reads what is there of a tool's command line into `buf` (never more than `max + 1`
/// bytes in all, whatever the tool sends): the line once it is complete.
fn read_line(s: &mut UnixStream, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Option<Line>> {
    let mut chunk = [0u8; 512];
    loop {
        let want = chunk.len().min(max + 1 - buf.len());
        match s.read(&mut chunk[..want]) {
            Ok(0) => return Ok(line_of(buf, max, true)),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if let Some(l) = line_of(buf, max, false) {
                    return Ok(Some(l));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// One output pipe of a rank.
struct Output {
    rank: u32,
    /// Which launched process (the loop's own count), to find its pipes at its exit.
    child: u64,
    pipe: std::fs::File,
    to_stderr: bool,
    pending: Vec<u8>,
    /// Once its process exited: when forwarding stops even if the pipe stays open.
    until: Option<Instant>,
}

/// A launched process not yet reaped.
struct Kid {
    rank: u32,
    id: u64,
    proc: std::process::Child,
    /// `None`: no pidfd (the SIGCHLD reaper looks after it).
    pidfd: Option<OwnedFd>,
}

/// What one entry of the poll set stands for.
#[derive(Clone, Copy)]
enum Token {
    Wake,
    Signals,
    Listener(usize),
    Hello(usize),
    Client(u64),
    Tool(u64),
    Link(usize),
    Output(usize),
    Kid(usize),
    StdinIn,
    StdinRoom,
}

struct Reactor {
    events: Sender<Event>,
    shared: Arc<Shared>,
    stop: Arc<StopFlag>,
    sockets: Vec<Listening>,
    hellos: Vec<Hello>,
    clients: HashMap<u64, Client>,
    tools: HashMap<u64, Tool>,
    /// Links waited on for writability: node, a copy of the socket.
    links: Vec<(u32, OwnedFd)>,
    outputs: Vec<Output>,
    children: Vec<Kid>,
    out: Sender<(u32, bool, Vec<u8>)>,
    queued: Arc<AtomicUsize>,
    /// Whether to try pidfds at all.
    pidfds: bool,
    /// Some process has no pidfd: SIGCHLD is watched and exits are polled for.
    no_pidfd: bool,
    next_child: u64,
    /// The runtime's stdin forwarded to rank 0, while both are open.
    stdin: Option<Forward>,
}

impl Reactor {
    fn run(&mut self) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut tokens: Vec<Token> = Vec::new();
        loop {
            self.take_cmds();
            match self.stop.0.load(Ordering::SeqCst) {
                RUNNING => {}
                AFTER_OUTPUT => {
                    self.stop_serving();
                    if self.outputs.is_empty() && self.tools.is_empty() {
                        break;
                    }
                }
                _ => {
                    self.stop_serving();
                    // Answers go out if the tools take them now.
                    let ids: Vec<u64> = self.tools.keys().copied().collect();
                    for id in ids {
                        self.on_tool(id);
                    }
                    // What is in the pipes now still goes out.
                    for i in (0..self.outputs.len()).rev() {
                        self.read_output(i, usize::MAX);
                    }
                    for o in std::mem::take(&mut self.outputs) {
                        self.flush_partial(&o);
                    }
                    break;
                }
            }
            let now = Instant::now();
            let timeout = self.build(&mut fds, &mut tokens, now);
            let ms = timeout.map_or(-1, |t| {
                // Rounded up: a deadline 0.4 ms away must not spin with a 0 ms timeout.
                let ms = t.as_micros().div_ceil(1000);
                ms.min(i32::MAX as u128) as i32
            });
            // SAFETY: `fds` holds valid pollfd structures for the duration of the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != ErrorKind::Interrupted {
                    tracing::error!(error = %e, "poll failed in the I/O loop");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            // Removals by index go from the back, so that earlier indices stay valid.
            for k in (0..fds.len()).rev() {
                let revents = fds[k].revents;
                if revents == 0 {
                    continue;
                }
                match tokens[k] {
                    Token::Wake => drain_fd(self.shared.wake_r.as_raw_fd()),
                    Token::Signals => {
                        signals::drain();
                        let _ = self.events.send(Event::Signal);
                    }
                    Token::Listener(i) => self.accept(i),
                    Token::Hello(i) => self.on_hello(i),
                    Token::Client(conn) => self.on_client(conn, revents),
                    Token::Tool(id) => self.on_tool(id),
                    Token::Link(i) => {
                        let (node, _) = self.links.swap_remove(i);
                        let _ = self.events.send(Event::LinkWritable { node });
                    }
                    Token::Output(i) => self.read_output(i, READ_PER_TURN),
                    Token::Kid(i) => self.reap(i),
                    Token::StdinIn => {
                        if !self.stdin.as_mut().is_some_and(Forward::on_input) {
                            self.stdin = None;
                        }
                    }
                    Token::StdinRoom => {
                        if !self.stdin.as_mut().is_some_and(Forward::on_room) {
                            self.stdin = None;
                        }
                    }
                }
            }
            if self.no_pidfd {
                // Woken by SIGCHLD, by its poll deadline, or by anything else: a
                // non-blocking wait per process without a pidfd costs little.
                self.reap_polled();
            }
            self.expire(Instant::now());
        }
    }

    fn take_cmds(&mut self) {
        let cmds = match self.shared.cmds.lock() {
            Ok(mut q) => std::mem::take(&mut *q),
            Err(_) => return,
        };
        for cmd in cmds {
            match cmd {
                Cmd::Child {
                    rank,
                    proc,
                    stdout,
                    stderr,
                } => self.add_child(rank, proc, stdout, stderr),
                Cmd::WatchWrite(conn) => {
                    if let Some(c) = self.clients.get_mut(&conn) {
                        c.want_write = true;
                    }
                }
                Cmd::WatchLink { node, fd } => self.links.push((node, fd)),
                Cmd::Stdin(pipe) => match Forward::new(pipe) {
                    Ok(f) => self.stdin = Some(f),
                    Err(e) => tracing::warn!("cannot forward stdin to rank 0: {e}"),
                },
                Cmd::Pmi { rank, fd } => self.admit_pmi(rank, fd),
                Cmd::ToolAnswer { id, text } => {
                    let ended = || "error: the job ended\n".to_string();
                    self.answer(id, text.unwrap_or_else(ended));
                }
            }
        }
    }

    fn add_child(
        &mut self,
        rank: u32,
        proc: std::process::Child,
        stdout: Option<OwnedFd>,
        stderr: Option<OwnedFd>,
    ) {
        let id = self.next_child;
        self.next_child += 1;
        let opened = if self.pidfds {
            pidfd_open(proc.id())
        } else {
            Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
        };
        let pidfd = match opened {
            Ok(fd) => Some(fd),
            Err(e) => {
                if !self.no_pidfd {
                    tracing::debug!(error = %e, "no pidfd: exits are found through SIGCHLD");
                    self.no_pidfd = true;
                    signals::watch_children();
                }
                None
            }
        };
        for (to_stderr, pipe) in [(false, stdout), (true, stderr)] {
            let Some(pipe) = pipe else { continue };
            if let Err(e) = set_nonblocking(pipe.as_raw_fd()) {
                // A blocking read would stall every connection; its output is lost
                // instead (the rank then blocks on a full pipe, and is seen to hang).
                tracing::error!(rank, error = %e, "cannot read rank {rank}'s output");
                continue;
            }
            self.outputs.push(Output {
                rank,
                child: id,
                pipe: std::fs::File::from(pipe),
                to_stderr,
                pending: Vec::new(),
                until: None,
            });
        }
        self.children.push(Kid {
            rank,
            id,
            proc,
            pidfd,
        });
        if self.no_pidfd {
            // It may have exited before SIGCHLD was watched.
            self.reap_polled();
        }
    }

    /// No more connections: the job is over.
    fn stop_serving(&mut self) {
        self.sockets.clear();
        self.links.clear();
        // Tools still waiting learn that the job ended; no answer holds the end long.
        let bound = Instant::now() + STOP_ANSWER;
        let waiting: Vec<u64> = self
            .tools
            .iter()
            .filter(|(_, t)| !matches!(t.state, ToolState::Answer(..)))
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            self.answer(id, "error: the job ended\n".into());
        }
        for t in self.tools.values_mut() {
            t.deadline = t.deadline.min(bound);
        }
        self.hellos.clear();
        for (_, c) in self.clients.drain() {
            let _ = c.s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Fills the poll set; the time until the next deadline, if any.
    fn build(
        &mut self,
        fds: &mut Vec<libc::pollfd>,
        tokens: &mut Vec<Token>,
        now: Instant,
    ) -> Option<Duration> {
        fds.clear();
        tokens.clear();
        let mut add = |fd: RawFd, events: libc::c_short, t: Token| {
            fds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            });
            tokens.push(t);
        };
        let mut next: Option<Instant> = None;
        let mut at = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        add(self.shared.wake_r.as_raw_fd(), libc::POLLIN, Token::Wake);
        if let Some(fd) = signals::wake_fd() {
            add(fd.as_raw_fd(), libc::POLLIN, Token::Signals);
        }
        for (i, l) in self.sockets.iter_mut().enumerate() {
            match l.paused_until {
                Some(t) if t > now => at(t),
                _ => {
                    l.paused_until = None;
                    add(l.c.listener.as_raw_fd(), libc::POLLIN, Token::Listener(i));
                }
            }
        }
        for (i, h) in self.hellos.iter().enumerate() {
            add(h.s.as_raw_fd(), libc::POLLIN, Token::Hello(i));
            at(h.deadline);
        }
        for (id, c) in &self.clients {
            let ev = if c.want_write {
                libc::POLLIN | libc::POLLOUT
            } else {
                libc::POLLIN
            };
            add(c.s.as_raw_fd(), ev, Token::Client(*id));
        }
        for (id, t) in &self.tools {
            match t.state {
                ToolState::Line(_) => add(t.s.as_raw_fd(), libc::POLLIN, Token::Tool(*id)),
                ToolState::Answer(..) => add(t.s.as_raw_fd(), libc::POLLOUT, Token::Tool(*id)),
                ToolState::Waiting => {}
            }
            at(t.deadline);
        }
        for (i, (_, fd)) in self.links.iter().enumerate() {
            add(fd.as_raw_fd(), libc::POLLOUT, Token::Link(i));
        }
        let reading = self.queued.load(Ordering::SeqCst) < OUTPUT_QUEUED;
        for (i, o) in self.outputs.iter().enumerate() {
            if reading {
                add(o.pipe.as_raw_fd(), libc::POLLIN, Token::Output(i));
            }
            if let Some(t) = o.until {
                at(t);
            }
        }
        for (i, k) in self.children.iter().enumerate() {
            if let Some(fd) = &k.pidfd {
                add(fd.as_raw_fd(), libc::POLLIN, Token::Kid(i));
            }
        }
        match self.stdin.as_ref().map(Forward::want) {
            Some(Want::Input(fd)) => add(fd, libc::POLLIN, Token::StdinIn),
            Some(Want::Room(fd)) => add(fd, libc::POLLOUT, Token::StdinRoom),
            None => {}
        }
        if self.no_pidfd && self.children.iter().any(|k| k.pidfd.is_none()) {
            at(now + REAP_POLL);
        }
        next.map(|t| t.saturating_duration_since(now))
    }

    /// Connections served (or being authenticated) on socket `i`.
    fn served(&self, i: usize) -> usize {
        let hellos = self.hellos.iter().filter(|h| h.socket == i).count();
        hellos
            + match self.sockets[i].c.kind {
                Kind::Control => self.clients.len(),
                Kind::Tool => self.tools.len(),
            }
    }

    fn accept(&mut self, i: usize) {
        loop {
            let served = self.served(i);
            let l = &mut self.sockets[i];
            let kind = l.c.kind;
            match l.c.listener.accept() {
                Ok((s, _)) => {
                    if served >= l.c.limits.max_conns {
                        l.throttle.warn(
                            kind,
                            "too many connections: closed a new one",
                            &format_args!("limit {}", l.c.limits.max_conns),
                        );
                        continue;
                    }
                    if let Err(e) = s.set_nonblocking(true) {
                        l.throttle
                            .warn(kind, "cannot serve a connection: closed it", &e);
                        continue;
                    }
                    let deadline = Instant::now() + l.c.limits.hello_timeout;
                    self.hellos.push(Hello {
                        socket: i,
                        s,
                        buf: Vec::with_capacity(80),
                        deadline,
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    l.throttle.warn(kind, "cannot accept a connection", &e);
                    l.paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                    return;
                }
            }
        }
    }

    /// Reads what is there of hello `i` — never past its end: the frames after it are
    /// the client connection's — and, once it is whole (or cannot be one), admits or
    /// refuses it.
    fn on_hello(&mut self, i: usize) {
        let socket = self.hellos[i].socket;
        let Some((kind, secret)) = self
            .sockets
            .get(socket)
            .map(|l| (l.c.kind, l.c.secret.clone()))
        else {
            return;
        };
        let h = &mut self.hellos[i];
        let peer = loop {
            // A wrong magic is refused after its first 6 bytes, as a blocking read of
            // the hello did; `Err` is a hello not all there yet.
            if h.buf.len() >= 6 {
                if let Ok(p) = read_hello(&mut h.buf.as_slice(), &secret) {
                    break p;
                }
            }
            // "DRHI" | kind | secret_len | secret | rank u32 (`dynres_client::auth`).
            let need = match h.buf.get(5) {
                Some(len) => 6 + usize::from(*len) + 4,
                None => 6,
            };
            let mut chunk = [0u8; 300];
            match h.s.read(&mut chunk[..need - h.buf.len()]) {
                Ok(0) => {
                    tracing::debug!(socket = ?kind, "connection closed before its hello");
                    self.hellos.swap_remove(i);
                    return;
                }
                Ok(n) => h.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::debug!(socket = ?kind, error = %e, "connection closed before its hello");
                    self.hellos.swap_remove(i);
                    return;
                }
            }
        };
        let h = self.hellos.swap_remove(i);
        match (kind, peer) {
            (_, None) => {
                tracing::warn!(socket = ?kind, "refused a connection: wrong secret or malformed hello");
            }
            (Kind::Control, Some(Peer::Client(rank))) => self.admit(h.s, rank),
            (Kind::Tool, Some(Peer::Tool)) => {
                let limits = self.sockets[socket].c.limits;
                self.admit_tool(h.s, limits);
            }
            _ => tracing::warn!(socket = ?kind, "refused a connection: wrong kind of peer"),
        }
    }

    fn admit_tool(&mut self, mut s: UnixStream, limits: Limits) {
        // One byte into a new socket's empty buffer: it does not block.
        if !matches!(s.write(&[HELLO_OK]), Ok(1)) {
            return;
        }
        let id = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
        self.tools.insert(
            id,
            Tool {
                s,
                state: ToolState::Line(Vec::with_capacity(128)),
                deadline: Instant::now() + limits.line_timeout,
                limits,
            },
        );
    }

    /// Tool `id`'s socket is ready (or its stop came): reads its command line, or
    /// writes its answer.
    fn on_tool(&mut self, id: u64) {
        let Some(t) = self.tools.get_mut(&id) else {
            return;
        };
        match &mut t.state {
            ToolState::Waiting => {}
            ToolState::Line(buf) => {
                let max = t.limits.max_line;
                match read_line(&mut t.s, buf, max) {
                    Ok(None) => {}
                    Ok(Some(Line::Text(line))) => {
                        t.state = ToolState::Waiting;
                        t.deadline = Instant::now() + t.limits.answer_timeout;
                        let reply = ToolReply(Reply::Loop {
                            id,
                            shared: self.shared.clone(),
                            sent: false,
                        });
                        // A failed send drops the reply: "the job ended".
                        let _ = self.events.send(Event::Tool { line, reply });
                    }
                    Ok(Some(Line::Nothing)) => {
                        self.tools.remove(&id);
                    }
                    Ok(Some(Line::TooLong)) => {
                        tracing::warn!(limit = max, "tool command too long; closed");
                        self.answer(id, "error: command too long\n".into());
                    }
                    Ok(Some(Line::NotText)) => {
                        self.answer(id, "error: command is not text\n".into());
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "tool connection failed before its command");
                        self.tools.remove(&id);
                    }
                }
            }
            ToolState::Answer(text, done) => {
                let finished = loop {
                    match t.s.write(&text[*done..]) {
                        Ok(n) => {
                            *done += n;
                            if *done == text.len() {
                                break true;
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                        Err(e) => {
                            tracing::debug!(error = %e, "tool answer not delivered");
                            break true;
                        }
                    }
                };
                if finished {
                    if let Some(t) = self.tools.remove(&id) {
                        let _ = t.s.shutdown(std::net::Shutdown::Both);
                    }
                }
            }
        }
    }

    /// Starts writing `text` to tool `id` (if it still waits for an answer), within its
    /// write timeout, and then closes it.
    fn answer(&mut self, id: u64, text: String) {
        let Some(t) = self.tools.get_mut(&id) else {
            return;
        };
        if matches!(t.state, ToolState::Answer(..)) {
            return;
        }
        t.state = ToolState::Answer(text.into_bytes(), 0);
        t.deadline = Instant::now() + t.limits.write_timeout;
        // Most answers fit the socket's buffer: written now, without a turn of the loop.
        self.on_tool(id);
    }

    fn admit(&mut self, s: UnixStream, rank: u32) {
        self.serve(s, rank, Some(FrameReader::new()), |conn, stream| {
            Event::Hello { conn, rank, stream }
        });
    }

    /// A rank's PMI socket: no hello (the socket is its rank's alone, PMIS-2).
    fn admit_pmi(&mut self, rank: u32, fd: OwnedFd) {
        let s = UnixStream::from(fd);
        if s.set_nonblocking(true).is_err() {
            return;
        }
        self.serve(s, rank, None, |conn, stream| Event::PmiUp {
            conn,
            rank,
            stream,
        });
    }

    /// Serves `s` as `rank`'s connection (`frames` `None`: a PMI socket): the engine
    /// gets `up` with a copy of it for its replies first, so its bytes come after.
    fn serve(
        &mut self,
        s: UnixStream,
        rank: u32,
        frames: Option<FrameReader>,
        up: impl FnOnce(u64, UnixStream) -> Event,
    ) {
        let conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
        let Ok(w) = s.try_clone() else { return };
        if self.events.send(up(conn, w)).is_err() {
            return;
        }
        self.clients.insert(
            conn,
            Client {
                rank,
                s,
                frames,
                want_write: false,
            },
        );
    }

    /// Reads what a PMI socket holds (up to [`PMI_READ_BUDGET`]); whether it ended.
    fn read_pmi(&mut self, conn: u64) -> bool {
        let Some(c) = self.clients.get_mut(&conn) else {
            return false;
        };
        let mut got = Vec::new();
        let mut chunk = [0u8; 8192];
        let ended = loop {
            if got.len() >= PMI_READ_BUDGET {
                break false;
            }
            match c.s.read(&mut chunk) {
                Ok(0) => break true,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break true,
            }
        };
        if !got.is_empty() {
            let _ = self.events.send(Event::PmiBytes { conn, bytes: got });
        }
        ended
    }

    fn on_client(&mut self, conn: u64, revents: libc::c_short) {
        let Some(c) = self.clients.get_mut(&conn) else {
            return;
        };
        if c.want_write && revents & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0 {
            c.want_write = false;
            let _ = self.events.send(Event::Writable { conn });
        }
        if revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) == 0 {
            return;
        }
        let (rank, raw) = (c.rank, c.frames.is_none());
        let closed = if raw {
            self.read_pmi(conn)
        } else {
            self.read_frames(conn, rank)
        };
        if closed {
            if let Some(c) = self.clients.remove(&conn) {
                let _ = c.s.shutdown(std::net::Shutdown::Both);
            }
            let _ = self.events.send(Event::Gone { conn });
        }
    }

    /// Reads the frames a control connection holds; whether it ended (or broke).
    fn read_frames(&mut self, conn: u64, rank: u32) -> bool {
        let Some(c) = self.clients.get_mut(&conn) else {
            return false;
        };
        let Some(frames) = c.frames.as_mut() else {
            return false;
        };
        loop {
            let frame = match frames.next(&mut c.s) {
                Ok(Ok(Frame::Frame(f))) => f,
                Ok(Ok(Frame::Closed)) => break true,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break true,
                Ok(Err(e)) => {
                    tracing::warn!(rank, error = %e, "malformed frame; closing the connection");
                    break true;
                }
            };
            match decode_client(&frame) {
                Ok((req, request)) => {
                    let _ = self.events.send(Event::Request { conn, req, request });
                }
                Err(e) => {
                    tracing::warn!(rank, error = %e, "undecodable request; closing the connection");
                    break true;
                }
            }
        }
    }

    /// Reads up to `budget` bytes of output `i` and forwards its whole lines; at its
    /// end, forwards the rest and forgets it.
    fn read_output(&mut self, i: usize, budget: usize) {
        let o = &mut self.outputs[i];
        let mut chunk = [0u8; 8192];
        let mut read = 0;
        let ended = loop {
            if read >= budget {
                break false;
            }
            match o.pipe.read(&mut chunk) {
                Ok(0) => break true,
                Ok(k) => {
                    read += k;
                    o.pending.extend_from_slice(&chunk[..k]);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                Err(_) => break true,
            }
        };
        let o = &mut self.outputs[i];
        let mut lines = Vec::new();
        let mut start = 0;
        while let Some(n) = o.pending[start..].iter().position(|&b| b == b'\n') {
            lines.push(start..start + n + 1);
            start += n + 1;
        }
        let (rank, to_stderr) = (o.rank, o.to_stderr);
        let pending = std::mem::take(&mut o.pending);
        for r in lines {
            self.emit(rank, to_stderr, &pending[r]);
        }
        let mut rest = pending[start..].to_vec();
        // Output without newlines (binary, a progress bar) is not held in memory
        // without bound: it goes out in pieces.
        if rest.len() >= MAX_LINE {
            self.emit(rank, to_stderr, &rest);
            rest.clear();
        }
        self.outputs[i].pending = rest;
        if ended {
            let o = self.outputs.swap_remove(i);
            self.flush_partial(&o);
        }
    }

    fn flush_partial(&self, o: &Output) {
        if !o.pending.is_empty() {
            self.emit(o.rank, o.to_stderr, &o.pending);
        }
    }

    fn emit(&self, rank: u32, to_stderr: bool, line: &[u8]) {
        self.queued.fetch_add(line.len(), Ordering::SeqCst);
        let _ = self.out.send((rank, to_stderr, line.to_vec()));
    }

    /// Process `i`'s pidfd is readable: it exited.
    fn reap(&mut self, i: usize) {
        match self.children[i].proc.try_wait() {
            Ok(None) => {}
            Ok(Some(status)) => self.exited(i, Ok(status)),
            Err(e) => self.exited(i, Err(e)),
        }
    }

    /// Without pidfds: looks at every process that has none.
    fn reap_polled(&mut self) {
        for i in (0..self.children.len()).rev() {
            if self.children[i].pidfd.is_none() {
                self.reap(i);
            }
        }
    }

    fn exited(&mut self, i: usize, status: std::io::Result<std::process::ExitStatus>) {
        let k = self.children.swap_remove(i);
        let until = Instant::now() + DRAIN_AFTER_EXIT;
        for o in self.outputs.iter_mut().filter(|o| o.child == k.id) {
            o.until = Some(until);
        }
        let _ = self.events.send(Event::Exited {
            rank: k.rank,
            status,
        });
    }

    /// Drops hellos past their deadline and output of exited processes past its drain.
    fn expire(&mut self, now: Instant) {
        let before = self.hellos.len();
        self.hellos.retain(|h| h.deadline > now);
        for _ in self.hellos.len()..before {
            tracing::debug!("connection closed before its hello: no hello in time");
        }
        let late: Vec<u64> = self
            .tools
            .iter()
            .filter(|(_, t)| t.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            let Some(t) = self.tools.get(&id) else {
                continue;
            };
            match t.state {
                ToolState::Line(_) => {
                    tracing::debug!("tool sent no command in time; closed");
                    self.answer(id, "error: no command received in time\n".into());
                }
                ToolState::Waiting => {
                    self.answer(id, "error: no answer from the job in time\n".into());
                }
                ToolState::Answer(..) => {
                    tracing::debug!("tool answer not delivered in time");
                    self.tools.remove(&id);
                }
            }
        }
        for i in (0..self.outputs.len()).rev() {
            if self.outputs[i].until.is_some_and(|t| t <= now) {
                let o = self.outputs.swap_remove(i);
                tracing::debug!(
                    rank = o.rank,
                    "rank {} exited; output its descendants still write is dropped",
                    o.rank
                );
                self.flush_partial(&o);
            }
        }
    }
}

fn drain_fd(fd: RawFd) {
    let mut buf = [0u8; 64];
    // SAFETY: reads into a valid buffer from a non-blocking descriptor we own.
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynres_client::auth::{HELLO_OK, encode_hello};
    use dynres_core::rc::ClientRequest;
    use dynres_core::rc::wire::encode_client;
    use std::process::{Command, Stdio};
    use std::sync::mpsc::RecvTimeoutError;

    const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const LIMIT: Duration = Duration::from_secs(30);

    fn next(rx: &Receiver<Event>) -> Event {
        loop {
            match rx.recv_timeout(LIMIT) {
                // Signals of other tests' children (SIGCHLD) may wake the loop.
                Ok(Event::Signal) => {}
                Ok(ev) => return ev,
                Err(e) => panic!("no event: {e}"),
            }
        }
    }

    fn spawn(script: &str) -> std::process::Child {
        Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Exits are reported once, with their status and rank, through pidfds and, where
    /// there are none, through SIGCHLD and polling; the loop ends once the output of
    /// every process is forwarded.
    fn exits_are_reported(pidfds: bool) {
        let (tx, rx) = std::sync::mpsc::channel();
        let io = IoLoop::start_with(Vec::new(), tx, pidfds, OutputStyle::default()).unwrap();
        let h = io.handle();
        for (rank, script) in [(3, "exit 7"), (4, "sleep 0.2; exit 3")] {
            let mut p = spawn(script);
            let (o, e) = (
                p.stdout.take().map(OwnedFd::from),
                p.stderr.take().map(OwnedFd::from),
            );
            h.add_child(rank, p, o, e);
        }
        let mut got = Vec::new();
        for _ in 0..2 {
            match next(&rx) {
                Event::Exited { rank, status } => got.push((rank, status.unwrap().code())),
                other => panic!("unexpected {other:?}"),
            }
        }
        got.sort();
        assert_eq!(got, [(3, Some(7)), (4, Some(3))]);
        io.finish(true);
        assert!(matches!(
            rx.recv_timeout(Duration::from_millis(100)),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected)
        ));
    }

    #[test]
    fn exits_are_reported_through_pidfds() {
        exits_are_reported(true);
    }

    #[test]
    fn exits_are_reported_without_pidfds() {
        exits_are_reported(false);
    }

    fn sock(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("dynres-io-{}-{name}.sock", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    fn serve(path: &std::path::Path, kind: Kind, limits: Limits) -> (IoLoop, Receiver<Event>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let socket = Socket {
            listener: UnixListener::bind(path).unwrap(),
            kind,
            limits,
            secret: SECRET.into(),
        };
        (
            IoLoop::start(vec![socket], tx, OutputStyle::default()).unwrap(),
            rx,
        )
    }

    fn limits(max_conns: usize, hello_timeout: Duration) -> Limits {
        Limits {
            max_conns,
            hello_timeout,
            line_timeout: Duration::from_secs(60),
            max_line: 64,
            answer_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
        }
    }

    /// What the loop does with a connection: closed (`None`) or admitted.
    fn closed(s: &mut UnixStream) -> bool {
        s.set_read_timeout(Some(LIMIT)).unwrap();
        let mut b = [0u8; 1];
        matches!(s.read(&mut b), Ok(0) | Err(_))
    }

    /// A client's hello, sent in pieces, is admitted; its frames become requests, its
    /// end `Gone`; write interest is answered by `Writable`. A wrong secret, a foreign
    /// protocol and a silent connection are closed.
    #[test]
    fn control_connections_are_served_without_a_thread_each() {
        let path = sock("ctl");
        let (io, rx) = serve(
            &path,
            Kind::Control,
            limits(4096, Duration::from_millis(300)),
        );
        let mut c = UnixStream::connect(&path).unwrap();
        let hello = encode_hello(SECRET, Peer::Client(5));
        c.write_all(&hello[..3]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        c.write_all(&hello[3..]).unwrap();
        let (conn, stream) = match next(&rx) {
            Event::Hello { conn, rank, stream } => {
                assert_eq!(rank, 5);
                (conn, stream)
            }
            other => panic!("unexpected {other:?}"),
        };
        // The engine answers the hello on its copy of the stream.
        (&stream).write_all(&[HELLO_OK]).unwrap();
        let mut ok = [0u8; 1];
        c.read_exact(&mut ok).unwrap();
        let frame = encode_client(9, &ClientRequest::Query { bound: None });
        // Two frames in one write, then one in two pieces.
        let two = [frame.clone(), frame.clone()].concat();
        c.write_all(&two).unwrap();
        c.write_all(&frame[..4]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        c.write_all(&frame[4..]).unwrap();
        for _ in 0..3 {
            match next(&rx) {
                Event::Request { conn: k, req, .. } => assert_eq!((k, req), (conn, 9)),
                other => panic!("unexpected {other:?}"),
            }
        }
        io.handle().watch_write(conn);
        assert!(matches!(next(&rx), Event::Writable { conn: k } if k == conn));
        // A link (any socket) is watched on a copy of its descriptor.
        let (link, _peer) = UnixStream::pair().unwrap();
        io.handle()
            .watch_link(7, std::os::fd::AsFd::as_fd(&link))
            .unwrap();
        assert!(matches!(next(&rx), Event::LinkWritable { node: 7 }));
        drop(c);
        assert!(matches!(next(&rx), Event::Gone { conn: k } if k == conn));

        let mut wrong = UnixStream::connect(&path).unwrap();
        wrong
            .write_all(&encode_hello(&"ff".repeat(32), Peer::Client(1)))
            .unwrap();
        assert!(closed(&mut wrong), "a wrong secret was served");
        let mut http = UnixStream::connect(&path).unwrap();
        http.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        assert!(closed(&mut http), "a foreign protocol was served");
        let mut silent = UnixStream::connect(&path).unwrap();
        assert!(closed(&mut silent), "a silent connection was kept");
        assert!(matches!(
            rx.recv_timeout(Duration::from_millis(100)),
            Err(RecvTimeoutError::Timeout) | Ok(Event::Signal)
        ));
        io.finish(true);
        let _ = std::fs::remove_file(&path);
    }

    fn tool_conn(path: &std::path::Path) -> UnixStream {
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(LIMIT)).unwrap();
        s.write_all(&encode_hello(SECRET, Peer::Tool)).unwrap();
        let mut ok = [0u8; 1];
        s.read_exact(&mut ok).unwrap();
        assert_eq!(ok[0], HELLO_OK);
        s
    }

    /// What the loop wrote before it closed. Closing a Unix socket with unread input
    /// makes the peer's read end in ECONNRESET instead of EOF (after the data), so both
    /// count as the end.
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
        let r = |b: &[u8], ended| line_of(b, 64, ended);
        assert_eq!(r(b"status\nrest", false), Some(Line::Text("status".into())));
        assert_eq!(r(b"status", true), Some(Line::Text("status".into())));
        assert_eq!(r(b"status", false), None);
        assert_eq!(r(b"", true), Some(Line::Nothing));
        assert_eq!(r(&[b'x'; 65], false), Some(Line::TooLong));
        assert_eq!(r(&[b'x'; 64], true), Some(Line::Text("x".repeat(64))));
        assert_eq!(r(&[b'x'; 64], false), None);
        assert_eq!(r(b"\xff\xfe\n", false), Some(Line::NotText));
    }

    /// A tool's command reaches the engine with a reply the engine may answer later,
    /// from anywhere; a command too long is answered by the loop; a dropped reply says
    /// the job ended; and stopping needs no socket path.
    #[test]
    fn tools_are_answered_by_the_loop_and_stop_needs_no_path() {
        let path = sock("answer");
        let (io, rx) = serve(&path, Kind::Tool, limits(8, LIMIT));

        let mut s = tool_conn(&path);
        s.write_all(&[b'x'; 200]).unwrap();
        assert_eq!(rest(s), "error: command too long\n");

        let mut s = tool_conn(&path);
        s.write_all(b"status\n").unwrap();
        let Event::Tool { line, reply } = next(&rx) else {
            panic!("no tool event");
        };
        assert_eq!(line, "status");
        std::thread::spawn(move || reply.send("ok later\n".into()));
        assert_eq!(rest(s), "ok later\n");

        let mut s = tool_conn(&path);
        s.write_all(b"grow 1\n").unwrap();
        let Event::Tool { reply, .. } = next(&rx) else {
            panic!("no tool event");
        };
        drop(reply);
        assert_eq!(rest(s), "error: the job ended\n");

        // A tool still waiting when the loop stops is told the job ended.
        let mut s = tool_conn(&path);
        s.write_all(b"grow 2\n").unwrap();
        let Event::Tool { reply, .. } = next(&rx) else {
            panic!("no tool event");
        };
        // The path is gone (and then taken by someone else): stopping still works.
        std::fs::remove_file(&path).unwrap();
        let _other = UnixListener::bind(&path).unwrap();
        io.finish(true);
        assert_eq!(rest(s), "error: the job ended\n");
        drop(reply);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn connections_beyond_the_cap_are_closed_at_once() {
        let path = sock("cap");
        let (io, _rx) = serve(&path, Kind::Tool, limits(2, LIMIT));
        // Two idle connections (no hello) take both places…
        let idle: Vec<UnixStream> = (0..2)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        // …so a third is closed without waiting for its hello (which would take 30 s).
        let mut third = UnixStream::connect(&path).unwrap();
        assert!(closed(&mut third), "third connection served");
        // The first two are still being served.
        let mut b = [0u8; 1];
        for mut s in idle.iter() {
            s.set_nonblocking(true).unwrap();
            assert!(matches!(s.read(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock));
        }
        // Once they are gone, there is room again.
        drop(idle);
        let deadline = Instant::now() + LIMIT;
        loop {
            let mut s = UnixStream::connect(&path).unwrap();
            s.set_read_timeout(Some(LIMIT)).unwrap();
            // Refused connections are closed at once: the hello may not even go out.
            if s.write_all(&encode_hello(SECRET, Peer::Tool)).is_ok()
                && matches!(s.read(&mut b), Ok(1))
            {
                break;
            }
            assert!(Instant::now() < deadline, "no room after the load was gone");
            std::thread::sleep(Duration::from_millis(10));
        }
        io.finish(true);
        let _ = std::fs::remove_file(&path);
    }
}
