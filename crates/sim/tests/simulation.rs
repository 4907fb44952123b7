//! The seeded simulation of the ownership protocol (see
//! `docs/architecture/simulation.md`).
//!
//! - `SEQSVR_SIM_SEEDS=<n>`: how many seeds the main test runs (default 200).
//! - `SEQSVR_SIM_SEED=<seed>`: the main test replays exactly that seed,
//!   printing every event, e.g. `SEQSVR_SIM_SEED=17 cargo test -p
//!   seqsvr-sim --test simulation every_promise -- --nocapture`. The other
//!   tests do not read it: they run (and check) as usual.
//! - `SEQSVR_SIM_KNOBS=<knobs>`: run the main test (or the replay) with
//!   protocol variants (`seqsvr_sim::Knobs::parse`): old behaviours of the
//!   bugs found, or a weakened protocol.
//! - `SEQSVR_SIM_VERBOSE=1`: print every event of the scripted scenarios.

mod moves;
mod rules;
mod support;

use std::time::Instant;

use seqsvr_core::LeaseTerms;
use seqsvr_sim::faults::Fault;
use seqsvr_sim::net::{MS, SEC};
use seqsvr_sim::{run_seed, Knobs, RunReport, SimConfig, Violation, World};
use support::*;

/// The main test: every promise holds for every seed, with the protocol as
/// built. A failure prints its seed, its fault schedule, what broke first
/// and how to replay it.
#[test]
fn every_promise_holds_under_faults() {
    let knobs = Knobs::parse(&env("SEQSVR_SIM_KNOBS").unwrap_or_default()).unwrap();
    if let Some(seed) = replay_seed() {
        let r = run_seed(seed, knobs, true);
        println!("\n{r}");
        assert!(r.ok(), "seed {seed} broke a promise (above)");
        return;
    }
    let n: u64 = env("SEQSVR_SIM_SEEDS").map_or(DEFAULT_SEEDS, |s| s.parse().expect("a number"));
    let t0 = Instant::now();
    let reports = run_many(0..n, &knobs, false);
    let elapsed = t0.elapsed();
    let checked: usize = reports.iter().map(|r| r.observations).sum();
    let near = reports.iter().filter(|r| r.drift_of_bound >= 0.9).count();
    let single = (reports.iter())
        .map(|r| r.max_single_skip_steps)
        .fold(0.0, f64::max);
    let skip = reports.iter().map(|r| r.max_skip_steps).fold(0.0, f64::max);
    let moved = (reports.iter())
        .map(|r| r.max_move_skip_steps)
        .fold(0.0, f64::max);
    let sum = |f: &dyn Fn(&RunReport) -> u64| reports.iter().map(f).sum::<u64>();
    println!(
        "{n} seeds in {elapsed:.1?}: {checked} numbers and {} Current answers checked, \
         {} take-overs, {} handoffs ({} adopts installed, {} refused, {} reclaimed), \
         {} elections, {} twins refused, {} incarnations replaced, {} fenced, \
         {} lease-terms changes, {near} seeds with a clock at ≥ 90% of the drift bound, \
         largest skip at a single failover {single:.2} step(s), after repeated take-overs {skip:.2}, \
         after a range move {moved:.2}; moves: {} begun, {} finished, {} refused, {} movers \
         stopped or killed, {} releases confirmed, {} lease waits, {} sections frozen, {} \
         installed, {} released by AllocSvrs, {} MOVED/NOT_SERVED answers, {} raises refused \
         for a frozen section; {} AllocSvrs fenced by the operator, {} additions run again \
         ({} refused, {} sections installed), {} forged forwards refused",
        sum(&|r| r.stats.current_reads),
        sum(&|r| r.stats.takeovers),
        sum(&|r| r.stats.handoffs),
        sum(&|r| r.stats.adopted),
        sum(&|r| r.stats.adopts_refused),
        sum(&|r| r.stats.reclaimed),
        sum(&|r| r.stats.leaders_elected),
        sum(&|r| r.stats.twins_refused),
        sum(&|r| r.stats.replaced),
        sum(&|r| r.stats.fenced),
        sum(&|r| r.stats.lease_changes),
        sum(&|r| r.stats.moves_begun),
        sum(&|r| r.stats.moves_finished),
        sum(&|r| r.stats.moves_refused),
        sum(&|r| r.stats.movers_killed),
        sum(&|r| r.stats.releases_confirmed),
        sum(&|r| r.stats.lease_waits),
        sum(&|r| r.stats.frozen),
        sum(&|r| r.stats.installed),
        sum(&|r| r.stats.released),
        sum(&|r| r.stats.moved_answers),
        sum(&|r| r.stats.raises_not_served),
        sum(&|r| r.stats.operator_fences),
        sum(&|r| r.stats.additions_repeated),
        sum(&|r| r.stats.additions_refused),
        sum(&|r| r.stats.additions_installed),
        sum(&|r| r.stats.forwards_refused),
    );
    let failed: Vec<&RunReport> = reports.iter().filter(|r| !r.ok()).collect();
    if let Some(first) = failed.first() {
        let seeds: Vec<u64> = failed.iter().map(|r| r.seed).collect();
        panic!(
            "{} of {n} seeds broke a promise: {seeds:?}\nfirst failing seed {}; replay it with\n    {}\n{first}",
            failed.len(),
            first.seed,
            replay_hint(first.seed, &knobs),
        );
    }
    assert!(
        checked as u64 > 1000 * n,
        "too few numbers checked: the workload is too thin"
    );
    assert!(
        single <= 1.0,
        "promise 4: a single failover skipped more than a step"
    );
    assert!(
        sum(&|r| r.stats.moves_finished) > 2 * n,
        "too few range moves finished: the schedule lost its moves"
    );
    // The operator's and the stranger's faults reached the store, and it
    // refused what it must (`trust_faults_are_refused_as_built`, per
    // fault, on fewer seeds).
    if n >= 20 {
        assert!(sum(&|r| r.stats.operator_fences) > 0, "no fence was drawn");
        assert!(
            sum(&|r| r.stats.additions_refused) > 0,
            "no repeated addition was refused"
        );
        assert!(
            sum(&|r| r.stats.forwards_refused) > 0,
            "no forged forward was refused"
        );
        assert_eq!(
            sum(&|r| r.stats.forwards_taken),
            0,
            "a forged forward was taken"
        );
    }
}

