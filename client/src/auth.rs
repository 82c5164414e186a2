//! Transport authentication: the per-job secret and the hello frame every connection to a
//! job's sockets starts with. This is not part of the protocol (the kernel's messages
//! follow the hello unchanged); it only decides who may talk to the job.
//!
//! Hello: `"DRHI" | kind u8 | secret_len u8 | secret | rank u32` (big-endian). The
//! runtime answers one byte [`HELLO_OK`] or closes the connection.

use std::io::{Read, Write};

/// Byte the runtime answers an accepted hello with.
pub const HELLO_OK: u8 = 0x01;
const MAGIC: &[u8; 4] = b"DRHI";

/// Who is connecting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// An application process of the job, by rank.
    Client(u32),
    /// A tool (`dynres grow/shrink/replace/status`).
    Tool,
}

/// 32 random bytes from `/dev/urandom`, as 64 hex digits.
pub fn new_secret() -> std::io::Result<String> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Encodes a hello.
pub fn encode_hello(secret: &str, peer: Peer) -> Vec<u8> {
    let mut out = Vec::with_capacity(80);
    out.extend_from_slice(MAGIC);
    let (kind, rank) = match peer {
        Peer::Client(r) => (1u8, r),
        Peer::Tool => (2u8, 0),
    };
    out.push(kind);
    let s = &secret.as_bytes()[..secret.len().min(255)];
    out.push(s.len() as u8);
    out.extend_from_slice(s);
    out.extend_from_slice(&rank.to_be_bytes());
    out
}

/// Reads a hello off `r` and checks its secret against `secret`. `None` if it is
/// malformed or the secret is wrong.
pub fn read_hello(r: &mut impl Read, secret: &str) -> std::io::Result<Option<Peer>> {
    let mut head = [0u8; 6];
    r.read_exact(&mut head)?;
    if &head[..4] != MAGIC {
        return Ok(None);
    }
    let mut presented = vec![0u8; usize::from(head[5])];
    r.read_exact(&mut presented)?;
    let mut rank = [0u8; 4];
    r.read_exact(&mut rank)?;
    if !same(&presented, secret.as_bytes()) {
        return Ok(None);
    }
    Ok(match head[4] {
        1 => Some(Peer::Client(u32::from_be_bytes(rank))),
        2 => Some(Peer::Tool),
        _ => None,
    })
}

/// Sends a hello and waits for the runtime's answer: `false` if it closed the connection.
pub fn say_hello(s: &mut (impl Read + Write), secret: &str, peer: Peer) -> std::io::Result<bool> {
    s.write_all(&encode_hello(secret, peer))?;
    let mut ok = [0u8; 1];
    match s.read(&mut ok)? {
        1 if ok[0] == HELLO_OK => Ok(true),
        _ => Ok(false),
    }
}

/// Constant-time comparison (lengths are not secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_wrong_secret_is_refused() {
        let secret = new_secret().unwrap();
        assert_eq!(secret.len(), 64);
        let frame = encode_hello(&secret, Peer::Client(7));
        assert_eq!(
            read_hello(&mut frame.as_slice(), &secret).unwrap(),
            Some(Peer::Client(7))
        );
        let wrong = encode_hello(&new_secret().unwrap(), Peer::Tool);
        assert_eq!(read_hello(&mut wrong.as_slice(), &secret).unwrap(), None);
        let mut garbage: &[u8] = b"GET / HTTP/1.1\r\n";
        assert_eq!(read_hello(&mut garbage, &secret).unwrap(), None);
    }
}
