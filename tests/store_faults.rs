//! StoreSvr under faults, with real processes on loopback.
//!
//! Promise 2 (durability): every ceiling raise the store acknowledged is
//! still there after kill -9 of the leader, and after kill -9 of every
//! replica at once; no ceiling ever decreases. Also: take-over and fencing
//! through the real API, and bad input gets a typed error and changes
//! nothing (promise 5).

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seqsvr_core::SetSpec;
use seqsvr_store::client::StoreClient;
use seqsvr_store::types::Rejection;
use seqsvr_store::Error;
use support::StoreCluster;

const SECTIONS: u32 = 8;
const STEP: u64 = 100;

fn small_set() -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: SECTIONS as u64 * 1000,
        section_size: 1000,
        step: STEP,
    }
}

/// Acknowledged ceilings: per section, every (time, ceiling) the store acked.
type Acks = Arc<Mutex<BTreeMap<u32, Vec<(Instant, u64)>>>>;

/// Raises `sections` one after another until `stop`, recording every ack.
/// Errors are expected while replicas die; they are counted, not fatal.
async fn raiser(
    c: StoreClient,
    sections: Vec<(u32, u64, u64)>,
    acks: Acks,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> u64 {
    let mut cur: BTreeMap<u32, (u64, u64)> =
        sections.iter().map(|&(s, e, m)| (s, (e, m))).collect();
    let mut errors = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for (&s, (epoch, max)) in cur.iter_mut() {
            let to = *max + STEP;
            let acked = match c.raise(s, *epoch, to).await {
                Ok(m) => Some(m),
                // A retried raise whose first attempt landed.
                Err(Error::Rejected(Rejection::NotAbove { current, .. })) if current >= to => {
                    Some(current)
                }
                Err(_) => {
                    errors += 1;
                    None
                }
            };
            if let Some(m) = acked {
                *max = m;
                acks.lock()
                    .unwrap()
                    .entry(s)
                    .or_default()
                    .push((Instant::now(), m));
            }
        }
    }
    errors
}

async fn setup(cluster: &StoreCluster) -> (StoreClient, Vec<(u32, u64, u64)>) {
    cluster.wait_ready(Duration::from_secs(30)).await;
    let c = cluster.client();
    c.register_alloc("alloc-t", "127.0.0.1:1").await.unwrap();
    let (grants, _) = c.take_over("alloc-t", 0, SECTIONS).await.unwrap();
    let secs = grants
        .iter()
        .map(|g| (g.section, g.epoch, g.max_seq))
        .collect();
    (c, secs)
}

