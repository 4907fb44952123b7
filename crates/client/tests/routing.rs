//! Routing: the client sends each uid to its owner, splits batches by
//! owner, follows moves and route versions, and keeps sets apart.

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{client, dead_addr, quick, table, Fake};
use seqsvr_client::{ClientOptions, Error, SeqClient};
use seqsvr_core::MAX_BATCH;

/// Base of fake B's numbers (fake A starts at 0).
const B: u64 = 1_000_000;

/// Two fakes sharing set 1 (uids 0..1000, sections of 100): sections 0–4
/// on A, 5–9 on B; both believe route version 1.
async fn two_owners() -> (Fake, Fake) {
    let (a, b) = (Fake::start(0).await, Fake::start(B).await);
    let t = table(1, 0..1000, 100, 1, &[(0, 5, &a.addr), (5, 5, &b.addr)]);
    a.set_route(t.clone());
    b.set_route(t);
    (a, b)
}

#[tokio::test]
async fn routes_each_uid_to_its_owner() {
    let (a, b) = two_owners().await;
    let c = client(&[&a], quick(1000)).await;
    assert_eq!(c.route_version(1), Some(1));
    assert_eq!(c.next(50).await, Ok(1));
    assert_eq!(c.next(750).await, Ok(B + 1));
    assert_eq!(c.next(50).await, Ok(2));
    assert_eq!(c.current(50).await, Ok(2));
    assert_eq!(c.current(499).await, Ok(0));
    assert_eq!((a.calls(), b.calls()), (4, 1));
}

#[tokio::test]
async fn batch_splits_by_owner_and_keeps_order_and_duplicates() {
    let (a, b) = two_owners().await;
    let c = client(&[&a], quick(1000)).await;
    let uids = [750, 50, 750, 51, 50, 750];
    let seqs = c.next_batch(&uids).await.unwrap();
    assert_eq!(seqs, vec![B + 1, 1, B + 2, 1, 2, B + 3]);
    assert_eq!(a.batches(), vec![vec![50, 51, 50]]);
    assert_eq!(b.batches(), vec![vec![750, 750, 750]]);
    assert_eq!(c.next_batch(&[]).await, Ok(vec![]));
    assert_eq!(a.calls() + b.calls(), 2, "an empty batch makes no call");
}

#[tokio::test]
async fn batch_parts_are_sent_in_parallel() {
    let (a, b) = two_owners().await;
    let options = ClientOptions {
        attempt_timeout: Duration::from_secs(2),
        ..quick(5000)
    };
    let c = client(&[&a], options).await;
    for f in [&a, &b] {
        f.state
            .delay_ms
            .store(300, std::sync::atomic::Ordering::SeqCst);
    }
    let start = Instant::now();
    let seqs = c.next_batch(&[1, 999]).await.unwrap();
    assert_eq!(seqs, vec![1, B + 1]);
    let took = start.elapsed();
    assert!(
        // One by one would take at least 2 × 300 ms.
        took < Duration::from_millis(595),
        "parts sent one by one: {took:?}"
    );
}

#[tokio::test]
async fn large_batch_is_chunked_and_duplicates_increase() {
    let (a, _b) = two_owners().await;
    let c = client(&[&a], quick(5000)).await;
    // 10,000 entries over 500 uids, all on A: three chunks, each uid 20 times.
    let uids: Vec<u64> = (0..10_000).map(|i| (i * 7) % 500).collect();
    let seqs = c.next_batch(&uids).await.unwrap();
    let sizes: Vec<usize> = a.batches().iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![MAX_BATCH, MAX_BATCH, 10_000 - 2 * MAX_BATCH]);
    let mut last: HashMap<u64, u64> = HashMap::new();
    for (&u, &s) in uids.iter().zip(&seqs) {
        let prev = last.insert(u, s).unwrap_or(0);
        assert!(s > prev, "uid {u}: {s} after {prev}");
    }
    assert!(last.values().all(|&s| s == 20));
}

#[tokio::test]
async fn failed_chunk_is_resent_before_later_ones() {
    let (a, _b) = two_owners().await;
    let c = client(&[&a], quick(5000)).await;
    // The second chunk fails once: the third must wait for its retry, or
    // the third chunk's copies of a uid would get smaller numbers.
    a.state.fail_after.store(1, Ordering::SeqCst);
    a.fail(seqsvr_client::ErrorKind::CeilingExhausted, 1);
    let uids: Vec<u64> = (0..10_000).map(|i| (i * 7) % 500).collect();
    let seqs = c.next_batch(&uids).await.unwrap();
    let sizes: Vec<usize> = a.batches().iter().map(Vec::len).collect();
    let rest = 10_000 - MAX_BATCH;
    assert_eq!(
        sizes,
        vec![MAX_BATCH, MAX_BATCH, MAX_BATCH, rest - MAX_BATCH]
    );
    let mut last: HashMap<u64, u64> = HashMap::new();
    for (&u, &s) in uids.iter().zip(&seqs) {
        let prev = last.insert(u, s).unwrap_or(0);
        assert!(s > prev, "uid {u}: {s} after {prev}");
    }
}

