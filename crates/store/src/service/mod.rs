//! The store's gRPC services, one file per plane:
//! - [`read`]: the client plane (`StoreRead`): routes, sections, status.
//! - [`peer`]: the peer plane for AllocSvrs (`StorePeer`): registration,
//!   leases, take-overs, raises, handoffs.
//! - [`admin`]: the admin plane (`StoreAdmin`): operator commands.
//! - [`raft`]: the peer plane between replicas (`Raft`).
//!
//! This module holds what they share: the replica's handles, forwarding to
//! the leader, the linearizable read barrier, and the checks every request
//! passes at the edge — sizes and names are bounded *before* anything is
//! proposed, so the log store never sees an entry it would refuse (a
//! refused append is a storage error, fatal to the replica).
//!
//! Peer and read calls that reach a follower are forwarded, once, to the
//! leader over the peer plane (as this replica, with its own certificate);
//! a forwarded call is never forwarded again. Admin calls are not
//! forwarded: a follower answers NO_LEADER naming the leader.

pub mod admin;
pub mod barrier;
mod counters;
mod ids;
pub mod peer;
pub mod raft;
pub mod read;
pub mod sets;
pub(crate) mod snapshot;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, RaftError};
use seqsvr_core::{AllocId, SectionId};
use seqsvr_proto::store_peer_client::StorePeerClient;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::client::Connector;
use seqsvr_store_api::{Error, Rejection};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::arbiter::Arbiter;
use crate::auth::{Auth, FORWARDED};
use crate::disk::Disk;
use crate::proposer::Proposer;
use crate::state::MAX_NAME_LEN;
use crate::state_machine::StateMachine;
use crate::types::{Command, NodeId, Raft, Reply};

/// How long a call waits for an election before giving up.
const LEADER_WAIT: Duration = Duration::from_secs(3);
/// How long a forwarded call may take at the leader.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(2);
pub use crate::types::MAX_SECTIONS_PER_CALL;

/// Everything the services of one replica share.
#[derive(Clone)]
pub struct StoreApi {
    /// This replica's id.
    pub(crate) id: NodeId,
    /// This replica's advertised peer-plane address (its Raft address).
    pub(crate) addr: String,
    /// Its client-plane address (reported in status, listed in the directory).
    pub(crate) client_addr: String,
    /// Its admin-plane address (likewise).
    pub(crate) admin_addr: String,
    /// The Raft handle.
    pub(crate) raft: Raft,
    /// The state machine (read after a linearizable barrier).
    pub(crate) sm: StateMachine,
    /// Batches writes into log entries.
    pub(crate) proposer: Proposer,
    /// The replica's database (for the fsync counter).
    pub(crate) disk: Disk,
    /// How to dial other replicas' peer listeners.
    pub(crate) connect: Connector,
    /// How to dial the home group's (set 0's) admin listeners, to keep
    /// this set's directory entry current (`node::home`).
    pub(crate) home_connect: Connector,
    /// How to dial AllocSvrs' admin listeners, to ask a giver for the
    /// handoffs of a rebalance (`node::rebalance`).
    pub(crate) alloc_connect: Connector,
    /// Clients to other replicas, for forwarding, by address.
    pub(crate) peers: Arc<Mutex<HashMap<String, StorePeerClient<Channel>>>>,
    /// Leases and section moves (acts only while this replica leads).
    pub(crate) arbiter: Arc<Arbiter>,
    /// Who may call what.
    pub(crate) auth: Auth,
    /// Which store certificates are of this set (who may forward).
    pub(crate) store_certs: crate::auth::StoreCerts,
    /// While set, nothing is forwarded to or accepted from peers.
    pub(crate) isolated: crate::fault::Isolation,
    /// What this replica counts.
    pub(crate) metrics: Arc<crate::metrics::StoreMetrics>,
    /// One membership change at a time (see `membership`).
    pub(crate) member_changes: crate::membership::view::ChangeLock,
    /// Linearizable barriers, one in flight, shared by the callers that
    /// wait for it (see `barrier`).
    pub(crate) barriers: barrier::Barriers,
    /// The route table, built once per route (and directory) version and
    /// shared by every read of it (see `snapshot`).
    pub(crate) route_snapshot: snapshot::RouteSnapshot,
    /// Client-plane reads served at once (`max_concurrent_reads`); the
    /// rest wait here, costing no CPU (see `read.rs`).
    pub(crate) reads: Arc<tokio::sync::Semaphore>,
}

