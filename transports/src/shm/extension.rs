//! Inbox extensions: connection slots on demand (spec `DATA-10`).
//!
//! An inbox starts with a small slot table; a sender that finds every slot taken
//! creates the next *extension*, a segment of further slots with their rings:
//!
//! ```text
//! [ExtHeader][Slot; nslots] ... page-aligned ... [ring 0 bytes][ring 1 bytes]...
//! ```
//!
//! Extension `k` is named `{inbox name}-x{k}-{16 random hex digits}` and published by
//! storing its random part in word `k` of the inbox header's extension table with a
//! compare-and-swap from 0: of several senders creating extension `k` at once exactly
//! one wins, the others unlink their own segment and map the winner's. The random
//! part keeps the name unpredictable even though the inbox name can be listed in
//! `/dev/shm` (a stranger who could guess it could pre-create it and make every
//! sender fail). The pid in the inbox name makes the extension belong to the inbox
//! owner for every sweep by pid ([`super::segment::reap_stale`], the launcher's), and
//! the owner unlinks all of them when it drops its inbox, after sealing the table so
//! no sender can publish one more.

use std::cell::OnceCell;
use std::ptr::NonNull;

use super::layout::Slot;
use super::ring::{RawStorage, RingControl};
use super::segment::{self, Segment};
use crate::error::{Result, TransportError};

/// Most extensions one inbox can have (`DATA-10`): with the default 32 + 63 × 64 slots,
/// 4 064 senders per process.
pub const MAX_EXTENSIONS: usize = 63;

/// Extension table word of an inbox whose owner is going away: no sender may publish
/// an extension any more (the owner could not unlink it).
pub const SEALED: u64 = u64::MAX;

const EXT_MAGIC: u64 = 0x6479_6e72_6578_746e; // "dynrextn"
/// Extension layout version (changes together with the inbox's).
const EXT_VERSION: u32 = 1;

/// Header of an extension segment (read-only after creation).
#[repr(C)]
struct ExtHeader {
    magic: u64,
    version: u32,
    index: u32,
    nslots: u32,
    _pad: u32,
    ring_cap: u64,
}

/// The name of extension `index` of inbox `base`, published as `suffix`.
pub fn extension_name(base: &str, index: usize, suffix: u64) -> String {
    format!("{base}-x{index}-{suffix:016x}")
}

fn slots_off() -> usize {
    std::mem::size_of::<ExtHeader>().next_multiple_of(64)
}

fn data_off(nslots: usize) -> usize {
    (slots_off() + nslots * std::mem::size_of::<Slot>()).next_multiple_of(4096)
}

/// A mapped extension segment.
pub(super) struct Extension {
    seg: Segment,
    nslots: usize,
    ring_cap: usize,
}

impl Extension {
    /// Creates extension `index` of inbox `base` under a fresh random suffix, laid out
    /// with free slots; returns it and the suffix to publish. The segment is still ours
    /// (unlinked on drop) until [`Extension::disown`].
    pub(super) fn create(
        base: &str,
        index: usize,
        nslots: usize,
        ring_cap: usize,
    ) -> Result<(Self, u64)> {
        let mut suffix = 0;
        let seg = Segment::create_unique_with(data_off(nslots) + nslots * ring_cap, || {
            // 0 means "none yet" and SEALED "no more" in the table: never a suffix.
            suffix = loop {
                let r = segment::random_u64()?;
                if r != 0 && r != SEALED {
                    break r;
                }
            };
            Ok(extension_name(base, index, suffix))
        })?;
        let p = seg.ptr().as_ptr();
        // SAFETY: the fresh mapping is large enough and page-aligned; nobody else maps
        // it before its suffix is published (Release), after these writes.
        unsafe {
            p.cast::<ExtHeader>().write(ExtHeader {
                magic: EXT_MAGIC,
                version: EXT_VERSION,
                index: index as u32,
                nslots: nslots as u32,
                _pad: 0,
                ring_cap: ring_cap as u64,
            });
            for j in 0..nslots {
                p.add(slots_off() + j * std::mem::size_of::<Slot>())
                    .cast::<Slot>()
                    .write(Slot::new());
            }
        }
        Ok((
            Self {
                seg,
                nslots,
                ring_cap,
            },
            suffix,
        ))
    }

    /// Maps the published extension `index` of inbox `base` and checks it is what the
    /// inbox header announces (ours, 0600: [`Segment::open`]; same slot count and ring
    /// size).
    pub(super) fn open(
        base: &str,
        index: usize,
        suffix: u64,
        nslots: usize,
        ring_cap: usize,
    ) -> Result<Self> {
        let name = extension_name(base, index, suffix);
        let seg = Segment::open(&name)?;
        let bad = |reason| TransportError::BadSegment {
            name: name.clone(),
            reason,
        };
        if seg.len() < data_off(nslots) + nslots * ring_cap {
            return Err(bad("extension smaller than announced"));
        }
        // SAFETY: the mapping holds at least a header (checked); it is read-only after
        // creation, which happened before the suffix we were given was published.
        let h = unsafe { &*seg.ptr().as_ptr().cast::<ExtHeader>() };
        if h.magic != EXT_MAGIC
            || h.version != EXT_VERSION
            || h.index as usize != index
            || h.nslots as usize != nslots
            || h.ring_cap as usize != ring_cap
        {
            return Err(bad("extension header does not match its inbox"));
        }
        Ok(Self {
            seg,
            nslots,
            ring_cap,
        })
    }

    /// Leaves unlinking to the inbox owner (called once the extension is published).
    pub(super) fn disown(&mut self) {
        self.seg.disown();
    }

