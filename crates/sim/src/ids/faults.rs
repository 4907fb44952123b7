//! The id faults of a run (docs/architecture/simulation.md, "Time-ordered
//! ids"): each AllocSvr's wall clock stepped back while it runs, by less
//! and by more than the window, or forward; a kill -9 and restart with the
//! clock set back; a pause past the lease (another holder reclaims the
//! worker id); a planned stop that releases its worker ids, sometimes over
//! a lossy link (the release reaches the store seconds late, its hedged
//! copy first). Drawn after the rest of the schedule, from the seed.

use crate::net::{fmt_time, Time, MS, SEC};
use crate::rng::Rng;

/// One id fault; `a` is an AllocSvr process slot of the home set.
#[derive(Debug, Clone, PartialEq)]
pub enum IdFault {
    /// The wall clock of `a` jumps by `by_ms` (negative: back) while it
    /// runs (an NTP step, an operator's `date -s`).
    ClockStep {
        /// The process slot.
        a: usize,
        /// The jump, ms.
        by_ms: i64,
    },
    /// kill -9 of `a`, its clock set back `back_ms`, restarted `down`
    /// later (a rollback across a restart).
    RestartSetBack {
        /// The process slot.
        a: usize,
        /// How far back, ms.
        back_ms: i64,
        /// How long it stays down.
        down: Time,
    },
    /// SIGSTOP of `a` for `dur`, longer than the lease + margin: its
    /// worker ids may be reclaimed meanwhile.
    PausePastLease {
        /// The process slot.
        a: usize,
        /// For how long.
        dur: Time,
    },
    /// A planned stop of `a`: nothing more issued, every worker id
    /// released, then the process exits and starts again `down` later.
    /// With `stall`, every store request it sends in the next 300 ms
    /// reaches the store that late (a lossy link: the hedged copy lands
    /// first, the stalled one seconds later).
    PlannedStop {
        /// The process slot.
        a: usize,
        /// How long it stays down.
        down: Time,
        /// How late its stalled requests arrive.
        stall: Option<Time>,
    },
}

impl std::fmt::Display for IdFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdFault::ClockStep { a, by_ms } => write!(f, "p{a}'s wall clock jumps {by_ms:+} ms"),
            IdFault::RestartSetBack { a, back_ms, down } => write!(
                f,
                "kill -9 p{a}, set its clock {back_ms} ms back, restart it {} later",
                fmt_time(*down)
            ),
            IdFault::PausePastLease { a, dur } => {
                write!(f, "pause p{a} for {} (past its lease)", fmt_time(*dur))
            }
            IdFault::PlannedStop { a, down, stall } => {
                write!(
                    f,
                    "planned stop of p{a}, restarted {} later",
                    fmt_time(*down)
                )?;
                match stall {
                    Some(s) => write!(f, " (its requests {} late)", fmt_time(*s)),
                    None => Ok(()),
                }
            }
        }
    }
}

/// What the id fault schedule is drawn for.
#[derive(Debug, Clone)]
pub(crate) struct IdShape {
    /// The home set's first process slots (the AllocSvrs faults hit).
    pub slots: Vec<usize>,
    /// No fault starts after this.
    pub quiet: Time,
    /// Lease + margin, ms.
    pub expiry_ms: u64,
}

/// The id faults: one every 1–4 s from t = 2–3 s until the quiet stretch.
pub(crate) fn generate(rng: &mut Rng, shape: &IdShape, window_ms: u64) -> Vec<(Time, IdFault)> {
    let mut out = Vec::new();
    let mut t = rng.range(2 * SEC, 3 * SEC);
    let w = window_ms as i64;
    while t < shape.quiet {
        let a = shape.slots[rng.pick(shape.slots.len())];
        let f = match rng.below(20) {
            // Back by less than the window: the generator goes on from its
            // last tick, borrowing.
            0..=4 => IdFault::ClockStep {
                a,
                by_ms: -(rng.range(w as u64 / 10, w as u64 * 9 / 10 + 1) as i64),
            },
            // Back by more than the window: typed refusals until the clock
            // is back.
            5..=8 => IdFault::ClockStep {
                a,
                by_ms: -(w + rng.range(100, 3000) as i64),
            },
            9..=10 => IdFault::ClockStep {
                a,
                by_ms: rng.range(100, 3000) as i64,
            },
            11..=13 => IdFault::RestartSetBack {
                a,
                back_ms: rng.range(500, 10_000) as i64,
                down: rng.range(100 * MS, 3 * SEC),
            },
            14..=16 => IdFault::PausePastLease {
                a,
                dur: (shape.expiry_ms * MS) + rng.range(500 * MS, 3 * SEC),
            },
            _ => IdFault::PlannedStop {
                a,
                down: rng.range(300 * MS, 3 * SEC),
                stall: rng.chance(0.5).then(|| rng.range(1500 * MS, 4 * SEC)),
            },
        };
        out.push((t, f));
        t += rng.range(SEC, 4 * SEC);
    }
    out
}
