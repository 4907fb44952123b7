//! The store-only phases: a store group of 3 replicas serving `sections`
//! sections; the bench plays three AllocSvrs (`a1`–`a3`) on its peer
//! plane, each first routed a third of the sections.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use prost::Message;
use seqsvr_alloc::ownership::claim_pieces;
use seqsvr_core::{Incarnation, SetSpec};
use seqsvr_proto::{self as pb};
use seqsvr_store::node::InitialAlloc;
use seqsvr_store_api::client::plaintext;
use seqsvr_store_api::{AdminClient, AllocAddrs, Error, PeerClient, Rejection};

use crate::probe::{ms, owners, sections_of, until, Marks};
use crate::{Args, SECTION_SIZE};
use seqsvr_testkit::stages::{print_breakdown, Scrapes};
use seqsvr_testkit::{cpu_of, test_lease, StoreCluster, StoreOptions, TEST_RENEW_MS};

/// The AllocSvrs the bench plays, and their incarnations.
const FAKES: [(&str, Incarnation); 3] = [("a1", 0xa1), ("a2", 0xa2), ("a3", 0xa3)];

/// A store group and the bench's view of it.
struct Store {
    cluster: StoreCluster,
    /// The leader's index (the group is not disturbed, so it stays).
    leader: usize,
    /// Peer-plane client, leader first (no forwarding).
    peer: PeerClient,
    sections: u32,
}

impl Store {
    /// Store CPU seconds so far: the leader's, and all replicas' together.
    fn cpu(&self) -> (f64, f64) {
        let each: Vec<f64> = self
            .cluster
            .procs
            .iter()
            .map(|p| p.pid().map(cpu_of).unwrap_or(0.0))
            .collect();
        (each[self.leader], each.iter().sum())
    }

    async fn marks(&self) -> Marks {
        Marks::read(&self.cluster, self.leader).await
    }

    async fn routes(&self) -> seqsvr_core::RouteTable {
        self.cluster.read().routes().await.expect("routes")
    }
}

