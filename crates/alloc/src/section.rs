//! [`SectionSlot`]: the in-memory state of one section this AllocSvr serves:
//! a dense array of `cur_seq` (8 bytes a uid) under one ceiling.
//!
//! The hot path (`SectionSlot::take`) is a lock-free compare-and-swap on
//! one uid's cell, checked against the ceiling. Everything else (take-over,
//! loss, raises) goes through a small per-section mutex that the hot path
//! never touches.
//!
//! A slot is created the first time its section is taken over and then lives
//! as long as its [`crate::Allocator`]: losing the section only *retires* it
//! (ceiling 0), and a later take-over reuses its memory. That is what lets
//! the hot path read slots without any lock or reference count: no slot is
//! ever freed while a caller may be looking at it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Mutex, MutexGuard};

use seqsvr_core::Epoch;
use tokio::sync::Notify;

use crate::ceiling::Grant;

/// The ceiling of a slot that is not serving. A served ceiling is never 0:
/// a take-over raises it by a step of at least 1, so one load of the ceiling
/// answers both "do we own it" and "how far may we go".
pub(crate) const NOT_SERVING: u64 = 0;

/// Why a slot handed out nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The section is not served here (never taken over, or retired).
    NotServing,
    /// The uid is at the ceiling: wait for a raise.
    Exhausted,
}

/// A snapshot of a slot, for status pages, metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionState {
    /// The epoch we serve the section under.
    pub epoch: Epoch,
    /// The section's ceiling (`max_seq`) as known here.
    pub ceiling: u64,
    /// The highest number handed out since the take-over (the take-over's
    /// skip-ahead value if none yet).
    pub high_water: u64,
    /// Whether a raise is queued or in flight.
    pub raise_pending: bool,
}

/// A `u64` on its own cache line, so that hot-path writes to it do not
/// slow down reads of the ceiling by other cores (false sharing).
#[repr(align(64))]
#[derive(Debug, Default)]
struct Padded(AtomicU64);

/// Fields changed only by take-over, loss and raises (never by the hot path).
#[derive(Debug)]
struct Meta {
    /// The epoch of the latest grant installed (even if since retired), so a
    /// replayed or delayed grant with an older epoch is refused.
    epoch: Epoch,
    /// Whether we currently serve the section.
    serving: bool,
}

/// The memory of one section: every uid's `cur_seq` and the ceiling.
///
/// Small on purpose (two pointers): the allocator's section table holds
/// slots inline, so the hot path goes from the table straight to the cells,
/// one dependent load fewer than through a boxed slot. Every load before the
/// compare-and-swap counts: the CAS is a locked instruction, so the next
/// call's loads cannot overlap it.
#[derive(Debug)]
pub struct SectionSlot {
    /// `cur_seq` of each uid of the section, indexed from the section's first
    /// uid: the last number handed out for it (or the skip-ahead value).
    /// Never decreases (promise 1).
    cells: Box<[AtomicU64]>,
    /// Ceiling and bookkeeping.
    ctl: Box<Control>,
}

/// A slot's ceiling, raise bookkeeping and ownership.
#[derive(Debug)]
struct Control {
    /// The ceiling (`max_seq`), or [`NOT_SERVING`]. Only grows while serving,
    /// and only to values the store has made durable (promise 2).
    ceiling: AtomicU64,
    /// Ask for a raise when `ceiling - high_water <= raise_margin` (a fixed
    /// fraction of the step, always `< step`).
    raise_margin: u64,
    /// Set by the caller that queues a raise, cleared when the raise is done
    /// or found unneeded: the hot path queues at most one raise at a time.
    raise_pending: AtomicBool,
    /// Highest number handed out since the take-over: raises target
    /// `high_water + step`, so the ceiling is never more than one step above
    /// what was handed out (promise 4, bounded gap).
    high_water: Padded,
    /// Epoch and serving flag; guards every change of ownership or ceiling.
    meta: Mutex<Meta>,
    /// Wakes callers waiting on an exhausted section when its ceiling moves
    /// or its ownership changes.
    changed: Notify,
}

