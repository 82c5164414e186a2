//! Lock-free single-producer/single-consumer byte ring.
//!
//! The control block (head and tail on their own cache lines so producer and consumer
//! never false-share) lives in shared memory next to the data area. Positions are
//! monotonically increasing `u64` byte counts; `pos % cap` is the offset. The producer
//! publishes with a Release store of `head` after copying, the consumer frees with a
//! Release store of `tail` after copying out: the Acquire loads on the other side are
//! what make the copied bytes visible (checked by the loom tests below).
//!
//! **Stamped records.** A record pushed with [`Producer::push_stamped`] starts on a
//! [`LINE`] and begins with a [`HEAD_LEN`]-byte head whose last 8 bytes (the *mark
//! word*) are stored last, atomically, with a stamp derived from the record's position
//! ([`stamp`]). A consumer waiting for the next record can then watch that one line
//! instead of `head`'s: the bytes and the sign that they are there arrive together, one
//! cache-line transfer per small message instead of two (issue 15, sixth pass). A line
//! may also hold an earlier lap's payload, which could look like any stamp, so the
//! consumer trusts a line's mark only if that line's last write was a record start it
//! read itself (its *trust* bitmap; see [`Consumer::poll_header`]); elsewhere it falls
//! back to `head`, and after one lap of stamped records every line is trusted again.

use std::ptr::NonNull;

use crate::sync::{AtomicU64, Ordering};

/// Pads to a cache line so head and tail live on different lines.
#[repr(C, align(64))]
pub struct CachePadded<T>(pub T);

/// Shared control block of one ring.
#[repr(C)]
pub struct RingControl {
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
}

impl RingControl {
    /// An empty ring.
    pub fn new() -> Self {
        Self {
            head: CachePadded(AtomicU64::new(0)),
            tail: CachePadded(AtomicU64::new(0)),
        }
    }
}

impl RingControl {
    /// Empties the ring for a new producer/consumer pair. Only valid while neither end
    /// exists (the slot is being recycled by its owner).
    pub fn reset(&self) {
        self.head.0.store(0, Ordering::Relaxed);
        self.tail.0.store(0, Ordering::Relaxed);
    }
}

