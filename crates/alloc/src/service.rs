//! The AllocSvr's gRPC services, one per plane, and the one mapping of its
//! errors to statuses.
//!
//! - client plane, [`ClientService`] (`Alloc`): `Next`, `NextBatch`,
//!   `Current`, `Routes`, `Status`;
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
//! `ErrorDetail` the client acts on (promise 5); a not-owner or
//! out-of-range answer carries the current route table so the client can
//! retry at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use seqsvr_core::{AllocId, Incarnation, SectionId, MAX_BATCH};
use seqsvr_net::{Auth, ClientTls, Role};
use seqsvr_proto::{self as pb, status_with, ErrorDetail, ErrorKind};
use seqsvr_store_api::{AllocAddrs, PeerClient};
use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};

use crate::allocator::Allocator;
use crate::error::{AllocError, CallError};
use crate::handoff::{PeerChannels, Released};
use crate::lease::Lease;
use crate::ownership::AdoptRefusal;

/// Who may change which sections this process serves, outside the hot
/// path: the renewal's reconciliation, handoffs resuming a section, adopts
/// installing one, and fencing all take this lock, so none of them acts on
/// a lease lapse it did not see (promise 3; see [`Shared::may_serve`]).
#[derive(Debug, Default)]
pub struct Ownership {
    /// Sections being handed off: stopped here, store handoff (or its
    /// check) in flight. Renewals neither claim nor drop them.
    pub releasing: BTreeMap<SectionId, Released>,
    /// How many granted renewals found the lease had lapsed. A decision
    /// based on a store read may be acted on only if this did not change
    /// since before the read: a lapse in between means the section may have
    /// moved away (and back) after the read.
    pub lapses: u64,
}

/// What the services share with the node's background tasks.
#[derive(Debug)]
pub struct Shared {
    /// The sections served.
    pub alloc: Arc<Allocator>,
    /// The version of the route table below (read on every reply).
    pub route_version: AtomicU64,
    /// The route table as last read from the store (attached to not-owner
    /// and out-of-range errors, served by `Routes`).
    pub routes: RwLock<Arc<pb::RouteTable>>,
    /// How long a call may wait for an exhausted section's raise.
    pub wait: Duration,
    /// This AllocSvr's lease.
    pub lease: Lease,
    /// Whether the store says this AllocSvr is being drained.
    pub draining: AtomicBool,
    /// Set once the store says this incarnation was replaced or fenced:
    /// nothing is served again by this process (promise 3).
    pub fenced: AtomicBool,
    /// Our id.
    pub id: AllocId,
    /// Our advertised addresses, one per plane.
    pub addrs: AllocAddrs,
    /// The store's peer plane (handoffs, section reads); each use sets its
    /// own deadline.
    pub store: PeerClient,
    /// TLS for dialing other AllocSvrs (adopt), if any.
    pub client_tls: Option<ClientTls>,
    /// Sections being released, and lease lapses seen.
    pub ownership: Mutex<Ownership>,
    /// Channels to other AllocSvrs' peer planes, by address (adopts).
    pub peers: PeerChannels,
    /// What this process counts.
    pub metrics: Arc<crate::metrics::AllocMetrics>,
}

impl Shared {
    /// This process's incarnation.
    pub fn incarnation(&self) -> Incarnation {
        self.alloc.incarnation()
    }

    /// Whether the lease is valid right now (promise 3: an AllocSvr whose
    /// lease ran out stops serving at once).
    #[inline]
    pub fn lease_ok(&self) -> bool {
        self.lease.valid_at(std::time::Instant::now())
    }

    /// Whether this process was replaced or fenced.
    #[inline]
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Whether a call that reads or hands out numbers may be served: only
    /// with a valid lease, and never once fenced (promise 3). The hot
    /// path's whole check: a clock read and two atomic loads.
    #[inline]
    pub fn admitted(&self) -> bool {
        self.lease_ok() && !self.is_fenced()
    }

