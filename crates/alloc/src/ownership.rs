//! The AllocSvr's decisions as pure functions: which sections it may
//! serve, when a call may be served, what a renewal, a route read, a raise
//! answer, a handoff or an adopt changes. No I/O and no clock: whatever
//! time a decision depends on is passed in as a fact ("the lease is
//! valid", "the lease had lapsed"); the few that act on the allocator's
//! memory ([`take_over_known`], [`served_epochs`], [`release_section`],
//! [`AdoptNamed::of`], [`release_moved`]) touch nothing else.
//!
//! The control loop ([`Control`](crate::control::Control)) orders the
//! decisions of renewals, route reads, raises, handoffs and adopts; the
//! serving checks are made where calls are admitted (`shared.rs`). The seeded simulation (`crates/sim`)
//! runs the same control loop and calls the same functions, so what it
//! checks is what runs. The protocol is described in
//! `docs/architecture/failover.md` (leases, fencing, planned moves) and
//! `docs/architecture/alloc.md` (ownership, skip ahead).
//!
//! - serving: [`admit`] (a call that reads or hands out numbers),
//!   [`may_act_on_read`] (a decision taken from a store read), [`fences`]
//!   (a store answer that ends this process's service for good);
//! - `renewal`: [`listed_sections`] (the list a granted renewal carries,
//!   or says is unchanged), [`reconcile`] (which sections to drop and which
//!   to claim), [`claim_pieces`] and [`take_over_known`] (the take-overs
//!   that claim them);
//! - `routes`: [`after_route_read`] (drop what is routed elsewhere, renew
//!   early when a section is routed here, publish the table);
//! - `raise`: [`settle_raise`] (a raise's answer: apply, drop, retry) and
//!   the raiser's [`Backoff`];
//! - `handoff`: [`release_section`] (the checks, the [`Target`] the
//!   store's leader listed included, and the release of a move),
//!   [`decide_after_handoff`] (a handoff failed or its outcome is
//!   unknown), [`adopt_pending`] (an adopt's checks before the store is
//!   read, from what [`AdoptNamed::of`] found) and [`decide_adopt`]
//!   (after: another AllocSvr says "this section was handed to you");
//! - `sets`: [`release_moved`] (a range move's release: the sections
//!   frozen for another set stop being served here).
//!
//! Every decision about what another process may have done takes the
//! store's word (a linearizable read or a renewal granted by a confirmed
//! leader), never another AllocSvr's, and never memory alone (promise 3).

mod handoff;
mod raise;
mod renewal;
mod routes;
mod sets;

pub use handoff::{
    adopt_pending, decide_adopt, decide_after_handoff, release_section, AdoptNamed, AdoptRefusal,
    Adoption, AfterHandoff, Released, Target, MAX_ADOPT,
};
pub use raise::{settle_raise, Backoff, RaiseOutcome};
pub use renewal::{
    claim_pieces, listed_sections, reconcile, runs, take_over_known, Reconciliation,
};
pub use routes::{after_route_read, served_epochs, RouteRead};
pub use sets::release_moved;

use seqsvr_store_api::{Error as StoreError, Rejection};

/// Why a call that reads or hands out numbers is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAdmitted {
    /// The store said this incarnation was replaced or fenced: this
    /// process never serves again.
    Fenced,
    /// The lease is not valid: nothing is served until a renewal is granted.
    LeaseExpired,
}

/// Whether a call that reads or hands out numbers (`Next`, `NextBatch`,
/// `Current`) or installs a section (`Adopt`) may be served, given whether
/// the lease is valid now (on this process's own clock) and whether the
/// process was fenced. Promise 3: an AllocSvr whose lease ran out stops
/// serving at once, a fenced one for good; promise 1 for reads: a `Current`
/// answered past the lease may come from memory of a section that moved on.
#[inline]
pub fn admit(lease_valid: bool, fenced: bool) -> Result<(), NotAdmitted> {
    if fenced {
        Err(NotAdmitted::Fenced)
    } else if lease_valid {
        Ok(())
    } else {
        Err(NotAdmitted::LeaseExpired)
    }
}

/// Whether a decision taken from a store read, made when the count of
/// lease lapses was `lapses_before`, may be acted on now that it is
/// `lapses_now`: the call is still admitted ([`admit`]) and no lapse was
/// seen since. Then the lease was valid all along since the read, so the
/// store cannot have moved the section meanwhile (it moves sections only
/// after their owner's lease has certainly expired; failover.md, Timing).
pub fn may_act_on_read(
    lease_valid: bool,
    fenced: bool,
    lapses_now: u64,
    lapses_before: u64,
) -> bool {
    admit(lease_valid, fenced).is_ok() && lapses_now == lapses_before
}

/// Whether a store answer says this incarnation was replaced (another
/// process registered with this AllocSvr's id) or fenced by an operator:
/// the process drops everything, renews no more and never serves again
/// (promise 3). The same answers a raise maps to
/// [`StoreErr::Fenced`](crate::StoreErr::Fenced).
pub fn fences(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Rejected(Rejection::StaleIncarnation { .. } | Rejection::NotRegistered { .. })
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreErr;

    #[test]
    fn admission_fence_first_then_lease() {
        assert_eq!(admit(true, false), Ok(()));
        assert_eq!(admit(false, false), Err(NotAdmitted::LeaseExpired));
        assert_eq!(admit(true, true), Err(NotAdmitted::Fenced));
        assert_eq!(admit(false, true), Err(NotAdmitted::Fenced));
        assert!(may_act_on_read(true, false, 3, 3));
        assert!(
            !may_act_on_read(true, false, 4, 3),
            "a lapse since the read"
        );
        assert!(!may_act_on_read(false, false, 3, 3));
        assert!(!may_act_on_read(true, true, 3, 3));
    }

    #[test]
    fn fencing_answers_are_those_a_raise_maps_to_fenced() {
        let answers = [
            Rejection::StaleIncarnation {
                alloc: "a".into(),
                given: 1,
                current: 2,
            },
            Rejection::NotRegistered { alloc: "a".into() },
            Rejection::StaleEpoch {
                section: 0,
                given: 1,
                current: 2,
            },
            Rejection::NotConfigured,
        ];
        for r in answers {
            let e = StoreError::Rejected(r);
            let raise = StoreErr::from(e.clone());
            assert_eq!(fences(&e), raise == StoreErr::Fenced, "{e}");
        }
        assert!(!fences(&StoreError::NoLeader("election".into())));
    }
}