impl SectionSlot {
    /// A slot of `len` uids serving `grant`: every uid skips ahead to the
    /// grant's previous ceiling (promise 1 across owners: nothing above it was
    /// ever handed out by anyone).
    pub(crate) fn new(len: usize, raise_margin: u64, grant: &Grant) -> Self {
        let ctl = Control {
            ceiling: AtomicU64::new(grant.max_seq),
            raise_margin,
            raise_pending: AtomicBool::new(false),
            high_water: Padded(AtomicU64::new(grant.prev_ceiling)),
            meta: Mutex::new(Meta {
                epoch: grant.epoch,
                serving: true,
            }),
            changed: Notify::new(),
        };
        Self {
            cells: (0..len)
                .map(|_| AtomicU64::new(grant.prev_ceiling))
                .collect(),
            ctl: Box::new(ctl),
        }
    }

    /// Hands out the next number of the uid at `idx`, or says why not.
    /// Calls `queue_raise` (at most once per raise, on the caller that first
    /// finds the section low) when a raise must be queued.
    ///
    /// Lock-free: one compare-and-swap on the uid's own cell. The ceiling is
    /// re-read on every attempt; it only decreases when the slot retires, so
    /// a number that passed the check was under a durable ceiling.
    ///
    /// Returns a small `Result` and takes the raise as a closure (instead of
    /// returning a richer enum) so the common path compiles to straight-line
    /// code in registers: every instruction before the next call's CAS counts.
    #[inline(always)]
    pub(crate) fn take(&self, idx: usize, queue_raise: impl FnOnce()) -> Result<u64, Refused> {
        let cell = &self.cells[idx];
        let mut cur = cell.load(Relaxed);
        let ceiling = loop {
            // Acquire pairs with the Release store in `install`: a caller that
            // sees the new ceiling also sees the skipped-ahead cells, so its
            // CAS cannot slip in before the skip ahead (promise 1).
            let ceiling = self.ctl.ceiling.load(Acquire);
            if cur >= ceiling {
                return Err(self.refuse(cur, ceiling, queue_raise));
            }
            // The cell alone orders the numbers of one uid (it has a single
            // modification order), so Relaxed is enough for the CAS.
            match cell.compare_exchange_weak(cur, cur + 1, Relaxed, Relaxed) {
                Ok(_) => break ceiling,
                Err(seen) => cur = seen,
            }
        };
        let v = cur + 1;
        // Load first: the RMW is paid only when the mark actually moves.
        if v > self.ctl.high_water.0.load(Relaxed) {
            self.ctl.high_water.0.fetch_max(v, Relaxed);
        }
        if ceiling - v <= self.ctl.raise_margin {
            self.low(queue_raise);
        }
        Ok(v)
    }

    /// The section is within the raise margin: queue a raise unless one is.
    #[cold]
    fn low(&self, queue_raise: impl FnOnce()) {
        if self.claim_raise() {
            queue_raise();
        }
    }

    /// The cold half of [`take`](Self::take): the uid is at `ceiling`.
    #[cold]
    fn refuse(&self, cur: u64, ceiling: u64, queue_raise: impl FnOnce()) -> Refused {
        if ceiling == NOT_SERVING {
            return Refused::NotServing;
        }
        // Cells start strictly below the ceiling, so `cur` reached it by
        // being handed out: the high-water mark may lag (its update races),
        // and the raise target must be above the ceiling.
        self.ctl.high_water.0.fetch_max(cur, Relaxed);
        self.low(queue_raise);
        Refused::Exhausted
    }

    /// Claims the right to queue a raise; true for exactly one caller until
    /// the raise is done.
    #[inline]
    fn claim_raise(&self) -> bool {
        !self.ctl.raise_pending.load(Relaxed) && !self.ctl.raise_pending.swap(true, AcqRel)
    }

    /// The uid's `cur_seq`, or `None` if the section is not served here.
    ///
    /// This is the last number handed out for the uid, except right after a
    /// take-over, when it is the skip-ahead value (the previous ceiling),
    /// which this owner never handed out. Either way it is ≥ every number
    /// ever handed out for the uid, and the next one will be above it.
    pub(crate) fn current(&self, idx: usize) -> Option<u64> {
        // Ceiling first: its Acquire pairs with `install`'s Release, so the
        // cell read after it is never from before a completed skip ahead.
        if self.ctl.ceiling.load(Acquire) == NOT_SERVING {
            return None;
        }
        Some(self.cells[idx].load(Relaxed))
    }

