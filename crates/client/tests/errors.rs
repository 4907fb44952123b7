//! Errors: what is retried, what comes back typed, and what the deadline
//! turns the last failure into.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{client, dead_addr, quick, table, Fake};
use seqsvr_client::{Error, ErrorKind};

/// One fake serving all of set 1 (uids 0..1000, sections of 100).
async fn one() -> Fake {
    let a = Fake::start(0).await;
    a.set_route(table(1, 0..1000, 100, 1, &[(0, 10, &a.addr)]));
    a
}

/// Asserts that a call gave up at its deadline: not before it, and not long
/// after (one attempt timeout plus generous scheduling slack: CI machines
/// are busy, and this is a behaviour check, not a speed check).
fn near_deadline(start: Instant, deadline_ms: u64) {
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(deadline_ms),
        "gave up early: {took:?}"
    );
    assert!(
        took < Duration::from_millis(deadline_ms + 3000),
        "gave up late: {took:?}"
    );
}

#[tokio::test]
async fn retryable_errors_are_retried_until_success() {
    let a = one().await;
    let c = client(&[&a], quick(2000)).await;
    a.fail(ErrorKind::CeilingExhausted, 3);
    assert_eq!(c.next(5).await, Ok(1));
    assert_eq!(a.calls(), 4);
    a.fail(ErrorKind::LeaseExpired, 2);
    assert_eq!(c.current(5).await, Ok(1));
    assert_eq!(a.calls(), 7);
    a.fail(ErrorKind::CeilingExhausted, 2);
    assert_eq!(c.next_batch(&[5, 6, 5]).await, Ok(vec![2, 1, 3]));
    assert_eq!(a.calls(), 10);
}

#[tokio::test]
async fn dropped_connections_are_retried() {
    let a = one().await;
    let c = client(&[&a], quick(2000)).await;
    a.state.down.store(true, Ordering::SeqCst);
    let state = a.state.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        state.down.store(false, Ordering::SeqCst);
    });
    assert_eq!(c.next(5).await, Ok(1));
    assert!(a.calls() > 1);
}

#[tokio::test]
async fn deadline_turns_a_busy_owner_into_unavailable() {
    let a = one().await;
    let c = client(&[&a], quick(300)).await;
    a.fail(ErrorKind::CeilingExhausted, u32::MAX);
    let start = Instant::now();
    let r = c.next(5).await;
    near_deadline(start, 300);
    assert!(
        matches!(
            &r,
            Err(Error::Unavailable {
                kind: ErrorKind::CeilingExhausted,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(a.calls() > 2, "only {} attempts", a.calls());
    a.fail(ErrorKind::LeaseExpired, u32::MAX);
    let r = c.next_batch(&[1, 2]).await;
    assert!(
        matches!(
            &r,
            Err(Error::Unavailable {
                kind: ErrorKind::LeaseExpired,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(r.unwrap_err().is_retryable());
}

#[tokio::test]
async fn deadline_turns_a_silent_owner_into_deadline_exceeded() {
    let a = one().await;
    let c = client(&[&a], quick(300)).await;
    a.state.hang.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let r = c.next(5).await;
    near_deadline(start, 300);
    assert!(matches!(r, Err(Error::DeadlineExceeded { .. })), "{r:?}");
}

#[tokio::test]
async fn deadline_turns_a_dead_owner_into_deadline_exceeded() {
    let a = Fake::start(0).await;
    let dead = dead_addr().await;
    a.set_route(table(1, 0..1000, 100, 1, &[(0, 10, &dead)]));
    let c = client(&[&a], quick(300)).await;
    let start = Instant::now();
    let r = c.next(5).await;
    near_deadline(start, 300);
    match r {
        Err(Error::DeadlineExceeded { last }) => assert!(last.contains(&dead), "{last}"),
        r => panic!("{r:?}"),
    }
    assert!(
        a.routes_calls() > 1,
        "no route refresh after a transport failure"
    );
}

#[tokio::test]
async fn unowned_section_gives_no_route() {
    let a = Fake::start(0).await;
    a.set_route(table(1, 0..1000, 100, 1, &[(0, 9, &a.addr)]));
    let c = client(&[&a], quick(200)).await;
    let start = Instant::now();
    assert_eq!(c.next(950).await, Err(Error::NoRoute { uid: 950 }));
    near_deadline(start, 200);
    assert_eq!(
        c.next_batch(&[1, 950]).await,
        Err(Error::NoRoute { uid: 950 })
    );
    // The owned uid of the batch was served; the unowned one never sent.
    assert_eq!(a.batches(), vec![vec![1]]);
    assert!(
        a.routes_calls() > 2,
        "no route refresh for an unowned section"
    );
    // Once the section has an owner, the next refresh finds it.
    a.set_route(table(1, 0..1000, 100, 2, &[(0, 10, &a.addr)]));
    assert_eq!(c.next(950).await, Ok(1));
}

#[tokio::test]
async fn out_of_range_from_the_server_is_typed_and_not_retried() {
    let a = one().await;
    let c = client(&[&a], quick(1000)).await;
    // The set shrank; the client's table (version 1) still says 0..1000.
    a.set_route(table(1, 0..500, 100, 2, &[(0, 5, &a.addr)]));
    assert_eq!(c.next(700).await, Err(Error::OutOfRange { uid: 700 }));
    assert_eq!(a.calls(), 1);
    // The error named a newer table (version 2), which the client fetched
    // in the background: once it is in, no call this time.
    let start = std::time::Instant::now();
    while c.route_version(1) != Some(2) {
        assert!(start.elapsed() < Duration::from_secs(2), "never fetched");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        c.next_batch(&[1, 800]).await,
        Err(Error::OutOfRange { uid: 800 })
    );
    assert_eq!(a.calls(), 1);
}

#[tokio::test]
async fn out_of_range_in_a_batch_names_the_uid() {
    let a = one().await;
    let c = client(&[&a], quick(1000)).await;
    a.set_route(table(1, 0..500, 100, 2, &[(0, 5, &a.addr)]));
    assert_eq!(
        c.next_batch(&[1, 2, 600, 3]).await,
        Err(Error::OutOfRange { uid: 600 })
    );
    assert_eq!(a.calls(), 1);
}

#[tokio::test]
async fn invalid_argument_is_typed_and_not_retried() {
    let a = one().await;
    let c = client(&[&a], quick(1000)).await;
    a.fail(ErrorKind::InvalidRequest, 1);
    let r = c.next(5).await;
    assert!(matches!(&r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert!(!r.unwrap_err().is_retryable());
    assert_eq!(a.calls(), 1);
    a.fail(ErrorKind::InvalidRequest, 1);
    let r = c.next_batch(&[5, 6]).await;
    assert!(matches!(&r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert_eq!(a.calls(), 2);
    assert_eq!(c.next(5).await, Ok(1), "a failed call handed nothing out");
}

#[tokio::test]
async fn non_retryable_server_failure_is_internal() {
    let a = one().await;
    let c = client(&[&a], quick(1000)).await;
    a.fail(ErrorKind::Internal, 1);
    let r = c.next(5).await;
    assert!(matches!(&r, Err(Error::Internal(_))), "{r:?}");
    assert_eq!(a.calls(), 1);
}
