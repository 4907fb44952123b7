//! Clients of the store API, one per plane, over one failover core.
//!
//! [`Replicas`] knows every replica's address and talks to one at a time,
//! starting with the one that last answered; any replica forwards peer and
//! read calls to the leader, so callers never handle "not leader"
//! themselves. A replica that does not answer within the *attempt* time
//! (a fraction of the caller's deadline) is not waited for: the call is
//! also sent to the next replica (hedged) and the first answer wins. That
//! is what keeps a paused or slow replica — gray, not dead — from costing
//! an AllocSvr its lease while a majority answers (promise 3 stays cheap).
//!
//! Retries and hedges can repeat a write. Every write is safe to repeat:
//! a repeated raise is refused with `NotAbove` carrying the current
//! ceiling; a repeated take-over returns the grant the first one made
//! (the caller tells the store the newest epoch it installed); handoffs
//! and assigns are conditional on the epoch, so a repeat is refused.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use seqsvr_core::{Epoch, Grant, Incarnation, LeaseTerms, RouteTable, SectionId, SectionRecord};
use seqsvr_proto::store_admin_client::StoreAdminClient;
use seqsvr_proto::store_peer_client::StorePeerClient;
use seqsvr_proto::store_read_client::StoreReadClient;
use seqsvr_proto::{self as pb};
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::error::{Error, Result};
use crate::membership::{MembershipChange, DEFAULT_CATCH_UP};
use crate::NodeId;

/// The largest backup a client reads (`AdminClient::backup`): 10^6
/// sections at about 30 bytes each, with room to spare.
pub const MAX_BACKUP: usize = 256 << 20;

/// Default time a call may take, retries included.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
/// Default time one replica gets before the call is also sent to the next.
pub const DEFAULT_ATTEMPT: Duration = Duration::from_millis(300);

/// How to open a channel to a `host:port` (plaintext or TLS): the caller
/// decides, so this crate knows nothing of certificates.
pub type Connector = Arc<dyn Fn(&str) -> std::result::Result<Channel, String> + Send + Sync>;

/// A plaintext connector (dev clusters, loopback tests).
pub fn plaintext() -> Connector {
    connector(None)
}

/// A connector with `tls` (server verified against the CA, own certificate
/// presented), or plaintext without. Either way the channel is dialed by
/// `seqsvr_net::client::channel`, so a store link gets the same transport
/// settings as every other seqsvr client.
pub fn connector(tls: Option<seqsvr_net::ClientTls>) -> Connector {
    Arc::new(move |addr: &str| {
        seqsvr_net::client::channel(addr, tls.as_ref(), Duration::from_millis(500))
            .map_err(|e| e.to_string())
    })
}

/// The failover core: one gRPC client per replica.
pub struct Replicas<C> {
    /// One client per replica address.
    replicas: Arc<Vec<(String, C)>>,
    /// Index of the replica tried first (the last one that answered).
    preferred: Arc<AtomicUsize>,
    /// Time one call may take, retries included.
    deadline: Duration,
    /// Time one replica gets before the call also goes to the next.
    attempt: Duration,
    /// Whether a slow attempt is hedged (kept running while the next
    /// replica is asked) or abandoned.
    hedge: bool,
}

impl<C> Clone for Replicas<C> {
    fn clone(&self) -> Self {
        Self {
            replicas: self.replicas.clone(),
            preferred: self.preferred.clone(),
            deadline: self.deadline,
            attempt: self.attempt,
            hedge: self.hedge,
        }
    }
}

impl<C> std::fmt::Debug for Replicas<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<&str> = self.replicas.iter().map(|(a, _)| a.as_str()).collect();
        f.debug_struct("Replicas")
            .field("replicas", &addrs)
            .finish()
    }
}

