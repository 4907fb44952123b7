//! The AllocSvr's gRPC services, one per plane, and the one mapping of its
//! errors to statuses.
//!
//! - client plane, [`ClientService`] (`Alloc`): `Next`, `NextBatch`,
//!   `Current` (through the [`Front`]: any uid of the cluster, forwarded
//!   to its owner unless the call was itself forwarded), `Routes`,
//!   `Status`;
//! - peer plane, [`PeerService`] (`AllocPeer`): `Adopt`, from another
//!   AllocSvr handing a section over (any AllocSvr's certificate);
//! - admin plane, [`AdminService`] (`AllocAdmin`): `Handoff`, `Status`
//!   (an operator's certificate).
//!
//! The hot path is the allocator's: locate the section, one CAS. This layer
//! adds only the request decoding tonic already did, the lease check (a
//! clock read and two atomic loads), one atomic load for the route version,
//! and, for a batch, one reused output vector. Errors are mapped to gRPC
//! statuses here and nowhere else ([`Shared::status`]), each with an
//! `ErrorDetail` the client acts on (promise 5); a not-owner answer names
//! the owner's address and the route version, never the table itself, so
//! its size does not grow with the table: a client whose table is older
//! than the version fetches it (`Routes`) and retries at once.

use std::sync::Arc;

use seqsvr_core::{Place, SectionId};
use seqsvr_net::{Auth, Role};
use seqsvr_proto::{self as pb, status_with, ErrorDetail, ErrorKind};
use tonic::{Code, Request, Response, Status};

use crate::error::{AllocError, CallError, ForwardError};
use crate::front::Front;
use crate::handoff;
use crate::ownership::AdoptRefusal;
use crate::shared::Shared;

/// The one mapping of this crate's errors to statuses, beside the services
/// that answer with it.
impl Shared {
    /// The status for an error: the one mapping of this crate's errors to
    /// gRPC (promise 5; table in `docs/architecture/alloc.md`, Errors).
    pub fn status(&self, e: &CallError) -> Status {
        if let CallError::Starting { .. } = e {
            return starting_status(e);
        }
        let (code, d) = self.error_detail(e);
        status_with(code, e.to_string(), d)
    }

    /// The gRPC code and `ErrorDetail` of an error: what [`Self::status`]
    /// sends, and what every other door (HTTP) answers with, so each door
    /// names the same kinds. Counts the error by kind.
    pub fn error_detail(&self, e: &CallError) -> (Code, ErrorDetail) {
        let mut d = ErrorDetail::default();
        let (code, kind, retryable, route) = match e {
            CallError::Alloc(a) => self.alloc_detail(a, &mut d),
            CallError::Adopt(r) => self.adopt_detail(r, &mut d),
            CallError::Forward(f) => forward_detail(f, &mut d),
            CallError::LeaseExpired { .. }
            | CallError::Fenced { .. }
            | CallError::Starting { .. } => serving_detail(e, &mut d),
            CallError::Store(seqsvr_store_api::Error::Rejected(
                seqsvr_store_api::Rejection::Ids { .. }
                | seqsvr_store_api::Rejection::Counter { .. },
            ))
            | CallError::ClockBehind { .. }
            | CallError::IdCeiling { .. }
            | CallError::IdUnavailable { .. } => ids_detail(e, &mut d),
            _ => self.request_detail(e, &mut d),
        };
        d.kind = kind as i32;
        d.retryable = retryable;
        if route {
            // The version and the set, not the table (O(1) whatever the
            // table's size): a caller with an older table fetches it.
            let t = &self.routes().wire;
            d.route_version = t.version;
            d.set = t.set;
        }
        self.metrics.error(kind);
        (code, d)
    }

