//! Who may talk on the TCP data plane (`spec/dataplane.md`, DATA-1..DATA-4): the keys a
//! device knows, and the HMAC-SHA256 challenge-response every connection runs before
//! anything it says is believed.
//!
//! ```text
//! connector → acceptor  HELLO      version u8 (=1) | key id [8] | connector nonce [32] |
//!                                  connector's listening address (UTF-8, rest)
//! acceptor → connector  CHALLENGE  acceptor nonce [32] | HMAC(key, "dynres tcp acceptor" | T) |
//!                                  dialled too u8 (0 | 1, DATA-13)
//! connector → acceptor  AUTH       HMAC(key, "dynres tcp connector" | T)
//! T = "DYNR-TCP-AUTH" | HELLO payload | len u8 | acceptor's listening address | acceptor nonce |
//!     dialled too u8
//! ```
//!
//! Each message is the payload of a frame of its kind (`framing.rs`). The acceptor's
//! address in `T` is the one the connector dialled, so a tag computed for one listener
//! does not pass at another (a relay learns nothing it can reuse). Tags are compared in
//! constant time (`Mac::verify_slice`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use hmac::{Hmac, Mac};
use nom::Parser;
use nom::bytes::complete::take;
use nom::combinator::rest;
use nom::number::complete::le_u8;
use sha2::{Digest, Sha256};

use super::framing::FramingError;
use crate::error::{Result, TransportError};

type HmacSha256 = Hmac<Sha256>;

/// Handshake version carried in the HELLO.
pub const VERSION: u8 = 1;
/// Length of a key id (the first bytes of SHA-256 of the key).
pub const KEY_ID_LEN: usize = 8;
/// Length of each side's nonce.
pub const NONCE_LEN: usize = 32;
/// Length of an HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;
/// Length of a CHALLENGE payload.
pub const CHALLENGE_LEN: usize = NONCE_LEN + MAC_LEN + 1;
/// Length of an AUTH payload.
pub const AUTH_LEN: usize = MAC_LEN;
/// Length of a data-plane key as [`DataKey::from_hex`] takes it (64 hex digits).
pub const KEY_LEN: usize = 32;

const TRANSCRIPT_MAGIC: &[u8] = b"DYNR-TCP-AUTH";
const ACCEPTOR: &[u8] = b"dynres tcp acceptor";
const CONNECTOR: &[u8] = b"dynres tcp connector";

/// Names a key on the wire: the first 8 bytes of SHA-256 of the key. Not secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyId(pub [u8; KEY_ID_LEN]);

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A data-plane key. Its bytes are never printed (`Debug` shows the id only) and never
/// cross the wire (DATA-1).
#[derive(Clone)]
pub struct DataKey {
    bytes: [u8; KEY_LEN],
    id: KeyId,
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataKey({})", self.id)
    }
}

/// Why a key was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not 64 hex digits.
    #[error("a data-plane key is {want} hex digits, got {got} characters")]
    Length {
        /// Characters given.
        got: usize,
        /// Characters wanted.
        want: usize,
    },
    /// A character that is not a hex digit.
    #[error("a data-plane key is hex digits only")]
    NotHex,
    /// [`TcpKeys::use_for`] named a key the ring does not hold.
    #[error("no data-plane key with id {0}")]
    Unknown(KeyId),
}

impl DataKey {
    /// A key from its 32 bytes.
    pub fn new(bytes: [u8; KEY_LEN]) -> DataKey {
        let digest = Sha256::digest(bytes);
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        DataKey {
            bytes,
            id: KeyId(id),
        }
    }

    /// A key from 64 hex digits (how the runtime hands it to processes).
    pub fn from_hex(s: &str) -> Result<DataKey, KeyError> {
        let s = s.trim();
        if s.len() != 2 * KEY_LEN {
            return Err(KeyError::Length {
                got: s.len(),
                want: 2 * KEY_LEN,
            });
        }
        let mut bytes = [0u8; KEY_LEN];
        for (b, pair) in bytes.iter_mut().zip(s.as_bytes().chunks(2)) {
            let digit = |c: u8| (c as char).to_digit(16).ok_or(KeyError::NotHex);
            *b = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
        }
        Ok(DataKey::new(bytes))
    }

    /// `HMAC-SHA256(secret, label)`: a key derived from another secret, so that the
    /// secret itself never has to be handed out (the runtime derives the job's data key
    /// from its daemon key this way).
    pub fn derive(secret: &[u8], label: &[u8]) -> DataKey {
        let tag = mac(secret, label, &[]).finalize().into_bytes();
        let mut bytes = [0u8; KEY_LEN];
        bytes.copy_from_slice(&tag);
        DataKey::new(bytes)
    }