/// The checks can fail: a protocol weakened in ways
/// `docs/architecture/failover.md` forbids is caught within a few dozen
/// seeds (the search stops at the first failing seed); a stale `Current`
/// answer, rarer, at a seed named below.
#[test]
fn weakened_protocols_are_caught() {
    // A broken promise, not a failed sanity check of the model.
    let any = |v: &Violation| broken(v);
    let regression = |v: &Violation| v.promise == 1 && !v.what.contains("Current");
    let stale_read = |v: &Violation| v.what.contains("Current");
    let cases: [(&str, &str, &Matches, std::ops::Range<u64>); 4] = [
        (
            "a deposed leader grants renewals without a quorum check",
            "unsafe_renewals",
            &any,
            0..WEAKENED_SEEDS,
        ),
        (
            "AllocSvrs serve without checking their lease (the per-uid checker sees it)",
            "skip_lease_check",
            &regression,
            0..WEAKENED_SEEDS,
        ),
        // A stale read needs a client to ask a resumed ex-owner at the
        // wrong moment: rarer. The first seed of the current generator that
        // shows one (found with `0..400`; a change to the model's draws
        // moves it, and this case then says so).
        (
            "AllocSvrs serve without checking their lease (the Current check sees a stale answer)",
            "skip_lease_check",
            &stale_read,
            301..302,
        ),
        (
            "AllocSvr clocks drift at twice the documented bound",
            "drift=2",
            &any,
            0..WEAKENED_SEEDS,
        ),
    ];
    for (what, knobs, matches, seeds) in cases {
        let knobs = Knobs::parse(knobs).unwrap();
        let fails = |r: &RunReport| r.violations.iter().any(matches);
        let found = first_failing(seeds.clone(), &knobs, &fails);
        let Some(r) = found else {
            panic!("{what}: no seed of {seeds:?} failed; the checks are too weak");
        };
        let v = r.violations.iter().find(|v| matches(v)).expect("it failed");
        println!("{what}: first failing seed {}: {v}", r.seed);
        println!("  replay: {}", replay_hint(r.seed, &knobs));
    }
}

