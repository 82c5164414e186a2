//! [`Shared`]: a table shared between copies of a machine until one of them changes it.
//!
//! Why: a model checker clones a machine for every state it generates, although a step
//! changes one or two of its tables (a confirm touches the change table, not the pset
//! registry or the job data). Behind `Shared`, a clone copies a pointer, and a table is
//! copied only when the copy that changes it is not the only one holding it. A driver
//! that never clones its machines pays one reference count per table.
//!
//! Reads go through `Deref`, changes through `DerefMut`, so the machines' code reads as
//! if the tables were plain fields. Equality and order are those of the value.
//!
//! The hash is the value's hash by a fixed hasher, cached beside the value until it
//! changes: the checker hashes every machine it steps, and rehashing the tables the step
//! did not touch was most of that work. Equal values hash alike, shared or not (on
//! targets without 64-bit atomics nothing is cached and the value is hashed as it is).

use alloc::sync::Arc;
use core::fmt;
#[cfg(target_has_atomic = "64")]
use core::hash::BuildHasher;
use core::hash::{Hash, Hasher};
use core::ops::{Deref, DerefMut};
#[cfg(target_has_atomic = "64")]
use core::sync::atomic::{AtomicU64, Ordering};

/// A value shared between clones, copied on the first change of a shared copy.
#[derive(Clone, Default)]
pub struct Shared<T>(Arc<Inner<T>>);

#[derive(Default)]
struct Inner<T> {
    value: T,
    /// The value's hash, or 0 while not computed since the last change.
    #[cfg(target_has_atomic = "64")]
    hash: AtomicU64,
}

impl<T: Clone> Clone for Inner<T> {
    fn clone(&self) -> Self {
        Inner {
            value: self.value.clone(),
            #[cfg(target_has_atomic = "64")]
            hash: AtomicU64::new(self.hash.load(Ordering::Relaxed)),
        }
    }
}

impl<T> Shared<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        Shared(Arc::new(Inner {
            value,
            #[cfg(target_has_atomic = "64")]
            hash: AtomicU64::new(0),
        }))
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Shared::new(value)
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0.value
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    /// The value, copied first if another clone holds it too; its cached hash is dropped.
    fn deref_mut(&mut self) -> &mut T {
        let inner = Arc::make_mut(&mut self.0);
        #[cfg(target_has_atomic = "64")]
        {
            *inner.hash.get_mut() = 0;
        }
        &mut inner.value
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        // Clones of one machine mostly share their tables: no need to compare them.
        Arc::ptr_eq(&self.0, &other.0) || **self == **other
    }
}

impl<T: Eq> Eq for Shared<T> {}

impl<T: PartialOrd> PartialOrd for Shared<T> {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        (**self).partial_cmp(&**other)
    }
}

impl<T: Ord> Ord for Shared<T> {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl<T: Hash> Hash for Shared<T> {
    // One function with the two builds inside (not two functions under `cfg`), so that
    // a mutation test of the tested build does not count a body it never compiles.
    fn hash<H: Hasher>(&self, state: &mut H) {
        #[cfg(target_has_atomic = "64")]
        {
            let mut h = self.0.hash.load(Ordering::Relaxed);
            if h == 0 {
                // Two threads may both compute it; they store the same value. 0 means
                // "not computed", so a value hashing to 0 is cached as 1.
                // foldhash's fixed-seed hasher: equal values hash alike in every copy
                // and every run.
                h = foldhash::quality::FixedState::default().hash_one(&self.0.value);
                if h == 0 {
                    h = 1;
                }
                self.0.hash.store(h, Ordering::Relaxed);
            }
            state.write_u64(h);
        }
        #[cfg(not(target_has_atomic = "64"))]
        self.0.value.hash(state)
    }
}

impl<T: fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;

    #[test]
    fn a_change_to_a_clone_leaves_the_original_alone() {
        let mut a: Shared<BTreeMap<u32, u32>> = Shared::new(BTreeMap::new());
        a.insert(1, 10);
        let mut b = a.clone();
        assert!(Arc::ptr_eq(&a.0, &b.0), "a clone shares the table");
        assert_eq!(hash(&a), hash(&b));
        b.insert(2, 20);
        assert!(!Arc::ptr_eq(&a.0, &b.0), "a change copies a shared table");
        assert_eq!(a.len(), 1);
        assert_eq!(b.len(), 2);
        assert_ne!(a, b);
        assert_ne!(hash(&a), hash(&b), "a change drops the cached hash");
        b.remove(&2);
        assert_eq!(a, b, "equal values are equal, shared or not");
        assert_eq!(hash(&a), hash(&b), "equal values hash alike, shared or not");
        // Changing the only holder does not copy.
        let before = Arc::as_ptr(&b.0);
        b.insert(3, 30);
        assert_eq!(Arc::as_ptr(&b.0), before);
    }

    #[test]
    fn equal_values_hash_alike_and_order_as_their_values() {
        let a = Shared::new(vec_of(3));
        // Hashed before and after the other's hash is cached, and a fresh copy.
        let b = Shared::new(vec_of(3));
        assert_eq!(hash(&a), hash(&b));
        assert_eq!(hash(&a), hash(&Shared::new(vec_of(3))));
        assert_ne!(hash(&a), hash(&Shared::new(vec_of(4))));
        let mut c = a.clone();
        c.push(9);
        c.pop();
        assert_eq!(hash(&c), hash(&a), "changed and changed back");
        assert!(Shared::new(vec_of(2)) < a);
        assert_eq!(Shared::new(vec_of(4)).cmp(&a), core::cmp::Ordering::Greater);
        assert_eq!(alloc::format!("{a:?}"), "[0, 1, 2]", "prints as its value");
    }

    fn hash<T: Hash>(v: &T) -> u64 {
        let mut h = TestHasher::default();
        v.hash(&mut h);
        h.finish()
    }

    fn vec_of(n: u8) -> alloc::vec::Vec<u8> {
        (0..n).collect()
    }

    /// A hasher that folds in what it is fed (enough to compare two feeds).
    #[derive(Default)]
    struct TestHasher(u64);
    impl Hasher for TestHasher {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = self.0.wrapping_mul(31).wrapping_add(u64::from(*b));
            }
        }
    }
}
