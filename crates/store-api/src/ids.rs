//! The store's id-namespace calls (docs/ids.md): worker-id claims, raises
//! and releases on the peer plane, namespace creation and listing on the
//! admin plane. Every write is safe to repeat: a repeated claim returns
//! the holding the first one made, a repeated raise answers the ceiling,
//! and a repeated release is refused (`NotHolder`) and changes nothing.

use seqsvr_core::ids::{Layout, WorkerGrant};
use seqsvr_core::{Epoch, Incarnation};
use seqsvr_proto::{self as pb};

use crate::client::{AdminClient, PeerClient};
use crate::error::{Error, Result};

/// A worker id claimed: the holding and what its namespace is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimed {
    /// The holding.
    pub grant: WorkerGrant,
    /// The namespace's layout.
    pub layout: Layout,
    /// How far ahead of the clock the holder raises its ceiling, in ms.
    pub window_ms: u64,
}

/// One worker id's record as the store shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerShown {
    /// The worker id, its epoch, floor and ceiling.
    pub grant: WorkerGrant,
    /// The holder and its incarnation (`None`: released or never held).
    pub holder: Option<(String, Incarnation)>,
    /// Whether the holder is registered and its lease not certainly
    /// expired, as the leader sees it.
    pub live: bool,
}

/// One namespace as the store shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdSpaceShown {
    /// Its name.
    pub name: String,
    /// Its layout.
    pub layout: Layout,
    /// Its ceiling window, in ms.
    pub window_ms: u64,
    /// Every worker id ever claimed.
    pub workers: Vec<WorkerShown>,
    /// The ceiling a worker id not in `workers` starts above (a
    /// restore's; 0: none).
    pub unrecorded_ceiling: u64,
}

fn layout_of(l: Option<&pb::IdLayout>) -> Result<Layout> {
    let l = l.ok_or_else(|| Error::Internal("a reply without a layout".into()))?;
    Layout::try_from(l).map_err(Error::Internal)
}

fn holding(h: Option<&pb::WorkerHolding>) -> Result<WorkerGrant> {
    h.map(WorkerGrant::from)
        .ok_or_else(|| Error::Internal("a reply without a holding".into()))
}

/// The namespaces of a reply, checked.
pub fn spaces_of(r: pb::IdSpacesReply) -> Result<Vec<IdSpaceShown>> {
    r.spaces
        .into_iter()
        .map(|s| {
            let workers = s
                .workers
                .iter()
                .map(|w| {
                    Ok(WorkerShown {
                        grant: holding(w.holding.as_ref())?,
                        holder: (!w.alloc_id.is_empty())
                            .then(|| (w.alloc_id.clone(), w.incarnation)),
                        live: w.live,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(IdSpaceShown {
                layout: layout_of(s.layout.as_ref())?,
                name: s.namespace,
                window_ms: s.window_ms,
                unrecorded_ceiling: s.unrecorded_ceiling,
                workers,
            })
        })
        .collect()
}

impl PeerClient {
    /// Claims a worker id of `ns` for `alloc`'s `incarnation`, whose clock
    /// reads `now_ms` (Unix ms).
    pub async fn claim_worker(
        &self,
        alloc: &str,
        incarnation: Incarnation,
        ns: &str,
        now_ms: u64,
    ) -> Result<Claimed> {
        let req = pb::ClaimWorkerRequest {
            alloc_id: alloc.into(),
            incarnation,
            namespace: ns.into(),
            now_ms,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.claim_worker(r).await })
            .await?;
        Ok(Claimed {
            grant: holding(r.holding.as_ref())?,
            layout: layout_of(r.layout.as_ref())?,
            window_ms: r.window_ms,
        })
    }

    /// Raises worker `worker`'s ceiling to `to` ticks under `epoch`;
    /// returns the ceiling.
    pub async fn raise_worker(
        &self,
        alloc: &str,
        incarnation: Incarnation,
        ns: &str,
        worker: u64,
        epoch: Epoch,
        to: u64,
    ) -> Result<u64> {
        let req = pb::RaiseWorkerRequest {
            alloc_id: alloc.into(),
            incarnation,
            namespace: ns.into(),
            worker,
            epoch,
            to,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.raise_worker(r).await })
            .await?;
        Ok(r.ceiling)
    }

    /// Releases worker `worker`, held at `epoch` (a clean stop).
    pub async fn release_worker(
        &self,
        alloc: &str,
        incarnation: Incarnation,
        ns: &str,
        worker: u64,
        epoch: Epoch,
    ) -> Result<()> {
        let req = pb::ReleaseWorkerRequest {
            alloc_id: alloc.into(),
            incarnation,
            namespace: ns.into(),
            worker,
            epoch,
        };
        self.replicas
            .call_with(req, |mut c, r| async move { c.release_worker(r).await })
            .await?;
        Ok(())
    }

    /// Namespace `ns` ("": all), with their worker ids (linearizable).
    pub async fn id_spaces(&self, ns: &str) -> Result<Vec<IdSpaceShown>> {
        let req = pb::IdSpacesRequest {
            namespace: ns.into(),
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.id_spaces(r).await })
            .await?;
        spaces_of(r)
    }
}

impl AdminClient {
    /// Creates namespace `ns`; `true` if this call created it (`false`: it
    /// existed with this layout and window).
    pub async fn create_id_space(&self, ns: &str, layout: &Layout, window_ms: u64) -> Result<bool> {
        let req = pb::CreateIdSpaceRequest {
            namespace: ns.into(),
            layout: Some(layout.into()),
            window_ms,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.create_id_space(r).await })
            .await?;
        Ok(r.created)
    }

    /// Namespace `ns` ("": all), with their worker ids (linearizable).
    pub async fn id_spaces(&self, ns: &str) -> Result<Vec<IdSpaceShown>> {
        let req = pb::IdSpacesRequest {
            namespace: ns.into(),
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.id_spaces(r).await })
            .await?;
        spaces_of(r)
    }
}