    /// Slot `j`.
    pub(super) fn slot(&self, j: usize) -> &Slot {
        assert!(j < self.nslots);
        // SAFETY: in bounds (checked), initialised at create, valid while `seg` lives.
        unsafe {
            &*self
                .seg
                .ptr()
                .as_ptr()
                .add(slots_off() + j * std::mem::size_of::<Slot>())
                .cast::<Slot>()
        }
    }

    /// Ring control block and storage of slot `j`.
    ///
    /// # Safety
    /// The pointers are valid only while this extension stays mapped.
    pub(super) unsafe fn ring(&self, j: usize) -> (NonNull<RingControl>, RawStorage) {
        let ctrl = NonNull::from(&self.slot(j).ring);
        // SAFETY: ring `j` lies inside the mapping (size checked at open/create); the
        // capacity is a power of two (the inbox checked it).
        unsafe {
            let data = NonNull::new_unchecked(
                self.seg
                    .ptr()
                    .as_ptr()
                    .add(data_off(self.nslots) + j * self.ring_cap),
            );
            (ctrl, RawStorage::new(data, self.ring_cap))
        }
    }
}

/// One process' mappings of an inbox's extensions, filled in index order as they are
/// needed (a sender) or published (the owner). Mapped extensions never move or go
/// away while the table lives, so references into them last as long as `&self`.
#[derive(Default)]
pub(super) struct Extensions {
    /// Allocated at the first extension: most inboxes never have one.
    cells: OnceCell<Box<[OnceCell<Extension>]>>,
}

impl Extensions {
    fn cells(&self) -> &[OnceCell<Extension>] {
        self.cells
            .get_or_init(|| (0..MAX_EXTENSIONS).map(|_| OnceCell::new()).collect())
    }

    /// Extension `k`, if mapped here.
    pub(super) fn get(&self, k: usize) -> Option<&Extension> {
        self.cells.get()?.get(k)?.get()
    }

    /// Keeps `ext` as extension `k` (the one already there wins; same segment).
    pub(super) fn insert(&self, k: usize, ext: Extension) -> &Extension {
        let cell = &self.cells()[k];
        let _ = cell.set(ext);
        cell.get().expect("just set")
    }

    /// How many extensions, from index 0 on, are mapped here.
    pub(super) fn mapped(&self) -> usize {
        self.cells
            .get()
            .map_or(0, |c| c.iter().take_while(|e| e.get().is_some()).count())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::{Arc, Barrier};

    use crate::shm::layout::{Inbox, SLOT_OPEN};
    use crate::sync::Ordering;

    /// The extensions of inbox `base` present in `/dev/shm`, by index.
    fn listed(base: &str) -> Vec<usize> {
        let prefix = format!("{base}-x");
        let mut v: Vec<usize> = std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.strip_prefix(&prefix)?.split('-').next()?.parse().ok()
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// 48 senders, each with its own view of the inbox (as separate processes have),
    /// claim at once from an inbox of 2 slots with extensions of 2: they all race to
    /// create the same extensions. Every claim must succeed on a distinct slot, each
    /// index must end with exactly one segment in `/dev/shm` (the losers unlink
    /// theirs), the owner must see every claimed slot open, and once the owner is gone
    /// no extension may be left (DATA-10).
    #[test]
    fn racing_creators_leave_one_extension_per_index_and_none_after_the_owner() {
        const SENDERS: usize = 48;
        let owner = Inbox::create(2, 2, 4096).unwrap();
        let base = owner.seg.name().to_owned();
        let start = Arc::new(Barrier::new(SENDERS));
        let senders: Vec<_> = (0..SENDERS)
            .map(|i| {
                let (base, start) = (base.clone(), start.clone());
                std::thread::spawn(move || {
                    let view = Inbox::open(&base).unwrap();
                    start.wait();
                    let slot = view
                        .claim(&format!("sender-{i}"))
                        .unwrap_or_else(|e| panic!("sender {i}: {e}"));
                    (view, slot)
                })
            })
            .collect();
        let claimed: Vec<(Inbox, usize)> = senders.into_iter().map(|t| t.join().unwrap()).collect();
        let mut slots: Vec<usize> = claimed.iter().map(|(_, s)| *s).collect();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), SENDERS, "every claim on its own slot");
        let needed = (SENDERS - 2).div_ceil(2);
        assert_eq!(
            listed(&base),
            (0..needed).collect::<Vec<_>>(),
            "one segment per index, no loser's left"
        );
        owner.map_extensions().unwrap();
        assert_eq!(owner.nslots(), 2 + 2 * needed);
        for (view, s) in &claimed {
            assert_eq!(owner.slot(*s).state.load(Ordering::Acquire), SLOT_OPEN);
            assert_eq!(view.sender_name(*s), owner.sender_name(*s));
        }
        drop(owner);
        assert!(
            listed(&base).is_empty(),
            "the owner unlinks every extension"
        );
        // A sender still holding a view cannot publish an extension any more: the
        // owner sealed the table, and the sender's own segment is unlinked again.
        let (view, _) = &claimed[0];
        assert!(view.claim("late").is_err(), "the table is sealed");
        assert!(listed(&base).is_empty(), "nothing left by the late sender");
    }

    /// A peer that finds the owner dead unlinks the inbox and all its extensions.
    #[test]
    fn unlink_all_removes_the_extensions_too() {
        let owner = Inbox::create(1, 1, 4096).unwrap();
        let base = owner.seg.name().to_owned();
        let view = Inbox::open(&base).unwrap();
        for i in 0..3 {
            view.claim(&format!("s{i}")).unwrap();
        }
        assert_eq!(listed(&base), [0, 1]);
        view.unlink_all();
        assert!(listed(&base).is_empty());
        assert!(!std::path::Path::new("/dev/shm").join(&base).exists());
    }
}
