//! AllocSvr over gRPC on loopback, and the same load shapes against Redis
//! `INCR` (AOF on, `appendfsync everysec`) — issue 3's comparison.
//!
//! Run: `cargo bench -p seqsvr --bench alloc_grpc -- [--secs N] [--threads T]
//! [--rounds R] [--redis]`, or the whole comparison (installs Redis if
//! missing) with `deploy/bench/alloc_vs_redis.sh [same options]`. Prints
//! figures; asserts nothing about speed.
//!
//! - seqsvr: a real cluster of the real binary — 3 store replicas and ONE
//!   AllocSvr (`seqsvr alloc --threads T`, default 1) owning all 10
//!   sections of uids `[0, 1_000_000)`, step 1,000,000 so that ceiling
//!   raises are rare.
//! - Load: a current-thread tokio runtime in this process (one core, like
//!   redis-benchmark), N tasks each in a closed loop, uids uniform over 1 M
//!   (xorshift), latency per call in an HDR histogram (µs). Each phase warms
//!   up for 1 s, then measures for `--secs` (default 5).
//! - Shapes: `next` with 1 and 50 callers, `next_batch` of 16 uids with 1
//!   and 50 callers, through `seqsvr_client::SeqClient`; and at 50 callers
//!   the same through a raw tonic `AllocClient`, to show the client
//!   library's own cost.
//! - `--redis`: also starts its own `redis-server` (free loopback port,
//!   temp dir, `--save '' --appendonly yes --appendfsync everysec`) and,
//!   right after each seqsvr shape, runs its counterpart
//!   `redis-benchmark -t incr -r 1000000` with `-c 1`, `-c 50`, `-c 1 -P 16`
//!   or `-c 50 -P 16` (pairs run back to back, so that load from elsewhere
//!   on a shared machine skews both sides alike); then prints the ratios
//!   seqsvr / Redis against issue 3's targets.
//! - `--rounds R` (default 1) runs every shape R times and reports each
//!   side's best round (on a shared machine, the least disturbed one).
//! - CPU: each phase prints the CPU used by the load generator and the
//!   servers, in % of one core, to show which side was the bottleneck.
//!
//! Files: this one holds the options and the driver; beside it in
//! `alloc_grpc/`, `setup.rs` starts the cluster and reads CPU times,
//! `load.rs` is the load generator, `redis.rs` the Redis peer and
//! `report.rs` the figures and the ratio table.

#[path = "alloc_grpc/load.rs"]
mod load;
#[path = "alloc_grpc/redis.rs"]
mod redis;
#[path = "alloc_grpc/report.rs"]
mod report;
#[path = "alloc_grpc/setup.rs"]
mod setup;
#[path = "../../../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::Duration;

use load::{phase, Caller};
use redis::{redis_cmd, redis_shape, start_redis};
use report::{keep, ratio_table, Best};
use seqsvr_proto::alloc_client::AllocClient;
use setup::start_cluster;
use tonic::transport::Endpoint;

/// Uids served (and drawn from): `[0, UIDS)`.
const UIDS: u64 = 1_000_000;
/// Uids per section (10 sections).
const SECTION_SIZE: u64 = 100_000;
/// A large step: raises are rare, so the figures are the hot path's.
const STEP: u64 = 1_000_000;
/// Uids per `next_batch` call.
const BATCH: usize = 16;
/// Warm-up before each measured phase.
const WARMUP: Duration = Duration::from_secs(1);

/// Command-line options.
struct Args {
    /// Seconds measured per phase.
    secs: u64,
    /// AllocSvr runtime worker threads.
    threads: usize,
    /// Also run the Redis comparison.
    redis: bool,
    /// Rounds of every shape; each side's best round counts.
    rounds: usize,
}

