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

/// The seed to replay, if one was asked for.
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
    format!("SEQSVR_SIM_SEED={seed} {k}cargo test -p seqsvr-sim -- --nocapture")
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
    let mut cfg = SimConfig::for_seed(1, knobs);
    cfg.allocs = allocs;
    cfg.drift = vec![0.0; cfg.sets.len() * allocs];
    for s in &mut cfg.sets {
        s.step = 64;
    }
    cfg.faults = faults;
    cfg.verbose = env("SEQSVR_SIM_VERBOSE").is_some();
    World::new(cfg).run()
}