    /// [`Self::error_detail`] of a request refused as such (invalid, a
    /// section not in the set, not permitted) or failed (the store, a
    /// fault of this process).
    fn request_detail(&self, e: &CallError, d: &mut ErrorDetail) -> Mapped {
        match e {
            CallError::Invalid(reason) => {
                d.reason = reason.clone();
                let kind = ErrorKind::InvalidRequest;
                (Code::InvalidArgument, kind, false, false)
            }
            CallError::UnknownSection { section } => {
                at(d, *section);
                d.count = self.alloc.spec().section_count();
                (Code::OutOfRange, ErrorKind::UnknownSection, false, false)
            }
            CallError::Denied(reason) => {
                d.reason = reason.clone();
                let kind = ErrorKind::PermissionDenied;
                (Code::PermissionDenied, kind, false, false)
            }
            CallError::Internal(reason) => {
                d.reason = reason.clone();
                (Code::Internal, ErrorKind::Internal, false, false)
            }
            CallError::Store(s) if s.is_retryable() => {
                d.reason = s.to_string();
                (Code::Unavailable, ErrorKind::NoLeader, true, false)
            }
            CallError::Store(s) => {
                d.reason = s.to_string();
                (Code::Internal, ErrorKind::Internal, false, false)
            }
            other => unreachable!("{other:?} has a detail of its own"),
        }
    }

    /// [`Self::error_detail`] of an allocator refusal.
    fn alloc_detail(&self, a: &AllocError, d: &mut ErrorDetail) -> Mapped {
        match a {
            AllocError::OutOfRange { .. } => (Code::OutOfRange, ErrorKind::OutOfRange, false, true),
            AllocError::NotOwner { section } => {
                at(d, *section);
                // A section this set no longer (or never) serves is
                // answered with where to look: the client refreshes
                // its directory (docs/architecture/sets.md).
                let routes = self.routes();
                let t = &routes.table;
                d.directory_version = t.directory.as_ref().map_or(0, |x| x.version);
                match t.placement.place_of(*section) {
                    Place::Moved { to } => {
                        d.to_set = to;
                        (Code::Unavailable, ErrorKind::Moved, true, true)
                    }
                    Place::Absent => (Code::Unavailable, ErrorKind::NotServed, true, true),
                    Place::Serving => {
                        if let Some(e) = t.entry_for_section(*section) {
                            d.owner_addr = e.addr.clone();
                            d.owner_alloc = e.alloc.clone();
                        }
                        (Code::Unavailable, ErrorKind::NotOwner, true, true)
                    }
                }
            }
            AllocError::Exhausted { section } => {
                at(d, *section);
                (Code::Unavailable, ErrorKind::CeilingExhausted, true, false)
            }
            AllocError::UnknownSection { section } => {
                at(d, *section);
                (Code::OutOfRange, ErrorKind::UnknownSection, false, false)
            }
            AllocError::InvalidCount { .. } | AllocError::InvalidName(_) => {
                d.reason = a.to_string();
                (
                    Code::InvalidArgument,
                    ErrorKind::InvalidRequest,
                    false,
                    false,
                )
            }
            AllocError::Store(s) if s.is_transient() => {
                (Code::Unavailable, ErrorKind::NoLeader, true, false)
            }
            AllocError::CounterMaxReached { name, max } => {
                d.counter_name = name.as_bytes().to_vec();
                d.current = *max;
                d.reason = a.to_string();
                let kind = ErrorKind::CounterMaxReached;
                (Code::FailedPrecondition, kind, false, false)
            }
            _ => (Code::Internal, ErrorKind::Internal, false, false),
        }
    }

    /// [`Self::error_detail`] of a refused adopt.
    fn adopt_detail(&self, r: &AdoptRefusal, d: &mut ErrorDetail) -> Mapped {
        let refused = (Code::FailedPrecondition, false, false);
        let (kind, (code, retryable, route)) = match r {
            AdoptRefusal::OwnedElsewhere { section, owner } => {
                at(d, *section);
                d.alloc = owner.clone().unwrap_or_default();
                (ErrorKind::OwnedElsewhere, refused)
            }
            AdoptRefusal::OtherIncarnation { section, holder } => {
                at(d, *section);
                d.alloc = self.id.clone();
                d.incarnation = *holder;
                (ErrorKind::OwnedElsewhere, refused)
            }
            AdoptRefusal::StaleEpoch {
                section,
                named,
                current,
            } => {
                at(d, *section);
                (d.given, d.current) = (*named, *current);
                (ErrorKind::StaleEpoch, refused)
            }
            AdoptRefusal::NoRoom { section, .. } => {
                at(d, *section);
                d.reason = r.to_string();
                (ErrorKind::Internal, (Code::Internal, false, false))
            }
        };
        (code, kind, retryable, route)
    }
}

/// The code, kind, retryability and whether route facts are attached.
type Mapped = (Code, ErrorKind, bool, bool);

