//! Spin-then-block waiting on a futex word in shared memory (004 §4).
//!
//! A waiter spins for about as long as blocking and being woken would cost — measured
//! once per process by [`calibrated_spins`], not hard-coded — because spinning longer
//! than that cannot beat a block, and spinning shorter gives up the cheap case. When the
//! peer that would produce the event is known not to be running (it is itself blocked),
//! spinning is pointless and skipped.
//!
//! Protocol (no lost wake-ups): `seq` and `sleepers` are the two halves of one 64-bit
//! word. The notifier publishes its data, then bumps `seq` with one atomic add, whose
//! result says whether anyone sleeps (then it wakes them). The waiter reads `seq` (its
//! ticket), re-checks its condition, registers in `sleepers` with an atomic add, and
//! sleeps only while `seq` is still its ticket (the futex, on the `seq` half, compares
//! atomically with going to sleep). Both adds are read-modify-writes of the same word,
//! so they are totally ordered: either the notifier's sees the sleeper, or the
//! sleeper's sees the new `seq`. One word makes the notify a single locked instruction;
//! two words needed a second one to read `sleepers` (an RMW there too, because a plain
//! load does not pair with the sleeper's add under acquire/release, as loom showed).

use std::time::Duration;

use crate::sync::{AtomicU32, AtomicU64, Ordering, spin_hint};

