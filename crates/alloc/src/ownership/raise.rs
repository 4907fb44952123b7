//! The raiser's decisions (`raiser.rs`): what one store answer to a raise
//! does to the section, and how long failed raises wait before they are
//! sent again.

use std::time::Duration;

use crate::error::StoreErr;

/// What the raiser does with the store's answer to one raise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaiseOutcome {
    /// The ceiling is durable at this value: apply it (ignored if the
    /// section changed epoch meanwhile).
    Apply(u64),
    /// Refused for good: someone else owns the section now, or this
    /// process was replaced. Stop serving it at once (promise 3), if it is
    /// still at the raise's epoch (a newer take-over stays).
    Drop,
    /// Retry after the back-off; the section serves what it has meanwhile.
    Retry {
        /// A failure that may pass (no answer, no leader): the raise may or
        /// may not have landed. Otherwise the store and this process
        /// disagree on the set (too large, unknown section, a ceiling
        /// already above the target at this epoch): retried slowly, loudly.
        transient: bool,
    },
}

/// Decides what the answer to a raise of a section's ceiling to `to` does.
///
/// - `Ok(new_max)`: apply it.
/// - `NotAbove { current }` with `current >= to`: an earlier attempt whose
///   reply was lost landed (same epoch: the store checked it); the stored
///   value is durable (promise 2), apply it.
/// - `StaleEpoch` (also a section routed elsewhere) or `Fenced`: drop.
/// - anything else: retry.
pub fn settle_raise(to: u64, answer: &Result<u64, StoreErr>) -> RaiseOutcome {
    match answer {
        Ok(new_max) => RaiseOutcome::Apply(*new_max),
        Err(StoreErr::NotAbove { current }) if *current >= to => RaiseOutcome::Apply(*current),
        Err(StoreErr::StaleEpoch | StoreErr::Fenced) => RaiseOutcome::Drop,
        Err(e) => RaiseOutcome::Retry {
            transient: e.is_transient(),
        },
    }
}

/// The raiser's back-off: the wait before raises that failed are sent
/// again, doubling while rounds keep failing, back to the minimum once no
/// raise waits for a retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    /// The next wait.
    next: Duration,
    /// The first wait.
    min: Duration,
    /// The longest wait.
    max: Duration,
}

impl Backoff {
    /// Waits from `min`, doubling up to `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            next: min,
            min,
            max: max.max(min),
        }
    }

    /// After a round of raises: `failed` says it left raises to retry,
    /// `waiting` that raises of earlier rounds still wait for theirs.
    /// Returns how long to wait before the failed ones are sent again.
    pub fn after_round(&mut self, failed: bool, waiting: bool) -> Option<Duration> {
        if failed {
            let wait = self.next;
            self.next = (wait * 2).min(self.max);
            Some(wait)
        } else {
            if !waiting {
                self.next = self.min;
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_answers() {
        use RaiseOutcome::*;
        let cases = [
            (Ok(30), Apply(30)),
            (Err(StoreErr::NotAbove { current: 30 }), Apply(30)),
            (Err(StoreErr::NotAbove { current: 40 }), Apply(40)),
            (
                Err(StoreErr::NotAbove { current: 29 }),
                Retry { transient: false },
            ),
            (Err(StoreErr::StaleEpoch), Drop),
            (Err(StoreErr::Fenced), Drop),
            (Err(StoreErr::TooLarge), Retry { transient: false }),
            (Err(StoreErr::UnknownSection), Retry { transient: false }),
            (
                Err(StoreErr::Unavailable("timed out".into())),
                Retry { transient: true },
            ),
        ];
        for (answer, want) in cases {
            assert_eq!(settle_raise(30, &answer), want, "{answer:?}");
        }
    }

    /// A raise the store refuses because the section left this set (frozen
    /// for a move, moved, never installed) drops the section at once, as a
    /// stale epoch does: it is never retried while the lease runs.
    #[test]
    fn a_section_this_set_no_longer_serves_is_dropped() {
        use seqsvr_store_api::{Error, Rejection};
        for moved_to in [Some(1), None] {
            let answer = Err(StoreErr::from(Error::Rejected(Rejection::NotServing {
                section: 3,
                moved_to,
            })));
            assert_eq!(settle_raise(30, &answer), RaiseOutcome::Drop, "{answer:?}");
        }
    }

    #[test]
    fn backoff_doubles_while_failing_and_resets_when_nothing_waits() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(10), ms(35));
        assert_eq!(b.after_round(true, false), Some(ms(10)));
        assert_eq!(b.after_round(true, true), Some(ms(20)));
        assert_eq!(b.after_round(false, true), None, "others still wait");
        assert_eq!(b.after_round(true, true), Some(ms(35)), "capped");
        assert_eq!(b.after_round(true, true), Some(ms(35)));
        assert_eq!(b.after_round(false, false), None);
        assert_eq!(b.after_round(true, false), Some(ms(10)), "reset");
    }
}
