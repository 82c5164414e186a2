//! The daemons' proof that they belong to the job (`spec/runtime.md`, AUTH-1..AUTH-5):
//! an HMAC-SHA256 challenge-response over the per-job key, with fresh nonces from both
//! sides, so the key never crosses the wire and a recorded exchange is worthless.
//!
//! ```text
//! daemon → master  "DRDH" | version u8 | node u32 | daemon nonce [32]
//! master → daemon  master nonce [32] | HMAC(key, "dynres master" | transcript) [32]
//! daemon → master  HMAC(key, "dynres daemon" | transcript) [32]
//! master → daemon  0x01 (accepted), or the connection closes
//! transcript = "DRDH" | version | node | daemon nonce | master nonce
//! ```
//!
//! The master proves itself first, so a daemon never answers a challenge for a party
//! that does not hold the key (a fake master learns nothing it could replay: its own
//! nonce is in the transcript). Tags are compared in constant time (`Mac::verify_slice`).

use std::io::{Read, Write};

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const MAGIC: &[u8; 4] = b"DRDH";
const VERSION: u8 = 1;
const NONCE: usize = 32;
const TAG: usize = 32;
/// The master's one-byte acceptance.
const ACCEPTED: u8 = 0x01;

/// Why an authentication failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The connection failed or closed during the exchange.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer does not speak this exchange (or another version of it).
    #[error("not a dynres daemon hello (or another version)")]
    Malformed,
    /// The peer's tag is wrong: it does not hold the job's key.
    #[error("wrong key: the peer does not hold the job's key")]
    WrongKey,
    /// The master closed the connection after our tag: it refused our key.
    #[error("refused by the master (wrong key?)")]
    Refused,
    /// No randomness for a nonce.
    #[error("cannot read /dev/urandom: {0}")]
    Random(std::io::Error),
}

fn nonce() -> Result<[u8; NONCE], AuthError> {
    let mut b = [0u8; NONCE];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(AuthError::Random)?;
    Ok(b)
}

fn mac(key: &[u8], label: &[u8], transcript: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; this cannot fail.
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(label);
    m.update(transcript);
    m
}

/// The daemon's hello: `"DRDH" | version | node | daemon nonce`.
fn hello(node: u32, nonce: &[u8; NONCE]) -> Vec<u8> {
    let mut hello = Vec::with_capacity(4 + 1 + 4 + NONCE);
    hello.extend_from_slice(MAGIC);
    hello.push(VERSION);
    hello.extend_from_slice(&node.to_be_bytes());
    hello.extend_from_slice(nonce);
    hello
}

fn transcript(hello: &[u8], master_nonce: &[u8; NONCE]) -> Vec<u8> {
    let mut t = hello.to_vec();
    t.extend_from_slice(master_nonce);
    t
}

/// The daemon's side: proves it holds `key` for node `node` of the job, after checking
/// that the master does. Returns once the master accepted.
pub fn daemon_handshake(
    s: &mut (impl Read + Write),
    key: &[u8],
    node: u32,
) -> Result<(), AuthError> {
    let hello = hello(node, &nonce()?);
    s.write_all(&hello)?;
    let mut answer = [0u8; NONCE + TAG];
    s.read_exact(&mut answer)?;
    let (master_nonce, master_tag) = answer.split_at(NONCE);
    let master_nonce: [u8; NONCE] = master_nonce.try_into().expect("split at NONCE");
    let t = transcript(&hello, &master_nonce);
    // AUTH-3: the master proves itself before the daemon computes a tag for it.
    mac(key, b"dynres master", &t)
        .verify_slice(master_tag)
        .map_err(|_| AuthError::WrongKey)?;
    let tag = mac(key, b"dynres daemon", &t).finalize().into_bytes();
    s.write_all(&tag)?;
    let mut ok = [0u8; 1];
    match s.read(&mut ok) {
        Ok(1) if ok[0] == ACCEPTED => Ok(()),
        Ok(_) => Err(AuthError::Refused),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Err(AuthError::Refused),
        Err(e) => Err(e.into()),
    }
}

