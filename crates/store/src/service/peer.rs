//! The peer plane for AllocSvrs (`StorePeer`): registration, leases,
//! take-overs, raises and handoffs. Every call names the calling AllocSvr
//! and its incarnation; the certificate must name the same AllocSvr. These
//! calls are served by the leader only and never forwarded: a follower
//! answers NOT_LEADER naming the leader, and the AllocSvr calls it itself
//! (a forwarded call could be invented by the forwarder).
//!
//! Ownership is decided by the replicated state — owner, incarnation,
//! epoch — never by what a message says about itself (promise 3 against
//! ghosts and twins; see `docs/architecture/failover.md`).

use seqsvr_proto::{self as pb};
use seqsvr_store_api::{Error, Rejection};
use seqsvr_store_core::decision::{self, RenewalRefused};
use tonic::{Request, Response, Status};

use super::{check_addr, check_id, check_run, owned_runs, unexpected, StoreApi};
use crate::auth::require_peer;
use crate::types::{Command, Reply};

/// The `StorePeer` service.
#[derive(Clone)]
pub struct PeerService(pub StoreApi);

fn require_incarnation(i: u64) -> Result<u64, Error> {
    if i == 0 {
        return Err(Error::Invalid("incarnation must not be 0".into()));
    }
    Ok(i)
}

impl StoreApi {
    /// Registers an incarnation. A different registered incarnation is
    /// replaced only once the arbiter sees its lease certainly expired;
    /// until then the newcomer is a twin and refused, loudly. The check and
    /// the write happen under the arbiter's lock, so no renewal of the old
    /// incarnation can be granted in between.
    async fn register(&self, r: pb::RegisterAllocRequest) -> Result<pb::RegisterAllocReply, Error> {
        let alloc = check_id(&r.alloc_id)?;
        check_addr("address", &r.addr)?;
        check_addr("peer address", &r.peer_addr)?;
        check_addr("admin address", &r.admin_addr)?;
        let incarnation = require_incarnation(r.incarnation)?;
        self.require_leader()?;
        let _moves = self.arbiter.moves.lock().await;
        let replaces = {
            let a = self.sm.read();
            let view = self.arbiter.view(&a.state, std::time::Instant::now());
            match decision::replaced(&a.state, &view, &alloc, incarnation) {
                Err(Rejection::Twin { alloc, live, addr }) => {
                    tracing::error!(
                        %alloc,
                        live = format_args!("{live:x}"),
                        %addr,
                        newcomer = format_args!("{incarnation:x}"),
                        newcomer_addr = %r.addr,
                        "refusing a second process with a live AllocSvr's id"
                    );
                    return Err(Rejection::Twin { alloc, live, addr }.into());
                }
                Err(e) => return Err(e.into()),
                Ok(0) => 0,
                Ok(old) => {
                    tracing::warn!(%alloc, old = format_args!("{old:x}"),
                        new = format_args!("{incarnation:x}"), "replacing an AllocSvr incarnation whose lease expired");
                    old
                }
            }
        };
        let cmd = Command::RegisterAlloc {
            alloc,
            addr: r.addr,
            peer_addr: r.peer_addr,
            admin_addr: r.admin_addr,
            incarnation,
            replaces,
        };
        match self.write(cmd).await? {
            Reply::Registered { route_version } => Ok(pb::RegisterAllocReply { route_version }),
            r => Err(unexpected(r)),
        }
    }

