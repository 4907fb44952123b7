//! Hot-path figures for the allocator. Prints numbers; asserts nothing about
//! time (machines differ). Run with
//! `cargo bench -p seqsvr-alloc --bench hot_path`.
//!
//! Targets (`docs/architecture/alloc.md`, release build, one core): `next` ≥ 50 M/s over uids
//! uniform in a 1 M-uid range; ≤ 8.5 bytes of memory per uid served (at
//! 10^8 uids on one allocator); a cold start with 10^5 sections under 1 s;
//! the memory of lost sections returned.
//!
//! Each throughput figure is measured over several rounds, timed by the
//! thread's on-CPU time; the median is the figure, best and worst show the
//! spread (large on a shared machine). A bare CAS loop over a plain array
//! with the same access pattern is printed as the floor to compare with.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use futures::executor::block_on;
use seqsvr_alloc::mem::MemCeilingStore;
use seqsvr_alloc::ownership::claim_pieces;
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

use seqsvr_testkit::rss;

/// Resident set size of this process, in bytes (Linux; 0 elsewhere).
fn rss_bytes() -> u64 {
    rss::rss_bytes().unwrap_or(0)
}

/// How many mappings the process has (`/proc/self/maps` lines; 0 where
/// there is no such file): advice given per slot rather than per chunk
/// shows as one more per run of freed slots (`section/cells.rs`).
fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count())
}

/// Nanoseconds this thread has spent on a CPU (Linux schedstat), so a
/// figure is not diluted by time the thread waited for a core on a busy
/// machine (interference through shared caches still shows).
fn on_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Rounds per figure: the machine may be shared, so one round proves little;
/// the median is the figure, the best shows what the hardware can do.
const ROUNDS: usize = 9;

/// Runs `round` (which performs `n` operations and returns the on-CPU
/// nanoseconds it took) [`ROUNDS`] times and prints the rates.
fn measure(what: &str, n: u64, mut round: impl FnMut() -> u64) {
    let mut rates: Vec<f64> = (0..ROUNDS)
        .map(|_| n as f64 / round().max(1) as f64 * 1e3)
        .collect();
    rates.sort_by(f64::total_cmp);
    let median = rates[ROUNDS / 2];
    println!(
        "{what:<44} median {median:>6.1} M/s ({:>5.1} ns)  best {:>6.1}  worst {:>6.1}",
        1e3 / median,
        rates[ROUNDS - 1],
        rates[0]
    );
}

/// On-CPU nanoseconds `f` takes on this thread.
fn on_cpu(f: impl FnOnce()) -> u64 {
    let start = on_cpu_ns();
    f();
    on_cpu_ns().saturating_sub(start)
}

/// MB, for printing.
fn mb(bytes: u64) -> u64 {
    bytes >> 20
}

/// Memory per uid served: 10^8 uids (1,000 sections of 100,000) taken
/// over, then every uid served once. Then half the sections are lost and
/// their cells freed: what comes back.
fn bytes_per_uid() {
    const UIDS: u64 = 100_000_000;
    let before = rss_bytes();
    let a = serving(spec(UIDS, 100_000, MAX_STEP), MAX_STEP);
    let installed = rss_bytes().saturating_sub(before);
    println!(
        "{:<44} {:>6} MB ({} MB of cells allocated, none written)",
        "memory after taking over 10^8 uids (RSS)",
        mb(installed),
        mb(a.stats().cell_bytes)
    );
    for uid in 0..UIDS {
        black_box(a.next(uid).unwrap());
    }
    let grown = rss_bytes().saturating_sub(before);
    println!(
        "{:<44} {:>6.2} B ({} MB for {} uids)",
        "memory per uid served (RSS growth, 10^8 uids)",
        grown as f64 / UIDS as f64,
        mb(grown),
        UIDS
    );
    let (rss, cells, maps) = (rss_bytes(), a.stats().cell_bytes, mappings());
    for section in (0..a.spec().section_count()).step_by(2) {
        a.drop_section(section);
    }
    while a.stats().sections_freed < u64::from(a.spec().section_count() / 2) {
        a.reclaim();
    }
    println!(
        "{:<44} RSS {} -> {} MB, cells {} -> {} MB, mappings {} -> {}",
        "half the sections lost and freed",
        mb(rss),
        mb(rss_bytes()),
        mb(cells),
        mb(a.stats().cell_bytes),
        maps,
        mappings()
    );
}

