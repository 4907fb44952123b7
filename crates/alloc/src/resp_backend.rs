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
use seqsvr_resp::{Backend, BackendError, IdParts};

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

    /// Not all-or-nothing, as the trait says: the numbers served before a
    /// refusal stay in `out`, and the error is the next uid's, so that a
    /// pipeline's `INCR`s are each answered as if sent alone. This
    /// AllocSvr's own uids are served from memory straight into `out`;
    /// the rest go to their owners as the front's batch does. A forwarded
    /// part that fails fails as a whole (its numbers forgotten, never
    /// reused: promise 1), so then the uids from the first one not served
    /// here are asked one at a time, and the error returned is exactly
    /// the uid's it names.
    async fn next_batch<'a>(
        &'a self,
        uids: &'a [u64],
        out: &'a mut Vec<u64>,
    ) -> Result<(), BackendError> {
        let start = out.len();
        let local = match self.front.local_next_batch(uids, out).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_elsewhere() => e,
            Err(e) => return Err(self.error(e)),
        };
        let done = out.len() - start;
        let served = out[start..].to_vec();
        match self.front.forward_batch(uids, served, local).await {
            Ok(seqs) => {
                out.truncate(start);
                out.extend_from_slice(&seqs);
                Ok(())
            }
            Err(_) => {
                for &uid in &uids[done..] {
                    out.push(self.front.next(uid).await.map_err(|e| self.error(e))?);
                }
                Ok(())
            }
        }
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

    async fn next_ids(&self, ns: &str, n: u64) -> Result<Vec<u64>, BackendError> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        self.front.next_ids(ns, n).await.map_err(|e| self.error(e))
    }

    async fn decode_id(&self, ns: &str, id: u64) -> Result<IdParts, BackendError> {
        let (d, _) = self
            .front
            .decode_id(ns, id)
            .await
            .map_err(|e| self.error(e))?;
        Ok(IdParts {
            namespace: ns.into(),
            unix_ms: d.unix_ms,
            worker: d.worker,
            sequence: d.seq,
        })
    }
}
