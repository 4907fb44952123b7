//! Exponential backoff with jitter, without a random-number crate.
//!
//! Jitter matters here: when an AllocSvr's ceiling runs out or its lease
//! lapses, every client calling it fails at the same instant; without
//! jitter they would all come back at the same instant too. A cheap hash of
//! the clock and a process-wide counter spreads them well enough.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use seqsvr_core::rng::splitmix64;

/// Pauses that double from `initial` up to `max`, each jittered into
/// `[d/2, d]` ("equal jitter": never zero, never longer than planned).
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    /// The un-jittered length of the next pause.
    next: Duration,
    /// The cap on `next`.
    max: Duration,
}

impl Backoff {
    /// A backoff starting at `initial`, capped at `max`.
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self { next: initial, max }
    }

    /// The next pause, jittered with `seed`; doubles the one after.
    pub(crate) fn pause(&mut self, seed: u64) -> Duration {
        let d = self.next;
        self.next = (d * 2).min(self.max);
        let half = d / 2;
        let span = (d - half).as_nanos() as u64;
        half + Duration::from_nanos(if span == 0 { 0 } else { seed % (span + 1) })
    }
}

/// A fresh pseudo-random number: the clock's nanoseconds and a counter,
/// mixed with SplitMix64 so consecutive calls look unrelated.
pub(crate) fn jitter_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    splitmix64(t ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_cap_with_bounded_jitter() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(10), ms(50));
        let planned = [10, 20, 40, 50, 50];
        for p in planned {
            let d = b.pause(jitter_seed());
            assert!(d >= ms(p) / 2 && d <= ms(p), "{d:?} not in [{p}/2, {p}] ms");
        }
    }

    #[test]
    fn seed_extremes_hit_both_ends() {
        let ms = Duration::from_millis;
        assert_eq!(Backoff::new(ms(10), ms(10)).pause(0), ms(5));
        let span = ms(5).as_nanos() as u64;
        assert_eq!(Backoff::new(ms(10), ms(10)).pause(span), ms(10));
    }

    #[test]
    fn jitter_varies() {
        let seeds: std::collections::HashSet<u64> = (0..100).map(|_| jitter_seed()).collect();
        assert_eq!(seeds.len(), 100);
    }
}
