//! The allocator's view of the store: the two writes it needs, behind a
//! trait so the allocator is testable without Raft ([`crate::mem`] is an
//! in-memory implementation).

use std::future::Future;

use seqsvr_core::{Epoch, SectionId};

use crate::error::StoreErr;

/// One section handed to this AllocSvr by a take-over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The section taken over.
    pub section: SectionId,
    /// The new epoch (fencing token) under which we serve it; every raise
    /// must carry it.
    pub epoch: Epoch,
    /// The section's ceiling before the take-over. Every uid starts here
    /// (skip ahead): no earlier owner handed out anything above it.
    pub prev_ceiling: u64,
    /// The ceiling after the take-over (`prev_ceiling + step`), durable.
    pub max_seq: u64,
}

/// The store operations the allocator relies on, for one set.
///
/// Both are durable writes: an `Ok` means a majority of store replicas have
/// the result on disk (promise 2).
pub trait CeilingStore: Send + Sync + 'static {
    /// Takes over sections `first .. first + count` for this AllocSvr: for
    /// each, the epoch grows by one, we become owner, and the ceiling grows by
    /// one step. Returns one [`Grant`] per section.
    fn take_over(
        &self,
        first: SectionId,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Grant>, StoreErr>> + Send;

    /// Raises `section`'s ceiling to `to` if `epoch` is still the section's
    /// epoch. Returns the new ceiling (equal to `to`).
    fn raise(
        &self,
        section: SectionId,
        epoch: Epoch,
        to: u64,
    ) -> impl Future<Output = Result<u64, StoreErr>> + Send;
}