/// [`Shared::error_detail`] of a call refused for this process's
/// state: its lease, a fence, start-up.
fn serving_detail(e: &CallError, d: &mut ErrorDetail) -> Mapped {
    match e {
        CallError::LeaseExpired { .. } => (Code::Unavailable, ErrorKind::LeaseExpired, true, true),
        CallError::Fenced { alloc, incarnation } => {
            d.alloc = alloc.clone();
            d.given = *incarnation;
            (Code::Unavailable, ErrorKind::StaleIncarnation, true, true)
        }
        CallError::Starting {
            alloc,
            reason,
            retry_after_ms,
        } => {
            d.alloc = alloc.clone();
            d.reason = reason.clone();
            d.retry_after_ms = *retry_after_ms;
            (Code::Unavailable, ErrorKind::NotServingYet, true, false)
        }
        other => unreachable!("{other:?} is not about serving"),
    }
}

/// [`Shared::error_detail`] of an id call's refusal: the store's
/// (an unknown namespace, worker ids exhausted) or this process's (its
/// clock, its ceiling, its worker id).
fn ids_detail(e: &CallError, d: &mut ErrorDetail) -> Mapped {
    match e {
        CallError::Store(seqsvr_store_api::Error::Rejected(
            r @ (seqsvr_store_api::Rejection::Ids { .. }
            | seqsvr_store_api::Rejection::Counter { .. }),
        )) => {
            // An id namespace refused by the store (unknown, worker
            // ids exhausted, time ran out): passed on as it said it.
            let (code, kind) = seqsvr_store_api::error::rejection_detail(r, d);
            (code, kind, false, false)
        }
        CallError::ClockBehind {
            namespace,
            behind_ms,
        } => {
            d.id_namespace = namespace.clone();
            d.retry_after_ms = (*behind_ms).max(1);
            (Code::Unavailable, ErrorKind::ClockBehind, true, false)
        }
        CallError::IdCeiling {
            namespace,
            retry_after_ms,
        } => {
            d.id_namespace = namespace.clone();
            d.retry_after_ms = *retry_after_ms;
            (Code::Unavailable, ErrorKind::IdCeilingReached, true, false)
        }
        CallError::IdUnavailable {
            namespace,
            reason,
            retry_after_ms,
        } => {
            d.id_namespace = namespace.clone();
            d.reason = reason.clone();
            d.retry_after_ms = *retry_after_ms;
            (
                Code::Unavailable,
                ErrorKind::IdWorkerUnavailable,
                true,
                false,
            )
        }
        other => unreachable!("{other:?} is not an id call's"),
    }
}

/// Marks the detail as about `section`.
fn at(d: &mut ErrorDetail, section: SectionId) {
    d.section = section;
    d.has_section = true;
}

/// [`Shared::error_detail`] of a forwarded call's failure: retryable, with
/// the delay, never a route fact (the caller of a door needs none, and a
/// wrong-node answer is never passed through; docs/architecture/forwarding.md).
fn forward_detail(f: &ForwardError, d: &mut ErrorDetail) -> Mapped {
    match f {
        ForwardError::OwnerUnavailable {
            reason,
            retry_after_ms,
            ..
        } => {
            d.reason = reason.clone();
            d.retry_after_ms = *retry_after_ms;
            (Code::Unavailable, ErrorKind::OwnerUnavailable, true, false)
        }
        ForwardError::Overloaded {
            owner,
            retry_after_ms,
            ..
        } => {
            d.addr = owner.clone();
            d.reason = f.to_string();
            d.retry_after_ms = *retry_after_ms;
            (Code::ResourceExhausted, ErrorKind::Overloaded, true, false)
        }
        ForwardError::Owner {
            kind,
            message,
            retry_after_ms,
        } => {
            d.reason = message.clone();
            d.retry_after_ms = *retry_after_ms;
            (Code::Unavailable, *kind, true, false)
        }
    }
}

/// The status of a start-up answer (`NOT_SERVING_YET`, retryable, with the
/// reason and the delay; no route table: the node has none yet). Built
/// without a [`Shared`], which does not exist before the node serves.
pub(crate) fn starting_status(e: &CallError) -> Status {
    let mut d = ErrorDetail {
        kind: ErrorKind::NotServingYet as i32,
        retryable: true,
        ..Default::default()
    };
    if let CallError::Starting {
        alloc,
        reason,
        retry_after_ms,
    } = e
    {
        d.alloc = alloc.clone();
        d.reason = reason.clone();
        d.retry_after_ms = *retry_after_ms;
    }
    status_with(Code::Unavailable, e.to_string(), d)
}