/// Renews the lease of every fake AllocSvr still marked alive, every
/// renewal interval, remembering the longest renewal.
struct Keeper {
    alive: Arc<Mutex<[bool; 3]>>,
    /// Longest renewal since last taken, µs.
    worst_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Keeper {
    fn start(peer: PeerClient) -> Keeper {
        let k = Keeper {
            alive: Arc::new(Mutex::new([true; 3])),
            worst_us: Arc::default(),
            stop: Arc::default(),
        };
        let (alive, worst, stop) = (k.alive.clone(), k.worst_us.clone(), k.stop.clone());
        tokio::spawn(async move {
            let mut known = [0u64; 3];
            while !stop.load(Ordering::Relaxed) {
                let now = *alive.lock().unwrap();
                for (i, (id, inc)) in FAKES.iter().enumerate() {
                    if !now[i] {
                        continue;
                    }
                    let t = Instant::now();
                    if let Ok(r) = peer.renew_since(id, *inc, known[i]).await {
                        known[i] = r.sections_version;
                    }
                    worst.fetch_max(t.elapsed().as_micros() as u64, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(TEST_RENEW_MS)).await;
            }
        });
        k
    }

    fn stop_renewing(&self, i: usize) {
        self.alive.lock().unwrap()[i] = false;
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Runs the selected store-only phases at `sections` sections.
pub async fn run(args: &Args, sections: u32) {
    println!("\n== store alone: 3 replicas, {sections} sections of {SECTION_SIZE} uids");
    let set = SetSpec::new(0, 0..sections as u64 * SECTION_SIZE);
    let initial = InitialAlloc::even_split(FAKES.iter().map(|(id, _)| id.to_string()), sections);
    // Each fake AllocSvr's share (the last one's holds the remainder too).
    let third = sections / 3;
    let opts = StoreOptions {
        metrics: true,
        ..Default::default()
    };
    let started = Instant::now();
    let cluster = StoreCluster::start_opts(crate::BINS, 3, set, initial, opts);
    let leader = cluster.wait_ready(Duration::from_secs(60)).await;
    let mut addrs = cluster.peer_addrs.clone();
    addrs.swap(0, leader);
    let peer = PeerClient::new(&addrs, &plaintext()).unwrap();
    let store = Store {
        cluster,
        leader,
        peer,
        sections,
    };
    let fake_addrs = AllocAddrs {
        client: "127.0.0.1:1".into(),
        peer: "127.0.0.1:2".into(),
        admin: "127.0.0.1:3".into(),
    };
    for (id, inc) in FAKES {
        store
            .peer
            .register_alloc(id, inc, &fake_addrs)
            .await
            .expect("register");
    }
    let keeper = Keeper::start(store.peer.clone());
    let routed = until(started, Duration::from_secs(120), || async {
        let r = store.cluster.read().routes().await;
        r.is_ok_and(|t| owners(&t).values().map(|o| o.0).sum::<u32>() == sections)
    })
    .await;
    println!(
        "  ready: leader {}, every section routed {} after process start",
        leader + 1,
        ms(routed)
    );
    if args.has("renew") {
        renew(&store, args.secs).await;
    }
    if args.has("moves") {
        moves(&store, &keeper, third).await;
    }
    if args.has("raise") {
        raise(&store, &keeper, args).await;
    }
    if args.has("snapshot") {
        snapshot(&store).await;
    }
}

/// Renewal sizes and store CPU per renewal.
async fn renew(store: &Store, secs: u64) {
    let (id, inc) = FAKES[0];
    let full = store.peer.renew_since(id, inc, 0).await.expect("renew");
    let v = full.sections_version;
    let same = store.peer.renew_since(id, inc, v).await.expect("renew");
    assert!(same.sections_unchanged, "the list changed meanwhile");
    let req = |known| pb::RenewRequest {
        alloc_id: id.into(),
        incarnation: inc,
        known_sections_version: known,
    };
    println!(
        "  renew, list unchanged: request {} B, reply {} B (protobuf; add 5 B gRPC framing and HTTP/2 headers each way)",
        req(v).encoded_len(),
        same.encoded_len()
    );
    println!(
        "  renew, list sent ({} sections in {} runs): request {} B, reply {} B",
        full.sections.iter().map(|r| r.count).sum::<u32>(),
        full.sections.len(),
        req(0).encoded_len(),
        full.encoded_len()
    );
    // Idle: what the group costs with only the three renewing every
    // interval (the arbiter's tick, heartbeats).
    let (l0, a0) = store.cpu();
    let idle = Duration::from_secs(2);
    tokio::time::sleep(idle).await;
    let (l1, a1) = store.cpu();
    let idle_rate = (
        (l1 - l0) / idle.as_secs_f64(),
        (a1 - a0) / idle.as_secs_f64(),
    );
    println!(
        "  idle (3 AllocSvrs renewing every {TEST_RENEW_MS} ms): leader {:.1} %, all replicas {:.1} % of a core",
        idle_rate.0 * 100.0,
        idle_rate.1 * 100.0
    );
    for (what, known) in [("unchanged", v), ("list sent", 0)] {
        let start = Instant::now();
        let (l0, a0) = store.cpu();
        let deadline = start + Duration::from_secs(secs);
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let p = store.peer.clone();
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        p.renew_since(id, inc, known).await.expect("renew");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let mut n = 0;
        for t in tasks {
            n += t.await.unwrap();
        }
        let wall = start.elapsed().as_secs_f64();
        let (l1, a1) = store.cpu();
        let per = |d: f64, rate: f64| (d - rate * wall).max(0.0) / n as f64 * 1e6;
        println!(
            "  renew {what}: {:.0} renewals/s (4 callers), store CPU per renewal: leader {:.0} µs, all replicas {:.0} µs (idle rate subtracted)",
            n as f64 / wall,
            per(l1 - l0, idle_rate.0),
            per(a1 - a0, idle_rate.1)
        );
    }
}

/// `a3` stops renewing: the arbiter routes its sections to `a1` and `a2`;
/// then `a1` takes over what it gained.
async fn moves(store: &Store, keeper: &Keeper, third: u32) {
    let before = store.marks().await;
    let t = store.routes().await;
    let a1_before = sections_of(&t, "a1");
    keeper.worst_us.store(0, Ordering::Relaxed);
    let t0 = Instant::now();
    keeper.stop_renewing(2);
    let moved = until(t0, Duration::from_secs(120), || async {
        let t = store.cluster.read().routes().await;
        t.is_ok_and(|t| !owners(&t).contains_key("a3"))
    })
    .await;
    let after = store.marks().await;
    let t = store.routes().await;
    let o = owners(&t);
    println!(
        "  moves: a3 ({} sections) stopped renewing; all routed away {} later (lease + margin {} ms); {}",
        store.sections - 2 * third,
        ms(moved),
        test_lease().lease_ms + test_lease().margin_ms,
        before.since(&after)
    );
    for (id, (n, runs)) in &o {
        println!("    {id}: {n} sections in {runs} runs");
    }
    println!(
        "    longest renewal of a1/a2 meanwhile: {:.1} ms",
        keeper.worst_us.load(Ordering::Relaxed) as f64 / 1e3
    );
    let (id, inc) = FAKES[0];
    let r = store.peer.renew_since(id, inc, 0).await.expect("renew");
    println!(
        "    a1's renewal with its new list: reply {} B ({} runs)",
        r.encoded_len(),
        r.sections.len()
    );
    let gained: Vec<u32> = sections_of(&t, "a1")
        .into_iter()
        .filter(|s| !a1_before.contains(s))
        .collect();
    let (took, pieces) = take_over(store, &gained).await;
    let done = store.marks().await;
    println!(
        "    a1 takes over its {} new sections: {pieces} take-overs sent together, {:.0} ms; {}",
        gained.len(),
        took.as_secs_f64() * 1e3,
        after.since(&done)
    );
}

/// Takes over `sections` as `a1` (pieces as an AllocSvr cuts them, sent
/// together); returns the time and the number of pieces, and the grants.
async fn take_over_grants(
    store: &Store,
    sections: &[u32],
) -> (Duration, usize, Vec<(u32, u64, u64)>) {
    let (id, inc) = FAKES[0];
    let pieces = claim_pieces(sections);
    let t0 = Instant::now();
    let calls = pieces.iter().map(|&(first, count)| {
        let p = store.peer.clone();
        async move { p.take_over(id, inc, first, vec![0; count as usize]).await }
    });
    let grants = futures::future::join_all(calls)
        .await
        .into_iter()
        .filter_map(|r| match r {
            Ok((g, _)) => Some(g),
            Err(e) => {
                println!("    a take-over failed: {e}");
                None
            }
        })
        .flatten()
        .map(|g| (g.section, g.epoch, g.max_seq))
        .collect();
    (t0.elapsed(), pieces.len(), grants)
}

async fn take_over(store: &Store, sections: &[u32]) -> (Duration, usize) {
    let (took, n, _) = take_over_grants(store, sections).await;
    (took, n)
}

/// Everything to `a1`, taken over; then raises over every section.
async fn raise(store: &Store, keeper: &Keeper, args: &Args) {
    keeper.stop_renewing(1);
    keeper.stop_renewing(2);
    let t0 = Instant::now();
    let all = until(t0, Duration::from_secs(120), || async {
        let t = store.cluster.read().routes().await;
        t.is_ok_and(|t| owners(&t).keys().all(|k| k == "a1"))
    })
    .await;
    println!("  raise: everything routed to a1 {}", ms(all));
    let before = store.marks().await;
    let every: Vec<u32> = (0..store.sections).collect();
    let (took, pieces, grants) = take_over_grants(store, &every).await;
    println!(
        "    a1 takes over all {} sections: {pieces} take-overs sent together, {:.0} ms; {}",
        store.sections,
        took.as_secs_f64() * 1e3,
        before.since(&store.marks().await)
    );
    let callers = args.callers;
    let step = store.cluster.set.step;
    let scrapes = Scrapes::take(&store.cluster.metrics_addrs);
    let fsyncs0 = fsyncs(store).await;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.secs);
    let tasks: Vec<_> = (0..callers)
        .map(|k| {
            let mut mine: Vec<_> = grants
                .iter()
                .copied()
                .filter(|g| g.0 as usize % callers == k)
                .collect();
            let p = store.peer.clone();
            tokio::spawn(async move {
                let (id, inc) = FAKES[0];
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let mut i = 0;
                while Instant::now() < deadline {
                    let len = mine.len();
                    let (s, e, m) = &mut mine[i % len];
                    let t = Instant::now();
                    let to = *m + step;
                    *m = match p.raise(id, inc, *s, *e, to).await {
                        Ok(max) => max,
                        // A hedged attempt that landed twice: the first
                        // one raised it (docs/architecture/store.md).
                        Err(Error::Rejected(Rejection::NotAbove { current, .. }))
                            if current >= to =>
                        {
                            current
                        }
                        Err(e) => panic!("raise: {e}"),
                    };
                    h.record(t.elapsed().as_micros() as u64).unwrap();
                    i += 1;
                }
                (h, i.min(mine.len()))
            })
        })
        .collect();
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    // Distinct sections raised.
    let mut touched = 0usize;
    for t in tasks {
        let (th, i) = t.await.unwrap();
        h.add(th).unwrap();
        touched += i;
    }
    let wall = start.elapsed().as_secs_f64();
    let n = h.len();
    let fs = fsyncs(store).await - fsyncs0;
    println!(
        "    {callers} callers over all {} sections: {:.0} raises/s  p50 {} µs  p99 {} µs  p999 {} µs  max {} µs  fsyncs/raise {:.3} (all replicas); {} distinct sections raised",
        store.sections,
        n as f64 / wall,
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
        fs as f64 / n as f64,
        touched
    );
    print_breakdown(
        &scrapes,
        &Scrapes::take(&store.cluster.metrics_addrs),
        store.leader,
        h.mean(),
    );
}

async fn fsyncs(store: &Store) -> u64 {
    store
        .cluster
        .read()
        .status_all()
        .await
        .into_iter()
        .filter_map(|(_, s)| s.ok())
        .map(|s| s.fsyncs)
        .sum()
}

/// A snapshot built on the leader and on a follower, through the admin
/// plane.
async fn snapshot(store: &Store) {
    let follower = (store.leader + 1) % 3;
    for (what, i) in [("leader", store.leader), ("follower", follower)] {
        let admin =
            AdminClient::new(&[store.cluster.admin_addrs[i].clone()], &plaintext()).unwrap();
        let t0 = Instant::now();
        match admin.snapshot().await {
            Ok(r) => println!(
                "  snapshot on the {what}: {} B ({:.1} B a section), built and stored in {:.1} ms (call {:.1} ms), covers log index {}",
                r.bytes,
                r.bytes as f64 / store.sections as f64,
                r.build_us as f64 / 1e3,
                t0.elapsed().as_secs_f64() * 1e3,
                r.last_log_index
            ),
            Err(e) => println!("  snapshot on the {what}: failed: {e}"),
        }
    }
}
