//! Pset membership as a bit-set over process-table indices.
//!
//! The thesis' prototype stored every pset as an explicit list of process ids, which made
//! set operations O(m·n) and named them as the bottleneck at scale (§8.3.3). Here a job's
//! processes are numbered once (`ProcessTable`) and every pset holds one bit per
//! process: 1 M members cost 122 KiB and a set operation is a word-wise pass.

use alloc::vec::Vec;
use core::fmt;

const WORD_BITS: usize = 64;

/// A set of process-table indices.
///
/// Invariant: `words` has no trailing zero word and `len` is the number of set bits, so
/// the derived `Eq`/`Hash` agree with set equality.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberSet {
    words: Vec<u64>,
    len: usize,
}

impl MemberSet {
    /// The empty set.
    pub const fn new() -> Self {
        MemberSet {
            words: Vec::new(),
            len: 0,
        }
    }

    /// The set `{0, 1, …, n-1}`.
    pub fn first_n(n: u32) -> Self {
        let n = n as usize;
        let mut words = alloc::vec![u64::MAX; n / WORD_BITS];
        if n % WORD_BITS != 0 {
            words.push((1u64 << (n % WORD_BITS)) - 1);
        }
        MemberSet { words, len: n }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set has no member.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of heap the set holds (for the memory figure in the benchmark).
    pub fn heap_bytes(&self) -> usize {
        self.words.capacity() * core::mem::size_of::<u64>()
    }

    /// Whether `index` is a member.
    pub fn contains(&self, index: u32) -> bool {
        let (w, b) = split(index);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    /// Adds `index`; returns whether it was new.
    pub fn insert(&mut self, index: u32) -> bool {
        let (w, b) = split(index);
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        let fresh = self.words[w] & (1 << b) == 0;
        self.words[w] |= 1 << b;
        self.len += usize::from(fresh);
        fresh
    }

    /// Removes `index`; returns whether it was a member.
    pub fn remove(&mut self, index: u32) -> bool {
        let (w, b) = split(index);
        let Some(word) = self.words.get_mut(w) else {
            return false;
        };
        let present = *word & (1 << b) != 0;
        *word &= !(1 << b);
        self.len -= usize::from(present);
        self.trim();
        present
    }

    /// Members in ascending index order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &word)| {
            let mut rest = word;
            core::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let b = rest.trailing_zeros();
                rest &= rest - 1;
                Some((w * WORD_BITS) as u32 + b)
            })
        })
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &MemberSet) -> MemberSet {
        let (long, short) = if self.words.len() >= other.words.len() {
            (self, other)
        } else {
            (other, self)
        };
        let mut words = long.words.clone();
        for (dst, src) in words.iter_mut().zip(&short.words) {
            *dst |= src;
        }
        MemberSet::from_words(words)
    }

    /// `self ∖ other`.
    pub fn difference(&self, other: &MemberSet) -> MemberSet {
        let mut words = self.words.clone();
        for (dst, src) in words.iter_mut().zip(&other.words) {
            *dst &= !src;
        }
        MemberSet::from_words(words)
    }

    /// `self ∩ other`.
    pub fn intersection(&self, other: &MemberSet) -> MemberSet {
        let words = self
            .words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| a & b)
            .collect();
        MemberSet::from_words(words)
    }

    /// Whether the two sets share a member.
    pub fn intersects(&self, other: &MemberSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    /// `self ⊆ other`.
    pub fn is_subset(&self, other: &MemberSet) -> bool {
        self.len <= other.len
            && self.words.iter().enumerate().all(|(i, &w)| {
                let o = other.words.get(i).copied().unwrap_or(0);
                w & !o == 0
            })
    }

    /// `self ⊊ other` (the thesis' `⊂` in Defs. 2–4).
    pub fn is_strict_subset(&self, other: &MemberSet) -> bool {
        self.len < other.len && self.is_subset(other)
    }

    /// Splits into consecutive parts (in ascending index order) of the given sizes.
    ///
    /// Returns `None` unless every size is non-zero and the sizes add up to `len()`.
    /// Works a word at a time (popcounts) rather than a member at a time, so splitting a
    /// 1 M-member set costs a pass over 15 625 words.
    pub fn split_sizes(&self, sizes: &[usize]) -> Option<Vec<MemberSet>> {
        let total = sizes
            .iter()
            .try_fold(0usize, |acc, &s| acc.checked_add(s))?;
        if total != self.len || sizes.contains(&0) {
            return None;
        }
        let mut parts = Vec::with_capacity(sizes.len());
        // `carry` holds the bits of word `w` not yet handed to a part.
        let mut w = 0;
        let mut carry = self.words.first().copied().unwrap_or(0);
        for &size in sizes {
            let (start, first) = (w, carry);
            let mut need = size;
            // Skip over whole words this part takes entirely; copy them in one go below.
            while need > 0 && carry.count_ones() as usize <= need {
                need -= carry.count_ones() as usize;
                w += 1;
                carry = self.words.get(w).copied().unwrap_or(0);
            }
            let mut part = Vec::with_capacity(w + 1);
            part.resize(start, 0);
            if w > start {
                part.push(first);
                part.extend_from_slice(&self.words[start + 1..w]);
            }
            // The rest of the part: the lowest `need` bits of word `w` (none when it ended
            // on a word boundary; `trim` drops the empty word then, so no `need > 0`
            // guard, which a mutation to `>=` could not be told from).
            let head = lowest_bits(carry, need);
            part.push(head);
            carry &= !head;
            let mut set = MemberSet {
                words: part,
                len: size,
            };
            set.trim();
            parts.push(set);
        }
        Some(parts)
    }

    /// The set renumbered onto `keep`: member `i` becomes the number of members of
    /// `keep` below `i`, and members `keep` lacks are dropped. That is how the process
    /// table is compacted (`PSET-24`): the numbering is monotone, so the members keep
    /// their order (rank creation order, which `SPLIT` by sizes and member lists rely
    /// on), and the set shrinks to the words the kept processes need.
    pub fn compress(&self, keep: &MemberSet) -> MemberSet {
        let mut out = MemberSet::new();
        // `base`: members of `keep` in the words before `w`.
        let mut base = 0u32;
        for (w, &k) in keep.words.iter().enumerate() {
            let mut bits = self.words.get(w).copied().unwrap_or(0) & k;
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                out.insert(base + (k & ((1u64 << b) - 1)).count_ones());
            }
            base += k.count_ones();
        }
        out
    }

    /// Builds a set from raw words, restoring the invariant.
    fn from_words(words: Vec<u64>) -> MemberSet {
        let len = words.iter().map(|w| w.count_ones() as usize).sum();
        let mut set = MemberSet { words, len };
        set.trim();
        set
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }
}