impl<C: Clone + Send + 'static> Replicas<C> {
    /// Clients for the replicas at `addrs`, built with `make` over
    /// channels from `connect`.
    pub fn new(addrs: &[String], connect: &Connector, make: impl Fn(Channel) -> C) -> Result<Self> {
        if addrs.is_empty() {
            return Err(Error::Config("no store addresses".into()));
        }
        let replicas = addrs
            .iter()
            .map(|a| {
                let ch =
                    connect(a).map_err(|e| Error::Config(format!("store address {a}: {e}")))?;
                Ok((a.clone(), make(ch)))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            replicas: Arc::new(replicas),
            preferred: Default::default(),
            deadline: DEFAULT_DEADLINE,
            attempt: DEFAULT_ATTEMPT,
            hedge: true,
        })
    }

    /// The replicas' addresses, in order.
    pub fn addrs(&self) -> Vec<String> {
        self.replicas.iter().map(|(a, _)| a.clone()).collect()
    }

    pub(crate) fn with(mut self, deadline: Duration, attempt: Duration, hedge: bool) -> Self {
        self.deadline = deadline;
        self.attempt = attempt.min(deadline);
        self.hedge = hedge;
        self
    }

    /// Calls `f` on replicas until one answers, a definite refusal comes
    /// back, or the deadline passes. A replica silent for the attempt
    /// time is hedged (or abandoned) and the next one asked; a retryable
    /// refusal moves on at once, with a backoff once every replica has been
    /// asked.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: Fn(C) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let deadline = Instant::now() + self.deadline;
        let n = self.replicas.len();
        let first = self.preferred.load(Ordering::Relaxed);
        let mut started = 0usize;
        let mut inflight = FuturesUnordered::new();
        let mut backoff = Duration::from_millis(20);
        let mut last = Error::NoLeader("no replica answered in time".into());
        let mut wait_until: Option<Instant> = None;
        // The replica a NOT_LEADER answer named as the leader, if it is one
        // of ours: asked next (calls in an AllocSvr's name are not
        // forwarded between replicas, so the caller goes to the leader).
        let mut hint: Option<usize> = None;
        let launch = |i: usize| {
            let (addr, c) = &self.replicas[i];
            let call = tokio::time::timeout_at(deadline, f(c.clone()));
            let addr = addr.clone();
            async move { (i, addr, call.await) }
        };
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(last);
            }
            let may_start = wait_until.is_none_or(|t| now >= t);
            if inflight.is_empty() && (may_start || hint.is_some()) {
                wait_until = None;
                match hint.take() {
                    Some(i) => inflight.push(launch(i)),
                    None => {
                        inflight.push(launch((first + started) % n));
                        started += 1;
                    }
                }
            }
            let hedge_at = now + self.attempt;
            tokio::select! {
                Some((i, addr, res)) = inflight.next() => {
                    let err = match res {
                        Ok(Ok(resp)) => {
                            self.preferred.store(i, Ordering::Relaxed);
                            return Ok(resp.into_inner());
                        }
                        Ok(Err(status)) => Error::from_status(&status),
                        Err(_) => Error::NoLeader(format!("{addr} did not answer in time")),
                    };
                    if !err.is_retryable() {
                        return Err(err);
                    }
                    if let Error::NotLeader { leader: Some((_, a)) } = &err {
                        hint = (self.replicas.iter())
                            .position(|(r, _)| r == a)
                            .filter(|&j| j != i);
                    }
                    last = err;
                    if inflight.is_empty() && started.is_multiple_of(n) {
                        wait_until = Some(Instant::now() + backoff);
                        backoff = (backoff * 2).min(Duration::from_millis(500));
                    }
                }
                _ = tokio::time::sleep_until(hedge_at.min(deadline)), if !inflight.is_empty() => {
                    if !self.hedge {
                        inflight.clear();
                    }
                    if inflight.len() < n {
                        inflight.push(launch((first + started) % n));
                        started += 1;
                    }
                }
                _ = tokio::time::sleep_until(wait_until.unwrap_or(deadline).min(deadline)), if inflight.is_empty() => {}
            }
        }
    }

    /// [`call`](Self::call) with a request cloned for every attempt.
    pub async fn call_with<Req, T, F, Fut>(&self, req: Req, f: F) -> Result<T>
    where
        Req: Clone,
        F: Fn(C, Req) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call(|c| f(c, req.clone())).await
    }
}

