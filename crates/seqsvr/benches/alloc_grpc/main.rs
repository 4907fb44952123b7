//! AllocSvr over gRPC on loopback, against the same API on a bare tonic
//! server and against Redis `INCR` (AOF on, `appendfsync everysec`).
//!
//! Run: `cargo bench -p seqsvr --bench alloc_grpc -- [--secs N] [--threads T]
//! [--rounds R] [--redis] [--exhaust] [--shape K] [--hot N] [--instructions]
//! [--bare-no-router] [--forward] [--before PATH]`, or the whole comparison (installs
//! Redis if missing) with `deploy/bench/alloc_vs_redis.sh [same options]`.
//! Prints figures; asserts nothing about speed. What it does and how to
//! read it: `docs/benchmarks.md`.
//!
//! - seqsvr: a real cluster of the real binary — 3 store replicas and ONE
//!   AllocSvr (`seqsvr alloc --threads T`, default 1) owning all 10
//!   sections of uids `[0, 1_000_000)`, step 1,000,000 so that ceiling
//!   raises are rare.
//! - bare: a tonic server in a process of its own on the same runtime,
//!   serving the same `Alloc` service with handlers that only bump a
//!   counter (`alloc_grpc/bare.rs`): what the transport costs. The ratio
//!   seqsvr / bare is what the AllocSvr adds per call.
//! - Load: a current-thread tokio runtime in this process (one core, like
//!   redis-benchmark), N tasks each in a closed loop, uids uniform over 1 M
//!   (xorshift), latency per call in an HDR histogram (µs). Each phase warms
//!   up for 1 s, then measures for `--secs` (default 5).
//! - Shapes: `next` with 1 and 50 callers, `next_batch` of 16 uids with 1
//!   and 50 callers; each against seqsvr and the bare server, through
//!   `seqsvr_client::SeqClient` and through a raw tonic `AllocClient` on
//!   one channel (no routing, retries or deadlines).
//! - `--redis`: also starts its own `redis-server` (free loopback port,
//!   temp dir, `--save '' --appendonly yes --appendfsync everysec`) and,
//!   right after each shape, runs its counterpart
//!   `redis-benchmark -t incr -r 1000000` with `-c 1`, `-c 50`, `-c 1 -P 16`
//!   or `-c 50 -P 16` (back to back, so that load from elsewhere on a
//!   shared machine skews every side alike).
//! - `--rounds R` (default 1) runs every shape R times, interleaved, and
//!   reports each side's median round. Within a shape, the AllocSvr and
//!   the bare server run back to back, the AllocSvr first in odd rounds
//!   and the bare server first in even ones.
//! - `--shape K` runs only the K-th shape (1–4, in the order above), e.g.
//!   to profile one.
//! - `--hot N`: the shapes draw their uids from N uids spread evenly over
//!   the sections instead of uniformly from 1 M. With N = 1,000 every
//!   uid's cell stays in the CPU's caches, so the ratio to the bare server
//!   shows the serving path alone, without the cache misses of the
//!   AllocSvr's per-uid table (which the bare server has none of).
//! - `--exhaust`: `next` at 50 callers on 50 hot uids, with step 1,000,000
//!   (steady state) and on a second cluster with step 100 (every hot uid
//!   runs through its section's ceiling in milliseconds): raise-ahead
//!   should keep the p99 within 2× of the steady state.
//! - CPU: each phase prints the CPU used by the load generator and the
//!   servers, in % of one core, to show which side was the bottleneck,
//!   and the server's user and kernel time, writes and context switches
//!   per call.
//! - `--bare-no-router`: the bare server is served without tonic's router,
//!   as the AllocSvr's client plane is, instead of through it as a tonic
//!   user writes it by default: the ratio then shows the AllocSvr's own
//!   work alone (`alloc_grpc/bare.rs`).
//! - `--forward`: only `next` at 50 callers through a raw stub, straight
//!   to the owner and through a second AllocSvr that owns no section (so
//!   every call is forwarded to the owner; `docs/architecture/forwarding.md`),
//!   back to back, `--rounds` times, first one then the other alternately.
//! - `--before PATH`: only `next` at 50 callers, this build's AllocSvr
//!   against the AllocSvr binary at PATH (an older build), each in a
//!   cluster of its own with this build's stores, back to back,
//!   `--rounds` times (`alloc_grpc/before.rs`).
//! - `--instructions`: instead of timing, runs both servers under
//!   callgrind and counts the instructions each spends per call, for the
//!   50-caller shapes (or `--shape K`) and both clients: a figure that does
//!   not move with the machine's load (`alloc_grpc/instructions.rs`).
//!
//! Files: this one holds the options and the driver; beside it in
//! `alloc_grpc/`, `setup.rs` starts the cluster and reads CPU times,
//! `bare.rs` is the bare server, `load.rs` the load generator, `redis.rs`
//! the Redis peer and `report.rs` the figures and the ratio tables.