    /// [`admitted`](Self::admitted), with the reason when not.
    pub fn admit(&self) -> Result<(), CallError> {
        if self.admitted() {
            Ok(())
        } else {
            Err(self.not_admitted())
        }
    }

    /// Why a call is not admitted (fenced, else lease expired).
    #[cold]
    pub fn not_admitted(&self) -> CallError {
        if self.is_fenced() {
            CallError::Fenced {
                alloc: self.id.clone(),
                incarnation: self.incarnation(),
            }
        } else {
            CallError::LeaseExpired {
                alloc: self.id.clone(),
            }
        }
    }

    /// Time left on the lease (negative once expired), in ms.
    pub fn lease_left_ms(&self) -> i64 {
        self.lease.left_ms(std::time::Instant::now())
    }

    /// The ownership lock (a panic elsewhere cannot leave it torn: every
    /// change under it is a single map insert/remove or counter bump).
    pub fn ownership(&self) -> MutexGuard<'_, Ownership> {
        self.ownership.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a decision taken from a store read made when the lapse
    /// count was `lapses_before` may be acted on now, under the ownership
    /// lock `own`: not fenced, the lease valid now, and no lapse seen since.
    /// Then the lease was valid all along since the read, so the store
    /// cannot have moved the section meanwhile (it moves sections only after
    /// the owner's lease has certainly expired; failover.md, Timing), and
    /// no renewal can drop it between this check and the action (promise 3).
    pub fn may_serve(&self, own: &Ownership, lapses_before: u64) -> bool {
        !self.is_fenced() && self.lease_ok() && own.lapses == lapses_before
    }

    /// Marks this process fenced and stops serving everything: the store
    /// says another incarnation holds our id, or an operator fenced us. It
    /// never serves again; a restart registers a new incarnation.
    pub fn fence(&self, why: &dyn std::fmt::Display) {
        let _own = self.ownership();
        if self.fenced.swap(true, Ordering::AcqRel) {
            return;
        }
        let dropped: Vec<SectionId> = self
            .alloc
            .served_sections()
            .into_iter()
            .filter(|&s| self.alloc.drop_section(s))
            .collect();
        tracing::error!(
            alloc = %self.id,
            incarnation = %format_args!("{:x}", self.incarnation()),
            dropped = dropped.len(),
            "this process was replaced or fenced in the store ({why}): every section dropped, \
             renewals stopped; it answers every call UNAVAILABLE from now on and must be restarted"
        );
    }

    /// Installs a newer route table.
    pub fn set_routes(&self, t: pb::RouteTable) {
        let v = t.version;
        *self.routes.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
        self.route_version.store(v, Ordering::Release);
    }

    /// The route table as last read.
    pub fn route_table(&self) -> pb::RouteTable {
        (**self.routes.read().unwrap_or_else(|e| e.into_inner())).clone()
    }

    fn version(&self) -> u64 {
        self.route_version.load(Ordering::Acquire)
    }

    /// This AllocSvr's own view, for `Status` on the client and admin planes.
    pub fn alloc_status(&self) -> pb::AllocStatus {
        pb::AllocStatus {
            alloc_id: self.id.clone(),
            addr: self.addrs.client.clone(),
            lease_left_ms: self.lease_left_ms(),
            sections: self.alloc.served_sections(),
            route_version: self.version(),
            draining: self.draining.load(Ordering::Relaxed),
            incarnation: self.incarnation(),
        }
    }

