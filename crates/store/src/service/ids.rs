//! The store's id-namespace calls (docs/ids.md): worker-id claims, raises
//! and releases for AllocSvrs on the peer plane (same checks as their
//! section calls: the certificate names the AllocSvr, never forwarded,
//! served by the leader only, fenced by the registered incarnation), and
//! namespace creation and listing for operators on the admin plane.
//!
//! A claim may take over a worker id whose holder's lease the leader sees
//! certainly expired: the leader names those holdings (with the epoch it
//! saw) in the command, under the arbiter's lock so no renewal of the
//! holder slips in between, and the state machine takes one only if it is
//! still held at that epoch. Uniqueness does not rest on that judgement:
//! the new holder starts above the old one's ceiling.

use std::time::Instant;

use seqsvr_core::ids::Layout;
use seqsvr_core::AllocId;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::Error;
use seqsvr_store_core::decision;

use super::{check_id, check_name, unexpected, StoreApi};
use crate::types::{Command, Reply};

fn require_incarnation(i: u64) -> Result<u64, Error> {
    if i == 0 {
        return Err(Error::Invalid("incarnation must not be 0".into()));
    }
    Ok(i)
}

fn check_ns(ns: &str) -> Result<String, Error> {
    check_name("id namespace", ns)?;
    Ok(ns.to_string())
}

impl StoreApi {
    /// Claims a worker id for the calling incarnation, reclaiming those
    /// whose holder's lease this leader sees certainly expired.
    pub(super) async fn claim_worker(
        &self,
        r: pb::ClaimWorkerRequest,
    ) -> Result<pb::ClaimWorkerReply, Error> {
        let alloc = check_id(&r.alloc_id)?;
        let incarnation = require_incarnation(r.incarnation)?;
        let ns = check_ns(&r.namespace)?;
        self.require_leader()?;
        // Between the lease judgement and the write, no renewal may be
        // granted (renewals take this lock too).
        let _moves = self.arbiter.moves.lock().await;
        let (now, reclaim) = {
            let a = self.sm.read();
            let view = self.arbiter.view(&a.state, Instant::now());
            decision::worker_claim(&a.state, &view, &ns, r.now_ms)
        };
        if !reclaim.is_empty() {
            tracing::info!(%ns, ?reclaim, "claim may reclaim worker ids whose holder's lease expired");
        }
        let cmd = Command::ClaimWorker {
            ns: ns.clone(),
            alloc,
            incarnation,
            now,
            reclaim,
        };
        let grant = match self.write(cmd).await? {
            Reply::WorkerClaimed(g) => g,
            r => return Err(unexpected(r)),
        };
        let a = self.sm.read();
        let space = (a.state.ids.spaces.get(&ns))
            .ok_or_else(|| Error::Internal(format!("namespace {ns:?} gone after a claim")))?;
        Ok(pb::ClaimWorkerReply {
            holding: Some((&grant).into()),
            layout: Some((&space.layout).into()),
            window_ms: space.window_ms,
        })
    }

    pub(super) async fn raise_worker(
        &self,
        r: pb::RaiseWorkerRequest,
    ) -> Result<pb::RaiseWorkerReply, Error> {
        let cmd = Command::RaiseWorker {
            alloc: check_id(&r.alloc_id)?,
            incarnation: require_incarnation(r.incarnation)?,
            ns: check_ns(&r.namespace)?,
            worker: r.worker,
            epoch: r.epoch,
            to: r.to,
        };
        match self.write(cmd).await? {
            Reply::WorkerRaised { ceiling } => Ok(pb::RaiseWorkerReply { ceiling }),
            r => Err(unexpected(r)),
        }
    }

    pub(super) async fn release_worker(
        &self,
        r: pb::ReleaseWorkerRequest,
    ) -> Result<pb::ReleaseWorkerReply, Error> {
        let cmd = Command::ReleaseWorker {
            alloc: check_id(&r.alloc_id)?,
            incarnation: require_incarnation(r.incarnation)?,
            ns: check_ns(&r.namespace)?,
            worker: r.worker,
            epoch: r.epoch,
        };
        match self.write(cmd).await? {
            Reply::WorkerReleased => Ok(pb::ReleaseWorkerReply {}),
            r => Err(unexpected(r)),
        }
    }

    /// Creates a namespace (the layout is validated on the way in and
    /// again by the state machine).
    pub(super) async fn create_id_space(
        &self,
        r: pb::CreateIdSpaceRequest,
    ) -> Result<pb::CreateIdSpaceReply, Error> {
        let name = check_ns(&r.namespace)?;
        let layout = r
            .layout
            .as_ref()
            .ok_or_else(|| Error::Invalid("a namespace needs a layout".into()))?;
        let layout = Layout::try_from(layout).map_err(Error::Invalid)?;
        // Checked here, not in the state machine: replicas applying the
        // command must agree whatever their clocks say.
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        layout
            .check_epoch(now_ms)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let cmd = Command::CreateIdSpace {
            name,
            layout,
            window_ms: r.window_ms,
        };
        self.require_leader()?;
        match self.write(cmd).await? {
            Reply::IdSpace { created } => Ok(pb::CreateIdSpaceReply { created }),
            r => Err(unexpected(r)),
        }
    }

    /// Namespace `r.namespace` ("": all) after a barrier, with each worker
    /// id's holder and whether this leader sees its lease live.
    pub(super) async fn id_spaces(
        &self,
        r: pb::IdSpacesRequest,
    ) -> Result<pb::IdSpacesReply, Error> {
        self.require_leader()?;
        self.barrier().await?;
        let a = self.sm.read();
        let view = self.arbiter.view(&a.state, Instant::now());
        let live = |id: &AllocId, inc: u64| {
            let registered = a.state.allocs.get(id).is_some_and(|x| x.incarnation == inc);
            registered && view.get(id).is_some_and(|v| !v.expired)
        };
        let spaces = (a.state.ids.spaces.iter())
            .filter(|(name, _)| r.namespace.is_empty() || **name == r.namespace)
            .map(|(name, s)| pb::IdSpaceInfo {
                namespace: name.clone(),
                layout: Some((&s.layout).into()),
                window_ms: s.window_ms,
                unrecorded_ceiling: s.unrecorded_ceiling(),
                workers: (s.worker_records())
                    .map(|(&w, rec)| {
                        let (alloc_id, incarnation) = rec.holder.clone().unwrap_or_default();
                        pb::WorkerInfo {
                            holding: Some((&rec.grant(w)).into()),
                            live: rec.holder.is_some() && live(&alloc_id, incarnation),
                            alloc_id,
                            incarnation,
                        }
                    })
                    .collect(),
            })
            .collect();
        Ok(pb::IdSpacesReply { spaces })
    }
}
