//! Id namespaces in the store: each has a [`Layout`] and, per worker id
//! ever claimed, a record of its holder and its *time ceiling*
//! (docs/ids.md).
//!
//! A worker id is held by an AllocSvr *incarnation*, under the same
//! registration, lease and fencing as its sections — there is no second
//! ownership protocol: a holder whose incarnation is no longer the one
//! registered (replaced after its lease certainly expired, stopped,
//! retired) holds nothing, and a holder whose lease the leader saw
//! certainly expire may be reclaimed by naming it in the claim.
//!
//! Uniqueness does not rest on the lease, though: a holder issues no id
//! with a tick above the ceiling the store acknowledged, raises are fenced
//! by holder and epoch, and every new holder starts at the ceiling plus
//! one. So even a paused ex-holder that wakes up issues only ticks its
//! successor never will.

use std::collections::BTreeMap;

use seqsvr_core::ids::Layout;
pub use seqsvr_core::ids::WorkerGrant;
use seqsvr_core::{AllocId, Epoch, Incarnation};
use serde::{Deserialize, Serialize};

pub use seqsvr_store_api::IdRefusal;

/// Most id namespaces one store group keeps.
pub const MAX_ID_SPACES: usize = 1024;
/// Longest window a namespace may raise its ceilings ahead by (10 min).
pub const MAX_WINDOW_MS: u64 = 600_000;

/// The key, above every layout's worker ids, of the record whose ceiling
/// a worker id with no record of its own starts above. Only a restore
/// writes one: a backup cannot tell which worker ids the lost group first
/// claimed after it was taken (`crate::backup::restored_ids`). Never
/// held, never claimed, never listed as a worker id.
pub const UNRECORDED: u64 = u64::MAX;

/// Every id namespace of the group, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdSpaces {
    /// By name.
    pub spaces: BTreeMap<String, IdSpace>,
}

/// One id namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdSpace {
    /// How its ids are built.
    pub layout: Layout,
    /// How far ahead of the clock a holder raises its ceiling, in ms.
    pub window_ms: u64,
    /// Per worker id ever claimed.
    pub workers: BTreeMap<u64, WorkerRecord>,
}

/// One worker id's durable record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// The time ceiling, in ticks: no id of this worker id has a later
    /// tick.
    pub ceiling: u64,
    /// Grows with every claim: the holder's fencing token.
    pub epoch: Epoch,
    /// The holder and its incarnation, if any.
    pub holder: Option<(AllocId, Incarnation)>,
    /// The first tick of the current holding (the ceiling before the claim
    /// plus one).
    pub floor: u64,
}

impl WorkerRecord {
    /// The grant of the current holding.
    pub fn grant(&self, worker: u64) -> WorkerGrant {
        WorkerGrant {
            worker,
            epoch: self.epoch,
            floor: self.floor,
            ceiling: self.ceiling,
        }
    }
}

impl IdSpace {
    /// The ceiling the next holder of worker `w` starts above: its
    /// record's, or for a worker id with none the [`UNRECORDED`] record's
    /// (0 without one).
    pub fn ceiling_of(&self, w: u64) -> u64 {
        (self.workers.get(&w)).map_or_else(|| self.unrecorded_ceiling(), |r| r.ceiling)
    }

    /// The ceiling a worker id with no record of its own starts above (a
    /// restore's [`UNRECORDED`] record; 0 without one).
    pub fn unrecorded_ceiling(&self) -> u64 {
        self.workers.get(&UNRECORDED).map_or(0, |r| r.ceiling)
    }

    /// The worker ids' records, lowest first, without the [`UNRECORDED`]
    /// one.
    pub fn worker_records(&self) -> impl Iterator<Item = (&u64, &WorkerRecord)> {
        self.workers.iter().filter(|(&w, _)| w != UNRECORDED)
    }

    /// The worker ids a claim by `alloc`'s `incarnation` may take, lowest
    /// first: never claimed, released, or held by an incarnation that is
    /// no longer the registered one; and those in `reclaim` (whose
    /// holder's lease the leader saw certainly expire) if the holder is
    /// still the one named.
    pub(crate) fn free_worker(
        &self,
        live: impl Fn(&AllocId, Incarnation) -> bool,
        reclaim: &[(u64, Epoch)],
    ) -> Option<u64> {
        let free = |w: u64| match self.workers.get(&w) {
            None => true,
            Some(r) => match &r.holder {
                None => true,
                Some((a, i)) => !live(a, *i) || reclaim.contains(&(w, r.epoch)),
            },
        };
        (0..self.layout.workers()).find(|&w| free(w))
    }
}
