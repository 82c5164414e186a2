//! Client connections as the engine sees them. Replies are written without blocking
//! (`MSG_DONTWAIT`): what the socket does not take at once is kept, up to
//! [`MAX_PENDING`] bytes, and flushed once the I/O loop reports the socket writable
//! (links to other nodes: on the engine's next turns). A client that stops reading thus
//! costs the engine nothing but that buffer; past it, the client is disconnected.
//!
//! `MSG_DONTWAIT` instead of `O_NONBLOCK`: a link's reader thread shares the open file
//! description and must keep blocking in `read` (a client's, read by the I/O loop, is
//! non-blocking either way).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use dynres_core::Rank;

/// Most reply bytes kept for a client that does not read.
pub const MAX_PENDING: usize = 16 << 20;

/// One client's control connection (or a node daemon's link: any stream socket).
#[derive(Debug)]
pub struct Conn {
    /// The process' rank (for a daemon link: the node).
    pub rank: Rank,
    stream: OwnedFd,
    pending: Vec<u8>,
}

impl Conn {
    /// Wraps an accepted, authenticated stream (a `UnixStream` or a `TcpStream`).
    pub fn new(rank: Rank, stream: impl Into<OwnedFd>) -> Conn {
        Conn {
            rank,
            stream: stream.into(),
            pending: Vec::new(),
        }
    }

    /// Queues `bytes` behind what is pending and writes what the socket takes now.
    /// An error means the connection must be dropped (it failed, or the client let
    /// more than [`MAX_PENDING`] bytes pile up).
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.pending.is_empty() {
            let n = send_nonblocking(&self.stream, bytes)?;
            if n < bytes.len() {
                self.pending.extend_from_slice(&bytes[n..]);
            }
        } else {
            self.pending.extend_from_slice(bytes);
            self.flush()?;
        }
        if self.pending.len() > MAX_PENDING {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "the client does not read its replies ({} bytes pending)",
                    self.pending.len()
                ),
            ));
        }
        Ok(())
    }

    /// Writes what the socket takes of the pending bytes.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let n = send_nonblocking(&self.stream, &self.pending)?;
        self.pending.drain(..n);
        if self.pending.capacity() > 64 * 1024 && self.pending.len() < 1024 {
            self.pending.shrink_to_fit();
        }
        Ok(())
    }

    /// Whether replies wait for the client to read.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The socket, for a wait until it takes bytes again.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    /// Closes both directions (the reader thread then reports the connection gone).
    pub fn close(&self) {
        // SAFETY: shutdown on a descriptor we own; it only changes the socket's state.
        unsafe {
            libc::shutdown(self.stream.as_raw_fd(), libc::SHUT_RDWR);
        }
    }
}

/// `send(2)` that never blocks: the bytes the socket took (0 when it is full).
fn send_nonblocking(stream: &OwnedFd, bytes: &[u8]) -> io::Result<usize> {
    let mut sent = 0;
    while sent < bytes.len() {
        let rest = &bytes[sent..];
        // SAFETY: the fd is open for the stream's lifetime; the pointer and length
        // describe `rest`, which outlives the call.
        let r = unsafe {
            libc::send(
                stream.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if r >= 0 {
            sent += r as usize;
            continue;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => break,
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_client_that_does_not_read_never_blocks_and_is_cut_off_past_the_cap() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let mut c = Conn::new(1, ours);
        let chunk = vec![7u8; 1 << 20];
        let mut result = Ok(());
        // Far more than any socket buffer: without MSG_DONTWAIT this would block.
        for _ in 0..(MAX_PENDING >> 20) + 4 {
            result = c.send(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert!(
            result.is_err(),
            "the cap must cut off a client that never reads"
        );
        assert!(c.has_pending());
        // Everything queued before the cap arrives in order once the client reads.
        let mut b = vec![0u8; 4096];
        let n = theirs.read(&mut b).unwrap();
        assert!(n > 0 && b[..n].iter().all(|x| *x == 7));
    }

    #[test]
    fn pending_bytes_are_flushed_in_order() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let mut c = Conn::new(1, ours);
        let big: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        c.send(&big).unwrap();
        c.send(b"tail").unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut b = vec![0u8; 65536];
            while got.len() < 4_000_004 {
                let n = theirs.read(&mut b).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&b[..n]);
            }
            got
        });
        while c.has_pending() {
            c.flush().unwrap();
            std::thread::yield_now();
        }
        let got = reader.join().unwrap();
        assert_eq!(&got[..4_000_000], &big[..]);
        assert_eq!(&got[4_000_000..], b"tail");
    }
}
