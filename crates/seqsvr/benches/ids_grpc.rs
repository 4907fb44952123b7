//! Time-ordered ids over gRPC on loopback, in batches (docs/benchmarks.md,
//! "Time-ordered ids").
//!
//! Run: `cargo bench -p seqsvr --bench ids_grpc -- [--secs N] [--tasks T]`.
//! Prints figures; asserts nothing about speed.
//!
//! A real cluster of the real binary (3 store replicas, one AllocSvr) and
//! a namespace `bench` with the `twitter` layout and a 3 s window. The
//! AllocSvr holds one worker id, so the layout allows it 4,096 ids per ms
//! (4,096,000 ids/s), plus what it may borrow (at most a window ahead).
//! Load: `--tasks` tasks (default 4) on a current-thread runtime in this
//! process, each in a closed loop of `Alloc.NextId{count}` on one shared
//! channel, for count 1, 100, 1,000 and 10,000, each measured `--secs`
//! (default 3) after a 1 s warm-up. Each line prints calls/s, ids/s, the
//! ids/s as a multiple of count 1's (the peer, same run) and as a share
//! of the layout's limit; refused calls (the clock behind after
//! borrowing: the layout's limit reached) are counted, not retried
//! faster.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use seqsvr_core::ids::Layout;
use seqsvr_core::SetSpec;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::NextIdRequest;
use seqsvr_testkit::{Bins, SetCluster};
use tonic::transport::Endpoint;

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

const NS: &str = "bench";

fn main() {
    let mut secs = 3u64;
    let mut tasks = 4usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => secs = args.next().and_then(|s| s.parse().ok()).unwrap_or(secs),
            "--tasks" => tasks = args.next().and_then(|s| s.parse().ok()).unwrap_or(tasks),
            _ => {}
        }
    }
    println!("{}", seqsvr_testkit::machine_banner());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(secs, tasks));
}

async fn run(secs: u64, tasks: usize) {
    let layout = Layout::twitter();
    let set = SetSpec {
        section_size: 100_000,
        step: 1_000_000,
        ..SetSpec::new(0, 0..1_000_000)
    };
    let cl = SetCluster::start(BINS, set, 1);
    cl.store.wait_ready(Duration::from_secs(60)).await;
    let admin = cl.store.admin();
    let start = Instant::now();
    while let Err(e) = admin.create_id_space(NS, &layout, 3000).await {
        assert!(start.elapsed() < Duration::from_secs(60), "namespace: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let channel = Endpoint::from_shared(format!("http://{}", cl.alloc_addrs[0]))
        .unwrap()
        .connect_lazy();
    let stub = AllocClient::new(channel);
    let start = Instant::now();
    loop {
        let mut s = stub.clone();
        let r = s
            .next_id(NextIdRequest {
                namespace: NS.into(),
                count: 1,
            })
            .await;
        if r.is_ok() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no id");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let limit = 4_096_000.0;
    println!(
        "NextId over one channel, {tasks} tasks, {secs} s a shape; layout limit {limit:.0} ids/s (one worker id)"
    );
    println!(
        "{:>7} {:>11} {:>13} {:>9} {:>9} {:>8}",
        "count", "calls/s", "ids/s", "vs x1", "of limit", "refused"
    );
    let mut base = 0.0;
    for count in [1u32, 100, 1_000, 10_000] {
        let (calls, ids, refused) = shape(&stub, tasks, count, secs).await;
        if count == 1 {
            base = ids;
        }
        println!(
            "{count:>7} {calls:>11.0} {ids:>13.0} {:>8.1}x {:>8.2}x {refused:>8}",
            ids / base,
            ids / limit
        );
    }
    drop(cl);
}

/// `tasks` closed loops of `NextId{count}` for 1 s of warm-up and `secs`
/// measured: calls/s, ids/s and refused calls.
async fn shape(
    stub: &AllocClient<tonic::transport::Channel>,
    tasks: usize,
    count: u32,
    secs: u64,
) -> (f64, f64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let [calls, ids, refused] = [(); 3].map(|()| Arc::new(AtomicU64::new(0)));
    let mut hs = Vec::new();
    for _ in 0..tasks {
        let (mut stub, stop, measuring) = (stub.clone(), stop.clone(), measuring.clone());
        let (calls, ids, refused) = (calls.clone(), ids.clone(), refused.clone());
        hs.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = stub
                    .next_id(NextIdRequest {
                        namespace: NS.into(),
                        count,
                    })
                    .await;
                if !measuring.load(Ordering::Relaxed) {
                    continue;
                }
                match r {
                    Ok(r) => {
                        calls.fetch_add(1, Ordering::Relaxed);
                        ids.fetch_add(r.into_inner().ids.len() as u64, Ordering::Relaxed);
                    }
                    Err(_) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let took = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        let _ = h.await;
    }
    let f = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / took;
    (f(&calls), f(&ids), refused.load(Ordering::Relaxed))
}
