//! In-process generation of time-ordered ids against the layout's limit
//! (docs/benchmarks.md, "Time-ordered ids").
//!
//! Run: `cargo bench -p seqsvr-core --bench ids_gen -- [--secs N]`.
//! Prints figures; asserts nothing about speed.
//!
//! - `clock`: one worker id's [`Generator`] of the `twitter` layout on the
//!   real clock (read once per batch of 4,096), asked for ids in a closed
//!   loop, no borrowing: it can issue at most 4,096 ids per ms, so the
//!   figure is its rate against that limit (1.00 = every tick's sequence
//!   used up). It also prints the share of the time the thread was on a
//!   CPU: on a loaded machine, ms it did not run are ms whose ids are
//!   never issued.
//! - `alone`: the same generator with a clock that moves one tick per
//!   4,096 ids (what the layout's limit allows), so its own cost per id
//!   shows, as a multiple of the limit.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use seqsvr_core::ids::{Generator, IdError, Layout};

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Nanoseconds this thread has run on a CPU (`/proc/thread-self/schedstat`;
/// 0 where there is none): on a loaded machine the wall-clock rate of
/// the `clock` phase is also how much of the time it got a CPU.
fn on_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let mut secs = 3u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--secs" {
            secs = args.next().and_then(|s| s.parse().ok()).unwrap_or(secs);
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "{cpus} CPUs, load average {} at start",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let layout = Layout::twitter();
    let limit = (layout.max_seq() + 1) as f64 * 1000.0 / layout.unit_ms as f64;
    println!(
        "layout twitter: {} ids per tick of {} ms = {:.0} ids/s per worker id",
        layout.max_seq() + 1,
        layout.unit_ms,
        limit
    );
    let batch = (layout.max_seq() + 1) as usize;
    let mut out = Vec::with_capacity(batch);

    // On the real clock, no borrowing.
    let mut g = Generator::new(layout, 1, 0, layout.max_tick(), 0).unwrap();
    let (mut ids, mut refused) = (0u64, 0u64);
    let cpu0 = on_cpu_ns();
    let start = Instant::now();
    while start.elapsed().as_secs() < secs {
        out.clear();
        match g.next_n(wall_ms(), batch, &mut out) {
            Ok(()) => ids += out.len() as u64,
            Err(IdError::ClockBehind { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    let took = start.elapsed().as_secs_f64();
    let on_cpu = (on_cpu_ns() - cpu0) as f64 / 1e9 / took;
    let rate = ids as f64 / took;
    println!(
        "clock   {:>12.0} ids/s  {:.3}x the limit  ({refused} calls refused until the next ms; \
         on a CPU {:.0} % of the time)",
        rate,
        rate / limit,
        on_cpu * 100.0
    );

    // Its own cost: a clock moving one tick per full sequence.
    let t0 = wall_ms();
    let mut g = Generator::new(layout, 1, 0, layout.max_tick(), 0).unwrap();
    let mut ids = 0u64;
    let start = Instant::now();
    let mut tick = 0u64;
    while start.elapsed().as_secs() < secs {
        for _ in 0..64 {
            out.clear();
            g.next_n(t0 + tick, batch, &mut out).unwrap();
            ids += out.len() as u64;
            tick += 1;
        }
    }
    let took = start.elapsed().as_secs_f64();
    let rate = ids as f64 / took;
    println!(
        "alone   {:>12.0} ids/s  {:.1}x the limit  ({:.1} ns an id)",
        rate,
        rate / limit,
        took * 1e9 / ids as f64
    );
}