fn forwarded<T>(req: &Request<T>) -> bool {
    req.metadata().contains_key(FORWARDED)
}

impl StoreApi {
    /// Checks a peer-plane call in the name of AllocSvr `id`: from `id`
    /// itself, never forwarded
    /// ([`crate::auth::require_alloc_not_forwarded`]).
    ///
    /// One exception to the refusal's kind, not to the rule: a call marked
    /// forwarded by a member of this group is what a replica of an older
    /// version does with an AllocSvr's call during a rolling upgrade. It
    /// is refused all the same (nothing in it is taken), but as a
    /// retryable NOT_LEADER naming the leader, which the forwarder passes
    /// back: the AllocSvr then calls the leader itself, with its own
    /// certificate, instead of failing for good on PERMISSION_DENIED
    /// (`docs/architecture/security.md`, "Forwarded calls").
    pub(crate) fn require_alloc<T>(&self, req: &Request<T>, id: &str) -> Result<(), Status> {
        if forwarded(req) {
            if let Some(by) = self.forwarding_member(req) {
                return Err(self.call_the_leader(id, by));
            }
        }
        crate::auth::require_alloc_not_forwarded(self.auth, req, id)
    }

    /// Who marked `req` forwarded, if a current member (voter or learner)
    /// of this group did: `"store <id>"`, or `"a replica"` on an insecure
    /// plane, where nothing says who called and nothing is checked.
    fn forwarding_member<T>(&self, req: &Request<T>) -> Option<String> {
        if self.auth == Auth::Insecure {
            return Some("a replica".into());
        }
        let id = self.store_certs.judge(&self.auth.caller(req).ok()?).ok()?;
        let m = self.raft.metrics();
        let member = m.borrow().membership_config.nodes().any(|(n, _)| *n == id);
        member.then(|| format!("store {id}"))
    }

    /// The refusal of an AllocSvr's call that member `by` forwarded: on
    /// the wire a NOT_LEADER naming the leader (every version of the
    /// client reads it as "call the leader", and retries), with a message
    /// saying why.
    fn call_the_leader(&self, alloc: &str, by: String) -> Status {
        let leader = self.raft.metrics().borrow().current_leader;
        let leader = leader.and_then(|l| Some((l, self.leader_addr(l)?)));
        let mut d = seqsvr_proto::ErrorDetail {
            kind: seqsvr_proto::ErrorKind::NoLeader as i32,
            retryable: true,
            ..Default::default()
        };
        let call = match &leader {
            Some((l, addr)) => {
                d.leader_id = *l;
                d.leader_addr = addr.clone();
                format!("call the leader, store {l} at {addr}, directly")
            }
            None => "no leader is known here: call the replicas again".to_string(),
        };
        let alloc: String = alloc.chars().take(64).collect();
        d.reason = format!(
            "a call in AllocSvr {alloc:?}'s name came forwarded by {by} (a replica of an \
             older version forwards them); it is not taken, because AllocSvr calls are never \
             forwarded between replicas: {call}"
        );
        seqsvr_proto::status_with(tonic::Code::Unavailable, d.reason.clone(), d)
    }

    /// Runs an AllocSvr's call here if this replica leads; otherwise
    /// answers NOT_LEADER naming the leader (after waiting, bounded, for
    /// an election if none is known), and the AllocSvr calls it itself.
    /// Never forwarded: a forwarded call could be invented by the
    /// forwarder (`require_alloc`).
    async fn at_leader<Req, Resp, L, LF>(
        &self,
        req: Request<Req>,
        local: L,
    ) -> Result<Response<Resp>, Status>
    where
        L: FnOnce(Req) -> LF,
        LF: Future<Output = Result<Resp, Error>>,
    {
        match local(req.into_inner()).await {
            Ok(resp) => Ok(Response::new(resp)),
            Err(Error::NotLeader { leader: None }) => {
                let leader = self.known_leader().await;
                let leader = leader.and_then(|l| Some((l, self.leader_addr(l)?)));
                Err(Error::NotLeader { leader }.to_status())
            }
            Err(e) => Err(e.to_status()),
        }
    }

