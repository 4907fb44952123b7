//! The leader's decisions before it writes: what a registration replaces
//! (or that it is a twin), whether an operator may route sections, the
//! grant of a renewal, and which worker ids a claim may reclaim. Each is made under the arbiter's lock by its driver
//! — the store's `service/peer.rs` and `service/admin.rs`, the seeded
//! simulation's store — on the replica's applied state and the arbiter's
//! lease view at that moment, so no renewal slips in between the decision
//! and the write it leads to (docs/architecture/failover.md).
//!
//! Pure: the time and the term come in as arguments.

use std::collections::BTreeMap;
use std::time::Instant;

use seqsvr_core::{AllocId, Incarnation, LeaseTerms, SectionId};

use crate::arbiter::{Arbiter, LeaseView};
use crate::command::Rejection;
use crate::state::{AllocRecord, SetState};

/// The arbiter's lease view of every registered AllocSvr
/// ([`Arbiter::view`]).
pub type LeaseViews = BTreeMap<AllocId, LeaseView>;

/// Whether `alloc`'s lease has certainly expired in `view` (unknown ids
/// have none).
fn expired(view: &LeaseViews, alloc: &AllocId) -> bool {
    view.get(alloc).is_some_and(|v| v.expired)
}

/// The incarnation a registration of `alloc`'s `incarnation` replaces (0:
/// none), to be written as `RegisterAlloc::replaces`. A different
/// registered incarnation is replaced only once its lease has certainly
/// expired; until then the newcomer is a twin and refused (`Twin`, promise
/// 3: one process per AllocSvr id). An id whose last process recorded its
/// planned stop (incarnation 0) has nobody to wait for.
pub fn replaced(
    state: &SetState,
    view: &LeaseViews,
    alloc: &AllocId,
    incarnation: Incarnation,
) -> Result<Incarnation, Rejection> {
    match state.allocs.get(alloc) {
        Some(rec) if rec.incarnation == 0 => Ok(0),
        Some(rec) if rec.incarnation != incarnation => {
            if !expired(view, alloc) {
                return Err(Rejection::Twin {
                    alloc: alloc.clone(),
                    live: rec.incarnation,
                    addr: rec.addr.clone(),
                });
            }
            Ok(rec.incarnation)
        }
        _ => Ok(0),
    }
}

/// Refuses an operator's `Assign` of sections `first..first + count` to
/// `alloc` while one of them has another owner whose lease may still run:
/// moving a section from a live owner would let two AllocSvrs serve it
/// (promise 3); live owners hand sections off instead. Sections past the
/// set's end are the command's own check.
pub fn check_assign(
    state: &SetState,
    view: &LeaseViews,
    alloc: &AllocId,
    first: SectionId,
    count: usize,
) -> Result<(), Rejection> {
    let range = first as usize..first as usize + count;
    let records = state.sections.iter().enumerate();
    for (i, rec) in records.take(range.end).skip(range.start) {
        if let Some(owner) = &rec.owner {
            if owner != alloc && !expired(view, owner) {
                return Err(Rejection::OwnedElsewhere {
                    section: i as SectionId,
                    owner: owner.clone(),
                });
            }
        }
    }
    Ok(())
}

/// A renewal granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal<'a> {
    /// The terms it was granted under (the lease it carries).
    pub terms: LeaseTerms,
    /// The caller's record (draining, sections version).
    pub record: &'a AllocRecord,
    /// The caller already knows its section list (`known_version`): the
    /// answer carries none, so a renewal costs O(changes).
    pub unchanged: bool,
}

/// Why a renewal was not granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewalRefused {
    /// The caller may not renew (not registered, another incarnation,
    /// fenced).
    Rejected(Rejection),
    /// This replica no longer leads in the term it confirmed before the
    /// renewal arrived: it may not extend anyone's lease.
    LeadershipChanged,
}

/// Grants `alloc`'s `incarnation` a renewal at `now`, after a barrier
/// confirmed this replica's leadership in `term` (read before the
/// barrier): to the registered, unfenced incarnation only, and only if the
/// arbiter records the grant in that very term — a deposed leader never
/// extends a lease (promise 3). `known_version` is the sections version
/// the caller holds (0: none). A group whose lease terms were never set
/// grants nothing; that check (`LeaseState::set`) is the caller's.
pub fn renewal<'a>(
    state: &'a SetState,
    arbiter: &Arbiter,
    alloc: &AllocId,
    incarnation: Incarnation,
    term: u64,
    now: Instant,
    known_version: u64,
) -> Result<Renewal<'a>, RenewalRefused> {
    let record = state
        .check_incarnation(alloc, incarnation)
        .map_err(RenewalRefused::Rejected)?;
    let terms = state.lease.terms;
    if !arbiter.granted(alloc, term, now, terms) {
        return Err(RenewalRefused::LeadershipChanged);
    }
    Ok(Renewal {
        terms,
        record,
        unchanged: known_version != 0 && known_version == record.sections_version,
    })
}

/// What a worker-id claim of namespace `ns` writes, decided by the leader
/// under the arbiter's lock (no renewal may slip in between) with the
/// claimant's clock at `now_ms` (Unix ms): that clock's tick in the
/// namespace's layout, and every holding whose holder's lease `view` sees
/// certainly expired, with the epoch it is held at, for the state machine
/// to take only if it is still held so (docs/ids.md, "Reclaim"). An
/// unknown namespace gives tick 0 and nothing to reclaim: the state
/// machine refuses it.
pub fn worker_claim(
    state: &SetState,
    view: &LeaseViews,
    ns: &str,
    now_ms: u64,
) -> (u64, Vec<(u64, seqsvr_core::Epoch)>) {
    let Some(space) = state.ids.spaces.get(ns) else {
        return (0, Vec::new());
    };
    let reclaim = (space.workers.iter())
        .filter(|(_, r)| r.holder.as_ref().is_some_and(|(a, _)| expired(view, a)))
        .map(|(&w, r)| (w, r.epoch))
        .collect();
    (space.layout.tick_of(now_ms), reclaim)
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