    /// The key as 64 hex digits, for handing it to a process (never for logs).
    pub fn to_hex(&self) -> String {
        self.bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Its id.
    pub fn id(&self) -> KeyId {
        self.id
    }

    /// The key of a device configured without one (DATA-5): all zeros, known to
    /// everyone, so it authenticates nothing.
    fn open() -> DataKey {
        DataKey::new([0; KEY_LEN])
    }
}

#[derive(Default)]
struct Ring {
    default: Option<DataKey>,
    extra: HashMap<KeyId, DataKey>,
    peers: HashMap<SocketAddr, KeyId>,
}

/// The keys a TCP device authenticates with (DATA-4): a default key (the job's), and
/// extra keys each used towards a set of peer addresses (say, the processes of another
/// job this one connected to). A shared handle: clones see the same ring, so whoever
/// built the device's [`TcpConfig`](super::TcpConfig) can add keys later. Consulted only
/// while connections are set up, never per message (DATA-9).
///
/// Without a default key the ring is *open* (DATA-5): connections still run the
/// handshake, with a key everyone knows, so they authenticate nothing. For tests and
/// benchmarks; the runtime always sets a key.
#[derive(Clone, Default)]
pub struct TcpKeys(Arc<Shared>);

#[derive(Default)]
struct Shared {
    ring: Mutex<Ring>,
    /// Bumped whenever a key or an address is added, so a device holding a HELLO for a
    /// key it does not have yet (DATA-4) looks again only when something changed,
    /// without taking the lock.
    generation: AtomicU64,
}

impl std::fmt::Debug for TcpKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.lock();
        f.debug_struct("TcpKeys")
            .field("default", &r.default.as_ref().map(DataKey::id))
            .field("extra", &r.extra.len())
            .field("peers", &r.peers.len())
            .finish()
    }
}

impl TcpKeys {
    /// A ring whose default key is `key`.
    pub fn with_default(key: DataKey) -> TcpKeys {
        let keys = TcpKeys::default();
        keys.lock().default = Some(key);
        keys
    }

    /// Whether the ring has no default key (DATA-5).
    pub fn is_open(&self) -> bool {
        self.lock().default.is_none()
    }

    /// Adds a key that connectors may present; it authenticates only the addresses
    /// [`TcpKeys::use_for`] gives it.
    pub fn add(&self, key: DataKey) -> KeyId {
        let id = key.id();
        self.lock().extra.insert(id, key);
        self.changed();
        id
    }

    /// [`TcpKeys::add`] and [`TcpKeys::use_for`] at once: no device sees the key
    /// without its addresses.
    pub fn add_for(&self, key: DataKey, peers: impl IntoIterator<Item = SocketAddr>) -> KeyId {
        let id = key.id();
        let mut r = self.lock();
        r.extra.insert(id, key);
        r.peers.extend(peers.into_iter().map(|p| (p, id)));
        drop(r);
        self.changed();
        id
    }

    /// How many times keys or addresses were added (see [`Shared::generation`]).
    pub(crate) fn generation(&self) -> u64 {
        self.0.generation.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.0.generation.fetch_add(1, Ordering::Release);
    }

