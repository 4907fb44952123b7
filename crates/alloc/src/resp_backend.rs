//! The Redis-protocol door's [`Backend`]: the [`Front`] every door
//! answers through — this AllocSvr's own uids from memory, the others by
//! forwarding to their owner (`docs/architecture/forwarding.md`) — with
//! the client plane's errors (mapped once, by [`Shared::error_detail`],
//! and read back as the kind, message and retry delay every door
//! reports).
//!
//! [`Shared::error_detail`]: crate::shared::Shared::error_detail

use std::sync::Arc;
use std::time::Duration;

use seqsvr_core::MAX_BATCH;
use seqsvr_proto::{detail_of, ErrorKind};
use seqsvr_resp::{Backend, BackendError};

use crate::error::CallError;
use crate::front::Front;

/// The front of this AllocSvr, as the door sees it.
#[derive(Debug, Clone)]
pub struct AllocBackend {
    /// Answers every uid of the cluster.
    pub front: Arc<Front>,
}

impl AllocBackend {
    /// The door's error for `e`: what the client plane would answer.
    fn error(&self, e: CallError) -> BackendError {
        let st = self.front.shared().status(&e);
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
}

impl Backend for AllocBackend {
    async fn next_n(&self, uid: u64, n: u64) -> Result<u64, BackendError> {
        let r = if n == 1 {
            self.front.next(uid).await
        } else {
            self.front.next_n(uid, n).await
        };
        r.map_err(|e| self.error(e))
    }

    /// Not all-or-nothing locally (numbers served before a refusal are
    /// in `out`); a batch that needed its owners answers all or nothing,
    /// the numbers of a failed one forgotten, never reused (promise 1).
    async fn next_batch<'a>(
        &'a self,
        uids: &'a [u64],
        out: &'a mut Vec<u64>,
    ) -> Result<(), BackendError> {
        let seqs = self
            .front
            .next_batch(uids)
            .await
            .map_err(|e| self.error(e))?;
        out.extend_from_slice(&seqs);
        Ok(())
    }

    /// Linearizable as `Current` is: from memory only with a valid lease
    /// for a section served here now, else by its owner.
    async fn current(&self, uid: u64) -> Result<u64, BackendError> {
        self.front.current(uid).await.map_err(|e| self.error(e))
    }

    async fn next_name_n<'a>(&'a self, name: &'a [u8], n: u64) -> Result<u64, BackendError> {
        (self.front.next_name(name, n).await).map_err(|e| self.error(e))
    }

    async fn current_name<'a>(&'a self, name: &'a [u8]) -> Result<u64, BackendError> {
        (self.front.current_name(name).await).map_err(|e| self.error(e))
    }

    fn max_count(&self) -> u64 {
        self.front.shared().alloc.max_count()
    }

    fn max_batch(&self) -> usize {
        MAX_BATCH
    }
}
