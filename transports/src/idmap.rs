//! Hash maps keyed by the crate's own sequential ids (connections, handles).
//!
//! SipHash's flooding resistance buys nothing for keys we allocate ourselves, and it
//! costs a noticeable share of a sub-microsecond shared-memory message; a
//! multiplicative hash does.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplicative hasher for small integer keys.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(K);
    }
}

/// A `HashMap` with [`IdHasher`].
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
