//! The allocator's view of the store: the two writes it needs, behind a
//! trait so the allocator is testable without Raft ([`crate::mem`] is an
//! in-memory implementation).

use std::future::Future;

use seqsvr_core::{CounterDecl, Epoch, Incarnation, SectionId};

use crate::error::StoreErr;

/// One section handed to this AllocSvr by a take-over or a handoff: the
/// project's one grant type.
pub use seqsvr_core::Grant;

/// A counter declaration as the store holds it: the name, the section of
/// its position, the declaration (`docs/counters.md`).
pub type Declared = (Vec<u8>, SectionId, CounterDecl);

/// The store operations the allocator relies on, for one set.
///
/// Both are durable writes: an `Ok` means a majority of store replicas have
/// the result on disk (promise 2). Both name the calling process's
/// [`Incarnation`], which the store fences on (promise 3: a replaced or
/// fenced process can neither claim nor raise).
pub trait CeilingStore: Send + Sync + 'static {
    /// Claims sections `first .. first + known.len()` for `incarnation`.
    /// `known[i]` is the newest epoch this incarnation ever installed for
    /// section `first + i` (0: none). Per section: a grant the store
    /// prepared for this incarnation at a newer epoch (a handoff to us, or
    /// a take-over whose reply was lost) comes back unchanged, so no extra
    /// step is skipped (promise 4); otherwise the epoch grows by one, we
    /// become owner, and the ceiling grows by one step. Returns one
    /// [`Grant`] per section, in order.
    fn take_over(
        &self,
        incarnation: Incarnation,
        first: SectionId,
        known: Vec<Epoch>,
    ) -> impl Future<Output = Result<Vec<Grant>, StoreErr>> + Send;

    /// Raises `section`'s ceiling to `to` if `incarnation` still holds it
    /// at `epoch`. Returns the new ceiling (equal to `to`).
    fn raise(
        &self,
        incarnation: Incarnation,
        section: SectionId,
        epoch: Epoch,
        to: u64,
    ) -> impl Future<Output = Result<u64, StoreErr>> + Send;

    /// The counter declarations of sections `first .. first + count`
    /// (linearizable), read before a grant of them is installed: the
    /// owner serves its names by them (`docs/counters.md`).
    fn counters(
        &self,
        first: SectionId,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Declared>, StoreErr>> + Send;
}