/// An AllocSvr's advertised addresses, one per plane.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllocAddrs {
    /// Client plane (what clients dial; in the route table).
    pub client: String,
    /// Peer plane (adopts from other AllocSvrs).
    pub peer: String,
    /// Admin plane (operators' handoffs).
    pub admin: String,
}

/// A section as the store reports it: its id and its durable record (the
/// one type the store, its test stores and the simulation keep; converted
/// from the wire here, `seqsvr-proto`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionInfo {
    /// The section.
    pub section: SectionId,
    /// Its record: ceiling, epoch, owner, incarnation, start of the epoch.
    pub record: SectionRecord,
}

impl From<pb::SectionState> for SectionInfo {
    fn from(s: pb::SectionState) -> Self {
        SectionInfo {
            section: s.section,
            record: SectionRecord::from(&s),
        }
    }
}

fn route(r: &pb::RouteTable) -> Result<RouteTable> {
    RouteTable::try_from(r).map_err(|e| Error::Internal(format!("route table from the store: {e}")))
}

/// A generated client of a store plane that serves the reads: the route
/// table, sections, and the replica's own status. The client plane and the
/// peer plane both serve them, with the same requests and replies; what is
/// done with them is written once, in [`PlaneClient`].
pub trait ReadPlane: Clone + Send + 'static {
    /// The generated client over `ch`.
    fn over(ch: Channel) -> Self;
    /// `GetRoutes`.
    fn routes(
        self,
        req: pb::GetRoutesRequest,
    ) -> impl Future<Output = std::result::Result<tonic::Response<pb::RouteTable>, tonic::Status>> + Send;
    /// `ReadSections`.
    fn sections(
        self,
        req: pb::ReadSectionsRequest,
    ) -> impl Future<
        Output = std::result::Result<tonic::Response<pb::ReadSectionsReply>, tonic::Status>,
    > + Send;
    /// `Status` of the replica called (never forwarded).
    fn own_status(
        self,
    ) -> impl Future<Output = std::result::Result<tonic::Response<pb::StoreStatus>, tonic::Status>> + Send;
}

/// Both planes' generated clients have the same read methods; one impl
/// each, from one text.
macro_rules! read_plane {
    ($client:ident) => {
        impl ReadPlane for $client<Channel> {
            fn over(ch: Channel) -> Self {
                $client::new(ch)
            }

            async fn routes(
                mut self,
                req: pb::GetRoutesRequest,
            ) -> std::result::Result<tonic::Response<pb::RouteTable>, tonic::Status> {
                $client::get_routes(&mut self, req).await
            }

            async fn sections(
                mut self,
                req: pb::ReadSectionsRequest,
            ) -> std::result::Result<tonic::Response<pb::ReadSectionsReply>, tonic::Status> {
                $client::read_sections(&mut self, req).await
            }

            async fn own_status(
                mut self,
            ) -> std::result::Result<tonic::Response<pb::StoreStatus>, tonic::Status> {
                $client::status(&mut self, pb::StatusRequest {}).await
            }
        }
    };
}

read_plane!(StoreReadClient);
read_plane!(StorePeerClient);

/// A client of one store plane that serves the reads ([`ReadPlane`]),
/// over the failover core. The reads are here, once for both planes; the
/// peer plane's writes are on [`PeerClient`].
#[derive(Clone, Debug)]
pub struct PlaneClient<C> {
    /// The replicas' listeners of this plane.
    pub replicas: Replicas<C>,
}