#[tokio::test]
async fn not_owner_is_retried_at_once_at_the_new_owner() {
    let (a, b) = two_owners().await;
    // A pause before a retry would show: the first backoff is a second.
    let options = ClientOptions {
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(1),
        ..quick(3000)
    };
    let c = client(&[&a], options).await;
    // Section 0 moves from A to B; the client still has version 1.
    let moved = table(
        1,
        0..1000,
        100,
        2,
        &[(0, 1, &b.addr), (1, 4, &a.addr), (5, 5, &b.addr)],
    );
    a.set_route(moved.clone());
    b.set_route(moved);
    let start = Instant::now();
    assert_eq!(c.next(5).await, Ok(B + 1));
    assert!(
        // A backoff sleep (1 s configured) would take longer.
        start.elapsed() < Duration::from_millis(990),
        "{:?}",
        start.elapsed()
    );
    assert_eq!((a.calls(), b.calls()), (1, 1));
    assert_eq!(c.route_version(1), Some(2));
    // The batch path follows moves the same way.
    let moved = table(1, 0..1000, 100, 3, &[(0, 10, &b.addr)]);
    a.set_route(moved.clone());
    b.set_route(moved);
    let start = Instant::now();
    assert_eq!(
        c.next_batch(&[5, 150, 950]).await,
        Ok(vec![B + 2, B + 1, B + 1])
    );
    assert!(start.elapsed() < Duration::from_millis(990));
    assert_eq!(c.route_version(1), Some(3));
}

#[tokio::test]
async fn a_refusal_fetches_the_table_only_when_it_names_a_newer_version() {
    let (a, b) = two_owners().await;
    let c = client(&[&a], quick(3000)).await;
    // Section 0 moves to B (version 2); A knows, the client does not.
    let moved = table(
        1,
        0..1000,
        100,
        2,
        &[(0, 1, &b.addr), (1, 4, &a.addr), (5, 5, &b.addr)],
    );
    a.set_route(moved.clone());
    b.set_route(moved);
    let before = a.routes_calls();
    // Many calls refused together: one fetch of A's table between them.
    let calls = (0..16).map(|i| {
        let c = c.clone();
        tokio::spawn(async move { c.next(i).await })
    });
    for r in futures::future::join_all(calls).await {
        assert!(r.unwrap().is_ok());
    }
    assert_eq!(c.route_version(1), Some(2));
    assert_eq!(a.routes_calls() - before, 1, "one fetch after the refusals");
    // Routed by the fetched table now: no refusal, no fetch.
    let b_calls = b.calls();
    assert_eq!(c.next(3).await, Ok(B + 2));
    assert_eq!(b.calls(), b_calls + 1);
    assert_eq!(a.routes_calls() - before, 1);
}

#[tokio::test]
async fn tables_attached_by_older_servers_are_still_followed() {
    let (a, b) = two_owners().await;
    a.state.legacy_errors.store(true, Ordering::SeqCst);
    b.state.legacy_errors.store(true, Ordering::SeqCst);
    let c = client(&[&a], quick(3000)).await;
    let moved = table(1, 0..1000, 100, 2, &[(0, 1, &b.addr), (1, 9, &a.addr)]);
    a.set_route(moved.clone());
    b.set_route(moved);
    let before = a.routes_calls();
    assert_eq!(c.next(5).await, Ok(B + 1));
    assert_eq!(c.route_version(1), Some(2));
    // The table came with the error: nothing was fetched.
    assert_eq!(a.routes_calls(), before);
    assert_eq!(c.next_batch(&[5, 150]).await, Ok(vec![B + 2, 1]));
}

#[tokio::test]
async fn newer_route_version_in_a_reply_triggers_a_refresh() {
    let (a, b) = two_owners().await;
    let c = client(&[&a], quick(1000)).await;
    let before = a.routes_calls();
    // The routes changed elsewhere (section 9 moved to A); A knows.
    let t = table(
        1,
        0..1000,
        100,
        5,
        &[(0, 5, &a.addr), (5, 4, &b.addr), (9, 1, &a.addr)],
    );
    a.set_route(t.clone());
    b.set_route(t);
    assert_eq!(c.next(1).await, Ok(1));
    wait_for(|| c.route_version(1) == Some(5)).await;
    assert!(a.routes_calls() > before);
    // The refreshed table sends uid 950 straight to A.
    assert_eq!(c.next(950).await, Ok(1));
    assert_eq!(b.calls(), 0);
}