fn start_raisers(
    c: &StoreClient,
    secs: &[(u32, u64, u64)],
    acks: &Acks,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u64>> {
    // Four concurrent callers, each with its own sections.
    (0..4)
        .map(|k| {
            let mine: Vec<_> = secs
                .iter()
                .copied()
                .filter(|(s, _, _)| s % 4 == k)
                .collect();
            tokio::spawn(raiser(c.clone(), mine, acks.clone(), stop.clone()))
        })
        .collect()
}

/// Every acked ceiling is present, and acks per section only went up.
async fn check_acks(c: &StoreClient, acks: &Acks, logs: impl Fn() -> String) {
    let now = c.read_sections(0, SECTIONS).await.unwrap();
    let acks = acks.lock().unwrap();
    for s in &now {
        let seen = acks.get(&s.section).map(Vec::as_slice).unwrap_or(&[]);
        for w in seen.windows(2) {
            assert!(
                w[1].1 > w[0].1,
                "section {} acked {} after {}",
                s.section,
                w[1].1,
                w[0].1
            );
        }
        let top = seen.last().map(|a| a.1).unwrap_or(0);
        assert!(
            s.max_seq >= top,
            "section {}: store has {} but {} was acknowledged\n{}",
            s.section,
            s.max_seq,
            top,
            logs()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_leader_during_raises_keeps_every_acked_ceiling() {
    let mut cluster = StoreCluster::start(3, small_set());
    let (c, secs) = setup(&cluster).await;
    let acks: Acks = Default::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks = start_raisers(&c, &secs, &acks, &stop);

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let leader = cluster.wait_ready(Duration::from_secs(5)).await;
    let killed_at = Instant::now();
    cluster.procs[leader].kill9();
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }

    let first_after = acks
        .lock()
        .unwrap()
        .values()
        .flatten()
        .filter(|(t, _)| *t > killed_at)
        .map(|(t, _)| *t - killed_at)
        .min()
        .expect("no raise acknowledged after the leader died");
    println!("first raise acknowledged {first_after:?} after kill -9 of the leader");
    assert!(
        first_after < Duration::from_secs(10),
        "store unavailable for {first_after:?}"
    );
    check_acks(&c, &acks, || cluster.logs()).await;

    // The killed replica rejoins and catches up.
    cluster.procs[leader].restart();
    let target = c
        .status_all()
        .await
        .into_iter()
        .filter_map(|(_, s)| s.ok())
        .map(|s| s.last_applied)
        .max()
        .unwrap();
    let start = Instant::now();
    loop {
        let st = StoreClient::new(&[cluster.addrs[leader].clone()])
            .unwrap()
            .status_all()
            .await;
        if let Ok(s) = &st[0].1 {
            if s.last_applied >= target && s.has_leader {
                break;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "restarted replica did not catch up\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_all_replicas_at_once_keeps_every_acked_ceiling() {
    let mut cluster = StoreCluster::start(3, small_set());
    let (c, secs) = setup(&cluster).await;
    let acks: Acks = Default::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks = start_raisers(&c, &secs, &acks, &stop);

    tokio::time::sleep(Duration::from_millis(2000)).await;
    // SIGKILL all three before reaping any: as close to "at once" as it gets.
    for p in &cluster.procs {
        support::signal(p.pid().unwrap(), libc::SIGKILL);
    }
    for p in &mut cluster.procs {
        p.kill9();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let acked: usize = acks.lock().unwrap().values().map(Vec::len).sum();
    assert!(
        acked > 10,
        "too few raises acknowledged ({acked}) to test anything"
    );

    for p in &mut cluster.procs {
        p.restart();
    }
    cluster.wait_ready(Duration::from_secs(30)).await;
    check_acks(&c, &acks, || cluster.logs()).await;

    // The owner's epochs survived too: it can keep raising.
    let now = c.read_sections(0, SECTIONS).await.unwrap();
    for (s, epoch, _) in secs {
        let cur = now[s as usize].max_seq;
        assert_eq!(now[s as usize].epoch, epoch);
        let r = c.raise(s, epoch, cur + 1).await;
        let again = c.read_sections(0, SECTIONS).await.unwrap();
        assert_eq!(
            r,
            Ok(cur + 1),
            "section {s}: read {now:?}\nthen {again:?}\n{}",
            cluster.logs()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_over_fencing_and_bad_input() {
    let cluster = StoreCluster::start(3, small_set());
    let (c, secs) = setup(&cluster).await;
    let (s0, e0, m0) = secs[0];
    assert_eq!(c.raise(s0, e0, m0 + 10).await.unwrap(), m0 + 10);

    // Take-over bumps the epoch and returns the previous ceiling.
    c.register_alloc("alloc-u", "127.0.0.1:2").await.unwrap();
    // Claiming a section routed elsewhere is refused, and so is routing it
    // away from an owner whose lease has not expired; the owner can hand it
    // off (one write: new owner, new epoch, ceiling + step).
    assert!(matches!(
        c.take_over("alloc-u", s0, 1).await,
        Err(Error::Rejected(Rejection::OwnedElsewhere { .. }))
    ));
    assert!(matches!(
        c.assign("alloc-u", s0, 1).await,
        Err(Error::Rejected(Rejection::OwnedElsewhere { .. }))
    ));
    let g = c.handoff("alloc-t", "alloc-u", s0, 1).await.unwrap();
    assert_eq!(
        (g[0].epoch, g[0].prev_ceiling, g[0].max_seq),
        (e0 + 2, m0 + 10, m0 + 10 + STEP)
    );
    let routes = c.routes().await.unwrap();
    assert_eq!(routes.entry_for_section(s0).unwrap().alloc, "alloc-u");

    let before = c.read_sections(0, SECTIONS).await.unwrap();
    let version = routes.version;
    let cur = g[0].max_seq;
    let e1 = g[0].epoch;
    let rejected = |r: Result<u64, Error>| match r {
        Err(Error::Rejected(r)) => r,
        other => panic!("expected a rejection, got {other:?}"),
    };
    // The old owner's epoch is stale.
    assert!(
        matches!(rejected(c.raise(s0, e0, cur + 1).await), Rejection::StaleEpoch { current, .. } if current == e1)
    );
    // A lower or equal ceiling ("zero step").
    assert!(
        matches!(rejected(c.raise(s0, e1, cur).await), Rejection::NotAbove { current, .. } if current == cur)
    );
    assert!(matches!(
        rejected(c.raise(s0, e1, cur - 1).await),
        Rejection::NotAbove { .. }
    ));
    // An absurd step.
    assert!(matches!(
        rejected(c.raise(s0, e1, cur + 17 * STEP).await),
        Rejection::TooLarge { .. }
    ));
    assert!(matches!(
        rejected(c.raise(s0, e1, u64::MAX).await),
        Rejection::TooLarge { .. }
    ));
    // Unknown sections.
    assert!(matches!(
        rejected(c.raise(SECTIONS, 1, 1).await),
        Rejection::UnknownSection { .. }
    ));
    assert!(matches!(
        c.take_over("alloc-u", SECTIONS - 1, 2).await,
        Err(Error::Rejected(Rejection::UnknownSection { .. }))
    ));
    assert!(matches!(
        c.read_sections(SECTIONS, 1).await,
        Err(Error::Rejected(Rejection::UnknownSection { .. }))
    ));
    // Malformed requests.
    assert!(matches!(
        c.take_over("alloc-u", 0, 0).await,
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        c.take_over("", 0, 1).await,
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        c.take_over("nobody", 0, 1).await,
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        c.register_alloc("x", "no-port").await,
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        c.register_alloc("", "h:1").await,
        Err(Error::Invalid(_))
    ));
    // Garbage on the Raft transport.
    let ch = seqsvr_store::network::channel(&cluster.addrs[0], Duration::from_secs(1)).unwrap();
    let mut raft = seqsvr_proto::raft_client::RaftClient::new(ch);
    for data in [vec![], vec![1, 2, 3], vec![9; 40]] {
        let st = raft
            .append_entries(seqsvr_proto::RaftPayload { data })
            .await
            .unwrap_err();
        assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    }

    // None of it changed anything.
    assert_eq!(c.read_sections(0, SECTIONS).await.unwrap(), before);
    assert_eq!(c.routes().await.unwrap().version, version);
}
