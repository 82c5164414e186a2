//! Framing of the bootstrap stream: bytes arrive in arbitrary chunks; whole frames come
//! out. Reliable and ordered, so no acks or checksums here.

use alloc::vec::Vec;

use crate::wire::{FrameHeader, WireError, split_frame};

/// Largest frame body accepted on the stream (a 65 536-rank table of 64-byte addresses
/// fits).
pub const MAX_STREAM_BODY: u32 = 5 << 20;

/// Accumulates stream bytes and hands out complete frames.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// An empty reader.
    pub fn new() -> Self {
        FrameReader::default()
    }

    /// Appends `bytes` and returns every frame now complete as `(header, body)`.
    ///
    /// Transactional: if any frame in the new data is malformed, the error is returned
    /// and the reader keeps exactly what it had before the call (SPAWN-10).
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<(FrameHeader, Vec<u8>)>, WireError> {
        let mut buf = self.buf.clone();
        buf.extend_from_slice(bytes);
        let mut frames = Vec::new();
        let mut at = 0;
        while let Some((h, body, used)) = split_frame(&buf[at..], MAX_STREAM_BODY)? {
            frames.push((h, body.to_vec()));
            at += used;
        }
        buf.drain(..at);
        self.buf = buf;
        Ok(frames)
    }

    /// Bytes held waiting for the rest of a frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::encode_frame;

    /// `buffered` counts the bytes of a frame not complete yet, and only those.
    #[test]
    fn buffered_counts_the_bytes_of_an_incomplete_frame() {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, 0x0104, |b| b.extend_from_slice(&[1; 8]));
        let whole = bytes.len();
        encode_frame(&mut bytes, 0x0105, |b| b.extend_from_slice(&[2; 9]));
        let mut r = FrameReader::new();
        assert_eq!(r.push(&bytes[..whole + 5]).unwrap().len(), 1);
        assert_eq!(r.buffered(), 5);
        assert_eq!(r.push(&bytes[whole + 5..]).unwrap().len(), 1);
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    fn frames_split_anywhere_come_out_whole() {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, 0x0104, |b| b.extend_from_slice(&[1; 8]));
        encode_frame(&mut bytes, 0x0105, |b| b.extend_from_slice(&[2; 9]));
        for cut in 0..bytes.len() {
            let mut r = FrameReader::new();
            let mut got = r.push(&bytes[..cut]).unwrap();
            got.extend(r.push(&bytes[cut..]).unwrap());
            assert_eq!(got.len(), 2);
            assert_eq!(got[1].1, [2; 9]);
            assert_eq!(r.buffered(), 0);
        }
    }

    #[test]
    fn garbage_leaves_the_reader_unchanged() {
        let mut r = FrameReader::new();
        r.push(b"DR").unwrap();
        let before = r.clone();
        assert!(r.push(&[9, 0, 0, 0, 0, 0, 0]).is_err());
        assert_eq!(r, before);
    }
}
