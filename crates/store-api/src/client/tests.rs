//! The replica caller's hedging and retry rules, over fake replicas.

use super::*;
use std::sync::atomic::AtomicU32;

/// A core over fake replicas: the "client" is the replica's index.
fn fake(n: usize, hedge: bool) -> Replicas<usize> {
    Replicas {
        replicas: Arc::new((0..n).map(|i| (format!("replica-{i}"), i)).collect()),
        preferred: Default::default(),
        deadline: Duration::from_secs(2),
        attempt: Duration::from_millis(100),
        hedge,
    }
}

type Reply = std::result::Result<tonic::Response<u32>, tonic::Status>;

#[tokio::test(start_paused = true)]
async fn a_paused_replica_is_hedged_not_waited_for() {
    for hedge in [true, false] {
        let r = fake(3, hedge);
        // Replica 0 (preferred) never answers: paused, not dead.
        let got = r
            .call(|i| async move {
                if i == 0 {
                    std::future::pending::<Reply>().await
                } else {
                    Ok(tonic::Response::new(i as u32))
                }
            })
            .await;
        assert_eq!(got, Ok(1), "hedge={hedge}");
        // The one that answered is preferred from now on.
        assert_eq!(r.preferred.load(Ordering::Relaxed), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_answer_still_wins_when_hedged() {
    let r = fake(2, true);
    let got = r
        .call(|i| async move {
            let d = if i == 0 { 150 } else { 10_000 };
            tokio::time::sleep(Duration::from_millis(d)).await;
            Ok::<_, tonic::Status>(tonic::Response::new(i as u32))
        })
        .await;
    assert_eq!(got, Ok(0));
}

#[tokio::test(start_paused = true)]
async fn retryable_refusals_move_on_and_definite_ones_stop() {
    let r = fake(3, true);
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let got = r
        .call(move |i| {
            c.fetch_add(1, Ordering::Relaxed);
            async move {
                match i {
                    0 => Err(Error::NoLeader("election".into()).to_status()),
                    _ => Ok(tonic::Response::new(7u32)),
                }
            }
        })
        .await;
    assert_eq!(got, Ok(7));
    let refused = r
        .call(|_| async {
            Err::<tonic::Response<u32>, _>(Error::Invalid("bad".into()).to_status())
        })
        .await;
    assert_eq!(refused, Err(Error::Invalid("bad".into())));
}

#[tokio::test(start_paused = true)]
async fn nobody_answering_ends_at_the_deadline() {
    let r = fake(3, true);
    let start = Instant::now();
    let got = r
        .call(|_| async { std::future::pending::<Reply>().await })
        .await;
    assert!(matches!(got, Err(Error::NoLeader(_))), "{got:?}");
    assert!(start.elapsed() >= Duration::from_secs(2));
}
