//! The front's doors to time-ordered ids (docs/ids.md): what every door
//! calls, beside the sequence numbers' in `front.rs`.

use std::sync::Arc;

use seqsvr_core::ids::{Decoded, Layout};

use super::Front;
use crate::error::CallError;
use crate::ids::IdWorkers;

impl Front {
    /// The same front, serving time-ordered ids from `ids`.
    pub fn with_ids(mut self, ids: Arc<IdWorkers>) -> Self {
        self.ids = Some(ids);
        self
    }

    /// The id workers, if ids are served here.
    pub fn ids(&self) -> Option<&Arc<IdWorkers>> {
        self.ids.as_ref()
    }

    /// `count` time-ordered ids of namespace `ns` (docs/ids.md). Only with
    /// a valid lease and never once fenced, as for sequence numbers: a
    /// worker id is held under the lease, so no two processes issue from
    /// it at once.
    pub async fn next_ids(&self, ns: &str, count: u32) -> Result<Vec<u64>, CallError> {
        let ids = self.ids_served()?;
        self.shared.admit()?;
        ids.next(ns, count).await
    }

    /// Takes id `id` of namespace `ns` apart.
    pub async fn decode_id(&self, ns: &str, id: u64) -> Result<(Decoded, Layout), CallError> {
        self.ids_served()?.decode(ns, id).await
    }

    fn ids_served(&self) -> Result<&Arc<IdWorkers>, CallError> {
        self.ids
            .as_ref()
            .ok_or_else(|| CallError::Invalid("time-ordered ids are not served here".into()))
    }
}