/// `Current` checks the lease like `next` (the fencing work's bug 5, shown
/// on real processes by `current_from_a_resumed_ex_owner_is_refused`).
/// With `current_without_lease` the shipped admission is told the lease
/// is valid for `Current` calls only: an AllocSvr whose lease ran out and
/// whose sections moved answers reads from its old memory, below numbers
/// the new owner handed out, and the `Current` check sees it. These seeds
/// show such a stale answer, and pass without the knob (a change to the
/// model's draws moves them: with the current model most seeds that fail
/// with the knob are caught earlier, at admission, by the exclusivity
/// check, and seeds 54 and 126 moved to 126 and 723 when the control loop
/// took over the raiser's, start-up's and handoffs' order, then to 108 and
/// 1082 when moves began copying declared counters; list the failing
/// seeds with `SEQSVR_SIM_KNOBS=current_without_lease SEQSVR_SIM_SEEDS=3000
/// cargo test --release -p seqsvr-sim every_promise` and replay them to
/// find one whose violations include a `Current of uid …` answer).
#[test]
fn current_without_the_lease_check_is_caught() {
    let knobs = Knobs::parse("current_without_lease").unwrap();
    for seed in STALE_CURRENT_SEEDS {
        let r = run_seed(seed, knobs.clone(), false);
        let Some(v) = r.violations.iter().find(|v| stale_answer(v)) else {
            panic!(
                "seed {seed} no longer shows a stale Current answer (model or generator changed?)"
            );
        };
        println!("seed {seed}: {v}");
        println!("  replay: {}", replay_hint(seed, &knobs));
        assert!(
            r.stats.stale_reads_admitted > 0,
            "seed {seed}: no Current read reached an ex-owner with a lapsed lease: the hazard is gone"
        );
        let now = run_seed(seed, Knobs::default(), false);
        assert!(
            now.ok(),
            "seed {seed} fails without the knob too: {}",
            now.violations[0]
        );
        // The same reads reach the ex-owner as built, and the lease check
        // refuses them.
        assert!(
            now.stats.stale_reads_refused > 0,
            "seed {seed}: as built, no Current read of an ex-owner was refused for its lease: the scenario lost its teeth"
        );
        println!(
            "  hazard: {} read(s) admitted with the knob, {} refused as built",
            r.stats.stale_reads_admitted, now.stats.stale_reads_refused
        );
    }
}

/// A `Current` answer below a number handed out around it.
fn stale_answer(v: &Violation) -> bool {
    v.what.starts_with("Current of uid")
}

/// Seeds whose run with `current_without_lease` answers a stale `Current`.
const STALE_CURRENT_SEEDS: [u64; 2] = [108, 1082];

