//! The per-uid monotonicity checker: given every number clients actually
//! received, with when each call started and returned, it finds every
//! violation of promise 1.
//!
//! Promise 1 is real-time: if a call for uid `u` returned `a` and a later
//! call for `u` (started after the first returned) returned `b`, then
//! `b > a`. Calls that overlap in time may be ordered either way, but two
//! calls may never return the same number for one uid.

use std::collections::HashMap;
#[cfg(test)]
use std::time::{Duration, Instant};

/// One number a client received. `T` is the clock: `std::time::Instant`
/// for real runs, a virtual time in simulations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation<T = std::time::Instant> {
    /// The uid.
    pub uid: u64,
    /// The number received.
    pub seq: u64,
    /// When the call was sent.
    pub start: T,
    /// When its reply arrived.
    pub end: T,
}

/// A broken promise: `later` started after `earlier` returned, yet its
/// number is not larger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Violation<T = std::time::Instant> {
    /// The uid.
    pub uid: u64,
    /// The earlier call.
    pub earlier: Observation<T>,
    /// The later call.
    pub later: Observation<T>,
}

/// What the checker found.
#[derive(Debug, Clone)]
pub struct Report<T = std::time::Instant> {
    /// Numbers checked.
    pub observations: usize,
    /// Distinct uids seen.
    pub uids: usize,
    /// Later calls that got a *smaller* number.
    pub regressions: Vec<Violation<T>>,
    /// Two calls that got the *same* number for one uid.
    pub repeats: Vec<Violation<T>>,
}

impl<T> Report<T> {
    /// Whether promise 1 held.
    pub fn ok(&self) -> bool {
        self.regressions.is_empty() && self.repeats.is_empty()
    }
}

/// Checks every uid's observations.
pub fn check<T: Ord + Copy>(observations: &[Observation<T>]) -> Report<T> {
    let mut by_uid: HashMap<u64, Vec<Observation<T>>> = HashMap::new();
    for o in observations {
        by_uid.entry(o.uid).or_default().push(*o);
    }
    let mut report = Report {
        observations: observations.len(),
        uids: by_uid.len(),
        regressions: Vec::new(),
        repeats: Vec::new(),
    };
    for (uid, mut obs) in by_uid {
        check_uid(uid, &mut obs, &mut report);
    }
    report
}

fn check_uid<T: Ord + Copy>(uid: u64, obs: &mut [Observation<T>], report: &mut Report<T>) {
    // Repeats, whatever the timing.
    obs.sort_by_key(|o| o.seq);
    for w in obs.windows(2) {
        if w[0].seq == w[1].seq {
            report.repeats.push(Violation {
                uid,
                earlier: w[0],
                later: w[1],
            });
        }
    }
    // Regressions: for each call, the largest number among calls that
    // returned before it started must be smaller than its own.
    obs.sort_by_key(|o| o.end);
    let mut prefix_max: Vec<Observation<T>> = Vec::with_capacity(obs.len());
    for o in obs.iter() {
        let best = match prefix_max.last() {
            Some(m) if m.seq >= o.seq => *m,
            _ => *o,
        };
        prefix_max.push(best);
    }
    for o in obs.iter() {
        let before = obs.partition_point(|p| p.end < o.start);
        if before == 0 {
            continue;
        }
        let m = prefix_max[before - 1];
        if m.seq > o.seq {
            report.regressions.push(Violation {
                uid,
                earlier: m,
                later: *o,
            });
        }
    }
}

/// Stretches of time in which no call for a group of uids succeeded.
///
/// Given the end times of successful calls for one group (sorted or not)
/// and the window observed, returns the longest gap between successes.
pub fn longest_gap(
    mut ends: Vec<std::time::Instant>,
    from: std::time::Instant,
    to: std::time::Instant,
) -> std::time::Duration {
    ends.sort();
    let mut last = from;
    let mut gap = std::time::Duration::ZERO;
    for e in ends.into_iter().chain(std::iter::once(to)) {
        gap = gap.max(e.saturating_duration_since(last));
        last = last.max(e);
    }
    gap
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(t0: Instant, uid: u64, seq: u64, start_ms: u64, end_ms: u64) -> Observation {
        Observation {
            uid,
            seq,
            start: t0 + Duration::from_millis(start_ms),
            end: t0 + Duration::from_millis(end_ms),
        }
    }

    #[test]
    fn table() {
        let t = Instant::now();
        // (observations, regressions, repeats)
        let cases: Vec<(Vec<Observation>, usize, usize)> = vec![
            (vec![obs(t, 1, 1, 0, 1), obs(t, 1, 2, 2, 3)], 0, 0),
            // Later call, smaller number.
            (vec![obs(t, 1, 5, 0, 1), obs(t, 1, 4, 2, 3)], 1, 0),
            // Overlapping calls may be in either order.
            (vec![obs(t, 1, 5, 0, 4), obs(t, 1, 4, 2, 3)], 0, 0),
            // But never the same number.
            (vec![obs(t, 1, 5, 0, 4), obs(t, 1, 5, 2, 3)], 0, 1),
            // A later call equal to an earlier one is a repeat, not a regression.
            (vec![obs(t, 1, 5, 0, 1), obs(t, 1, 5, 2, 3)], 0, 1),
            // Different uids never interfere.
            (vec![obs(t, 1, 5, 0, 1), obs(t, 2, 1, 2, 3)], 0, 0),
            // A regression behind an unrelated later call is still found.
            (
                vec![obs(t, 1, 9, 0, 1), obs(t, 1, 10, 2, 3), obs(t, 1, 8, 4, 5)],
                1,
                0,
            ),
        ];
        for (i, (o, reg, rep)) in cases.into_iter().enumerate() {
            let r = check(&o);
            assert_eq!(
                (r.regressions.len(), r.repeats.len()),
                (reg, rep),
                "case {i}"
            );
        }
    }

    #[test]
    fn gaps() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        assert_eq!(
            longest_gap(vec![ms(10), ms(50), ms(60)], t, ms(100)),
            Duration::from_millis(40)
        );
        assert_eq!(longest_gap(vec![], t, ms(100)), Duration::from_millis(100));
    }
}
