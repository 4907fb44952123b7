//! Reads that cannot starve renewals: part of the adversary suite
//! (`tests/adversary/main.rs`).
//!
//! Anyone who can reach a client plane may call its cheap reads as fast
//! as the limits let them. Those reads share the store leader with the
//! AllocSvrs' renewals (a linearizable read and a renewal both wait for a
//! leadership barrier, coalesced in `crates/store/src/service/barrier.rs`),
//! and an AllocSvr's client plane with its renewal loop. A flood must not
//! delay renewals into lease lapses, which would drop every section of
//! the AllocSvr (the threat model, `docs/architecture/security.md`).

use super::*;
use seqsvr_proto::alloc_client::AllocClient;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// How long each window (quiet, then flooded) lasts: four test leases
/// (2 s), so a lapse would have had time to happen several times over.
const WINDOW: Duration = Duration::from_secs(8);
/// Connections per flooded listener that call as fast as they can…
const BUSY_CONNECTIONS: usize = 16;
/// …each with this many calls in flight at once (a quarter of the client
/// plane's 1024 streams per connection: 4096 calls in flight per
/// listener, more than two cores can serve at once).
const STREAMS: usize = 256;
/// Connections per flooded listener opened and held idle besides, so the
/// listener runs at its connection cap (4096 on the client plane, less
/// the busy ones and established clients).
const HELD_CONNECTIONS: usize = 4000;

/// One AllocSvr's renewal figures from its metrics.
#[derive(Debug, Clone, Default)]
struct Renewals {
    /// `seqsvr_alloc_renewal_seconds` buckets: (upper bound, cumulative
    /// count), `+Inf` last.
    buckets: Vec<(f64, f64)>,
    lapses: f64,
}

/// Every value of the metric lines of `text` that start with `prefix`.
fn lines<'a>(text: &'a str, prefix: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines()
        .filter(move |l| l.starts_with(prefix))
        .filter_map(|l| {
            let (head, v) = l.rsplit_once(' ')?;
            Some((head, v.parse().ok()?))
        })
}

fn renewals(metrics: &str) -> Renewals {
    let text = attack::scrape(metrics);
    let buckets = lines(&text, "seqsvr_alloc_renewal_seconds_bucket{")
        .filter_map(|(head, v)| {
            let le = head.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, v))
        })
        .collect();
    let lapses = lines(&text, "seqsvr_alloc_lease_lapses_total")
        .map(|(_, v)| v)
        .sum();
    Renewals { buckets, lapses }
}

/// The store's arbiter moves (sections moved off expired leases).
fn moves(metrics: &str) -> f64 {
    lines(&attack::scrape(metrics), "seqsvr_store_arbiter_moves_total")
        .map(|(_, v)| v)
        .sum()
}

/// Renewals granted between two scrapes of every AllocSvr, and their
/// p99 in seconds, interpolated within its bucket as Prometheus'
/// `histogram_quantile` does (the largest finite bound if it fell past
/// it).
fn p99(before: &[Renewals], after: &[Renewals]) -> (u64, f64) {
    let mut delta: Vec<(f64, f64)> = Vec::new();
    for (b, a) in before.iter().zip(after) {
        for (i, &(le, n)) in a.buckets.iter().enumerate() {
            let was = b.buckets.get(i).map_or(0.0, |x| x.1);
            match delta.get_mut(i) {
                Some(d) => d.1 += n - was,
                None => delta.push((le, n - was)),
            }
        }
    }
    let total = delta.last().map_or(0.0, |d| d.1);
    let rank = 0.99 * total;
    let mut prev = (0.0, 0.0);
    for &(le, n) in &delta {
        if n >= rank {
            if le.is_infinite() {
                return (total as u64, prev.0);
            }
            let within = if n > prev.1 {
                (rank - prev.1) / (n - prev.1)
            } else {
                1.0
            };
            return (total as u64, prev.0 + (le - prev.0) * within);
        }
        prev = (le, n);
    }
    (total as u64, 0.0)
}

