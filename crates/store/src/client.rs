//! A client for the store API, used by AllocSvrs, `seqctl` and tests.
//!
//! It knows every replica's address and talks to one at a time; any replica
//! forwards to the leader, so the client only moves on to the next address
//! when the current one is unreachable or reports no leader, and retries
//! with backoff until its deadline.
//!
//! Retries can repeat a write whose first attempt landed but whose reply was
//! lost. That is safe: a repeated raise is refused with `NotAbove` carrying
//! the current ceiling (the caller checks it reached its target), and a
//! repeated take-over only bumps the epoch and ceiling once more.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use seqsvr_core::RouteTable;
use seqsvr_proto::store_client::StoreClient as Grpc;
use seqsvr_proto::{self as pb};
use tonic::transport::Channel;

use crate::error::{Error, Result};
use crate::network::channel;
use crate::types::Grant;

/// Default time a call may take, retries included.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// A store client with failover across replicas.
#[derive(Clone)]
pub struct StoreClient {
    /// One gRPC client per replica address.
    replicas: Vec<(String, Grpc<Channel>)>,
    /// Index of the replica tried first (the last one that answered).
    preferred: std::sync::Arc<AtomicUsize>,
    /// Deadline for one call including retries.
    deadline: Duration,
}

impl std::fmt::Debug for StoreClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<&str> = self.replicas.iter().map(|(a, _)| a.as_str()).collect();
        f.debug_struct("StoreClient")
            .field("replicas", &addrs)
            .finish()
    }
}

/// A section as the store reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionInfo {
    /// The section.
    pub section: u32,
    /// Its ceiling.
    pub max_seq: u64,
    /// Its epoch.
    pub epoch: u64,
    /// Its owner, if any.
    pub owner: Option<String>,
}

impl StoreClient {
    /// A client for the replicas at `addrs` (`host:port`).
    pub fn new(addrs: &[String]) -> Result<Self> {
        if addrs.is_empty() {
            return Err(Error::Config("no store addresses".into()));
        }
        let replicas = addrs
            .iter()
            .map(|a| {
                let ch = channel(a, Duration::from_millis(500))
                    .map_err(|e| Error::Config(format!("bad store address {a}: {e}")))?;
                Ok((a.clone(), Grpc::new(ch)))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            replicas,
            preferred: Default::default(),
            deadline: DEFAULT_DEADLINE,
        })
    }

    /// The same client with another per-call deadline.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Calls `f` on replicas until one answers or the deadline passes.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: Fn(Grpc<Channel>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let start = Instant::now();
        let n = self.replicas.len();
        let mut backoff = Duration::from_millis(20);
        let mut attempt = 0usize;
        loop {
            let i = (self.preferred.load(Ordering::Relaxed) + attempt) % n;
            let left = self.deadline.saturating_sub(start.elapsed());
            let call = tokio::time::timeout(
                left.min(Duration::from_secs(5)),
                f(self.replicas[i].1.clone()),
            );
            let err = match call.await {
                Ok(Ok(resp)) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(resp.into_inner());
                }
                Ok(Err(status)) => Error::from_status(&status),
                Err(_) => Error::NoLeader(format!("{} timed out", self.replicas[i].0)),
            };
            if !err.is_retryable() || start.elapsed() >= self.deadline {
                return Err(err);
            }
            attempt += 1;
            if attempt.is_multiple_of(n) {
                tokio::time::sleep(backoff.min(self.deadline.saturating_sub(start.elapsed())))
                    .await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }

