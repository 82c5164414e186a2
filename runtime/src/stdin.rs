//! The runtime's standard input, forwarded to rank 0's (as mpirun does; srun sends it
//! to every task by default). Driven by the I/O loop: it reads the runtime's stdin only
//! when the pipe to rank 0 has room, so nothing is buffered beyond one read, and closes
//! the pipe at end of input so that rank 0 sees it. The runtime's stdin stays blocking
//! (its open file may be the user's terminal, shared with the shell): it is read only
//! after poll said it has data.

use std::io::{ErrorKind, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// One forwarding, from the runtime's stdin to rank 0's.
pub struct Forward {
    to: std::fs::File,
    buf: Vec<u8>,
    at: usize,
    eof: bool,
}

/// What the loop polls next for a forwarding.
pub enum Want {
    /// Data on the runtime's stdin (fd 0).
    Input(RawFd),
    /// Room in the pipe to rank 0.
    Room(RawFd),
}

impl Forward {
    /// Forwards into `to`, rank 0's stdin pipe (made non-blocking here).
    pub fn new(to: OwnedFd) -> std::io::Result<Forward> {
        let fd = to.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own, with flags read just before.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Forward {
            to: std::fs::File::from(to),
            buf: Vec::new(),
            at: 0,
            eof: false,
        })
    }

    /// What to poll for.
    pub fn want(&self) -> Want {
        if self.at < self.buf.len() {
            Want::Room(self.to.as_raw_fd())
        } else {
            Want::Input(0)
        }
    }

    /// The runtime's stdin is readable (or at its end): reads once, then writes what
    /// the pipe takes. `false`: the forwarding is over (end of input written, or rank 0
    /// closed its end) and the pipe is to be dropped.
    pub fn on_input(&mut self) -> bool {
        let mut chunk = [0u8; 64 << 10];
        // SAFETY: reads into a buffer of the length given, from fd 0, which stays open
        // for the process' life; poll said it has data (or is at its end), so it does
        // not block.
        let n = unsafe { libc::read(0, chunk.as_mut_ptr().cast(), chunk.len()) };
        match usize::try_from(n) {
            Ok(0) => self.eof = true,
            Ok(n) => {
                self.buf.clear();
                self.buf.extend_from_slice(&chunk[..n]);
                self.at = 0;
            }
            Err(_) if std::io::Error::last_os_error().kind() == ErrorKind::Interrupted => {
                return true;
            }
            Err(_) => self.eof = true,
        }
        self.on_room()
    }

    /// The pipe to rank 0 has room: writes what is held. `false` as for
    /// [`Forward::on_input`].
    pub fn on_room(&mut self) -> bool {
        while self.at < self.buf.len() {
            match self.to.write(&self.buf[self.at..]) {
                Ok(n) => self.at += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // EPIPE: rank 0 closed its stdin or exited; the rest is not wanted.
                Err(_) => return false,
            }
        }
        !self.eof
    }
}

/// Whether the runtime should forward its stdin: not when it is a terminal of which
/// the runtime is not in the foreground (a job started with `&`): reading it would stop
/// the runtime with SIGTTIN.
pub fn should_forward() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp only read process and terminal state.
    unsafe { libc::isatty(0) == 0 || libc::tcgetpgrp(0) == libc::getpgrp() }
}