impl Default for RingControl {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the ring's bytes live.
///
/// # Safety
/// Implementors must give `cap()` bytes of memory valid for the life of the value, and
/// `write`/`read` must only touch `[off, off + len)` inside it.
pub unsafe trait RingStorage {
    /// Capacity in bytes (a power of two).
    fn cap(&self) -> usize;
    /// Copies `src` to offset `off`.
    ///
    /// # Safety
    /// `off + src.len() <= cap()`, and no reader may be reading that range.
    unsafe fn write(&self, off: usize, src: &[u8]);
    /// Copies from offset `off` into `dst`.
    ///
    /// # Safety
    /// `off + dst.len() <= cap()`, and no writer may be writing that range.
    unsafe fn read(&self, off: usize, dst: &mut [u8]);
    /// Asks for the line holding offset `off` in this core's cache, ready to be
    /// written (a hint; the default does nothing).
    fn prefetch_for_write(&self, _off: usize) {}
    /// Stores the 8-byte word at `off` atomically, with Release ordering.
    ///
    /// # Safety
    /// `off` is 8-aligned, `off + 8 <= cap()`, and the word is only ever written with
    /// this method while a reader may load it with [`RingStorage::load_word`].
    unsafe fn store_word(&self, off: usize, v: u64);
    /// Loads the 8-byte word at `off` atomically, with Acquire ordering.
    ///
    /// # Safety
    /// As for [`RingStorage::store_word`].
    unsafe fn load_word(&self, off: usize) -> u64;
}

/// Ring lines: stamped records start on them (a cache line).
pub const LINE: usize = 64;
/// Longest range (in lines) whose lines a consumer inspects to trust them (see
/// `Consumer::note_lines_slow`): records of up to 4 lines (messages up to 224 B).
const CHECKED_LINES: usize = 4;
/// Bytes of a stamped record's head: [`HEAD_WORDS`] words, then the mark word.
pub const HEAD_LEN: usize = 32;
/// Words of a record's head before its mark word.
pub const HEAD_WORDS: usize = 3;
/// Offset of the mark word in a record's head.
const MARK_OFF: usize = 8 * HEAD_WORDS;
/// The stamp's place in the mark word (its top 30 bits); the caller owns the rest.
pub const STAMP_SHIFT: u32 = 34;

/// The stamp of a record starting at `pos`: its line number, modulo 2^30. A line's
/// previous stamp is that of the record one lap earlier, `cap / LINE` lines back,
/// which differs for any ring under 64 GiB.
#[inline(always)]
pub fn stamp(pos: u64) -> u64 {
    (pos / LINE as u64) & ((1 << (64 - STAMP_SHIFT)) - 1)
}

/// Ring bytes in (shared) memory addressed by a raw pointer.
pub struct RawStorage {
    ptr: NonNull<u8>,
    cap: usize,
}

impl RawStorage {
    /// # Safety
    /// `ptr` must point at `cap` bytes that stay mapped while this value lives, and `cap`
    /// must be a power of two.
    pub unsafe fn new(ptr: NonNull<u8>, cap: usize) -> Self {
        debug_assert!(cap.is_power_of_two());
        Self { ptr, cap }
    }
}

// SAFETY: `new`'s contract gives `cap` valid bytes; the bounds are the callers' contract.
unsafe impl RingStorage for RawStorage {
    fn cap(&self) -> usize {
        self.cap
    }
    #[inline(always)]
    unsafe fn write(&self, off: usize, src: &[u8]) {
        // SAFETY: caller guarantees the range is inside the mapping and not being read;
        // the source is process-private so the ranges cannot overlap.
        unsafe { copy_bytes(src.as_ptr(), self.ptr.as_ptr().add(off), src.len()) }
    }
    #[inline(always)]
    unsafe fn read(&self, off: usize, dst: &mut [u8]) {
        // SAFETY: as for `write`, with the roles swapped.
        unsafe { copy_bytes(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len()) }
    }
    #[inline(always)]
    unsafe fn store_word(&self, off: usize, v: u64) {
        // SAFETY: in bounds and 8-aligned (the caller's contract; the mapping is
        // page-aligned); only ever accessed atomically while shared. Plain std atomics
        // even under loom: loom models this protocol with `CellStorage`.
        unsafe { word(self.ptr, off).store(v, std::sync::atomic::Ordering::Release) }
    }
    #[inline(always)]
    unsafe fn load_word(&self, off: usize) -> u64 {
        // SAFETY: as for `store_word`.
        unsafe { word(self.ptr, off).load(std::sync::atomic::Ordering::Acquire) }
    }
    #[inline(always)]
    fn prefetch_for_write(&self, off: usize) {
        crate::sync::prefetch_for_write(self.ptr.as_ptr().wrapping_add(off));
    }
}

/// The offset in the ring's storage of absolute position `pos` (the ring's size is a
/// power of two).
#[inline(always)]
fn offset<S: RingStorage>(data: &S, pos: u64) -> usize {
    (pos as usize) & (data.cap() - 1)
}

/// Copies `n` bytes between non-overlapping ranges. Up to 32 bytes (a small
/// message's payload) inline, as two overlapping loads and stores of the widest size
/// that fits: a `memcpy` call on each side of a small message is a measurable share
/// of its latency (issue 15, sixth pass).
///
/// # Safety
/// As for `ptr::copy_nonoverlapping`.
#[inline(always)]
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY: every access below lies inside `[0, n)` of its range (the caller's).
    unsafe {
        match n {
            0 => {}
            1..=3 => {
                // First, middle and last byte cover 1, 2 or 3 bytes.
                *dst = *src;
                *dst.add(n / 2) = *src.add(n / 2);
                *dst.add(n - 1) = *src.add(n - 1);
            }
            4..=7 => {
                let (a, b) = (rd(src.cast::<u32>()), rd(src.add(n - 4).cast::<u32>()));
                wr(dst.cast::<u32>(), a);
                wr(dst.add(n - 4).cast::<u32>(), b);
            }
            8..=16 => {
                let (a, b) = (rd(src.cast::<u64>()), rd(src.add(n - 8).cast::<u64>()));
                wr(dst.cast::<u64>(), a);
                wr(dst.add(n - 8).cast::<u64>(), b);
            }
            17..=32 => {
                let (a, b) = (rd(src.cast::<u128>()), rd(src.add(n - 16).cast::<u128>()));
                wr(dst.cast::<u128>(), a);
                wr(dst.add(n - 16).cast::<u128>(), b);
            }
            _ => std::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// The 8-byte word at `off` of a raw ring as an atomic.
///
/// # Safety
/// `off` is 8-aligned and inside the mapping, which outlives the returned reference.
#[inline(always)]
unsafe fn word<'a>(ptr: NonNull<u8>, off: usize) -> &'a std::sync::atomic::AtomicU64 {
    // SAFETY: the caller's contract; AtomicU64 is valid for any bit pattern.
    unsafe { &*ptr.as_ptr().add(off).cast::<std::sync::atomic::AtomicU64>() }
}

// SAFETY: the storage is plain bytes; synchronisation is the ring protocol's job.
unsafe impl Send for RawStorage {}

/// The writing end.
pub struct Producer<S: RingStorage> {
    ctrl: NonNull<RingControl>,
    data: S,
    head: u64,
    cached_tail: u64,
}

/// The reading end.
pub struct Consumer<S: RingStorage> {
    ctrl: NonNull<RingControl>,
    data: S,
    tail: u64,
    cached_head: u64,
    /// One bit per line: set when the line's last write was the start of a stamped
    /// record whose head we read, so its mark word holds that record's stamp until the
    /// producer stores the next one (any other content could fake a stamp).
    trust: Box<[u64]>,
    /// Lines in the ring (`cap / LINE`).
    lines: usize,
    /// A record's head was read at `tail` (by [`Consumer::peek_header`] or
    /// [`Consumer::poll_header`]) and not yet consumed.
    head_read: bool,
}

// SAFETY: an end only touches its own ring through atomics and its storage; moving it
// to another thread is fine as long as there is still one producer and one consumer.
unsafe impl<S: RingStorage + Send> Send for Producer<S> {}
// SAFETY: as above.
unsafe impl<S: RingStorage + Send> Send for Consumer<S> {}

fn ctrl<'a>(p: NonNull<RingControl>) -> &'a RingControl {
    // SAFETY: `Producer::new`/`Consumer::new` require the control block to outlive the end.
    unsafe { p.as_ref() }
}

/// Copies `src` into the ring at logical position `pos`, wrapping.
///
/// Inlined, with the common unwrapped case as its own branch: a copy whose length is
/// a constant at the call site (a record header) then compiles to a few moves instead
/// of a `memcpy` call — a noticeable share of a small message's cost.
///
/// # Safety
/// The range `[pos, pos + src.len())` must be free (not readable by the consumer).
#[inline(always)]
unsafe fn copy_in<S: RingStorage>(data: &S, pos: u64, src: &[u8]) {
    let cap = data.cap();
    let off = offset(data, pos);
    // SAFETY: bounds computed here; freedom of the range is the caller's contract.
    unsafe {
        if src.len() <= cap - off {
            data.write(off, src);
        } else {
            let first = cap - off;
            data.write(off, &src[..first]);
            data.write(0, &src[first..]);
        }
    }
}

/// Copies from the ring at `pos` into `dst`, wrapping (inlined like [`copy_in`]).
///
/// # Safety
/// The range must be published (readable) and not yet freed.
#[inline(always)]
unsafe fn copy_out<S: RingStorage>(data: &S, pos: u64, dst: &mut [u8]) {
    let cap = data.cap();
    let off = offset(data, pos);
    // SAFETY: bounds computed here; publication is the caller's contract.
    unsafe {
        if dst.len() <= cap - off {
            data.read(off, dst);
        } else {
            let first = cap - off;
            data.read(off, &mut dst[..first]);
            data.read(0, &mut dst[first..]);
        }
    }
}

impl<S: RingStorage> Producer<S> {
    /// # Safety
    /// `ctrl` must outlive the producer, be shared only with the matching storage, and
    /// there must be at most one producer per ring at a time.
    pub unsafe fn new(ctrl: NonNull<RingControl>, data: S) -> Self {
        let c = self::ctrl(ctrl);
        let head = c.head.0.load(Ordering::Relaxed);
        let cached_tail = c.tail.0.load(Ordering::Acquire);
        Self {
            ctrl,
            data,
            head,
            cached_tail,
        }
    }

    /// Ring capacity.
    pub fn cap(&self) -> usize {
        self.data.cap()
    }

    /// Asks for the line the next record will start on in this core's cache, ready
    /// to be written: a caller about to push soon takes the line from the consumer
    /// (which keeps loading it for the stamp) while it is still busy with other work.
    #[inline(always)]
    pub fn prefetch_next_record(&self) {
        self.data.prefetch_for_write(offset(&self.data, self.head));
    }

    /// Free bytes (refreshing the consumer's position only when needed).
    pub fn free(&mut self) -> usize {
        let cap = self.data.cap() as u64;
        let mut free = cap - (self.head - self.cached_tail);
        if free < cap {
            self.cached_tail = ctrl(self.ctrl).tail.0.load(Ordering::Acquire);
            free = cap - (self.head - self.cached_tail);
        }
        free as usize
    }

    /// Writes all parts as one record if they fit together, publishing once.
    pub fn push_all(&mut self, parts: &[&[u8]]) -> bool {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let cap = self.data.cap() as u64;
        if cap - (self.head - self.cached_tail) < total as u64 && self.free() < total {
            return false;
        }
        let mut pos = self.head;
        for p in parts {
            // SAFETY: `free()` showed `total` bytes after `head` are not readable.
            unsafe { copy_in(&self.data, pos, p) };
            pos += p.len() as u64;
        }
        self.head = pos;
        ctrl(self.ctrl).head.0.store(pos, Ordering::Release);
        true
    }

    /// Writes a stamped record — its head (the three words `head`, then the mark word
    /// `mark`), then `body`, then `skip` bytes that are published without being
    /// written — if all fit; publishes once. The mark word goes last, atomically, with
    /// the record's [`stamp`] in its top 30 bits (which must be zero in `mark`): a
    /// consumer that sees the stamp sees the whole push. Words are stored
    /// little-endian. The skipped bytes keep whatever an earlier lap left there: only
    /// for padding no reader looks at (writing it cost a `memcpy` per small message).
    ///
    /// The head is taken as words, not bytes: a mark word assembled from narrower
    /// stores on the stack and loaded whole stalls store forwarding, several
    /// nanoseconds per message (issue 15, sixth pass).
    ///
    /// The write position must be on a [`LINE`]: every record of a ring read with
    /// [`Consumer::poll_header`] starts with this call and ends on a line.
    ///
    /// The record's first line — the one a waiting consumer keeps loading for the
    /// stamp — is written last, in one burst: the body beyond it first, then the head
    /// words, the body's first bytes and the mark. Written in record order, a body of
    /// more than a few words kept the first line between its head stores and its mark
    /// long enough for the consumer's next load to take it back, and the mark store
    /// had to fetch it once more: a second cross-core transfer per message.
    #[inline(always)]
    pub fn push_stamped(
        &mut self,
        head: &[u64; HEAD_WORDS],
        mark: u64,
        body: &[u8],
        skip: usize,
    ) -> bool {
        debug_assert_eq!(
            self.head % LINE as u64,
            0,
            "stamped records start on a line"
        );
        debug_assert_eq!(mark >> STAMP_SHIFT, 0, "the stamp bits are the ring's");
        let total = (HEAD_LEN + body.len() + skip) as u64;
        let cap = self.data.cap() as u64;
        if cap - (self.head - self.cached_tail) < total && (self.free() as u64) < total {
            return false;
        }
        let off = offset(&self.data, self.head);
        // The body's bytes that share the first line with the head.
        let (near, far) = body.split_at(body.len().min(LINE - HEAD_LEN));
        // SAFETY: `free()` showed `total` bytes after `head` are not readable; the
        // head lies inside one line (the ring is a whole number of lines), so its
        // 8-aligned mark word and `near` do too; a reader loads the mark only with
        // `load_word`.
        unsafe {
            copy_in(&self.data, self.head + LINE as u64, far);
            for (i, w) in head.iter().enumerate() {
                self.data.write(off + 8 * i, &w.to_le_bytes());
            }
            self.data.write(off + HEAD_LEN, near);
            self.data
                .store_word(off + MARK_OFF, mark | (stamp(self.head) << STAMP_SHIFT));
        }
        self.head += total;
        ctrl(self.ctrl).head.0.store(self.head, Ordering::Release);
        true
    }

    /// Publishes up to `n` bytes without writing them (see [`Producer::push_stamped`]);
    /// returns how many.
    pub fn skip_some(&mut self, n: usize) -> usize {
        let n = n.min(self.free());
        if n > 0 {
            self.head += n as u64;
            ctrl(self.ctrl).head.0.store(self.head, Ordering::Release);
        }
        n
    }

    /// Writes as much of `src` as fits and publishes it; returns the bytes written.
    pub fn push_some(&mut self, src: &[u8]) -> usize {
        let n = src.len().min(self.free());
        if n > 0 {
            // SAFETY: `free()` showed `n` bytes after `head` are not readable.
            unsafe { copy_in(&self.data, self.head, &src[..n]) };
            self.head += n as u64;
            ctrl(self.ctrl).head.0.store(self.head, Ordering::Release);
        }
        n
    }
}

impl<S: RingStorage> Consumer<S> {
    /// # Safety
    /// As for [`Producer::new`], with at most one consumer per ring.
    pub unsafe fn new(ctrl: NonNull<RingControl>, data: S) -> Self {
        let c = self::ctrl(ctrl);
        let tail = c.tail.0.load(Ordering::Relaxed);
        let cached_head = c.head.0.load(Ordering::Acquire);
        let lines = data.cap() / LINE;
        Self {
            ctrl,
            data,
            tail,
            cached_head,
            // Nothing is trusted yet: the lines may hold anything (a recycled slot).
            trust: vec![0; lines.div_ceil(64)].into_boxed_slice(),
            lines,
            head_read: false,
        }
    }

    /// Published, unread bytes.
    #[inline]
    pub fn available(&mut self) -> usize {
        if self.cached_head == self.tail {
            self.load_head();
        }
        (self.cached_head - self.tail) as usize
    }

    /// Whether `n` bytes from the read position are published, loading `head` only
    /// when what we know already falls short.
    #[inline]
    fn published(&mut self, n: usize) -> bool {
        if self.available() >= n {
            return true;
        }
        self.load_head();
        ((self.cached_head - self.tail) as usize) >= n
    }

    /// Refreshes what we know to be published from `head`. Only ever forward: after
    /// reading records through their stamps we may be ahead of a `head` store still
    /// on its way, and taking that older value would make `cached_head - tail` wrap
    /// (a receiver then read garbage as a record, issue 15, sixth pass).
    #[inline]
    fn load_head(&mut self) {
        let h = ctrl(self.ctrl).head.0.load(Ordering::Acquire);
        self.cached_head = self.cached_head.max(h);
    }

    /// The head (words, then mark word with its stamp bits cleared) of the stamped
    /// record at the read position, if it is published.
    ///
    /// Where the read position's line is trusted this first looks at that line: its
    /// mark word carries this record's stamp once the record is there (and the rest
    /// of that push, so with [`Consumer::extend_published`] the caller may read it
    /// without loading `head`). Otherwise, or while the stamp is not there yet, it
    /// reads `head`, like [`Consumer::peek_header`]. Watching both lines pays on both
    /// kinds of machine measured (issue 15, sixth pass): where a cache line takes
    /// ~130 ns between cores the stamp saves the second transfer (one-way 1 B
    /// 270 → 220 ns); where it takes ~20 ns, watching the record's line alone cost
    /// ~8 ns against `head`'s, and `head` then tends to show the record first.
    #[inline]
    pub fn poll_header(&mut self) -> Option<([u64; HEAD_WORDS], u64)> {
        let off = offset(&self.data, self.tail);
        if self.lines != 0 && self.tail % LINE as u64 == 0 && self.trusted(off / LINE) {
            // SAFETY: a line-aligned offset, so the mark word is 8-aligned and inside.
            let w = unsafe { self.data.load_word(off + MARK_OFF) };
            if w >> STAMP_SHIFT == stamp(self.tail) {
                self.cached_head = self.cached_head.max(self.tail + HEAD_LEN as u64);
                // SAFETY: the Acquire load of the stamp, stored after these bytes,
                // publishes them; we do not release them, so the producer cannot
                // overwrite them.
                return Some(unsafe { self.head_at(off, w) });
            }
        }
        self.peek_header()
    }

    /// The head of the stamped record at the read position if `head` shows it
    /// published (the mark word read atomically, its stamp bits cleared).
    pub fn peek_header(&mut self) -> Option<([u64; HEAD_WORDS], u64)> {
        if !self.published(HEAD_LEN) {
            return None;
        }
        debug_assert_eq!(
            self.tail % LINE as u64,
            0,
            "stamped records start on a line"
        );
        let off = offset(&self.data, self.tail);
        // SAFETY: published (the Acquire load of head) and not released; line-aligned.
        unsafe {
            let w = self.data.load_word(off + MARK_OFF);
            Some(self.head_at(off, w))
        }
    }

    /// The head at `off` whose mark word is `w`.
    ///
    /// # Safety
    /// The head at `off` is published and not released.
    #[inline(always)]
    unsafe fn head_at(&mut self, off: usize, w: u64) -> ([u64; HEAD_WORDS], u64) {
        let mut words = [0u64; HEAD_WORDS];
        for (i, word) in words.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            // SAFETY: the caller's contract.
            unsafe { self.data.read(off + 8 * i, &mut b) };
            *word = u64::from_le_bytes(b);
        }
        self.head_read = true;
        (words, w & ((1 << STAMP_SHIFT) - 1))
    }

    /// Takes the `n` bytes from the read position as published: the caller read a
    /// record head with [`Consumer::poll_header`] whose push (by the caller's own
    /// record format) wrote those `n` bytes.
    ///
    /// # Safety
    /// The push that stored the stamp at the read position wrote at least `n` bytes;
    /// otherwise the caller may read bytes the producer is writing.
    #[inline]
    pub unsafe fn extend_published(&mut self, n: usize) {
        self.cached_head = self.cached_head.max(self.tail + n as u64);
    }

    fn trusted(&self, line: usize) -> bool {
        self.trust[line / 64] & (1 << (line % 64)) != 0
    }

    fn trust_line(&mut self, line: usize) {
        self.trust[line / 64] |= 1 << (line % 64);
    }

    /// Consuming `[tail, tail + n)`: its lines now hold what this lap wrote, trusted
    /// only where a stamped record's head was read at its start.
    #[inline(always)]
    fn note_lines(&mut self, n: usize) {
        let line = LINE as u64;
        // A one-line record whose head we read (a small message): one bit. The ring
        // is a power of two, so are its lines (`lines - 1` masks; 0 lines: no bits).
        if n == LINE && self.head_read && self.tail % line == 0 && self.lines > 0 {
            self.trust_line((self.tail / line) as usize & (self.lines - 1));
        } else if self.lines > 0 {
            self.note_lines_slow(n);
        }
        self.head_read = false;
    }

    /// [`Consumer::note_lines`] for any range.
    ///
    /// A line is trusted for the next lap when what its mark word holds now cannot
    /// pass for the stamp a record starting there next lap will carry. Until that
    /// record's mark store, nothing else of the next lap writes that word (a record
    /// covering the line instead would start elsewhere, and this is checked again
    /// when it is consumed). So a line last covered by payload is trusted too, unless
    /// the payload holds exactly that stamp: records of a size that does not divide
    /// the ring start on such lines, and without this they waited on `head` there —
    /// a second cross-core transfer per message (issue 15, eighth pass).
    fn note_lines_slow(&mut self, n: usize) {
        let line = LINE as u64;
        let first = self.tail.next_multiple_of(line);
        let end = self.tail + n as u64;
        if first >= end {
            return;
        }
        let count = ((end - first).div_ceil(line) as usize).min(self.lines);
        if count > CHECKED_LINES {
            // After long records (a stream of them, likely) only a record start read
            // here is trusted: the next record's first line is then watched through
            // `head`. Watching it through its stamp made 1 KiB messages slower (one-way
            // 123 → 135 ns fast mode, 585 → 698 ns slow): the reader's loads of that
            // line kept taking it from the writer while the writer was still storing
            // the record's other lines.
            let from = (first / line) as usize & (self.lines - 1);
            clear_bits(&mut self.trust, self.lines, from, count);
            if self.head_read && first == self.tail {
                self.trust_line(from);
            }
            return;
        }
        let cap = self.data.cap() as u64;
        let mut at = first;
        while at < end {
            let idx = (at / line) as usize & (self.lines - 1);
            // The mark word must lie in the range being consumed: published, and
            // not writable by the producer until we release it.
            let safe = at + (MARK_OFF + 8) as u64 <= end && {
                let off = offset(&self.data, at);
                // SAFETY: line-aligned, so 8-aligned and inside; published and not
                // yet released (checked above).
                let w = unsafe { self.data.load_word(off + MARK_OFF) };
                w >> STAMP_SHIFT != stamp(at + cap)
            };
            if safe {
                self.trust_line(idx);
            } else {
                clear_bits(&mut self.trust, self.lines, idx, 1);
            }
            at += line;
        }
    }

    /// Copies `dst.len()` bytes from `skip` bytes past the read position and consumes
    /// `n` bytes (a whole record, payload behind its head), if `n` are available and
    /// cover the copy: one release for the record.
    #[inline(always)]
    pub fn take_record(&mut self, skip: usize, dst: &mut [u8], n: usize) -> bool {
        if skip + dst.len() > n {
            return false;
        }
        if !self.published(n) {
            return false;
        }
        // SAFETY: published (checked above) and not yet released.
        unsafe { copy_out(&self.data, self.tail + skip as u64, dst) };
        self.release(n);
        true
    }

    /// Whether unread bytes are published, without touching our cached state (for the
    /// waiter's condition, which may run on a shared reference).
    pub fn has_data(&self) -> bool {
        // `>`, not `!=`: `head` may still lag behind records read through their stamps.
        ctrl(self.ctrl).head.0.load(Ordering::Acquire) > self.tail
    }

    /// Reads exactly `dst.len()` bytes if that many are available.
    pub fn pop_exact(&mut self, dst: &mut [u8]) -> bool {
        if !self.published(dst.len()) {
            return false;
        }
        // SAFETY: the Acquire load of head shows these bytes are published.
        unsafe { copy_out(&self.data, self.tail, dst) };
        self.release(dst.len());
        true
    }

    /// Copies `dst.len()` bytes starting `skip` bytes past the read position, without
    /// consuming them, if that many are available.
    #[inline]
    pub fn peek_at(&mut self, skip: usize, dst: &mut [u8]) -> bool {
        let want = skip + dst.len();
        if !self.published(want) {
            return false;
        }
        // SAFETY: the Acquire load of head shows these bytes are published; we do not
        // release them, so the producer cannot overwrite them meanwhile.
        unsafe { copy_out(&self.data, self.tail + skip as u64, dst) };
        true
    }

    /// Consumes `n` bytes without copying them, if that many are available (one store
    /// of the read position for a record read with [`Consumer::peek_at`]).
    #[inline]
    pub fn discard(&mut self, n: usize) -> bool {
        if !self.published(n) {
            return false;
        }
        self.release(n);
        true
    }

    /// Reads up to `dst.len()` available bytes; returns how many.
    pub fn pop_some(&mut self, dst: &mut [u8]) -> usize {
        // Whether all of `dst` is there or not, take what is.
        self.published(dst.len());
        let n = dst.len().min((self.cached_head - self.tail) as usize);
        if n > 0 {
            // SAFETY: the Acquire load of head shows these bytes are published.
            unsafe { copy_out(&self.data, self.tail, &mut dst[..n]) };
            self.release(n);
        }
        n
    }

    #[inline]
    fn release(&mut self, n: usize) {
        self.note_lines(n);
        self.tail += n as u64;
        ctrl(self.ctrl).tail.0.store(self.tail, Ordering::Release);
    }
}

/// Clears `count` bits of a `len`-bit bitmap starting at bit `from`, wrapping.
fn clear_bits(bits: &mut [u64], len: usize, from: usize, count: usize) {
    if count >= len {
        bits.fill(0);
        return;
    }
    let first = count.min(len - from);
    clear_run(bits, from, first);
    clear_run(bits, 0, count - first);
}

/// Clears bits `[from, from + n)` (no wrapping), a word at a time.
fn clear_run(bits: &mut [u64], from: usize, n: usize) {
    let (mut i, end) = (from, from + n);
    while i < end {
        let w = i / 64;
        let lo = i % 64;
        let hi = (end - w * 64).min(64);
        let mask = if hi - lo == 64 {
            u64::MAX
        } else {
            ((1u64 << (hi - lo)) - 1) << lo
        };
        bits[w] &= !mask;
        i = w * 64 + hi;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A ring over process-private memory; the boxes must outlive the ends.
    fn pair(ctrl: &RingControl, bytes: &mut [u8]) -> (Producer<RawStorage>, Consumer<RawStorage>) {
        let c = NonNull::from(ctrl);
        let d = NonNull::new(bytes.as_mut_ptr()).unwrap();
        // SAFETY: the caller keeps `ctrl` and `bytes` alive for the ends' lifetime; one
        // producer and one consumer.
        unsafe {
            (
                Producer::new(c, RawStorage::new(d, bytes.len())),
                Consumer::new(c, RawStorage::new(d, bytes.len())),
            )
        }
    }

    #[test]
    fn full_ring_refuses_then_accepts_after_consume() {
        let ctrl = RingControl::new();
        let mut bytes = vec![0u8; 16];
        let (mut p, mut c) = pair(&ctrl, &mut bytes);
        assert!(p.push_all(&[b"0123456789", b"abcde"]));
        assert!(!p.push_all(&[b"xy"]), "only one byte is free");
        assert_eq!(p.push_some(b"xy"), 1);
        let mut out = [0u8; 12];
        assert!(c.pop_exact(&mut out));
        assert_eq!(&out, b"0123456789ab");
        assert!(p.push_all(&[b"WRAP"]), "wraps around the end");
        let mut rest = [0u8; 8];
        assert_eq!(c.pop_some(&mut rest), 8);
        assert_eq!(&rest, b"cdexWRAP");
        assert!(!c.has_data());
        assert!(!c.pop_exact(&mut [0u8; 1]));
    }

    /// A record head (words, mark word) whose bytes are all `id` but for `flags` in
    /// the mark word's upper half (the stamp bits are the ring's).
    fn head(id: u8, flags: u32) -> ([u64; HEAD_WORDS], u64) {
        let w = u64::from_le_bytes([id; 8]);
        (
            [w; HEAD_WORDS],
            (w & 0xffff_ffff) | (u64::from(flags) << 32),
        )
    }

    /// `push_stamped` with a [`head`].
    fn push(p: &mut Producer<RawStorage>, id: u8, flags: u32, body: &[u8], skip: usize) -> bool {
        let (words, mark) = head(id, flags);
        p.push_stamped(&words, mark, body, skip)
    }

    /// Writes `word` as line `line`'s mark word by hand: what an earlier lap's payload
    /// may have left there, or a producer's stamp store seen before its `head` store.
    fn forge_mark(bytes: &mut [u8], line: usize, word: u64) {
        let at = line * LINE + MARK_OFF;
        bytes[at..at + 8].copy_from_slice(&word.to_le_bytes());
    }

    /// `push_stamped` writes head and body (the body wrapping at the end of the
    /// ring), publishes the skipped bytes unwritten (they keep what was there), stamps
    /// the mark word, and refuses a record that does not fit.
    #[test]
    fn push_stamped_wraps_and_skips_without_writing() {
        let ctrl = RingControl::new();
        let mut bytes = vec![b'.'; 2 * LINE];
        let (mut p, mut c) = pair(&ctrl, &mut bytes);
        assert!(push(&mut p, 1, 0, &[b'a'; 16], 16));
        assert_eq!(
            c.peek_header(),
            Some(head(1, 0)),
            "the stamp bits are cleared for the caller"
        );
        assert!(c.discard(LINE));
        assert!(!push(&mut p, 2, 3, &[b'b'; 48], 49), "129 bytes, 128 free");
        assert!(push(&mut p, 2, 3, &[b'b'; 48], 48));
        assert_eq!(c.poll_header(), Some(head(2, 3)), "flags come back");
        let mut body = [0u8; 48];
        assert!(c.peek_at(HEAD_LEN, &mut body), "the body wraps");
        assert_eq!(body, [b'b'; 48]);
        assert!(c.discard(2 * LINE));
        drop((p, c));
        assert_eq!(&bytes[..16], &[b'b'; 16], "the wrapped end of the body");
        // Bytes 16..64 were skipped: they keep the first lap's head and body.
        assert_eq!(&bytes[16..24], &[1; 8]);
        let mark = u64::from_le_bytes(bytes[24..32].try_into().unwrap());
        assert_eq!(mark >> STAMP_SHIFT, stamp(0), "the first record's stamp");
        assert_eq!(mark & 0xffff_ffff, u64::from(u32::from_le_bytes([1; 4])));
        assert_eq!(&bytes[32..48], &[b'a'; 16]);
        let mark = u64::from_le_bytes(bytes[88..96].try_into().unwrap());
        assert_eq!(mark >> STAMP_SHIFT, stamp(64));
    }

    /// The consumer watches a line's stamp only where what the line held when it was
    /// consumed cannot pass for the stamp it will wait for there: never in a fresh
    /// ring (its bytes may hold anything, e.g. a recycled slot's old records), not
    /// where last lap's payload holds exactly that stamp, but where a record started
    /// or payload holds anything else.
    #[test]
    fn a_line_is_watched_only_where_its_last_contents_cannot_forge_the_stamp() {
        let ctrl = RingControl::new();
        let mut bytes = vec![0u8; 4 * LINE];
        // A fresh ring whose line 0 already holds the first record's stamp.
        forge_mark(&mut bytes, 0, stamp(0) << STAMP_SHIFT);
        let (mut p, mut c) = pair(&ctrl, &mut bytes);
        assert_eq!(c.poll_header(), None, "a fresh ring is not trusted");
        // Lap 1: two two-line records. The first one's payload covers line 1's mark
        // word with the stamp a record starting there next lap (position 5 lines)
        // will carry; the second one's payload covers line 3's with other bytes.
        let mut forging = [b'x'; 96];
        let at = LINE + MARK_OFF - HEAD_LEN;
        forging[at..at + 8].copy_from_slice(&(stamp(5 * LINE as u64) << STAMP_SHIFT).to_le_bytes());
        assert!(push(&mut p, 1, 0, &forging, 0));
        assert!(push(&mut p, 2, 0, &[b'z'; 96], 0));
        for id in [1, 2] {
            assert_eq!(c.poll_header(), Some(head(id, 0)));
            assert!(c.discard(2 * LINE));
        }
        // Lap 2 at line 0 (a record start): the stamp alone shows a record, before
        // `head` does.
        assert_eq!(c.poll_header(), None, "line 0 holds last lap's stamp");
        assert!(push(&mut p, 4, 0, &[b'y'; 32], 0));
        // As if the producer's `head` store were not visible yet.
        ctrl.head.0.store(4 * LINE as u64, Ordering::Relaxed);
        assert_eq!(
            c.poll_header(),
            Some(head(4, 0)),
            "the stamp shows the record"
        );
        // SAFETY: the record was pushed whole, one line.
        unsafe { c.extend_published(LINE) };
        let mut body = [0u8; 32];
        assert!(c.peek_at(HEAD_LEN, &mut body));
        assert_eq!(body, [b'y'; 32]);
        assert!(c.discard(LINE));
        // Line 1 holds the awaited stamp, left there by last lap's payload: it is not
        // believed, and `head`, still behind the record we read through its stamp,
        // shows nothing either (not a negative amount: it once wrapped to
        // "everything").
        assert_eq!(c.poll_header(), None, "a forging line waits for head");
        assert!(!c.has_data(), "a lagging head is not data");
        assert_eq!(c.pop_some(&mut [0u8; 8]), 0);
        ctrl.head.0.store(5 * LINE as u64, Ordering::Release);
        assert_eq!(c.poll_header(), None, "head caught up: still nothing new");
        assert!(push(&mut p, 5, 0, &[], 32));
        assert_eq!(c.poll_header(), Some(head(5, 0)), "published through head");
        assert!(c.discard(LINE));
        // Lines 2 (a record start last lap) and 3 (payload of other bytes): both
        // watched through their stamps alone.
        for (id, line) in [(6, 6), (7, 7)] {
            assert!(push(&mut p, id, 0, &[], 32));
            ctrl.head.0.store(line * LINE as u64, Ordering::Relaxed);
            assert_eq!(
                c.poll_header(),
                Some(head(id, 0)),
                "line {} is watched through its stamp",
                line % 4
            );
            // SAFETY: pushed whole, one line.
            unsafe { c.extend_published(LINE) };
            assert!(c.discard(LINE));
        }
    }

    proptest! {
        /// `clear_bits` clears exactly the wrapped run it is given.
        #[test]
        fn clear_bits_clears_the_wrapped_run(len in 1usize..200, from in 0usize..200, count in 0usize..220) {
            let from = from % len;
            let mut bits = vec![u64::MAX; len.div_ceil(64)];
            clear_bits(&mut bits, len, from, count);
            for i in 0..len {
                let cleared = count >= len || (i + len - from) % len < count;
                prop_assert_eq!(bits[i / 64] & (1 << (i % 64)) == 0, cleared, "bit {}", i);
            }
        }
    }

    #[test]
    fn peek_at_and_discard_read_a_record_with_one_release() {
        let ctrl = RingControl::new();
        let mut bytes = vec![0u8; 16];
        let (mut p, mut c) = pair(&ctrl, &mut bytes);
        assert!(p.push_all(&[b"0123456789"]));
        let mut out = [0u8; 4];
        assert!(!c.peek_at(8, &mut out), "only 10 bytes are published");
        assert!(c.peek_at(6, &mut out));
        assert_eq!(&out, b"6789");
        assert!(!c.discard(11));
        assert!(c.discard(10));
        assert!(
            p.push_all(&[b"abcdefghijklm"]),
            "the whole ring is free again"
        );
        assert!(c.peek_at(10, &mut out[..3]));
        assert_eq!(&out[..3], b"klm", "wraps around the end");
    }

    proptest! {
        /// Any interleaving of pushes and pops delivers the bytes in order.
        #[test]
        fn stream_in_order(ops in proptest::collection::vec((any::<bool>(), 1usize..40), 1..200)) {
            let ctrl = RingControl::new();
            let mut bytes = vec![0u8; 32];
            let (mut p, mut c) = pair(&ctrl, &mut bytes);
            let (mut next_in, mut next_out) = (0u8, 0u8);
            for (push, n) in ops {
                if push {
                    let src: Vec<u8> = (0..n).map(|i| next_in.wrapping_add(i as u8)).collect();
                    let w = p.push_some(&src);
                    next_in = next_in.wrapping_add(w as u8);
                } else {
                    let mut dst = vec![0u8; n];
                    let r = c.pop_some(&mut dst);
                    for b in &dst[..r] {
                        prop_assert_eq!(*b, next_out);
                        next_out = next_out.wrapping_add(1);
                    }
                }
            }
        }
    }
}

/// Ring storage for loom models (shared with the slot-recycling model in `layout`).
#[cfg(all(test, loom))]
pub(crate) mod loom_storage {
    use super::RingStorage;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicU64, Ordering};

    /// Ring bytes as loom cells, so loom flags any read of a byte that is not ordered
    /// after its write (a missing Acquire/Release would show up here); the 8-byte
    /// words reached with `store_word`/`load_word` (mark words) are loom atomics of
    /// their own, which the ring's users never also reach as bytes.
    #[derive(Clone)]
    pub(crate) struct CellStorage {
        bytes: Arc<Vec<UnsafeCell<u8>>>,
        words: Arc<Vec<AtomicU64>>,
    }

    impl CellStorage {
        /// `n` zeroed bytes.
        pub(crate) fn cells(n: usize) -> Self {
            Self {
                bytes: Arc::new((0..n).map(|_| UnsafeCell::new(0)).collect()),
                words: Arc::new((0..n.div_ceil(8)).map(|_| AtomicU64::new(0)).collect()),
            }
        }
    }

    // SAFETY: `cap()` cells exist for the life of the Arc.
    unsafe impl RingStorage for CellStorage {
        fn cap(&self) -> usize {
            self.bytes.len()
        }
        unsafe fn write(&self, off: usize, src: &[u8]) {
            for (i, b) in src.iter().enumerate() {
                // SAFETY: loom checks exclusivity itself.
                self.bytes[off + i].with_mut(|p| unsafe { *p = *b });
            }
        }
        unsafe fn read(&self, off: usize, dst: &mut [u8]) {
            for (i, d) in dst.iter_mut().enumerate() {
                // SAFETY: loom checks the access is ordered after the write.
                *d = self.bytes[off + i].with(|p| unsafe { *p });
            }
        }
        unsafe fn store_word(&self, off: usize, v: u64) {
            self.words[off / 8].store(v, Ordering::Release);
        }
        unsafe fn load_word(&self, off: usize) -> u64 {
            self.words[off / 8].load(Ordering::Acquire)
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::loom_storage::CellStorage;
    use super::*;
    use loom::sync::Arc;

    /// A ring of `bytes` cells and its two ends. The ends point into the control
    /// block: the returned Arc (and its clones) must outlive them.
    fn loom_pair(
        bytes: usize,
    ) -> (
        Arc<RingControl>,
        Producer<CellStorage>,
        Consumer<CellStorage>,
    ) {
        // Offsets are positions masked with `cap - 1`.
        assert!(bytes.is_power_of_two(), "a ring of {bytes} bytes");
        let ctrl = Arc::new(RingControl::new());
        let cells = CellStorage::cells(bytes);
        let cp = NonNull::from(&*ctrl);
        // SAFETY: the caller keeps the control block alive (the Arc); the cells live
        // as long as the ends' storage.
        let prod = unsafe { Producer::new(cp, cells.clone()) };
        // SAFETY: as above; one consumer.
        let cons = unsafe { Consumer::new(cp, cells) };
        (ctrl, prod, cons)
    }

    #[test]
    fn loom_spsc_delivers_in_order_across_wrap() {
        loom::model(|| {
            let (ctrl, mut prod, mut cons) = loom_pair(4);
            let keep = ctrl.clone();
            let t = loom::thread::spawn(move || {
                let _keep = keep;
                let msg = [1u8, 2, 3, 4, 5, 6];
                let mut sent = 0;
                while sent < msg.len() {
                    let n = prod.push_some(&msg[sent..(sent + 3).min(msg.len())]);
                    sent += n;
                    if n == 0 {
                        loom::thread::yield_now();
                    }
                }
            });
            let mut got = Vec::new();
            while got.len() < 6 {
                let mut b = [0u8; 2];
                let n = cons.pop_some(&mut b);
                got.extend_from_slice(&b[..n]);
                if n == 0 {
                    loom::thread::yield_now();
                }
            }
            t.join().unwrap();
            assert_eq!(got, [1, 2, 3, 4, 5, 6]);
        });
    }

    /// Pushes one stamped record per body length (record `i` carries id `i + 1`
    /// and a body of that byte) through a ring of `lines` lines, and reads each back
    /// through `poll_header`, checking its id and body.
    fn stamped_run(lines: usize, bodies: &'static [usize]) {
        loom::model(move || {
            let (ctrl, mut prod, mut cons) = loom_pair(lines * LINE);
            let keep = ctrl.clone();
            let t = loom::thread::spawn(move || {
                let _keep = keep;
                for (id, &body) in (1u8..).zip(bodies) {
                    while !prod.push_stamped(&[u64::from(id), 0, 0], 0, &vec![id; body], 0) {
                        loom::thread::yield_now();
                    }
                }
            });
            for (id, &body) in (1u8..).zip(bodies) {
                let (words, _) = loop {
                    match cons.poll_header() {
                        Some(h) => break h,
                        None => loom::thread::yield_now(),
                    }
                };
                assert_eq!(words[0], u64::from(id));
                // SAFETY: each push wrote its whole record.
                unsafe { cons.extend_published(HEAD_LEN + body) };
                let mut b = vec![0u8; body];
                assert!(cons.take_record(HEAD_LEN, &mut b, HEAD_LEN + body));
                assert_eq!(b, vec![id; body]);
            }
            t.join().unwrap();
        });
    }

    /// Three one-line records through a two-line ring: the first lap is read through
    /// `head`, the third record through line 0's stamp alone. Every byte of a record
    /// read through its stamp must be ordered after the producer wrote it (the cells
    /// would flag it), and the consumer never mistakes last lap's stamp for this one.
    #[test]
    fn loom_stamped_records_are_read_whole_through_the_stamp() {
        stamped_run(2, &[32, 32, 32]);
    }

    /// A two-line record, two one-line ones, then a lap: line 0 is read through its
    /// stamp, line 1 (payload last lap) through `head` — which may still lag behind
    /// the record just read through its stamp. The consumer must then wait, not read
    /// (loom explores the producer stopped between its stamp and `head` stores).
    #[test]
    fn loom_after_a_stamped_read_a_lagging_head_shows_nothing() {
        stamped_run(4, &[96, 32, 32, 32, 32]);
    }

    /// A two-line record read through its stamp: its body beyond the first line is
    /// written before that line (`push_stamped` writes the watched line last), and
    /// must still be ordered before the stamp.
    #[test]
    fn loom_a_two_line_record_is_read_whole_through_its_stamp() {
        stamped_run(4, &[32, 32, 32, 32, 96]);
    }
}
