//! The [`CeilingStore`] of a running AllocSvr: the StoreSvr's gRPC API,
//! through the store client (failover across replicas, retries inside a
//! deadline).

use seqsvr_core::{AllocId, Epoch, SectionId};
use seqsvr_store::client::StoreClient;
use seqsvr_store::types::Rejection;

use crate::ceiling::{CeilingStore, Grant};
use crate::error::StoreErr;

/// The store, as seen by one AllocSvr.
#[derive(Clone)]
pub struct StoreCeilings {
    /// The store client.
    pub store: StoreClient,
    /// Our id: take-overs claim sections for it.
    pub alloc: AllocId,
}

/// Maps a store answer to the allocator's contract. A section routed to
/// another AllocSvr is, for us, the same as a stale epoch: stop serving it.
pub fn store_err(e: seqsvr_store::Error) -> StoreErr {
    use seqsvr_store::Error as E;
    match e {
        E::Rejected(Rejection::StaleEpoch { .. } | Rejection::OwnedElsewhere { .. }) => {
            StoreErr::StaleEpoch
        }
        E::Rejected(Rejection::NotAbove { current, .. }) => StoreErr::NotAbove { current },
        E::Rejected(Rejection::TooLarge { .. }) => StoreErr::TooLarge,
        E::Rejected(Rejection::UnknownSection { .. }) => StoreErr::UnknownSection,
        other => StoreErr::Unavailable(other.to_string()),
    }
}

impl CeilingStore for StoreCeilings {
    async fn take_over(&self, first: SectionId, count: u32) -> Result<Vec<Grant>, StoreErr> {
        let (grants, _) = self
            .store
            .take_over(&self.alloc, first, count)
            .await
            .map_err(store_err)?;
        Ok(grants
            .into_iter()
            .map(|g| Grant {
                section: g.section,
                epoch: g.epoch,
                prev_ceiling: g.prev_ceiling,
                max_seq: g.max_seq,
            })
            .collect())
    }

    async fn raise(&self, section: SectionId, epoch: Epoch, to: u64) -> Result<u64, StoreErr> {
        self.store
            .raise(section, epoch, to)
            .await
            .map_err(store_err)
    }
}