/// Whether a call was forwarded by another AllocSvr: it is answered
/// from memory or refused, never forwarded again (one hop;
/// docs/architecture/forwarding.md). Read only after a local refusal, so
/// the owner's hot path never looks at the metadata.
fn forwarded<T>(req: &Request<T>) -> bool {
    req.metadata().contains_key(seqsvr_client::FORWARDED_BY)
}

/// The client plane (`Alloc`): what IM backends call. Answers every uid
/// of the cluster through the [`Front`]: its own from memory, the others
/// by forwarding to their owner.
#[derive(Clone, Debug)]
pub struct ClientService {
    /// Answers `Next`, `NextBatch` and `Current`.
    pub front: Arc<Front>,
}

#[tonic::async_trait]
impl pb::alloc_server::Alloc for ClientService {
    async fn next(&self, req: Request<pb::NextRequest>) -> Result<Response<pb::NextReply>, Status> {
        let (uid, count) = (req.get_ref().uid, req.get_ref().count);
        let name = &req.get_ref().name;
        let f = &self.front;
        let answer = if !name.is_empty() {
            // A named counter: its own counter, wherever it is served.
            match f.local_next_name(name, count).await {
                Ok(seq) => Ok(seq),
                Err(e) if e.is_elsewhere() && !forwarded(&req) => {
                    f.forward_next_name(name, count, e).await
                }
                Err(e) => Err(e),
            }
        } else if count > 1 {
            // `count` numbers reserved in one step, the last returned.
            match f.local_next_n(uid, count).await {
                Ok(seq) => Ok(seq),
                Err(e) if e.is_elsewhere() && !forwarded(&req) => {
                    f.forward_next_n(uid, count, e).await
                }
                Err(e) => Err(e),
            }
        } else {
            match f.local_next(uid).await {
                Ok(seq) => Ok(seq),
                Err(e) if e.is_elsewhere() && !forwarded(&req) => f.forward_next(uid, e).await,
                Err(e) => Err(e),
            }
        };
        let seq = answer.map_err(|e| f.shared().status(&e))?;
        Ok(Response::new(pb::NextReply {
            seq,
            route_version: f.route_version(),
        }))
    }

    async fn next_batch(
        &self,
        req: Request<pb::NextBatchRequest>,
    ) -> Result<Response<pb::NextBatchReply>, Status> {
        let uids = &req.get_ref().uids;
        let f = &self.front;
        let mut seqs = Vec::with_capacity(uids.len());
        let seqs = match f.local_next_batch(uids, &mut seqs).await {
            Ok(()) => Ok(seqs),
            Err(e) if e.is_elsewhere() && !forwarded(&req) => f.forward_batch(uids, seqs, e).await,
            Err(e) => Err(e),
        }
        .map_err(|e| f.shared().status(&e))?;
        Ok(Response::new(pb::NextBatchReply {
            seqs,
            route_version: f.route_version(),
        }))
    }

    /// Linearizable like `next`: answered from memory only with a valid
    /// lease and for a section served here now, else by its owner.
    async fn current(
        &self,
        req: Request<pb::CurrentRequest>,
    ) -> Result<Response<pb::CurrentReply>, Status> {
        let (uid, name) = (req.get_ref().uid, &req.get_ref().name);
        let f = &self.front;
        let local = if name.is_empty() {
            f.local_current(uid)
        } else {
            f.local_current_name(name)
        };
        let seq = match local {
            Ok(seq) => Ok(seq),
            Err(e) if e.is_elsewhere() && !forwarded(&req) => {
                if name.is_empty() {
                    f.forward_current(uid, e).await
                } else {
                    f.forward_current_name(name, e).await
                }
            }
            Err(e) => Err(e),
        }
        .map_err(|e| f.shared().status(&e))?;
        Ok(Response::new(pb::CurrentReply {
            seq,
            route_version: f.route_version(),
        }))
    }

    async fn routes(
        &self,
        _req: Request<pb::GetRoutesRequest>,
    ) -> Result<Response<pb::RouteTable>, Status> {
        Ok(Response::new(self.front.shared().route_table()))
    }