    /// Grants a renewal after a quorum-confirmed barrier, to the registered
    /// incarnation only.
    async fn renew(&self, r: pb::RenewRequest) -> Result<pb::RenewReply, Error> {
        let alloc = check_id(&r.alloc_id)?;
        let incarnation = require_incarnation(r.incarnation)?;
        // The term we lead in *before* confirming: a grant is recorded
        // only if we still lead in it afterwards.
        let term = self.raft.metrics().borrow().current_term;
        self.barrier().await?;
        // Never between the arbiter's plan and its moves (see `Arbiter::moves`).
        let _moves = self.arbiter.moves.lock().await;
        let now = std::time::Instant::now();
        let a = self.sm.read();
        if !a.state.lease.set {
            // No terms chosen yet (a group being created): no lease to grant.
            self.metrics.renewal(false);
            return Err(Rejection::NotConfigured.into());
        }
        let known = r.known_sections_version;
        let granted = decision::renewal(
            &a.state,
            &self.arbiter,
            &alloc,
            incarnation,
            term,
            now,
            known,
        );
        self.metrics.renewal(granted.is_ok());
        let g = match granted {
            Ok(g) => g,
            Err(RenewalRefused::Rejected(e)) => return Err(e.into()),
            Err(RenewalRefused::LeadershipChanged) => {
                return Err(Error::NoLeader("leadership changed during renewal".into()))
            }
        };
        // The list only when it changed: a renewal costs O(changes).
        Ok(pb::RenewReply {
            lease_ms: g.terms.lease_ms,
            sections: if g.unchanged {
                Vec::new()
            } else {
                owned_runs(&a.state, &alloc)
            },
            route_version: a.state.route_version,
            draining: g.record.draining,
            sections_version: g.record.sections_version,
            sections_unchanged: g.unchanged,
        })
    }

    async fn take_over(&self, r: pb::TakeOverRequest) -> Result<pb::TakeOverReply, Error> {
        let alloc = check_id(&r.alloc_id)?;
        let incarnation = require_incarnation(r.incarnation)?;
        check_run(r.first_section, r.known_epochs.len())?;
        if r.count as usize != r.known_epochs.len() {
            return Err(Error::Invalid(format!(
                "count {} but {} known epochs",
                r.count,
                r.known_epochs.len()
            )));
        }
        let cmd = Command::TakeOver {
            alloc,
            incarnation,
            first: r.first_section,
            known: r.known_epochs,
        };
        match self.write(cmd).await? {
            Reply::TakenOver {
                grants,
                route_version,
            } => Ok(pb::TakeOverReply {
                grants: grants.iter().map(pb::SectionGrant::from).collect(),
                route_version,
            }),
            r => Err(unexpected(r)),
        }
    }

    async fn raise(&self, r: pb::RaiseRequest) -> Result<pb::RaiseReply, Error> {
        let cmd = Command::Raise {
            alloc: check_id(&r.alloc_id)?,
            incarnation: require_incarnation(r.incarnation)?,
            section: r.section,
            epoch: r.epoch,
            to: r.to,
        };
        match self.write(cmd).await? {
            Reply::Raised { max_seq } => Ok(pb::RaiseReply { max_seq }),
            r => Err(unexpected(r)),
        }
    }

    /// A planned stop's release ([`Command::StopAlloc`]): under the
    /// arbiter's lock, like a registration, so no renewal is granted to the
    /// stopping incarnation between its check and the write.
    async fn stopped(&self, r: pb::StoppedRequest) -> Result<pb::StoppedReply, Error> {
        let cmd = Command::StopAlloc {
            alloc: check_id(&r.alloc_id)?,
            incarnation: require_incarnation(r.incarnation)?,
        };
        self.require_leader()?;
        let _moves = self.arbiter.moves.lock().await;
        match self.write(cmd).await? {
            Reply::Stopped {
                released,
                route_version,
            } => Ok(pb::StoppedReply {
                released,
                route_version,
            }),
            r => Err(unexpected(r)),
        }
    }

    async fn handoff(&self, r: pb::HandoffRequest) -> Result<pb::HandoffReply, Error> {
        let to = check_id(&r.to_alloc)?;
        let cmd = Command::Handoff {
            from: check_id(&r.from_alloc)?,
            incarnation: require_incarnation(r.incarnation)?,
            to: to.clone(),
            section: r.section,
            epoch: r.epoch,
        };
        match self.write(cmd).await? {
            Reply::HandedOff {
                grant,
                route_version,
            } => {
                let peer = self
                    .sm
                    .read()
                    .state
                    .allocs
                    .get(&to)
                    .map(|a| a.peer_addr.clone());
                Ok(pb::HandoffReply {
                    grant: Some((&grant).into()),
                    route_version,
                    to_peer_addr: peer.unwrap_or_default(),
                })
            }
            r => Err(unexpected(r)),
        }
    }
}

#[tonic::async_trait]
impl pb::store_peer_server::StorePeer for PeerService {
    async fn register_alloc(
        &self,
        req: Request<pb::RegisterAllocRequest>,
    ) -> Result<Response<pb::RegisterAllocReply>, Status> {
        let api = &self.0;
        api.require_alloc(&req, &req.get_ref().alloc_id)?;
        api.at_leader(req, |r| api.register(r)).await
    }

