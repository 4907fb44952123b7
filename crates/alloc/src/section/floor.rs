//! Room above a floor an operator just put in force (`docs/counters.md`,
//! A far floor is served at once).
//!
//! A declared counter's floor may lie far above its section's ceiling (an
//! import from Leaf or Redis); the store lifts the ceiling to the floor in
//! the same fenced write, but the name's first number is above the floor,
//! so serving it needs a raise. Asking that raise as the floor is put in
//! force, rather than when the first call finds the section exhausted,
//! lets the first call be served from memory.

use std::sync::atomic::Ordering::{AcqRel, Acquire};

use crossbeam_epoch::pin;

use super::{SectionSlot, NOT_SERVING};

impl SectionSlot {
    /// Whether the ceiling here is above `floor` (`Some(true)`), or a raise
    /// towards it is asked (`Some(false)`: queued now through
    /// `queue_raise`, or in flight already); `None` if not served.
    ///
    /// The raise targets one step above the high-water mark, which is
    /// moved up to the floor first: every number up to the floor is behind
    /// the name already, and a raise of one step from the floor is what the
    /// store allows above the ceiling the floor's write lifted (promise 4).
    /// The ceiling itself moves only when the raise lands, to the value the
    /// store made durable (promise 1): nothing here is served above a
    /// ceiling it did not acknowledge.
    pub(crate) fn want_above(&self, floor: u64, queue_raise: impl FnOnce()) -> Option<bool> {
        let guard = pin();
        let block = self.block(&guard)?;
        let ceiling = block.ceiling.load(Acquire);
        if ceiling == NOT_SERVING {
            return None;
        }
        if ceiling > floor {
            return Some(true);
        }
        block.high_water.0.fetch_max(floor, AcqRel);
        if block.claim_raise() {
            queue_raise();
        }
        Some(false)
    }
}