/// How a fix is shown to be needed.
enum Shown {
    /// Some of the first `n` seeds break a promise with its knob.
    Seeds(u64),
    /// These seeds break a promise with its knob.
    SeedList(&'static [u64]),
    /// A scripted scenario (two AllocSvrs per set), of which some variant
    /// breaks a promise with its knob.
    Scripted(fn() -> Vec<Vec<(u64, Fault)>>),
}

/// Every fix the simulation knows of, with the knob that restores the
/// old behaviour (`docs/architecture/simulation.md`, "Bugs found" and
/// "Knobs"). Bug 5 has none (its old behaviour served a section again
/// through `Allocator::resume`, which is gone): its scenario checks it
/// reaches the hazard instead.
const FIXES: [(&str, &str, Shown); 15] = [
    (
        "bug 1: the lease extended before unlisted sections were dropped",
        BUG_1,
        Shown::Scripted(|| bug_1_faults().into_iter().map(|(_, f)| f).collect()),
    ),
    (
        "bug 2: sections matched by id, not epoch, after a lapse",
        "keep_sections_after_lapse",
        Shown::Scripted(|| vec![bug_2_faults()]),
    ),
    (
        "bug 3: a renewal between the arbiter's plan and its moves",
        BUG_3,
        Shown::Scripted(|| bug_3_faults().into_iter().map(|(_, f)| f).collect()),
    ),
    (
        "bug 4: a shorter grant cut a longer lease short",
        "lease_by_current_terms",
        Shown::Scripted(|| vec![bug_4_faults()]),
    ),
    (
        "bug 6: a stale mover re-installed a section a later move froze",
        "skip_move_id_check",
        Shown::Scripted(|| vec![moves::stale_mover_faults()]),
    ),
    (
        "bug 7: a take-over answered after the move's release installed",
        "release_without_floor",
        Shown::Scripted(|| moves::bug_7_faults().into_iter().map(|(_, f)| f).collect()),
    ),
    (
        "fencing bug 5: Current answered without the lease check",
        "current_without_lease",
        Shown::SeedList(&STALE_CURRENT_SEEDS),
    ),
    (
        "(a) an adopt installs whatever grant it is sent",
        "adopt_unchecked",
        Shown::Seeds(20),
    ),
    (
        "(b) Handoff is not conditional on the epoch",
        "handoff_unconditional",
        Shown::SeedList(&HANDOFF_SEEDS),
    ),
    (
        "(c) twins are admitted (no incarnation check)",
        "admit_twins",
        Shown::Seeds(10),
    ),
    (
        "(d) the arbiter judges old grants by the current lease terms",
        "lease_by_current_terms",
        Shown::Seeds(30),
    ),
    (
        "fence, then move: a fenced holder left out of the release",
        "release_skips_fenced",
        Shown::SeedList(&FENCE_SEEDS),
    ),
    (
        "a release nobody confirmed taken as confirmed",
        "release_unanswered_confirms",
        Shown::SeedList(&UNCONFIRMED_SEEDS),
    ),
    (
        "a repeated addition applied without the directory check",
        "addition_unchecked",
        Shown::SeedList(&ADDITION_SEEDS),
    ),
    (
        "a call marked forwarded taken from a replica of another group",
        "forward_from_anyone",
        Shown::SeedList(&FORWARD_SEEDS),
    ),
];

/// Seeds that break a promise with `handoff_unconditional` (found as
/// below; 138 passes since moves copy declared counters, 13 fails).
const HANDOFF_SEEDS: [u64; 2] = [13, 98];
/// Seeds that break a promise with `release_skips_fenced` (found with
/// `SEQSVR_SIM_KNOBS=release_skips_fenced SEQSVR_SIM_SEEDS=<n> cargo test
/// --release -p seqsvr-sim every_promise`; a change to the model's draws
/// moves them, and `each_fix_is_needed` then says so).
const FENCE_SEEDS: [u64; 2] = [4, 7];
/// Likewise with `release_unanswered_confirms` (7 no longer failed once
/// the control loop ordered the raiser's rounds, 11 did; 4 no longer
/// fails since moves copy declared counters, 7 does again).
const UNCONFIRMED_SEEDS: [u64; 2] = [7, 11];
/// Likewise with `addition_unchecked`.
const ADDITION_SEEDS: [u64; 2] = [1, 4];
/// Likewise with `forward_from_anyone`.
const FORWARD_SEEDS: [u64; 2] = [2, 3];

/// Each fix is needed: with its knob (the old behaviour) a promise breaks
/// — a sanity check of the model failing does not count — in some of the
/// first `n` seeds (the count is printed; each run stops at its first
/// broken promise), at the seeds named, or in some variant of its
/// scripted scenario (stopping at the first that breaks one). Failing
/// seeds (up to three) pass without the knob; each scripted scenario's own
/// test shows it passing as built.
#[test]
fn each_fix_is_needed() {
    for (what, knobs, shown) in FIXES {
        let knobs = Knobs::parse(knobs).unwrap();
        let caught = |r: &RunReport| r.violations.iter().any(broken);
        let (failed, first): (Vec<u64>, Option<RunReport>) = match shown {
            Shown::Seeds(n) => {
                let reports = run_many(0..n, &knobs, true);
                let failed: Vec<u64> = (reports.iter().filter(|r| caught(r)))
                    .map(|r| r.seed)
                    .collect();
                println!("{what}: {} of {n} seeds fail: {failed:?}", failed.len());
                (failed, reports.into_iter().find(caught))
            }
            Shown::SeedList(seeds) => {
                let reports = run_many_of(seeds, &knobs);
                let failed: Vec<u64> = (reports.iter().filter(|r| caught(r)))
                    .map(|r| r.seed)
                    .collect();
                println!("{what}: seeds {failed:?} of {seeds:?} fail");
                assert_eq!(failed.len(), seeds.len(), "{what}: a named seed passes");
                (failed, reports.into_iter().find(caught))
            }
            Shown::Scripted(variants) => {
                let variants = variants();
                let n = variants.len();
                let first = (variants.into_iter().enumerate())
                    .map(|(i, f)| (i, scripted_with(2, knobs.clone(), f, true)))
                    .find(|(_, r)| caught(r));
                if let Some((i, _)) = &first {
                    println!("{what}: variant {} of {n} of its scenario fails", i + 1);
                }
                (Vec::new(), first.map(|(_, r)| r))
            }
        };
        let Some(first) = first else {
            panic!("{what}: nothing broke a promise; the schedule lost its teeth");
        };
        let v = first.violations.iter().find(|v| broken(v)).expect("caught");
        println!("  e.g. seed {}: {v}", first.seed);
        for &seed in failed.iter().take(3) {
            let r = run_seed(seed, Knobs::default(), false);
            assert!(
                r.ok(),
                "{what}: seed {seed} fails without the knob too: {}",
                r.violations[0]
            );
        }
    }
}

/// Runs `seeds` (each stopping at its first broken promise).
fn run_many_of(seeds: &[u64], knobs: &Knobs) -> Vec<RunReport> {
    (seeds.iter())
        .map(|&seed| {
            let mut cfg = SimConfig::for_seed(seed, knobs.clone());
            cfg.stop_at_first = true;
            World::new(cfg).run()
        })
        .collect()
}

/// A seed replays exactly.
#[test]
fn a_seed_replays_exactly() {
    let a = run_seed(11, Knobs::default(), false);
    let b = run_seed(11, Knobs::default(), false);
    assert_eq!(format!("{:?}", a.stats), format!("{:?}", b.stats));
    assert_eq!(a.violations, b.violations);
    assert_eq!(a.observations, b.observations);
    assert_eq!(a.describe, b.describe);
}

/// Bug 1, found by this simulation and fixed in the AllocSvr's renewal
/// (`crates/alloc/src/ownership.rs`, `reconcile`, as `node.rs` applies it):
/// the lease used to be extended *before* the sections the renewal no
/// longer lists were dropped. An AllocSvr coming back after its sections
/// moved away then held, for that moment, a valid lease and the moved
/// sections: a request handled by another thread in between (or after a
/// stall or SIGSTOP right there) was served from the old owner's memory
/// while the new owner served too (promise 3).
///
/// Here a0 is paused long enough for its sections to move to a1, and
/// paused again right after its first renewal extends the lease: the old
/// order (`lease_before_drop`) shows the overlap, the current one does not.
/// After the first pause a route read and the renewal race (as they do in
/// the real process); the overlap needs the renewal to win, so a few
/// pause lengths are tried.
/// Bug 1's knobs.
const BUG_1: &str = "lease_before_drop,keep_sections_after_lapse";

/// Bug 1's scenario, for each first pause tried.
fn bug_1_faults() -> Vec<(u64, Vec<(u64, Fault)>)> {
    let faults = |dur| {
        vec![
            (5 * SEC, Fault::PauseAlloc { a: 0, dur }),
            (5 * SEC + dur + MS, Fault::PauseInRenewal { a: 0, dur: SEC }),
            (40 * SEC, Fault::HealEverything),
        ]
    };
    (0..12)
        .map(|i| 9 * SEC + i * 97 * MS)
        .map(|dur| (dur, faults(dur)))
        .collect()
}

#[test]
fn renewal_drops_moved_sections_before_extending_the_lease() {
    // The retake-after-lapse fix would also drop them here; turn it off to
    // see this bug alone.
    let old_order = Knobs::parse(BUG_1).unwrap();
    let mut shown = false;
    for (dur, faults) in bug_1_faults() {
        let faults = || faults.clone();
        let old = scripted(2, old_order.clone(), faults());
        if !old.violations.iter().any(|v| v.promise == 3) {
            continue;
        }
        println!("lease first (the old order), first pause {dur} ns:\n{old}");
        let now = scripted(2, Knobs::default(), faults());
        println!("drop first (as built):\n{now}");
        assert!(now.ok(), "dropping first does not remove the overlap");
        shown = true;
        break;
    }
    assert!(
        shown,
        "the old order no longer shows the overlap: the scenario lost its teeth"
    );
}

/// Bug 2 (seed 779 of an earlier generator): a section the renewal listed
/// was taken over only if it was not *installed*; its epoch was never
/// compared. If a section moves away while the AllocSvr's lease has lapsed
/// and comes back before the AllocSvr processes any renewal or route read
/// (renewals granted, answers lost: an asymmetric partition), it was served
/// from old memory: numbers below what the interim owner handed out
/// (promise 1). Fixed: after a lapse every section is dropped and the
/// listed ones are taken over again (`reconcile`'s `lapsed`).
///
/// Here a0 is cut off for 9 s (its sections move to a1, which serves them),
/// then only the store's answers to a0 are lost while a1 dies (a1's
/// sections, a0's old ones included, move to a0, which renews "blindly"),
/// then the network heals.
/// Bug 2's scenario.
fn bug_2_faults() -> Vec<(u64, Fault)> {
    let cut = |answers_only| Fault::CutAlloc {
        a: 0,
        replicas: vec![0, 1, 2],
        answers_only,
    };
    vec![
        (5 * SEC, cut(false)),
        (14 * SEC, Fault::Heal { of: 0 }),
        (14 * SEC, cut(true)),
        (14 * SEC, Fault::CrashAlloc { a: 1 }),
        (24 * SEC, Fault::Heal { of: 2 }),
        (40 * SEC, Fault::HealEverything),
    ]
}

#[test]
fn stale_section_after_lease_lapse_is_not_served() {
    let faults = bug_2_faults;
    let old = scripted(
        2,
        Knobs::parse("keep_sections_after_lapse").unwrap(),
        faults(),
    );
    println!("the old behaviour:\n{old}");
    assert!(
        old.violations.iter().any(|v| v.promise == 1),
        "the old behaviour no longer regresses: the scenario lost its teeth"
    );
    let now = scripted(2, Knobs::default(), faults());
    println!("as built:\n{now}");
    assert!(now.ok(), "a stale section is served after a lease lapse");
}

/// Bug 3 (`Arbiter::moves`): the arbiter planned to move an expired
/// owner's sections, then proposed the `Assign`s; a renewal from that
/// owner completing in between recorded a fresh grant *and* read the state
/// before the `Assign` was applied, leasing the owner the very sections
/// being moved: two AllocSvrs served them (promise 3). Fixed: the lock
/// serialises the two.
///
/// The window is one Raft commit. Here a0 is cut off from the store long
/// enough for its lease to expire in the arbiter's view; the leader is
/// paused across the moment its arbiter would move a0's sections, and a0's
/// cut heals meanwhile, so on resume the arbiter's tick (plan, one
/// `Assign` after the other) and a0's queued renewal race; a0 stalls right
/// after its lease is extended (its next route read would drop what moved
/// a few milliseconds later, before any request could show the overlap).
/// Which one the quorum round trips finish first depends on the messages'
/// delays: a few pause starts and lengths are tried.
/// With the retake-after-lapse fix alone the owner would still drop the
/// sections on its lapse, so the old race shows with both old behaviours;
/// with the lock it does not, and with bug 2's old behaviour alone it does
/// not either (the race is the cause).
/// Bug 3's knobs (with bug 2's old behaviour: see above).
const BUG_3: &str = "renew_during_moves,keep_sections_after_lapse";

/// Bug 3's scenario, for each pause start tried.
fn bug_3_faults() -> Vec<(u64, Vec<(u64, Fault)>)> {
    let faults = |pause_at: u64, dur: u64| {
        vec![
            (
                5 * SEC,
                Fault::CutAlloc {
                    a: 0,
                    replicas: vec![0, 1, 2],
                    answers_only: false,
                },
            ),
            (
                pause_at,
                Fault::PauseReplica {
                    set: 0,
                    leader: true,
                    r: 0,
                    dur,
                },
            ),
            (pause_at + 50 * MS, Fault::Heal { of: 0 }),
            (pause_at + 60 * MS, Fault::PauseInRenewal { a: 0, dur: SEC }),
            (40 * SEC, Fault::HealEverything),
        ]
    };
    (0..6)
        .map(|i| 9 * SEC + 880 * MS + i * 20 * MS)
        .map(|at| (at, faults(at, 300 * MS)))
        .collect()
}

#[test]
fn renewal_between_plan_and_move_is_serialised() {
    let old_race = Knobs::parse(BUG_3).unwrap();
    let bug2 = Knobs::parse("keep_sections_after_lapse").unwrap();
    let mut shown = 0;
    for (at, faults) in bug_3_faults() {
        let f = || faults.clone();
        let old = scripted(2, old_race.clone(), f());
        if let Some(v) = old.violations.iter().find(|v| v.promise == 3) {
            println!("leader paused at {at} ns, the old race: {v}");
            shown += 1;
        }
        let alone = scripted(2, bug2.clone(), f());
        assert!(
            alone.ok(),
            "bug 2's old behaviour alone: {}",
            alone.violations[0]
        );
        let now = scripted(2, Knobs::default(), f());
        assert!(
            now.ok(),
            "as built, leader paused at {at} ns: {}",
            now.violations[0]
        );
    }
    assert!(
        shown > 0,
        "the old race no longer shows: the scenario lost its teeth"
    );
}

/// Bug 4: a renewal granted under shorter lease terms must not cut short a
/// lease granted earlier under longer ones. The AllocSvr never shortens
/// its lease (`Lease::granted`), so after `SetLease` to shorter terms its
/// lease still runs on the last renewal granted under the longer ones;
/// the arbiter must not move its sections before that one has certainly
/// expired.
///
/// Here the lease is raised to 10 s, then set back to 5 s; a0 is cut off
/// from the store right after a renewal under the new terms.
/// Bug 4's scenario.
fn bug_4_faults() -> Vec<(u64, Fault)> {
    let long = LeaseTerms {
        lease_ms: 10_000,
        margin_ms: 2_000,
    };
    vec![
        (
            7 * SEC,
            Fault::SetLease {
                set: 0,
                terms: long,
            },
        ),
        (
            20 * SEC,
            Fault::SetLease {
                set: 0,
                terms: LeaseTerms::default(),
            },
        ),
        (
            21 * SEC + 500 * MS,
            Fault::CutAlloc {
                a: 0,
                replicas: vec![0, 1, 2],
                answers_only: false,
            },
        ),
        (34 * SEC, Fault::Heal { of: 2 }),
        (40 * SEC, Fault::HealEverything),
    ]
}

#[test]
fn shorter_lease_terms_do_not_cut_a_longer_grant_short() {
    let faults = bug_4_faults;
    let old = scripted(2, Knobs::parse("lease_by_current_terms").unwrap(), faults());
    println!("grants judged by the current terms:\n{old}");
    assert!(
        old.violations.iter().any(|v| v.promise == 3),
        "the old behaviour no longer shows the overlap: the scenario lost its teeth"
    );
    let now = scripted(2, Knobs::default(), faults());
    println!("as built:\n{now}");
    assert!(
        now.ok(),
        "a shorter grant cut a longer lease short: the arbiter moved a0's sections while its lease ran"
    );
}

/// Bug 5 (fixed; seeds 1059 and 1618 of 3000): after a handoff whose
/// outcome is unknown, the releasing AllocSvr read the section back and,
/// if the store still had it at the released epoch, served it again at
/// that same epoch (`handoff.rs`, `settle`, with
/// `ownership::decide_after_handoff`). But a copy of its `Handoff` may
/// still be on its way — parked at a replica waiting for a leader, queued
/// at a paused one, or delayed on a lossy link — and it is conditional on
/// exactly that epoch: when it landed, the section moved while its old
/// owner served it again (promise 3). The fix: never serve a released
/// section again at the released epoch; leave it dropped, and the (early)
/// renewal's take-over claims it under a new epoch, which fences the late
/// copy (`AfterHandoff::Reclaim`).
///
/// Here every store request p1 sends while it hands a section off reaches
/// the store 3–4 s late (a lossy link), so its handoff fails after 2 s; the
/// read-back right after gets through and says the section is still p1's
/// at the released epoch. Before the fix p1 served it again, and then the
/// late copy of the handoff moved it to a0. Each variant checks it got
/// there: the reclaim decision taken, and a late copy of the handoff
/// refused because the reclaim began a newer epoch. (No knob restores the
/// old behaviour: it served the section again through `Allocator::resume`,
/// which is gone.)
#[test]
fn a_late_handoff_does_not_move_a_section_served_again() {
    // Whether the two AllocSvrs overlap depends on who notices first (the
    // old owner's route read or the new owner's claim): a few delays.
    let mut failed = Vec::new();
    for stall in (0..12).map(|i| 3 * SEC + i * 91 * MS) {
        let faults = vec![
            (
                6 * SEC,
                Fault::HandoffRoundTrip {
                    from: 1,
                    to: 0,
                    stall,
                    window: 1950 * MS,
                },
            ),
            (40 * SEC, Fault::HealEverything),
        ];
        let r = scripted(2, Knobs::default(), faults);
        println!(
            "stall {stall} ns: {} reclaimed, {} late handoff(s) refused",
            r.stats.reclaimed, r.stats.handoffs_stale
        );
        // The hazard is reached: the read-back found the section still
        // ours at the released epoch (the reclaim decision), and a late
        // copy of the handoff landed after the reclaim's new epoch.
        assert!(
            r.stats.reclaimed > 0 && r.stats.handoffs_stale > 0,
            "stall {stall} ns: no reclaim, or no late handoff landed after it: the scenario lost its teeth"
        );
        if !r.ok() {
            println!("stall {stall} ns:\n{r}");
            failed.push(stall);
        }
    }
    assert!(
        failed.is_empty(),
        "a late copy of a handoff moved a section its owner served again (stalls {failed:?})"
    );
}