/// The master's side: checks that the peer holds `key`; returns the node it claims.
/// On a wrong tag nothing is sent back (the caller closes the connection).
pub fn master_handshake(s: &mut (impl Read + Write), key: &[u8]) -> Result<u32, AuthError> {
    let mut hello = [0u8; 4 + 1 + 4 + NONCE];
    s.read_exact(&mut hello)?;
    if &hello[..4] != MAGIC || hello[4] != VERSION {
        return Err(AuthError::Malformed);
    }
    let node = u32::from_be_bytes(hello[5..9].try_into().expect("4 bytes"));
    let master_nonce = nonce()?;
    let t = transcript(&hello, &master_nonce);
    let tag = mac(key, b"dynres master", &t).finalize().into_bytes();
    let mut answer = Vec::with_capacity(NONCE + TAG);
    answer.extend_from_slice(&master_nonce);
    answer.extend_from_slice(&tag);
    s.write_all(&answer)?;
    let mut theirs = [0u8; TAG];
    s.read_exact(&mut theirs)?;
    mac(key, b"dynres daemon", &t)
        .verify_slice(&theirs)
        .map_err(|_| AuthError::WrongKey)?;
    s.write_all(&[ACCEPTED])?;
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn pair(
        daemon_key: &'static [u8],
        master_key: &'static [u8],
    ) -> (Result<(), AuthError>, Result<u32, AuthError>) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let m = std::thread::spawn(move || {
            let r = master_handshake(&mut b, master_key);
            drop(b);
            r
        });
        let d = daemon_handshake(&mut a, daemon_key, 3);
        // A daemon that gives up closes its side, as a real one does by exiting.
        drop(a);
        (d, m.join().unwrap())
    }

    /// The master side of a test exchange: its handshake's outcome.
    type Master = std::thread::JoinHandle<Result<u32, AuthError>>;

    /// A master serving one daemon that has sent its hello (node, nonce) and read the
    /// master's answer (master nonce and tag).
    fn challenged(
        key: &'static [u8],
        node: u32,
        nonce: u8,
    ) -> (UnixStream, Master, Vec<u8>, [u8; NONCE + TAG]) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let m = std::thread::spawn(move || master_handshake(&mut b, key));
        let hello = hello(node, &[nonce; NONCE]);
        a.write_all(&hello).unwrap();
        let mut answer = [0u8; NONCE + TAG];
        a.read_exact(&mut answer).unwrap();
        (a, m, hello, answer)
    }

    #[test]
    fn the_right_key_is_accepted_with_its_node() {
        let (d, m) = pair(b"k1", b"k1");
        d.unwrap();
        assert_eq!(m.unwrap(), 3);
    }

    /// AUTH-1, AUTH-3: the master speaks first with its tag, and neither side's bytes
    /// contain the key (only tags over the transcript travel).
    #[test]
    fn the_key_never_crosses_the_wire() {
        let key: &[u8] = b"0123456789abcdef-the-job-key";
        let (mut a, m, hello, answer) = challenged(key, 1, 5);
        assert!(!answer.windows(key.len()).any(|w| w == key));
        // The master's tag verifies against the transcript: it proved itself first.
        let mut master_nonce = [0u8; NONCE];
        master_nonce.copy_from_slice(&answer[..NONCE]);
        let t = transcript(&hello, &master_nonce);
        mac(key, b"dynres master", &t)
            .verify_slice(&answer[NONCE..])
            .expect("the master's tag");
        let tag = mac(key, b"dynres daemon", &t).finalize().into_bytes();
        assert!(!tag.windows(key.len()).any(|w| w == key));
        a.write_all(&tag).unwrap();
        assert_eq!(m.join().unwrap().unwrap(), 1);
    }

    /// AUTH-4: a wrong key is refused.
    #[test]
    fn a_daemon_with_the_wrong_key_is_refused() {
        let (d, m) = pair(b"wrong", b"k1");
        // The daemon sees the master's tag fail first: it never answers.
        assert!(matches!(d, Err(AuthError::WrongKey)), "{d:?}");
        assert!(m.is_err());
    }

    /// AUTH-2: fresh nonces both ways.
    #[test]
    fn a_recorded_daemon_answer_does_not_pass_a_fresh_challenge() {
        // Record one good exchange's daemon tag, then replay it against a new master
        // nonce: the transcript differs, the tag fails.
        let key: &[u8] = b"job-key";
        let (mut a, m, hello, _) = challenged(key, 7, 9);
        // A tag computed for a different (recorded) master nonce.
        let stale = transcript(&hello, &[0u8; NONCE]);
        a.write_all(&mac(key, b"dynres daemon", &stale).finalize().into_bytes())
            .unwrap();
        assert!(matches!(m.join().unwrap(), Err(AuthError::WrongKey)));
    }

    #[test]
    fn garbage_is_malformed() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(b"GET / HTTP/1.1\r\n\r\n0123456789012345678901234567")
            .unwrap();
        assert!(matches!(
            master_handshake(&mut b, b"k"),
            Err(AuthError::Malformed)
        ));
    }
}