#[cfg(not(loom))]
static SLEEPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times this process blocked in the futex (a diagnostic for benchmarks: a
/// well-tuned spin keeps it near zero under ping-pong).
#[cfg(not(loom))]
pub fn sleep_count() -> u64 {
    SLEEPS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The futex word one process waits on; lives in that process' shared segment.
#[repr(C)]
pub struct WaitWord {
    /// `seq << 32 | sleepers`: `seq` counts notifications (it wraps; the futex waits on
    /// this half), `sleepers` the waiters registered to be woken.
    state: AtomicU64,
    /// loom has no futex: model it with a mutex and condvar, which have the same
    /// compare-then-sleep atomicity, so lost wake-ups surface as loom deadlocks.
    #[cfg(loom)]
    lock: loom::sync::Mutex<()>,
    #[cfg(loom)]
    cv: loom::sync::Condvar,
}

/// Why [`WaitWord::wait_until`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The condition holds.
    Ready,
    /// The timeout passed (the caller checks peer liveness and retries).
    TimedOut,
}

impl WaitWord {
    /// A fresh word.
    pub fn new() -> Self {
        Self {
            state: AtomicU64::new(0),
            #[cfg(loom)]
            lock: loom::sync::Mutex::new(()),
            #[cfg(loom)]
            cv: loom::sync::Condvar::new(),
        }
    }

    /// Tells the owner something changed. Call after publishing the data. Returns
    /// whether a sleeper had to be woken.
    pub fn notify(&self) -> bool {
        // Adding to the upper half never carries into `sleepers`; a carry out of bit 63
        // (seq wrapping) is dropped.
        if sleepers(self.state.fetch_add(SEQ_ONE, Ordering::SeqCst)) != 0 {
            self.wake_all();
            true
        } else {
            false
        }
    }

    /// Waits until `ready()` holds: spins up to `spins` times (0 when `peer_running`
    /// says the producer is not running), then blocks on the futex for at most
    /// `timeout` (`None`: no limit). `my_running`, if given, is cleared while blocked so
    /// that peers waiting on us skip their spin.
    pub fn wait_until(
        &self,
        spins: u32,
        peer_running: impl Fn() -> bool,
        ready: impl FnMut() -> bool,
        timeout: Option<Duration>,
        my_running: Option<&AtomicU32>,
    ) -> WaitOutcome {
        self.wait_until_armed(spins, peer_running, ready, timeout, my_running, || {})
    }

    /// [`WaitWord::wait_until`], calling `arm` before every attempt to block (after the
    /// spin and after the ticket is taken, before the condition is re-checked): the place to
    /// raise flags that ask a peer for a wake-up ([`arm_wake_flags`]), so a peer
    /// that clears a flag while waking us is asked again if we sleep again.
    pub fn wait_until_armed(
        &self,
        spins: u32,
        peer_running: impl Fn() -> bool,
        mut ready: impl FnMut() -> bool,
        timeout: Option<Duration>,
        my_running: Option<&AtomicU32>,
        mut arm: impl FnMut(),
    ) -> WaitOutcome {
        if ready() {
            return WaitOutcome::Ready;
        }
        if peer_running() {
            for _ in 0..spins {
                spin_hint();
                if ready() {
                    return WaitOutcome::Ready;
                }
            }
        }
        loop {
            // The ticket before the flags: a peer that takes a flag raised here and
            // notifies has bumped `seq` past this ticket, so we cannot sleep on it. In
            // the other order its notification could be counted in the ticket and the
            // flag already gone when it frees more (loom:
            // `loom_space_waiter_rearms_after_a_partial_wakeup`).
            let ticket = seq(self.state.load(Ordering::SeqCst));
            arm();
            if ready() {
                return WaitOutcome::Ready;
            }
            let registered = self.state.fetch_add(1, Ordering::SeqCst);
            if let Some(r) = my_running {
                r.store(0, Ordering::Relaxed);
            }
            // A notification since the ticket: no need to ask the kernel.
            let woke = seq(registered) != ticket || {
                #[cfg(not(loom))]
                SLEEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.block(ticket, timeout)
            };
            if let Some(r) = my_running {
                r.store(1, Ordering::Relaxed);
            }
            self.state.fetch_sub(1, Ordering::SeqCst);
            if ready() {
                return WaitOutcome::Ready;
            }
            if !woke {
                return WaitOutcome::TimedOut;
            }
        }
    }

    /// Sleeps while `seq == ticket`; false if the timeout passed.
    #[cfg(not(loom))]
    fn block(&self, ticket: u32, timeout: Option<Duration>) -> bool {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `seq_half` is a live, 4-byte aligned u32 (the kernel compares it with a
        // 32-bit load, which on the supported targets reads an aligned half of a 64-bit
        // atomic word consistently); the shared (non-PRIVATE) futex op is required
        // because waker and waiter are in different processes mapping the same page;
        // `tsp` is null or points to `ts`.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.seq_half(),
                libc::FUTEX_WAIT,
                ticket,
                tsp,
            )
        };
        !(r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT))
    }

    #[cfg(not(loom))]
    fn wake_all(&self) {
        // SAFETY: as in `block`; FUTEX_WAKE only reads the address.
        unsafe { libc::syscall(libc::SYS_futex, self.seq_half(), libc::FUTEX_WAKE, i32::MAX) };
    }

    /// The `seq` half of the word, for the futex (which compares 32 bits).
    #[cfg(not(loom))]
    fn seq_half(&self) -> *const u32 {
        let half = if cfg!(target_endian = "little") { 1 } else { 0 };
        // SAFETY: the word is 8 bytes; either half is in bounds and 4-byte aligned.
        unsafe { self.state.as_ptr().cast::<u32>().add(half) }
    }

    #[cfg(loom)]
    fn block(&self, ticket: u32, _timeout: Option<Duration>) -> bool {
        let g = self.lock.lock().unwrap();
        // The kernel compares under its bucket lock after a full barrier; an RMW read
        // is the model's equivalent.
        if seq(self.state.fetch_add(0, Ordering::SeqCst)) == ticket {
            drop(self.cv.wait(g).unwrap());
        }
        true
    }

    #[cfg(loom)]
    fn wake_all(&self) {
        let _g = self.lock.lock().unwrap();
        self.cv.notify_all();
    }
}

/// One notification in [`WaitWord`]'s word.
const SEQ_ONE: u64 = 1 << 32;

/// The notification count of a [`WaitWord`] value.
fn seq(word: u64) -> u32 {
    (word >> 32) as u32
}

/// The registered sleepers of a [`WaitWord`] value.
fn sleepers(word: u64) -> u32 {
    word as u32
}