/// Cold start: from an empty allocator to serving 10^5 sections of 1,000
/// uids, through the node's take-over path (its claim pieces, the raiser's
/// take-over, install) against the in-memory store.
fn cold_start() {
    const SECTIONS: u32 = 100_000;
    let spec = spec(u64::from(SECTIONS) * 1_000, 1_000, 10_000);
    let store = Arc::new(MemCeilingStore::new(spec.clone()));
    let all: Vec<u32> = (0..SECTIONS).collect();
    let before = rss_bytes();
    let start = Instant::now();
    let alloc = Arc::new(Allocator::new(spec.clone(), &AllocConfig::default()).unwrap());
    let raiser = Raiser::new(alloc.clone(), store, RaiserConfig::default());
    for (first, count) in claim_pieces(&all) {
        block_on(raiser.take_over(first, count)).unwrap();
    }
    let took = start.elapsed();
    assert_eq!(alloc.next(spec.uid_end - 1), Ok(1), "serving");
    println!(
        "{:<44} {:>6.0} ms (RSS +{} MB, {} MB of cells allocated)",
        "cold start: 10^5 sections of 1,000 uids",
        took.as_secs_f64() * 1e3,
        mb(rss_bytes().saturating_sub(before)),
        mb(alloc.stats().cell_bytes)
    );
}

/// Operations per round of the throughput figures.
const OPS: u64 = 20_000_000;

/// `n` calls of `next` on uids uniform in 1 M. The generator is copied into
/// a local so that its state stays in registers: a state kept in memory
/// would have to be written out before every compare-and-swap (a locked
/// instruction drains the store buffer), which measures the bench, not the
/// allocator.
#[inline(never)]
fn next_loop(a: &Allocator, rng: &mut XorShift, n: u64) {
    let mut local = XorShift(rng.0);
    for _ in 0..n {
        black_box(a.next(local.below(1_000_000)).unwrap());
    }
    rng.0 = local.0;
}

/// Single-thread `next`, uids uniform in 1 M, ceiling never reached.
fn single_next(a: &Allocator) {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    measure("next, 1 thread, uniform over 1 M uids", OPS, || {
        on_cpu(|| next_loop(a, &mut rng, OPS))
    });
}

/// The floor under [`next_loop`]: a bare compare-and-swap increment on a
/// plain array of 1 M atomics, same access pattern, no ceiling, no sections.
fn bare_cas_reference() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let cells: Vec<AtomicU64> = (0..1_000_000).map(|_| AtomicU64::new(0)).collect();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    measure("reference: bare CAS increment, same pattern", OPS, || {
        on_cpu(|| {
            let mut local = XorShift(rng.0);
            for _ in 0..OPS {
                let cell = &cells[local.below(1_000_000) as usize];
                let mut cur = cell.load(Relaxed);
                while let Err(seen) = cell.compare_exchange_weak(cur, cur + 1, Relaxed, Relaxed) {
                    cur = seen;
                }
                black_box(cur);
            }
            rng.0 = local.0;
        })
    });
}

/// `n / 16` calls of `next_batch` with 16 uids uniform in 1 M (generator
/// in registers, as in [`next_loop`]).
#[inline(never)]
fn batch_loop(a: &Allocator, rng: &mut XorShift, n: u64, out: &mut Vec<u64>) {
    let mut local = XorShift(rng.0);
    for _ in 0..n / 16 {
        let uids: [u64; 16] = std::array::from_fn(|_| local.below(1_000_000));
        out.clear();
        a.next_batch(&uids, out).unwrap();
        black_box(&*out);
    }
    rng.0 = local.0;
}

/// The same work as [`batch_loop`] done with 16 single `next` calls.
#[inline(never)]
fn singles_loop(a: &Allocator, rng: &mut XorShift, n: u64, out: &mut Vec<u64>) {
    let mut local = XorShift(rng.0);
    for _ in 0..n / 16 {
        let uids: [u64; 16] = std::array::from_fn(|_| local.below(1_000_000));
        out.clear();
        out.extend(uids.iter().map(|&uid| a.next(uid).unwrap()));
        black_box(&*out);
    }
    rng.0 = local.0;
}

