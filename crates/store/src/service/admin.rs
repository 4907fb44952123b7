//! The admin plane of a store replica (`StoreAdmin`): operator commands,
//! for operator certificates only. Not forwarded: a follower answers
//! NO_LEADER naming the leader, and the admin client tries the next one.
//! Membership changes are checked here and made in `crate::membership`.

use std::time::Duration;

use seqsvr_core::{AllocId, LeaseTerms};
use seqsvr_proto::{self as pb};
use seqsvr_store_api::{Error, Rejection};
use seqsvr_store_core::backup::Backup;
use seqsvr_store_core::decision;
use tonic::{Request, Response, Status};

use super::{check_addr, check_id, check_run, unexpected, StoreApi};
use crate::membership::{max_catch_up, CHANGE_MARGIN, DEFAULT_CATCH_UP};
use crate::types::{Command, NodeId, Reply};

/// The `StoreAdmin` service: the replica's services, and the longest the
/// admin plane serves a call (its `request_timeout`), which a membership
/// change must fit in.
#[derive(Clone)]
pub struct AdminService(pub StoreApi, pub Duration);

impl StoreApi {
    /// An operator may route sections only away from owners whose lease
    /// has certainly expired (or to their current owner): moving a section
    /// from a live owner would let two AllocSvrs serve it (promise 3). Live
    /// owners hand sections off instead. The check and the write happen
    /// under the arbiter's lock, so no renewal slips in between, and the
    /// write is conditional on the epochs the operator read.
    async fn assign(&self, r: pb::AssignRequest) -> Result<pb::AssignReply, Error> {
        let alloc = check_id(&r.alloc_id)?;
        check_run(r.first_section, r.expected_epochs.len())?;
        if r.count as usize != r.expected_epochs.len() {
            return Err(Error::Invalid(format!(
                "count {} but {} expected epochs",
                r.count,
                r.expected_epochs.len()
            )));
        }
        self.require_leader()?;
        let _moves = self.arbiter.moves.lock().await;
        {
            let a = self.sm.read();
            let view = self.arbiter.view(&a.state, std::time::Instant::now());
            let count = r.expected_epochs.len();
            decision::check_assign(&a.state, &view, &alloc, r.first_section, count)?;
        }
        let cmd = Command::Assign {
            alloc,
            first: r.first_section,
            expected: r.expected_epochs,
        };
        match self.write(cmd).await? {
            Reply::Assigned { route_version } => Ok(pb::AssignReply { route_version }),
            r => Err(unexpected(r)),
        }
    }

    /// Lease terms change only while no lease granted under older terms can
    /// be cut short: see `Arbiter::lease_change_allowed`.
    async fn set_lease(&self, r: pb::SetLeaseRequest) -> Result<pb::SetLeaseReply, Error> {
        let terms = LeaseTerms {
            lease_ms: r.lease_ms,
            margin_ms: r.margin_ms,
        };
        terms.validate().map_err(Error::Invalid)?;
        self.require_leader()?;
        let _moves = self.arbiter.moves.lock().await;
        let lease = self.sm.read().state.lease;
        self.arbiter
            .lease_change_allowed(&lease, std::time::Instant::now())
            .map_err(Error::NoLeader)?;
        match self.write(Command::SetLease(terms)).await? {
            Reply::Leased(t) => {
                self.arbiter.lease_changed(std::time::Instant::now());
                Ok(pb::SetLeaseReply {
                    lease_ms: t.lease_ms,
                    margin_ms: t.margin_ms,
                })
            }
            r => Err(unexpected(r)),
        }
    }

    /// `AddMember` checked at the edge: every malformed field is refused
    /// before anything is asked of Raft. The catch-up must fit in
    /// `request_timeout` (see `membership::max_catch_up`).
    async fn add_member_checked(
        &self,
        r: pb::AddMemberRequest,
        request_timeout: Duration,
    ) -> Result<pb::MembershipReply, Error> {
        let id = check_member_id(r.id)?;
        check_addr("member address", &r.addr)?;
        let max = max_catch_up(request_timeout);
        let catch_up = match r.catch_up_timeout_ms {
            0 => DEFAULT_CATCH_UP.min(max),
            ms => Duration::from_millis(ms),
        };
        if catch_up > max || catch_up.is_zero() {
            return Err(Error::Invalid(format!(
                "a catch-up time must be between 1 and {} ms (the admin plane's request_timeout_ms {} \
                 less {} ms for the rest of the change), not {} ms",
                max.as_millis(),
                request_timeout.as_millis(),
                CHANGE_MARGIN.as_millis(),
                catch_up.as_millis()
            )));
        }
        self.require_leader()?;
        self.add_member(id, &r.addr, catch_up).await
    }

