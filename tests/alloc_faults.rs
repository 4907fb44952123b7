//! AllocSvr under faults, with real processes: a workload of `next`,
//! `next_batch` and `current` calls runs while AllocSvrs (or every process)
//! are killed with SIGKILL and restarted; the per-uid checker then looks at
//! every answer the clients received (a batch's copies of a uid in request
//! order, each `current` against the numbers around it).
//!
//! Promise 1 (no regression, no repeat), promise 2 (restart of every
//! process), promise 4 (a restart skips at most about one step per
//! section), promise 5 (typed errors that change nothing).

use std::time::{Duration, Instant};

use seqsvr::drill::section_skip;
use seqsvr_client::SeqClient;
use seqsvr_core::rng::Rng;
use seqsvr_testkit::{self as kit, assert_monotonic, small_set as set, Bins, SetCluster, Workload};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

const STEP: u64 = kit::SMALL_STEP;

/// `callers` tasks calling `next` (every 4th call `next_batch` of 4 uids,
/// one of them twice; every 5th `current`) on uids spread over the whole
/// set.
fn start_workload(c: &SeqClient, callers: u64) -> Workload {
    let mut w = Workload::new();
    w.tasks = (0..callers)
        .map(|k| {
            let (c, r) = (c.clone(), w.recorder());
            tokio::spawn(async move {
                let mut rng = Rng::new(0x9e3779b97f4a7c15u64 ^ k);
                let mut i = 0u64;
                while !r.stopped() {
                    let x = rng.next_u64();
                    // Few uids, so each sees many calls.
                    let uid = (x % 64) * 61 % 4000;
                    i += 1;
                    if i.is_multiple_of(4) {
                        // The checker orders the two copies of `uid`.
                        let uids = [uid, (uid + 500) % 4000, uid, (uid + 1500) % 4000];
                        r.batch(&c, &uids).await;
                    } else if i.is_multiple_of(5) {
                        r.current(&c, uid).await;
                    } else {
                        r.next(&c, uid).await;
                    }
                }
            })
        })
        .collect();
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_an_alloc_mid_workload_and_restart_it() {
    let mut cluster = SetCluster::start(BINS, set(), 2);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let w = start_workload(&c, 8);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.allocs[0].kill9();
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.allocs[0].restart();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (obs, _) = w.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    // alloc-1 served sections 0..4; the restart skipped at most one step
    // per section (plus numbers handed out whose replies were lost), and
    // the sections that stayed with alloc-2 skipped nothing much.
    let skip = section_skip(&set(), &obs, killed, Instant::now());
    println!("largest skip at restart: {skip} (step {STEP})");
    assert!(skip <= 2 * STEP, "restart skipped {skip} > 2 steps");
    let served_after = obs
        .iter()
        .filter(|o| o.start > killed && set().section_of(o.uid) == Some(0))
        .count();
    assert!(
        served_after > 0,
        "restarted alloc never served again\n{}",
        cluster.store.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_every_process_at_once_and_restart() {
    let mut cluster = SetCluster::start(BINS, set(), 2);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let w = start_workload(&c, 8);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let procs = cluster.allocs.iter().chain(cluster.store.procs.iter());
    for p in procs {
        kit::signal(p.pid().unwrap(), libc::SIGKILL);
    }
    for p in cluster
        .allocs
        .iter_mut()
        .chain(cluster.store.procs.iter_mut())
    {
        p.kill9();
    }
    let killed = Instant::now();
    for p in cluster
        .store
        .procs
        .iter_mut()
        .chain(cluster.allocs.iter_mut())
    {
        p.restart();
    }
    tokio::time::sleep(Duration::from_millis(6000)).await;
    let (obs, _) = w.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    let after = obs.iter().filter(|o| o.start > killed).count();
    assert!(
        after > 100,
        "cluster did not serve after the restart ({after})\n{}",
        cluster.store.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_typed_errors_and_changes_nothing() {
    use seqsvr_proto::alloc_client::AllocClient;
    use seqsvr_proto::{detail_of, ErrorKind};
    let cluster = SetCluster::start(BINS, set(), 2);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let mut a1 = AllocClient::connect(format!("http://{}", cluster.alloc_addrs[0]))
        .await
        .unwrap();
    let uid = 7; // section 0: alloc-1's
    let foreign = 3999; // section 7: alloc-2's
    let n = a1
        .next(seqsvr_proto::NextRequest {
            uid,
            count: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let before = (
        c.current(uid).await.unwrap(),
        c.current(foreign).await.unwrap(),
    );
    assert_eq!(before.0, n.seq);

    let kind = |st: &tonic::Status| detail_of(st).map(|d| ErrorKind::try_from(d.kind).unwrap());
    // Outside the set's range.
    let st = a1
        .next(seqsvr_proto::NextRequest {
            uid: 4000,
            count: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (st.code(), kind(&st)),
        (tonic::Code::OutOfRange, Some(ErrorKind::OutOfRange))
    );
    // Not the owner, asked alone (a call another AllocSvr forwarded is
    // answered from memory, never forwarded again): retryable, naming the
    // owner and the route version (not attaching the table).
    let alone = |msg| {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut()
            .insert(seqsvr_client::FORWARDED_BY, "test".parse().unwrap());
        r
    };
    let st = a1
        .next(alone(seqsvr_proto::NextRequest {
            uid: foreign,
            count: 0,
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(
        (st.code(), kind(&st)),
        (tonic::Code::Unavailable, Some(ErrorKind::NotOwner))
    );
    let d = detail_of(&st).unwrap();
    assert!(d.retryable);
    assert_eq!(
        (d.owner_alloc.as_str(), d.owner_addr.as_str()),
        ("alloc-2", cluster.alloc_addrs[1].as_str())
    );
    assert!(d.route_version > 0);
    let mut alone_current = tonic::Request::new(seqsvr_proto::CurrentRequest {
        uid: foreign,
        ..Default::default()
    });
    alone_current
        .metadata_mut()
        .insert(seqsvr_client::FORWARDED_BY, "test".parse().unwrap());
    let st = a1.current(alone_current).await.unwrap_err();
    assert_eq!(kind(&st), Some(ErrorKind::NotOwner));
    // Empty and oversized batches; a batch with a foreign uid.
    for uids in [vec![], vec![uid; seqsvr_core::MAX_BATCH + 1]] {
        let st = a1
            .next_batch(seqsvr_proto::NextBatchRequest { uids })
            .await
            .unwrap_err();
        assert_eq!(
            (st.code(), kind(&st)),
            (
                tonic::Code::InvalidArgument,
                Some(ErrorKind::InvalidRequest)
            )
        );
    }
    // Through the client: typed errors, no network call for a uid in no set.
    assert!(matches!(
        c.next(u64::MAX).await,
        Err(seqsvr_client::Error::OutOfRange { .. })
    ));
    assert!(matches!(
        c.next_batch(&[1, 4000]).await,
        Err(seqsvr_client::Error::OutOfRange { .. })
    ));

    // Nothing was handed out by the refused calls.
    assert_eq!(
        (
            c.current(uid).await.unwrap(),
            c.current(foreign).await.unwrap()
        ),
        before
    );
    assert_eq!(c.next(uid).await.unwrap(), before.0 + 1);
    // Unmarked, a1 forwards the foreign uid to its owner: the owner's
    // next number (docs/architecture/forwarding.md).
    let fwd = a1
        .current(seqsvr_proto::CurrentRequest {
            uid: foreign,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .seq;
    assert_eq!(fwd, before.1);
    let fwd = a1
        .next(seqsvr_proto::NextRequest {
            uid: foreign,
            count: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .seq;
    assert_eq!(fwd, before.1 + 1);
}
