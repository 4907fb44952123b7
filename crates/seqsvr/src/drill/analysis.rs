//! Turning what clients received into the report's figures: violations of
//! promise 1, outages per section and per fault, and skipped numbers.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use seqsvr_core::checker::{self, check, Observation};
use seqsvr_core::SetSpec;

use super::faults::Applied;
use super::report::{FaultReport, Report};
use super::workload::Calls;

/// The figures for a drill that ran from `t0` to `t1`.
pub(super) fn analyse(
    set: &SetSpec,
    obs: &[Observation],
    faults: Vec<Applied>,
    calls: Calls,
    t0: Instant,
    t1: Instant,
) -> Report {
    let r = check(obs);
    let outages = Outages::new(set, obs, &calls.failures, t0, t1);
    let sections = SectionFigures::new(set, &outages);
    let faults = fault_reports(set, obs, &outages, faults);
    let (skipped, skipped_max) = skipped_numbers(obs);
    Report {
        requests: calls.requests,
        failed: calls.failed,
        numbers: r.observations,
        uids: r.uids,
        regressions: r.regressions.len(),
        repeats: r.repeats.len(),
        examples: examples(&r),
        unavailable_max_ms: sections.max_ms,
        unavailable_p99_ms: sections.p99_ms,
        worst_sections: sections.worst,
        faults,
        skipped,
        skipped_max_per_uid: skipped_max,
        step: set.step,
    }
}

