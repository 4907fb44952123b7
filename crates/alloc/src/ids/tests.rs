//! The AllocSvr's id workers against the store's own state machine in
//! memory, with an injected clock: claim on first use, ids strictly
//! increasing, a clock set back while running (bounded borrowing, then a
//! typed refusal at once), a restart with the clock set back (starts
//! above the old ceiling), a store that stops answering (never above the
//! acknowledged ceiling), a worker id taken back, a clean stop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seqsvr_core::ids::Layout;
use seqsvr_core::SetSpec;
use seqsvr_store_api::{Error as StoreError, IdRefusal, Rejection};
use seqsvr_store_core::Command;

use super::*;

const NS: &str = "msg";
const WINDOW_MS: u64 = 100;
const T0: u64 = 1_700_000_000_000;

fn store() -> Arc<MemWorkers> {
    let mem = Arc::new(MemWorkers::default());
    mem.apply(Command::ConfigureSet(SetSpec::new(0, 0..100)))
        .unwrap();
    mem.apply(Command::CreateIdSpace {
        name: NS.into(),
        layout: Layout::twitter(),
        window_ms: WINDOW_MS,
    })
    .unwrap();
    mem
}

fn register(mem: &MemWorkers, alloc: &str, inc: u64, replaces: u64) {
    mem.apply(Command::RegisterAlloc {
        alloc: alloc.into(),
        addr: "x:1".into(),
        peer_addr: "x:2".into(),
        admin_addr: "x:3".into(),
        incarnation: inc,
        replaces,
    })
    .unwrap();
}

/// An AllocSvr's id workers as `alloc`'s `inc`, on a clock the test moves.
fn workers(mem: &Arc<MemWorkers>, alloc: &str, inc: u64) -> (Arc<IdWorkers>, Arc<AtomicU64>) {
    let now = Arc::new(AtomicU64::new(T0));
    let n = now.clone();
    let clock: Clock = Arc::new(move || n.load(Ordering::SeqCst));
    let store = MemHolder {
        mem: mem.clone(),
        alloc: alloc.into(),
        incarnation: inc,
    };
    let m = IdMetrics::unregistered().unwrap();
    let w = IdWorkers::new(Arc::new(store), clock, Duration::from_millis(200), m);
    (w, now)
}

fn increasing(ids: &[u64]) {
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

#[tokio::test]
async fn claims_on_first_use_and_issues_strictly_increasing_ids() {
    let mem = store();
    register(&mem, "a", 1, 0);
    let (w, now) = workers(&mem, "a", 1);
    assert!(w.held().is_empty());
    let mut all = w.next(NS, 5000).await.unwrap();
    assert_eq!(all.len(), 5000, "4,096 a ms, then one borrowed tick");
    now.fetch_add(3, Ordering::SeqCst);
    all.extend(w.next(NS, 1).await.unwrap());
    increasing(&all);
    let held = w.held();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].1, 0, "worker 0");
    let (d, _) = w.decode(NS, all[0]).await.unwrap();
    assert_eq!((d.worker, d.unix_ms), (0, T0));
    let r = w.next(NS, MAX_IDS_PER_CALL + 1).await;
    assert!(matches!(r, Err(CallError::Invalid(_))), "{r:?}");
    let r = w.next("nope", 1).await;
    assert!(
        matches!(
            r,
            Err(CallError::Store(StoreError::Rejected(Rejection::Ids {
                kind: IdRefusal::UnknownNamespace,
                ..
            })))
        ),
        "{r:?}"
    );
}

