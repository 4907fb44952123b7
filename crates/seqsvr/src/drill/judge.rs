//! The drill's verdict on its own evidence: a pure function of the report
//! and the bounds it was given.
//!
//! A drill passes only if it *showed* something: calls were made (at least
//! the stated minimum) and numbers came back, every fault it was given
//! happened, per-uid order held (promise 1), each fault's largest section
//! jump stayed within one step (promise 4, see
//! `docs/architecture/promises.md`), each fault's outage stayed within the
//! stated bound, and every figure is a number (a `NaN` passes no bound).

use std::fmt;
use std::time::Duration;

use super::report::Report;

/// Numbers one call can take for one uid (a `next_batch` of 8 may name a
/// uid up to 8 times): per caller, what a drill may not have seen of a
/// section when a fault strikes (calls in flight, replies lost with the
/// process).
pub const NUMBERS_PER_CALL: u64 = 8;

/// What a drill must show.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounds {
    /// Fewest calls the drill must have made.
    pub min_calls: u64,
    /// Longest outage after any fault (its `recovery_ms`), if bounded.
    pub max_outage: Option<Duration>,
    /// Largest section jump across any fault; `None`: one step plus what
    /// the callers may not have seen ([`Bounds::section_jump`]).
    pub max_section_jump: Option<u64>,
    /// Concurrent callers (what they may not have seen widens the default
    /// jump bound).
    pub concurrency: u64,
}

impl Bounds {
    /// The largest section jump a fault may cost, for a set with `step`.
    ///
    /// Promise 4: a take-over (or handoff) begins at the section's ceiling,
    /// and a raise puts the ceiling at most one step above the number that
    /// asked for it, so the first number after the move is at most `step +
    /// 1` above the largest handed out before. The drill only knows the
    /// numbers *it received*, and measures each call against those received
    /// before it began: calls in flight when the fault struck may have
    /// taken up to [`NUMBERS_PER_CALL`] more each, and so may the calls
    /// served at the same time as the first ones after the move.
    pub fn section_jump(&self, step: u64) -> u64 {
        self.max_section_jump.unwrap_or_else(|| {
            step.saturating_add(1)
                .saturating_add((2 * NUMBERS_PER_CALL).saturating_mul(self.concurrency))
        })
    }
}

/// Why a drill did not pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Breach {
    /// Promise 1 broken.
    Order {
        /// Later calls that got a smaller number.
        regressions: usize,
        /// Calls that got a number already handed out.
        repeats: usize,
    },
    /// No call returned a number: nothing was tested.
    NoNumbers {
        /// Calls made.
        requests: u64,
        /// Of which failed.
        failed: u64,
    },
    /// Fewer calls than the stated minimum.
    TooFewCalls {
        /// Calls made.
        calls: u64,
        /// The minimum.
        min: u64,
    },
    /// A fault did not happen (its command failed, its target was not
    /// there): the drill did not test what it was asked to.
    FaultNotApplied {
        /// The fault, as given.
        fault: String,
        /// What running it said.
        outcome: String,
    },
    /// A fault's outage exceeded the bound (or is not a number).
    Outage {
        /// The fault.
        fault: String,
        /// Its longest outage, in ms.
        ms: f64,
        /// The bound, in ms.
        bound_ms: f64,
    },
    /// A fault cost a section more than the bound (promise 4).
    SectionJump {
        /// The fault.
        fault: String,
        /// The largest jump of a section's numbers across it.
        jump: u64,
        /// The bound.
        bound: u64,
        /// The set's step.
        step: u64,
    },
    /// A figure is not a number.
    NotANumber {
        /// Which figure.
        what: String,
    },
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Breach::Order {
                regressions,
                repeats,
            } => write!(
                f,
                "promise 1 broken: {regressions} regressions, {repeats} repeats"
            ),
            Breach::NoNumbers { requests, failed } => write!(
                f,
                "no numbers: {requests} calls made, {failed} failed; nothing was tested"
            ),
            Breach::TooFewCalls { calls, min } => {
                write!(f, "{calls} calls made, fewer than the minimum of {min}")
            }
            Breach::FaultNotApplied { fault, outcome } => {
                write!(f, "fault {fault} did not happen: {outcome}")
            }
            Breach::Outage {
                fault,
                ms,
                bound_ms,
            } if ms.is_nan() => {
                write!(f, "fault {fault}: its outage is not a number")?;
                if bound_ms.is_finite() {
                    write!(f, " (bound {bound_ms:.0} ms)")?;
                }
                Ok(())
            }
            Breach::Outage {
                fault,
                ms,
                bound_ms,
            } => write!(
                f,
                "fault {fault}: a section was unavailable for {ms:.0} ms after it, \
                 more than the bound of {bound_ms:.0} ms"
            ),
            Breach::SectionJump {
                fault,
                jump,
                bound,
                step,
            } => write!(
                f,
                "fault {fault}: a section's numbers jumped by {jump} across it, more than \
                 the bound of {bound} (step {step}; promise 4)"
            ),
            Breach::NotANumber { what } => write!(f, "{what} is not a number"),
        }
    }
}

