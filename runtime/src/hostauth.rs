//! The daemons' proof that they belong to the job (`spec/runtime.md`, AUTH-1..AUTH-7):
//! an HMAC-SHA256 challenge-response over the per-job key, with fresh nonces from both
//! sides, so the key never crosses the wire and a recorded exchange is worthless.
//!
//! ```text
//! daemon → master  "DRDH" | version u8 | node u32 | daemon nonce [32] | HMAC(key, "dynres hello" | H) [32]
//! master → daemon  master nonce [32] | HMAC(key, "dynres master" | transcript) [32]
//! daemon → master  HMAC(key, "dynres daemon" | transcript) [32]
//! master → daemon  0x01 (accepted) or 0x00 (refused: the node is taken or unknown),
//!                  or the connection closes
//! H = "DRDH" | version | node | daemon nonce
//! transcript = H | master nonce
//! ```
//!
//! The master proves itself before the daemon answers its challenge, so a daemon never
//! computes a tag over a challenge of a party that does not hold the key (a fake master
//! learns nothing it could replay: its own nonce is in the transcript). The hello's tag
//! covers only what the daemon chose (AUTH-7): it lets the master tell a key holder from
//! a stranger before it spends anything on the connection. Tags are compared in
//! constant time (`Mac::verify_slice`).
//!
//! The master's side is split into steps without I/O ([`check_hello`],
//! [`Challenge::new`], [`Challenge::verify`]) so that its acceptor can run many
//! exchanges on one thread, each bounded by one deadline (AUTH-6); [`master_handshake`]
//! runs them over a blocking stream.

use std::io::{Read, Write};

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const MAGIC: &[u8; 4] = b"DRDH";
/// 2: the hello carries a tag (AUTH-7), and a refusal is a byte of its own (AUTH-5).
const VERSION: u8 = 2;
const NONCE: usize = 32;
const TAG: usize = 32;
/// The hello without its tag: magic, version, node, daemon nonce.
const HELLO_BODY: usize = 4 + 1 + 4 + NONCE;
/// Bytes of the daemon's hello, its tag included.
pub const HELLO_LEN: usize = HELLO_BODY + TAG;
/// Bytes of the master's answer to a hello: its nonce and its tag.
pub const ANSWER_LEN: usize = NONCE + TAG;
/// Bytes of the daemon's answer to the challenge: its tag.
pub const TAG_LEN: usize = TAG;
/// The master's verdict byte: accepted.
pub const ACCEPTED: u8 = 0x01;
/// The master's verdict byte: refused, although the daemon holds the key (its node has
/// a daemon already, or none was started for it; AUTH-5).
pub const REFUSED: u8 = 0x00;

/// Why an authentication failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The connection failed, or timed out, during the exchange.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer does not speak this exchange (or another version of it).
    #[error("not a dynres daemon hello (or another version)")]
    Malformed,
    /// The peer's tag is wrong: it does not hold the job's key.
    #[error("wrong key: the peer does not hold the job's key")]
    WrongKey,
    /// The master refused us although we hold the key: our node has a daemon already,
    /// or the master started none for it (AUTH-5).
    #[error("refused by the master: node {0} has a daemon already, or none was started for it")]
    Refused(u32),
    /// The master closed the connection before its verdict: it had too many
    /// connections waiting, or ours took too long (AUTH-6, AUTH-7). Trying again may
    /// succeed.
    #[error("the master dropped the connection before its verdict (busy, or too slow)")]
    Dropped,
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

fn mac(key: &[u8], label: &[u8], data: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; this cannot fail.
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(label);
    m.update(data);
    m
}

/// The daemon's hello: `"DRDH" | version | node | daemon nonce | hello tag`.
fn hello(key: &[u8], node: u32, nonce: &[u8; NONCE]) -> [u8; HELLO_LEN] {
    let mut hello = [0u8; HELLO_LEN];
    hello[..4].copy_from_slice(MAGIC);
    hello[4] = VERSION;
    hello[5..9].copy_from_slice(&node.to_be_bytes());
    hello[9..HELLO_BODY].copy_from_slice(nonce);
    let tag = mac(key, b"dynres hello", &hello[..HELLO_BODY])
        .finalize()
        .into_bytes();
    hello[HELLO_BODY..].copy_from_slice(&tag);
    hello
}

fn transcript(hello_body: &[u8], master_nonce: &[u8; NONCE]) -> Vec<u8> {
    let mut t = hello_body.to_vec();
    t.extend_from_slice(master_nonce);
    t
}

/// Whether an I/O error means the master closed the connection on us.
fn closed_on_us(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(
        e.kind(),
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
    )
}

