//! Time-ordered ids through the client (docs/ids.md): any AllocSvr serves
//! any namespace, so a call goes to one AllocSvr the route tables name
//! (or a seed), and a retryable refusal (clock behind, ceiling not raised
//! yet, no worker id held, lease expired) or a transport failure moves it
//! to the next one, within the deadline.

use std::time::Duration;

use seqsvr_proto::{self as pb, detail_of, ErrorKind};
use tokio::time::Instant;

use crate::client::{request, SeqClient};
use crate::error::{Error, Result};

/// An id taken apart by its namespace's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedId {
    /// The namespace.
    pub namespace: String,
    /// Ticks since the layout's epoch.
    pub tick: u64,
    /// The tick's start, Unix ms.
    pub unix_ms: u64,
    /// The worker id that issued it.
    pub worker: u64,
    /// Its sequence within the tick.
    pub sequence: u64,
}

/// What one attempt at one AllocSvr ended with.
enum Tried<T> {
    Done(T),
    /// Try the next AllocSvr after this long (0: at once).
    Next(Error, Duration),
    Fail(Error),
}

fn judge<T>(r: std::result::Result<T, tonic::Status>) -> Tried<T> {
    let st = match r {
        Ok(v) => return Tried::Done(v),
        Err(st) => st,
    };
    let d = detail_of(&st);
    let kind = d
        .as_ref()
        .and_then(|d| ErrorKind::try_from(d.kind).ok())
        .unwrap_or(ErrorKind::Unspecified);
    let message = st.message().to_string();
    match d {
        Some(d) if d.retryable => Tried::Next(
            Error::Unavailable { kind, message },
            Duration::from_millis(d.retry_after_ms),
        ),
        None if matches!(
            st.code(),
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::DeadlineExceeded
        ) =>
        {
            Tried::Next(Error::Transport(message), Duration::ZERO)
        }
        _ => match st.code() {
            tonic::Code::InvalidArgument | tonic::Code::NotFound => {
                Tried::Fail(Error::InvalidArgument(message))
            }
            _ => Tried::Fail(Error::Internal(message)),
        },
    }
}

impl SeqClient {
    /// `count` time-ordered ids of namespace `ns` (0 or 1: one), strictly
    /// increasing; fewer only when the server reached a limit after the
    /// first. Unique across the cluster (docs/ids.md).
    pub async fn next_ids(&self, ns: &str, count: u32) -> Result<Vec<u64>> {
        let req = pb::NextIdRequest {
            namespace: ns.into(),
            count,
        };
        self.any_alloc(|mut c, timeout| {
            let req = req.clone();
            async move {
                c.next_id(request(req, timeout))
                    .await
                    .map(|r| r.into_inner().ids)
            }
        })
        .await
    }

    /// One id of namespace `ns`.
    pub async fn next_id(&self, ns: &str) -> Result<u64> {
        let ids = self.next_ids(ns, 1).await?;
        ids.first()
            .copied()
            .ok_or_else(|| Error::Internal("an empty reply to NextId".into()))
    }

    /// Takes `id` of namespace `ns` apart by the namespace's layout.
    pub async fn decode_id(&self, ns: &str, id: u64) -> Result<DecodedId> {
        let req = pb::DecodeIdRequest {
            namespace: ns.into(),
            id,
        };
        let r = self
            .any_alloc(|mut c, timeout| {
                let req = req.clone();
                async move {
                    c.decode_id(request(req, timeout))
                        .await
                        .map(|r| r.into_inner())
                }
            })
            .await?;
        Ok(DecodedId {
            namespace: r.namespace,
            tick: r.tick,
            unix_ms: r.unix_ms,
            worker: r.worker,
            sequence: r.sequence,
        })
    }

    /// The AllocSvrs to ask, in order: those the route tables name, then
    /// the seeds.
    fn alloc_addrs(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in self.tables() {
            for e in t.entries {
                if !out.contains(&e.addr) {
                    out.push(e.addr);
                }
            }
        }
        for s in &self.inner.seeds {
            if !out.contains(s) {
                out.push(s.clone());
            }
        }
        out
    }

    /// Runs `call` at one AllocSvr after another until one answers, one
    /// refuses for good, or the deadline passes.
    async fn any_alloc<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: Fn(pb::alloc_client::AllocClient<tonic::transport::Channel>, Duration) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, tonic::Status>>,
    {
        let o = &self.inner.options;
        let deadline = Instant::now() + o.deadline;
        let mut last = Error::DeadlineExceeded {
            last: "no AllocSvr known".into(),
        };
        let mut round = 0u32;
        loop {
            let addrs = self.alloc_addrs();
            let start = round as usize;
            round += 1;
            let mut pause = Duration::ZERO;
            for i in 0..addrs.len() {
                let addr = &addrs[(start + i) % addrs.len()];
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(last);
                }
                let timeout = o.attempt_timeout.min(left);
                let c = match self.alloc(addr) {
                    Ok(c) => c,
                    Err(e) => {
                        last = Error::Transport(e);
                        continue;
                    }
                };
                let r = match tokio::time::timeout(timeout, call(c, timeout)).await {
                    Ok(r) => r,
                    Err(_) => Err(tonic::Status::unavailable(format!(
                        "{addr}: no answer within {timeout:?}"
                    ))),
                };
                match judge(r) {
                    Tried::Done(v) => return Ok(v),
                    Tried::Fail(e) => return Err(e),
                    Tried::Next(e, after) => {
                        last = e;
                        pause = pause.max(after);
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(last);
            }
            let pause = pause.max(Duration::from_millis(10)).min(left);
            tokio::time::sleep(pause).await;
        }
    }
}