mod bare;
mod before;
mod instructions;
mod load;
mod redis;
mod report;
mod setup;

use std::process::Command;
use std::time::Duration;

use bare::BareServer;
use load::{phase, Caller, Uids};
use redis::{redis_cmd, redis_shape, start_redis};
use report::{bare_table, ratio_table, Sides};
use seqsvr_client::{ClientOptions, SeqClient};
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_testkit::Bins;
use setup::{scrape, start_cluster, start_cluster_under, Target};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Uids served (and drawn from): `[0, UIDS)`.
const UIDS: u64 = 1_000_000;
/// Uids per section (10 sections).
const SECTION_SIZE: u64 = 100_000;
/// A large step: raises are rare, so the figures are the hot path's.
const STEP: u64 = 1_000_000;
/// The step of `--exhaust`'s second cluster: a hot uid runs through it in
/// a few milliseconds.
const SMALL_STEP: u64 = 100;
/// Hot uids of `--exhaust` (spread over the 10 sections).
const HOT_UIDS: u64 = 50;
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
    /// Rounds of every shape; each side's median round counts.
    rounds: usize,
    /// Also run the step-exhaustion comparison.
    exhaust: bool,
    /// Only this shape (1-based index into `SHAPES`), e.g. to profile one.
    shape: Option<usize>,
    /// Count instructions per call under callgrind instead of timing.
    instructions: bool,
    /// Draw uids from this many hot uids instead of uniformly.
    hot: Option<u64>,
    /// Serve the bare server without tonic's router.
    bare_no_router: bool,
    /// Only compare `next` direct and forwarded.
    forward: bool,
    /// Only compare this build's AllocSvr with the one at this path.
    before: Option<String>,
}

