//! Authentication of the bootstrap (SPAWN-22): every message between two roots carries a
//! truncated HMAC-SHA256 tag under the connection's key, so a process that does not hold
//! the key cannot open, steer or end a handshake.
//!
//! The key is an input: a spawn's parent is given a fresh one per spawn (the driver reads
//! randomness; the kernel never does) and hands it to the children in their environment;
//! a port carries its own in its name (a capability: whoever may connect holds the name).
//! The tag covers a fixed context string, the sender's role, the frame's message type and
//! its body up to the tag: a message cannot be moved to another frame type, and a root's
//! own messages reflected back to it do not verify as its peer's.

use alloc::string::String;
use core::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::role::Role;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a bootstrap tag: HMAC-SHA256 truncated to its first 128 bits.
pub const TAG_LEN: usize = 16;

/// Domain separation: a tag of this protocol can never be taken for a tag of another use
/// of the same key (the data-plane key below, the daemons' exchange).
const CONTEXT: &[u8] = b"dynres bootstrap mac v1\0";

/// Label of the data-plane key derived from a finished connection's bootstrap key.
const DATA_PLANE: &[u8] = b"dynres data plane v1\0";

/// A 256-bit bootstrap key (SPAWN-22). Its `Debug` form never shows the key, so it can
/// sit inside configurations and states that are logged.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BootKey(pub [u8; BootKey::LEN]);

impl fmt::Debug for BootKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key itself: configurations and machines are logged with `?`.
        f.write_str("BootKey(..)")
    }
}

fn role_byte(r: Role) -> u8 {
    match r {
        Role::Acceptor => 1,
        Role::Initiator => 2,
    }
}

impl BootKey {
    /// Key length in bytes.
    pub const LEN: usize = 32;

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length; a 32-byte key cannot be refused.
        match HmacSha256::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts keys of any length"),
        }
    }

    fn tagged(&self, sender: Role, msg_type: u16, body: &[u8]) -> HmacSha256 {
        let mut m = self.mac();
        m.update(CONTEXT);
        m.update(&[role_byte(sender)]);
        m.update(&msg_type.to_be_bytes());
        m.update(body);
        m
    }

    /// The tag `sender` puts on a frame of type `msg_type` whose body before the tag is
    /// `body`.
    pub fn tag(&self, sender: Role, msg_type: u16, body: &[u8]) -> [u8; TAG_LEN] {
        let full = self.tagged(sender, msg_type, body).finalize().into_bytes();
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&full[..TAG_LEN]);
        t
    }

    /// Whether `tag` is `sender`'s tag on that frame, compared in constant time.
    pub fn verify(&self, sender: Role, msg_type: u16, body: &[u8], tag: &[u8]) -> bool {
        tag.len() == TAG_LEN
            && self
                .tagged(sender, msg_type, body)
                .verify_truncated_left(tag)
                .is_ok()
    }

    /// The key of the data connections of a finished inter-group: HMAC(bootstrap key,
    /// label | session | acceptor triple | initiator triple), the same at every rank of
    /// both groups and different for every connection (`InterGroup::data_key`).
    pub fn data_plane(&self, session: u64, acceptor: &[u8], initiator: &[u8]) -> BootKey {
        let mut m = self.mac();
        m.update(DATA_PLANE);
        m.update(&session.to_be_bytes());
        m.update(acceptor);
        m.update(initiator);
        let mut k = [0u8; Self::LEN];
        k.copy_from_slice(&m.finalize().into_bytes());
        BootKey(k)
    }

    /// The key as 64 lowercase hex digits (its form in port names and the environment).
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(2 * Self::LEN);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        s
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    const K: BootKey = BootKey([7; 32]);

    #[test]
    fn a_tag_verifies_only_for_its_key_role_type_and_body() {
        // SPAWN-22
        let t = K.tag(Role::Initiator, 0x0110, b"body");
        assert!(K.verify(Role::Initiator, 0x0110, b"body", &t));
        assert!(!K.verify(Role::Acceptor, 0x0110, b"body", &t), "reflected");
        assert!(!K.verify(Role::Initiator, 0x0111, b"body", &t), "retyped");
        assert!(!K.verify(Role::Initiator, 0x0110, b"bodY", &t), "altered");
        assert!(!BootKey([8; 32]).verify(Role::Initiator, 0x0110, b"body", &t));
        assert!(
            !K.verify(Role::Initiator, 0x0110, b"body", &t[..15]),
            "short"
        );
        assert!(!K.verify(Role::Initiator, 0x0110, b"body", &[0; TAG_LEN]));
    }

    #[test]
    fn the_key_never_shows_in_debug_and_prints_as_hex() {
        let k = BootKey([0xab; 32]);
        assert_eq!(alloc::format!("{k:?}"), "BootKey(..)");
        assert_eq!(k.to_hex(), "ab".repeat(32));
        assert_eq!(BootKey([0x0f; 32]).to_hex(), "0f".repeat(32));
    }

    #[test]
    fn data_plane_keys_differ_per_connection_and_from_the_bootstrap_key() {
        let a = K.data_plane(1, b"acc", b"ini");
        assert_eq!(a, K.data_plane(1, b"acc", b"ini"));
        assert_ne!(a, K.data_plane(2, b"acc", b"ini"));
        assert_ne!(a, K.data_plane(1, b"ini", b"acc"));
        assert_ne!(a, BootKey([8; 32]).data_plane(1, b"acc", b"ini"));
        assert_ne!(a, K);
    }
}
