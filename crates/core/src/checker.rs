//! The per-uid monotonicity checker: given every answer clients actually
//! received — numbers handed out by `next` and `next_batch`, and what
//! `current` read —, with when each call started and returned, it finds
//! every violation of promise 1.
//!
//! Promise 1 is real-time: if a call for uid `u` returned `a` and a later
//! call for `u` (started after the first returned) returned `b`, then
//! `b > a`. Calls that overlap in time may be ordered either way, but two
//! calls may never return the same number for one uid. Within one batch
//! call a uid listed twice gets increasing numbers in request order: its
//! later copy must be above its earlier one (a regression if smaller, a
//! repeat if equal). A `current` read is ordered the same way: not below a
//! number returned before the read was sent, and below every number whose
//! call was sent after the read returned.

use std::collections::HashMap;
#[cfg(test)]
use std::time::{Duration, Instant};

/// What kind of call an [`Observation`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `next` or `next_batch`: the number was handed out.
    Next,
    /// `current`: the number was read.
    Current,
}

/// One answer a client received: a number handed out, or a `current`
/// read. `T` is the clock: `std::time::Instant` for real runs, a virtual
/// time in simulations.
///
/// The observations of one call share `start` and `end` (that is how the
/// checker tells them apart from other calls'), and `index` is each one's
/// position in the call's request.
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
    /// The uid's position in the call's request (0 for a single `next`
    /// and for `current`).
    pub index: u32,
    /// Handed out or read.
    pub kind: Kind,
}

impl<T: Copy> Observation<T> {
    /// The number a single `next(uid)` call received.
    pub fn next(uid: u64, seq: u64, start: T, end: T) -> Self {
        Self {
            uid,
            seq,
            start,
            end,
            index: 0,
            kind: Kind::Next,
        }
    }

    /// The numbers one `next_batch(uids)` call received, `seqs[i]` for
    /// `uids[i]` (the client's answer order), each with its position.
    pub fn batch(uids: &[u64], seqs: &[u64], start: T, end: T) -> Vec<Self> {
        assert_eq!(uids.len(), seqs.len(), "one number per uid");
        (uids.iter().zip(seqs).enumerate())
            .map(|(i, (&uid, &seq))| Self {
                index: i as u32,
                ..Self::next(uid, seq, start, end)
            })
            .collect()
    }

    /// What a `current(uid)` call answered.
    pub fn current(uid: u64, seq: u64, start: T, end: T) -> Self {
        Self {
            kind: Kind::Current,
            ..Self::next(uid, seq, start, end)
        }
    }
}

impl<T: PartialEq> Observation<T> {
    /// Whether `other` is another uid position of the same call (same
    /// times, another index).
    pub fn same_call(&self, other: &Self) -> bool {
        self.start == other.start && self.end == other.end && self.index != other.index
    }
}

/// A broken promise: `later` started after `earlier` returned (or comes
/// after it in one call's request), yet its number is not larger — or, for
/// a read, not in order with a number handed out.
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
    /// Numbers handed out that were checked.
    pub observations: usize,
    /// `current` answers checked.
    pub reads: usize,
    /// Distinct uids seen.
    pub uids: usize,
    /// Later calls, or later copies of a uid within one batch, that got a
    /// *smaller* number.
    pub regressions: Vec<Violation<T>>,
    /// Two calls, or two copies of a uid within one batch, that got the
    /// *same* number for one uid.
    pub repeats: Vec<Violation<T>>,
    /// `current` answers below a number returned before the read was sent
    /// (`earlier`: that number's call, `later`: the read).
    pub stale_reads: Vec<Violation<T>>,
    /// Numbers not above a `current` answer that returned before their
    /// call was sent (`earlier`: the read, `later`: the number's call).
    pub reads_ahead: Vec<Violation<T>>,
}

impl<T> Report<T> {
    /// Whether promise 1 held.
    pub fn ok(&self) -> bool {
        self.regressions.is_empty()
            && self.repeats.is_empty()
            && self.stale_reads.is_empty()
            && self.reads_ahead.is_empty()
    }
}

/// Checks every uid's observations.
pub fn check<T: Ord + Copy>(observations: &[Observation<T>]) -> Report<T> {
    // Per uid: numbers handed out, and `current` answers.
    type Uid<T> = (Vec<Observation<T>>, Vec<Observation<T>>);
    let mut by_uid: HashMap<u64, Uid<T>> = HashMap::new();
    for o in observations {
        let (nexts, reads) = by_uid.entry(o.uid).or_default();
        match o.kind {
            Kind::Next => nexts.push(*o),
            Kind::Current => reads.push(*o),
        }
    }
    let reads = (observations.iter())
        .filter(|o| o.kind == Kind::Current)
        .count();
    let mut report = Report {
        observations: observations.len() - reads,
        reads,
        uids: by_uid.len(),
        regressions: Vec::new(),
        repeats: Vec::new(),
        stale_reads: Vec::new(),
        reads_ahead: Vec::new(),
    };
    for (uid, (mut nexts, reads)) in by_uid {
        check_uid(uid, &mut nexts, &mut report);
        check_reads(uid, &mut nexts, &reads, &mut report);
    }
    report
}

