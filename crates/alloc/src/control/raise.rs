//! The raiser's rounds (`raiser.rs`; `docs/architecture/alloc.md`,
//! Ceilings): one round of raises at a time; each answer settled as
//! [`settle_raise`] decides (apply a durable ceiling, drop a section
//! refused for good, retry the rest); after a round, the failed raises
//! wait out the [`Backoff`] before they are queued again; a round that
//! sent something, or during which raises were queued, is followed by
//! another.

use std::time::{Duration, Instant};

use seqsvr_core::{Epoch, SectionId};

use crate::error::StoreErr;
use crate::ownership::{settle_raise, Backoff, RaiseOutcome};

use super::{Control, Effect, Timer};

/// The raiser's state: the round running, the raises that failed in it,
/// those waiting out the back-off, and the back-off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaiseState {
    /// A round is running.
    round: bool,
    /// Raises were queued (or queued again) while it ran: another round
    /// follows it.
    queued: bool,
    /// Sections whose raise failed in the running round.
    failed: Vec<SectionId>,
    /// Sections waiting out the back-off, queued again when it ends.
    waiting: Vec<SectionId>,
    /// The wait before failed raises are sent again.
    backoff: Backoff,
}

impl RaiseState {
    /// No round, nothing waiting, the back-off at its start.
    pub fn new(backoff: Backoff) -> Self {
        Self {
            round: false,
            queued: false,
            failed: Vec::new(),
            waiting: Vec::new(),
            backoff,
        }
    }
}

impl Default for RaiseState {
    /// The raiser's default back-off: 10 ms doubling up to 1 s
    /// (`RaiserConfig`).
    fn default() -> Self {
        Self::new(Backoff::new(
            Duration::from_millis(10),
            Duration::from_secs(1),
        ))
    }
}

impl Control {
    /// Raises were queued: a round, unless one runs (the round after it
    /// takes them) or the process was fenced.
    pub(super) fn raises_queued(&mut self) -> Vec<Effect> {
        if self.fenced {
            return Vec::new();
        }
        if self.raise.round {
            self.raise.queued = true;
            return Vec::new();
        }
        self.raise.round = true;
        self.raise.queued = false;
        vec![Effect::RaiseRound]
    }

    /// One raise answered: [`settle_raise`] says what it does. Every raise
    /// carries its epoch, so a stale one is refused by the store and drops
    /// the section only if still at that epoch (promise 3).
    pub(super) fn raise_answered(
        &mut self,
        section: SectionId,
        epoch: Epoch,
        to: u64,
        answer: &Result<u64, StoreErr>,
    ) -> Vec<Effect> {
        match settle_raise(to, answer) {
            RaiseOutcome::Apply(landed) => vec![Effect::ApplyRaise {
                section,
                epoch,
                landed,
            }],
            RaiseOutcome::Drop => vec![Effect::DropRaised { section, epoch }],
            RaiseOutcome::Retry { transient } => {
                self.raise.failed.push(section);
                vec![Effect::RaiseFailed { section, transient }]
            }
        }
    }

    /// The round ended: its failed raises wait out the back-off (which
    /// doubles while rounds keep failing and starts over once nothing
    /// waits); a round that sent something, or during which raises were
    /// queued, is followed by another.
    pub(super) fn raise_round_done(&mut self, now: Instant, sent: usize) -> Vec<Effect> {
        self.raise.round = false;
        if sent == 0 {
            return if std::mem::take(&mut self.raise.queued) {
                self.raises_queued()
            } else {
                Vec::new()
            };
        }
        let failed = std::mem::take(&mut self.raise.failed);
        let waiting = !self.raise.waiting.is_empty();
        let mut out = Vec::new();
        if let Some(wait) = self.raise.backoff.after_round(!failed.is_empty(), waiting) {
            self.raise.waiting.extend(failed);
            out.push(self.set_timer(Timer::Raises, now + wait));
        }
        out.extend(self.raises_queued());
        out
    }

    /// The back-off ended: the waiting raises are queued again and a round
    /// takes them (or the running one's successor).
    pub(super) fn raises_due(&mut self, _now: Instant) -> Vec<Effect> {
        let sections = std::mem::take(&mut self.raise.waiting);
        let mut out = vec![Effect::Requeue { sections }];
        out.extend(self.raises_queued());
        out
    }
}