/// The client plane: read-only calls anyone may make.
pub type ReadClient = PlaneClient<StoreReadClient<Channel>>;

/// The peer plane as one AllocSvr incarnation uses it: every write names
/// the AllocSvr and its incarnation.
pub type PeerClient = PlaneClient<StorePeerClient<Channel>>;

impl<C: ReadPlane> PlaneClient<C> {
    /// A client of this plane's listeners at `addrs`.
    pub fn new(addrs: &[String], connect: &Connector) -> Result<Self> {
        Ok(Self {
            replicas: Replicas::new(addrs, connect, C::over)?,
        })
    }

    /// The same client with another deadline per call and attempt time per
    /// replica (hedged).
    pub fn with_deadline(mut self, deadline: Duration, attempt: Duration) -> Self {
        self.replicas = self.replicas.with(deadline, attempt, true);
        self
    }

    /// Reads the route table (linearizable).
    pub async fn routes(&self) -> Result<RouteTable> {
        let r = self
            .replicas
            .call(|c| c.routes(pb::GetRoutesRequest {}))
            .await?;
        route(&r)
    }

    /// Reads sections `first..first+count` (linearizable).
    pub async fn read_sections(&self, first: SectionId, count: u32) -> Result<Vec<SectionInfo>> {
        let req = pb::ReadSectionsRequest {
            first_section: first,
            count,
        };
        let r = self.replicas.call_with(req, C::sections).await?;
        Ok(r.sections.into_iter().map(SectionInfo::from).collect())
    }

    /// Every replica's own status (or why it could not be had), in order.
    pub async fn status_all(&self) -> Vec<(String, Result<pb::StoreStatus>)> {
        let calls = self.replicas.replicas.iter().map(|(addr, c)| {
            let call = tokio::time::timeout(Duration::from_secs(2), c.clone().own_status());
            async move {
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

    /// The leader's status, if a leader answers.
    pub async fn leader_status(&self) -> Option<pb::StoreStatus> {
        self.status_all()
            .await
            .into_iter()
            .filter_map(|(_, s)| s.ok())
            .find(|s| s.leads())
    }
}

impl PeerClient {
    /// Registers an AllocSvr incarnation and its addresses.
    pub async fn register_alloc(
        &self,
        alloc: &str,
        incarnation: Incarnation,
        addrs: &AllocAddrs,
    ) -> Result<u64> {
        let req = pb::RegisterAllocRequest {
            alloc_id: alloc.into(),
            addr: addrs.client.clone(),
            peer_addr: addrs.peer.clone(),
            admin_addr: addrs.admin.clone(),
            incarnation,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.register_alloc(r).await })
            .await?;
        Ok(r.route_version)
    }

    /// Renews the lease; the reply lists the sections it may serve.
    pub async fn renew(&self, alloc: &str, incarnation: Incarnation) -> Result<pb::RenewReply> {
        self.renew_since(alloc, incarnation, 0).await
    }

    /// Renews the lease; the reply lists the sections it may serve, unless
    /// they are those of `known_sections_version` (`sections_unchanged`):
    /// a renewal then costs O(changes), not O(sections).
    pub async fn renew_since(
        &self,
        alloc: &str,
        incarnation: Incarnation,
        known_sections_version: u64,
    ) -> Result<pb::RenewReply> {
        let req = pb::RenewRequest {
            alloc_id: alloc.into(),
            incarnation,
            known_sections_version,
        };
        self.replicas
            .call_with(req, |mut c, r| async move { c.renew(r).await })
            .await
    }

    /// Claims sections `first..first+count`; `known[i]` is the newest epoch
    /// this incarnation installed for section `first+i` (0: none).
    pub async fn take_over(
        &self,
        alloc: &str,
        incarnation: Incarnation,
        first: SectionId,
        known: Vec<Epoch>,
    ) -> Result<(Vec<Grant>, u64)> {
        let req = pb::TakeOverRequest {
            alloc_id: alloc.into(),
            incarnation,
            first_section: first,
            count: known.len() as u32,
            known_epochs: known,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.take_over(r).await })
            .await?;
        Ok((r.grants.iter().map(Grant::from).collect(), r.route_version))
    }

    /// Raises `section`'s ceiling to `to` under `epoch`; returns the ceiling.
    pub async fn raise(
        &self,
        alloc: &str,
        incarnation: Incarnation,
        section: SectionId,
        epoch: Epoch,
        to: u64,
    ) -> Result<u64> {
        let req = pb::RaiseRequest {
            alloc_id: alloc.into(),
            incarnation,
            section,
            epoch,
            to,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.raise(r).await })
            .await?;
        Ok(r.max_seq)
    }

    /// Records the planned stop of `alloc`'s `incarnation`, which serves
    /// nothing any more (`StorePeer.Stopped`); returns how many sections
    /// it still owned in the store, now unowned.
    pub async fn stopped(&self, alloc: &str, incarnation: Incarnation) -> Result<u32> {
        let req = pb::StoppedRequest {
            alloc_id: alloc.into(),
            incarnation,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.stopped(r).await })
            .await?;
        Ok(r.released)
    }