    /// The status for an error: the one mapping of this crate's errors to
    /// gRPC (promise 5; table in `docs/architecture/alloc.md`, Errors).
    pub fn status(&self, e: &CallError) -> Status {
        fn at(d: &mut ErrorDetail, section: SectionId) {
            d.section = section;
            d.has_section = true;
        }
        let mut d = ErrorDetail::default();
        let (code, kind, retryable, route) = match e {
            CallError::Alloc(a) => match a {
                AllocError::OutOfRange { .. } => {
                    (Code::OutOfRange, ErrorKind::OutOfRange, false, true)
                }
                AllocError::NotOwner { section } => {
                    at(&mut d, *section);
                    (Code::Unavailable, ErrorKind::NotOwner, true, true)
                }
                AllocError::Exhausted { section } => {
                    at(&mut d, *section);
                    (Code::Unavailable, ErrorKind::CeilingExhausted, true, false)
                }
                AllocError::UnknownSection { section } => {
                    at(&mut d, *section);
                    (Code::OutOfRange, ErrorKind::UnknownSection, false, false)
                }
                AllocError::Store(s) if s.is_transient() => {
                    (Code::Unavailable, ErrorKind::NoLeader, true, false)
                }
                _ => (Code::Internal, ErrorKind::Internal, false, false),
            },
            CallError::LeaseExpired { .. } => {
                (Code::Unavailable, ErrorKind::LeaseExpired, true, true)
            }
            CallError::Fenced { alloc, incarnation } => {
                d.alloc = alloc.clone();
                d.given = *incarnation;
                (Code::Unavailable, ErrorKind::StaleIncarnation, true, true)
            }
            CallError::Invalid(reason) => {
                d.reason = reason.clone();
                (
                    Code::InvalidArgument,
                    ErrorKind::InvalidRequest,
                    false,
                    false,
                )
            }
            CallError::UnknownSection { section } => {
                at(&mut d, *section);
                d.count = self.alloc.spec().section_count();
                (Code::OutOfRange, ErrorKind::UnknownSection, false, false)
            }
            CallError::Denied(reason) => {
                d.reason = reason.clone();
                (
                    Code::PermissionDenied,
                    ErrorKind::PermissionDenied,
                    false,
                    false,
                )
            }
            CallError::Adopt(r) => match r {
                AdoptRefusal::OwnedElsewhere { section, owner } => {
                    at(&mut d, *section);
                    d.alloc = owner.clone().unwrap_or_default();
                    (
                        Code::FailedPrecondition,
                        ErrorKind::OwnedElsewhere,
                        false,
                        false,
                    )
                }
                AdoptRefusal::OtherIncarnation { section, holder } => {
                    at(&mut d, *section);
                    d.alloc = self.id.clone();
                    d.incarnation = *holder;
                    (
                        Code::FailedPrecondition,
                        ErrorKind::OwnedElsewhere,
                        false,
                        false,
                    )
                }
                AdoptRefusal::StaleEpoch {
                    section,
                    named,
                    current,
                } => {
                    at(&mut d, *section);
                    (d.given, d.current) = (*named, *current);
                    (
                        Code::FailedPrecondition,
                        ErrorKind::StaleEpoch,
                        false,
                        false,
                    )
                }
                AdoptRefusal::NoRoom { section, .. } => {
                    at(&mut d, *section);
                    d.reason = r.to_string();
                    (Code::Internal, ErrorKind::Internal, false, false)
                }
            },
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
        };
        d.kind = kind as i32;
        d.retryable = retryable;
        if route {
            d.route = Some(self.route_table());
        }
        status_with(code, e.to_string(), d)
    }
}

/// The deadline of a call that may wait for a raise.
fn deadline(s: &Shared) -> Instant {
    Instant::now() + s.wait
}

/// The client plane (`Alloc`): what IM backends call.
#[derive(Clone, Debug)]
pub struct ClientService {
    /// State shared with the node.
    pub shared: Arc<Shared>,
}

#[tonic::async_trait]
impl pb::alloc_server::Alloc for ClientService {
    async fn next(&self, req: Request<pb::NextRequest>) -> Result<Response<pb::NextReply>, Status> {
        let uid = req.get_ref().uid;
        let s = &self.shared;
        if !s.admitted() {
            return Err(s.status(&s.not_admitted()));
        }
        let seq = match s.alloc.next(uid) {
            Ok(seq) => seq,
            Err(AllocError::Exhausted { .. }) => s
                .alloc
                .next_waiting(uid, deadline(s))
                .await
                .map_err(|e| s.status(&e.into()))?,
            Err(e) => return Err(s.status(&e.into())),
        };
        s.metrics.numbers.inc();
        Ok(Response::new(pb::NextReply {
            seq,
            route_version: s.version(),
        }))
    }