impl Args {
    fn parse() -> Args {
        let mut a = Args {
            secs: 5,
            threads: 1,
            redis: false,
            rounds: 1,
            exhaust: false,
            shape: None,
            instructions: false,
            hot: None,
            bare_no_router: false,
            forward: false,
            before: None,
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--secs" => a.secs = it.next().and_then(|v| v.parse().ok()).expect("--secs N"),
                "--threads" => {
                    a.threads = it.next().and_then(|v| v.parse().ok()).expect("--threads T")
                }
                "--redis" => a.redis = true,
                "--forward" => a.forward = true,
                "--before" => a.before = Some(it.next().expect("--before PATH")),
                "--exhaust" => a.exhaust = true,
                "--instructions" => a.instructions = true,
                bare::NO_ROUTER => a.bare_no_router = true,
                "--shape" => {
                    a.shape = it.next().and_then(|v| v.parse().ok());
                    assert!(
                        a.shape.is_some_and(|i| (1..=SHAPES.len()).contains(&i)),
                        "--shape 1..={}",
                        SHAPES.len()
                    );
                }
                "--hot" => {
                    let n = it.next().and_then(|v| v.parse().ok());
                    assert!(
                        n.is_some_and(|n| (1..=UIDS).contains(&n)),
                        "--hot 1..={UIDS}"
                    );
                    a.hot = n;
                }
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

/// Connects a raw tonic stub to `addr`.
async fn raw_stub(addr: &str) -> Caller {
    let channel = seqsvr_net::client::endpoint(addr, None, Duration::from_secs(1))
        .unwrap()
        .connect()
        .await
        .expect("connect to the server");
    Caller::Raw(AllocClient::new(channel))
}

/// A `SeqClient` through `seed`.
async fn lib_client(seed: &str) -> Caller {
    let opts = ClientOptions {
        deadline: Duration::from_secs(5),
        ..Default::default()
    };
    Caller::Lib(
        SeqClient::connect(&[seed.to_string()], opts)
            .await
            .expect("a client through the server"),
    )
}

/// `--instructions`: instructions per call, AllocSvr and bare server
/// under callgrind (see `alloc_grpc/instructions.rs`).
async fn run_instructions(args: &Args) {
    if !instructions::available() {
        println!("--instructions needs valgrind (with callgrind_control) on PATH; not run");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let under = instructions::under(dir.path());
    let (cluster, _) = start_cluster_under(args.threads, STEP, under.clone());
    cluster.store.wait_ready(Duration::from_secs(30)).await;
    let client = cluster.client().await;
    cluster.wait_serving(&client).await;
    let bare_server = BareServer::start_under(args.threads, args.bare_no_router, &under);
    let callers = [
        (
            "SeqClient",
            Caller::Lib(client),
            lib_client(&bare_server.addr).await,
        ),
        (
            "raw tonic",
            raw_stub(&cluster.alloc_addrs[0]).await,
            raw_stub(&bare_server.addr).await,
        ),
    ];
    println!(
        "instructions per call under callgrind: {} calls counted per shape, client and server,\n\
         after a warm-up; each server's idle work over the same span subtracted",
        instructions::COUNTED_CALLS,
    );
    let alloc_pid = cluster.allocs[0].pid().expect("the AllocSvr runs");
    let (seqsvr, bare) = tokio::join!(
        instructions::Counted::new(alloc_pid, dir.path()),
        instructions::Counted::new(bare_server.pid(), dir.path()),
    );
    println!(
        "\n  {:<30} {:<10} {:>10} {:>10} {:>9}   (before subtracting idle work)",
        "shape", "client", "seqsvr", "bare", "bare/seqsvr"
    );
    for (i, &(title, batch, n)) in SHAPES.iter().enumerate() {
        let picked = match args.shape {
            Some(k) => k == i + 1,
            None => n > 1,
        };
        if !picked {
            continue;
        }
        for (client, ours, theirs) in &callers {
            let (a, a_raw) = seqsvr.per_call(ours, batch, n).await;
            let (b, b_raw) = bare.per_call(theirs, batch, n).await;
            println!(
                "  {title:<30} {client:<10} {a:>10.0} {b:>10.0} {:>10.3}×   ({a_raw:.0} vs {b_raw:.0})",
                b / a
            );
        }
    }
    println!(
        "\n  bare/seqsvr is the AllocSvr's expected speed relative to the bare server where\n  user-space work limits both (kernel time is not counted)"
    );
    drop(bare_server);
    drop(cluster);
}

async fn run(args: &Args) {
    if args.instructions {
        return run_instructions(args).await;
    }
    let mut redis = args.redis.then(start_redis);
    let (cluster, _) = start_cluster(args.threads, STEP);
    cluster.store.wait_ready(Duration::from_secs(30)).await;
    let client = cluster.client().await;
    cluster.wait_serving(&client).await;
    if args.forward {
        return forward(args, cluster).await;
    }
    if let Some(path) = &args.before {
        return before::before_after(args, cluster, path).await;
    }
    let seqsvr = Target::seqsvr(&cluster);
    let lib = Caller::Lib(client);
    let raw = raw_stub(&cluster.alloc_addrs[0]).await;
    let bare_server = BareServer::start(args.threads, args.bare_no_router);
    let bare = Target {
        name: "bare",
        server: Some(bare_server.pid()),
        stores: Vec::new(),
    };
    let bare_lib = lib_client(&bare_server.addr).await;
    let bare_raw = raw_stub(&bare_server.addr).await;
    println!(
        "seqsvr: 3 store replicas + 1 AllocSvr (`seqsvr alloc --threads {}`), {} sections of {SECTION_SIZE} uids, step {STEP};\n        bare:   a tonic server on the same runtime whose handlers only bump a counter ({});\n        load: this process, 1 current-thread tokio runtime, N tasks in closed loops; 1 s warm-up + {} s per phase;\n        uids: {}",
        args.threads,
        UIDS / SECTION_SIZE,
        if args.bare_no_router {
            "served without tonic's router, --bare-no-router"
        } else {
            "through tonic's router, as by default"
        },
        args.secs,
        match args.hot {
            Some(n) => format!("{n} hot uids spread over the sections (--hot)"),
            None => format!("uniform over {UIDS}"),
        }
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
    let mut sides: Vec<Sides> = SHAPES.iter().map(|_| Sides::default()).collect();
    for round in 1..=args.rounds {
        if args.rounds > 1 {
            println!("\n== round {round} of {}", args.rounds);
        }
        for (i, (&(title, batch, callers), side)) in SHAPES.iter().zip(&mut sides).enumerate() {
            if args.shape.is_some_and(|k| k != i + 1) {
                continue;
            }
            println!("\n{title}");
            let u = args.hot.map_or(Uids::Uniform, Uids::Hot);
            // Each pair runs back to back; which server goes first
            // alternates by round, so that neither always follows the
            // other's load (or the Redis run).
            let bare_first = round % 2 == 0;
            for (caller, bare_caller, seqsvr_side, bare_side) in [
                (&lib, &bare_lib, &mut side.lib, &mut side.bare_lib),
                (&raw, &bare_raw, &mut side.raw, &mut side.bare_raw),
            ] {
                if bare_first {
                    bare_side.push(phase(&bare, bare_caller, batch, u, callers, s).await);
                }
                seqsvr_side.push(phase(&seqsvr, caller, batch, u, callers, s).await);
                if !bare_first {
                    bare_side.push(phase(&bare, bare_caller, batch, u, callers, s).await);
                }
            }
            if let Some(r) = redis.as_mut() {
                side.redis.push(redis_shape(r, callers, batch.max(1), s));
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
    drop(bare_server);
    if args.exhaust {
        exhaust(args, &seqsvr, &lib).await;
    }
    drop(cluster);
    if args.rounds > 1 {
        println!("\nmedian of {} rounds (by seqs/s), per side", args.rounds);
        for (&(title, ..), side) in SHAPES.iter().zip(&sides) {
            println!("{title}");
            for f in side.medians() {
                f.print();
            }
        }
    }
    bare_table(&sides, &SHAPES);
    if args.redis && args.shape.is_none() {
        ratio_table(&sides);
    } else {
        println!("\n(add --redis for the Redis comparison and its ratio table)");
    }
}

/// `--forward`: `next` at 50 callers straight to the owner, and through
/// a second AllocSvr that owns nothing, so that every call is forwarded.
async fn forward(args: &Args, mut cluster: seqsvr_testkit::SetCluster) {
    let i = cluster.add_alloc();
    let via = cluster.alloc_addrs[i].clone();
    let start = std::time::Instant::now();
    loop {
        let answered = match AllocClient::connect(format!("http://{via}")).await {
            Ok(mut c) => c
                .next(seqsvr_proto::NextRequest {
                    uid: 1,
                    count: 0,
                    ..Default::default()
                })
                .await
                .is_ok(),
            Err(_) => false,
        };
        if answered {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{via} never answered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let owner = Target::seqsvr(&cluster);
    let front = Target {
        name: "forwarded",
        server: cluster.allocs[i].pid(),
        stores: owner.stores.clone(),
    };
    let (direct, through) = (
        raw_stub(&cluster.alloc_addrs[0]).await,
        raw_stub(&via).await,
    );
    println!(
        "next, 50 callers, raw tonic stub: `seqsvr` straight to the owner (alloc-1),\n\
         `forwarded` through alloc-2, which owns no section (its cpu% is the forwarding node's)"
    );
    let u = args.hot.map_or(Uids::Uniform, Uids::Hot);
    for round in 1..=args.rounds {
        println!("\n== round {round} of {}", args.rounds);
        if round % 2 == 0 {
            phase(&front, &through, 0, u, 50, args.secs).await;
        }
        phase(&owner, &direct, 0, u, 50, args.secs).await;
        if round % 2 == 1 {
            phase(&front, &through, 0, u, 50, args.secs).await;
        }
    }
}

/// Callers that run through steps quickly: `next` at 50 callers on a few
/// hot uids, first on the main cluster (step 1,000,000: no raise in
/// sight, the steady state), then on a cluster whose step is
/// [`SMALL_STEP`], where every hot uid exhausts its section's ceiling
/// within milliseconds and raise-ahead must keep callers from waiting.
async fn exhaust(args: &Args, seqsvr: &Target, lib: &Caller) {
    let hot = Uids::Hot(HOT_UIDS);
    println!(
        "\nnext on {HOT_UIDS} hot uids, 50 callers: step {STEP} (steady) vs step {SMALL_STEP}"
    );
    let steady = phase(seqsvr, lib, 0, hot, 50, args.secs).await;
    let (small, metrics) = start_cluster(args.threads, SMALL_STEP);
    small.store.wait_ready(Duration::from_secs(30)).await;
    let client = small.client().await;
    small.wait_serving(&client).await;
    let target = Target::seqsvr(&small);
    let before = raises(&metrics);
    let f = phase(&target, &Caller::Lib(client), 0, hot, 50, args.secs).await;
    let after = raises(&metrics);
    println!(
        "  raises during the run (warm-up included): {}, calls that found their section exhausted: {}",
        after.0 - before.0,
        after.1 - before.1
    );
    println!(
        "  p99 {:.0} µs vs {:.0} µs steady: {:.2}×  (target ≤ 2×: {}); p999 {:.0} vs {:.0} µs",
        f.p99,
        steady.p99,
        f.p99 / steady.p99,
        if f.p99 <= 2.0 * steady.p99 {
            "met"
        } else {
            "NOT met"
        },
        f.p999,
        steady.p999
    );
}

/// The AllocSvr's raises applied and calls that found their section
/// exhausted so far, from its metrics.
fn raises(metrics: &str) -> (u64, u64) {
    (
        scrape(metrics, "seqsvr_alloc_raises_applied_total"),
        scrape(metrics, "seqsvr_alloc_exhausted_total"),
    )
}

fn main() {
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some(bare::FLAG) {
        let threads = argv.next().and_then(|t| t.parse().ok()).unwrap_or(1);
        let no_router = argv.next().as_deref() == Some(bare::NO_ROUTER);
        return bare::serve(threads, no_router);
    }
    let args = Args::parse();
    println!(
        "alloc_grpc: {} (figures vary run to run)",
        seqsvr_testkit::machine_banner()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(&args));
}
