//! Figures: one line per run, each side's median round, and the ratio
//! tables: against Redis and against a bare tonic server, with the
//! targets of `docs/benchmarks.md`.

use crate::{BATCH_C1, BATCH_C50, NEXT_C1, NEXT_C50};

/// One measured run's figures.
pub struct Figures {
    /// What ran, as printed.
    pub label: String,
    /// CPU use of the processes involved, as printed.
    pub cpu: String,
    /// Requests (round trips) per second: calls, or pipelines for Redis.
    pub calls_per_s: f64,
    /// CPU time the server process spent per call, µs (what a call costs
    /// the server whatever else the machine runs; 0 for Redis).
    pub server_us_per_call: f64,
    /// The server's user and kernel time, writes and context switches per
    /// call, as printed (empty for Redis).
    pub detail: String,
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
            "  {:<31} {:>10.0} seqs/s {:>8.0} req/s  p50 {:>5.0} p99 {:>5.0} p999 {:>6.0} max {:>6.0} µs  server {:>4.1} µs/call  cpu% {}",
            f.label, f.seqs_per_s, f.calls_per_s, f.p50, f.p99, f.p999, f.max, f.server_us_per_call, f.cpu,
        );
        if !f.detail.is_empty() {
            println!("  {:<31} {}", "", f.detail);
        }
    }
}

/// Every round's figures of one side of one shape.
#[derive(Default)]
pub struct Runs(Vec<Figures>);

impl Runs {
    /// Adds a round.
    pub fn push(&mut self, f: Figures) {
        self.0.push(f);
    }

    /// The median round by seqs/s (the lower middle one for an even
    /// count): what a typical round gave, not the luckiest.
    pub fn median(&self) -> Option<&Figures> {
        let mut v: Vec<&Figures> = self.0.iter().collect();
        v.sort_by(|a, b| a.seqs_per_s.total_cmp(&b.seqs_per_s));
        v.get(v.len().saturating_sub(1) / 2).copied()
    }
}

/// Each round's ratio `a / b` in seqs/s (the two sides of a round ran back
/// to back), and their median (the lower middle one for an even count).
pub fn paired_ratios(a: &Runs, b: &Runs) -> (Vec<f64>, f64) {
    let rounds: Vec<f64> =
        a.0.iter()
            .zip(&b.0)
            .map(|(a, b)| a.seqs_per_s / b.seqs_per_s)
            .collect();
    let mut sorted = rounds.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(f64::NAN);
    (rounds, median)
}

/// One shape's rounds, per side.
#[derive(Default)]
pub struct Sides {
    /// seqsvr through `SeqClient`.
    pub lib: Runs,
    /// seqsvr through a raw tonic stub.
    pub raw: Runs,
    /// The bare tonic server through `SeqClient`.
    pub bare_lib: Runs,
    /// The bare tonic server through a raw tonic stub.
    pub bare_raw: Runs,
    /// Redis.
    pub redis: Runs,
}

impl Sides {
    /// Every side's median, in print order.
    pub fn medians(&self) -> impl Iterator<Item = &Figures> {
        [
            &self.lib,
            &self.raw,
            &self.bare_lib,
            &self.bare_raw,
            &self.redis,
        ]
        .into_iter()
        .filter_map(Runs::median)
    }
}

/// Prints seqsvr / bare tonic per shape and client, against the target
/// of `docs/benchmarks.md` (≥ 0.97× for `next` and batch-16 at 50
/// callers).
pub fn bare_table(sides: &[Sides], shapes: &[(&str, usize, usize)]) {
    println!("\nseqsvr AllocSvr / bare tonic server (same client, same run)");
    println!(
        "  seqsvr, bare: median rounds. ratio: the median of the rounds' ratios (a round's two"
    );
    println!(
        "  sides ran back to back); below it, the ratio of the medians and each round's ratio"
    );
    println!(
        "  {:<30} {:<10} {:>10} {:>10} {:>7}  {:>16}  target",
        "shape", "client", "seqsvr", "bare", "ratio", "server µs/call"
    );
    for (i, (&(title, _, callers), s)) in shapes.iter().zip(sides).enumerate() {
        for (client, a, b) in [
            ("SeqClient", &s.lib, &s.bare_lib),
            ("raw tonic", &s.raw, &s.bare_raw),
        ] {
            if a.median().is_none() || b.median().is_none() {
                continue;
            }
            let (rounds, r) = paired_ratios(a, b);
            let (a, b) = (a.median().unwrap(), b.median().unwrap());
            let target = if callers > 1 && (i == NEXT_C50 || i == BATCH_C50) {
                format!("≥ 0.97×  {}", if r >= 0.97 { "met" } else { "NOT met" })
            } else {
                String::new()
            };
            println!(
                "  {title:<30} {client:<10} {:>10.0} {:>10.0} {r:>6.2}×  {:>7.1} vs {:>5.1}  {target}",
                a.seqs_per_s, b.seqs_per_s, a.server_us_per_call, b.server_us_per_call
            );
            let each: Vec<String> = rounds.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "  {:<41} {:>29.2}×  rounds: {}",
                "",
                a.seqs_per_s / b.seqs_per_s,
                each.join(" ")
            );
        }
    }
}

/// Prints seqsvr / Redis per shape, against the targets of
/// `docs/benchmarks.md`.
pub fn ratio_table(sides: &[Sides]) {
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let lib = |i: usize| sides[i].lib.median().expect("every shape ran");
    let redis = |i: usize, q: fn(&Figures) -> f64| sides[i].redis.median().map_or(f64::NAN, q);
    let seqs = |f: &Figures| f.seqs_per_s;
    println!("\nseqsvr (SeqClient) / Redis (medians)");
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
