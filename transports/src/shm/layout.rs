//! Layout of one process' inbox segment: a header (owner, running flag, futex word,
//! extension table) followed by connection slots, each holding one SPSC ring written
//! by one sender. When they are all taken, senders add slots in extension segments
//! ([`super::extension`], spec `DATA-10`); slot indices run on across them.
//!
//! ```text
//! [InboxHeader][Slot; nslots] ... page-aligned ... [ring 0 bytes][ring 1 bytes]...
//! ```

use std::ptr::NonNull;

use super::extension::{Extension, Extensions, MAX_EXTENSIONS, SEALED, extension_name};
use super::ring::{CachePadded, RawStorage, RingControl};
use super::segment::{self, Segment};
use super::waiter::WaitWord;
use crate::error::{Result, TransportError};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = 0x6479_6e72_6573_686d; // "dynreshm"
/// Layout version: 5 since the header has an extension table (4: ring records carry a
/// stamp in their mark word; 3: the wait word became one 64-bit `seq | sleepers` word).
const VERSION: u32 = 5;
/// Longest sender segment name a slot can record.
pub const NAME_MAX: usize = 64;

/// Slot states (`Slot::state`). A slot goes FREE → CLAIMED → OPEN → CLOSED → FREE:
/// the sender makes the first three moves and the last but one, only the owner makes it
/// FREE again ([`Slot::recycle`]), and only once nothing can write to it any more.
pub const SLOT_FREE: u32 = 0;
/// Claimed by a sender that is still writing its name.
pub const SLOT_CLAIMED: u32 = 1;
/// Open: the owner may attach a consumer.
pub const SLOT_OPEN: u32 = 2;
/// The sender closed its end (after its last record).
pub const SLOT_CLOSED: u32 = 3;

/// Answer to a single-copy request: the receiver copied the payload; the buffer is
/// the sender's again.
pub const ACK_DONE: u64 = 1;
/// Answer: the receiver could not read; the sender streams the payload through the
/// ring after the request, as for a message without single copy.
pub const ACK_FALLBACK: u64 = 2;
/// The receiver is reading now (claimed with a CAS, so the sender cannot withdraw).
pub const ACK_BUSY: u64 = 3;
/// The sender withdrew the request (its send timed out or its connection is being
/// closed) before the receiver claimed it: the buffer must not be read.
pub const ACK_WITHDRAWN: u64 = 4;

/// The [`Slot::cma_ack`] word for request `seq` in `status`. The word only ever holds
/// the state of the newest request of its ring (one is outstanding at a time).
pub fn ack_word(seq: u64, status: u64) -> u64 {
    (seq << 3) | status
}

/// The status of request `seq` in `word` (`None`: still pending).
pub fn ack_status(word: u64, seq: u64) -> Option<u64> {
    (word >> 3 == seq).then_some(word & 7)
}

/// [`Slot::cma`]: the receiver has not probed the sender yet (ring path).
pub const CMA_UNKNOWN: u32 = 0;
/// [`Slot::cma`]: the receiver read the sender's probe word: single copy allowed.
pub const CMA_OK: u32 = 1;
/// [`Slot::cma`]: the receiver cannot (or will not) read the sender: ring path.
pub const CMA_NO: u32 = 2;

/// Segment header.
#[repr(C)]
pub struct InboxHeader {
    magic: u64,
    version: u32,
    nslots: u32,
    ring_cap: u64,
    owner_pid: u32,
    /// Address and value of the owner's CMA probe word (see `cma::probe_target`): a
    /// receiver that can read this value from the owner may use single-copy reads.
    pub cma_probe_addr: u64,
    /// See `cma_probe_addr`.
    pub cma_probe_token: u64,
    /// 1 while the owner is running, 0 while it sleeps in the futex (004: peers skip
    /// spinning on a process that is not running).
    pub running: CachePadded<AtomicU32>,
    /// Bumped by every sender that opens or closes a slot, so the owner scans slots only
    /// then (and recycles a closed slot promptly, without a timer).
    pub conn_gen: CachePadded<AtomicU32>,
    /// The owner's futex word: notified on new data, new slots and freed ring space.
    pub wait: CachePadded<WaitWord>,
    /// Slots per extension segment.
    ext_slots: u32,
    /// Extension `k` is published by storing its name's random part in word `k`
    /// (compare-and-swap from 0, Release); [`SEALED`] once the owner is going away.
    /// Published words form a prefix: a sender only creates extension `k + 1` after
    /// finding extension `k` full.
    ext: CachePadded<[AtomicU64; MAX_EXTENSIONS]>,
}