/// Calls from `BUSY_CONNECTIONS` connections with `STREAMS` calls each in
/// flight, in closed loops, until `stop`; `call(channel, k)` makes the
/// `k`-th call of a loop. Counts answered calls (any status: the server
/// answered) into `answered`.
fn flood<F, Fut>(
    addr: &str,
    stop: &Arc<AtomicBool>,
    answered: &Arc<AtomicU64>,
    call: F,
) -> Vec<tokio::task::JoinHandle<()>>
where
    F: Fn(Channel, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let mut tasks = Vec::new();
    for _ in 0..BUSY_CONNECTIONS {
        let ch = channel(addr, None, Duration::from_secs(5));
        for s in 0..STREAMS {
            let (ch, stop, answered, call) =
                (ch.clone(), stop.clone(), answered.clone(), call.clone());
            tasks.push(tokio::spawn(async move {
                let mut k = s as u64;
                while !stop.load(Ordering::Relaxed) {
                    if call(ch.clone(), k).await {
                        answered.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    k += 1;
                }
            }));
        }
    }
    tasks
}

/// Floods the client plane of the store leader (`GetRoutes`,
/// `ReadSections`, `Status`) and of alloc-1 (`Routes`, `Status`, `Next`)
/// for four leases while both AllocSvrs renew and a workload takes
/// numbers: each listener at its connection cap, 16 connections of them
/// with 256 calls each in flight. No AllocSvr's lease may lapse and the
/// store may move no section. Prints the renewals' p99 over a quiet
/// window and over the flood (`docs/benchmarks.md`, "Renewals under a
/// read flood"); timing is reported, not asserted.
///
/// Two things keep renewals ahead of such a flood, and it fails without
/// either: the store leader serves at most `max_concurrent_reads` reads at
/// once (the rest wait without being polled), and an AllocSvr renews on a
/// thread and connections of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_plane_flood_does_not_lapse_leases() {
    let _one = ONE_AT_A_TIME.lock().await;
    attack::raise_fd_limit(20_000);
    let cluster = Cluster::start(BINS, Options::default()).await;
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let leader = cluster.wait_leader(Duration::from_secs(10)).await;
    let store_metrics = cluster.stores[leader].metrics.clone().unwrap();
    let alloc_metrics: Vec<String> = cluster
        .allocs
        .iter()
        .map(|n| n.metrics.clone().unwrap())
        .collect();
    let scrape_all = || {
        alloc_metrics
            .iter()
            .map(|m| renewals(m))
            .collect::<Vec<_>>()
    };
    let w = start_load(&c, 2);

    // A quiet window: renewals and the workload only.
    let quiet_start = scrape_all();
    tokio::time::sleep(WINDOW).await;
    let quiet_end = scrape_all();

    // The flood.
    let store_addr = cluster.stores[leader].client.clone();
    let alloc_addr = cluster.allocs[0].client.clone();
    let (mut held_store, _) = attack::idle_connections(
        &store_addr,
        HELD_CONNECTIONS,
        attack::H2_PREFACE,
        WINDOW * 2,
    )
    .await;
    let (mut held_alloc, _) = attack::idle_connections(
        &alloc_addr,
        HELD_CONNECTIONS,
        attack::H2_PREFACE,
        WINDOW * 2,
    )
    .await;
    let moves_before = moves(&store_metrics);
    let flood_start = scrape_all();
    let stop = Arc::new(AtomicBool::new(false));
    let (store_calls, alloc_calls) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = flood(&store_addr, &stop, &store_calls, |ch, k| async move {
        let mut c = StoreReadClient::new(ch);
        let r = match k % 3 {
            0 => c.get_routes(pb::GetRoutesRequest {}).await.map(drop),
            1 => c
                .read_sections(pb::ReadSectionsRequest {
                    first_section: 0,
                    count: SECTIONS,
                })
                .await
                .map(drop),
            _ => c.status(pb::StatusRequest {}).await.map(drop),
        };
        !matches!(Outcome::of(&r), Outcome::Transport(_))
    });
    tasks.extend(flood(
        &alloc_addr,
        &stop,
        &alloc_calls,
        |ch, k| async move {
            let mut c = AllocClient::new(ch);
            let r = match k % 3 {
                0 => c.routes(pb::GetRoutesRequest {}).await.map(drop),
                1 => c.status(pb::AllocStatusRequest {}).await.map(drop),
                _ => c
                    .next(pb::NextRequest {
                        uid: attack::uid((k % 4) as u32, 100 + k % 100),
                        count: 0,
                        ..Default::default()
                    })
                    .await
                    .map(drop),
            };
            !matches!(Outcome::of(&r), Outcome::Transport(_))
        },
    ));
    tokio::time::sleep(WINDOW).await;
    let flood_end = scrape_all();
    let moves_after = moves(&store_metrics);
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let held = held_store.len() + held_alloc.len();
    let dropped =
        attack::closed_by_server(&mut held_store) + attack::closed_by_server(&mut held_alloc);
    drop((held_store, held_alloc));
    let (obs, _) = w.finish().await;
    assert_monotonic(&obs, || cluster.logs());

    let (quiet_n, quiet_p99) = p99(&quiet_start, &quiet_end);
    let (flood_n, flood_p99) = p99(&flood_start, &flood_end);
    let secs = WINDOW.as_secs_f64();
    println!(
        "renewal p99 without a flood: {:.1} ms ({quiet_n} renewals)",
        quiet_p99 * 1000.0
    );
    println!(
        "renewal p99 during the flood: {:.1} ms ({flood_n} renewals); flood: {:.0} store reads/s, \
         {:.0} AllocSvr calls/s, {held} connections held ({dropped} closed by the servers at the cap)",
        flood_p99 * 1000.0,
        store_calls.load(Ordering::Relaxed) as f64 / secs,
        alloc_calls.load(Ordering::Relaxed) as f64 / secs,
    );
    let lapses: Vec<f64> = flood_end
        .iter()
        .zip(&quiet_start)
        .map(|(a, b)| a.lapses - b.lapses)
        .collect();
    println!(
        "lease lapses (alloc-1, alloc-2): {lapses:?}; sections moved by the store: {}",
        moves_after - moves_before
    );
    assert!(
        store_calls.load(Ordering::Relaxed) > 0 && alloc_calls.load(Ordering::Relaxed) > 0,
        "the flood was not served at all"
    );
    assert!(flood_n > 0, "no renewal was granted during the flood");
    assert!(
        lapses.iter().all(|&l| l == 0.0),
        "leases lapsed: {lapses:?}\n{}",
        cluster.logs()
    );
    assert_eq!(
        moves_after - moves_before,
        0.0,
        "the store moved sections off an expired lease during the flood"
    );
}
