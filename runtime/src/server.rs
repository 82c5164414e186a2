//! What the job's sockets may cost. Each accepted connection must open with a hello
//! carrying the job's secret (else it is closed and logged); then client connections
//! (`control.sock`) carry kernel frames and tool connections (`cli.sock`) one command
//! line. The I/O loop (`ioloop.rs`) serves both, without a thread per connection.
//!
//! Nothing a peer does may stall the engine or the loop: the hello and a tool's command
//! are read with deadlines, a command's length is capped, a tool's answer is written
//! with a deadline, and connections per socket are capped. The loop waits in poll(2) on
//! the listeners and on a pipe of its own, so stopping it works whatever became of the
//! sockets' paths (removed, or replaced by another socket).

use std::time::{Duration, Instant};

/// Which socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `control.sock`: application processes.
    Control,
    /// `cli.sock`: tools.
    Tool,
}

/// Longest tool command accepted: a guest job's data-server request (NAMES-2) is one
/// rc client frame in hex, a key and a value of up to 4 KiB each; the other commands
/// are a few words.
pub const MAX_LINE: usize = 32 * 1024;
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
            // `control.sock` (the job directory is 0700), and a pending hello costs
            // the I/O loop one descriptor, within `max_conns` (`DATA-12`).
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

/// Logs a warning at most once a second, counting the ones it held back: a flood of
/// connections must not become a flood of log lines.
pub(crate) struct Throttle {
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    /// Nothing logged yet.
    pub(crate) fn new() -> Throttle {
        Throttle {
            last: None,
            held: 0,
        }
    }

    /// Logs `what` unless a warning went out less than a second ago.
    pub(crate) fn warn(&mut self, kind: Kind, what: &str, error: &dyn std::fmt::Display) {
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