/// Waiter side of a wake-up flag (a sender waiting for ring space): raises `flag`
/// and then issues the heavy side of an asymmetric barrier, so that whoever frees the
/// space either sees the flag in [`take_wake_flag`] or has its freeing store visible
/// to the condition the caller checks next (before it sleeps). Call it before
/// re-checking the condition, e.g. in the `arm` of [`WaitWord::wait_until_armed`];
/// several flags may be raised with `raise` and fenced once. Returns false if the
/// kernel refused the barrier (the caller must then not sleep for long).
pub fn arm_wake_flags(raise: impl FnOnce()) -> bool {
    raise();
    crate::sync::heavy_barrier()
}

/// Raises one flag for [`arm_wake_flags`].
pub fn arm_wake_flag(flag: &AtomicU32) {
    flag.swap(1, Ordering::SeqCst);
}

/// Notifier side of a wake-up flag, after the store that frees what the waiter waits
/// for: whether the waiter asked to be woken (the flag is cleared; the caller then
/// notifies it). With asymmetric barriers (`membarrier(2)`, registered at start-up) the
/// common case — nobody waiting — is a plain load and no atomic read-modify-write:
/// either this load sees the flag, or the waiter's heavy barrier came after it and the
/// waiter's re-check sees our store. Without them, an RMW on the flag gives the same
/// (both sides then RMW the one word).
#[inline]
pub fn take_wake_flag(flag: &AtomicU32) -> bool {
    if crate::sync::asymmetric_barriers() {
        crate::sync::light_barrier();
        if flag.load(Ordering::Relaxed) == 0 {
            return false;
        }
    }
    flag.swap(0, Ordering::AcqRel) != 0
}

impl Default for WaitWord {
    fn default() -> Self {
        Self::new()
    }
}

/// Spin iterations worth one futex block + wake, measured once per process.
///
/// Two threads ping-pong through futexes to time a block+wake round, and a spin loop is
/// timed per iteration; the quotient is clamped to a sane range. `DYNRES_SHM_SPINS`
/// overrides it (benchmarks use this to explore the trade-off).
#[cfg(not(loom))]
pub fn calibrated_spins() -> u32 {
    static SPINS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *SPINS.get_or_init(|| {
        if let Some(v) = spins_from_env() {
            return v;
        }
        let block_wake = measure_block_wake();
        let per_spin = measure_spin();
        let spins = (block_wake.as_nanos() as f64 / per_spin.max(0.1)) as u64;
        let spins = spins.clamp(1_000, 1_000_000) as u32;
        tracing::debug!(?block_wake, per_spin, spins, "calibrated shm spin");
        spins
    })
}

/// The spin budget `DYNRES_SHM_SPINS` sets, if it does.
#[cfg(not(loom))]
pub fn spins_from_env() -> Option<u32> {
    std::env::var("DYNRES_SHM_SPINS").ok()?.parse().ok()
}

#[cfg(not(loom))]
fn measure_block_wake() -> Duration {
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32 as StdU32;
    const ROUNDS: u32 = 200;
    let words = Arc::new((
        WaitWord::new(),
        WaitWord::new(),
        StdU32::new(0),
        StdU32::new(0),
    ));
    let w2 = words.clone();
    let t = std::thread::spawn(move || {
        for i in 1..=ROUNDS {
            // Block immediately (spins = 0): this side measures the blocking path only.
            w2.0.wait_until(
                0,
                || false,
                || w2.2.load(Ordering::Acquire) >= i,
                None,
                None,
            );
            w2.3.store(i, Ordering::Release);
            w2.1.notify();
        }
    });
    let start = std::time::Instant::now();
    for i in 1..=ROUNDS {
        words.2.store(i, Ordering::Release);
        words.0.notify();
        words.1.wait_until(
            0,
            || false,
            || words.3.load(Ordering::Acquire) >= i,
            None,
            None,
        );
    }
    let elapsed = start.elapsed();
    t.join().expect("calibration thread");
    // One round is two block+wake hand-offs.
    elapsed / (2 * ROUNDS)
}