/// The clock steps back a long way while running: ids keep increasing
/// from the last tick, borrowing at most a window, then the call is
/// refused at once (typed, counted) — no sleep, no spin.
#[tokio::test]
async fn a_clock_set_back_while_running_never_repeats_and_never_spins() {
    let mem = store();
    register(&mem, "a", 1, 0);
    let (w, now) = workers(&mem, "a", 1);
    let mut all = w.next(NS, 10).await.unwrap();
    now.store(T0 - 60_000, Ordering::SeqCst);
    let start = std::time::Instant::now();
    let mut refused = None;
    for _ in 0..1000 {
        match w.next(NS, 4096).await {
            Ok(ids) => all.extend(ids),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    assert!(start.elapsed() < Duration::from_secs(5), "it waited");
    increasing(&all);
    match refused {
        Some(CallError::ClockBehind { behind_ms, .. }) => assert!(behind_ms >= 60_000 - WINDOW_MS),
        other => panic!("expected CLOCK_BEHIND, got {other:?}"),
    }
    let last = Layout::twitter().decode(*all.last().unwrap()).unwrap();
    assert!(
        last.unix_ms <= T0 + WINDOW_MS,
        "borrowed more than a window"
    );
    assert!(w.metrics.clock_back.get() > 0);
    let behind = w.metrics.refused.with_label_values(&["clock_behind"]).get();
    assert!(behind > 0);
}

/// A process killed and restarted with its clock an hour back starts
/// above everything its predecessor could have issued.
#[tokio::test]
async fn a_restart_with_the_clock_set_back_starts_above_the_old_ceiling() {
    let mem = store();
    register(&mem, "a", 1, 0);
    let (w, now) = workers(&mem, "a", 1);
    let mut before = Vec::new();
    for _ in 0..20 {
        before.extend(w.next(NS, 100).await.unwrap());
        now.fetch_add(7, Ordering::SeqCst);
    }
    // Give the background raise a chance to push the ceiling further.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let highest = *before.iter().max().unwrap();
    // kill -9: nothing released; the next incarnation replaces it.
    drop(w);
    register(&mem, "a", 2, 1);
    let (w2, now2) = workers(&mem, "a", 2);
    now2.store(T0 - 3_600_000, Ordering::SeqCst);
    let after = w2.next(NS, 100).await.unwrap();
    assert!(after[0] > highest, "{} <= {highest}", after[0]);
    increasing(&after);
}

/// The store stops answering: ids are issued up to the acknowledged
/// ceiling and then refused (typed, retryable) — never above it; once
/// the store answers, the ceiling moves ahead in the background.
#[tokio::test]
async fn never_above_the_ceiling_the_store_acknowledged() {
    let mem = store();
    register(&mem, "a", 1, 0);
    let (w, now) = workers(&mem, "a", 1);
    w.next(NS, 1).await.unwrap();
    mem.fail.store(true, Ordering::SeqCst);
    let ceiling = w.held()[0].2;
    let layout = Layout::twitter();
    let mut refused = None;
    for _ in 0..400 {
        now.fetch_add(1, Ordering::SeqCst);
        match w.next(NS, 1000).await {
            Ok(ids) => {
                for id in ids {
                    assert!(layout.decode(id).unwrap().tick <= ceiling);
                }
            }
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(refused, Some(CallError::IdCeiling { .. })),
        "{refused:?}"
    );
    mem.fail.store(false, Ordering::SeqCst);
    let mut ok = false;
    for _ in 0..100 {
        if w.next(NS, 1).await.is_ok() {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ok, "the ceiling never moved again");
    assert!(w.held()[0].2 > ceiling);
}

/// A worker id taken back by the store (its incarnation replaced) ends
/// the holding: nothing more is issued from it.
#[tokio::test]
async fn a_holding_the_store_took_back_issues_nothing_more() {
    let mem = store();
    register(&mem, "a", 1, 0);
    let (w, now) = workers(&mem, "a", 1);
    w.next(NS, 1).await.unwrap();
    register(&mem, "a", 2, 1);
    // Push the clock so the raiser must raise: the store refuses it.
    let mut refused = None;
    for _ in 0..100 {
        now.fetch_add(WINDOW_MS, Ordering::SeqCst);
        match w.next(NS, 1).await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    match refused {
        Some(CallError::Store(StoreError::Rejected(Rejection::StaleIncarnation { .. }))) => {}
        other => panic!("expected the claim again to be refused as stale, got {other:?}"),
    }
    assert!(w.held().is_empty());
}

/// A clean stop releases the worker id: the next holder gets it at
/// once, above its ceiling; the stopped workers issue nothing more.
#[tokio::test]
async fn a_clean_stop_releases_the_worker_id() {
    let mem = store();
    register(&mem, "a", 1, 0);
    register(&mem, "b", 1, 0);
    let (wa, _) = workers(&mem, "a", 1);
    let ids = wa.next(NS, 10).await.unwrap();
    assert_eq!(wa.release_all(Duration::from_secs(1)).await, 1);
    let r = wa.next(NS, 1).await;
    assert!(matches!(r, Err(CallError::IdUnavailable { .. })), "{r:?}");
    let (wb, _) = workers(&mem, "b", 1);
    let next = wb.next(NS, 1).await.unwrap();
    assert_eq!(wb.held()[0].1, 0, "the released worker id");
    assert!(next[0] > *ids.last().unwrap());
}

/// After a lease lapse the store may have given the worker id to another
/// AllocSvr (here: reclaimed while this one's lease had lapsed); a renewal
/// makes the lease valid again, not the holding: nothing more is issued
/// from it until a raise confirms it, which the store refuses, so the call
/// claims another worker id.
#[tokio::test]
async fn after_a_lease_lapse_a_reclaimed_worker_id_issues_nothing() {
    let mem = store();
    register(&mem, "a", 1, 0);
    register(&mem, "b", 1, 0);
    let (w, now) = workers(&mem, "a", 1);
    let lapses = Arc::new(AtomicU64::new(0));
    let l = lapses.clone();
    w.watch_lapses(Arc::new(move || l.load(Ordering::SeqCst)));
    let first = w.next(NS, 1).await.unwrap();
    assert_eq!(w.worker_of(NS, first[0]), 0);
    // b claims worker 0, its holder's lease seen certainly expired.
    let tick = Layout::twitter().tick_of(T0);
    let r = mem.apply(Command::ClaimWorker {
        ns: NS.into(),
        alloc: "b".into(),
        incarnation: 1,
        now: tick,
        reclaim: vec![(0, 1)],
    });
    assert!(matches!(r, Ok(seqsvr_store_core::Reply::WorkerClaimed(g)) if g.worker == 0));
    lapses.fetch_add(1, Ordering::SeqCst);
    now.fetch_add(1, Ordering::SeqCst);
    for _ in 0..3 {
        match w.next(NS, 1).await {
            Ok(ids) => assert_ne!(w.worker_of(NS, ids[0]), 0, "issued from b's worker id"),
            Err(e) => assert!(matches!(e, CallError::IdUnavailable { .. }), "{e:?}"),
        }
    }
    assert_ne!(w.held()[0].1, 0, "a holds another worker id now");
}

#[tokio::test]
async fn a_scattered_namespace_spreads_its_ids_and_decode_undoes_it() {
    let mem = store();
    let layout = Layout {
        time_bits: 38, // 8.7 years from 2020-09-13
        epoch_ms: 1_600_000_000_000,
        ..Layout::twitter()
    }
    .with_shards(3);
    mem.apply(Command::CreateIdSpace {
        name: "scattered".into(),
        layout,
        window_ms: WINDOW_MS,
    })
    .unwrap();
    register(&mem, "a", 1, 0);
    let (w, now) = workers(&mem, "a", 1);
    let mut all = Vec::new();
    for _ in 0..64 {
        all.extend(w.next("scattered", 1).await.unwrap());
        now.fetch_add(1, Ordering::SeqCst);
    }
    // The ids themselves jump between shards; with the shard bits taken
    // off (as decode does) they strictly increase (docs/ids.md,
    // Scattering).
    let shards: std::collections::BTreeSet<u64> = all.iter().map(|&id| id >> 60).collect();
    assert!(shards.len() >= 6, "64 ids over {shards:?}");
    let base: Vec<u64> = all
        .iter()
        .map(|&id| layout.unscatter(id).unwrap())
        .collect();
    increasing(&base);
    for (k, &id) in all.iter().enumerate() {
        let (d, l) = w.decode("scattered", id).await.unwrap();
        assert_eq!(l, layout);
        assert_eq!((d.worker, d.unix_ms, d.seq), (0, T0 + k as u64, 0));
    }
}