/// The daemon's side: proves it holds `key` for node `node` of the job, after checking
/// that the master does. Returns once the master accepted; [`AuthError::Dropped`] when
/// the master closed the connection before its verdict (worth another try, AUTH-7).
pub fn daemon_handshake(
    s: &mut (impl Read + Write),
    key: &[u8],
    node: u32,
) -> Result<(), AuthError> {
    let dropped = |e: std::io::Error| {
        if closed_on_us(&e) {
            AuthError::Dropped
        } else {
            AuthError::Io(e)
        }
    };
    let hello = hello(key, node, &nonce()?);
    s.write_all(&hello).map_err(dropped)?;
    let mut answer = [0u8; ANSWER_LEN];
    s.read_exact(&mut answer).map_err(dropped)?;
    let (master_nonce, master_tag) = answer.split_at(NONCE);
    let master_nonce: [u8; NONCE] = master_nonce.try_into().expect("split at NONCE");
    let t = transcript(&hello[..HELLO_BODY], &master_nonce);
    // AUTH-3: the master proves itself before the daemon answers its challenge.
    mac(key, b"dynres master", &t)
        .verify_slice(master_tag)
        .map_err(|_| AuthError::WrongKey)?;
    let tag = mac(key, b"dynres daemon", &t).finalize().into_bytes();
    s.write_all(&tag).map_err(dropped)?;
    let mut verdict = [0u8; 1];
    match s.read(&mut verdict) {
        Ok(1) if verdict[0] == ACCEPTED => Ok(()),
        Ok(1) if verdict[0] == REFUSED => Err(AuthError::Refused(node)),
        Ok(1) => Err(AuthError::Malformed),
        Ok(_) => Err(AuthError::Dropped),
        Err(e) => Err(dropped(e)),
    }
}

/// A daemon's hello whose tag verified (AUTH-7): the peer holds the key, or replays
/// a hello of one that does (the caller refuses a nonce seen before).
#[derive(Clone, Debug)]
pub struct Hello {
    body: [u8; HELLO_BODY],
}

impl Hello {
    /// The node the daemon claims.
    pub fn node(&self) -> u32 {
        u32::from_be_bytes(self.body[5..9].try_into().expect("4 bytes"))
    }

    /// The daemon's nonce: fresh for every hello a daemon sends (AUTH-2).
    pub fn nonce(&self) -> [u8; NONCE] {
        self.body[9..].try_into().expect("NONCE bytes")
    }
}

/// What the master answers a hello whose tag fails, before it closes the connection:
/// an answer no key verifies. A daemon with the wrong key then reports exactly that
/// (AUTH-3) instead of a dropped connection it would try again, and the master computes
/// nothing for a stranger.
pub const DECOY: [u8; ANSWER_LEN] = [0; ANSWER_LEN];

/// The master's first step: checks a daemon's whole hello. A peer without the key is
/// refused here, before the master computes anything for it (AUTH-4, AUTH-7).
pub fn check_hello(key: &[u8], bytes: &[u8; HELLO_LEN]) -> Result<Hello, AuthError> {
    let (body, tag) = bytes.split_at(HELLO_BODY);
    if &body[..4] != MAGIC || body[4] != VERSION {
        return Err(AuthError::Malformed);
    }
    mac(key, b"dynres hello", body)
        .verify_slice(tag)
        .map_err(|_| AuthError::WrongKey)?;
    Ok(Hello {
        body: body.try_into().expect("HELLO_BODY bytes"),
    })
}

/// The master's challenge to one daemon: what its answer must match.
pub struct Challenge {
    transcript: Vec<u8>,
}

impl Challenge {
    /// The master's second step: a fresh nonce (AUTH-2) and the master's proof
    /// (AUTH-3); returns the challenge and the [`ANSWER_LEN`] bytes to send.
    pub fn new(key: &[u8], hello: &Hello) -> Result<(Challenge, [u8; ANSWER_LEN]), AuthError> {
        let master_nonce = nonce()?;
        let transcript = transcript(&hello.body, &master_nonce);
        let tag = mac(key, b"dynres master", &transcript)
            .finalize()
            .into_bytes();
        let mut answer = [0u8; ANSWER_LEN];
        answer[..NONCE].copy_from_slice(&master_nonce);
        answer[NONCE..].copy_from_slice(&tag);
        Ok((Challenge { transcript }, answer))
    }

    /// The master's last step: whether the daemon's tag answers the challenge. The
    /// verdict byte ([`ACCEPTED`], [`REFUSED`]) is the caller's: it depends on the node
    /// (AUTH-5).
    pub fn verify(&self, key: &[u8], tag: &[u8; TAG_LEN]) -> Result<(), AuthError> {
        mac(key, b"dynres daemon", &self.transcript)
            .verify_slice(tag)
            .map_err(|_| AuthError::WrongKey)
    }
}

