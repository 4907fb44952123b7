//! Reservations: `n` numbers of one uid in one step (`INCRBY`, a `Next`
//! with a count), on the same cell and compare-and-swap as `next`.

use seqsvr_core::Uid;
use tokio::time::Instant;

use super::Allocator;
use crate::error::AllocError;
use crate::error::Result;

/// The most numbers one reservation (`next_n`, `INCRBY`, a `Next` with a
/// count) takes: enough for any message fan-out to one uid, small beside
/// the default step (10,000), and never more than the set's step
/// ([`Allocator::max_count`]).
pub const MAX_COUNT: u64 = 1000;

impl Allocator {
    /// Reserves `n` numbers of `uid` in one step and returns the last: the
    /// caller owns `(v − n, v]`, all strictly above every number handed
    /// out for the uid before and below every one handed out after
    /// (promise 1), never above a durable ceiling (promise 2). `n` must be
    /// in `1..=`[`max_count`](Self::max_count); outside it the call is
    /// refused and changes nothing.
    ///
    /// `Exhausted` (the ceiling leaves less than `n`; a raise is queued)
    /// is retryable, as for [`next`](Self::next).
    pub fn next_n(&self, uid: Uid, n: u64) -> Result<u64> {
        if n == 0 || n > self.max_count() {
            return Err(AllocError::InvalidCount {
                count: n,
                max: self.max_count(),
            });
        }
        let (slot, section, idx) = self.locate(uid)?;
        self.serve_n(slot, section, idx, n, &crossbeam_epoch::pin())
    }

    /// The most numbers one [`next_n`](Self::next_n) reserves:
    /// [`MAX_COUNT`], and never more than the smallest step (a raise adds
    /// one step above the highest number handed out, so a larger count
    /// could wait for ever).
    pub fn max_count(&self) -> u64 {
        MAX_COUNT.min(self.steps.base())
    }

    /// Like [`next_n`](Self::next_n), but when the section is exhausted
    /// waits for its raise (up to `deadline`) and retries.
    pub async fn next_n_waiting(&self, uid: Uid, n: u64, deadline: Instant) -> Result<u64> {
        self.retry_exhausted(deadline, || self.next_n(uid, n)).await
    }
}
