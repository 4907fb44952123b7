//! What the door serves from: a [`Backend`] hands out and reads sequence
//! numbers. The AllocSvr implements it over its allocator; tests over
//! anything. The door has no numbers of its own (`docs/architecture/resp.md`).

use std::future::Future;
use std::time::Duration;

use seqsvr_proto::ErrorKind;

/// A typed error from the backend: what any door reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    /// The kind, as every door and the gRPC details name it.
    pub kind: ErrorKind,
    /// What happened, in words.
    pub message: String,
    /// Whether the same call may succeed later.
    pub retryable: bool,
    /// How long to wait before retrying, if the backend knows.
    pub retry_after: Option<Duration>,
}

/// Sequence numbers, as the door needs them. Every call answers what the
/// client plane's call of the same name answers (promise 1 holds for
/// every door: `docs/architecture/promises.md`).
pub trait Backend: Send + Sync + 'static {
    /// Reserves `n` (1..=[`max_count`](Self::max_count)) numbers of `uid`
    /// in one step and returns the last: the caller owns `(v − n, v]`.
    fn next_n(&self, uid: u64, n: u64) -> impl Future<Output = Result<u64, BackendError>> + Send;

    /// One number per entry of `uids`, in order, appended to `out`. Not
    /// all-or-nothing: on an error the numbers appended (one each for the
    /// first `out.len()` uids since the call) were handed out, and the
    /// error is the next uid's.
    fn next_batch<'a>(
        &'a self,
        uids: &'a [u64],
        out: &'a mut Vec<u64>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send + 'a;

    /// The uid's current value: at or above every number handed out for
    /// it, below the next. Never a mutation.
    fn current(&self, uid: u64) -> impl Future<Output = Result<u64, BackendError>> + Send;

    /// Reserves `n` numbers of the named counter `name` (a key the uid
    /// mapping does not claim, checked as a name), the last returned; a
    /// counter of its own, whatever its position (`docs/counters.md`).
    fn next_name_n<'a>(
        &'a self,
        name: &'a [u8],
        n: u64,
    ) -> impl Future<Output = Result<u64, BackendError>> + Send + 'a;

    /// The named counter's current value, as [`current`](Self::current).
    fn current_name<'a>(
        &'a self,
        name: &'a [u8],
    ) -> impl Future<Output = Result<u64, BackendError>> + Send + 'a;

    /// The most numbers one `next_n` reserves.
    fn max_count(&self) -> u64;

    /// The most uids one `next_batch` takes.
    fn max_batch(&self) -> usize;

    /// `n` time-ordered ids of namespace `ns`, strictly increasing
    /// (docs/ids.md): what `Alloc.NextId` answers. A backend without ids
    /// refuses (`INVALID_REQUEST`).
    fn next_ids(
        &self,
        ns: &str,
        n: u64,
    ) -> impl Future<Output = Result<Vec<u64>, BackendError>> + Send {
        let _ = (ns, n);
        std::future::ready(Err(no_ids()))
    }

    /// Id `id` of namespace `ns` taken apart: what `Alloc.DecodeId`
    /// answers.
    fn decode_id(
        &self,
        ns: &str,
        id: u64,
    ) -> impl Future<Output = Result<IdParts, BackendError>> + Send {
        let _ = (ns, id);
        std::future::ready(Err(no_ids()))
    }
}

/// An id taken apart by its namespace's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdParts {
    /// The namespace.
    pub namespace: String,
    /// The tick's start, Unix ms.
    pub unix_ms: u64,
    /// The worker id that issued it.
    pub worker: u64,
    /// Its sequence within the tick.
    pub sequence: u64,
}

fn no_ids() -> BackendError {
    BackendError {
        kind: ErrorKind::InvalidRequest,
        message: "time-ordered ids are not served here".into(),
        retryable: false,
        retry_after: None,
    }
}