/// The master's side over a blocking stream, accepting whatever node the peer claims:
/// checks that the peer holds `key`, sends [`ACCEPTED`], returns the node. On a wrong
/// tag nothing is sent back (the caller closes the connection). The runtime's acceptor
/// runs the steps itself, deciding the node before the verdict (AUTH-5).
pub fn master_handshake(s: &mut (impl Read + Write), key: &[u8]) -> Result<u32, AuthError> {
    let mut bytes = [0u8; HELLO_LEN];
    s.read_exact(&mut bytes)?;
    let hello = match check_hello(key, &bytes) {
        Err(AuthError::WrongKey) => {
            let _ = s.write_all(&DECOY);
            return Err(AuthError::WrongKey);
        }
        checked => checked?,
    };
    let (challenge, answer) = Challenge::new(key, &hello)?;
    s.write_all(&answer)?;
    let mut theirs = [0u8; TAG_LEN];
    s.read_exact(&mut theirs)?;
    challenge.verify(key, &theirs)?;
    s.write_all(&[ACCEPTED])?;
    Ok(hello.node())
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
    ) -> (UnixStream, Master, [u8; HELLO_LEN], [u8; ANSWER_LEN]) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let m = std::thread::spawn(move || master_handshake(&mut b, key));
        let hello = hello(key, node, &[nonce; NONCE]);
        a.write_all(&hello).unwrap();
        let mut answer = [0u8; ANSWER_LEN];
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
    /// contain the key (only tags travel).
    #[test]
    fn the_key_never_crosses_the_wire() {
        let key: &[u8] = b"0123456789abcdef-the-job-key";
        let (mut a, m, hello, answer) = challenged(key, 1, 5);
        for bytes in [&hello[..], &answer[..]] {
            assert!(!bytes.windows(key.len()).any(|w| w == key));
        }
        // The master's tag verifies against the transcript: it proved itself first.
        let mut master_nonce = [0u8; NONCE];
        master_nonce.copy_from_slice(&answer[..NONCE]);
        let t = transcript(&hello[..HELLO_BODY], &master_nonce);
        mac(key, b"dynres master", &t)
            .verify_slice(&answer[NONCE..])
            .expect("the master's tag");
        let tag = mac(key, b"dynres daemon", &t).finalize().into_bytes();
        assert!(!tag.windows(key.len()).any(|w| w == key));
        a.write_all(&tag).unwrap();
        assert_eq!(m.join().unwrap().unwrap(), 1);
    }

    /// AUTH-3, AUTH-4: a wrong key is refused; the daemon sees the master's (decoy)
    /// tag fail and never answers.
    #[test]
    fn a_daemon_with_the_wrong_key_is_refused() {
        let (d, m) = pair(b"wrong", b"k1");
        assert!(matches!(d, Err(AuthError::WrongKey)), "{d:?}");
        assert!(matches!(m, Err(AuthError::WrongKey)), "{m:?}");
    }

    /// AUTH-7: the hello's tag covers the node and the nonce, so a stranger cannot
    /// make one up, nor turn a recorded hello into a claim for another node.
    #[test]
    fn a_hello_is_checked_before_any_challenge() {
        let good = hello(b"k1", 4, &[7; NONCE]);
        let h = check_hello(b"k1", &good).expect("a key holder's hello");
        assert_eq!((h.node(), h.nonce()), (4, [7; NONCE]));
        assert!(matches!(
            check_hello(b"k2", &good),
            Err(AuthError::WrongKey)
        ));
        let mut other_node = good;
        other_node[8] ^= 1;
        assert!(matches!(
            check_hello(b"k1", &other_node),
            Err(AuthError::WrongKey)
        ));
        let mut old = good;
        old[4] = 1;
        assert!(matches!(
            check_hello(b"k1", &old),
            Err(AuthError::Malformed)
        ));
    }

    /// AUTH-2: fresh nonces both ways.
    #[test]
    fn a_recorded_daemon_answer_does_not_pass_a_fresh_challenge() {
        // Record one good exchange's daemon tag, then replay it against a new master
        // nonce: the transcript differs, the tag fails.
        let key: &[u8] = b"job-key";
        let (mut a, m, hello, _) = challenged(key, 7, 9);
        // A tag computed for a different (recorded) master nonce.
        let stale = transcript(&hello[..HELLO_BODY], &[0u8; NONCE]);
        a.write_all(&mac(key, b"dynres daemon", &stale).finalize().into_bytes())
            .unwrap();
        assert!(matches!(m.join().unwrap(), Err(AuthError::WrongKey)));
    }

    #[test]
    fn garbage_is_malformed() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        a.write_all(&[b'x'; HELLO_LEN]).unwrap();
        assert!(matches!(
            master_handshake(&mut b, b"k"),
            Err(AuthError::Malformed)
        ));
    }

    /// A master that runs the steps and ends the exchange with `verdict` (`None`:
    /// closes the connection instead).
    fn master_with_verdict(key: &'static [u8], verdict: Option<u8>) -> UnixStream {
        let (a, mut b) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut bytes = [0u8; HELLO_LEN];
            b.read_exact(&mut bytes).unwrap();
            let hello = check_hello(key, &bytes).unwrap();
            let (challenge, answer) = Challenge::new(key, &hello).unwrap();
            b.write_all(&answer).unwrap();
            let mut tag = [0u8; TAG_LEN];
            b.read_exact(&mut tag).unwrap();
            challenge.verify(key, &tag).unwrap();
            if let Some(v) = verdict {
                b.write_all(&[v]).unwrap();
            }
        });
        a
    }

    /// AUTH-5: a key holder the master refuses for its node learns it (no retry), and
    /// one the master dropped before its verdict learns that instead (AUTH-7: retry).
    #[test]
    fn the_daemon_tells_a_refusal_from_a_dropped_connection() {
        let mut s = master_with_verdict(b"k", Some(REFUSED));
        let r = daemon_handshake(&mut s, b"k", 6);
        assert!(matches!(r, Err(AuthError::Refused(6))), "{r:?}");
        let mut s = master_with_verdict(b"k", None);
        let r = daemon_handshake(&mut s, b"k", 6);
        assert!(matches!(r, Err(AuthError::Dropped)), "{r:?}");
        let mut s = master_with_verdict(b"k", Some(ACCEPTED));
        daemon_handshake(&mut s, b"k", 6).unwrap();
        // Dropped before any answer (evicted while waiting, AUTH-7).
        let (mut s, b) = UnixStream::pair().unwrap();
        drop(b);
        let r = daemon_handshake(&mut s, b"k", 6);
        assert!(matches!(r, Err(AuthError::Dropped)), "{r:?}");
    }

    /// The daemon's side of one exchange without I/O: its tag for the master's answer.
    fn daemon_tag(key: &[u8], hello: &[u8; HELLO_LEN], answer: &[u8; ANSWER_LEN]) -> [u8; TAG_LEN] {
        let master_nonce: [u8; NONCE] = answer[..NONCE].try_into().unwrap();
        let t = transcript(&hello[..HELLO_BODY], &master_nonce);
        mac(key, b"dynres daemon", &t)
            .finalize()
            .into_bytes()
            .into()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]

        /// AUTH-2, through the master's own steps and nonce source: over many
        /// connections no two challenges of one master share a nonce, and a daemon's
        /// exchange recorded byte for byte (its hello and its answer) and replayed on
        /// each new connection is refused there. The hello itself still verifies (it
        /// is a key holder's; the admission table refuses its nonce as seen): what
        /// stops the replayed answer is the fresh master nonce alone, so a master
        /// whose nonce repeated would accept it and fail this.
        #[test]
        fn no_challenge_nonce_repeats_and_a_recorded_exchange_is_refused(
            key in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..48),
            node in proptest::prelude::any::<u32>(),
            daemon_nonce in proptest::prelude::any::<[u8; NONCE]>(),
            connections in 2usize..48,
        ) {
            let recorded_hello = hello(&key, node, &daemon_nonce);
            let h = check_hello(&key, &recorded_hello).unwrap();
            let (challenge, answer) = Challenge::new(&key, &h).unwrap();
            let recorded_tag = daemon_tag(&key, &recorded_hello, &answer);
            challenge.verify(&key, &recorded_tag).expect("the genuine exchange");
            let mut seen = std::collections::HashSet::new();
            seen.insert(answer[..NONCE].to_vec());
            for conn in 1..connections {
                let h = check_hello(&key, &recorded_hello).unwrap();
                proptest::prop_assert_eq!(h.node(), node);
                let (challenge, answer) = Challenge::new(&key, &h).unwrap();
                proptest::prop_assert!(
                    seen.insert(answer[..NONCE].to_vec()),
                    "connection {}: a master nonce repeated", conn
                );
                proptest::prop_assert!(
                    matches!(challenge.verify(&key, &recorded_tag), Err(AuthError::WrongKey)),
                    "connection {}: a recorded answer passed a new challenge", conn
                );
                // A live daemon answering this challenge still passes it.
                challenge.verify(&key, &daemon_tag(&key, &recorded_hello, &answer)).unwrap();
            }
        }
    }
}
