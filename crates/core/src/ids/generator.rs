//! One worker id's id generator, with the clock passed in.
//!
//! The rules (docs/ids.md, Clock policy):
//! - **Time never goes back.** The tick of an id is the later of the clock's
//!   and the last one issued. If the clock goes back, the generator keeps
//!   issuing from the last tick (its sequence, then *borrowing* the next
//!   ticks, at most `borrow` ticks ahead of the clock), then refuses with
//!   [`IdError::ClockBehind`]. It never sleeps and never spins.
//! - **Never above the ceiling.** The worker id's *time ceiling* is
//!   replicated in the store and raised ahead of need; no id carries a tick
//!   above it, so whoever holds the worker id next — starting at the
//!   ceiling plus one — cannot repeat one ([`IdError::CeilingReached`]
//!   until it is raised).
//! - **Start above the predecessor.** A holder starts at its *floor*, the
//!   ceiling before its claim plus one, whatever its clock says: a restart
//!   with the clock set back issues above everything issued before.

use serde::{Deserialize, Serialize};

use super::{IdError, Layout};

/// A worker id's generator: plain state, one owner (the caller locks).
#[derive(Debug, Clone)]
pub struct Generator {
    /// The namespace's layout.
    layout: Layout,
    /// The worker id held.
    worker: u64,
    /// The first tick this holder may use: the ceiling before its claim
    /// plus one. The clock counts as at least this.
    floor: u64,
    /// The tick of the last id issued (the floor before the first).
    last: u64,
    /// The next sequence within `last`; `max_seq + 1` once it is used up.
    next_seq: u64,
    /// The durable time ceiling: no id carries a later tick.
    ceiling: u64,
    /// How many ticks ahead of the clock the generator may borrow.
    borrow: u64,
    /// Counters for the metrics.
    stats: GenStats,
}

/// What a generator counted since it started (exported as metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenStats {
    /// Ids issued.
    pub issued: u64,
    /// Ids issued at a tick ahead of the clock (borrowed).
    pub borrowed: u64,
    /// Calls seen with the clock behind the last tick issued.
    pub clock_back: u64,
    /// Refusals: clock behind by more than the borrow allows.
    pub clock_behind: u64,
    /// Refusals: the ceiling was not raised in time.
    pub ceiling_reached: u64,
}

impl Generator {
    /// A generator for `worker`, claimed with floor `floor` (the ceiling
    /// before the claim plus one) under the durable ceiling `ceiling`;
    /// `borrow` ticks may be issued ahead of the clock.
    pub fn new(
        layout: Layout,
        worker: u64,
        floor: u64,
        ceiling: u64,
        borrow: u64,
    ) -> Result<Self, IdError> {
        layout.validate()?;
        if worker > layout.max_worker() {
            return Err(IdError::WorkerOutOfRange {
                worker,
                max: layout.max_worker(),
            });
        }
        if floor > layout.max_tick() {
            return Err(IdError::TimeExhausted {
                end_ms: layout.end_ms().unwrap_or(u64::MAX),
            });
        }
        Ok(Self {
            layout,
            worker,
            floor,
            last: floor,
            next_seq: 0,
            ceiling,
            borrow,
            stats: GenStats::default(),
        })
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The worker id held.
    pub fn worker(&self) -> u64 {
        self.worker
    }

    /// The durable ceiling known.
    pub fn ceiling(&self) -> u64 {
        self.ceiling
    }

    /// The floor this holder started at.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The tick of the last id issued.
    pub fn last_tick(&self) -> u64 {
        self.last
    }

    /// What it counted.
    pub fn stats(&self) -> GenStats {
        self.stats
    }

    /// A newer durable ceiling (a raise the store acknowledged). Only ever
    /// goes up: a late answer to an older raise changes nothing.
    pub fn set_ceiling(&mut self, ceiling: u64) {
        self.ceiling = self.ceiling.max(ceiling);
    }

    /// The ceiling to ask the store for, if the current one is less than
    /// half a `window` ahead of the clock (or of the last tick issued):
    /// `max(clock, last) + window`, within the layout.
    pub fn wants_raise(&self, now_ms: u64, window: u64) -> Option<u64> {
        let base = self.layout.tick_of(now_ms).max(self.last);
        if self.ceiling >= base.saturating_add(window / 2).max(base + 1) {
            return None;
        }
        let to = base.saturating_add(window).min(self.layout.max_tick());
        (to > self.ceiling).then_some(to)
    }

    /// One id at Unix time `now_ms`.
    pub fn next(&mut self, now_ms: u64) -> Result<u64, IdError> {
        let now = self.layout.tick_of(now_ms);
        self.advance(now);
        if self.next_seq > self.layout.max_seq() {
            self.borrow_next(now)?;
        }
        let id = self
            .layout
            .encode_unchecked(self.last, self.worker, self.next_seq);
        self.next_seq += 1;
        self.stats.issued += 1;
        if self.last > now {
            self.stats.borrowed += 1;
        }
        Ok(id)
    }

    /// Up to `n` ids at Unix time `now_ms`, appended to `out` in the order
    /// issued (increasing, or increasing once unscattered for a scattered
    /// layout). Fewer than `n` when a limit (clock, ceiling) is reached after
    /// the first; that limit's error if not even one can be issued.
    pub fn next_n(&mut self, now_ms: u64, n: usize, out: &mut Vec<u64>) -> Result<(), IdError> {
        let start = out.len();
        for _ in 0..n {
            match self.next(now_ms) {
                Ok(id) => out.push(id),
                Err(e) if out.len() == start => return Err(e),
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// Moves to the clock's tick if it is later than the last one (and
    /// within the ceiling); a clock at or behind the last tick keeps it.
    fn advance(&mut self, now: u64) {
        if now < self.last {
            self.stats.clock_back += 1;
        }
        let target = now.min(self.ceiling);
        if target > self.last {
            self.last = target;
            self.next_seq = 0;
        }
    }

    /// The last tick's sequence is used up: take the next tick, if it is
    /// within the ceiling and at most `borrow` ticks ahead of the clock
    /// (counted from the floor while the clock is below it).
    fn borrow_next(&mut self, now: u64) -> Result<(), IdError> {
        let t = self.last + 1;
        if t > self.layout.max_tick() {
            return Err(IdError::TimeExhausted {
                end_ms: self.layout.end_ms().unwrap_or(u64::MAX),
            });
        }
        if t > self.ceiling {
            self.stats.ceiling_reached += 1;
            return Err(IdError::CeilingReached {
                ceiling: self.ceiling,
            });
        }
        let limit = now.max(self.floor).saturating_add(self.borrow);
        if t > limit {
            self.stats.clock_behind += 1;
            return Err(IdError::ClockBehind {
                behind_ms: (t - limit) * self.layout.unit_ms,
            });
        }
        self.last = t;
        self.next_seq = 0;
        Ok(())
    }
}