impl Args {
    fn parse() -> Args {
        let mut a = Args {
            secs: 5,
            threads: 1,
            redis: false,
            rounds: 1,
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--secs" => a.secs = it.next().and_then(|v| v.parse().ok()).expect("--secs N"),
                "--threads" => {
                    a.threads = it.next().and_then(|v| v.parse().ok()).expect("--threads T")
                }
                "--redis" => a.redis = true,
                "--rounds" => {
                    a.rounds = it.next().and_then(|v| v.parse().ok()).expect("--rounds R")
                }
                // `cargo bench` passes `--bench`; ignore it and anything else.
                _ => {}
            }
        }
        a.secs = a.secs.max(1);
        a.threads = a.threads.max(1);
        a.rounds = a.rounds.max(1);
        a
    }
}

/// The shapes, in order: (title, uids per call (`0`: `next`), callers).
const SHAPES: [(&str, usize, usize); 4] = [
    ("next, 1 caller", 0, 1),
    ("next, 50 callers", 0, 50),
    ("batch of 16 uids, 1 caller", BATCH, 1),
    ("batch of 16 uids, 50 callers", BATCH, 50),
];
const NEXT_C1: usize = 0;
const NEXT_C50: usize = 1;
const BATCH_C1: usize = 2;
const BATCH_C50: usize = 3;

async fn run(args: &Args) {
    let mut redis = args.redis.then(start_redis);
    let cluster = start_cluster(args.threads);
    cluster.store.wait_ready(Duration::from_secs(30)).await;
    let client = cluster.client().await;
    cluster.wait_serving(&client).await;
    let addr = &cluster.alloc_addrs[0];
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the AllocSvr");
    let lib = Caller::Lib(client);
    let raw = Caller::Raw(AllocClient::new(channel));
    println!(
        "seqsvr: 3 store replicas + 1 AllocSvr (`seqsvr alloc --threads {}`), {} sections of {SECTION_SIZE} uids, step {STEP};\n        load: this process, 1 current-thread tokio runtime, N tasks in closed loops; 1 s warm-up + {} s per phase",
        args.threads,
        UIDS / SECTION_SIZE,
        args.secs
    );
    if let Some(r) = &redis {
        let version = Command::new("redis-server")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        println!(
            "redis:  {version}\n        own instance on 127.0.0.1:{}, --save '' --appendonly yes --appendfsync everysec;\n        redis-benchmark (1 thread) -t incr -r {UIDS}; ~1 s warm-up + ~{} s per shape",
            r.port, args.secs
        );
    }
    let s = args.secs;
    let mut best: Vec<Best> = SHAPES.iter().map(|_| Best::default()).collect();
    for round in 1..=args.rounds {
        if args.rounds > 1 {
            println!("\n== round {round} of {}", args.rounds);
        }
        for (&(title, batch, callers), best) in SHAPES.iter().zip(&mut best) {
            println!("\n{title}");
            keep(
                &mut best.lib,
                phase(&cluster, &lib, batch, callers, s).await,
            );
            if callers > 1 {
                keep(
                    &mut best.raw,
                    phase(&cluster, &raw, batch, callers, s).await,
                );
            }
            if let Some(r) = redis.as_mut() {
                keep(&mut best.redis, redis_shape(r, callers, batch.max(1), s));
            }
        }
    }
    if let Some(r) = &redis {
        let info = redis_cmd(r.port, "INFO persistence").unwrap_or_default();
        let aof = info
            .lines()
            .find(|l| l.starts_with("aof_enabled:"))
            .unwrap_or("aof_enabled:?");
        println!("\n(redis-server {})", aof.trim());
    }
    drop(redis);
    drop(cluster);
    if args.rounds > 1 {
        println!("\nbest of {} rounds (most seqs/s), per side", args.rounds);
        for (&(title, ..), b) in SHAPES.iter().zip(&best) {
            println!("{title}");
            for f in [&b.lib, &b.raw, &b.redis].into_iter().flatten() {
                f.print();
            }
        }
    }
    if args.redis {
        ratio_table(&best);
    } else {
        println!("\n(add --redis for the Redis comparison and the ratio table)");
    }
}

fn main() {
    let args = Args::parse();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "alloc_grpc: {cpus} CPUs, load average {} at start (figures vary run to run)",
        load.join(" ")
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(&args));
}
