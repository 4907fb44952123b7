//! The arbiter's rebalance with real processes (docs/operations.md,
//! Automatic rebalancing): an AllocSvr killed with SIGKILL under load
//! loses its sections to its peer when its lease has certainly expired;
//! restarted, it gets its share back by planned handoffs, a bounded batch
//! per interval, while the workload runs on — the per-uid checker sees no
//! repeat and no regression, and no call fails while the sections move.
//! With the rebalance turned off, the restarted AllocSvr stays empty.
//! With TLS on every plane, the leader's handoff calls present its store
//! certificate, which the AllocSvr's admin plane takes from its own set.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use seqsvr::drill::{widest_section_jump, NUMBERS_PER_CALL};
use seqsvr_client::SeqClient;
use seqsvr_store::arbiter::RebalanceConfig;
use seqsvr_testkit::{
    assert_monotonic, metric, scrape, small_set, start_spread_workload, SetCluster, StoreOptions,
    Workload,
};
use seqsvr_testkit::{attack, Bins};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Callers of the workload.
const CALLERS: u64 = 8;

/// Sections routed per AllocSvr, as the store says.
async fn shares(cluster: &SetCluster) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    if let Ok(r) = cluster.store.read().routes().await {
        for e in &r.entries {
            *out.entry(e.alloc.clone()).or_default() += e.count;
        }
    }
    out
}

/// Waits until `want` holds of the routes; fails with the store's logs.
async fn wait_for(
    cluster: &SetCluster,
    what: &str,
    within: Duration,
    want: impl Fn(&BTreeMap<String, u32>) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let s = shares(cluster).await;
        if want(&s) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "{what}: routes {s:?} after {within:?}\n{}",
            cluster.store.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Kills alloc-1 under load and waits until alloc-2 serves every section
/// and every call that began during the outage has returned; returns the
/// cluster, the workload and the failures counted so far.
async fn kill_and_fail_over(rebalance: RebalanceConfig) -> (SetCluster, SeqClient, Workload, u64) {
    let opts = StoreOptions {
        metrics: true,
        rebalance,
        ..Default::default()
    };
    let mut cluster = SetCluster::start_opts(BINS, small_set(), 2, opts);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let w = start_spread_workload(&c, CALLERS);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.allocs[0].kill9();
    wait_for(&cluster, "failover", Duration::from_secs(30), |s| {
        s.get("alloc-2") == Some(&8)
    })
    .await;
    // The client's deadline (5 s): every call sent during the outage has
    // returned, succeeded or failed, by then.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let errors = w.errors.load(std::sync::atomic::Ordering::Relaxed);
    (cluster, c, w, errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_allocsvr_gets_its_share_back_by_planned_handoffs() {
    let cfg = RebalanceConfig {
        enabled: true,
        sections_per_interval: 2,
        interval_ms: 500,
    };
    let (mut cluster, _c, w, before) = kill_and_fail_over(cfg).await;
    let restarted = Instant::now();
    cluster.allocs[0].restart();
    let took = wait_for(&cluster, "rebalance", Duration::from_secs(30), |s| {
        s.get("alloc-1") == Some(&4) && s.get("alloc-2") == Some(&4)
    })
    .await;
    println!("evened out {took:?} after the restart");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (obs, errors) = w.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    assert_eq!(
        errors - before,
        0,
        "calls failed while sections moved back\n{}",
        cluster.store.logs()
    );
    // Promise 4, one handoff at a time: each section handed back skips at
    // most a step (plus what the callers in flight at the restart took).
    let set = small_set();
    let (section, jump) = widest_section_jump(&set, &obs, restarted..Instant::now());
    let bound = set.step + 1 + NUMBERS_PER_CALL * CALLERS;
    println!("widest jump after the restart: {jump} in section {section} (bound {bound})");
    assert!(
        jump <= bound,
        "section {section} skipped {jump} > {bound} across its handoff\n{}",
        cluster.store.logs()
    );
    let logs = cluster.store.logs();
    let batches: Vec<&str> = (logs.lines())
        .filter(|l| l.contains("arbiter: rebalancing"))
        .collect();
    // Four sections at most two per batch: at least two batches, one log
    // line each.
    assert!(batches.len() >= 2, "{batches:#?}\n{logs}");
    assert!(
        batches.iter().all(|l| l.contains("alloc-2")),
        "{batches:#?}"
    );
    let moved: f64 = (cluster.store.metrics_addrs.iter())
        .map(|a| {
            metric(
                &scrape(a),
                "seqsvr_store_rebalanced_sections_total",
                &[r#"outcome="moved""#],
            )
        })
        .sum();
    assert_eq!(moved, 4.0, "{logs}");
    println!(
        "{} rebalance batches, {} calls checked",
        batches.len(),
        obs.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_rebalance_off_a_restarted_allocsvr_stays_empty() {
    let cfg = RebalanceConfig {
        enabled: false,
        ..Default::default()
    };
    let (mut cluster, _c, w, before) = kill_and_fail_over(cfg).await;
    cluster.allocs[0].restart();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let s = shares(&cluster).await;
    let (obs, errors) = w.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    assert_eq!(errors, before);
    assert_eq!(s.get("alloc-2"), Some(&8), "{s:?}");
    assert!(!cluster.store.logs().contains("arbiter: rebalancing"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_leader_asks_for_the_handoffs_with_its_own_certificate() {
    let mut cluster = attack::Cluster::start(
        BINS,
        attack::Options {
            tls: true,
            ..Default::default()
        },
    )
    .await;
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let read = cluster.read();
    let shares = || async {
        let mut out: BTreeMap<String, u32> = BTreeMap::new();
        if let Ok(r) = read.routes().await {
            for e in &r.entries {
                *out.entry(e.alloc.clone()).or_default() += e.count;
            }
        }
        out
    };
    let total: u32 = shares().await.values().sum();
    cluster.allocs[0].proc.kill9();
    let start = Instant::now();
    while shares().await.get("alloc-2") != Some(&total) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no failover\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.allocs[0].proc.restart();
    let start = Instant::now();
    loop {
        let s = shares().await;
        let (a, b) = (s.get("alloc-1").copied(), s.get("alloc-2").copied());
        if let (Some(a), Some(b)) = (a, b) {
            if a.abs_diff(b) <= 1 {
                println!(
                    "over TLS: evened out to {s:?} {:?} after the restart",
                    start.elapsed()
                );
                break;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not evened out over TLS: {s:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.wait_serving(&c).await;
    assert!(cluster.logs().contains("arbiter: rebalancing"));
}
