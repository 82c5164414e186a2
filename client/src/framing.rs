//! Reading kernel frames off a byte stream (with `dynres_core::wire::split_frame`).

use std::io::Read;

use dynres_core::wire::{WireError, split_frame};

/// Largest frame body accepted from a peer.
pub const MAX_BODY: u32 = 16 << 20;

/// Buffers a stream and hands out whole frames (header included, as the `rc::wire`
/// decoders expect).
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

/// What reading a frame gave.
#[derive(Debug)]
pub enum Frame {
    /// One complete frame.
    Frame(Vec<u8>),
    /// The peer closed the stream.
    Closed,
}

impl FrameReader {
    /// An empty reader.
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks until one whole frame is there (or the stream ends).
    pub fn next(&mut self, r: &mut impl Read) -> std::io::Result<Result<Frame, WireError>> {
        loop {
            match split_frame(&self.buf, MAX_BODY) {
                Err(e) => return Ok(Err(e)),
                Ok(Some((_, _, used))) => {
                    let frame: Vec<u8> = self.buf.drain(..used).collect();
                    return Ok(Ok(Frame::Frame(frame)));
                }
                Ok(None) => {}
            }
            let mut chunk = [0u8; 8192];
            let n = r.read(&mut chunk)?;
            if n == 0 {
                return Ok(Ok(Frame::Closed));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}