    /// Uses key `id` (added before) towards `peers`: our connections to them present
    /// it, and a connection presenting it may claim only these addresses (DATA-4).
    pub fn use_for(
        &self,
        id: KeyId,
        peers: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<(), KeyError> {
        let mut r = self.lock();
        if !r.extra.contains_key(&id) && r.default.as_ref().map(DataKey::id) != Some(id) {
            return Err(KeyError::Unknown(id));
        }
        r.peers.extend(peers.into_iter().map(|p| (p, id)));
        drop(r);
        self.changed();
        Ok(())
    }

    /// The key to use towards `peer`: its own, else the default, else the open key.
    pub(crate) fn for_peer(&self, peer: SocketAddr) -> DataKey {
        let r = self.lock();
        r.peers
            .get(&peer)
            .and_then(|id| r.extra.get(id).or(r.default.as_ref()))
            .or(r.default.as_ref())
            .cloned()
            .unwrap_or_else(DataKey::open)
    }

    /// The key a connector names by `id`, if we hold it.
    pub(crate) fn lookup(&self, id: KeyId) -> Option<DataKey> {
        let r = self.lock();
        match &r.default {
            Some(k) if k.id() == id => return Some(k.clone()),
            None if DataKey::open().id() == id => return Some(DataKey::open()),
            _ => {}
        }
        r.extra.get(&id).cloned()
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        // The ring is only ever inserted into: a panic elsewhere cannot leave it torn.
        self.0.ring.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why a connection's handshake failed (the connection is then closed; DATA-1..DATA-3).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The HELLO speaks another version of the handshake.
    #[error("handshake version {0}, we speak {VERSION}")]
    Version(u8),
    /// A tag did not verify: the peer does not hold the key (or replays a recording).
    #[error("bad authentication tag (peer does not hold the key)")]
    BadTag,
    /// The key presented is not the one for the address claimed (DATA-4).
    #[error("key {key} is not the key of {addr}")]
    WrongKeyForAddress {
        /// The key presented.
        key: KeyId,
        /// The address claimed.
        addr: SocketAddr,
    },
    /// The address claimed already belongs to another live connection (DATA-2).
    #[error("{0} is already claimed by another connection")]
    AddressClaimed(SocketAddr),
    /// A frame that has no place at this point of the handshake (data before it ended,
    /// a second HELLO, a CHALLENGE sent to an acceptor, …).
    #[error("{0} frame out of order")]
    OutOfOrder(&'static str),
    /// The handshake did not finish within its deadline (DATA-3).
    #[error("no handshake within {0:?}")]
    Deadline(std::time::Duration),
    /// The listener's pending handshakes were full; the oldest was dropped (DATA-3).
    #[error("dropped: too many handshakes pending")]
    Evicted,
}

/// A parsed HELLO payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Which key the connector authenticates with.
    pub key: KeyId,
    /// The connector's nonce.
    pub nonce: [u8; NONCE_LEN],
    /// The connector's listening address (the one it claims, DATA-2).
    pub addr: SocketAddr,
}

fn bad(what: &str) -> FramingError {
    FramingError::BadHello(what.to_string())
}

/// Encodes a HELLO payload.
pub fn encode_hello(key: KeyId, nonce: &[u8; NONCE_LEN], addr: SocketAddr) -> Vec<u8> {
    let addr = addr.to_string();
    let mut out = Vec::with_capacity(1 + KEY_ID_LEN + NONCE_LEN + addr.len());
    out.push(VERSION);
    out.extend_from_slice(&key.0);
    out.extend_from_slice(nonce);
    out.extend_from_slice(addr.as_bytes());
    out
}

/// Parses a HELLO payload. A version other than ours is [`HandshakeError::Version`]
/// (reported as such, not as garbage), anything else malformed a [`FramingError`].
pub fn parse_hello(payload: &[u8]) -> Result<Hello, HandshakeFailure> {
    type Raw<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);
    let parsed: nom::IResult<&[u8], Raw<'_>> =
        (le_u8, take(KEY_ID_LEN), take(NONCE_LEN), rest).parse(payload);
    let malformed = HandshakeFailure::Malformed;
    let Ok((_, (version, key, nonce, addr))) = parsed else {
        return Err(malformed(bad("too short")));
    };
    if version != VERSION {
        return Err(HandshakeFailure::Refused(HandshakeError::Version(version)));
    }
    let addr = std::str::from_utf8(addr)
        .map_err(|e| malformed(bad(&e.to_string())))?
        .parse()
        .map_err(|e: std::net::AddrParseError| malformed(bad(&e.to_string())))?;
    let mut k = [0u8; KEY_ID_LEN];
    k.copy_from_slice(key);
    let mut n = [0u8; NONCE_LEN];
    n.copy_from_slice(nonce);
    Ok(Hello {
        key: KeyId(k),
        nonce: n,
        addr,
    })
}

/// A parsed CHALLENGE: the acceptor's nonce, its tag, and whether the acceptor had
/// dialled the connector too (DATA-13).
pub type Challenge = ([u8; NONCE_LEN], [u8; MAC_LEN], bool);

/// Splits a CHALLENGE payload into the acceptor's nonce, tag and `dialled too` flag
/// (`0` or `1`; DATA-13).
pub fn parse_challenge(payload: &[u8]) -> Result<Challenge, FramingError> {
    // Nonce, tag, flag.
    type Fields<'a> = (&'a [u8], &'a [u8], &'a [u8]);
    let parsed: nom::IResult<&[u8], Fields<'_>> =
        (take(NONCE_LEN), take(MAC_LEN), take(1usize)).parse(payload);
    match parsed {
        Ok(([], (nonce, tag, [flag @ (0 | 1)]))) => {
            let (mut n, mut t) = ([0u8; NONCE_LEN], [0u8; MAC_LEN]);
            n.copy_from_slice(nonce);
            t.copy_from_slice(tag);
            Ok((n, t, *flag == 1))
        }
        _ => Err(FramingError::BadHandshake {
            kind: "CHALLENGE",
            len: payload.len(),
        }),
    }
}

