//! Hot-path figures for the allocator. Prints numbers; asserts nothing about
//! time (machines differ). Run with
//! `cargo bench -p seqsvr-alloc --bench hot_path`.
//!
//! Targets (DESIGN §4, release build, one core): `next` ≥ 50 M/s over uids
//! uniform in a 1 M-uid range; ≤ 8.5 bytes of memory per uid served.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seqsvr_alloc::mem::MemCeilingStore;
use seqsvr_alloc::{AllocConfig, AllocError, Allocator, Grant, Raiser, RaiserConfig};
use seqsvr_core::section::MAX_STEP;
use seqsvr_core::SetSpec;

/// xorshift64: a few cycles per number, so the PRNG does not dominate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (multiply-shift: no division).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

fn spec(uids: u64, section_size: u64, step: u64) -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: uids,
        section_size,
        step,
    }
}

/// An allocator serving every section of `spec`, ceiling `max_seq`.
fn serving(spec: SetSpec, max_seq: u64) -> Allocator {
    let sections = spec.section_count();
    let a = Allocator::new(spec, &AllocConfig::default()).unwrap();
    let grants: Vec<Grant> = (0..sections)
        .map(|section| Grant {
            section,
            epoch: 1,
            prev_ceiling: 0,
            max_seq,
        })
        .collect();
    a.install(&grants).unwrap();
    a
}

/// Resident set size of this process, in bytes (Linux).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn report(what: &str, n: u64, elapsed: Duration) {
    let rate = n as f64 / elapsed.as_secs_f64() / 1e6;
    let ns = elapsed.as_nanos() as f64 / n as f64;
    println!("{what:<48} {rate:>8.1} M/s  ({ns:.1} ns each)");
}

/// Memory per uid: take 10 M uids (100 sections of 100,000) and touch all.
fn bytes_per_uid() {
    const UIDS: u64 = 10_000_000;
    let before = rss_bytes();
    let a = serving(spec(UIDS, 100_000, MAX_STEP), MAX_STEP);
    for uid in 0..UIDS {
        black_box(a.next(uid).unwrap());
    }
    let grown = rss_bytes().saturating_sub(before);
    println!(
        "{:<48} {:>8.2} B    ({} MB for {} uids)",
        "memory per uid (RSS growth, 10 M uids touched)",
        grown as f64 / UIDS as f64,
        grown >> 20,
        UIDS
    );
    drop(a);
}

/// Single-thread `next`, uids uniform in 1 M, ceiling never reached.
fn single_next(a: &Allocator, ops: u64) {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let start = Instant::now();
    for _ in 0..ops {
        black_box(a.next(rng.below(1_000_000)).unwrap());
    }
    report(
        "next, 1 thread, uniform over 1 M uids",
        ops,
        start.elapsed(),
    );
}

/// `next_batch` of 16 random uids; reports seqs (numbers) per second.
fn batch_next(a: &Allocator, batches: u64) {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let mut uids = [0u64; 16];
    let mut out = Vec::with_capacity(16);
    let start = Instant::now();
    for _ in 0..batches {
        for u in uids.iter_mut() {
            *u = rng.below(1_000_000);
        }
        out.clear();
        a.next_batch(&uids, &mut out).unwrap();
        black_box(&out);
    }
    report(
        "next_batch(16), 1 thread: seqs",
        batches * 16,
        start.elapsed(),
    );
}

/// `next` from two threads at once over the same uids (shared cache lines).
fn two_threads(a: &Arc<Allocator>, ops: u64) {
    let start = Instant::now();
    let handles: Vec<_> = (0..2u64)
        .map(|t| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut rng = XorShift(0x1234_5678_9ABC_DEF1 + t);
                for _ in 0..ops {
                    black_box(a.next(rng.below(1_000_000)).unwrap());
                }
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    report(
        "next, 2 threads, uniform over 1 M uids: total",
        2 * ops,
        start.elapsed(),
    );
}

/// Realistic steps (10,000) with the raiser running against an in-memory
/// store on another thread: how often does a caller find a section exhausted?
fn with_raises(ops: u64) {
    let spec = spec(1_000_000, 100_000, 10_000);
    let store = Arc::new(MemCeilingStore::new(spec.clone()));
    let alloc = Arc::new(Allocator::new(spec, &AllocConfig::default()).unwrap());
    let raiser = Raiser::new(alloc.clone(), store.clone(), RaiserConfig::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(raiser.take_over(0, 10)).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let bg = std::thread::spawn(move || {
        rt.block_on(raiser.run(async {
            let _ = stopped.await;
        }))
    });
    // A few hot uids so that sections actually burn through steps.
    let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
    let mut exhausted = 0u64;
    let start = Instant::now();
    for _ in 0..ops {
        let uid = rng.below(64) * 15_625; // 64 uids spread over all sections
        match alloc.next(uid) {
            Ok(v) => {
                black_box(v);
            }
            Err(AllocError::Exhausted { .. }) => exhausted += 1,
            Err(e) => panic!("{e}"),
        }
    }
    report(
        "next, 64 hot uids, step 10,000, raiser live",
        ops,
        start.elapsed(),
    );
    println!(
        "{:<48} {:>8} of {} calls; {} store raises",
        "  calls that found their section exhausted",
        exhausted,
        ops,
        store.raises()
    );
    stop.send(()).unwrap();
    bg.join().unwrap();
}

fn main() {
    // First, before other allocations can be recycled and hide growth.
    bytes_per_uid();

    let a = Arc::new(serving(spec(1_000_000, 100_000, MAX_STEP), MAX_STEP));
    single_next(&a, 20_000_000); // warm-up: fault in and cache the cells
    for _ in 0..3 {
        single_next(&a, 100_000_000);
    }
    for _ in 0..3 {
        batch_next(&a, 5_000_000);
    }
    two_threads(&a, 50_000_000);
    with_raises(50_000_000);
}