fn check_uid<T: Ord + Copy>(uid: u64, obs: &mut [Observation<T>], report: &mut Report<T>) {
    // Repeats, whatever the timing (two copies in one call included).
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
    // Within one call: each copy of the uid above every earlier copy
    // (equal ones are repeats, found above).
    obs.sort_by_key(|o| (o.start, o.end, o.index));
    for call in obs.chunk_by(|a, b| (a.start, a.end) == (b.start, b.end)) {
        let mut best = call[0];
        for o in &call[1..] {
            if o.index != best.index && o.seq < best.seq {
                report.regressions.push(Violation {
                    uid,
                    earlier: best,
                    later: *o,
                });
            }
            if o.seq > best.seq {
                best = *o;
            }
        }
    }
    // Regressions: for each call, the largest number among calls that
    // returned before it started must be smaller than its own.
    obs.sort_by_key(|o| o.end);
    let prefix_max = running_best(obs, |o, best| o.seq > best.seq);
    for o in obs.iter() {
        let before = obs.partition_point(|p| p.end < o.start);
        if before == 0 {
            continue;
        }
        let m = obs[prefix_max[before - 1]];
        if m.seq > o.seq {
            report.regressions.push(Violation {
                uid,
                earlier: m,
                later: *o,
            });
        }
    }
}

/// For each position of `obs`, the position of the best observation up to
/// it (`better(o, best)`: `o` replaces the best so far).
fn running_best<T>(
    obs: &[Observation<T>],
    better: impl Fn(&Observation<T>, &Observation<T>) -> bool,
) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(obs.len());
    for (i, o) in obs.iter().enumerate() {
        match out.last() {
            Some(&b) if !better(o, &obs[b]) => out.push(b),
            _ => out.push(i),
        }
    }
    out
}