    /// [`call`](Self::call) with a request cloned for every attempt.
    async fn call_with<Req, T, F, Fut>(&self, req: Req, f: F) -> Result<T>
    where
        Req: Clone,
        F: Fn(Grpc<Channel>, Req) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call(|c| f(c, req.clone())).await
    }

    /// Routes sections `first..first+count` to `alloc`; returns the route version.
    pub async fn assign(&self, alloc: &str, first: u32, count: u32) -> Result<u64> {
        let req = pb::AssignRequest {
            alloc_id: alloc.to_string(),
            first_section: first,
            count,
        };
        let r = self
            .call_with(req, |mut c, r| async move { c.assign(r).await })
            .await?;
        Ok(r.route_version)
    }

    /// Takes over sections `first..first+count` for `alloc`.
    pub async fn take_over(
        &self,
        alloc: &str,
        first: u32,
        count: u32,
    ) -> Result<(Vec<Grant>, u64)> {
        let req = pb::TakeOverRequest {
            alloc_id: alloc.to_string(),
            first_section: first,
            count,
        };
        let r = self
            .call_with(req, |mut c, r| async move { c.take_over(r).await })
            .await?;
        Ok((r.grants.iter().map(grant_of).collect(), r.route_version))
    }

    /// Renews `alloc`'s lease; the reply lists the sections it may serve.
    pub async fn renew(&self, alloc: &str) -> Result<pb::RenewReply> {
        let req = pb::RenewRequest {
            alloc_id: alloc.to_string(),
        };
        self.call_with(req, |mut c, r| async move { c.renew(r).await })
            .await
    }

    /// Hands sections `first..first+count` from `from` (which stopped serving
    /// them) to `to`; returns `to`'s grants.
    pub async fn handoff(
        &self,
        from: &str,
        to: &str,
        first: u32,
        count: u32,
    ) -> Result<Vec<Grant>> {
        let req = pb::HandoffRequest {
            from_alloc: from.to_string(),
            to_alloc: to.to_string(),
            first_section: first,
            count,
        };
        let r = self
            .call_with(req, |mut c, r| async move { c.handoff(r).await })
            .await?;
        Ok(r.grants.iter().map(grant_of).collect())
    }

    /// Marks `alloc` as draining (or not).
    pub async fn set_draining(&self, alloc: &str, draining: bool) -> Result<()> {
        let req = pb::SetDrainingRequest {
            alloc_id: alloc.to_string(),
            draining,
        };
        self.call_with(req, |mut c, r| async move { c.set_draining(r).await })
            .await?;
        Ok(())
    }

    /// The leader's status (with the arbiter's lease view), if a leader answers.
    pub async fn leader_status(&self) -> Option<pb::StoreStatus> {
        self.status_all()
            .await
            .into_iter()
            .filter_map(|(_, s)| s.ok())
            .find(|s| s.state == "Leader")
    }

    /// Raises `section`'s ceiling to `to` under `epoch`; returns the ceiling.
    pub async fn raise(&self, section: u32, epoch: u64, to: u64) -> Result<u64> {
        let req = pb::RaiseRequest { section, epoch, to };
        let r = self.call(|mut c| async move { c.raise(req).await }).await?;
        Ok(r.max_seq)
    }

    /// Reads sections `first..first+count` (linearizable).
    pub async fn read_sections(&self, first: u32, count: u32) -> Result<Vec<SectionInfo>> {
        let req = pb::ReadSectionsRequest {
            first_section: first,
            count,
        };
        let r = self
            .call(|mut c| async move { c.read_sections(req).await })
            .await?;
        Ok(r.sections
            .into_iter()
            .map(|s| SectionInfo {
                section: s.section,
                max_seq: s.max_seq,
                epoch: s.epoch,
                owner: (!s.owner.is_empty()).then_some(s.owner),
            })
            .collect())
    }

    /// Reads the route table (linearizable).
    pub async fn routes(&self) -> Result<RouteTable> {
        let r = self
            .call(|mut c| async move { c.get_routes(pb::GetRoutesRequest {}).await })
            .await?;
        route_from_pb(&r)
    }

    /// Records `alloc`'s client-facing address; returns the route version.
    pub async fn register_alloc(&self, alloc: &str, addr: &str) -> Result<u64> {
        let req = pb::RegisterAllocRequest {
            alloc_id: alloc.to_string(),
            addr: addr.to_string(),
        };
        let r = self
            .call_with(req, |mut c, r| async move { c.register_alloc(r).await })
            .await?;
        Ok(r.route_version)
    }

    /// Every replica's own status (or why it could not be had), in order.
    pub async fn status_all(&self) -> Vec<(String, Result<pb::StoreStatus>)> {
        let calls = self.replicas.iter().map(|(addr, c)| {
            let mut c = c.clone();
            async move {
                let call =
                    tokio::time::timeout(Duration::from_secs(2), c.status(pb::StatusRequest {}));
                let r = match call.await {
                    Ok(Ok(s)) => Ok(s.into_inner()),
                    Ok(Err(s)) => Err(Error::from_status(&s)),
                    Err(_) => Err(Error::NoLeader("timed out".into())),
                };
                (addr.clone(), r)
            }
        });
        futures::future::join_all(calls).await
    }
}

fn grant_of(g: &pb::SectionGrant) -> Grant {
    Grant {
        section: g.section,
        epoch: g.epoch,
        prev_ceiling: g.prev_ceiling,
        max_seq: g.max_seq,
    }
}

/// Converts a protobuf route table to the core type, validating it.
pub fn route_from_pb(r: &pb::RouteTable) -> Result<RouteTable> {
    seqsvr_proto::convert::route_from_pb(r).map_err(Error::Internal)
}
