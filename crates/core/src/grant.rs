//! Ownership of a section: the grant a take-over or handoff produces, the
//! incarnation that tells two processes with one alloc id apart, and the
//! section's durable record they come from.

use serde::{Deserialize, Serialize};

use crate::route::{AllocId, Epoch};
use crate::section::SectionId;

/// One process start of an AllocSvr. Every start draws a fresh one; the
/// store admits one incarnation per alloc id at a time, so a second process
/// started with the same id (a copied config, a replacement pod while the
/// old one is only partitioned) is refused instead of serving beside the
/// first (docs/architecture/promises.md, promise 3). 0 means "none".
pub type Incarnation = u64;

/// A section handed to an AllocSvr: the epoch it serves under and where
/// every uid starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The section.
    pub section: SectionId,
    /// Its epoch: the owner's fencing token; every raise carries it.
    pub epoch: Epoch,
    /// The ceiling when this epoch began. Every uid starts here (skip
    /// ahead): no earlier owner handed out anything above it.
    pub prev_ceiling: u64,
    /// The durable ceiling (at least `prev_ceiling + step` at the start).
    pub max_seq: u64,
}

/// Lease timing, replicated in the store so every leader judges leases by
/// the terms they were granted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTerms {
    /// How long a granted renewal lets an AllocSvr serve, in ms (counted
    /// from when it sent the renewal).
    pub lease_ms: u64,
    /// Extra wait before a section moves, for clock-rate drift, in ms.
    pub margin_ms: u64,
}

impl Default for LeaseTerms {
    fn default() -> Self {
        Self {
            lease_ms: 5000,
            margin_ms: 1000,
        }
    }
}

impl LeaseTerms {
    /// Longest lease accepted (a lease is also how long a dead AllocSvr's
    /// sections stay down).
    pub const MAX_LEASE_MS: u64 = 600_000;

    /// Checks the terms: a positive lease, a margin of at least 5 % of it
    /// (the clock-drift bound is `margin / lease`), both bounded.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_ms == 0 || self.lease_ms > Self::MAX_LEASE_MS {
            return Err(format!(
                "lease_ms must be between 1 and {} ms, not {}",
                Self::MAX_LEASE_MS,
                self.lease_ms
            ));
        }
        if self.margin_ms.saturating_mul(20) < self.lease_ms || self.margin_ms > self.lease_ms {
            return Err(format!(
                "margin_ms must be between 5 % and 100 % of lease_ms ({} to {} ms for a lease \
                 of {} ms), not {}",
                self.lease_ms.div_ceil(20),
                self.lease_ms,
                self.lease_ms,
                self.margin_ms
            ));
        }
        Ok(())
    }

    /// Lease plus margin: how long after a grant its section may move.
    pub fn expiry_ms(&self) -> u64 {
        self.lease_ms + self.margin_ms
    }
}

/// One section's durable record, as the store keeps and replicates it
/// (and as test stores and the simulation keep it too): the ceiling, the
/// current ownership and where it began. The store's checks of a raise
/// against it are the store's (`seqsvr-store-core`, `RaiseRule`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionRecord {
    /// The ceiling: no number above it has ever been handed out (promise 2).
    pub max_seq: u64,
    /// The fencing token of the current ownership (promise 3).
    pub epoch: Epoch,
    /// The current owner, if any.
    pub owner: Option<AllocId>,
    /// The owner incarnation this epoch was granted to; 0 while routed
    /// but not yet claimed (after an `Assign`).
    pub incarnation: Incarnation,
    /// The ceiling when this epoch began: where its owner starts.
    pub start: u64,
}

impl SectionRecord {
    /// The grant of this epoch: where its owner starts and the ceiling.
    pub fn grant(&self, section: SectionId) -> Grant {
        Grant {
            section,
            epoch: self.epoch,
            prev_ceiling: self.start,
            max_seq: self.max_seq,
        }
    }

    /// A new epoch for `owner`'s `incarnation`, starting at the current
    /// ceiling, which rises by `step` (skip ahead, promises 1 and 4).
    pub fn begin(&mut self, owner: &AllocId, incarnation: Incarnation, step: u64) {
        self.epoch += 1;
        self.owner = Some(owner.clone());
        self.incarnation = incarnation;
        self.start = self.max_seq;
        self.max_seq += step;
    }

    /// `owner`'s `incarnation` claims this section, having installed it at
    /// epoch `known` at most (0: never). A grant prepared for that very
    /// incarnation at a newer epoch (a handoff to it, a take-over whose
    /// reply was lost) is kept as it is, so a retry skips no further step
    /// (promise 4); otherwise a new epoch [`begin`](Self::begin)s. Returns
    /// whether one began (the record changed). Whether `owner` may claim
    /// the section at all (routing, registration) is the caller's check.
    pub fn claim(
        &mut self,
        owner: &AllocId,
        incarnation: Incarnation,
        known: Epoch,
        step: u64,
    ) -> bool {
        let prepared = self.owner.as_ref() == Some(owner)
            && self.incarnation == incarnation
            && self.epoch > known;
        if !prepared {
            self.begin(owner, incarnation, step);
        }
        !prepared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_terms_are_checked() {
        assert!(LeaseTerms::default().validate().is_ok());
        for (lease_ms, margin_ms) in [(0, 0), (5000, 200), (5000, 6000), (700_000, 100_000)] {
            let t = LeaseTerms {
                lease_ms,
                margin_ms,
            };
            assert!(t.validate().is_err(), "{t:?}");
        }
        // Said as people write bounds, not as a Rust range.
        let e = |lease_ms, margin_ms| {
            LeaseTerms {
                lease_ms,
                margin_ms,
            }
            .validate()
            .unwrap_err()
        };
        assert_eq!(e(0, 0), "lease_ms must be between 1 and 600000 ms, not 0");
        assert_eq!(
            e(5000, 200),
            "margin_ms must be between 5 % and 100 % of lease_ms (250 to 5000 ms for a lease of \
             5000 ms), not 200"
        );
        assert!(!e(5000, 9000).contains(".."));
        assert!(LeaseTerms {
            lease_ms: 5000,
            margin_ms: 250
        }
        .validate()
        .is_ok());
    }
}