/// Polls `cond` for up to two seconds.
async fn wait_for(cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "condition never held"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Set 1 (uids 0..1000) on A, set 2 (uids 1000..2000) on B.
async fn two_sets() -> (Fake, Fake) {
    let (a, b) = (Fake::start(0).await, Fake::start(B).await);
    a.set_route(table(1, 0..1000, 100, 1, &[(0, 10, &a.addr)]));
    b.set_route(table(2, 1000..2000, 250, 7, &[(0, 4, &b.addr)]));
    (a, b)
}

#[tokio::test]
async fn two_sets_route_by_uid_range() {
    let (a, b) = two_sets().await;
    let c = client(&[&a, &b], quick(1000)).await;
    assert_eq!((c.route_version(1), c.route_version(2)), (Some(1), Some(7)));
    assert_eq!(c.route_version(3), None);
    assert_eq!(c.next(999).await, Ok(1));
    assert_eq!(c.next(1000).await, Ok(B + 1));
    let seqs = c.next_batch(&[1500, 5, 1999, 0, 1500]).await.unwrap();
    assert_eq!(seqs, vec![B + 1, 1, B + 1, 1, B + 2]);
    let sets: Vec<u32> = c.route_tables().iter().map(|t| t.set.set_id).collect();
    assert_eq!(sets, vec![1, 2]);
}

#[tokio::test]
async fn uid_outside_every_set_fails_without_a_call() {
    let (a, b) = two_sets().await;
    let c = client(&[&a, &b], quick(1000)).await;
    let before = [a.calls(), b.calls(), a.routes_calls(), b.routes_calls()];
    assert_eq!(c.next(2000).await, Err(Error::OutOfRange { uid: 2000 }));
    assert_eq!(
        c.current(u64::MAX).await,
        Err(Error::OutOfRange { uid: u64::MAX })
    );
    let batch = c.next_batch(&[5, 1500, 7000, 8000]).await;
    assert_eq!(batch, Err(Error::OutOfRange { uid: 7000 }));
    let after = [a.calls(), b.calls(), a.routes_calls(), b.routes_calls()];
    assert_eq!(before, after);
}

#[tokio::test]
async fn set_of_a_seed_down_at_connect_is_learned_later() {
    let (a, b) = two_sets().await;
    b.state.down.store(true, Ordering::SeqCst);
    let c = client(&[&a, &b], quick(1000)).await;
    assert_eq!(c.route_version(2), None);
    // B still silent: one refresh, then the uid is out of range, at once.
    let start = Instant::now();
    assert_eq!(c.next(1500).await, Err(Error::OutOfRange { uid: 1500 }));
    assert!(start.elapsed() < Duration::from_millis(990));
    b.state.down.store(false, Ordering::SeqCst);
    assert_eq!(c.next_batch(&[1500, 1]).await, Ok(vec![B + 1, 1]));
    assert_eq!(c.route_version(2), Some(7));
    // Every seed heard from: an unknown uid costs no call any more.
    let before = [a.routes_calls(), b.routes_calls()];
    assert_eq!(c.next(5000).await, Err(Error::OutOfRange { uid: 5000 }));
    assert_eq!([a.routes_calls(), b.routes_calls()], before);
}

#[tokio::test]
async fn transport_failure_refreshes_routes_and_retries() {
    let a = Fake::start(0).await;
    let dead = dead_addr().await;
    a.set_route(table(1, 0..1000, 100, 1, &[(0, 10, &dead)]));
    let c = client(&[&a], quick(2000)).await;
    // The dead owner's sections were taken over by A.
    a.set_route(table(1, 0..1000, 100, 2, &[(0, 10, &a.addr)]));
    assert_eq!(c.next(5).await, Ok(1));
    assert_eq!(c.route_version(1), Some(2));
    // Same through a batch.
    a.set_route(table(1, 0..1000, 100, 3, &[(0, 10, &dead)]));
    c.refresh_routes().await;
    assert_eq!(c.route_version(1), Some(3));
    a.set_route(table(1, 0..1000, 100, 4, &[(0, 10, &a.addr)]));
    assert_eq!(c.next_batch(&[5, 6]).await, Ok(vec![2, 1]));
}

#[tokio::test]
async fn connect_errors_are_typed() {
    let none: [String; 0] = [];
    let r = SeqClient::connect(&none, quick(100)).await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    let r = SeqClient::connect(&["bad addr::".to_string()], quick(100)).await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    let bad = ClientOptions {
        deadline: Duration::ZERO,
        ..Default::default()
    };
    let r = SeqClient::connect(&["127.0.0.1:1".to_string()], bad).await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    let start = Instant::now();
    let r = SeqClient::connect(&[dead_addr().await], quick(300)).await;
    assert!(matches!(r, Err(Error::Transport(_))), "{r:?}");
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn clones_share_one_client_across_tasks() {
    fn send_sync_clone<T: Send + Sync + Clone + 'static>() {}
    send_sync_clone::<SeqClient>();
    let (a, _b) = two_owners().await;
    let c = client(&[&a], quick(5000)).await;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for _ in 0..50 {
                    got.push(c.next(7).await.unwrap());
                }
                got
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        let got = t.await.unwrap();
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "one task saw a step back"
        );
        all.extend(got);
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 400, "a number was handed out twice");
}