/// One sender's slot.
#[repr(C)]
pub struct Slot {
    /// `SLOT_*` state.
    pub state: AtomicU32,
    /// Sender pid.
    pub pid: AtomicU32,
    /// Raised by the sender before each sleep for ring space (after taking its ticket,
    /// followed by a membarrier: [`super::waiter::arm_wake_flags`]); the receiver, after
    /// freeing space, looks at it with a plain load and, if it is up, swaps it to 0
    /// and wakes the sender ([`super::waiter::take_wake_flag`]).
    pub waiting: AtomicU32,
    name_len: AtomicU32,
    /// Set by the receiver (the inbox owner) when it attaches the slot: `CMA_OK` if it
    /// can read the sender's memory (probed), else `CMA_NO`; the sender uses
    /// single-copy transfers on this ring only once it reads `CMA_OK`.
    pub cma: AtomicU32,
    /// The state of the sender's last single-copy request, `seq << 3 | status`
    /// ([`ack_word`]): the receiver claims it (CAS to BUSY) before reading and
    /// stores DONE or FALLBACK (Release) once it is done with the sender's buffer, then
    /// wakes the sender; the sender may withdraw it (CAS to WITHDRAWN) only while
    /// nobody claimed it.
    pub cma_ack: AtomicU64,
    name: [u8; NAME_MAX],
    /// The ring's control block.
    pub ring: RingControl,
}

impl Slot {
    /// A free slot with an empty ring (what [`Inbox::create`] lays out).
    pub fn new() -> Self {
        Self {
            state: AtomicU32::new(SLOT_FREE),
            pid: AtomicU32::new(0),
            waiting: AtomicU32::new(0),
            name_len: AtomicU32::new(0),
            cma: AtomicU32::new(CMA_UNKNOWN),
            cma_ack: AtomicU64::new(0),
            name: [0; NAME_MAX],
            ring: RingControl::new(),
        }
    }

