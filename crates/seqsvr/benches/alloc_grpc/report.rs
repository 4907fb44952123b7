//! Figures: one line per run, each side's best round, and the ratio table
//! against issue 3's targets.

use crate::{BATCH_C1, BATCH_C50, NEXT_C1, NEXT_C50};

/// One measured run's figures.
pub struct Figures {
    /// What ran, as printed.
    pub label: String,
    /// CPU use of the processes involved, as printed.
    pub cpu: String,
    /// Requests (round trips) per second: calls, or pipelines for Redis.
    pub calls_per_s: f64,
    /// Sequence numbers handed out per second.
    pub seqs_per_s: f64,
    /// Latency quantiles and max, in µs (per call; for a Redis pipeline,
    /// per command as redis-benchmark counts it).
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Figures {
    /// Prints one result line.
    pub fn print(&self) {
        let f = self;
        println!(
            "  {:<31} {:>10.0} seqs/s {:>8.0} req/s  p50 {:>5.0} p99 {:>5.0} p999 {:>6.0} max {:>6.0} µs  cpu% {}",
            f.label, f.seqs_per_s, f.calls_per_s, f.p50, f.p99, f.p999, f.max, f.cpu,
        );
    }
}

/// Keeps in `best` whichever of it and `f` handed out more seqs/s.
pub fn keep(best: &mut Option<Figures>, f: Figures) {
    if best.as_ref().is_none_or(|b| f.seqs_per_s > b.seqs_per_s) {
        *best = Some(f);
    }
}

/// One shape's best run per side (most seqs/s over the rounds).
#[derive(Default)]
pub struct Best {
    /// seqsvr through `SeqClient`.
    pub lib: Option<Figures>,
    /// seqsvr through a raw tonic stub (50 callers only).
    pub raw: Option<Figures>,
    /// Redis.
    pub redis: Option<Figures>,
}

/// Prints seqsvr / Redis per shape, against issue 3's targets.
pub fn ratio_table(best: &[Best]) {
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let lib = |i: usize| best[i].lib.as_ref().expect("every shape ran");
    let redis = |i: usize, q: fn(&Figures) -> f64| best[i].redis.as_ref().map_or(f64::NAN, q);
    let seqs = |f: &Figures| f.seqs_per_s;
    println!("\nseqsvr (SeqClient) / Redis");
    println!(
        "  {:<38} {:>10} {:>10} {:>7}  target",
        "shape", "seqsvr", "Redis", "ratio"
    );
    let row = |name: &str, a: f64, b: f64, target: Option<f64>| {
        let t = match target {
            Some(t) => format!("≥ {t:.1}×  {}", met(a / b >= t)),
            None => String::new(),
        };
        println!("  {name:<38} {a:>10.0} {b:>10.0} {:>6.2}×  {t}", a / b);
    };
    let lat = |name: &str, a: f64, b: f64, target: &str| {
        println!("  {name:<38} {a:>10.0} {b:>10.0} {:>7}  {target}", "");
    };
    let next_c50 = lib(NEXT_C50);
    row(
        "next c=50 vs INCR -c 50 (seqs/s)",
        next_c50.seqs_per_s,
        redis(NEXT_C50, seqs),
        Some(0.9),
    );
    lat(
        "  p99 (µs)",
        next_c50.p99,
        redis(NEXT_C50, |f| f.p99),
        &format!("≤ 1500 µs  {}", met(next_c50.p99 <= 1500.0)),
    );
    lat(
        "  p999 (µs)",
        next_c50.p999,
        redis(NEXT_C50, |f| f.p999),
        "",
    );
    row(
        "batch-16 c=50 vs INCR -c 50 -P 16",
        lib(BATCH_C50).seqs_per_s,
        redis(BATCH_C50, seqs),
        Some(2.0),
    );
    row(
        "next c=1 vs INCR -c 1",
        lib(NEXT_C1).seqs_per_s,
        redis(NEXT_C1, seqs),
        None,
    );
    lat(
        "  p50 (µs)",
        lib(NEXT_C1).p50,
        redis(NEXT_C1, |f| f.p50),
        "",
    );
    row(
        "batch-16 c=1 vs INCR -c 1 -P 16",
        lib(BATCH_C1).seqs_per_s,
        redis(BATCH_C1, seqs),
        None,
    );
}