/// Checks the length of an AUTH payload (its one field is the tag).
pub fn parse_auth(payload: &[u8]) -> Result<[u8; MAC_LEN], FramingError> {
    <[u8; MAC_LEN]>::try_from(payload).map_err(|_| FramingError::BadHandshake {
        kind: "AUTH",
        len: payload.len(),
    })
}

/// How a handshake failed: the peer's bytes were not a handshake at all, or they were
/// and we refused them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeFailure {
    /// Malformed handshake frame.
    #[error("malformed handshake: {0}")]
    Malformed(FramingError),
    /// Refused.
    #[error("refused: {0}")]
    Refused(HandshakeError),
}

/// The transcript both tags cover; `dialled_too` is the CHALLENGE's flag (DATA-13), so
/// nobody without the key can set or clear it.
pub fn transcript(
    hello: &[u8],
    acceptor: SocketAddr,
    acceptor_nonce: &[u8; NONCE_LEN],
    dialled_too: bool,
) -> Vec<u8> {
    let acceptor = acceptor.to_string();
    let mut t = Vec::with_capacity(TRANSCRIPT_MAGIC.len() + hello.len() + 2 + 64 + NONCE_LEN);
    t.extend_from_slice(TRANSCRIPT_MAGIC);
    t.extend_from_slice(hello);
    // A socket address' text is at most 55 characters: the length fits a byte.
    t.push(acceptor.len().min(255) as u8);
    t.extend_from_slice(acceptor.as_bytes());
    t.extend_from_slice(acceptor_nonce);
    t.push(u8::from(dialled_too));
    t
}

fn mac(key: &[u8], label: &[u8], transcript: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; this cannot fail.
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(label);
    m.update(transcript);
    m
}

/// The acceptor's tag over `transcript`.
pub fn acceptor_tag(key: &DataKey, transcript: &[u8]) -> [u8; MAC_LEN] {
    mac(&key.bytes, ACCEPTOR, transcript)
        .finalize()
        .into_bytes()
        .into()
}