/// What `fault` is, for a reason: when it ran and what it did.
fn name(f: &super::report::FaultReport) -> String {
    format!("at {:.1} s {:?}", f.fault.at.as_secs_f64(), f.fault.action)
}

/// Whether `v <= bound`; a `NaN` (incomparable) is within no bound.
fn within(v: f64, bound: f64) -> bool {
    matches!(
        v.partial_cmp(&bound),
        Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
    )
}

/// Everything wrong with `report` under `bounds`; empty: the drill passed.
pub fn judge(report: &Report, bounds: &Bounds) -> Vec<Breach> {
    let mut out = Vec::new();
    if report.regressions != 0 || report.repeats != 0 {
        out.push(Breach::Order {
            regressions: report.regressions,
            repeats: report.repeats,
        });
    }
    if report.numbers == 0 {
        out.push(Breach::NoNumbers {
            requests: report.requests,
            failed: report.failed,
        });
    }
    if report.requests < bounds.min_calls {
        out.push(Breach::TooFewCalls {
            calls: report.requests,
            min: bounds.min_calls,
        });
    }
    for (what, v) in [
        ("the longest unavailability", report.unavailable_max_ms),
        ("the p99 unavailability", report.unavailable_p99_ms),
    ] {
        if v.is_nan() {
            out.push(Breach::NotANumber { what: what.into() });
        }
    }
    let jump_bound = bounds.section_jump(report.step);
    for f in &report.faults {
        if !f.applied {
            out.push(Breach::FaultNotApplied {
                fault: name(f),
                outcome: f.outcome.clone(),
            });
        }
        let bound_ms = bounds
            .max_outage
            .map_or(f64::INFINITY, |d| d.as_secs_f64() * 1000.0);
        if !within(f.recovery_ms, bound_ms) {
            out.push(Breach::Outage {
                fault: name(f),
                ms: f.recovery_ms,
                bound_ms,
            });
        }
        if f.section_skip_max > jump_bound {
            out.push(Breach::SectionJump {
                fault: name(f),
                jump: f.section_skip_max,
                bound: jump_bound,
                step: report.step,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::faults::{Action, Fault};
    use super::super::report::FaultReport;
    use super::*;

    fn fault(applied: bool, recovery_ms: f64, jump: u64) -> FaultReport {
        FaultReport {
            fault: Fault {
                at: Duration::from_secs(2),
                action: Action::Kill("alloc-1".into()),
            },
            outcome: if applied {
                "signal 9 sent to alloc-1 (pid 7)".into()
            } else {
                "FAILED: reading alloc-1.pid: No such file or directory".into()
            },
            applied,
            recovery_ms,
            section_skip_max: jump,
        }
    }

    /// A drill that passes: 1000 calls, numbers, one applied fault costing
    /// 4.5 s and one step.
    fn good() -> Report {
        Report {
            requests: 1000,
            failed: 10,
            numbers: 1100,
            uids: 100,
            regressions: 0,
            repeats: 0,
            examples: vec![],
            unavailable_max_ms: 4500.0,
            unavailable_p99_ms: 4400.0,
            worst_sections: vec![],
            faults: vec![fault(true, 4500.0, 9_990)],
            skipped: 100_000,
            skipped_max_per_uid: 9_990,
            step: 10_000,
        }
    }

    fn bounds() -> Bounds {
        Bounds {
            min_calls: 500,
            max_outage: Some(Duration::from_millis(6500)),
            max_section_jump: None,
            concurrency: 16,
        }
    }

    #[test]
    fn verdicts_table() {
        const NAN: f64 = f64::NAN;
        type Case = (
            &'static str,
            fn(&mut Report, &mut Bounds),
            Vec<&'static str>,
        );
        let cases: Vec<Case> = vec![
            ("a good drill", |_, _| {}, vec![]),
            (
                "a regression",
                |r, _| r.regressions = 1,
                vec!["promise 1 broken: 1 regressions, 0 repeats"],
            ),
            (
                "a repeat",
                |r, _| r.repeats = 2,
                vec!["promise 1 broken: 0 regressions, 2 repeats"],
            ),
            (
                "every call failed",
                |r, _| {
                    r.failed = r.requests;
                    r.numbers = 0;
                },
                vec!["no numbers: 1000 calls made, 1000 failed; nothing was tested"],
            ),
            (
                "no call at all",
                |r, b| {
                    *r = Report {
                        requests: 0,
                        failed: 0,
                        numbers: 0,
                        faults: vec![],
                        ..good()
                    };
                    b.min_calls = 1;
                },
                vec![
                    "no numbers: 0 calls made, 0 failed; nothing was tested",
                    "0 calls made, fewer than the minimum of 1",
                ],
            ),
            (
                "fewer calls than stated",
                |r, _| r.requests = 499,
                vec!["499 calls made, fewer than the minimum of 500"],
            ),
            ("exactly the minimum", |r, _| r.requests = 500, vec![]),
            (
                "the fault did not happen",
                |r, _| r.faults[0] = fault(false, 0.0, 0),
                vec![
                    "fault at 2.0 s Kill(\"alloc-1\") did not happen: FAILED: reading \
                     alloc-1.pid: No such file or directory",
                ],
            ),
            (
                "an outage over the bound",
                |r, _| r.faults[0].recovery_ms = 6500.5,
                vec![
                    "fault at 2.0 s Kill(\"alloc-1\"): a section was unavailable for 6500 ms \
                     after it, more than the bound of 6500 ms",
                ],
            ),
            (
                "an outage at the bound",
                |r, _| r.faults[0].recovery_ms = 6500.0,
                vec![],
            ),
            (
                "an outage that is not a number",
                |r, _| r.faults[0].recovery_ms = NAN,
                vec![
                    "fault at 2.0 s Kill(\"alloc-1\"): its outage is not a number \
                     (bound 6500 ms)",
                ],
            ),
            (
                "an outage that is not a number, without a bound",
                |r, b| {
                    r.faults[0].recovery_ms = NAN;
                    b.max_outage = None;
                },
                vec!["fault at 2.0 s Kill(\"alloc-1\"): its outage is not a number"],
            ),
            (
                "a long outage, without a bound",
                |r, b| {
                    r.faults[0].recovery_ms = 60_000.0;
                    b.max_outage = None;
                },
                vec![],
            ),
            (
                "unavailability that is not a number",
                |r, _| {
                    r.unavailable_max_ms = NAN;
                    r.unavailable_p99_ms = NAN;
                },
                vec![
                    "the longest unavailability is not a number",
                    "the p99 unavailability is not a number",
                ],
            ),
            (
                "two steps skipped",
                |r, _| r.faults[0].section_skip_max = 19_990,
                vec![
                    "fault at 2.0 s Kill(\"alloc-1\"): a section's numbers jumped by 19990 \
                     across it, more than the bound of 10257 (step 10000; promise 4)",
                ],
            ),
            (
                "one step and what 16 callers may not have seen, twice",
                |r, _| r.faults[0].section_skip_max = 10_257,
                vec![],
            ),
            (
                "a stated jump bound",
                |r, b| {
                    r.faults[0].section_skip_max = 15_000;
                    b.max_section_jump = Some(20_001);
                },
                vec![],
            ),
            (
                "no numbers, a fault that did not happen and a NaN outage",
                |r, _| {
                    r.numbers = 0;
                    r.faults[0] = fault(false, NAN, 0);
                },
                vec![
                    "no numbers: 1000 calls made, 10 failed; nothing was tested",
                    "fault at 2.0 s Kill(\"alloc-1\") did not happen: FAILED: reading \
                     alloc-1.pid: No such file or directory",
                    "fault at 2.0 s Kill(\"alloc-1\"): its outage is not a number \
                     (bound 6500 ms)",
                ],
            ),
        ];
        for (what, change, want) in cases {
            let (mut r, mut b) = (good(), bounds());
            change(&mut r, &mut b);
            let got: Vec<String> = judge(&r, &b).iter().map(ToString::to_string).collect();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn the_default_jump_bound_is_one_step_and_what_callers_may_not_have_seen() {
        let mut b = bounds();
        assert_eq!(b.section_jump(10_000), 10_000 + 1 + 2 * 8 * 16);
        b.concurrency = 1;
        assert_eq!(b.section_jump(100), 117);
        b.max_section_jump = Some(5);
        assert_eq!(b.section_jump(100), 5);
        b.max_section_jump = None;
        b.concurrency = u64::MAX;
        assert_eq!(b.section_jump(u64::MAX), u64::MAX);
    }
}