#[cfg(not(loom))]
fn measure_spin() -> f64 {
    let flag = AtomicU32::new(0);
    const N: u32 = 20_000;
    let start = std::time::Instant::now();
    for _ in 0..N {
        spin_hint();
        if flag.load(Ordering::Acquire) != 0 {
            break;
        }
    }
    start.elapsed().as_nanos() as f64 / f64::from(N)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn times_out_without_notification_and_wakes_with_one() {
        let w = Arc::new((WaitWord::new(), AtomicBool::new(false)));
        let out = w.0.wait_until(
            10,
            || true,
            || w.1.load(Ordering::Acquire),
            Some(Duration::from_millis(5)),
            None,
        );
        assert_eq!(out, WaitOutcome::TimedOut);
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            w2.1.store(true, Ordering::Release);
            w2.0.notify();
        });
        // Peer "not running": no spin, straight to the futex; must still see the event.
        let out =
            w.0.wait_until(0, || false, || w.1.load(Ordering::Acquire), None, None);
        assert_eq!(out, WaitOutcome::Ready);
        t.join().unwrap();
    }

    /// With nothing to wake it, a waiter sleeps in the futex until its timeout. The
    /// futex must wait on the `seq` half of the word: on the other half the kernel's
    /// compare fails at once and the wait never sleeps and never times out (checked in
    /// a thread, so that bug fails here instead of hanging).
    #[test]
    fn a_waiter_sleeps_on_the_seq_half_until_its_timeout() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let w = WaitWord::new();
            // seq 2 against 1 sleeper once registered: the two halves differ.
            w.notify();
            w.notify();
            let before = sleep_count();
            let out = w.wait_until(0, || false, || false, Some(Duration::from_millis(30)), None);
            let _ = tx.send((out, sleep_count() - before));
        });
        let (out, sleeps) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the wait neither slept nor timed out");
        assert_eq!(out, WaitOutcome::TimedOut);
        assert!(sleeps >= 1);
    }

    #[test]
    fn calibration_is_within_clamp() {
        let s = calibrated_spins();
        assert!((1_000..=1_000_000).contains(&s) || std::env::var("DYNRES_SHM_SPINS").is_ok());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicU32 as LoomU32;

    /// The notifier publishes then notifies; the waiter (not spinning, as when the peer
    /// is not running) must never sleep through it. A lost wake-up is a loom deadlock.
    #[test]
    fn loom_no_lost_wakeup() {
        loom::model(|| {
            let s = Arc::new((WaitWord::new(), LoomU32::new(0)));
            let s2 = s.clone();
            let t = loom::thread::spawn(move || {
                s2.1.store(1, Ordering::Release);
                s2.0.notify();
            });
            let out =
                s.0.wait_until(0, || false, || s.1.load(Ordering::Acquire) == 1, None, None);
            assert_eq!(out, WaitOutcome::Ready);
            t.join().unwrap();
        });
    }

    /// Two events in a row, with a short spin first: both must be observed.
    #[test]
    fn loom_two_events_with_spin() {
        loom::model(|| {
            let s = Arc::new((WaitWord::new(), LoomU32::new(0)));
            let s2 = s.clone();
            let t = loom::thread::spawn(move || {
                for v in 1..=2 {
                    s2.1.store(v, Ordering::Release);
                    s2.0.notify();
                }
            });
            for v in 1..=2 {
                let out =
                    s.0.wait_until(1, || true, || s.1.load(Ordering::Acquire) >= v, None, None);
                assert_eq!(out, WaitOutcome::Ready);
            }
            t.join().unwrap();
        });
    }

    /// A sender waits for ring space the way the device does (flag raised in `arm`,
    /// then the heavy barrier, then the ticket and the re-check), and the receiver
    /// frees space and checks the flag the cheap way (`take_wake_flag`: a plain load
    /// after the light barrier) and then stops. The ring is the real one over loom
    /// cells. A wake-up lost between the receiver's freeing store and its look at the
    /// flag is a loom deadlock: the sender sleeps with nobody left to wake it. Run
    /// twice in a row, so the second wait is armed again after the first wake-up
    /// cleared the flag.
    #[test]
    fn loom_space_waiter_is_woken_by_a_cheap_check() {
        use crate::shm::ring::loom_storage::CellStorage;
        use crate::shm::ring::{Consumer, Producer, RingControl};
        use std::ptr::NonNull;
        loom::model(|| {
            // The sender's wait word, and the flag in the receiver's slot.
            let s = Arc::new((WaitWord::new(), LoomU32::new(0)));
            let ctrl = Arc::new(RingControl::new());
            let cells = CellStorage::cells(2);
            let cp = NonNull::from(&*ctrl);
            // SAFETY: `ctrl` and `cells` outlive both ends (Arcs held by both threads).
            let mut prod = unsafe { Producer::new(cp, cells.clone()) };
            // SAFETY: as above; one consumer.
            let mut cons = unsafe { Consumer::new(cp, cells.clone()) };
            assert!(prod.push_all(&[&[1, 2]]), "the ring starts full");
            let (s2, keep) = (s.clone(), ctrl.clone());
            let receiver = loom::thread::spawn(move || {
                let _keep = keep;
                for want in [1u8, 2] {
                    let mut b = [0u8; 1];
                    while cons.pop_some(&mut b) == 0 {
                        loom::thread::yield_now();
                    }
                    assert_eq!(b[0], want);
                    if take_wake_flag(&s2.1) {
                        s2.0.notify();
                    }
                }
            });
            for byte in [3u8, 4] {
                let out = s.0.wait_until_armed(
                    0,
                    || false,
                    || prod.free() >= 1,
                    None,
                    None,
                    || {
                        arm_wake_flags(|| arm_wake_flag(&s.1));
                    },
                );
                assert_eq!(out, WaitOutcome::Ready);
                assert_eq!(prod.push_some(&[byte]), 1);
            }
            receiver.join().unwrap();
        });
    }

    /// The sender needs both bytes of the ring free, the receiver frees them one at a
    /// time: the first wake-up (which clears the flag) finds too little space, so the
    /// sender must raise the flag again before it sleeps again, or the receiver's
    /// second check finds it down and the sender sleeps for good (a loom deadlock).
    #[test]
    fn loom_space_waiter_rearms_after_a_partial_wakeup() {
        use crate::shm::ring::loom_storage::CellStorage;
        use crate::shm::ring::{Consumer, Producer, RingControl};
        use std::ptr::NonNull;
        loom::model(|| {
            let s = Arc::new((WaitWord::new(), LoomU32::new(0)));
            let ctrl = Arc::new(RingControl::new());
            let cells = CellStorage::cells(2);
            let cp = NonNull::from(&*ctrl);
            // SAFETY: `ctrl` and `cells` outlive both ends (Arcs held by both threads).
            let mut prod = unsafe { Producer::new(cp, cells.clone()) };
            // SAFETY: as above; one consumer.
            let mut cons = unsafe { Consumer::new(cp, cells.clone()) };
            assert!(prod.push_all(&[&[1, 2]]), "the ring starts full");
            let (s2, keep) = (s.clone(), ctrl.clone());
            let receiver = loom::thread::spawn(move || {
                let _keep = keep;
                for want in [1u8, 2] {
                    let mut b = [0u8; 1];
                    assert_eq!(cons.pop_some(&mut b), 1);
                    assert_eq!(b[0], want);
                    if take_wake_flag(&s2.1) {
                        s2.0.notify();
                    }
                }
            });
            let out = s.0.wait_until_armed(
                0,
                || false,
                || prod.free() >= 2,
                None,
                None,
                || {
                    arm_wake_flags(|| arm_wake_flag(&s.1));
                },
            );
            assert_eq!(out, WaitOutcome::Ready);
            assert!(prod.push_all(&[&[3, 4]]));
            receiver.join().unwrap();
        });
    }
}
