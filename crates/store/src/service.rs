//! The store's gRPC services: the client-facing `Store` API and the
//! replica-to-replica `Raft` transport.
//!
//! Any replica accepts any `Store` call. Writes go through the
//! [`Proposer`]; linearizable reads first confirm leadership with a quorum
//! (`ensure_linearizable`) and wait until the state machine has caught up.
//! When this replica is not the leader it forwards the call, once, to the
//! leader it knows of; a forwarded call is never forwarded again (no
//! loops), so callers never handle "not leader" themselves.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, RaftError};
use seqsvr_core::AllocId;
use seqsvr_proto::store_client::StoreClient;
use seqsvr_proto::{self as pb};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::arbiter::Arbiter;
use crate::disk::Disk;
use crate::error::Error;
use crate::network::channel;
use crate::proposer::Proposer;
use crate::state_machine::StateMachine;
use crate::types::{Command, NodeId, Raft, Reply};

/// Metadata key marking a call forwarded by another replica.
const FORWARDED: &str = "x-seqsvr-forwarded";
/// How long a call waits for an election before giving up.
const LEADER_WAIT: Duration = Duration::from_secs(3);

/// The client-facing store API of one replica.
#[derive(Clone)]
pub struct StoreApi {
    /// This replica's id.
    pub(crate) id: NodeId,
    /// This replica's advertised address.
    pub(crate) addr: String,
    /// The Raft handle.
    pub(crate) raft: Raft,
    /// The state machine (read after a linearizable barrier).
    pub(crate) sm: StateMachine,
    /// Batches writes into log entries.
    pub(crate) proposer: Proposer,
    /// The replica's database (for the fsync counter).
    pub(crate) disk: Disk,
    /// Clients to other replicas, for forwarding, by address.
    pub(crate) peers: Arc<Mutex<HashMap<String, StoreClient<Channel>>>>,
    /// Leases and section moves (acts only while this replica leads).
    pub(crate) arbiter: Arc<Arbiter>,
    /// While set, nothing is forwarded to or accepted from peers.
    pub(crate) isolated: Arc<std::sync::atomic::AtomicBool>,
}

fn forwarded<T>(req: &Request<T>) -> bool {
    req.metadata().contains_key(FORWARDED)
}

impl StoreApi {
    fn peer(&self, addr: &str) -> Result<StoreClient<Channel>, Status> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = peers.get(addr) {
            return Ok(c.clone());
        }
        let ch = channel(addr, Duration::from_millis(500))
            .map_err(|e| Error::Internal(format!("bad leader address {addr}: {e}")))?;
        let c = StoreClient::new(ch);
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

