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

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use seqsvr_alloc::node::AllocNodeConfig;
use seqsvr_client::SeqClient;
use seqsvr_core::SetSpec;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{NextBatchRequest, NextRequest};
use seqsvr_store::node::InitialAlloc;
use support::{free_port, Proc, SetCluster, StoreCluster};
use tonic::transport::{Channel, Endpoint};

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

/// xorshift64: a few cycles per number, so the PRNG costs nothing.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (multiply-shift).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

// ---------------------------------------------------------------- CPU time

/// CPU seconds (user + system) of process `pid`, from /proc.
fn cpu_of(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces): state is 3rd,
    // utime 14th, stime 15th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / hz
}

/// CPU seconds of this process (`RUSAGE_SELF`) or of its reaped children
/// (`RUSAGE_CHILDREN`).
fn rusage(who: i32) -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut r) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// CPU seconds of the bench process, the AllocSvr and the stores (summed).
#[derive(Clone, Copy)]
struct Cpu {
    bench: f64,
    alloc: f64,
    stores: f64,
}

impl Cpu {
    fn now(cluster: &SetCluster) -> Cpu {
        Cpu {
            bench: rusage(libc::RUSAGE_SELF),
            alloc: cluster.allocs[0].pid().map(cpu_of).unwrap_or(0.0),
            stores: cluster
                .store
                .procs
                .iter()
                .filter_map(|p| p.pid())
                .map(cpu_of)
                .sum(),
        }
    }
}

/// `x` CPU seconds over `wall` seconds, in % of one core.
fn pct(x: f64, wall: f64) -> f64 {
    100.0 * x / wall
}

// ---------------------------------------------------------------- seqsvr

/// Starts 3 store replicas and one AllocSvr with `threads` workers owning
/// every section.
fn start_cluster(threads: usize) -> SetCluster {
    let set = SetSpec {
        section_size: SECTION_SIZE,
        step: STEP,
        ..SetSpec::new(0, 0..UIDS)
    };
    let id = "alloc-1".to_string();
    let addr = format!("127.0.0.1:{}", free_port());
    let initial = vec![InitialAlloc {
        id: id.clone(),
        addr: addr.clone(),
        first: 0,
        count: set.section_count(),
    }];
    let store = StoreCluster::start_with(3, set, initial);
    // Only the required fields: everything else takes `AllocNodeConfig`'s
    // defaults, as an operator's minimal file would.
    let store_list: Vec<String> = store.addrs.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        "id = {id:?}\naddr = {addr:?}\nstore = [{}]\n",
        store_list.join(", ")
    );
    AllocNodeConfig::from_toml(&text).expect("a valid AllocSvr config");
    let path = store.dir.path().join(format!("{id}.toml"));
    std::fs::write(&path, text).unwrap();
    let args = vec![
        "alloc".into(),
        "--config".into(),
        path.display().to_string(),
        "--threads".into(),
        threads.to_string(),
    ];
    let alloc = Proc::start(&id, args, store.dir.path().join(format!("{id}.log")));
    SetCluster {
        store,
        alloc_addrs: vec![addr],
        allocs: vec![alloc],
    }
}

/// How a caller reaches the AllocSvr.
#[derive(Clone)]
enum Caller {
    /// Through the client library (routing, retries, deadlines).
    Lib(SeqClient),
    /// A bare tonic stub on one channel (no routing, no retries).
    Raw(AllocClient<Channel>),
}

impl Caller {
    fn name(&self) -> &'static str {
        match self {
            Caller::Lib(_) => "SeqClient",
            Caller::Raw(_) => "raw tonic",
        }
    }

    /// One call of `batch` uids (`0` = a single `next`); returns the seqs
    /// handed out.
    async fn call(&mut self, rng: &mut XorShift, batch: usize) -> Result<u64, String> {
        if batch == 0 {
            let uid = rng.below(UIDS);
            match self {
                Caller::Lib(c) => c.next(uid).await.map_err(|e| e.to_string())?,
                Caller::Raw(c) => {
                    c.next(NextRequest {
                        uid,
                        route_version: 0,
                    })
                    .await
                    .map_err(|e| e.to_string())?
                    .get_ref()
                    .seq
                }
            };
            return Ok(1);
        }
        let uids: Vec<u64> = (0..batch).map(|_| rng.below(UIDS)).collect();
        let n = match self {
            Caller::Lib(c) => c.next_batch(&uids).await.map_err(|e| e.to_string())?.len(),
            Caller::Raw(c) => c
                .next_batch(NextBatchRequest {
                    uids,
                    route_version: 0,
                })
                .await
                .map_err(|e| e.to_string())?
                .get_ref()
                .seqs
                .len(),
        };
        Ok(n as u64)
    }
}

