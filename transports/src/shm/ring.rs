//! Lock-free single-producer/single-consumer byte ring.
//!
//! The control block (head and tail on their own cache lines so producer and consumer
//! never false-share) lives in shared memory next to the data area. Positions are
//! monotonically increasing `u64` byte counts; `pos % cap` is the offset. The producer
//! publishes with a Release store of `head` after copying, the consumer frees with a
//! Release store of `tail` after copying out: the Acquire loads on the other side are
//! what make the copied bytes visible (checked by the loom tests below).

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
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        }
    }
    #[inline(always)]
    unsafe fn read(&self, off: usize, dst: &mut [u8]) {
        // SAFETY: as for `write`, with the roles swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        }
    }
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
    let off = (pos as usize) & (cap - 1);
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
    let off = (pos as usize) & (cap - 1);
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

    /// Writes `head` and then `body` as one record followed by `skip` bytes that are
    /// published without being written, if all fit; publishes once. The skipped bytes
    /// keep whatever an earlier lap left there: only for padding no reader looks at
    /// (writing it cost a `memcpy` per small message).
    #[inline]
    pub fn push_record<const H: usize>(
        &mut self,
        head: &[u8; H],
        body: &[u8],
        skip: usize,
    ) -> bool {
        let total = (H + body.len() + skip) as u64;
        let cap = self.data.cap() as u64;
        if cap - (self.head - self.cached_tail) < total && (self.free() as u64) < total {
            return false;
        }
        // SAFETY: `free()` showed `total` bytes after `head` are not readable.
        unsafe {
            copy_in(&self.data, self.head, head);
            copy_in(&self.data, self.head + H as u64, body);
        }
        self.head += total;
        ctrl(self.ctrl).head.0.store(self.head, Ordering::Release);
        true
    }

    /// Publishes up to `n` bytes without writing them (see [`Producer::push_record`]);
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
        Self {
            ctrl,
            data,
            tail,
            cached_head,
        }
    }

    /// Published, unread bytes.
    #[inline]
    pub fn available(&mut self) -> usize {
        if self.cached_head == self.tail {
            self.cached_head = ctrl(self.ctrl).head.0.load(Ordering::Acquire);
        }
        (self.cached_head - self.tail) as usize
    }

    /// Whether unread bytes are published, without touching our cached state (for the
    /// waiter's condition, which may run on a shared reference).
    pub fn has_data(&self) -> bool {
        ctrl(self.ctrl).head.0.load(Ordering::Acquire) != self.tail
    }

    /// Reads exactly `dst.len()` bytes if that many are available.
    pub fn pop_exact(&mut self, dst: &mut [u8]) -> bool {
        if self.available() < dst.len() {
            self.cached_head = ctrl(self.ctrl).head.0.load(Ordering::Acquire);
            if ((self.cached_head - self.tail) as usize) < dst.len() {
                return false;
            }
        }
        // SAFETY: the Acquire load of head shows these bytes are published.
        unsafe { copy_out(&self.data, self.tail, dst) };
        self.release(dst.len());
        true
    }

    /// Copies the next `dst.len()` bytes without consuming them, if available.
    #[inline]
    pub fn peek_exact(&mut self, dst: &mut [u8]) -> bool {
        if self.available() < dst.len() {
            self.cached_head = ctrl(self.ctrl).head.0.load(Ordering::Acquire);
            if ((self.cached_head - self.tail) as usize) < dst.len() {
                return false;
            }
        }
        // SAFETY: the Acquire load of head shows these bytes are published; we do not
        // release them, so the producer cannot overwrite them meanwhile.
        unsafe { copy_out(&self.data, self.tail, dst) };
        true
    }

    /// Copies `dst.len()` bytes starting `skip` bytes past the read position, without
    /// consuming them, if that many are available.
    #[inline]
    pub fn peek_at(&mut self, skip: usize, dst: &mut [u8]) -> bool {
        let want = skip + dst.len();
        if self.available() < want {
            self.cached_head = ctrl(self.ctrl).head.0.load(Ordering::Acquire);
            if ((self.cached_head - self.tail) as usize) < want {
                return false;
            }
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
        if self.available() < n {
            self.cached_head = ctrl(self.ctrl).head.0.load(Ordering::Acquire);
            if ((self.cached_head - self.tail) as usize) < n {
                return false;
            }
        }
        self.release(n);
        true
    }

    /// Reads up to `dst.len()` available bytes; returns how many.
    pub fn pop_some(&mut self, dst: &mut [u8]) -> usize {
        if self.available() < dst.len() {
            self.cached_head = ctrl(self.ctrl).head.0.load(Ordering::Acquire);
        }
        let n = dst.len().min((self.cached_head - self.tail) as usize);
        if n > 0 {
            // SAFETY: the Acquire load of head shows these bytes are published.
            unsafe { copy_out(&self.data, self.tail, &mut dst[..n]) };
            self.release(n);
        }
        n
    }

    /// Bytes in use right now (for deciding whether a blocked producer needs a wake-up).
    pub fn used(&self) -> usize {
        (self.cached_head - self.tail) as usize
    }

    fn release(&mut self, n: usize) {
        self.tail += n as u64;
        ctrl(self.ctrl).tail.0.store(self.tail, Ordering::Release);
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

    /// `push_record` writes head and body, wrapping at the end of the ring (here the
    /// head is cut by the end, then the body), publishes the skipped bytes unwritten
    /// (they keep what was there), and refuses a record whose skip does not fit.
    #[test]
    fn push_record_wraps_and_skips_without_writing() {
        let ctrl = RingControl::new();
        let mut bytes = vec![b'.'; 16];
        let (mut p, mut c) = pair(&ctrl, &mut bytes);
        assert!(p.push_record(b"HHHH", b"bbbbbbbbbb", 0));
        let mut first = [0u8; 14];
        assert!(c.pop_exact(&mut first));
        assert_eq!(&first, b"HHHHbbbbbbbbbb");
        assert!(
            p.push_record(b"ABCD", b"xyz", 2),
            "head cut by the end of the ring"
        );
        assert!(!p.push_record(b"EF", b"", 6), "7 bytes are free, not 8");
        let mut r = [0u8; 9];
        assert!(c.pop_exact(&mut r));
        // The two skipped bytes (ring bytes 5 and 6) still hold the first lap's data.
        assert_eq!(&r, b"ABCDxyzbb");
        assert_eq!(p.skip_some(5), 5);
        assert!(c.discard(5));
        assert!(p.push_record(b"EF", b"ghij", 0), "the body wraps");
        let mut r = [0u8; 6];
        assert!(c.pop_exact(&mut r));
        assert_eq!(&r, b"EFghij");
        assert_eq!(p.skip_some(100), 16, "skip_some stops at the free space");
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

    /// Ring bytes as loom cells, so loom flags any read of a byte that is not ordered
    /// after its write (a missing Acquire/Release would show up here).
    pub(crate) struct CellStorage(pub(crate) Arc<Vec<UnsafeCell<u8>>>);

    impl CellStorage {
        /// `n` zeroed cells.
        pub(crate) fn cells(n: usize) -> Arc<Vec<UnsafeCell<u8>>> {
            Arc::new((0..n).map(|_| UnsafeCell::new(0)).collect())
        }
    }

    // SAFETY: `cap()` cells exist for the life of the Arc.
    unsafe impl RingStorage for CellStorage {
        fn cap(&self) -> usize {
            self.0.len()
        }
        unsafe fn write(&self, off: usize, src: &[u8]) {
            for (i, b) in src.iter().enumerate() {
                // SAFETY: loom checks exclusivity itself.
                self.0[off + i].with_mut(|p| unsafe { *p = *b });
            }
        }
        unsafe fn read(&self, off: usize, dst: &mut [u8]) {
            for (i, d) in dst.iter_mut().enumerate() {
                // SAFETY: loom checks the access is ordered after the write.
                *d = self.0[off + i].with(|p| unsafe { *p });
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::loom_storage::CellStorage;
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn loom_spsc_delivers_in_order_across_wrap() {
        loom::model(|| {
            let ctrl = Arc::new(RingControl::new());
            let cells = CellStorage::cells(4);
            let cp = NonNull::from(&*ctrl);
            // SAFETY: `ctrl` and `cells` are kept alive by the Arcs moved into each thread.
            let mut prod = unsafe { Producer::new(cp, CellStorage(cells.clone())) };
            // SAFETY: as above; one consumer.
            let mut cons = unsafe { Consumer::new(cp, CellStorage(cells.clone())) };
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
}
