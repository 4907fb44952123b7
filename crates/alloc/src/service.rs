//! The AllocSvr's gRPC service: `Next`, `NextBatch`, `Current`, `Routes`.
//!
//! The hot path is the allocator's: locate the section, one CAS. This layer
//! adds only the request decoding tonic already did, one atomic load for
//! the route version, and, for a batch, one reused output vector. Errors are
//! mapped to gRPC statuses here and nowhere else, each with an
//! `ErrorDetail` the client acts on (promise 5); a not-owner or out-of-range
//! answer carries the current route table so the client can retry at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use seqsvr_core::MAX_BATCH;
use seqsvr_proto::{self as pb, status_with, ErrorDetail, ErrorKind};
use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};

use crate::allocator::Allocator;
use crate::error::AllocError;

/// What the service shares with the node's background tasks.
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
    pub lease: crate::lease::Lease,
    /// Whether the store says this AllocSvr is being drained.
    pub draining: AtomicBool,
    /// Our id.
    pub id: String,
    /// Our advertised address.
    pub addr: String,
    /// Where to hand sections off (planned moves).
    pub store: seqsvr_store::client::StoreClient,
}

impl Shared {
    /// Whether the lease is valid right now (promise 3: an AllocSvr whose
    /// lease ran out stops serving at once).
    #[inline]
    pub fn lease_ok(&self) -> bool {
        self.lease.valid_at(std::time::Instant::now())
    }

    /// Time left on the lease (negative once expired), in ms.
    pub fn lease_left_ms(&self) -> i64 {
        self.lease.left_ms(std::time::Instant::now())
    }

    fn lease_expired(&self) -> Status {
        let detail = ErrorDetail {
            kind: ErrorKind::LeaseExpired as i32,
            retryable: true,
            route: Some(self.route_table()),
            ..Default::default()
        };
        status_with(
            Code::Unavailable,
            format!("{}: lease expired, not serving", self.id),
            detail,
        )
    }

    /// Installs a newer route table.
    pub fn set_routes(&self, t: pb::RouteTable) {
        let v = t.version;
        *self.routes.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
        self.route_version.store(v, Ordering::Release);
    }

    fn route_table(&self) -> pb::RouteTable {
        (**self.routes.read().unwrap_or_else(|e| e.into_inner())).clone()
    }

    fn version(&self) -> u64 {
        self.route_version.load(Ordering::Acquire)
    }

    /// The status for an allocator error.
    pub fn status(&self, e: &AllocError) -> Status {
        let (code, kind, retryable, route) = match e {
            AllocError::OutOfRange { .. } => (Code::OutOfRange, ErrorKind::OutOfRange, false, true),
            AllocError::NotOwner { .. } => (Code::Unavailable, ErrorKind::NotOwner, true, true),
            AllocError::Exhausted { .. } => {
                (Code::Unavailable, ErrorKind::CeilingExhausted, true, false)
            }
            AllocError::Store(s) if s.is_transient() => {
                (Code::Unavailable, ErrorKind::NoLeader, true, false)
            }
            _ => (Code::Internal, ErrorKind::Internal, false, false),
        };
        let detail = ErrorDetail {
            kind: kind as i32,
            retryable,
            route: route.then(|| self.route_table()),
            ..Default::default()
        };
        status_with(code, e.to_string(), detail)
    }
}

fn invalid(msg: impl Into<String>) -> Status {
    let detail = ErrorDetail {
        kind: ErrorKind::InvalidRequest as i32,
        ..Default::default()
    };
    status_with(Code::InvalidArgument, msg, detail)
}

/// The gRPC service.
#[derive(Clone, Debug)]
pub struct AllocService {
    /// State shared with the node.
    pub shared: Arc<Shared>,
}

impl AllocService {
    fn deadline(&self) -> Instant {
        Instant::now() + self.shared.wait
    }
}

#[tonic::async_trait]
impl pb::alloc_server::Alloc for AllocService {
    async fn next(&self, req: Request<pb::NextRequest>) -> Result<Response<pb::NextReply>, Status> {
        let uid = req.get_ref().uid;
        let s = &self.shared;
        if !s.lease_ok() {
            return Err(s.lease_expired());
        }
        let seq = match s.alloc.next(uid) {
            Ok(seq) => seq,
            Err(AllocError::Exhausted { .. }) => s
                .alloc
                .next_waiting(uid, self.deadline())
                .await
                .map_err(|e| s.status(&e))?,
            Err(e) => return Err(s.status(&e)),
        };
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
        if uids.is_empty() || uids.len() > MAX_BATCH {
            return Err(invalid(format!(
                "a batch holds 1..={MAX_BATCH} uids, not {}",
                uids.len()
            )));
        }
        let s = &self.shared;
        if !s.lease_ok() {
            return Err(s.lease_expired());
        }
        let mut seqs = Vec::with_capacity(uids.len());
        if let Err(e) = s.alloc.next_batch(uids, &mut seqs) {
            if !matches!(e, AllocError::Exhausted { .. }) {
                return Err(s.status(&e));
            }
            let done = seqs.len();
            s.alloc
                .next_batch_waiting(&uids[done..], &mut seqs, self.deadline())
                .await
                .map_err(|e| s.status(&e))?;
        }
        Ok(Response::new(pb::NextBatchReply {
            seqs,
            route_version: s.version(),
        }))
    }

    async fn current(
        &self,
        req: Request<pb::CurrentRequest>,
    ) -> Result<Response<pb::CurrentReply>, Status> {
        let s = &self.shared;
        let seq = s
            .alloc
            .current(req.get_ref().uid)
            .map_err(|e| s.status(&e))?;
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

    async fn handoff(
        &self,
        req: Request<pb::AllocHandoffRequest>,
    ) -> Result<Response<pb::AllocHandoffReply>, Status> {
        let mut results = Vec::new();
        for m in &req.get_ref().moves {
            results.push(crate::handoff::move_section(&self.shared, m).await);
        }
        Ok(Response::new(pb::AllocHandoffReply { results }))
    }

    async fn adopt(
        &self,
        req: Request<pb::AdoptRequest>,
    ) -> Result<Response<pb::AdoptReply>, Status> {
        let s = &self.shared;
        if !s.lease_ok() {
            return Err(s.lease_expired());
        }
        let grants: Vec<crate::Grant> = req
            .get_ref()
            .grants
            .iter()
            .map(|g| crate::Grant {
                section: g.section,
                epoch: g.epoch,
                prev_ceiling: g.prev_ceiling,
                max_seq: g.max_seq,
            })
            .collect();
        let installed = s
            .alloc
            .install(&grants)
            .map_err(|e| invalid(e.to_string()))?;
        tracing::info!(sections = ?grants.iter().map(|g| g.section).collect::<Vec<_>>(), "adopted sections");
        Ok(Response::new(pb::AdoptReply {
            installed: installed as u32,
        }))
    }

    async fn status(
        &self,
        _req: Request<pb::AllocStatusRequest>,
    ) -> Result<Response<pb::AllocStatus>, Status> {
        let s = &self.shared;
        Ok(Response::new(pb::AllocStatus {
            alloc_id: s.id.clone(),
            addr: s.addr.clone(),
            lease_left_ms: s.lease_left_ms(),
            sections: s.alloc.served_sections(),
            route_version: s.version(),
            draining: s.draining.load(Ordering::Relaxed),
        }))
    }
}