impl FromIterator<u32> for MemberSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut set = MemberSet::new();
        for i in iter {
            set.insert(i);
        }
        set
    }
}

impl fmt::Debug for MemberSet {
    /// Prints at most 16 members: psets can hold millions.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemberSet(len={}, {{", self.len)?;
        for (n, i) in self.iter().take(16).enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{i}")?;
        }
        if self.len > 16 {
            f.write_str(",…")?;
        }
        f.write_str("})")
    }
}

fn split(index: u32) -> (usize, u32) {
    (index as usize / WORD_BITS, index % WORD_BITS as u32)
}

/// The `n` lowest set bits of `word` (`n` < popcount).
fn lowest_bits(word: u64, n: usize) -> u64 {
    let mut rest = word;
    for _ in 0..n {
        rest &= rest - 1;
    }
    word & !rest
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn insert_remove_keep_len_and_canonical_form() {
        let mut s = MemberSet::new();
        assert!(s.insert(200));
        assert!(!s.insert(200));
        assert!(s.insert(3));
        assert_eq!(s.len(), 2);
        assert!(s.remove(200));
        assert!(!s.remove(200));
        // Trailing zero words are trimmed, so equality is set equality.
        assert_eq!(s, [3].into_iter().collect());
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![3]);
    }

    #[test]
    fn first_n_has_exactly_n_members() {
        for n in [0, 1, 63, 64, 65, 1000] {
            let s = MemberSet::first_n(n);
            assert_eq!(s.len(), n as usize);
            assert_eq!(s.iter().count(), n as usize);
            assert_eq!(s, (0..n).collect());
        }
    }

    #[test]
    fn a_million_members_fit_in_122_kib() {
        // PSET-20 / issue 2's memory target: one bit per process, ≤160 KiB at 1 M.
        let s = MemberSet::first_n(1_000_000);
        assert_eq!(s.heap_bytes(), 1_000_000 / 8);
        assert_eq!(MemberSet::new().heap_bytes(), 0);
        let sparse: MemberSet = [0, 64 * 100].into_iter().collect();
        assert_eq!(sparse.heap_bytes(), 101 * 8);
    }

    /// PSET-24: compaction renumbers members onto the kept indices in order and drops
    /// the others, across word boundaries.
    #[test]
    fn compress_renumbers_onto_the_kept_indices_in_order() {
        let keep: MemberSet = [1, 5, 63, 64, 130, 200].into_iter().collect();
        let s: MemberSet = [5, 64, 200, 7].into_iter().collect();
        // 5 → 1, 64 → 3, 200 → 5; 7 is not kept.
        assert_eq!(s.compress(&keep), [1, 3, 5].into_iter().collect());
        assert_eq!(keep.compress(&keep), MemberSet::first_n(6));
        assert_eq!(MemberSet::new().compress(&keep), MemberSet::new());
        assert_eq!(s.compress(&MemberSet::new()), MemberSet::new());
    }

    #[test]
    fn strict_subset_excludes_equality() {
        let a: MemberSet = [1, 2].into_iter().collect();
        let b: MemberSet = [1, 2, 70].into_iter().collect();
        assert!(a.is_strict_subset(&b));
        assert!(!b.is_strict_subset(&b));
        assert!(b.is_subset(&b));
        assert!(!b.is_subset(&a));
    }

    #[test]
    fn split_sizes_cuts_inside_and_across_words() {
        let s: MemberSet = (0..200).filter(|i| i % 3 != 0).collect();
        let parts = s.split_sizes(&[1, 50, s.len() - 51]).unwrap();
        let all: Vec<u32> = s.iter().collect();
        assert_eq!(parts[0].iter().collect::<Vec<_>>(), all[..1]);
        assert_eq!(parts[1].iter().collect::<Vec<_>>(), all[1..51]);
        assert_eq!(parts[2].iter().collect::<Vec<_>>(), all[51..]);
        assert!(s.split_sizes(&[1, 2]).is_none(), "sizes must add up");
        assert!(s.split_sizes(&[0, s.len()]).is_none(), "no empty part");
    }
}
