//! A knob per rule of `docs/architecture/promises.md` that the other tests
//! do not cover: each switched off breaks a promise within a few seeds (or
//! in a scripted scenario), and the failing seed passes as built.

use seqsvr_sim::Violation;

use crate::support::*;

/// Seeds searched for a failure of each rule switched off.
const RULE_SEEDS: u64 = 20;

/// A take-over or handoff begins its epoch at `start = max_seq` (skip
/// ahead, `SectionRecord::begin`): begun at the previous epoch's start
/// instead, the new owner hands out again what the old one did, and the
/// per-uid checker sees the repeat or the step back (promise 1).
#[test]
fn a_take_over_that_does_not_skip_ahead_is_caught() {
    let repeat = |v: &Violation| v.what.contains("repeat") || v.what.contains("regression");
    shown_by_seeds(
        "a take-over starting at the old epoch's start",
        "takeover_from_old_start",
        0..RULE_SEEDS,
        &repeat,
    );
}

/// A grant prepared for an incarnation and never installed is handed back
/// unchanged when it claims (`SetState::take_over`): a lost reply, a
/// hedged copy or a lost adopt costs no extra step (promise 4). With every
/// claim taking a fresh step, the lost-reply check sees a take-over begin
/// a new epoch over one granted to the same process and never installed.
#[test]
fn a_claim_that_always_takes_a_fresh_step_is_caught() {
    let lost_reply = |v: &Violation| v.promise == 4 && v.what.contains("never installed");
    shown_by_seeds(
        "every claim takes a fresh step",
        "claim_always_fresh",
        0..RULE_SEEDS,
        &lost_reply,
    );
}

/// A raise moves a ceiling by at most one step (`SetState::raise`,
/// `SetSpec::check_raise`). AllocSvrs asking two steps, and a store that
/// lets them, break the bound of promise 4 at the first raise.
#[test]
fn a_raise_of_more_than_a_step_is_caught() {
    let gap = |v: &Violation| v.promise == 4 && v.what.starts_with("raise of section");
    shown_by_seeds(
        "a raise of two steps",
        "raise_unbounded",
        0..RULE_SEEDS,
        &gap,
    );
}

/// A raise is acknowledged only once a majority holds it (promise 2).
/// Acknowledged when the leader appends it, numbers are handed out above
/// the committed ceiling.
#[test]
fn a_raise_acknowledged_before_commit_is_caught() {
    let durable = |v: &Violation| v.promise == 2;
    shown_by_seeds(
        "a raise acknowledged before a majority holds it",
        "ack_before_commit",
        0..RULE_SEEDS,
        &durable,
    );
}