    async fn renew(
        &self,
        req: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewReply>, Status> {
        let api = &self.0;
        api.require_alloc(&req, &req.get_ref().alloc_id)?;
        api.at_leader(req, |r| api.renew(r)).await
    }

    async fn stopped(
        &self,
        req: Request<pb::StoppedRequest>,
    ) -> Result<Response<pb::StoppedReply>, Status> {
        let api = &self.0;
        api.require_alloc(&req, &req.get_ref().alloc_id)?;
        api.at_leader(req, |r| api.stopped(r)).await
    }

    async fn take_over(
        &self,
        req: Request<pb::TakeOverRequest>,
    ) -> Result<Response<pb::TakeOverReply>, Status> {
        let api = &self.0;
        api.require_alloc(&req, &req.get_ref().alloc_id)?;
        api.at_leader(req, |r| api.take_over(r)).await
    }

    async fn raise(
        &self,
        req: Request<pb::RaiseRequest>,
    ) -> Result<Response<pb::RaiseReply>, Status> {
        let api = &self.0;
        api.require_alloc(&req, &req.get_ref().alloc_id)?;
        api.at_leader(req, |r| api.raise(r)).await
    }

    async fn handoff(
        &self,
        req: Request<pb::HandoffRequest>,
    ) -> Result<Response<pb::HandoffReply>, Status> {
        let api = &self.0;
        api.require_alloc(&req, &req.get_ref().from_alloc)?;
        api.at_leader(req, |r| api.handoff(r)).await
    }

    async fn read_sections(
        &self,
        req: Request<pb::ReadSectionsRequest>,
    ) -> Result<Response<pb::ReadSectionsReply>, Status> {
        require_peer(self.0.auth, &req)?;
        self.0.routed_read_sections(req).await
    }

    async fn get_routes(
        &self,
        req: Request<pb::GetRoutesRequest>,
    ) -> Result<Response<pb::RouteTable>, Status> {
        require_peer(self.0.auth, &req)?;
        self.0.routed_routes(req).await
    }

    async fn status(
        &self,
        req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StoreStatus>, Status> {
        require_peer(self.0.auth, &req)?;
        Ok(Response::new(self.0.status_now()))
    }
    async fn claim_worker(
        &self,
        req: Request<pb::ClaimWorkerRequest>,
    ) -> Result<Response<pb::ClaimWorkerReply>, Status> {
        let api = &self.0;
        api.require_alloc(&req, &req.get_ref().alloc_id)?;
        api.at_leader(req, |r| api.claim_worker(r)).await
    }

    async fn raise_worker(
        &self,
        req: Request<pb::RaiseWorkerRequest>,
    ) -> Result<Response<pb::RaiseWorkerReply>, Status> {
        let api = &self.0;
        api.require_alloc(&req, &req.get_ref().alloc_id)?;
        api.at_leader(req, |r| api.raise_worker(r)).await
    }

    async fn release_worker(
        &self,
        req: Request<pb::ReleaseWorkerRequest>,
    ) -> Result<Response<pb::ReleaseWorkerReply>, Status> {
        let api = &self.0;
        api.require_alloc(&req, &req.get_ref().alloc_id)?;
        api.at_leader(req, |r| api.release_worker(r)).await
    }

    async fn id_spaces(
        &self,
        req: Request<pb::IdSpacesRequest>,
    ) -> Result<Response<pb::IdSpacesReply>, Status> {
        require_peer(self.0.auth, &req)?;
        let api = &self.0;
        api.at_leader(req, |r| api.id_spaces(r)).await
    }

    async fn counter_write(
        &self,
        req: Request<pb::CounterWriteRequest>,
    ) -> Result<Response<pb::CounterWriteReply>, Status> {
        let api = &self.0;
        api.require_alloc(&req, &req.get_ref().alloc)?;
        api.at_leader(req, |r| api.counter_write(r)).await
    }

    async fn counters(
        &self,
        req: Request<pb::CountersRequest>,
    ) -> Result<Response<pb::CountersReply>, Status> {
        require_peer(self.0.auth, &req)?;
        let api = &self.0;
        api.at_leader(req, |r| api.counters(r)).await
    }
}
