//! The Redis-protocol door's [`Backend`]: this AllocSvr's allocator,
//! answering exactly as the client plane's `Next`, `NextBatch` and
//! `Current` do (`service.rs`): the same admission check (lease, fence),
//! the same wait on an exhausted section up to `wait_ms`, the same
//! errors (mapped once, by [`Shared::status`], and read back as the kind,
//! message and retry delay every door reports).

use std::sync::Arc;
use std::time::Duration;

use seqsvr_core::MAX_BATCH;
use seqsvr_proto::{detail_of, ErrorKind};
use seqsvr_resp::{Backend, BackendError};
use tokio::time::Instant;

use crate::error::{AllocError, CallError};
use crate::shared::Shared;

/// The allocator of this AllocSvr, as the door sees it.
#[derive(Debug, Clone)]
pub struct AllocBackend {
    /// State shared with the node.
    pub shared: Arc<Shared>,
}

impl AllocBackend {
    /// The door's error for `e`: what the client plane would answer.
    fn error(&self, e: CallError) -> BackendError {
        let st = self.shared.status(&e);
        let d = detail_of(&st).unwrap_or_default();
        let kind = ErrorKind::try_from(d.kind).unwrap_or(ErrorKind::Internal);
        let mut message = st.message().to_string();
        if !d.owner_addr.is_empty() {
            message.push_str(&format!(
                "; owner {} at {} (route version {})",
                d.owner_alloc, d.owner_addr, d.route_version
            ));
        }
        BackendError {
            kind,
            message,
            retryable: d.retryable,
            retry_after: (d.retry_after_ms > 0).then(|| Duration::from_millis(d.retry_after_ms)),
        }
    }

    fn admit(&self) -> Result<(), BackendError> {
        self.shared.admit().map_err(|e| self.error(e))
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.shared.wait
    }
}

impl Backend for AllocBackend {
    async fn next_n(&self, uid: u64, n: u64) -> Result<u64, BackendError> {
        self.admit()?;
        let s = &self.shared;
        let first = if n == 1 {
            s.alloc.next(uid)
        } else {
            s.alloc.next_n(uid, n)
        };
        let seq = match first {
            Ok(v) => v,
            Err(AllocError::Exhausted { .. }) => s
                .alloc
                .next_n_waiting(uid, n, self.deadline())
                .await
                .map_err(|e| self.error(e.into()))?,
            Err(e) => return Err(self.error(e.into())),
        };
        s.metrics.numbers.inc_by(n);
        Ok(seq)
    }

    async fn next_batch<'a>(
        &'a self,
        uids: &'a [u64],
        out: &'a mut Vec<u64>,
    ) -> Result<(), BackendError> {
        if uids.len() > MAX_BATCH {
            return Err(self.error(CallError::Invalid(format!(
                "a batch holds 1..={MAX_BATCH} uids, not {}",
                uids.len()
            ))));
        }
        self.admit()?;
        let s = &self.shared;
        let start = out.len();
        let r = match s.alloc.next_batch(uids, out) {
            Err(AllocError::Exhausted { .. }) => {
                let done = out.len() - start;
                s.alloc
                    .next_batch_waiting(&uids[done..], out, self.deadline())
                    .await
            }
            other => other,
        };
        s.metrics.numbers.inc_by((out.len() - start) as u64);
        r.map_err(|e| self.error(e.into()))
    }

    /// Linearizable as `Current` is: only with a valid lease, only for a
    /// section served here now.
    async fn current(&self, uid: u64) -> Result<u64, BackendError> {
        self.admit()?;
        self.shared
            .alloc
            .current(uid)
            .map_err(|e| self.error(e.into()))
    }

    fn max_count(&self) -> u64 {
        self.shared.alloc.max_count()
    }

    fn max_batch(&self) -> usize {
        MAX_BATCH
    }
}
