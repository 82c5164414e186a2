//! The kernel's own notion of time.
//!
//! The kernel never reads a clock: the driver passes `now` into every `handle` call and
//! asks `poll_timeout` for the next deadline. Time is a plain count of nanoseconds since
//! an origin the driver picks (process start, simulation start), which keeps state
//! machines deterministic and lets a model checker treat time as data.

use core::fmt;
use core::ops::{Add, Sub};

/// A point in time: nanoseconds since an origin chosen by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(pub u64);

/// A span of time in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub u64);

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration(0);

    /// `n` nanoseconds.
    pub const fn from_nanos(n: u64) -> Self {
        Duration(n)
    }

    /// `n` microseconds (saturating).
    pub const fn from_micros(n: u64) -> Self {
        Duration(n.saturating_mul(1_000))
    }

    /// `n` milliseconds (saturating).
    pub const fn from_millis(n: u64) -> Self {
        Duration(n.saturating_mul(1_000_000))
    }

    /// `n` seconds (saturating).
    pub const fn from_secs(n: u64) -> Self {
        Duration(n.saturating_mul(1_000_000_000))
    }

    /// The span in nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
}

impl Instant {
    /// The driver's origin.
    pub const ZERO: Instant = Instant(0);

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates instead of wrapping: a deadline past the end of time is "never".
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{}ns", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Log lines and errors show an instant as the offset it is (`Instant` has no
    /// epoch: it is whatever clock the driver feeds in).
    #[test]
    fn an_instant_prints_as_its_offset() {
        assert_eq!(alloc::format!("{}", Instant(1500)), "t+1500ns");
    }

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        assert_eq!(Instant(u64::MAX - 1) + Duration(5), Instant(u64::MAX));
        assert_eq!(Instant(3) - Instant(10), Duration::ZERO);
        assert_eq!(Instant(10) - Instant(3), Duration(7));
        assert_eq!(Duration::from_millis(2), Duration(2_000_000));
        assert_eq!(Duration::from_secs(u64::MAX), Duration(u64::MAX));
    }
}