    /// Runs `local` here if this replica leads; otherwise forwards the call
    /// to the leader with `remote` (once).
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
        R: FnOnce(StoreClient<Channel>, Request<Req>) -> RF,
        RF: Future<Output = Result<Response<Resp>, Status>>,
    {
        let was_forwarded = forwarded(&req);
        let isolated = self.isolated.load(std::sync::atomic::Ordering::Relaxed);
        if was_forwarded && isolated {
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
        fwd.metadata_mut()
            .insert(FORWARDED, "1".parse().expect("ascii"));
        remote(self.peer(&addr)?, fwd).await
    }

    /// An operator may route sections only away from owners whose lease
    /// has certainly expired (or to their current owner): moving a section
    /// from a live owner would let two AllocSvrs serve it (promise 3).
    /// Live owners hand sections off instead (`Handoff`).
    fn check_movable(&self, to: &str, first: u32, count: u32) -> Result<(), Error> {
        let m = self.raft.metrics().borrow().clone();
        if m.current_leader != Some(self.id) {
            return Err(Error::NotLeader {
                leader: m
                    .current_leader
                    .and_then(|l| Some((l, self.leader_addr(l)?))),
            });
        }
        let a = self.sm.read();
        let view = self.arbiter.view(&a.state, std::time::Instant::now());
        let end = (first as usize)
            .saturating_add(count as usize)
            .min(a.state.sections.len());
        for (i, r) in a
            .state
            .sections
            .iter()
            .enumerate()
            .take(end)
            .skip(first as usize)
        {
            if let Some(owner) = &r.owner {
                if owner != to && !view.get(owner).is_some_and(|v| v.expired) {
                    return Err(crate::types::Rejection::OwnedElsewhere {
                        section: i as u32,
                        owner: owner.clone(),
                    }
                    .into());
                }
            }
        }
        Ok(())
    }

    /// Writes a take-over or handoff and returns its grants.
    async fn write_grants(&self, cmd: Command) -> Result<pb::TakeOverReply, Error> {
        match self.write(cmd).await? {
            Reply::TakenOver {
                grants,
                route_version,
            } => Ok(pb::TakeOverReply {
                grants: grants.iter().map(grant_pb).collect(),
                route_version,
            }),
            r => Err(unexpected(r)),
        }
    }

    async fn write(&self, cmd: Command) -> Result<Reply, Error> {
        Ok(self.proposer.propose(cmd).await??)
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
        let last = self.raft.metrics().borrow().last_log_index;
        match self.raft.ensure_linearizable().await {
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
        self.raft
            .wait(Some(LEADER_WAIT))
            .applied_index_at_least(last, "read barrier")
            .await
            .map(|_| ())
            .map_err(|e| Error::NoLeader(format!("read barrier: {e}")))
    }
}

fn require_count(count: u32) -> Result<(), Error> {
    if count == 0 {
        return Err(Error::Invalid("count must be at least 1".into()));
    }
    Ok(())
}

fn require_alloc_id(id: &str) -> Result<AllocId, Error> {
    if id.is_empty() {
        return Err(Error::Invalid("alloc_id is empty".into()));
    }
    Ok(id.to_string())
}

fn grant_pb(g: &crate::types::Grant) -> pb::SectionGrant {
    pb::SectionGrant {
        section: g.section,
        epoch: g.epoch,
        prev_ceiling: g.prev_ceiling,
        max_seq: g.max_seq,
    }
}

pub use seqsvr_proto::convert::{route_to_pb as route_pb, set_to_pb as set_pb};

fn unexpected(r: Reply) -> Error {
    Error::Internal(format!("unexpected reply {r:?}"))
}

#[tonic::async_trait]
impl pb::store_server::Store for StoreApi {
    async fn take_over(
        &self,
        req: Request<pb::TakeOverRequest>,
    ) -> Result<Response<pb::TakeOverReply>, Status> {
        let local = |r: pb::TakeOverRequest| async move {
            require_count(r.count)?;
            let cmd = Command::TakeOver {
                alloc: require_alloc_id(&r.alloc_id)?,
                first: r.first_section,
                count: r.count,
            };
            self.write_grants(cmd).await
        };
        self.route(req, local, |mut c, r| async move { c.take_over(r).await })
            .await
    }

    async fn assign(
        &self,
        req: Request<pb::AssignRequest>,
    ) -> Result<Response<pb::AssignReply>, Status> {
        let local = |r: pb::AssignRequest| async move {
            require_count(r.count)?;
            let alloc = require_alloc_id(&r.alloc_id)?;
            self.check_movable(&alloc, r.first_section, r.count)?;
            let cmd = Command::Assign {
                alloc,
                first: r.first_section,
                count: r.count,
            };
            match self.write(cmd).await? {
                Reply::Assigned { route_version } => Ok(pb::AssignReply { route_version }),
                r => Err(unexpected(r)),
            }
        };
        self.route(req, local, |mut c, r| async move { c.assign(r).await })
            .await
    }

    async fn raise(
        &self,
        req: Request<pb::RaiseRequest>,
    ) -> Result<Response<pb::RaiseReply>, Status> {
        let local = |r: pb::RaiseRequest| async move {
            let cmd = Command::Raise {
                section: r.section,
                epoch: r.epoch,
                to: r.to,
            };
            match self.write(cmd).await? {
                Reply::Raised { max_seq } => Ok(pb::RaiseReply { max_seq }),
                r => Err(unexpected(r)),
            }
        };
        self.route(req, local, |mut c, r| async move { c.raise(r).await })
            .await
    }

    async fn read_sections(
        &self,
        req: Request<pb::ReadSectionsRequest>,
    ) -> Result<Response<pb::ReadSectionsReply>, Status> {
        let local = |r: pb::ReadSectionsRequest| async move {
            self.barrier().await?;
            let a = self.sm.read();
            let n = a.state.sections.len() as u64;
            if a.state.set.is_none() {
                return Err(crate::types::Rejection::NotConfigured.into());
            }
            let end = r.first_section as u64 + r.count as u64;
            if r.count == 0 || end > n {
                return Err(Error::Rejected(crate::types::Rejection::UnknownSection {
                    section: (end.saturating_sub(1)).min(u32::MAX as u64) as u32,
                    count: n as u32,
                }));
            }
            let sections = (r.first_section..end as u32)
                .map(|s| {
                    let rec = &a.state.sections[s as usize];
                    pb::SectionState {
                        section: s,
                        max_seq: rec.max_seq,
                        epoch: rec.epoch,
                        owner: rec.owner.clone().unwrap_or_default(),
                    }
                })
                .collect();
            Ok(pb::ReadSectionsReply { sections })
        };
        self.route(
            req,
            local,
            |mut c, r| async move { c.read_sections(r).await },
        )
        .await
    }

    async fn get_routes(
        &self,
        req: Request<pb::GetRoutesRequest>,
    ) -> Result<Response<pb::RouteTable>, Status> {
        let local = |_r: pb::GetRoutesRequest| async move {
            self.barrier().await?;
            let a = self.sm.read();
            a.state
                .route_table()
                .map(|t| route_pb(&t))
                .ok_or(Error::Rejected(crate::types::Rejection::NotConfigured))
        };
        self.route(req, local, |mut c, r| async move { c.get_routes(r).await })
            .await
    }

    async fn register_alloc(
        &self,
        req: Request<pb::RegisterAllocRequest>,
    ) -> Result<Response<pb::RegisterAllocReply>, Status> {
        let local = |r: pb::RegisterAllocRequest| async move {
            let alloc = require_alloc_id(&r.alloc_id)?;
            check_addr(&r.addr)?;
            match self
                .write(Command::RegisterAlloc {
                    alloc,
                    addr: r.addr,
                })
                .await?
            {
                Reply::Registered { route_version } => Ok(pb::RegisterAllocReply { route_version }),
                r => Err(unexpected(r)),
            }
        };
        self.route(
            req,
            local,
            |mut c, r| async move { c.register_alloc(r).await },
        )
        .await
    }

    async fn renew(
        &self,
        req: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewReply>, Status> {
        let local = |r: pb::RenewRequest| async move {
            let alloc = require_alloc_id(&r.alloc_id)?;
            // The term we lead in *before* confirming: a grant is recorded
            // only if we still lead in it afterwards.
            let term = self.raft.metrics().borrow().current_term;
            self.barrier().await?;
            // Never between the arbiter's plan and its moves (see `Arbiter::moves`).
            let _moves = self.arbiter.moves.lock().await;
            let now = std::time::Instant::now();
            let a = self.sm.read();
            let Some(rec) = a.state.allocs.get(&alloc) else {
                return Err(Error::Invalid(format!("alloc {alloc:?} is not registered")));
            };
            if !self.arbiter.granted(&alloc, term, now) {
                return Err(Error::NoLeader("leadership changed during renewal".into()));
            }
            Ok(pb::RenewReply {
                lease_ms: self.arbiter.config.lease_ms,
                sections: owned_runs(&a.state, &alloc),
                route_version: a.state.route_version,
                draining: rec.draining,
            })
        };
        self.route(req, local, |mut c, r| async move { c.renew(r).await })
            .await
    }

    async fn handoff(
        &self,
        req: Request<pb::HandoffRequest>,
    ) -> Result<Response<pb::TakeOverReply>, Status> {
        let local = |r: pb::HandoffRequest| async move {
            require_count(r.count)?;
            let cmd = Command::Handoff {
                from: require_alloc_id(&r.from_alloc)?,
                to: require_alloc_id(&r.to_alloc)?,
                first: r.first_section,
                count: r.count,
            };
            self.write_grants(cmd).await
        };
        self.route(req, local, |mut c, r| async move { c.handoff(r).await })
            .await
    }

    async fn set_draining(
        &self,
        req: Request<pb::SetDrainingRequest>,
    ) -> Result<Response<pb::RegisterAllocReply>, Status> {
        let local = |r: pb::SetDrainingRequest| async move {
            let cmd = Command::SetDraining {
                alloc: require_alloc_id(&r.alloc_id)?,
                draining: r.draining,
            };
            match self.write(cmd).await? {
                Reply::Registered { route_version } => Ok(pb::RegisterAllocReply { route_version }),
                r => Err(unexpected(r)),
            }
        };
        self.route(
            req,
            local,
            |mut c, r| async move { c.set_draining(r).await },
        )
        .await
    }

    async fn status(
        &self,
        _req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StoreStatus>, Status> {
        Ok(Response::new(self.status_now()))
    }
}

/// The runs of sections routed to `alloc`.
fn owned_runs(state: &crate::state::SetState, alloc: &str) -> Vec<pb::SectionRun> {
    let mut runs: Vec<pb::SectionRun> = Vec::new();
    for (i, r) in state.sections.iter().enumerate() {
        if r.owner.as_deref() != Some(alloc) {
            continue;
        }
        let s = i as u32;
        match runs.last_mut() {
            Some(run) if run.first_section + run.count == s => run.count += 1,
            _ => runs.push(pb::SectionRun {
                first_section: s,
                count: 1,
            }),
        }
    }
    runs
}

/// Checks that `addr` looks like `host:port`.
fn check_addr(addr: &str) -> Result<(), Error> {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(Error::Invalid(format!("address {addr:?} is not host:port"))),
    }
}

impl StoreApi {
    /// This replica's view of the group.
    pub fn status_now(&self) -> pb::StoreStatus {
        let m = self.raft.metrics().borrow().clone();
        let members = m
            .membership_config
            .nodes()
            .map(|(id, n)| pb::StoreMember {
                id: *id,
                addr: n.addr.clone(),
                voter: m
                    .membership_config
                    .membership()
                    .get_joint_config()
                    .iter()
                    .any(|c| c.contains(id)),
            })
            .collect();
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
                    draining: rec.draining,
                    sections: a
                        .state
                        .sections
                        .iter()
                        .filter(|r| r.owner.as_ref() == Some(id))
                        .count() as u32,
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
            lease_ms: self.arbiter.config.lease_ms,
            margin_ms: self.arbiter.config.margin_ms,
            node_id: self.id,
            addr: self.addr.clone(),
            state: format!("{:?}", m.state),
            term: m.current_term,
            leader_id: m.current_leader.unwrap_or(0),
            leader_addr,
            members,
            last_log_index: m.last_log_index.unwrap_or(0),
            last_applied: m.last_applied.map(|l| l.index).unwrap_or(0),
            set: a.state.set.as_ref().map(set_pb),
            route_version: a.state.route_version,
            fsyncs: self.disk.fsyncs(),
            commands: self.sm.commands_applied(),
            has_leader: m.current_leader.is_some(),
        }
    }
}

/// The Raft transport endpoint of one replica.
#[derive(Clone)]
pub struct RaftApi {
    /// The Raft handle.
    pub(crate) raft: Raft,
    /// While set, peers' Raft RPCs are refused (partition fault).
    pub(crate) isolated: Arc<std::sync::atomic::AtomicBool>,
}

impl RaftApi {
    fn check(&self) -> Result<(), Status> {
        if self.isolated.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Status::unavailable("isolated from peers (partition fault)"));
        }
        Ok(())
    }
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, p: &pb::RaftPayload) -> Result<T, Status> {
    seqsvr_core::codec::decode(what, &p.data).map_err(|e| Error::Invalid(e.to_string()).to_status())
}

fn encode<T: serde::Serialize>(v: &T) -> Result<Response<pb::RaftPayload>, Status> {
    let data =
        seqsvr_core::codec::encode(v).map_err(|e| Error::Internal(e.to_string()).to_status())?;
    Ok(Response::new(pb::RaftPayload { data }))
}

#[tonic::async_trait]
impl pb::raft_server::Raft for RaftApi {
    async fn append_entries(
        &self,
        req: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.check()?;
        let rpc = decode("append-entries request", req.get_ref())?;
        encode(&self.raft.append_entries(rpc).await)
    }

    async fn vote(
        &self,
        req: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.check()?;
        let rpc = decode("vote request", req.get_ref())?;
        encode(&self.raft.vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        req: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.check()?;
        let rpc = decode("install-snapshot request", req.get_ref())?;
        encode(&self.raft.install_snapshot(rpc).await)
    }
}