    async fn status(
        &self,
        _req: Request<pb::AllocStatusRequest>,
    ) -> Result<Response<pb::AllocStatus>, Status> {
        Ok(Response::new(self.front.shared().alloc_status()))
    }
    async fn next_id(
        &self,
        req: Request<pb::NextIdRequest>,
    ) -> Result<Response<pb::NextIdReply>, Status> {
        let r = req.get_ref();
        let f = &self.front;
        let ids = f
            .next_ids(&r.namespace, r.count)
            .await
            .map_err(|e| f.shared().status(&e))?;
        let worker = match (ids.first(), f.ids()) {
            (Some(&id), Some(w)) => w.worker_of(&r.namespace, id),
            _ => 0,
        };
        Ok(Response::new(pb::NextIdReply { ids, worker }))
    }

    async fn decode_id(
        &self,
        req: Request<pb::DecodeIdRequest>,
    ) -> Result<Response<pb::DecodeIdReply>, Status> {
        let r = req.get_ref();
        let f = &self.front;
        let (d, layout) = f
            .decode_id(&r.namespace, r.id)
            .await
            .map_err(|e| f.shared().status(&e))?;
        Ok(Response::new(pb::DecodeIdReply {
            namespace: r.namespace.clone(),
            tick: d.tick,
            unix_ms: d.unix_ms,
            worker: d.worker,
            sequence: d.seq,
            layout: Some((&layout).into()),
        }))
    }
}

/// The peer plane (`AllocPeer`): adopts from other AllocSvrs.
#[derive(Clone, Debug)]
pub struct PeerService {
    /// State shared with the node.
    pub shared: Arc<Shared>,
    /// How callers are identified on this listener.
    pub auth: Auth,
}

#[tonic::async_trait]
impl pb::alloc_peer_server::AllocPeer for PeerService {
    async fn adopt(
        &self,
        req: Request<pb::AdoptRequest>,
    ) -> Result<Response<pb::AdoptReply>, Status> {
        let s = &self.shared;
        require_any_alloc(self.auth, &req).map_err(|e| s.status(&e))?;
        let installed = handoff::adopt(s, &req.get_ref().sections)
            .await
            .map_err(|e| s.status(&e))?;
        Ok(Response::new(pb::AdoptReply { installed }))
    }

    /// An operator's counter call passed on by another AllocSvr, which
    /// checked the operator's certificate; applied here as the owner, or
    /// refused (never passed on again).
    async fn counter(
        &self,
        req: Request<pb::CounterRequest>,
    ) -> Result<Response<pb::CounterReply>, Status> {
        let s = &self.shared;
        require_any_alloc(self.auth, &req).map_err(|e| s.status(&e))?;
        let reply = crate::counters::counter_call(s, req.into_inner(), true).await?;
        Ok(Response::new(reply))
    }
}

/// Passes a caller with any AllocSvr's certificate (the one handing a
/// section over may be any AllocSvr of the cluster; what it says is
/// checked with the store anyway). Without TLS every caller is trusted.
fn require_any_alloc<T>(auth: Auth, req: &Request<T>) -> Result<(), CallError> {
    if auth == Auth::Insecure {
        return Ok(());
    }
    match auth.caller(req) {
        Ok(Role::Alloc(_)) => Ok(()),
        Ok(other) => Err(CallError::Denied(format!(
            "adopt needs an AllocSvr's certificate (alloc:<id>); the caller presented {other}"
        ))),
        Err(st) => Err(CallError::Denied(st.message().to_string())),
    }
}

/// The admin plane (`AllocAdmin`): operators' handoffs and status.
#[derive(Clone, Debug)]
pub struct AdminService {
    /// State shared with the node.
    pub shared: Arc<Shared>,
    /// How callers are identified on this listener.
    pub auth: Auth,
}

impl AdminService {
    fn operator<T>(&self, req: &Request<T>) -> Result<(), Status> {
        self.auth.require_operator(req).map(|_| ()).map_err(|st| {
            self.shared
                .status(&CallError::Denied(st.message().to_string()))
        })
    }

    /// An operator, or this AllocSvr itself (its own certificate, which a
    /// preStop hook in its pod holds): who may stop it the planned way.
    fn operator_or_self<T>(&self, req: &Request<T>) -> Result<(), Status> {
        let denied = |msg: String| self.shared.status(&CallError::Denied(msg));
        match self.auth.caller(req) {
            Ok(Role::Operator(_)) => Ok(()),
            Ok(Role::Alloc(id)) if id == self.shared.id => Ok(()),
            Ok(other) => Err(denied(format!(
                "drain needs an operator's certificate or this AllocSvr's own ({}); the \
                 caller presented {other}",
                self.shared.id
            ))),
            Err(st) => Err(denied(st.message().to_string())),
        }
    }