/// The connector's tag over `transcript`.
pub fn connector_tag(key: &DataKey, transcript: &[u8]) -> [u8; MAC_LEN] {
    mac(&key.bytes, CONNECTOR, transcript)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `tag` is the acceptor's tag over `transcript` (constant time).
pub fn verify_acceptor(key: &DataKey, transcript: &[u8], tag: &[u8]) -> bool {
    mac(&key.bytes, ACCEPTOR, transcript)
        .verify_slice(tag)
        .is_ok()
}

/// Whether `tag` is the connector's tag over `transcript` (constant time).
pub fn verify_connector(key: &DataKey, transcript: &[u8], tag: &[u8]) -> bool {
    mac(&key.bytes, CONNECTOR, transcript)
        .verify_slice(tag)
        .is_ok()
}

/// A fresh nonce from the kernel's CSPRNG (DATA-1: never reused, so a recorded
/// exchange does not pass on a new connection).
pub fn nonce() -> Result<[u8; NONCE_LEN]> {
    let mut b = [0u8; NONCE_LEN];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: writes at most `b.len() - got` bytes into `b[got..]`.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(TransportError::io("getrandom", e));
            }
        } else {
            got += n as usize;
        }
    }
    Ok(b)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn hex_keys_round_trip_and_bad_ones_are_typed() {
        let k = DataKey::new([0xab; KEY_LEN]);
        assert_eq!(DataKey::from_hex(&k.to_hex()).unwrap().id(), k.id());
        assert_eq!(
            DataKey::from_hex("abc").map(|k| k.id()),
            Err(KeyError::Length { got: 3, want: 64 })
        );
        assert_eq!(
            DataKey::from_hex(&"zz".repeat(32)).map(|k| k.id()),
            Err(KeyError::NotHex)
        );
        assert!(
            !format!("{k:?}").contains("abab"),
            "Debug shows no key bytes"
        );
    }

    #[test]
    fn derived_keys_depend_on_secret_and_label() {
        let a = DataKey::derive(b"secret", b"dynres data plane v1");
        assert_eq!(
            a.id(),
            DataKey::derive(b"secret", b"dynres data plane v1").id()
        );
        assert_ne!(
            a.id(),
            DataKey::derive(b"secreT", b"dynres data plane v1").id()
        );
        assert_ne!(
            a.id(),
            DataKey::derive(b"secret", b"dynres data plane v2").id()
        );
    }

    #[test]
    fn hello_round_trips_and_malformed_ones_are_typed() {
        let k = DataKey::new([1; KEY_LEN]);
        let n = [7u8; NONCE_LEN];
        let p = encode_hello(k.id(), &n, addr("[::1]:80"));
        let h = parse_hello(&p).unwrap();
        assert_eq!((h.key, h.nonce, h.addr), (k.id(), n, addr("[::1]:80")));
        let mut v2 = p.clone();
        v2[0] = 2;
        assert_eq!(
            parse_hello(&v2),
            Err(HandshakeFailure::Refused(HandshakeError::Version(2)))
        );
        for bad in [&p[..20], &[&p[..41], b"nope"].concat()[..], &[]] {
            assert!(matches!(
                parse_hello(bad),
                Err(HandshakeFailure::Malformed(_))
            ));
        }
        assert!(parse_challenge(&[0; CHALLENGE_LEN - 1]).is_err());
        assert!(parse_challenge(&[0; CHALLENGE_LEN + 1]).is_err());
        let mut c = [7u8; CHALLENGE_LEN];
        c[CHALLENGE_LEN - 1] = 1;
        assert_eq!(
            parse_challenge(&c),
            Ok(([7; NONCE_LEN], [7; MAC_LEN], true))
        );
        c[CHALLENGE_LEN - 1] = 0;
        assert!(!parse_challenge(&c).unwrap().2);
        c[CHALLENGE_LEN - 1] = 2;
        assert!(parse_challenge(&c).is_err(), "DATA-13: the flag is 0 or 1");
        assert!(parse_auth(&[0; AUTH_LEN + 1]).is_err());
    }

    /// DATA-1: each tag verifies only under its own label, key and transcript.
    #[test]
    fn tags_bind_key_role_and_transcript() {
        let k = DataKey::new([3; KEY_LEN]);
        let t = transcript(b"hello", addr("127.0.0.1:1"), &[1; NONCE_LEN], false);
        let a = acceptor_tag(&k, &t);
        assert!(verify_acceptor(&k, &t, &a));
        assert!(
            !verify_connector(&k, &t, &a),
            "roles are not interchangeable"
        );
        assert!(!verify_acceptor(&DataKey::new([4; KEY_LEN]), &t, &a));
        let other = transcript(b"hello", addr("127.0.0.1:2"), &[1; NONCE_LEN], false);
        assert!(!verify_acceptor(&k, &other, &a), "bound to the acceptor");
        let flipped = transcript(b"hello", addr("127.0.0.1:1"), &[1; NONCE_LEN], true);
        assert!(
            !verify_acceptor(&k, &flipped, &a),
            "DATA-13: bound to the flag"
        );
        let fresh = transcript(b"hello", addr("127.0.0.1:1"), &[2; NONCE_LEN], false);
        assert!(!verify_connector(&k, &fresh, &connector_tag(&k, &t)));
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }

    /// DATA-4, DATA-5: which key is used towards whom, and which are accepted.
    #[test]
    fn keyring_picks_the_peer_key_and_knows_only_its_keys() {
        let open = TcpKeys::default();
        assert!(open.is_open());
        let z = open.for_peer(addr("127.0.0.1:1")).id();
        assert_eq!(open.lookup(z).map(|k| k.id()), Some(z));
        let job = DataKey::new([5; KEY_LEN]);
        let keys = TcpKeys::with_default(job.clone());
        assert!(
            keys.lookup(z).is_none(),
            "a keyed ring refuses the open key"
        );
        let other = DataKey::new([6; KEY_LEN]);
        assert_eq!(
            keys.use_for(other.id(), [addr("127.0.0.1:9")]),
            Err(KeyError::Unknown(other.id()))
        );
        let id = keys.add(other.clone());
        keys.use_for(id, [addr("127.0.0.1:9")]).unwrap();
        assert_eq!(keys.for_peer(addr("127.0.0.1:9")).id(), other.id());
        assert_eq!(keys.for_peer(addr("127.0.0.1:8")).id(), job.id());
        assert_eq!(keys.lookup(id).map(|k| k.id()), Some(id));
    }
}