    fn meta(&self) -> MutexGuard<'_, Meta> {
        // Meta is two plain fields updated together; a panic elsewhere cannot
        // leave them torn, so a poisoned lock is still sound to use.
        self.ctl.meta.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves `grant` in a slot that already exists (a later take-over of a
    /// section we had before). False if the grant is not newer than the
    /// last one installed (a replay must not skip anything back).
    pub(crate) fn install(&self, grant: &Grant) -> bool {
        let mut meta = self.meta();
        if grant.epoch <= meta.epoch {
            return false;
        }
        // Stop serving while the cells move up, so no caller hands out a
        // number from a cell that has not skipped ahead yet (promise 1).
        self.ctl.ceiling.store(NOT_SERVING, Release);
        for cell in self.cells.iter() {
            // fetch_max, not store: a cell never goes down, whatever the grant.
            cell.fetch_max(grant.prev_ceiling, Relaxed);
        }
        self.ctl.high_water.0.store(grant.prev_ceiling, Relaxed);
        self.ctl.raise_pending.store(false, Relaxed);
        *meta = Meta {
            epoch: grant.epoch,
            serving: true,
        };
        self.ctl.ceiling.store(grant.max_seq, Release);
        drop(meta);
        self.ctl.changed.notify_waiters();
        true
    }

    /// Stops serving, if `epoch` is `None` or the epoch we serve under.
    /// Returns whether the slot was serving and now is not.
    pub(crate) fn retire(&self, epoch: Option<Epoch>) -> bool {
        let mut meta = self.meta();
        if !meta.serving || epoch.is_some_and(|e| e != meta.epoch) {
            return false;
        }
        meta.serving = false;
        self.ctl.ceiling.store(NOT_SERVING, Release);
        drop(meta);
        self.ctl.changed.notify_waiters();
        true
    }

    /// The epoch of the latest grant installed, serving or not: the newest
    /// epoch this process ever installed for the section.
    pub(crate) fn epoch(&self) -> Epoch {
        self.meta().epoch
    }

    /// The raise this slot wants, if it still wants one: the target is one
    /// step above the high-water mark (promise 4). Clears the pending flag
    /// when no raise is needed any more.
    pub(crate) fn raise_target(&self, step: u64) -> Option<(Epoch, u64)> {
        let meta = self.meta();
        if !self.ctl.raise_pending.load(Acquire) {
            return None; // a stale queue entry: nothing was claimed
        }
        let ceiling = self.ctl.ceiling.load(Acquire);
        let to = self.ctl.high_water.0.load(Relaxed).saturating_add(step);
        if !meta.serving || to <= ceiling {
            self.ctl.raise_pending.store(false, Release);
            return None;
        }
        Some((meta.epoch, to))
    }

    /// Applies a ceiling the store made durable under `epoch`. Ignored (false)
    /// if we no longer serve under that epoch: a late reply must never bring
    /// a lost section back (promise 3).
    pub(crate) fn apply_raise(&self, epoch: Epoch, new_max: u64) -> bool {
        let meta = self.meta();
        if !meta.serving || meta.epoch != epoch {
            return false;
        }
        self.ctl.ceiling.fetch_max(new_max, Release);
        self.ctl.raise_pending.store(false, Release);
        drop(meta);
        self.ctl.changed.notify_waiters();
        true
    }

    /// After a raise landed: whether callers already used so much of it that
    /// another raise is due (true: the caller must queue it).
    pub(crate) fn claim_if_low(&self) -> bool {
        let ceiling = self.ctl.ceiling.load(Acquire);
        ceiling != NOT_SERVING
            && ceiling.saturating_sub(self.ctl.high_water.0.load(Relaxed)) <= self.ctl.raise_margin
            && self.claim_raise()
    }

    /// Whether the slot is currently served.
    pub(crate) fn is_serving(&self) -> bool {
        self.ctl.ceiling.load(Acquire) != NOT_SERVING
    }

    /// A snapshot, or `None` if not serving.
    pub(crate) fn state(&self) -> Option<SectionState> {
        let meta = self.meta();
        meta.serving.then(|| SectionState {
            epoch: meta.epoch,
            ceiling: self.ctl.ceiling.load(Acquire),
            high_water: self.ctl.high_water.0.load(Relaxed),
            raise_pending: self.ctl.raise_pending.load(Relaxed),
        })
    }

    /// The notifier fired whenever the ceiling or ownership changes.
    pub(crate) fn changed(&self) -> &Notify {
        &self.ctl.changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One `take`, with whether it asked for a raise, as one value.
    #[derive(Debug, PartialEq, Eq)]
    enum Take {
        Got(u64),
        GotWantsRaise(u64),
        Exhausted { wants_raise: bool },
        NotServing,
    }

    fn take(s: &SectionSlot, idx: usize) -> Take {
        let mut asked = false;
        match s.take(idx, || asked = true) {
            Ok(v) if asked => Take::GotWantsRaise(v),
            Ok(v) => Take::Got(v),
            Err(Refused::Exhausted) => Take::Exhausted { wants_raise: asked },
            Err(Refused::NotServing) => Take::NotServing,
        }
    }

    fn grant(epoch: Epoch, prev: u64, max: u64) -> Grant {
        Grant {
            section: 0,
            epoch,
            prev_ceiling: prev,
            max_seq: max,
        }
    }

    #[test]
    fn skips_ahead_then_counts_to_the_ceiling() {
        let s = SectionSlot::new(3, 0, &grant(1, 100, 103));
        assert_eq!(
            s.current(0),
            Some(100),
            "skip ahead: cur starts at prev ceiling"
        );
        assert_eq!(take(&s, 0), Take::Got(101));
        assert_eq!(take(&s, 0), Take::Got(102));
        assert_eq!(take(&s, 1), Take::Got(101), "uids count independently");
        assert_eq!(
            take(&s, 0),
            Take::GotWantsRaise(103),
            "margin 0: raise at the ceiling"
        );
        assert_eq!(take(&s, 0), Take::Exhausted { wants_raise: false });
        assert_eq!(s.current(0), Some(103));
        assert_eq!(s.current(2), Some(100));
    }

    #[test]
    fn raise_ahead_is_edge_triggered_and_targets_one_step_above_high_water() {
        let s = SectionSlot::new(2, 2, &grant(7, 0, 10));
        let takes: Vec<_> = (0..9).map(|_| take(&s, 0)).collect();
        let wants: Vec<_> = takes
            .iter()
            .map(|t| matches!(t, Take::GotWantsRaise(_)))
            .collect();
        // ceiling 10, margin 2: the first number with 10 - v <= 2 is 8.
        assert_eq!(wants.iter().filter(|w| **w).count(), 1);
        assert_eq!(takes[7], Take::GotWantsRaise(8));
        assert_eq!(s.raise_target(10), Some((7, 19)));
        assert!(s.apply_raise(7, 19));
        assert_eq!(s.state().unwrap().ceiling, 19);
        assert!(!s.state().unwrap().raise_pending);
    }

    #[test]
    fn unneeded_raise_clears_the_flag() {
        let s = SectionSlot::new(1, 5, &grant(1, 0, 10));
        assert_eq!(s.raise_target(10), None, "nothing claimed");
        assert!(s.claim_raise());
        // high water 0 + step 10 is not above the ceiling 10.
        assert_eq!(s.raise_target(10), None);
        assert!(!s.state().unwrap().raise_pending);
    }

    #[test]
    fn epoch_guard() {
        let s = SectionSlot::new(1, 0, &grant(5, 0, 10));
        assert!(!s.apply_raise(4, 50), "older epoch");
        assert!(!s.apply_raise(6, 50), "newer epoch");
        assert!(!s.retire(Some(4)));
        assert!(s.retire(Some(5)));
        assert_eq!(take(&s, 0), Take::NotServing);
        assert_eq!(s.current(0), None);
        assert!(!s.apply_raise(5, 50), "a late reply must not resurrect");
        assert_eq!(take(&s, 0), Take::NotServing);
        assert!(!s.install(&grant(5, 10, 20)), "replayed grant");
        assert!(s.install(&grant(6, 10, 20)));
        assert_eq!(take(&s, 0), Take::Got(11));
    }

    #[test]
    fn reinstall_never_lowers_a_cell() {
        let s = SectionSlot::new(2, 0, &grant(1, 0, 100));
        for _ in 0..50 {
            let _ = take(&s, 0);
        }
        // A (buggy) grant below what was handed out must not move cells back.
        assert!(s.install(&grant(2, 10, 100)));
        assert_eq!(take(&s, 0), Take::Got(51));
        assert_eq!(take(&s, 1), Take::Got(11));
        assert_eq!(s.state().unwrap().high_water, 51);
    }

    #[test]
    fn exhaustion_lifts_a_lagging_high_water_mark() {
        let s = SectionSlot::new(1, 0, &grant(1, 0, 2));
        let _ = take(&s, 0);
        let _ = take(&s, 0);
        s.ctl.high_water.0.store(0, Relaxed); // as if the update were still racing
        assert_eq!(take(&s, 0), Take::Exhausted { wants_raise: false });
        assert_eq!(s.state().unwrap().high_water, 2);
    }
}