    /// An operator, or a replica of this AllocSvr's own set's store group:
    /// its leader asks for the handoffs of a rebalance
    /// (docs/operations.md, Automatic rebalancing). Every move is checked
    /// with the store anyway; another set's replica, whose group routes
    /// nothing here, is refused.
    fn operator_or_own_store<T>(&self, req: &Request<T>) -> Result<(), Status> {
        let set = self.shared.alloc.spec().set_id;
        let denied = |msg: String| self.shared.status(&CallError::Denied(msg));
        match self.auth.caller(req) {
            Ok(Role::Operator(_)) => Ok(()),
            Ok(Role::Store(s)) if s.set == set => Ok(()),
            Ok(other) => Err(denied(format!(
                "handoff needs an operator's certificate or one of set {set}'s store \
                 replicas'; the caller presented {other}"
            ))),
            Err(st) => Err(denied(st.message().to_string())),
        }
    }
}

#[tonic::async_trait]
impl pb::alloc_admin_server::AllocAdmin for AdminService {
    async fn handoff(
        &self,
        req: Request<pb::AllocHandoffRequest>,
    ) -> Result<Response<pb::AllocHandoffReply>, Status> {
        self.operator_or_own_store(&req)?;
        let moves = req.into_inner().moves;
        // On a task of its own: a caller that goes away must not abandon
        // a move between its release and the store's answer (the section
        // would stay released until the next renewal).
        let shared = self.shared.clone();
        let task = tokio::spawn(async move { handoff::move_sections(&shared, &moves).await });
        let results = task.await.map_err(|e| {
            self.shared
                .status(&CallError::Internal(format!("handoff task failed: {e}")))
        })?;
        Ok(Response::new(pb::AllocHandoffReply { results }))
    }

    async fn drain(
        &self,
        req: Request<pb::AllocDrainRequest>,
    ) -> Result<Response<pb::AllocDrainReply>, Status> {
        self.operator_or_self(&req)?;
        let s = &self.shared;
        let sections = s.alloc.served_sections().len() as u32;
        let already = s.stopping.load(std::sync::atomic::Ordering::Acquire);
        let already_stopping = s.stop_asked.ask() || already;
        tracing::info!(
            sections,
            already_stopping,
            "drain asked over the admin plane: stopping the planned way"
        );
        Ok(Response::new(pb::AllocDrainReply {
            sections,
            already_stopping,
        }))
    }

    async fn status(
        &self,
        req: Request<pb::AllocStatusRequest>,
    ) -> Result<Response<pb::AllocStatus>, Status> {
        self.operator(&req)?;
        Ok(Response::new(self.shared.alloc_status()))
    }

    async fn release(
        &self,
        req: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseReply>, Status> {
        self.operator(&req)?;
        let s = &self.shared;
        let sections = req.into_inner().sections;
        if sections.len() > seqsvr_core::MAX_SECTIONS_PER_CALL as usize {
            return Err(s.status(&CallError::Invalid(format!(
                "at most {} sections per call",
                seqsvr_core::MAX_SECTIONS_PER_CALL
            ))));
        }
        if let Some(x) = sections
            .iter()
            .find(|x| !s.alloc.spec().has_section(x.section))
        {
            return Err(s.status(&CallError::UnknownSection { section: x.section }));
        }
        Ok(Response::new(pb::ReleaseReply {
            released: s.release(&sections),
            alloc_id: s.id.clone(),
            incarnation: s.incarnation(),
        }))
    }

    async fn refresh(
        &self,
        req: Request<pb::RefreshRequest>,
    ) -> Result<Response<pb::RefreshReply>, Status> {
        self.operator(&req)?;
        self.shared.renew_now.notify_one();
        Ok(Response::new(pb::RefreshReply {}))
    }

    async fn counter(
        &self,
        req: Request<pb::CounterRequest>,
    ) -> Result<Response<pb::CounterReply>, Status> {
        self.operator(&req)?;
        let reply = crate::counters::counter_call(&self.shared, req.into_inner(), false).await?;
        Ok(Response::new(reply))
    }
}