    fn peer(&self, addr: &str) -> Result<StorePeerClient<Channel>, Status> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = peers.get(addr) {
            return Ok(c.clone());
        }
        let ch = (self.connect)(addr)
            .map_err(|e| Error::Internal(format!("bad leader address {addr}: {e}")))?;
        let c = StorePeerClient::new(ch);
        peers.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// Waits (bounded) until some leader is known; returns it.
    async fn known_leader(&self) -> Option<NodeId> {
        let mut m = self.raft.metrics();
        let wait = async {
            loop {
                if let Some(l) = m.borrow_and_update().current_leader {
                    return l;
                }
                if m.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(LEADER_WAIT, wait).await.ok()
    }

    fn leader_addr(&self, id: NodeId) -> Option<String> {
        let m = self.raft.metrics().borrow().clone();
        let addr = m
            .membership_config
            .nodes()
            .find(|(n, _)| **n == id)
            .map(|(_, node)| node.addr.clone());
        addr
    }

    /// The leader as this replica knows it, for a NOT_LEADER answer.
    pub(crate) fn not_leader(&self) -> Error {
        let leader = self.raft.metrics().borrow().current_leader;
        Error::NotLeader {
            leader: leader.and_then(|l| Some((l, self.leader_addr(l)?))),
        }
    }

    /// Runs `local` here if this replica leads; otherwise forwards the call
    /// to the leader's peer listener with `remote` (once).
    async fn route<Req, Resp, L, LF, R, RF>(
        &self,
        req: Request<Req>,
        local: L,
        remote: R,
    ) -> Result<Response<Resp>, Status>
    where
        Req: Clone,
        L: Fn(Req) -> LF,
        LF: Future<Output = Result<Resp, Error>>,
        R: FnOnce(StorePeerClient<Channel>, Request<Req>) -> RF,
        RF: Future<Output = Result<Response<Resp>, Status>>,
    {
        let was_forwarded = forwarded(&req);
        if was_forwarded && self.isolated.is_on() {
            return Err(Error::NoLeader("isolated from peers".into()).to_status());
        }
        let body = req.into_inner();
        let mut leader = match local(body.clone()).await {
            Ok(resp) => return Ok(Response::new(resp)),
            Err(Error::NotLeader { leader }) => leader.map(|(id, _)| id),
            Err(e) => return Err(e.to_status()),
        };
        if was_forwarded {
            return Err(
                Error::NoLeader(format!("replica {} is not the leader", self.id)).to_status(),
            );
        }
        if leader.is_none() {
            leader = self.known_leader().await;
        }
        let Some(leader) = leader else {
            return Err(Error::NoLeader("no leader elected".into()).to_status());
        };
        if leader == self.id {
            // Elected while we waited.
            return local(body)
                .await
                .map(Response::new)
                .map_err(|e| e.to_status());
        }
        let addr = self.leader_addr(leader).ok_or_else(|| {
            Error::NoLeader(format!("leader {leader} has no address")).to_status()
        })?;
        let mut fwd = Request::new(body);
        fwd.set_timeout(FORWARD_TIMEOUT);
        fwd.metadata_mut()
            .insert(FORWARDED, "1".parse().expect("ascii"));
        match tokio::time::timeout(FORWARD_TIMEOUT, remote(self.peer(&addr)?, fwd)).await {
            Ok(r) => r,
            Err(_) => {
                Err(Error::NoLeader(format!("leader {leader} did not answer in time")).to_status())
            }
        }
    }

    /// Fails with NOT_LEADER unless this replica leads.
    fn require_leader(&self) -> Result<(), Error> {
        let m = self.raft.metrics().borrow().clone();
        if m.current_leader != Some(self.id) {
            return Err(self.not_leader());
        }
        Ok(())
    }

    async fn write(&self, cmd: Command) -> Result<Reply, Error> {
        let start = std::time::Instant::now();
        let kind = cmd.clone();
        let out = self.proposer.propose(cmd).await?;
        self.metrics.command(&kind, out.is_ok(), start.elapsed());
        Ok(out?)
    }

    /// A linearizable barrier: returns once this replica has confirmed its
    /// leadership with a quorum and applied every entry that could have been
    /// acknowledged before the barrier started.
    ///
    /// `ensure_linearizable` alone is not enough in openraft 0.9: a leader
    /// that restarts with its vote committed resumes leadership in the same
    /// term, and its read index is then only the commit index it had saved
    /// (which lags). Entries committed and acknowledged before the crash sit
    /// in its log unapplied, and a read would miss them. Every acknowledged
    /// entry is in the leader's log, so waiting until everything the log held
    /// when the barrier started is applied closes that gap (promise 1).
    async fn barrier(&self) -> Result<(), Error> {
        self.barriers.barrier().await
    }

    /// Reads sections `first..first+count` after a barrier.
    async fn read_sections(
        &self,
        r: pb::ReadSectionsRequest,
    ) -> Result<pb::ReadSectionsReply, Error> {
        check_count(r.count)?;
        self.barrier().await?;
        let a = self.sm.read();
        let n = a.state.sections.len() as u64;
        if a.state.set.is_none() {
            return Err(Rejection::NotConfigured.into());
        }
        let end = r.first_section as u64 + r.count as u64;
        if end > n {
            return Err(Rejection::UnknownSection {
                section: (end - 1).min(u32::MAX as u64) as u32,
                count: n as u32,
            }
            .into());
        }
        let sections = (r.first_section..end as u32)
            .map(|s| pb::SectionState::from((s, &a.state.sections[s as usize])))
            .collect();
        Ok(pb::ReadSectionsReply { sections })
    }

    /// `GetRoutes`, as both the client and the peer plane serve it: here if
    /// this replica leads, else forwarded to the leader.
    async fn routed_routes(
        &self,
        req: Request<pb::GetRoutesRequest>,
    ) -> Result<Response<pb::RouteTable>, Status> {
        self.route(
            req,
            |_| self.routes(),
            |mut c, r| async move { c.get_routes(r).await },
        )
        .await
    }

    /// `ReadSections`, as both the client and the peer plane serve it.
    async fn routed_read_sections(
        &self,
        req: Request<pb::ReadSectionsRequest>,
    ) -> Result<Response<pb::ReadSectionsReply>, Status> {
        self.route(
            req,
            |r| self.read_sections(r),
            |mut c, r| async move { c.read_sections(r).await },
        )
        .await
    }

    /// Reads the route table after a barrier: the one built for the
    /// current versions, copied into the reply outside the lock.
    async fn routes(&self) -> Result<pb::RouteTable, Error> {
        self.barrier().await?;
        let t = self.route_snapshot.of(&self.sm.read().state);
        t.map(|t| (*t).clone())
            .ok_or(Error::Rejected(Rejection::NotConfigured))
    }
}

/// Checks a section count at the edge.
fn check_count(count: u32) -> Result<(), Error> {
    if count == 0 {
        // Protobuf cannot tell a missing field from a zero one.
        return Err(Error::Invalid(format!(
            "count is missing (or 0): name 1..={MAX_SECTIONS_PER_CALL} sections"
        )));
    }
    if count > MAX_SECTIONS_PER_CALL {
        return Err(Error::Invalid(format!(
            "count must be between 1 and {MAX_SECTIONS_PER_CALL}, not {count}"
        )));
    }
    Ok(())
}

/// Checks an alloc id at the edge (before anything is proposed).
fn check_id(id: &str) -> Result<AllocId, Error> {
    check_name("alloc id", id)?;
    Ok(id.to_string())
}

fn check_name(what: &str, s: &str) -> Result<(), Error> {
    if s.is_empty() || s.len() > MAX_NAME_LEN || s.chars().any(char::is_control) {
        return Err(Error::Invalid(format!(
            "{what} must be 1..={MAX_NAME_LEN} printable characters (got {} bytes)",
            s.len()
        )));
    }
    Ok(())
}

/// Checks that `addr` looks like `host:port`.
fn check_addr(what: &str, addr: &str) -> Result<(), Error> {
    check_name(what, addr)?;
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(Error::Invalid(format!("{what} {addr:?} is not host:port"))),
    }
}

/// The section run `first..first+count` of a request, checked.
fn check_run(first: SectionId, count: usize) -> Result<(), Error> {
    check_count(u32::try_from(count).unwrap_or(u32::MAX))?;
    first
        .checked_add(count as u32 - 1)
        .ok_or_else(|| Error::Invalid("section run overflows".into()))?;
    Ok(())
}

fn unexpected(r: Reply) -> Error {
    Error::Internal(format!("unexpected reply {r:?}"))
}

/// The runs of sections routed to `alloc`.
fn owned_runs(state: &crate::state::SetState, alloc: &str) -> Vec<pb::SectionRun> {
    let owned: Vec<SectionId> = state.owned_by(alloc).collect();
    (seqsvr_core::section::runs(&owned).into_iter())
        .map(|(first_section, count)| pb::SectionRun {
            first_section,
            count,
        })
        .collect()
}

impl StoreApi {
    /// This replica's view of the group.
    pub fn status_now(&self) -> pb::StoreStatus {
        let m = self.raft.metrics().borrow().clone();
        let view = crate::membership::view::View::from_metrics(&m);
        let leader_addr = m
            .current_leader
            .and_then(|l| self.leader_addr(l))
            .unwrap_or_default();
        let a = self.sm.read();
        let leading = m.current_leader == Some(self.id);
        let allocs = if leading {
            let view = self.arbiter.view(&a.state, std::time::Instant::now());
            a.state
                .allocs
                .iter()
                .map(|(id, rec)| pb::AllocLease {
                    alloc_id: id.clone(),
                    addr: rec.addr.clone(),
                    peer_addr: rec.peer_addr.clone(),
                    admin_addr: rec.admin_addr.clone(),
                    incarnation: rec.incarnation,
                    fenced: rec.fenced,
                    draining: rec.draining,
                    // Kept as commands apply: no scan of every section
                    // under the lock applies need.
                    sections: a.state.owned.count(id),
                    since_grant_ms: view[id]
                        .since_grant
                        .map(|d| d.as_millis() as i64)
                        .unwrap_or(-1),
                    expired: view[id].expired,
                })
                .collect()
        } else {
            Vec::new()
        };
        pb::StoreStatus {
            allocs,
            lease_ms: a.state.lease.terms.lease_ms,
            margin_ms: a.state.lease.terms.margin_ms,
            node_id: self.id,
            addr: self.addr.clone(),
            state: format!("{:?}", m.state),
            term: m.current_term,
            leader_id: m.current_leader.unwrap_or(0),
            leader_addr,
            members: view.members,
            last_log_index: m.last_log_index.unwrap_or(0),
            last_applied: m.last_applied.map(|l| l.index).unwrap_or(0),
            set: a.state.set.as_ref().map(pb::SetSpec::from),
            route_version: a.state.route_version,
            fsyncs: self.disk.fsyncs(),
            commands: self.sm.commands_applied(),
            has_leader: m.current_leader.is_some(),
            voter_ids: view.voters.into_iter().collect(),
            learner_ids: view.learners.into_iter().collect(),
            replication: crate::membership::view::replication(&m),
            joint: view.joint,
            membership_index: view.index,
            client_addr: self.client_addr.clone(),
            admin_addr: self.admin_addr.clone(),
            directory_version: a.state.directory.as_ref().map_or(0, |d| d.version),
            placement: seqsvr_proto::convert::placement_runs(&a.state.placement),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// One linearizable barrier on `raft` (see [`StoreApi::barrier`] for why
/// it waits for the log to be applied too).
pub(crate) async fn linearizable_barrier(raft: &Raft) -> Result<(), Error> {
    let last = raft.metrics().borrow().last_log_index;
    match raft.ensure_linearizable().await {
        Ok(_) => {}
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
            return Err(Error::NotLeader {
                leader: f.leader_id.zip(f.leader_node.map(|n| n.addr)),
            })
        }
        Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(e))) => {
            return Err(Error::NoLeader(e.to_string()))
        }
        Err(RaftError::Fatal(e)) => return Err(Error::Internal(e.to_string())),
    }
    raft.wait(Some(LEADER_WAIT))
        .applied_index_at_least(last, "read barrier")
        .await
        .map(|_| ())
        .map_err(|e| Error::NoLeader(format!("read barrier: {e}")))
}

/// Coalesced barriers on `raft`.
pub(crate) fn barriers(raft: &Raft) -> barrier::Barriers {
    let raft = raft.clone();
    barrier::Barriers::new(Arc::new(move || {
        let raft = raft.clone();
        Box::pin(async move { linearizable_barrier(&raft).await })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_checks_refuse_oversized_and_malformed_input() {
        assert!(check_id(&"a".repeat(40_000)).is_err());
        assert!(check_id("").is_err());
        assert!(check_id("alloc\n1").is_err());
        assert!(check_id("alloc-1").is_ok());
        assert!(check_addr("address", "not-an-address").is_err());
        assert!(check_addr("address", "host:99999").is_err());
        assert!(check_addr("address", "127.0.0.1:7201").is_ok());
        assert!(check_count(0).is_err());
        assert!(check_count(MAX_SECTIONS_PER_CALL + 1).is_err());
        assert!(check_run(u32::MAX, 2).is_err());
        assert!(check_run(3, 2).is_ok());
    }
}
