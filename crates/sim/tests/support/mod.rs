//! What the simulation's tests share: seeds from the environment, runs on
//! every core, the search for a first failing seed, scripted runs.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use seqsvr_sim::faults::Fault;
use seqsvr_sim::{Knobs, RunReport, SimConfig, Violation, World};

/// Seeds the main test runs unless `SEQSVR_SIM_SEEDS` says otherwise.
pub const DEFAULT_SEEDS: u64 = 200;
/// Seeds searched for a failure of each weakened protocol.
pub const WEAKENED_SEEDS: u64 = 60;

/// An environment variable, if set and not empty.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The seed the main test replays, if one was asked for. Only the main
/// test reads it: every other test runs as usual (their seeds and knobs
/// are their own), so a replay filters on the main test's name.
pub fn replay_seed() -> Option<u64> {
    env("SEQSVR_SIM_SEED").map(|s| s.parse().expect("SEQSVR_SIM_SEED must be a number"))
}

/// The command that replays `seed` with `knobs`.
pub fn replay_hint(seed: u64, knobs: &Knobs) -> String {
    let k = knobs.to_arg();
    let k = if k.is_empty() {
        String::new()
    } else {
        format!("SEQSVR_SIM_KNOBS={k} ")
    };
    format!(
        "SEQSVR_SIM_SEED={seed} {k}cargo test -p seqsvr-sim --test simulation every_promise -- --nocapture"
    )
}

/// How many runs go side by side.
pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8)
}

/// Runs `seeds` on every core, results in seed order; `stop_at_first`:
/// each run stops at its first violation.
pub fn run_many(seeds: Range<u64>, knobs: &Knobs, stop_at_first: bool) -> Vec<RunReport> {
    let next = AtomicU64::new(seeds.start);
    let out = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads() {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= seeds.end {
                    return;
                }
                let mut cfg = SimConfig::for_seed(seed, knobs.clone());
                cfg.stop_at_first = stop_at_first;
                let r = World::new(cfg).run();
                out.lock().unwrap().push(r);
            });
        }
    });
    let mut out = out.into_inner().unwrap();
    out.sort_by_key(|r| r.seed);
    out
}

/// What counts as a failure of a run.
pub type Failure<'a> = dyn Fn(&RunReport) -> bool + Sync + 'a;

/// Which violations a test looks for.
pub type Matches = dyn Fn(&Violation) -> bool + Sync;

/// The lowest seed in `seeds` whose run `fails` says failed, searching on
/// every core and stopping once no lower seed is left to run.
pub fn first_failing(seeds: Range<u64>, knobs: &Knobs, fails: &Failure<'_>) -> Option<RunReport> {
    search(seeds, knobs, false, fails)
}

/// [`first_failing`], each run stopping at its first violation (for a
/// failure any violation shows).
pub fn first_violating(seeds: Range<u64>, knobs: &Knobs) -> Option<RunReport> {
    search(seeds, knobs, true, &|r: &RunReport| !r.ok())
}

fn search(
    seeds: Range<u64>,
    knobs: &Knobs,
    stop_at_first: bool,
    fails: &Failure<'_>,
) -> Option<RunReport> {
    let next = AtomicU64::new(seeds.start);
    let best = AtomicU64::new(u64::MAX);
    let found = Mutex::new(None::<RunReport>);
    std::thread::scope(|s| {
        for _ in 0..threads() {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= seeds.end || seed > best.load(Ordering::Relaxed) {
                    return;
                }
                let mut cfg = SimConfig::for_seed(seed, knobs.clone());
                cfg.stop_at_first = stop_at_first;
                let r = World::new(cfg).run();
                if fails(&r) {
                    best.fetch_min(seed, Ordering::Relaxed);
                    let mut f = found.lock().unwrap();
                    if f.as_ref().is_none_or(|o| o.seed > seed) {
                        *f = Some(r);
                    }
                }
            });
        }
    });
    found.into_inner().unwrap()
}

/// A scripted run: `allocs` AllocSvrs without drift, `faults` instead of a
/// drawn schedule.
pub fn scripted(allocs: usize, knobs: Knobs, faults: Vec<(u64, Fault)>) -> RunReport {
    scripted_with(allocs, knobs, faults, false)
}

/// [`scripted`], stopping at the first broken promise if `stop_at_first`.
pub fn scripted_with(
    allocs: usize,
    knobs: Knobs,
    faults: Vec<(u64, Fault)>,
    stop_at_first: bool,
) -> RunReport {
    let mut cfg = SimConfig::for_seed(1, knobs);
    cfg.stop_at_first = stop_at_first;
    cfg.allocs = allocs;
    cfg.drift = vec![0.0; cfg.sets.len() * allocs];
    for s in &mut cfg.sets {
        s.step = 64;
    }
    cfg.faults = faults;
    cfg.verbose = env("SEQSVR_SIM_VERBOSE").is_some();
    World::new(cfg).run()
}

/// Whether a violation breaks a promise (not a sanity check of the model).
pub fn broken(v: &Violation) -> bool {
    v.promise != 0
}

/// Shows that `knobs` break what `matches` looks for: the first seed of
/// `seeds` whose run (stopping at its first broken promise) shows it, and
/// that seed passing without them. Panics if no seed shows it.
pub fn shown_by_seeds(what: &str, knobs: &str, seeds: Range<u64>, matches: &Matches) -> RunReport {
    let knobs = Knobs::parse(knobs).unwrap();
    let fails = |r: &RunReport| r.violations.iter().any(matches);
    let Some(r) = search(seeds.clone(), &knobs, true, &fails) else {
        panic!("{what}: no seed of {seeds:?} failed; the checks are too weak");
    };
    let v = r.violations.iter().find(|v| matches(v)).expect("it failed");
    println!("{what}: first failing seed {}: {v}", r.seed);
    println!("  replay: {}", replay_hint(r.seed, &knobs));
    let mut cfg = SimConfig::for_seed(r.seed, Knobs::default());
    cfg.stop_at_first = true;
    let now = World::new(cfg).run();
    assert!(
        now.ok(),
        "{what}: seed {} fails without the knob too: {}",
        r.seed,
        now.violations[0]
    );
    r
}
