//! The leader's decisions, against the arbiter's view at chosen times.

use std::time::{Duration, Instant};

use seqsvr_core::LeaseTerms;

use super::*;
use crate::arbiter::ArbiterConfig;
use crate::command::Command;
use crate::state::tests::three_allocs;

/// Three AllocSvrs (a0, a1, a2; incarnations 1, 2, 3) and four sections,
/// sections 0 and 1 taken over by a0; an arbiter in office since `t0`.
fn setup(t0: Instant) -> (SetState, Arbiter) {
    let mut s = three_allocs(40, &mut Vec::new());
    s.apply(&Command::SetLease(LeaseTerms::default()), &mut Vec::new())
        .unwrap();
    let take = Command::TakeOver {
        alloc: "a0".into(),
        incarnation: 1,
        first: 0,
        known: vec![0, 0],
    };
    s.apply(&take, &mut Vec::new()).unwrap();
    let arbiter = Arbiter::new(ArbiterConfig::default());
    arbiter.observe(Some(7), t0);
    (s, arbiter)
}

/// Lease plus margin of the default terms: a new office's wait.
fn wait() -> Duration {
    Duration::from_millis(LeaseTerms::default().expiry_ms())
}

#[test]
fn a_twin_is_refused_until_the_live_lease_has_certainly_expired() {
    let t0 = Instant::now();
    let (s, arbiter) = setup(t0);
    let a0 = "a0".to_string();
    let view = arbiter.view(&s, t0);
    assert!(matches!(
        replaced(&s, &view, &a0, 9),
        Err(Rejection::Twin { live: 1, .. })
    ));
    // The same process again replaces nothing; a new id neither.
    assert_eq!(replaced(&s, &view, &a0, 1), Ok(0));
    assert_eq!(replaced(&s, &view, &"new".to_string(), 5), Ok(0));
    let later = arbiter.view(&s, t0 + wait());
    assert_eq!(replaced(&s, &later, &a0, 9), Ok(1));
}

#[test]
fn an_id_whose_process_stopped_is_taken_at_once() {
    let t0 = Instant::now();
    let (mut s, arbiter) = setup(t0);
    let stop = Command::StopAlloc {
        alloc: "a0".into(),
        incarnation: 1,
    };
    s.apply(&stop, &mut Vec::new()).unwrap();
    let view = arbiter.view(&s, t0);
    assert_eq!(replaced(&s, &view, &"a0".to_string(), 9), Ok(0));
}

#[test]
fn an_assign_moves_nothing_from_a_live_owner() {
    let t0 = Instant::now();
    let (s, arbiter) = setup(t0);
    let view = arbiter.view(&s, t0);
    let (a0, a1) = ("a0".to_string(), "a1".to_string());
    assert!(matches!(
        check_assign(&s, &view, &a1, 1, 2),
        Err(Rejection::OwnedElsewhere { section: 1, .. })
    ));
    // Unowned sections, and the owner's own, may be routed.
    assert_eq!(check_assign(&s, &view, &a1, 2, 2), Ok(()));
    assert_eq!(check_assign(&s, &view, &a0, 0, 4), Ok(()));
    let later = arbiter.view(&s, t0 + wait());
    assert_eq!(check_assign(&s, &later, &a1, 0, 4), Ok(()));
}

#[test]
fn a_renewal_is_granted_in_the_confirmed_term_to_the_registered_process_only() {
    let t0 = Instant::now();
    let (s, arbiter) = setup(t0);
    let a0 = "a0".to_string();
    let stale = renewal(&s, &arbiter, &a0, 9, 7, t0, 0);
    assert!(matches!(
        stale,
        Err(RenewalRefused::Rejected(Rejection::StaleIncarnation { .. }))
    ));
    let deposed = renewal(&s, &arbiter, &a0, 1, 6, t0, 0);
    assert_eq!(deposed, Err(RenewalRefused::LeadershipChanged));
    let r = renewal(&s, &arbiter, &a0, 1, 7, t0, 0).unwrap();
    assert_eq!((r.terms, r.unchanged), (LeaseTerms::default(), false));
    assert_eq!(s.owned_by("a0").collect::<Vec<_>>(), vec![0, 1]);
    // The grant is recorded: a0's lease is live well past the office wait.
    let known = r.record.sections_version;
    let r = renewal(&s, &arbiter, &a0, 1, 7, t0 + wait(), known).unwrap();
    assert!(r.unchanged);
    let view = arbiter.view(&s, t0 + wait() + Duration::from_millis(1));
    assert!(!view["a0"].expired);
}

/// A claim may reclaim a holding only once its holder's lease has
/// certainly expired in the arbiter's view, named with the epoch it is
/// held at; an unknown namespace names nothing.
#[test]
fn a_claim_reclaims_only_holdings_whose_lease_certainly_expired() {
    let t0 = Instant::now();
    let (mut s, arbiter) = setup(t0);
    let layout = seqsvr_core::ids::Layout::twitter();
    let create = Command::CreateIdSpace {
        name: "msg".into(),
        layout,
        window_ms: 1000,
    };
    s.apply(&create, &mut Vec::new()).unwrap();
    let claim = Command::ClaimWorker {
        ns: "msg".into(),
        alloc: "a0".into(),
        incarnation: 1,
        now: 5,
        reclaim: Vec::new(),
    };
    s.apply(&claim, &mut Vec::new()).unwrap();
    let now_ms = layout.epoch_ms + 1234;
    let view = arbiter.view(&s, t0);
    assert_eq!(worker_claim(&s, &view, "msg", now_ms), (1234, vec![]));
    let later = arbiter.view(&s, t0 + wait());
    assert_eq!(
        worker_claim(&s, &later, "msg", now_ms),
        (1234, vec![(0, 1)])
    );
    assert_eq!(worker_claim(&s, &later, "nope", now_ms), (0, vec![]));
}