    /// Hands `section`, held at `epoch`, to `to`; returns the new owner's
    /// grant and its peer address.
    pub async fn handoff(
        &self,
        from: &str,
        incarnation: Incarnation,
        to: &str,
        section: SectionId,
        epoch: Epoch,
    ) -> Result<(Grant, String)> {
        let req = pb::HandoffRequest {
            from_alloc: from.into(),
            incarnation,
            to_alloc: to.into(),
            section,
            epoch,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.handoff(r).await })
            .await?;
        let g = r
            .grant
            .as_ref()
            .ok_or_else(|| Error::Internal("handoff reply without grant".into()))?;
        Ok((Grant::from(g), r.to_peer_addr))
    }
}

/// The admin plane: operator calls. Not hedged (an operator's write must
/// not race itself); a follower's NO_LEADER moves on to the next replica.
#[derive(Clone, Debug)]
pub struct AdminClient {
    /// The replicas' admin listeners.
    pub replicas: Replicas<StoreAdminClient<Channel>>,
}

impl AdminClient {
    /// A client of the admin listeners at `addrs`.
    pub fn new(addrs: &[String], connect: &Connector) -> Result<Self> {
        let replicas = Replicas::new(addrs, connect, StoreAdminClient::new)?;
        Ok(Self {
            replicas: replicas.with(DEFAULT_DEADLINE, Duration::from_secs(3), false),
        })
    }