    /// Sender: takes a free slot (FREE → CLAIMED). The Acquire pairs with the Release
    /// in [`Slot::recycle`], so the claimer sees the ring reset, and with it the end of
    /// everything the previous producer and consumer did to the ring's bytes.
    pub fn try_claim(&self) -> bool {
        self.state
            .compare_exchange(
                SLOT_FREE,
                SLOT_CLAIMED,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Sender: the ring will carry nothing more. Called after the last record and only
    /// by a sender that drops its producer at the same time, so from here on nothing in
    /// this process touches the slot again: that is what lets the owner recycle it.
    /// Then bumps the owner's `conn_gen` (`conn_gen` of the inbox holding the slot) so
    /// its next scan sees the close; the Release orders the close before the bump, so a
    /// scan that saw the bump (Acquire) also sees `SLOT_CLOSED`.
    pub fn close(&self, conn_gen: &AtomicU32) {
        self.state.store(SLOT_CLOSED, Ordering::Release);
        conn_gen.fetch_add(1, Ordering::Release);
    }

    /// Owner: whether the sender closed its end. The Acquire makes every byte and
    /// position it wrote before closing visible, so the owner may drain and then reset.
    pub fn is_closed(&self) -> bool {
        self.state.load(Ordering::Acquire) == SLOT_CLOSED
    }

    /// Receiver: claims single-copy request `seq` before reading the sender's buffer.
    /// False if the sender withdrew it (its buffer may be gone: never read it). The
    /// CAS decides against a concurrent [`Slot::withdraw_request`]: exactly one wins.
    pub fn claim_request(&self, seq: u64) -> bool {
        let cur = self.cma_ack.load(Ordering::Acquire);
        ack_status(cur, seq) != Some(ACK_WITHDRAWN)
            && self
                .cma_ack
                .compare_exchange(
                    cur,
                    ack_word(seq, ACK_BUSY),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    /// Receiver: answers a claimed request ([`ACK_DONE`] or [`ACK_FALLBACK`]), after
    /// its last read of the sender's buffer; the Release orders those reads before
    /// the sender's reuse of the buffer (it reads the answer with Acquire). The caller
    /// then wakes the sender.
    pub fn answer_request(&self, seq: u64, status: u64) {
        self.cma_ack.store(ack_word(seq, status), Ordering::Release);
    }

    /// Sender: the state of request `seq` (`None`: nobody touched it yet).
    pub fn request_status(&self, seq: u64) -> Option<u64> {
        ack_status(self.cma_ack.load(Ordering::Acquire), seq)
    }

    /// Sender: withdraws request `seq` unless the receiver claimed or answered it.
    /// True: it will never read the buffer, which may be freed at once.
    pub fn withdraw_request(&self, seq: u64) -> bool {
        let cur = self.cma_ack.load(Ordering::Acquire);
        ack_status(cur, seq).is_none()
            && self
                .cma_ack
                .compare_exchange(
                    cur,
                    ack_word(seq, ACK_WITHDRAWN),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    /// Owner: resets the slot for the next claimer. The caller must know that no
    /// producer can write to it any more: the sender closed it ([`Slot::is_closed`]) or
    /// its process is dead. Resetting under a live producer would let the next claimer
    /// and the old producer write the same ring.
    pub fn recycle(&self) {
        self.ring.reset();
        self.pid.store(0, Ordering::Relaxed);
        self.waiting.store(0, Ordering::Relaxed);
        self.name_len.store(0, Ordering::Relaxed);
        self.cma.store(CMA_UNKNOWN, Ordering::Relaxed);
        self.cma_ack.store(0, Ordering::Relaxed);
        self.state.store(SLOT_FREE, Ordering::Release);
    }
}

impl Default for Slot {
    fn default() -> Self {
        Self::new()
    }
}

/// Typed view of a mapped inbox and of the extensions mapped so far.
pub struct Inbox {
    /// The mapping (kept alive by this value).
    pub seg: Segment,
    nslots: usize,
    ring_cap: usize,
    data_off: usize,
    ext_slots: usize,
    exts: Extensions,
}

fn slots_off() -> usize {
    std::mem::size_of::<InboxHeader>().next_multiple_of(64)
}

fn data_off(nslots: usize) -> usize {
    (slots_off() + nslots * std::mem::size_of::<Slot>()).next_multiple_of(4096)
}

impl Inbox {
    /// Creates our own inbox under a fresh unpredictable name
    /// ([`Segment::create_unique`]), with `nslots` slots and `ext_slots` in each
    /// extension.
    pub fn create(nslots: usize, ext_slots: usize, ring_cap: usize) -> Result<Self> {
        Self::create_with_probe(nslots, ext_slots, ring_cap, (0, 0))
    }

    /// [`Inbox::create`], publishing `(address, token)` of the CMA probe word (zeros:
    /// no single-copy reads from this process).
    pub fn create_with_probe(
        nslots: usize,
        ext_slots: usize,
        ring_cap: usize,
        probe: (u64, u64),
    ) -> Result<Self> {
        assert!(ring_cap.is_power_of_two() && ext_slots > 0);
        let data_off = data_off(nslots);
        let seg = Segment::create_unique(data_off + nslots * ring_cap)?;
        debug_assert!(seg.name().len() <= NAME_MAX);
        let base = seg.ptr().as_ptr();
        // SAFETY: the fresh mapping is large enough, page-aligned, and ours alone until
        // the name is published; all-zero bytes are valid for the atomics, and we write
        // each field in place before anyone can open the segment by its name... which
        // is only handed out after this returns.
        unsafe {
            base.cast::<InboxHeader>().write(InboxHeader {
                magic: MAGIC,
                version: VERSION,
                nslots: nslots as u32,
                ring_cap: ring_cap as u64,
                owner_pid: std::process::id(),
                cma_probe_addr: probe.0,
                cma_probe_token: probe.1,
                running: CachePadded(AtomicU32::new(1)),
                conn_gen: CachePadded(AtomicU32::new(0)),
                wait: CachePadded(WaitWord::new()),
                ext_slots: ext_slots as u32,
                ext: CachePadded(std::array::from_fn(|_| AtomicU64::new(0))),
            });
            for i in 0..nslots {
                base.add(slots_off() + i * std::mem::size_of::<Slot>())
                    .cast::<Slot>()
                    .write(Slot::new());
            }
        }
        Ok(Self {
            seg,
            nslots,
            ring_cap,
            data_off,
            ext_slots,
            exts: Extensions::default(),
        })
    }

    /// Opens a peer's inbox and checks it is one of ours (owned by our effective uid
    /// with no group/other access — [`Segment::open`] — and laid out by this version).
    pub fn open(name: &str) -> Result<Self> {
        let seg = Segment::open(name)?;
        let bad = |reason| TransportError::BadSegment {
            name: name.to_owned(),
            reason,
        };
        if seg.len() < slots_off() {
            return Err(bad("too small"));
        }
        // SAFETY: the mapping holds at least a header (checked); fields are read-only
        // after creation.
        let h = unsafe { &*seg.ptr().as_ptr().cast::<InboxHeader>() };
        if h.magic != MAGIC || h.version != VERSION {
            return Err(bad("wrong magic or version"));
        }
        let (nslots, ring_cap) = (h.nslots as usize, h.ring_cap as usize);
        let ext_slots = h.ext_slots as usize;
        let data_off = data_off(nslots);
        if !ring_cap.is_power_of_two() || ext_slots == 0 || seg.len() < data_off + nslots * ring_cap
        {
            return Err(bad("inconsistent size"));
        }
        Ok(Self {
            seg,
            nslots,
            ring_cap,
            data_off,
            ext_slots,
            exts: Extensions::default(),
        })
    }

    /// The header.
    pub fn header(&self) -> &InboxHeader {
        // SAFETY: checked/initialised at open/create; lives as long as `self.seg`.
        unsafe { &*self.seg.ptr().as_ptr().cast::<InboxHeader>() }
    }

    /// Owner pid.
    pub fn owner_pid(&self) -> u32 {
        self.header().owner_pid
    }

    /// Number of slots mapped in this view: the inbox's own and those of the
    /// extensions mapped so far (all published ones after [`Inbox::map_extensions`]).
    pub fn nslots(&self) -> usize {
        self.nslots + self.exts.mapped() * self.ext_slots
    }

    /// The extension holding slot `i` (past the inbox's own) and its index there.
    fn ext_slot(&self, i: usize) -> (&Extension, usize) {
        let k = (i - self.nslots) / self.ext_slots;
        let ext = self
            .exts
            .get(k)
            .expect("slot index of an extension this view has mapped");
        (ext, (i - self.nslots) % self.ext_slots)
    }

    /// Slot `i` (of the inbox or a mapped extension).
    pub fn slot(&self, i: usize) -> &Slot {
        if i >= self.nslots {
            let (ext, j) = self.ext_slot(i);
            return ext.slot(j);
        }
        // SAFETY: in bounds (checked), initialised at create, valid while `seg` lives.
        unsafe {
            &*self
                .seg
                .ptr()
                .as_ptr()
                .add(slots_off() + i * std::mem::size_of::<Slot>())
                .cast::<Slot>()
        }
    }

    /// The ring control block and storage of slot `i`.
    ///
    /// # Safety
    /// The returned pointers are valid only while this `Inbox` (its mapping) lives.
    pub unsafe fn ring(&self, i: usize) -> (NonNull<RingControl>, RawStorage) {
        if i >= self.nslots {
            let (ext, j) = self.ext_slot(i);
            // SAFETY: the extension stays mapped as long as `self` (the caller's
            // obligation).
            return unsafe { ext.ring(j) };
        }
        let ctrl = NonNull::from(&self.slot(i).ring);
        // SAFETY: ring `i` lies inside the mapping (size checked at open/create).
        let data = unsafe {
            NonNull::new_unchecked(
                self.seg
                    .ptr()
                    .as_ptr()
                    .add(self.data_off + i * self.ring_cap),
            )
        };
        // SAFETY: `ring_cap` bytes at `data`, power of two (checked).
        (ctrl, unsafe { RawStorage::new(data, self.ring_cap) })
    }

    /// Claims a free slot for sender `name`; returns its index. When every slot is
    /// taken, looks in the extensions, creating the next one if all are full
    /// (`DATA-10`); fails only past [`MAX_EXTENSIONS`] or when the owner is going away.
    pub fn claim(&self, name: &str) -> Result<usize> {
        if let Some(i) = self.claim_in(0..self.nslots, name) {
            return Ok(i);
        }
        for k in 0..MAX_EXTENSIONS {
            self.extension(k)?;
            let first = self.nslots + k * self.ext_slots;
            if let Some(i) = self.claim_in(first..first + self.ext_slots, name) {
                return Ok(i);
            }
        }
        Err(TransportError::NoFreeSlot {
            name: self.seg.name().to_owned(),
        })
    }

    /// Claims the first free slot among `range` (all mapped) for sender `name`.
    fn claim_in(&self, range: std::ops::Range<usize>, name: &str) -> Option<usize> {
        for i in range {
            let s = self.slot(i);
            if s.try_claim() {
                s.pid.store(std::process::id(), Ordering::Relaxed);
                let n = name.len().min(NAME_MAX);
                // SAFETY: the claim gives us exclusive write access to the name bytes
                // until we publish SLOT_OPEN with Release below.
                unsafe {
                    let dst = std::ptr::addr_of!(s.name).cast::<u8>().cast_mut();
                    std::ptr::copy_nonoverlapping(name.as_ptr(), dst, n);
                }
                s.name_len.store(n as u32, Ordering::Relaxed);
                s.state.store(SLOT_OPEN, Ordering::Release);
                self.header().conn_gen.0.fetch_add(1, Ordering::Release);
                self.header().wait.0.notify();
                return Some(i);
            }
        }
        None
    }

    /// Sender: extension `k`, mapped here; created and published first if nobody has
    /// yet. Of racing creators exactly one publishes (the compare-and-swap); the others
    /// unlink their own segment and map the winner's.
    fn extension(&self, k: usize) -> Result<&Extension> {
        if let Some(e) = self.exts.get(k) {
            return Ok(e);
        }
        let word = &self.header().ext.0[k];
        // Acquire: pairs with the creator's Release, so its header and slots are
        // written before we map them.
        let mut suffix = word.load(Ordering::Acquire);
        if suffix == 0 {
            let (mut ext, mine) =
                Extension::create(self.seg.name(), k, self.ext_slots, self.ring_cap)?;
            match word.compare_exchange(0, mine, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    ext.disown();
                    tracing::debug!(inbox = %self.seg.name(), index = k, "shm inbox extension created");
                    return Ok(self.exts.insert(k, ext));
                }
                // Dropping ours unlinks it: exactly one segment per index.
                Err(theirs) => suffix = theirs,
            }
        }
        if suffix == SEALED {
            return Err(TransportError::BadSegment {
                name: self.seg.name().to_owned(),
                reason: "its owner is closing it",
            });
        }
        let ext = Extension::open(self.seg.name(), k, suffix, self.ext_slots, self.ring_cap)?;
        Ok(self.exts.insert(k, ext))
    }

    /// Owner: maps every extension published so far, so [`Inbox::nslots`] and
    /// [`Inbox::slot`] cover their slots. Call it when `conn_gen` moved: a sender
    /// publishes an extension before the claim that bumps it.
    pub fn map_extensions(&self) -> Result<()> {
        for k in self.exts.mapped()..MAX_EXTENSIONS {
            let suffix = self.header().ext.0[k].load(Ordering::Acquire);
            if suffix == 0 || suffix == SEALED {
                break;
            }
            let ext = Extension::open(self.seg.name(), k, suffix, self.ext_slots, self.ring_cap)?;
            self.exts.insert(k, ext);
        }
        Ok(())
    }

    /// The names of the extensions published so far.
    fn extension_names(&self) -> Vec<String> {
        self.header()
            .ext
            .0
            .iter()
            .enumerate()
            .map(|(k, w)| (k, w.load(Ordering::Acquire)))
            .take_while(|&(_, w)| w != 0 && w != SEALED)
            .map(|(k, w)| extension_name(self.seg.name(), k, w))
            .collect()
    }

    /// A peer: unlinks the inbox and its extensions after its owner died (cleanup on
    /// peer crash; the mappings stay valid until dropped).
    pub fn unlink_all(&self) {
        for name in self.extension_names() {
            segment::unlink(&name);
        }
        segment::unlink(self.seg.name());
    }

    /// Name of the sender of an open slot (after an Acquire load saw `SLOT_OPEN`).
    pub fn sender_name(&self, i: usize) -> String {
        let s = self.slot(i);
        let n = (s.name_len.load(Ordering::Relaxed) as usize).min(NAME_MAX);
        String::from_utf8_lossy(&s.name[..n]).into_owned()
    }

    /// Sender: closes our slot `i` in this (peer's) inbox; see [`Slot::close`]. The
    /// caller must drop its producer on the slot now and wake the owner.
    pub fn close_slot(&self, i: usize) {
        self.slot(i).close(&self.header().conn_gen.0);
    }

    /// Owner: resets slot `i` for reuse, once its sender closed it or died; see
    /// [`Slot::recycle`].
    pub fn free_slot(&self, i: usize) {
        self.slot(i).recycle();
    }
}

impl Drop for Inbox {
    /// The owner seals the extension table (a sender that publishes later fails its
    /// compare-and-swap and unlinks its own segment) and unlinks every extension
    /// published before; the inbox itself is unlinked by its [`Segment`].
    fn drop(&mut self) {
        if !self.seg.is_owner() {
            return;
        }
        for (k, w) in self.header().ext.0.iter().enumerate() {
            let suffix = w.swap(SEALED, Ordering::AcqRel);
            if suffix != 0 && suffix != SEALED {
                segment::unlink(&extension_name(self.seg.name(), k, suffix));
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::shm::ring::loom_storage::CellStorage;
    use crate::shm::ring::{Consumer, Producer};
    use loom::sync::Arc;

    /// The owner recycles a slot once it saw the sender's close through the generation
    /// bump (as `scan_slots` does), and a new sender claims it: the close must make all
    /// of the first sender's bytes visible, the reset must be what the next claimer
    /// sees, and the next claimer's writes must be ordered after the owner's reads of
    /// the same bytes (loom flags any unordered access to the ring cells).
    #[test]
    fn loom_closed_slot_is_recycled_for_the_next_claimer() {
        loom::model(|| {
            let slot = Arc::new(Slot::new());
            let conn_gen = Arc::new(AtomicU32::new(0));
            let cells = CellStorage::cells(4);
            assert!(slot.try_claim());
            slot.state.store(SLOT_OPEN, Ordering::Release);

            let (s1, g1, c1) = (slot.clone(), conn_gen.clone(), cells.clone());
            let first = loom::thread::spawn(move || {
                // SAFETY: `s1` keeps the control block alive; the claim makes this the
                // only producer.
                let mut p = unsafe { Producer::new(NonNull::from(&s1.ring), c1) };
                assert_eq!(p.push_some(&[1, 2]), 2);
                drop(p);
                s1.close(&g1);
            });
            let (s2, c2) = (slot.clone(), cells.clone());
            // One attempt (a spinning claimer makes the model too large): the claim can
            // only succeed once the owner recycled the slot.
            let second = loom::thread::spawn(move || {
                if !s2.try_claim() {
                    return false;
                }
                // SAFETY: as above, for the new claim.
                let mut p = unsafe { Producer::new(NonNull::from(&s2.ring), c2) };
                assert_eq!(p.push_some(&[3]), 1);
                s2.state.store(SLOT_OPEN, Ordering::Release);
                true
            });

            let ctrl = NonNull::from(&slot.ring);
            // SAFETY: `slot` outlives the consumer; one consumer at a time.
            let mut cons = unsafe { Consumer::new(ctrl, cells.clone()) };
            while conn_gen.load(Ordering::Acquire) == 0 {
                loom::thread::yield_now();
            }
            assert!(slot.is_closed(), "a scan that saw the bump sees the close");
            let mut got = [0u8; 2];
            assert!(cons.pop_exact(&mut got), "everything sent before the close");
            assert_eq!(got, [1, 2]);
            drop(cons);
            slot.recycle();
            first.join().unwrap();
            if second.join().unwrap() {
                // The next claimer wrote at the start of a reset ring.
                // SAFETY: as above.
                let mut cons = unsafe { Consumer::new(ctrl, cells.clone()) };
                let mut b = [0u8; 1];
                assert!(cons.pop_exact(&mut b));
                assert_eq!(b, [3]);
            }
        });
    }

    /// A sender claims a slot, opens it, writes two bytes and closes it, while the owner
    /// scans the slot table only after generation bumps (as `scan_slots` does) and
    /// reads whatever state it finds, including CLOSED at its first look (a sender that
    /// closed before the first scan): it must get every byte exactly once and in
    /// order, and the slot must end FREE and claimable. A scan that ignored a slot
    /// already CLOSED, or recycled it before draining, loses bytes here.
    #[test]
    fn loom_close_before_or_during_scan_delivers_and_frees() {
        loom::model(|| {
            let slot = Arc::new(Slot::new());
            let conn_gen = Arc::new(AtomicU32::new(0));
            let cells = CellStorage::cells(4);

            let (s1, g1, c1) = (slot.clone(), conn_gen.clone(), cells.clone());
            let sender = loom::thread::spawn(move || {
                assert!(s1.try_claim(), "the only claimer of a fresh slot");
                s1.state.store(SLOT_OPEN, Ordering::Release);
                g1.fetch_add(1, Ordering::Release);
                // SAFETY: `s1` keeps the control block alive; the claim makes this the
                // only producer.
                let mut p = unsafe { Producer::new(NonNull::from(&s1.ring), c1) };
                assert_eq!(p.push_some(&[1]), 1);
                assert_eq!(p.push_some(&[2]), 1);
                drop(p);
                s1.close(&g1);
            });

            // The owner: consumer attached at the first scan that finds the slot OPEN
            // or CLOSED, drained at every scan, recycled once it was seen CLOSED.
            let mut seen = 0;
            let mut cons: Option<Consumer<_>> = None;
            let mut got = Vec::new();
            loop {
                let g = conn_gen.load(Ordering::Acquire);
                if g == seen {
                    loom::thread::yield_now();
                    continue;
                }
                seen = g;
                let st = slot.state.load(Ordering::Acquire);
                if st != SLOT_OPEN && st != SLOT_CLOSED {
                    continue;
                }
                // SAFETY: `slot` outlives the consumer; one consumer at a time.
                let c = cons.get_or_insert_with(|| unsafe {
                    Consumer::new(NonNull::from(&slot.ring), cells.clone())
                });
                let mut b = [0u8; 2];
                let n = c.pop_some(&mut b);
                got.extend_from_slice(&b[..n]);
                if st == SLOT_CLOSED {
                    break;
                }
            }
            assert_eq!(got, [1, 2], "every byte once, in order");
            drop(cons);
            slot.recycle();
            sender.join().unwrap();
            assert_eq!(slot.state.load(Ordering::Acquire), SLOT_FREE);
            assert!(slot.try_claim(), "claimable again");
        });
    }

    /// Single-copy handshake: the receiver reads the sender's buffer only after
    /// claiming the request, the sender reuses it only after the answer or a
    /// successful withdrawal, and the answer's wake-up is never lost. The buffer is a
    /// loom cell, so a read racing the reuse is caught; a lost wake-up deadlocks.
    #[test]
    fn loom_single_copy_buffer_is_never_reused_while_read() {
        use crate::shm::waiter::WaitWord;
        use loom::cell::UnsafeCell;
        loom::model(|| {
            let slot = Arc::new(Slot::new());
            let wake = Arc::new(WaitWord::new());
            let buf = Arc::new(UnsafeCell::new(1u8));
            // The request (seq 1) is published; both sides may act on it.
            let (s2, w2, b2) = (slot.clone(), wake.clone(), buf.clone());
            let receiver = loom::thread::spawn(move || {
                if !s2.claim_request(1) {
                    return false;
                }
                // SAFETY: the claim keeps the sender from reusing the buffer until
                // the answer below (loom checks exactly that).
                let v = unsafe { b2.with(|p| *p) };
                assert_eq!(v, 1, "read the sender's bytes");
                s2.answer_request(1, ACK_DONE);
                w2.notify();
                true
            });
            // The sender gives up once (a timed-out send), else waits for the answer.
            let withdrew = slot.withdraw_request(1);
            if !withdrew {
                let answered = || matches!(slot.request_status(1), Some(ACK_DONE | ACK_FALLBACK));
                wake.wait_until(0, || false, answered, None, None);
            }
            // SAFETY: withdrawn or answered: the receiver no longer reads it.
            unsafe { buf.with_mut(|p| *p = 2) };
            let read = receiver.join().unwrap();
            assert_eq!(read, !withdrew, "exactly one side wins the request");
        });
    }
}