/// One measured run's figures.
struct Figures {
    /// What ran, as printed.
    label: String,
    /// CPU use of the processes involved, as printed.
    cpu: String,
    /// Requests (round trips) per second: calls, or pipelines for Redis.
    calls_per_s: f64,
    /// Sequence numbers handed out per second.
    seqs_per_s: f64,
    /// Latency quantiles and max, in µs (per call; for a Redis pipeline,
    /// per command as redis-benchmark counts it).
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

/// Prints one result line.
fn report(f: &Figures) {
    println!(
        "  {:<31} {:>10.0} seqs/s {:>8.0} req/s  p50 {:>5.0} p99 {:>5.0} p999 {:>6.0} max {:>6.0} µs  cpu% {}",
        f.label, f.seqs_per_s, f.calls_per_s, f.p50, f.p99, f.p999, f.max, f.cpu,
    );
}

/// Keeps in `best` whichever of it and `f` handed out more seqs/s.
fn keep(best: &mut Option<Figures>, f: Figures) {
    if best.as_ref().is_none_or(|b| f.seqs_per_s > b.seqs_per_s) {
        *best = Some(f);
    }
}

const WARMING: u8 = 0;
const MEASURING: u8 = 1;
const STOPPED: u8 = 2;

/// Runs `callers` closed-loop tasks of `batch`-uid calls (`0`: `next`):
/// 1 s of warm-up, then `secs` measured. A call counts if it started and
/// ended while measuring.
async fn phase(
    cluster: &SetCluster,
    caller: &Caller,
    batch: usize,
    callers: usize,
    secs: u64,
) -> Figures {
    let state = Arc::new(AtomicU8::new(WARMING));
    let tasks: Vec<_> = (0..callers)
        .map(|k| {
            let mut caller = caller.clone();
            let state = state.clone();
            tokio::spawn(async move {
                let mut rng = XorShift::new(k as u64 + 1);
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let (mut seqs, mut errors) = (0u64, 0u64);
                let mut last_error = None;
                loop {
                    let s = state.load(Ordering::Relaxed);
                    if s == STOPPED {
                        break;
                    }
                    let t = Instant::now();
                    let r = caller.call(&mut rng, batch).await;
                    let us = t.elapsed().as_micros() as u64;
                    if s != MEASURING || state.load(Ordering::Relaxed) != MEASURING {
                        continue;
                    }
                    match r {
                        Ok(n) => {
                            h.saturating_record(us.max(1));
                            seqs += n;
                        }
                        Err(e) => {
                            errors += 1;
                            last_error = Some(e);
                        }
                    }
                }
                (h, seqs, errors, last_error)
            })
        })
        .collect();
    tokio::time::sleep(WARMUP).await;
    let cpu0 = Cpu::now(cluster);
    state.store(MEASURING, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    state.store(STOPPED, Ordering::Relaxed);
    let wall = start.elapsed().as_secs_f64();
    let cpu1 = Cpu::now(cluster);
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let (mut seqs, mut errors, mut last_error) = (0u64, 0u64, None);
    for t in tasks {
        let (th, s, e, le) = t.await.unwrap();
        h.add(th).unwrap();
        seqs += s;
        errors += e;
        last_error = last_error.or(le);
    }
    let shape = if batch == 0 { "next" } else { "batch-16" };
    let f = Figures {
        label: format!("seqsvr {shape} c={callers} {}", caller.name()),
        cpu: format!(
            "bench {:.0} alloc {:.0} stores {:.0}",
            pct(cpu1.bench - cpu0.bench, wall),
            pct(cpu1.alloc - cpu0.alloc, wall),
            pct(cpu1.stores - cpu0.stores, wall),
        ),
        calls_per_s: h.len() as f64 / wall,
        seqs_per_s: seqs as f64 / wall,
        p50: h.value_at_quantile(0.5) as f64,
        p99: h.value_at_quantile(0.99) as f64,
        p999: h.value_at_quantile(0.999) as f64,
        max: h.max() as f64,
    };
    report(&f);
    if errors > 0 {
        println!(
            "    {errors} errors; last: {}",
            last_error.unwrap_or_default()
        );
    }
    f
}

// ---------------------------------------------------------------- Redis

/// A `redis-server` of our own, stopped on drop.
struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        support::signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends one inline command and returns the raw reply.
fn redis_cmd(port: u16, cmd: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(format!("{cmd}\r\n").as_bytes())?;
    let mut buf = vec![0u8; 64 * 1024];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn start_redis() -> RedisServer {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("redis.log")).unwrap();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir.path().display().to_string(),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--daemonize",
            "no",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("redis-server not found: install it (deploy/bench/alloc_vs_redis.sh does)");
    let server = RedisServer {
        child,
        port,
        _dir: dir,
    };
    let start = Instant::now();
    while !redis_cmd(port, "PING").is_ok_and(|r| r.starts_with("+PONG")) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "redis-server did not answer PING"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// One redis-benchmark run: its figures, wall time, and the CPU seconds
/// of redis-benchmark and of redis-server.
struct RedisRun {
    f: Figures,
    wall: f64,
    cpu_client: f64,
    cpu_server: f64,
}

/// Runs `redis-benchmark -t incr -r 1000000 -n n -c clients -P pipeline`
/// and parses its default (non-quiet) report: the "throughput summary",
/// the "latency summary" (p50, p99, max) and, for p999, the first line of
/// the percentile distribution at or above 99.9 %.
fn redis_bench(server: &mut RedisServer, clients: usize, pipeline: usize, n: u64) -> RedisRun {
    let cpu_server0 = cpu_of(server.child.id());
    let cpu_children0 = rusage(libc::RUSAGE_CHILDREN);
    let start = Instant::now();
    // Blocks the (current-thread) runtime: nothing of ours runs meanwhile.
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.port.to_string(),
            "-t",
            "incr",
            "-r",
            &UIDS.to_string(),
            "-n",
            &n.to_string(),
            "-c",
            &clients.to_string(),
            "-P",
            &pipeline.to_string(),
        ])
        .stdin(Stdio::null())
        .output()
        .expect("redis-benchmark not found: install redis-tools");
    let wall = start.elapsed().as_secs_f64();
    let cpu_client = rusage(libc::RUSAGE_CHILDREN) - cpu_children0;
    let cpu_server = cpu_of(server.child.id()) - cpu_server0;
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
    assert!(
        out.status.success(),
        "redis-benchmark failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("\"appendonly\": yes"),
        "redis-server is not running with appendonly: {text}"
    );
    let parse_err = || format!("cannot parse redis-benchmark output:\n{text}");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let rps: f64 = lines
        .iter()
        .find_map(|l| l.strip_prefix("throughput summary:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{}", parse_err()));
    // "avg min p50 p95 p99 max" header, then the values (ms).
    let summary: Vec<f64> = lines
        .iter()
        .position(|l| l.starts_with("avg") && l.contains("p99"))
        .and_then(|i| lines.get(i + 1))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(summary.len() >= 6, "{}", parse_err());
    // "99.902% <= 7.159 milliseconds (cumulative count 19984)"
    let p999 = lines
        .iter()
        .skip_while(|l| !l.starts_with("Latency by percentile distribution"))
        .filter_map(|l| {
            let (p, rest) = l.split_once("% <= ")?;
            let p: f64 = p.parse().ok()?;
            let ms: f64 = rest.split_whitespace().next()?.parse().ok()?;
            Some((p, ms))
        })
        .find(|&(p, _)| p >= 99.9)
        .map(|(_, ms)| ms)
        .unwrap_or(f64::NAN);
    RedisRun {
        f: Figures {
            label: String::new(),
            cpu: String::new(),
            calls_per_s: rps / pipeline as f64,
            seqs_per_s: rps,
            p50: summary[2] * 1000.0,
            p99: summary[4] * 1000.0,
            p999: p999 * 1000.0,
            max: summary[5] * 1000.0,
        },
        wall,
        cpu_client,
        cpu_server,
    }
}