/// Checks one uid's `current` answers against its numbers handed out: not
/// below one returned before the read was sent, and below every one whose
/// call was sent after the read returned.
fn check_reads<T: Ord + Copy>(
    uid: u64,
    nexts: &mut [Observation<T>],
    reads: &[Observation<T>],
    report: &mut Report<T>,
) {
    if reads.is_empty() || nexts.is_empty() {
        return;
    }
    // The highest number returned before a time: by end, running maximum.
    nexts.sort_by_key(|o| o.end);
    let best_before = running_best(nexts, |o, best| o.seq > best.seq);
    for r in reads {
        let ended = nexts.partition_point(|o| o.end < r.start);
        if let Some(i) = ended.checked_sub(1) {
            let o = nexts[best_before[i]];
            if o.seq > r.seq {
                report.stale_reads.push(Violation {
                    uid,
                    earlier: o,
                    later: *r,
                });
            }
        }
    }
    // The lowest number sent after a time: by start, running minimum from
    // the end.
    nexts.sort_by_key(|o| std::cmp::Reverse(o.start));
    let least_after = running_best(nexts, |o, best| o.seq < best.seq);
    for r in reads {
        let started = nexts.partition_point(|o| o.start > r.end);
        if let Some(i) = started.checked_sub(1) {
            let o = nexts[least_after[i]];
            if o.seq <= r.seq {
                report.reads_ahead.push(Violation {
                    uid,
                    earlier: *r,
                    later: o,
                });
            }
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
        let ms = |n| t0 + Duration::from_millis(n);
        Observation::next(uid, seq, ms(start_ms), ms(end_ms))
    }

    fn read(t0: Instant, uid: u64, seq: u64, start_ms: u64, end_ms: u64) -> Observation {
        let ms = |n| t0 + Duration::from_millis(n);
        Observation::current(uid, seq, ms(start_ms), ms(end_ms))
    }

    /// One batch call for `uids`, answered `seqs`.
    fn batch(
        t0: Instant,
        uids: &[u64],
        seqs: &[u64],
        start_ms: u64,
        end_ms: u64,
    ) -> Vec<Observation> {
        let ms = |n| t0 + Duration::from_millis(n);
        Observation::batch(uids, seqs, ms(start_ms), ms(end_ms))
    }

    fn counts(r: &Report) -> (usize, usize, usize, usize) {
        (
            r.regressions.len(),
            r.repeats.len(),
            r.stale_reads.len(),
            r.reads_ahead.len(),
        )
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
            assert_eq!(counts(&r), (reg, rep, 0, 0), "case {i}");
        }
    }

    /// Within one batch call a uid's later copy must be above its earlier
    /// one; two different calls, even overlapping exactly but for a
    /// moment, may still be ordered either way.
    #[test]
    fn copies_within_one_batch_are_ordered() {
        let t = Instant::now();
        let cases: Vec<(Vec<Observation>, (usize, usize))> = vec![
            (batch(t, &[1, 1], &[5, 6], 0, 1), (0, 0)),
            (batch(t, &[1, 1], &[6, 5], 0, 1), (1, 0)),
            (batch(t, &[1, 1], &[5, 5], 0, 1), (0, 1)),
            // Other uids in between change nothing.
            (batch(t, &[1, 2, 3, 1], &[6, 1, 1, 5], 0, 1), (1, 0)),
            (batch(t, &[1, 2, 3, 1], &[5, 1, 1, 6], 0, 1), (0, 0)),
            // Below the highest earlier copy, not only the previous one.
            (batch(t, &[1, 1, 1], &[7, 8, 6], 0, 1), (1, 0)),
            (batch(t, &[1, 1, 1], &[9, 5, 7], 0, 1), (2, 0)),
            // Two different (overlapping) calls, either order.
            (
                [
                    batch(t, &[1, 1], &[5, 6], 0, 3),
                    batch(t, &[1, 1], &[3, 4], 1, 2),
                ]
                .concat(),
                (0, 0),
            ),
            (
                [
                    batch(t, &[2, 1], &[1, 6], 0, 3),
                    batch(t, &[1, 2], &[3, 4], 0, 2),
                ]
                .concat(),
                (0, 0),
            ),
        ];
        for (i, (o, want)) in cases.into_iter().enumerate() {
            let r = check(&o);
            assert_eq!(counts(&r), (want.0, want.1, 0, 0), "case {i}");
        }
        // The violation names both copies, earlier first.
        let r = check(&batch(t, &[1, 1], &[6, 5], 0, 1));
        let v = r.regressions[0];
        assert_eq!((v.earlier.seq, v.later.seq), (6, 5));
        assert_eq!((v.earlier.index, v.later.index), (0, 1));
        assert!(v.earlier.same_call(&v.later));
    }

    /// A `current` answer: not below a number returned before the read was
    /// sent, below every number whose call was sent after it returned;
    /// overlapping calls may be either way.
    #[test]
    fn current_reads_are_checked_both_ways() {
        let t = Instant::now();
        let nexts = vec![
            obs(t, 1, 5, 0, 10),
            obs(t, 1, 9, 30, 40),
            obs(t, 2, 100, 0, 1),
        ];
        let with = |reads: Vec<Observation>| check(&[nexts.clone(), reads].concat());
        // Overlapping calls, or calls the read's window contains: anything goes.
        let r = with(vec![
            read(t, 1, 5, 11, 20),
            read(t, 1, 8, 11, 29),
            read(t, 1, 3, 5, 35),
            read(t, 1, 0, 0, 10),
            read(t, 3, 0, 0, 10),
        ]);
        assert_eq!(counts(&r), (0, 0, 0, 0));
        assert_eq!((r.observations, r.reads, r.uids), (3, 5, 3));
        // Below a number received before the read was sent.
        let r = with(vec![read(t, 1, 4, 11, 20)]);
        assert_eq!(counts(&r), (0, 0, 1, 0));
        assert_eq!(
            (r.stale_reads[0].earlier.seq, r.stale_reads[0].later.seq),
            (5, 4)
        );
        // Not below a number whose call was sent after the answer (equal
        // or above).
        for seq in [9, 10] {
            let r = with(vec![read(t, 1, seq, 11, 20)]);
            assert_eq!(counts(&r), (0, 0, 0, 1), "read {seq}");
            let v = r.reads_ahead[0];
            assert_eq!((v.earlier.seq, v.later.seq), (seq, 9));
        }
        // A batch's numbers count like any other.
        let r = check(
            &[
                batch(t, &[1, 1], &[6, 7], 0, 10),
                vec![read(t, 1, 6, 11, 12)],
            ]
            .concat(),
        );
        assert_eq!(counts(&r), (0, 0, 1, 0));
        // Reads are not numbers handed out: two equal reads are no repeat.
        let r = check(&[read(t, 1, 4, 0, 1), read(t, 1, 4, 2, 3)]);
        assert!(r.ok());
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
