//! Store raise latency and throughput with 3 replicas (real processes,
//! real fsync) on loopback, for 1 and 32 concurrent callers, and where a
//! raise's time goes (the stores' stage histograms: the test kit's `stages`).
//!
//! Run: `cargo bench -p seqsvr --bench store_raise` (add `-- <seconds>` to
//! change the duration of each phase; default 10). Prints figures; asserts
//! nothing about speed.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use seqsvr_core::{Incarnation, SetSpec};
use seqsvr_store_api::client::plaintext;
use seqsvr_store_api::{AllocAddrs, PeerClient, ReadClient};
use seqsvr_testkit::stages::{print_breakdown, Scrapes};
use seqsvr_testkit::{Bins, StoreCluster, StoreOptions};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

const SECTIONS: u32 = 64;
const STEP: u64 = 10_000;
/// The AllocSvr the bench plays, on the store's peer plane.
const ALLOC: &str = "bench";
const INCARNATION: Incarnation = 0xbe4c;

async fn fsyncs(c: &ReadClient) -> u64 {
    c.status_all()
        .await
        .into_iter()
        .filter_map(|(_, s)| s.ok())
        .map(|s| s.fsyncs)
        .sum()
}

async fn phase(
    cluster: &StoreCluster,
    leader: usize,
    grants: &[(u32, u64, u64)],
    callers: usize,
    secs: u64,
) -> Vec<(u32, u64, u64)> {
    // Callers talk to the leader first (any replica would forward).
    let mut addrs = cluster.peer_addrs.clone();
    addrs.swap(0, leader);
    let client = PeerClient::new(&addrs, &plaintext()).unwrap();
    let read = cluster.read();
    let before = fsyncs(&read).await;
    let leader_read =
        ReadClient::new(&[cluster.client_addrs[leader].clone()], &plaintext()).unwrap();
    let leader_before = fsyncs(&leader_read).await;
    let scrapes = Scrapes::take(&cluster.metrics_addrs);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..callers)
        .map(|k| {
            let mine: Vec<_> = grants
                .iter()
                .copied()
                .filter(|g| g.0 as usize % callers == k)
                .collect();
            let c = client.clone();
            tokio::spawn(async move {
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let mut mine = mine;
                let mut i = 0;
                while Instant::now() < deadline {
                    let len = mine.len();
                    let (s, e, m) = &mut mine[i % len];
                    let t = Instant::now();
                    *m = c
                        .raise(ALLOC, INCARNATION, *s, *e, *m + STEP)
                        .await
                        .expect("raise");
                    h.record(t.elapsed().as_micros() as u64).unwrap();
                    i += 1;
                }
                (h, mine)
            })
        })
        .collect();
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut out = Vec::new();
    for t in tasks {
        let (th, mine) = t.await.unwrap();
        h.add(th).unwrap();
        out.extend(mine);
    }
    let n = h.len();
    let total = fsyncs(&read).await - before;
    let on_leader = fsyncs(&leader_read).await - leader_before;
    println!(
        "callers {callers:>3}: {:>8.0} raises/s  p50 {:>6} µs  p99 {:>6} µs  p999 {:>6} µs  max {:>7} µs  fsyncs/raise {:.3} (leader {:.3})",
        n as f64 / secs as f64,
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
        total as f64 / n as f64,
        on_leader as f64 / n as f64,
    );
    print_breakdown(
        &scrapes,
        &Scrapes::take(&cluster.metrics_addrs),
        leader,
        h.mean(),
    );
    out.sort();
    out
}

fn main() {
    let secs: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let set = SetSpec {
            section_size: 1000,
            ..SetSpec::new(0, 0..SECTIONS as u64 * 1000)
        };
        let set = SetSpec { step: STEP, ..set };
        let opts = StoreOptions {
            metrics: true,
            ..Default::default()
        };
        let cluster = StoreCluster::start_opts(BINS, 3, set, Vec::new(), opts);
        let leader = cluster.wait_ready(Duration::from_secs(30)).await;
        let c = cluster.peer();
        let addrs = AllocAddrs {
            client: "127.0.0.1:1".into(),
            peer: "127.0.0.1:2".into(),
            admin: "127.0.0.1:3".into(),
        };
        c.register_alloc(ALLOC, INCARNATION, &addrs).await.unwrap();
        let known = vec![0; SECTIONS as usize];
        let (grants, _) = c.take_over(ALLOC, INCARNATION, 0, known).await.unwrap();
        let mut g: Vec<_> = grants.iter().map(|g| (g.section, g.epoch, g.max_seq)).collect();
        println!("store raise benchmark: 3 replicas (processes) on loopback, fsync on, {secs} s per phase");
        for callers in [1, 32] {
            g = phase(&cluster, leader, &g, callers, secs).await;
        }
    });
}
