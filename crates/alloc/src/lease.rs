//! The AllocSvr's side of its lease (`docs/architecture/failover.md`,
//! Leases), as plain logic with the clock passed in.
//!
//! A renewal granted by the store lets this AllocSvr serve until `sent +
//! lease`, where `sent` is when *it sent* the renewal, read on its own
//! monotonic clock: the store counts from when it *granted*, which is
//! later, and adds a margin for clock-rate drift before it moves anything.
//! So, while the drift stays within `margin / lease`, this view of the
//! lease always ends first (promise 3).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A lease, readable from any thread without a lock.
#[derive(Debug)]
pub struct Lease {
    /// The zero of `until` (a point on the monotonic clock).
    base: Instant,
    /// End of the lease in ns after `base`; 0: no lease.
    until: AtomicU64,
}

impl Lease {
    /// No lease yet; `base` is any instant not after the first renewal.
    pub fn new(base: Instant) -> Self {
        Self {
            base,
            until: AtomicU64::new(0),
        }
    }

    fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.base).as_nanos() as u64
    }

    /// A renewal sent at `sent` was granted for `len`. Never shortens the
    /// lease (replies may arrive out of order).
    pub fn granted(&self, sent: Instant, len: Duration) {
        self.until.fetch_max(self.ns(sent + len), Ordering::AcqRel);
    }

    /// Whether the lease holds at `now`.
    #[inline]
    pub fn valid_at(&self, now: Instant) -> bool {
        self.ns(now) < self.until.load(Ordering::Acquire)
    }

    /// Time left at `now` (negative once expired), in ms.
    pub fn left_ms(&self, now: Instant) -> i64 {
        let until = self.until.load(Ordering::Acquire) as i128;
        ((until - self.ns(now) as i128) / 1_000_000) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_from_send_time_and_never_shortened() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let l = Lease::new(t0);
        assert!(!l.valid_at(t0), "no lease before the first grant");
        // Sent at 100, granted (whenever) for 5 s: valid until 5100.
        l.granted(ms(100), Duration::from_secs(5));
        assert!(l.valid_at(ms(5099)));
        assert!(!l.valid_at(ms(5100)));
        // A late reply to an older renewal does not shorten it.
        l.granted(ms(50), Duration::from_secs(5));
        assert!(!l.valid_at(ms(5100)) && l.valid_at(ms(5099)));
        l.granted(ms(1000), Duration::from_secs(5));
        assert!(l.valid_at(ms(5999)));
        assert_eq!(l.left_ms(ms(6000)), 0);
        assert_eq!(l.left_ms(ms(7000)), -1000);
    }
}