/// `next_batch` of 16 random uids, against 16 single `next` calls doing the
/// same work; both in seqs (numbers handed out) per second.
fn batch_next(a: &Allocator) {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let mut out = Vec::with_capacity(16);
    measure("next_batch(16), 1 thread: seqs", OPS, || {
        on_cpu(|| batch_loop(a, &mut rng, OPS, &mut out))
    });
    measure("16 x next (batch baseline): seqs", OPS, || {
        on_cpu(|| singles_loop(a, &mut rng, OPS, &mut out))
    });
}

/// `next` from two threads at once over the same uids (shared cache lines):
/// total numbers per wall-clock second.
fn two_threads(a: &Arc<Allocator>) {
    let mut seed = 0x1234_5678_9ABC_DEF1;
    measure(
        "next, 2 threads, uniform over 1 M uids: total",
        2 * OPS,
        || {
            let start = Instant::now();
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let a = a.clone();
                    seed += 1;
                    let mut rng = XorShift(seed);
                    std::thread::spawn(move || next_loop(&a, &mut rng, OPS))
                })
                .collect();
            handles.into_iter().for_each(|h| h.join().unwrap());
            start.elapsed().as_nanos() as u64
        },
    );
}

/// `next_name` on one name, `n` times.
#[inline(never)]
fn name_loop(a: &Allocator, name: &[u8], n: u64) {
    for _ in 0..n {
        black_box(a.next_name(name).unwrap());
    }
}

/// One hot name from one thread, then from two at once: what a door on
/// more than one worker thread could answer on a single name, whose
/// counter is kept under its shard's lock (`docs/benchmarks.md`, the hot
/// name).
fn hot_name() {
    const NAME: &[u8] = b"name:hot";
    let key = seqsvr_core::name_key(NAME).unwrap();
    let begin = key - key % 1000;
    let spec = SetSpec {
        set_id: 0,
        uid_begin: begin,
        uid_end: begin + 1000,
        section_size: 1000,
        step: MAX_STEP,
    };
    let a = Arc::new(serving(spec, MAX_STEP));
    let n = OPS / 4;
    measure("next_name, 1 thread, one name", n, || {
        on_cpu(|| name_loop(&a, NAME, n))
    });
    measure("next_name, 2 threads, one name: total", 2 * n, || {
        let start = Instant::now();
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let a = a.clone();
                std::thread::spawn(move || name_loop(&a, NAME, n))
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        start.elapsed().as_nanos() as u64
    });
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
    // 64 hot uids spread over all sections, so sections burn through steps
    // (each uid gets over a million numbers a second: a harsh case).
    let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
    let mut exhausted = 0u64;
    let ns = on_cpu(|| {
        for _ in 0..ops {
            match alloc.next(rng.below(64) * 15_625) {
                Ok(v) => {
                    black_box(v);
                }
                Err(AllocError::Exhausted { .. }) => exhausted += 1,
                Err(e) => panic!("{e}"),
            }
        }
    });
    println!(
        "{:<44} {:>6.1} M/s; {} of {} calls found the section exhausted; {} store raises",
        "next, 64 hot uids, step 10,000, raiser live",
        ops as f64 / ns as f64 * 1e3,
        exhausted,
        ops,
        store.raises()
    );
    stop.send(()).unwrap();
    bg.join().unwrap();
}

fn main() {
    // As the AllocSvr binary does: lost sections' cells are unmapped,
    // every time (`seqsvr_alloc::malloc`).
    seqsvr_alloc::malloc::fix_mmap_threshold();
    // First, before freed allocations can be recycled and hide growth.
    bytes_per_uid();
    cold_start();

    let a = Arc::new(serving(spec(1_000_000, 100_000, MAX_STEP), MAX_STEP));
    for uid in 0..1_000_000 {
        a.next(uid).unwrap(); // fault the cells in
    }
    single_next(&a);
    bare_cas_reference();
    batch_next(&a);
    two_threads(&a);
    hot_name();
    with_raises(50_000_000);
}