    /// Routes sections `first..first+expected.len()` to `alloc`, if each
    /// still has the epoch in `expected`; returns the route version.
    pub async fn assign(&self, alloc: &str, first: SectionId, expected: Vec<Epoch>) -> Result<u64> {
        let req = pb::AssignRequest {
            alloc_id: alloc.into(),
            first_section: first,
            count: expected.len() as u32,
            expected_epochs: expected,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.assign(r).await })
            .await?;
        Ok(r.route_version)
    }

    /// Marks `alloc` as draining (or not).
    pub async fn set_draining(&self, alloc: &str, draining: bool) -> Result<()> {
        let req = pb::SetDrainingRequest {
            alloc_id: alloc.into(),
            draining,
        };
        self.replicas
            .call_with(req, |mut c, r| async move { c.set_draining(r).await })
            .await?;
        Ok(())
    }

    /// Changes the lease terms; returns the terms in force.
    pub async fn set_lease(&self, terms: LeaseTerms) -> Result<LeaseTerms> {
        let req = pb::SetLeaseRequest {
            lease_ms: terms.lease_ms,
            margin_ms: terms.margin_ms,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.set_lease(r).await })
            .await?;
        Ok(LeaseTerms {
            lease_ms: r.lease_ms,
            margin_ms: r.margin_ms,
        })
    }

    /// Refuses `alloc`'s `incarnation` from now on.
    pub async fn fence_alloc(&self, alloc: &str, incarnation: Incarnation) -> Result<()> {
        let req = pb::FenceAllocRequest {
            alloc_id: alloc.into(),
            incarnation,
        };
        self.replicas
            .call_with(req, |mut c, r| async move { c.fence_alloc(r).await })
            .await?;
        Ok(())
    }

    /// Retires `alloc` (see `StoreAdmin.RetireAlloc`): it leaves the
    /// group's list once it serves nothing and its lease has certainly
    /// expired.
    pub async fn retire_alloc(&self, alloc: &str) -> Result<()> {
        let req = pb::RetireAllocRequest {
            alloc_id: alloc.into(),
        };
        self.replicas
            .call_with(req, |mut c, r| async move { c.retire_alloc(r).await })
            .await?;
        Ok(())
    }

    /// Builds a snapshot on the first replica of this client that answers
    /// (each replica keeps its own: give the client one address to choose
    /// the replica) and reports it.
    pub async fn snapshot(&self) -> Result<pb::SnapshotReply> {
        self.replicas
            .call_with(pb::SnapshotRequest {}, |mut c, r| async move {
                c.snapshot(r).await
            })
            .await
    }

    /// Takes a backup on the leader (a follower answers NO_LEADER and the
    /// next replica is asked): the backup file's bytes. The reply may be
    /// far larger than other admin replies (about 30 bytes a section), so
    /// its size is bounded only by [`MAX_BACKUP`].
    pub async fn backup(&self) -> Result<Vec<u8>> {
        let r = self
            .replicas
            .call_with(pb::BackupRequest {}, |c, r| async move {
                c.max_decoding_message_size(MAX_BACKUP).backup(r).await
            })
            .await?;
        Ok(r.file)
    }

    /// Membership changes wait for the leader: a catch-up may take the
    /// whole `catch_up` time, so one replica is never abandoned for the
    /// next while it works (a second attempt would race the first). A
    /// follower still answers NO_LEADER at once and the next one is asked.
    fn membership_replicas(&self, catch_up: Duration) -> Replicas<StoreAdminClient<Channel>> {
        let deadline = catch_up + MEMBERSHIP_MARGIN;
        self.replicas.clone().with(deadline, deadline, false)
    }

    /// Adds store replica `id` at peer address `addr`: a learner first,
    /// promoted to voter once caught up (within `catch_up`, zero for the
    /// store's default, else it is removed again and the call fails with
    /// `CATCH_UP_TIMEOUT`).
    pub async fn add_member(
        &self,
        id: NodeId,
        addr: &str,
        catch_up: Duration,
    ) -> Result<MembershipChange> {
        let req = pb::AddMemberRequest {
            id,
            addr: addr.into(),
            catch_up_timeout_ms: catch_up.as_millis().try_into().unwrap_or(u64::MAX),
        };
        let wait = if catch_up.is_zero() {
            DEFAULT_CATCH_UP
        } else {
            catch_up
        };
        let r = self
            .membership_replicas(wait)
            .call_with(req, |mut c, r| async move { c.add_member(r).await })
            .await?;
        Ok(r.into())
    }

    /// Removes store replica `id` (voter or learner).
    pub async fn remove_member(&self, id: NodeId) -> Result<MembershipChange> {
        let req = pb::RemoveMemberRequest { id };
        let r = self
            .membership_replicas(Duration::ZERO)
            .call_with(req, |mut c, r| async move { c.remove_member(r).await })
            .await?;
        Ok(r.into())
    }
}

/// What a membership call may take beyond its catch-up time: probing the
/// members and committing two configurations (joint, then final).
const MEMBERSHIP_MARGIN: Duration = Duration::from_secs(15);

#[cfg(test)]
mod tests;