    async fn next_batch(
        &self,
        req: Request<pb::NextBatchRequest>,
    ) -> Result<Response<pb::NextBatchReply>, Status> {
        let uids = &req.get_ref().uids;
        let s = &self.shared;
        if uids.is_empty() || uids.len() > MAX_BATCH {
            let e = CallError::Invalid(format!(
                "a batch holds 1..={MAX_BATCH} uids, not {}",
                uids.len()
            ));
            return Err(s.status(&e));
        }
        if !s.admitted() {
            return Err(s.status(&s.not_admitted()));
        }
        let mut seqs = Vec::with_capacity(uids.len());
        if let Err(e) = s.alloc.next_batch(uids, &mut seqs) {
            if !matches!(e, AllocError::Exhausted { .. }) {
                return Err(s.status(&e.into()));
            }
            let done = seqs.len();
            s.alloc
                .next_batch_waiting(&uids[done..], &mut seqs, deadline(s))
                .await
                .map_err(|e| s.status(&e.into()))?;
        }
        s.metrics.numbers.inc_by(seqs.len() as u64);
        Ok(Response::new(pb::NextBatchReply {
            seqs,
            route_version: s.version(),
        }))
    }

    /// Linearizable like `next`: only with a valid lease, and only for a
    /// section served here now (not one being released). Memory of a
    /// section this process no longer owns may be below numbers its new
    /// owner handed out (promise 1).
    async fn current(
        &self,
        req: Request<pb::CurrentRequest>,
    ) -> Result<Response<pb::CurrentReply>, Status> {
        let s = &self.shared;
        if !s.admitted() {
            return Err(s.status(&s.not_admitted()));
        }
        let seq = s
            .alloc
            .current(req.get_ref().uid)
            .map_err(|e| s.status(&e.into()))?;
        Ok(Response::new(pb::CurrentReply {
            seq,
            route_version: s.version(),
        }))
    }

    async fn routes(
        &self,
        _req: Request<pb::GetRoutesRequest>,
    ) -> Result<Response<pb::RouteTable>, Status> {
        Ok(Response::new(self.shared.route_table()))
    }

    async fn status(
        &self,
        _req: Request<pb::AllocStatusRequest>,
    ) -> Result<Response<pb::AllocStatus>, Status> {
        Ok(Response::new(self.shared.alloc_status()))
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
        let installed = crate::handoff::adopt(s, &req.get_ref().sections)
            .await
            .map_err(|e| s.status(&e))?;
        Ok(Response::new(pb::AdoptReply { installed }))
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
}

#[tonic::async_trait]
impl pb::alloc_admin_server::AllocAdmin for AdminService {
    async fn handoff(
        &self,
        req: Request<pb::AllocHandoffRequest>,
    ) -> Result<Response<pb::AllocHandoffReply>, Status> {
        self.operator(&req)?;
        let moves = req.into_inner().moves;
        // On a task of its own: a caller that goes away must not abandon
        // a move between its release and the store's answer (the section
        // would stay released until the next renewal).
        let shared = self.shared.clone();
        let task = tokio::spawn(async move {
            let mut results = Vec::with_capacity(moves.len());
            for m in &moves {
                results.push(crate::handoff::move_section(&shared, m).await);
            }
            results
        });
        let results = task.await.map_err(|e| {
            self.shared
                .status(&CallError::Internal(format!("handoff task failed: {e}")))
        })?;
        Ok(Response::new(pb::AllocHandoffReply { results }))
    }

    async fn status(
        &self,
        req: Request<pb::AllocStatusRequest>,
    ) -> Result<Response<pb::AllocStatus>, Status> {
        self.operator(&req)?;
        Ok(Response::new(self.shared.alloc_status()))
    }
}