    /// A backup (docs/operations.md, Backup and disaster recovery): on the
    /// leader, after a linearizable barrier, so every ceiling acknowledged
    /// before the call arrived is in it; the state and the log id it was
    /// applied up to are read together under the state machine's lock.
    async fn backup(&self) -> Result<pb::BackupReply, Error> {
        self.require_leader()?;
        self.barrier().await?;
        let backup = {
            let a = self.sm.read();
            if a.state.set.is_none() {
                return Err(Rejection::NotConfigured.into());
            }
            let (index, term) = a
                .last_applied
                .map_or((0, 0), |l| (l.index, l.leader_id.term));
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            Backup::new(a.state.clone(), index, term, now_ms)
        };
        let file = backup
            .encode()
            .map_err(|e| Error::Internal(format!("backup: {e}")))?;
        tracing::info!(
            log_index = backup.header.log_index,
            bytes = file.len(),
            "backup taken"
        );
        Ok(pb::BackupReply { file })
    }

    /// Builds a snapshot now (openraft's trigger) and waits, within
    /// `within`, until one built after the call began is stored. A build
    /// already running when the call arrives is the one reported (openraft
    /// starts no second one while one runs).
    async fn snapshot(&self, within: Duration) -> Result<pb::SnapshotReply, Error> {
        let before = self.sm.last_build().count;
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| Error::Internal(format!("snapshot: {e}")))?;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let built = self.sm.last_build();
            if built.count > before {
                return Ok(pb::SnapshotReply {
                    last_log_index: built.last_log_index,
                    bytes: built.bytes,
                    build_us: built.took.as_micros() as u64,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Internal(format!(
                    "no snapshot stored within {within:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Retires `alloc` once nothing may still be served by it: the leader
    /// must see its lease certainly expired (never granted in this office
    /// and the office's first `lease + margin` over, or `lease + margin`
    /// since the last grant) — fenced is not expired, since a fenced
    /// process serves until its lease runs out. The write is conditional
    /// on the incarnation read, and the state refuses it while the
    /// AllocSvr owns a section this set serves. Under the arbiter's lock,
    /// so no renewal is granted between the check and the write.
    async fn retire(&self, alloc: AllocId) -> Result<pb::RegisterAllocReply, Error> {
        self.require_leader()?;
        let _moves = self.arbiter.moves.lock().await;
        let incarnation = {
            let a = self.sm.read();
            let Some(rec) = a.state.allocs.get(&alloc) else {
                return Err(Rejection::NotRegistered { alloc }.into());
            };
            let view = self.arbiter.view(&a.state, std::time::Instant::now());
            if !view.get(&alloc).is_some_and(|v| v.expired) {
                let since = view
                    .get(&alloc)
                    .and_then(|v| v.since_grant)
                    .map_or("no renewal granted by this leader yet".to_string(), |d| {
                        format!("last renewal granted {} ms ago", d.as_millis())
                    });
                return Err(Rejection::AllocInUse {
                    reason: format!(
                        "its lease may still run ({since}; lease + margin is {} ms){}: \
                         stop it, or fence it, and retire it once the lease has run out",
                        a.state.lease.office_wait_ms(),
                        if rec.fenced {
                            "; fenced is not expired"
                        } else {
                            ""
                        },
                    ),
                    alloc,
                }
                .into());
            }
            rec.incarnation
        };
        self.simple(Command::RetireAlloc { alloc, incarnation })
            .await
    }

    async fn simple(&self, cmd: Command) -> Result<pb::RegisterAllocReply, Error> {
        self.require_leader()?;
        match self.write(cmd).await? {
            Reply::Registered { route_version } => Ok(pb::RegisterAllocReply { route_version }),
            r => Err(unexpected(r)),
        }
    }
}

/// Runs a membership change as its own task, so it ends as it would have
/// if its caller goes away (a call cut short during a catch-up would
/// otherwise leave a learner behind).
async fn to_the_end<T: Send + 'static>(
    change: impl std::future::Future<Output = Result<T, Error>> + Send + 'static,
) -> Result<T, Error> {
    tokio::spawn(change)
        .await
        .map_err(|e| Error::Internal(format!("membership change: {e}")))?
}

/// Raft node ids start at 1 (0 reads as "none" in statuses).
fn check_member_id(id: NodeId) -> Result<NodeId, Error> {
    if id == 0 {
        return Err(Error::Invalid("store member id must be at least 1".into()));
    }
    Ok(id)
}

#[tonic::async_trait]
impl pb::store_admin_server::StoreAdmin for AdminService {
    async fn assign(
        &self,
        req: Request<pb::AssignRequest>,
    ) -> Result<Response<pb::AssignReply>, Status> {
        self.0.auth.require_operator(&req)?;
        Ok(Response::new(self.0.assign(req.into_inner()).await?))
    }

    async fn set_draining(
        &self,
        req: Request<pb::SetDrainingRequest>,
    ) -> Result<Response<pb::RegisterAllocReply>, Status> {
        self.0.auth.require_operator(&req)?;
        let r = req.into_inner();
        let cmd = Command::SetDraining {
            alloc: check_id(&r.alloc_id)?,
            draining: r.draining,
        };
        Ok(Response::new(self.0.simple(cmd).await?))
    }

    async fn set_lease(
        &self,
        req: Request<pb::SetLeaseRequest>,
    ) -> Result<Response<pb::SetLeaseReply>, Status> {
        self.0.auth.require_operator(&req)?;
        Ok(Response::new(self.0.set_lease(req.into_inner()).await?))
    }

    async fn fence_alloc(
        &self,
        req: Request<pb::FenceAllocRequest>,
    ) -> Result<Response<pb::RegisterAllocReply>, Status> {
        self.0.auth.require_operator(&req)?;
        let r = req.into_inner();
        let cmd = Command::FenceAlloc {
            alloc: check_id(&r.alloc_id)?,
            incarnation: r.incarnation,
        };
        Ok(Response::new(self.0.simple(cmd).await?))
    }

    async fn retire_alloc(
        &self,
        req: Request<pb::RetireAllocRequest>,
    ) -> Result<Response<pb::RegisterAllocReply>, Status> {
        self.0.auth.require_operator(&req)?;
        let alloc = check_id(&req.into_inner().alloc_id)?;
        Ok(Response::new(self.0.retire(alloc).await?))
    }

    async fn status(
        &self,
        req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StoreStatus>, Status> {
        self.0.auth.require_operator(&req)?;
        Ok(Response::new(self.0.status_now()))
    }

    async fn add_member(
        &self,
        req: Request<pb::AddMemberRequest>,
    ) -> Result<Response<pb::MembershipReply>, Status> {
        self.0.auth.require_operator(&req)?;
        let (api, r, limit) = (self.0.clone(), req.into_inner(), self.1);
        let change = async move { api.add_member_checked(r, limit).await };
        Ok(Response::new(to_the_end(change).await?))
    }

    async fn snapshot(
        &self,
        req: Request<pb::SnapshotRequest>,
    ) -> Result<Response<pb::SnapshotReply>, Status> {
        self.0.auth.require_operator(&req)?;
        // Leave the admin plane's timeout a second to carry the answer.
        let within = self.1.saturating_sub(Duration::from_secs(1));
        Ok(Response::new(self.0.snapshot(within).await?))
    }

    async fn backup(
        &self,
        req: Request<pb::BackupRequest>,
    ) -> Result<Response<pb::BackupReply>, Status> {
        self.0.auth.require_operator(&req)?;
        Ok(Response::new(self.0.backup().await?))
    }

    async fn remove_member(
        &self,
        req: Request<pb::RemoveMemberRequest>,
    ) -> Result<Response<pb::MembershipReply>, Status> {
        self.0.auth.require_operator(&req)?;
        let id = check_member_id(req.into_inner().id)?;
        self.0.require_leader()?;
        let api = self.0.clone();
        let change = async move { api.remove_member(id).await };
        Ok(Response::new(to_the_end(change).await?))
    }

    async fn create_id_space(
        &self,
        req: Request<pb::CreateIdSpaceRequest>,
    ) -> Result<Response<pb::CreateIdSpaceReply>, Status> {
        self.0.auth.require_operator(&req)?;
        Ok(Response::new(
            self.0.create_id_space(req.into_inner()).await?,
        ))
    }

    async fn id_spaces(
        &self,
        req: Request<pb::IdSpacesRequest>,
    ) -> Result<Response<pb::IdSpacesReply>, Status> {
        self.0.auth.require_operator(&req)?;
        Ok(Response::new(self.0.id_spaces(req.into_inner()).await?))
    }
}
