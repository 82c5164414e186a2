//! The bootstrap's randomness (SPAWN-22): keys of ports and spawns and group ids are drawn
//! here, by the driver, from `/dev/urandom`; the kernel takes them as inputs and never
//! reads randomness itself.

use std::io::Read;

use dynres_core::spawn::BootKey;

use crate::error::CommError;

/// `N` bytes from `/dev/urandom`.
fn bytes<const N: usize>() -> Result<[u8; N], CommError> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| CommError::io("read /dev/urandom", e))?;
    Ok(b)
}

/// A fresh key for a port or a spawn.
pub(crate) fn key() -> Result<BootKey, CommError> {
    bytes().map(BootKey)
}

/// A fresh group id. 64 random bits: unique in a job (and across jobs) but for a chance
/// of 2⁻⁶⁴ per pair, and unpredictable. Secrecy is not what protects a spawn — its
/// messages are authenticated (SPAWN-22) — but a random id leaves a stranger nothing to
/// aim a forged Hello at, and makes equal sessions of two jobs' groups (SPAWN-21) as
/// unlikely as a collision.
pub(crate) fn group_id() -> Result<u64, CommError> {
    bytes().map(u64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_differ() {
        assert_ne!(key().unwrap(), key().unwrap());
        assert_ne!(group_id().unwrap(), group_id().unwrap());
    }
}