/// The first five violations, human-readable.
fn examples(r: &checker::Report) -> Vec<String> {
    r.regressions
        .iter()
        .chain(&r.repeats)
        .take(5)
        .map(|v| {
            let (e, l) = (&v.earlier, &v.later);
            if e.same_call(l) {
                format!(
                    "uid {}: got {} at position {} of a batch after {} at position {}",
                    v.uid, l.seq, l.index, e.seq, e.index
                )
            } else {
                format!(
                    "uid {}: got {} after {} had been returned",
                    v.uid, l.seq, e.seq
                )
            }
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Per section, when calls succeeded and when failed calls started: what
/// outages are measured from.
struct Outages {
    sections: u32,
    /// Per section: when successful calls returned, sorted.
    ends: HashMap<u32, Vec<Instant>>,
    /// Per section: when failed calls started.
    fails: HashMap<u32, Vec<Instant>>,
    t0: Instant,
    t1: Instant,
}

impl Outages {
    fn new(
        set: &SetSpec,
        obs: &[Observation],
        failures: &[(u64, Instant)],
        t0: Instant,
        t1: Instant,
    ) -> Outages {
        let mut ends: HashMap<u32, Vec<Instant>> = HashMap::new();
        for o in obs {
            if let Some(s) = set.section_of(o.uid) {
                ends.entry(s).or_default().push(o.end);
            }
        }
        for e in ends.values_mut() {
            e.sort();
        }
        let mut fails: HashMap<u32, Vec<Instant>> = HashMap::new();
        for (uid, at) in failures {
            if let Some(s) = set.section_of(*uid) {
                fails.entry(s).or_default().push(*at);
            }
        }
        Outages {
            sections: set.section_count(),
            ends,
            fails,
            t0,
            t1,
        }
    }

    /// Section `s`'s longest outage that a call failed in, for failures
    /// from `from` until `until`. A section is unavailable over a gap
    /// between two successes only if a call for it failed in that gap (a
    /// quiet gap is just no traffic).
    fn longest(&self, s: u32, from: Instant, until: Instant) -> Duration {
        let e = self.ends.get(&s).map(Vec::as_slice).unwrap_or(&[]);
        self.fails
            .get(&s)
            .into_iter()
            .flatten()
            .filter(|f| **f >= from && **f < until)
            .map(|f| {
                let i = e.partition_point(|t| t <= f);
                let before = if i == 0 { self.t0 } else { e[i - 1] };
                let after = e.get(i).copied().unwrap_or(self.t1);
                after - before
            })
            .max()
            .unwrap_or_default()
    }

    /// The longest outage of any section, for failures from `from` until
    /// `until`.
    fn worst(&self, from: Instant, until: Instant) -> Duration {
        (0..self.sections)
            .map(|s| self.longest(s, from, until))
            .max()
            .unwrap_or_default()
    }
}

/// Outages over the whole drill, across sections.
struct SectionFigures {
    /// The longest, in ms.
    max_ms: f64,
    /// The 99th percentile over sections, in ms.
    p99_ms: f64,
    /// The worst five: (section, uid range, ms).
    worst: Vec<(u32, String, f64)>,
}

impl SectionFigures {
    fn new(set: &SetSpec, outages: &Outages) -> SectionFigures {
        let mut gaps: Vec<(u32, f64)> = (0..set.section_count())
            .map(|s| (s, ms(outages.longest(s, outages.t0, outages.t1))))
            .filter(|g| g.1 > 0.0)
            .collect();
        gaps.sort_by(|a, b| b.1.total_cmp(&a.1));
        let p99_ms = gaps
            .get(set.section_count() as usize / 100)
            .map_or(0.0, |g| g.1);
        let worst = gaps
            .iter()
            .take(5)
            .map(|(s, ms)| {
                let u = set.uids_of(*s);
                (*s, format!("{}..{}", u.start, u.end), *ms)
            })
            .collect();
        SectionFigures {
            max_ms: gaps.first().map_or(0.0, |g| g.1),
            p99_ms,
            worst,
        }
    }
}

/// Per fault (in time order), until the next one (or the end): the
/// recovery time and the largest section jump.
fn fault_reports(
    set: &SetSpec,
    obs: &[Observation],
    outages: &Outages,
    faults: Vec<Applied>,
) -> Vec<FaultReport> {
    let untils: Vec<Instant> = faults
        .iter()
        .skip(1)
        .map(|f| f.at)
        .chain([outages.t1])
        .collect();
    faults
        .into_iter()
        .zip(untils)
        .map(|(f, until)| FaultReport {
            // Against the fault's moment, and call by call: a fault
            // whose move comes later (a set move's freeze, a handoff
            // after a restart) shows only in the second.
            section_skip_max: section_skip(set, obs, f.at, until)
                .max(widest_section_jump(set, obs, f.at..until).1),
            recovery_ms: ms(outages.worst(f.at, until)),
            fault: f.fault,
            outcome: f.outcome,
            applied: f.applied,
        })
        .collect()
}

/// Per section, how far the numbers jumped across a fault: the smallest
/// number handed out after it (before `until`, the next fault) minus the
/// largest handed out before it; the largest over sections (that have
/// numbers on both sides). A section that moved restarts every uid at its
/// old ceiling, so this bounds what the move skipped (promise 4: at most
/// about one step). `current` answers hand out nothing and are left out.
/// The end-to-end tests judge their faults with it too.
pub fn section_skip(set: &SetSpec, obs: &[Observation], at: Instant, until: Instant) -> u64 {
    let mut before: HashMap<u32, u64> = HashMap::new();
    let mut after: HashMap<u32, u64> = HashMap::new();
    for o in obs.iter().filter(|o| o.kind == checker::Kind::Next) {
        let Some(s) = set.section_of(o.uid) else {
            continue;
        };
        if o.end < at {
            let b = before.entry(s).or_default();
            *b = (*b).max(o.seq);
        } else if o.start > at && o.end < until {
            let a = after.entry(s).or_insert(u64::MAX);
            *a = (*a).min(o.seq);
        }
    }
    after
        .iter()
        .filter_map(|(s, a)| before.get(s).map(|b| a.saturating_sub(*b)))
        .max()
        .unwrap_or(0)
}

/// Per section, the largest jump of a call made within `window` (begun
/// after its start, ended before its end): the number it received minus
/// the largest number received in its section by calls that had ended
/// before it began; the largest over sections, with its section. A
/// take-over or handoff starts every uid of its section at the old
/// ceiling, so the first call after each move jumps from what was handed
/// out before it, whenever the move happened: this bounds what every move
/// in the window skipped, one at a time, where [`section_skip`] needs one
/// moment for them all. Besides the moves, a jump includes the numbers
/// taken by calls in flight: those whose replies never came, and those
/// served at the same time as it. `current` answers hand out nothing and
/// are left out.
pub fn widest_section_jump(
    set: &SetSpec,
    obs: &[Observation],
    window: std::ops::Range<Instant>,
) -> (u32, u64) {
    let mut per: HashMap<u32, Vec<&Observation>> = HashMap::new();
    for o in obs.iter().filter(|o| o.kind == checker::Kind::Next) {
        if let Some(s) = set.section_of(o.uid) {
            per.entry(s).or_default().push(o);
        }
    }
    let mut widest = (0, 0);
    for (s, mut os) in per {
        // Ended, in order, with the largest number received by each end.
        os.sort_by_key(|o| o.end);
        let high: Vec<u64> = (os.iter())
            .scan(0, |h, o| {
                *h = (*h).max(o.seq);
                Some(*h)
            })
            .collect();
        for o in (os.iter()).filter(|o| o.start > window.start && o.end < window.end) {
            let ended = os.partition_point(|p| p.end < o.start);
            if let Some(h) = ended.checked_sub(1).map(|i| high[i]) {
                let jump = o.seq.saturating_sub(h);
                if jump > widest.1 {
                    widest = (s, jump);
                }
            }
        }
    }
    widest
}

/// Numbers between each uid's first and last received number that nobody
/// in this drill received (skip-ahead after failovers, lost replies, and
/// numbers other clients took).
fn skipped_numbers(obs: &[Observation]) -> (u64, u64) {
    let mut per: HashMap<u64, (u64, u64, u64)> = HashMap::new();
    for o in obs {
        let e = per.entry(o.uid).or_insert((u64::MAX, 0, 0));
        e.0 = e.0.min(o.seq);
        e.1 = e.1.max(o.seq);
        e.2 += 1;
    }
    per.values().fold((0, 0), |(sum, max), (lo, hi, n)| {
        let gap = (hi - lo + 1).saturating_sub(*n);
        (sum + gap, max.max(gap))
    })
}

#[cfg(test)]
mod tests {
    use super::super::faults::{Action, Fault};
    use super::*;

    /// Uids 0..20 in two sections of 10.
    fn two_sections() -> SetSpec {
        SetSpec {
            section_size: 10,
            ..SetSpec::new(0, 0..20)
        }
    }

    #[test]
    fn outages_need_a_failed_call_and_skips_compare_sections() {
        let (t0, set) = (Instant::now(), two_sections());
        let ms = |n| t0 + Duration::from_millis(n);
        let o = |uid, seq, at| Observation::next(uid, seq, ms(at), ms(at));
        // Section 0: quiet 10..500 (no failure), then a failure at 600 inside 550..900.
        // Section 1: one uid jumps from 5 to 105 across a fault at 300.
        let obs = [
            o(1, 1, 10),
            o(1, 2, 500),
            o(2, 1, 550),
            o(2, 2, 900),
            o(11, 5, 100),
            o(12, 105, 400),
        ];
        let calls = Calls {
            requests: 7,
            failed: 1,
            failures: vec![(3, ms(600))],
        };
        let fault = Fault {
            at: Duration::from_millis(300),
            action: Action::Kill("x".into()),
        };
        let applied = Applied {
            fault,
            at: ms(300),
            outcome: "ok".into(),
            applied: true,
        };
        let r = analyse(&set, &obs, vec![applied], calls, t0, ms(1000));
        assert_eq!(r.unavailable_max_ms, 350.0);
        assert_eq!(r.worst_sections.len(), 1);
        assert_eq!(r.faults[0].recovery_ms, 350.0);
        assert_eq!(r.faults[0].section_skip_max, 100);
        assert!(r.ok());
    }

    #[test]
    fn the_widest_jump_is_against_what_had_been_received() {
        let (t0, set) = (Instant::now(), two_sections());
        let ms = |n| t0 + Duration::from_millis(n);
        let o = |uid, seq, at| Observation::next(uid, seq, ms(at), ms(at));
        let c = |uid, seq, from, to| Observation::next(uid, seq, ms(from), ms(to));
        let obs = [
            // Section 0: a take-over before 50 (from 1 to 901).
            o(1, 1, 10),
            o(1, 901, 60),
            // A slow uid far below the others: no jump.
            o(2, 902, 100),
            o(3, 5, 105),
            o(2, 903, 120),
            // A move at about 150: from 903 to 1201.
            o(1, 1201, 200),
            o(2, 1202, 210),
            // A call in flight while 1202 was received is measured against
            // what had ended before it began.
            c(3, 1203, 205, 220),
            // Section 1: from 5 to 45.
            o(11, 5, 100),
            o(12, 45, 110),
            // A `current` answer hands out nothing.
            Observation::current(13, 5000, ms(300), ms(300)),
        ];
        assert_eq!(widest_section_jump(&set, &obs, ms(0)..ms(2000)), (0, 900));
        assert_eq!(widest_section_jump(&set, &obs, ms(70)..ms(2000)), (0, 298));
        assert_eq!(widest_section_jump(&set, &obs, ms(205)..ms(2000)), (0, 1));
        assert_eq!(
            widest_section_jump(&set, &obs[8..], ms(0)..ms(2000)),
            (1, 40)
        );
        assert_eq!(widest_section_jump(&set, &obs, ms(1000)..ms(2000)), (0, 0));
        // Only calls ended before the window's end count.
        assert_eq!(widest_section_jump(&set, &obs, ms(70)..ms(150)), (1, 40));
    }

    #[test]
    fn skipped_counts_holes_per_uid() {
        let t = Instant::now();
        let o = |uid, seq| Observation::next(uid, seq, t, t);
        assert_eq!(
            skipped_numbers(&[o(1, 1), o(1, 2), o(1, 10), o(2, 5)]),
            (7, 7)
        );
    }
}
