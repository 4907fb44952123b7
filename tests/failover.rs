//! Failover with leases, the arbiter and planned moves, on real processes.
//!
//! Every test drives a workload of `next` and `current` calls and runs the
//! per-uid checker over every answer clients received (promise 1: numbers
//! in real-time order, each `current` not below a number returned before it
//! and below every number asked for after it). The faults: an AllocSvr paused for
//! longer than its lease (promises 1, 3), a store leader cut off from its
//! peers while allocs can still reach it (3), an AllocSvr killed (3, and the
//! time its sections take to move), the store leader killed during
//! take-overs and raises (1, 2), and a drain (planned moves).
//!
//! Tests here run one at a time: they measure unavailability, and five
//! 5-process clusters at once on a small machine would measure the machine.

use std::time::{Duration, Instant};

use seqsvr_client::SeqClient;
use seqsvr_core::checker::Observation;
use seqsvr_testkit::attack::{outage_after, set, start_load as start_workload};
use seqsvr_testkit::{self as kit, assert_monotonic, Bins, SetCluster, TEST_EXPIRY, TEST_RENEW_MS};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Calls `addr` directly for one uid of each of `sections` until `until`;
/// returns the numbers it handed out (should be none), as observations so
/// the checker judges them with everything else.
async fn numbers_from(addr: &str, sections: &[u32], until: Instant) -> Vec<Observation> {
    let mut c = seqsvr_proto::alloc_client::AllocClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut got = Vec::new();
    while Instant::now() < until {
        for s in sections {
            let uid = *s as u64 * 1000 + 3;
            let start = Instant::now();
            if let Ok(r) = c
                .next(kit::from_memory(seqsvr_proto::NextRequest {
                    uid,
                    count: 0,
                    ..Default::default()
                }))
                .await
            {
                let seq = r.into_inner().seq;
                got.push(Observation::next(uid, seq, start, Instant::now()));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    got
}

async fn ready() -> (SetCluster, SeqClient) {
    ready_with(Default::default()).await
}

/// [`ready`], the store group started with `opts`.
async fn ready_with(opts: kit::StoreOptions) -> (SetCluster, SeqClient) {
    let cluster = SetCluster::start_opts(BINS, set(), 2, opts);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    (cluster, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alloc_paused_longer_than_its_lease_hands_out_nothing_after() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (cluster, c) = ready().await;
    let w = start_workload(&c, 8);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let pid = cluster.allocs[0].pid().unwrap();
    kit::signal(pid, libc::SIGSTOP);
    let paused = Instant::now();
    // Its sections (0..4) move once its lease has certainly expired.
    tokio::time::sleep(TEST_EXPIRY * 2).await;
    kit::signal(pid, libc::SIGCONT);
    // Woken up, it must not hand out a single number for the sections it lost.
    let stolen = numbers_from(
        &cluster.alloc_addrs[0],
        &[0, 1, 2, 3],
        Instant::now() + Duration::from_millis(1500),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut obs, _) = w.finish().await;
    obs.extend(&stolen);
    assert_monotonic(&obs, || cluster.store.logs());
    assert!(
        stolen.is_empty(),
        "a paused alloc served lost sections after waking: {stolen:?}"
    );
    let outage = outage_after(&obs, paused, None, &[0, 1, 2, 3]);
    println!("sections of the paused alloc were unavailable for {outage:?}");
    assert!(
        outage < // Moved once the lease certainly expired (generous: a loaded machine).
            TEST_EXPIRY * 2 + Duration::from_millis(TEST_RENEW_MS),
        "{outage:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_allocs_sections_are_served_elsewhere_within_lease_margin_and_a_second() {
    use seqsvr::drill::{Action, DrillConfig, Fault};
    let _one = ONE_AT_A_TIME.lock().await;
    let (cluster, _c) = ready().await;
    // Measured by the drill itself: kill -9 alloc-1 one second in.
    let pid = cluster.allocs[0].pid().unwrap();
    let cfg = DrillConfig {
        allocs: cluster.alloc_addrs.clone(),
        store: cluster.store.client_addrs.clone(),
        tls: None,
        uids: None,
        rate: 2000,
        concurrency: 16,
        duration: Duration::from_secs(1) + TEST_EXPIRY + Duration::from_secs(3),
        faults: vec![Fault {
            at: Duration::from_secs(1),
            action: Action::Exec(format!("kill -9 {pid}")),
        }],
        dev_dir: cluster.store.dir.path().to_path_buf(),
        deadline: Duration::from_millis(500),
    };
    let report = seqsvr::drill::run(cfg).await.unwrap();
    report.print(false).unwrap();
    assert!(report.ok(), "promise 1 broken\n{}", cluster.store.logs());
    assert!(
        report.numbers > 1000,
        "too few numbers ({})",
        report.numbers
    );
    let outage = Duration::from_secs_f64(report.faults[0].recovery_ms / 1000.0);
    let bound = TEST_EXPIRY + Duration::from_secs(1);
    println!("sections of the killed alloc were unavailable for {outage:?} (bound: lease + margin + 1 s = {bound:?})");
    assert!(
        outage > Duration::ZERO,
        "the kill had no effect: {report:?}"
    );
    assert!(outage <= bound, "{outage:?}\n{}", cluster.store.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_store_leader_keeps_no_old_owner_alive() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The rebalance off: alloc-1 renews again once it wakes, and the
    // arbiter would hand its share back by planned handoffs (tests/
    // rebalance.rs), while this test reads where failover put them.
    let opts = kit::StoreOptions {
        rebalance: seqsvr_store::arbiter::RebalanceConfig {
            enabled: false,
            ..Default::default()
        },
        ..Default::default()
    };
    let (cluster, c) = ready_with(opts).await;
    let w = start_workload(&c, 8);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Cut the store leader off from its peers; allocs can still reach it.
    let leader = cluster.store.wait_ready(Duration::from_secs(5)).await;
    let leader_dir = cluster
        .store
        .dir
        .path()
        .join(format!("store-{}", leader + 1));
    let isolate = leader_dir.join(seqsvr_store::fault::ISOLATE_FILE);
    kit::isolate(&leader_dir).await;
    // At the same time alloc-1 stops renewing (paused): the new leader must
    // move its sections, and the old leader must not renew alloc-1.
    let pid = cluster.allocs[0].pid().unwrap();
    kit::signal(pid, libc::SIGSTOP);
    tokio::time::sleep(TEST_EXPIRY * 2 + Duration::from_secs(1)).await;
    kit::signal(pid, libc::SIGCONT);
    let stolen = numbers_from(
        &cluster.alloc_addrs[0],
        &[0, 1, 2, 3],
        Instant::now() + Duration::from_millis(1500),
    )
    .await;
    std::fs::remove_file(&isolate).unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (mut obs, _) = w.finish().await;
    obs.extend(&stolen);
    assert_monotonic(&obs, || cluster.store.logs());
    assert!(
        stolen.is_empty(),
        "alloc-1 served lost sections: {stolen:?}"
    );
    let routes = cluster.store.read().routes().await.unwrap();
    assert!(
        routes.entries.iter().all(|e| e.alloc == "alloc-2"),
        "sections did not move: {routes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_store_leader_during_take_overs_and_raises() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (mut cluster, c) = ready().await;
    let w = start_workload(&c, 8);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // alloc-1 dies: its sections are taken over once its lease expires...
    cluster.allocs[0].kill9();
    tokio::time::sleep(TEST_EXPIRY - Duration::from_millis(200)).await;
    // ...right when the store leader dies too (raises go on all along).
    let leader = cluster.store.wait_ready(Duration::from_secs(5)).await;
    cluster.store.procs[leader].kill9();
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.store.procs[leader].restart();
    cluster.allocs[0].restart();
    tokio::time::sleep(TEST_EXPIRY * 2).await;
    let (obs, _) = w.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    let end = obs.iter().map(|o| o.end).max().unwrap();
    let served_at_end: std::collections::BTreeSet<u32> = obs
        .iter()
        .filter(|o| o.end + Duration::from_secs(1) > end)
        .filter_map(|o| set().section_of(o.uid))
        .collect();
    assert_eq!(
        served_at_end.len(),
        8,
        "not every section serves again\n{}",
        cluster.store.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_moves_every_section_with_near_zero_unavailability() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (cluster, c) = ready().await;
    let w = start_workload(&c, 8);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let ctl = cluster.store.ctl();
    let started = Instant::now();
    let results = seqsvr::ctl::drain(&ctl, "alloc-1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (obs, _) = w.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    assert_eq!(results.len(), 4);
    let worst = results.iter().map(|r| r.unavailable_us).max().unwrap();
    println!(
        "handoff unavailability per section: {:?} µs",
        results.iter().map(|r| r.unavailable_us).collect::<Vec<_>>()
    );
    let seen = outage_after(&obs, started, None, &[0, 1, 2, 3]);
    println!("longest gap clients saw on moved sections: {seen:?}");
    assert!(worst < 1_000_000, "a handoff took {worst} µs");
    assert!(
        seen < TEST_EXPIRY,
        "clients waited {seen:?}: the drain waited for a lease"
    );
    let routes = ctl.read.routes().await.unwrap();
    assert!(
        routes.entries.iter().all(|e| e.alloc == "alloc-2"),
        "{routes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_alloc_gets_its_share_by_rebalance() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (mut cluster, c) = ready().await;
    let w = start_workload(&c, 8);
    let i = cluster.add_alloc();
    let ctl = cluster.store.ctl();
    // Wait until the newcomer holds a lease (the leader has seen it renew).
    let start = Instant::now();
    loop {
        let live = ctl.leader_status().await.is_some_and(|l| {
            l.allocs
                .iter()
                .any(|a| a.alloc_id == "alloc-3" && a.since_grant_ms >= 0 && !a.expired)
        });
        if live {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "alloc-3 never renewed\n{}",
            cluster.store.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seqsvr::ctl::rebalance(&ctl).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (obs, _) = w.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    let routes = ctl.read.routes().await.unwrap();
    let per = |id: &str| {
        routes
            .entries
            .iter()
            .filter(|e| e.alloc == id)
            .map(|e| e.count)
            .sum::<u32>()
    };
    println!(
        "after rebalance: alloc-1 {}, alloc-2 {}, alloc-3 {}",
        per("alloc-1"),
        per("alloc-2"),
        per("alloc-3")
    );
    assert_eq!(per("alloc-1") + per("alloc-2") + per("alloc-3"), 8);
    assert!(
        (2..=3).contains(&per("alloc-3")),
        "newcomer got {} of 8",
        per("alloc-3")
    );
    // And it serves them.
    let newcomer = cluster.alloc_addrs[i].clone();
    let s = routes
        .entries
        .iter()
        .find(|e| e.alloc == "alloc-3")
        .unwrap()
        .first;
    let mut a3 = seqsvr_proto::alloc_client::AllocClient::connect(format!("http://{newcomer}"))
        .await
        .unwrap();
    let uid = s as u64 * 1000 + 1;
    assert!(a3
        .next(seqsvr_proto::NextRequest {
            uid,
            count: 0,
            ..Default::default()
        })
        .await
        .is_ok());
}
