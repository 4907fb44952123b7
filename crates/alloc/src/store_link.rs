//! The [`CeilingStore`] of a running AllocSvr: the StoreSvr's peer plane,
//! through the store API's [`PeerClient`] (hedged across replicas, retries
//! inside a deadline).

use seqsvr_core::{AllocId, Epoch, Incarnation, SectionId};
use seqsvr_store_api::PeerClient;

use crate::ceiling::{CeilingStore, Declared, Grant};
use crate::error::StoreErr;

/// The store, as seen by one AllocSvr.
#[derive(Clone, Debug)]
pub struct StoreCeilings {
    /// The store's peer plane.
    pub store: PeerClient,
    /// Our id: take-overs claim sections for it, raises are fenced on it.
    pub alloc: AllocId,
    /// Where raise latencies go.
    pub metrics: std::sync::Arc<crate::metrics::AllocMetrics>,
}

impl CeilingStore for StoreCeilings {
    async fn take_over(
        &self,
        incarnation: Incarnation,
        first: SectionId,
        known: Vec<Epoch>,
    ) -> Result<Vec<Grant>, StoreErr> {
        let (grants, _) = self
            .store
            .take_over(&self.alloc, incarnation, first, known)
            .await?;
        Ok(grants)
    }

    async fn raise(
        &self,
        incarnation: Incarnation,
        section: SectionId,
        epoch: Epoch,
        to: u64,
    ) -> Result<u64, StoreErr> {
        let start = std::time::Instant::now();
        let r = self
            .store
            .raise(&self.alloc, incarnation, section, epoch, to)
            .await;
        self.metrics.raised(start.elapsed());
        Ok(r?)
    }

    async fn counters(&self, first: SectionId, count: u32) -> Result<Vec<Declared>, StoreErr> {
        let found = self.store.counters_of(first, count).await?;
        Ok(found
            .into_iter()
            .map(|c| (c.name, c.section, c.decl))
            .collect())
    }
}
