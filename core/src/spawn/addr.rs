//! Transport addresses, as the handshake messages and the port names carry them: a
//! leaf, so the messages and the ports can both use it.

use alloc::vec::Vec;

/// Longest endpoint or port address, in bytes.
pub const MAX_ADDR: usize = 64;

/// An opaque transport address: a UD (LID, QPN) pair, an RC connection request address,
/// a socket address... The kernel compares and copies it, never interprets it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Addr(pub Vec<u8>);