/// A warm-up of about 1 s (sized by a short probe), then a run of about
/// `secs` (sized by the warm-up's rate): redis-benchmark has no duration
/// option.
fn redis_shape(server: &mut RedisServer, clients: usize, pipeline: usize, secs: u64) -> Figures {
    let probe = redis_bench(server, clients, pipeline, 10_000 * pipeline as u64);
    let warm = redis_bench(
        server,
        clients,
        pipeline,
        (probe.f.seqs_per_s * WARMUP.as_secs_f64()) as u64,
    );
    let n = ((warm.f.seqs_per_s * secs as f64) as u64).max(10_000);
    let mut r = redis_bench(server, clients, pipeline, n);
    r.f.label = if pipeline > 1 {
        format!("redis  INCR -c {clients} -P {pipeline}")
    } else {
        format!("redis  INCR -c {clients}")
    };
    r.f.cpu = format!(
        "redis-benchmark {:.0} redis-server {:.0}  (n={n}, {:.1} s)",
        pct(r.cpu_client, r.wall),
        pct(r.cpu_server, r.wall),
        r.wall
    );
    report(&r.f);
    r.f
}

// ---------------------------------------------------------------- driver

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

/// One shape's best run per side (most seqs/s over the rounds).
#[derive(Default)]
struct Best {
    /// seqsvr through `SeqClient`.
    lib: Option<Figures>,
    /// seqsvr through a raw tonic stub (50 callers only).
    raw: Option<Figures>,
    /// Redis.
    redis: Option<Figures>,
}

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
                report(f);
            }
        }
    }
    if args.redis {
        ratio_table(&best);
    } else {
        println!("\n(add --redis for the Redis comparison and the ratio table)");
    }
}

// ---------------------------------------------------------------- report

fn ratio_table(best: &[Best]) {
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
