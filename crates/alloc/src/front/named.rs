//! Named counters through the front: every door's `next(name, n)` and
//! `current(name)` (`docs/counters.md`). A name is answered from this
//! AllocSvr's name table when it serves the name's position, else
//! forwarded to the position's owner *with the name*, so the owner keeps
//! one counter per name whichever door was called.

use seqsvr_core::name_key;

use super::{from_client, Front};
use crate::error::{AllocError, CallError};

impl Front {
    /// `count` numbers of the named counter `name` (0 or 1: one), the last
    /// returned: the caller owns `(v − count, v]`.
    pub async fn next_name(&self, name: &[u8], count: u64) -> Result<u64, CallError> {
        match self.local_next_name(name, count).await {
            Err(e) if e.is_elsewhere() => self.forward_next_name(name, count, e).await,
            r => r,
        }
    }

    /// The last number handed out for the named counter `name`.
    pub async fn current_name(&self, name: &[u8]) -> Result<u64, CallError> {
        match self.local_current_name(name) {
            Err(e) if e.is_elsewhere() => self.forward_current_name(name, e).await,
            r => r,
        }
    }

    /// [`next_name`](Self::next_name) from this AllocSvr's memory only, or
    /// its typed refusal. A bad name or count is refused before anything
    /// is handed out.
    pub async fn local_next_name(&self, name: &[u8], count: u64) -> Result<u64, CallError> {
        let s = &self.shared;
        let count = count.max(1);
        let max = s.alloc.max_count();
        if count > max {
            return Err(AllocError::InvalidCount { count, max }.into());
        }
        name_key(name).map_err(AllocError::from)?;
        if !s.admitted() {
            return Err(s.not_admitted());
        }
        let seq = match s.alloc.next_name_n(name, count) {
            Ok(seq) => seq,
            Err(AllocError::Exhausted { .. }) => {
                s.alloc
                    .next_name_n_waiting(name, count, self.wait_deadline())
                    .await?
            }
            Err(e) => return Err(e.into()),
        };
        s.metrics.numbers.inc_by(count);
        Ok(seq)
    }

    /// [`current_name`](Self::current_name) from this AllocSvr's memory
    /// only: with a valid lease, for a position served here now.
    pub fn local_current_name(&self, name: &[u8]) -> Result<u64, CallError> {
        let s = &self.shared;
        name_key(name).map_err(AllocError::from)?;
        if !s.admitted() {
            return Err(s.not_admitted());
        }
        Ok(s.alloc.current_name(name)?)
    }

    /// Forwards a `next` of a name this AllocSvr refused with `local` (one
    /// call with the name, never coalesced into a batch of uids).
    pub async fn forward_next_name(
        &self,
        name: &[u8],
        count: u64,
        local: CallError,
    ) -> Result<u64, CallError> {
        let key = name_key(name).map_err(AllocError::from)?;
        self.forward_one("next", key, local, |f, _| async move {
            let retry_ms = f.cfg.retry_after_ms;
            (f.client.next_name_n(name, count).await).map_err(|e| from_client(e, key, retry_ms))
        })
        .await
    }

    /// Forwards a `current` of a name this AllocSvr refused with `local`.
    pub async fn forward_current_name(
        &self,
        name: &[u8],
        local: CallError,
    ) -> Result<u64, CallError> {
        let key = name_key(name).map_err(AllocError::from)?;
        self.forward_one("current", key, local, |f, _| async move {
            let retry_ms = f.cfg.retry_after_ms;
            (f.client.current_name(name).await).map_err(|e| from_client(e, key, retry_ms))
        })
        .await
    }
}
