//! StoreSvr under faults, with real processes on loopback.
//!
//! Promise 2 (durability): every ceiling raise the store acknowledged is
//! still there after kill -9 of the leader, and after kill -9 of every
//! replica at once; no ceiling ever decreases. Also: take-over and fencing
//! through the real API, and bad input gets a typed error and changes
//! nothing (promise 5).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seqsvr_core::{Epoch, Grant, Incarnation, SectionId, SetSpec};
use seqsvr_store_api::client::plaintext;
use seqsvr_store_api::{AllocAddrs, Error, PeerClient, ReadClient, Rejection};
use seqsvr_testkit::StoreCluster;
use seqsvr_testkit::{self as kit, Bins};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

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

/// One AllocSvr incarnation, played by the test on the store's peer plane
/// (plaintext on loopback: the store takes the name it is given).
#[derive(Clone)]
struct Alloc {
    peer: PeerClient,
    id: &'static str,
    incarnation: Incarnation,
}

impl Alloc {
    fn new(cluster: &StoreCluster, id: &'static str, incarnation: Incarnation) -> Alloc {
        Alloc {
            peer: cluster.peer(),
            id,
            incarnation,
        }
    }

    /// Registers with every plane at `addr` (the test never dials them).
    async fn register(&self, addr: &str) -> Result<u64, Error> {
        let addrs = AllocAddrs {
            client: addr.into(),
            peer: addr.into(),
            admin: addr.into(),
        };
        self.peer
            .register_alloc(self.id, self.incarnation, &addrs)
            .await
    }

    /// Claims `count` sections from `first`, never having installed any.
    async fn take_over(&self, first: SectionId, count: u32) -> Result<Vec<Grant>, Error> {
        let known = vec![0; count as usize];
        let (grants, _) = self
            .peer
            .take_over(self.id, self.incarnation, first, known)
            .await?;
        Ok(grants)
    }

    async fn raise(&self, section: SectionId, epoch: Epoch, to: u64) -> Result<u64, Error> {
        self.peer
            .raise(self.id, self.incarnation, section, epoch, to)
            .await
    }
}

/// Acknowledged ceilings: per section, every (time, ceiling) the store acked.
type Acks = Arc<Mutex<BTreeMap<u32, Vec<(Instant, u64)>>>>;

/// Raises `sections` one after another until `stop`, recording every ack.
/// Errors are expected while replicas die; they are counted, not fatal.
async fn raiser(
    c: Alloc,
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

async fn setup(cluster: &StoreCluster) -> (Alloc, Vec<(u32, u64, u64)>) {
    cluster.wait_ready(Duration::from_secs(30)).await;
    let c = Alloc::new(cluster, "alloc-t", 0x7e57);
    c.register("127.0.0.1:1").await.unwrap();
    let grants = c.take_over(0, SECTIONS).await.unwrap();
    let secs = grants
        .iter()
        .map(|g| (g.section, g.epoch, g.max_seq))
        .collect();
    (c, secs)
}

fn start_raisers(
    c: &Alloc,
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
async fn check_acks(c: &ReadClient, acks: &Acks, logs: impl Fn() -> String) {
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
            s.record.max_seq >= top,
            "section {}: store has {} but {} was acknowledged\n{}",
            s.section,
            s.record.max_seq,
            top,
            logs()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_leader_during_raises_keeps_every_acked_ceiling() {
    let mut cluster = StoreCluster::start(BINS, 3, small_set());
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
    let read = cluster.read();
    check_acks(&read, &acks, || cluster.logs()).await;

    // The killed replica rejoins and catches up.
    cluster.procs[leader].restart();
    let target = read
        .status_all()
        .await
        .into_iter()
        .filter_map(|(_, s)| s.ok())
        .map(|s| s.last_applied)
        .max()
        .unwrap();
    let start = Instant::now();
    loop {
        let st = ReadClient::new(&[cluster.client_addrs[leader].clone()], &plaintext())
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
    let mut cluster = StoreCluster::start(BINS, 3, small_set());
    let (c, secs) = setup(&cluster).await;
    let acks: Acks = Default::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks = start_raisers(&c, &secs, &acks, &stop);

    tokio::time::sleep(Duration::from_millis(2000)).await;
    // SIGKILL all three before reaping any: as close to "at once" as it gets.
    for p in &cluster.procs {
        kit::signal(p.pid().unwrap(), libc::SIGKILL);
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
    let read = cluster.read();
    check_acks(&read, &acks, || cluster.logs()).await;

    // The owner's epochs survived too: it can keep raising.
    let now = read.read_sections(0, SECTIONS).await.unwrap();
    for (s, epoch, _) in secs {
        let cur = now[s as usize].record.max_seq;
        assert_eq!(now[s as usize].record.epoch, epoch);
        let r = c.raise(s, epoch, cur + 1).await;
        let again = read.read_sections(0, SECTIONS).await.unwrap();
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
    let cluster = StoreCluster::start(BINS, 3, small_set());
    let (c, secs) = setup(&cluster).await;
    let (read, admin) = (cluster.read(), cluster.admin());
    let (s0, e0, m0) = secs[0];
    assert_eq!(c.raise(s0, e0, m0 + 10).await.unwrap(), m0 + 10);

    // Take-over bumps the epoch and returns the previous ceiling.
    let u = Alloc::new(&cluster, "alloc-u", 0x7e58);
    u.register("127.0.0.1:2").await.unwrap();
    // Claiming a section routed elsewhere is refused, and so is routing it
    // away from an owner whose lease has not expired; the owner can hand it
    // off (one write: new owner, new epoch, ceiling + step).
    assert!(matches!(
        u.take_over(s0, 1).await,
        Err(Error::Rejected(Rejection::OwnedElsewhere { .. }))
    ));
    let epochs = read.read_sections(s0, 1).await.unwrap();
    assert!(matches!(
        admin
            .assign(
                "alloc-u",
                s0,
                epochs.iter().map(|s| s.record.epoch).collect()
            )
            .await,
        Err(Error::Rejected(Rejection::OwnedElsewhere { .. }))
    ));
    let (g, _) = c
        .peer
        .handoff(c.id, c.incarnation, u.id, s0, e0)
        .await
        .unwrap();
    assert_eq!(
        (g.epoch, g.prev_ceiling, g.max_seq),
        (e0 + 1, m0 + 10, m0 + 10 + STEP)
    );
    let routes = read.routes().await.unwrap();
    assert_eq!(routes.entry_for_section(s0).unwrap().alloc, "alloc-u");

    let before = read.read_sections(0, SECTIONS).await.unwrap();
    let version = routes.version;
    let cur = g.max_seq;
    let e1 = g.epoch;
    let rejected = |r: Result<u64, Error>| match r {
        Err(Error::Rejected(r)) => r,
        other => panic!("expected a rejection, got {other:?}"),
    };
    // The old owner's epoch is stale.
    assert!(
        matches!(rejected(u.raise(s0, e0, cur + 1).await), Rejection::StaleEpoch { current, .. } if current == e1)
    );
    // A lower or equal ceiling ("zero step").
    assert!(
        matches!(rejected(u.raise(s0, e1, cur).await), Rejection::NotAbove { current, .. } if current == cur)
    );
    assert!(matches!(
        rejected(u.raise(s0, e1, cur - 1).await),
        Rejection::NotAbove { .. }
    ));
    // An absurd step.
    assert!(matches!(
        rejected(u.raise(s0, e1, cur + 17 * STEP).await),
        Rejection::TooLarge { .. }
    ));
    assert!(matches!(
        rejected(u.raise(s0, e1, u64::MAX).await),
        Rejection::TooLarge { .. }
    ));
    // Unknown sections.
    assert!(matches!(
        rejected(u.raise(SECTIONS, 1, 1).await),
        Rejection::UnknownSection { .. }
    ));
    assert!(matches!(
        u.take_over(SECTIONS - 1, 2).await,
        Err(Error::Rejected(Rejection::UnknownSection { .. }))
    ));
    assert!(matches!(
        read.read_sections(SECTIONS, 1).await,
        Err(Error::Rejected(Rejection::UnknownSection { .. }))
    ));
    // Malformed requests, and an AllocSvr the store does not know.
    assert!(matches!(u.take_over(0, 0).await, Err(Error::Invalid(_))));
    let nameless = Alloc::new(&cluster, "", 1);
    assert!(matches!(
        nameless.take_over(0, 1).await,
        Err(Error::Invalid(_))
    ));
    let nobody = Alloc::new(&cluster, "nobody", 1);
    assert!(matches!(
        nobody.take_over(0, 1).await,
        Err(Error::Rejected(Rejection::NotRegistered { .. }))
    ));
    let x = Alloc::new(&cluster, "x", 1);
    assert!(matches!(
        x.register("no-port").await,
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        nameless.register("h:1").await,
        Err(Error::Invalid(_))
    ));
    // Garbage on the Raft transport.
    let ch =
        seqsvr_net::client::channel(&cluster.peer_addrs[0], None, Duration::from_secs(1)).unwrap();
    let mut raft = seqsvr_proto::raft_client::RaftClient::new(ch);
    for data in [vec![], vec![1, 2, 3], vec![9; 40]] {
        let st = raft
            .append_entries(seqsvr_proto::RaftPayload { data })
            .await
            .unwrap_err();
        assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    }

    // None of it changed anything.
    assert_eq!(read.read_sections(0, SECTIONS).await.unwrap(), before);
    assert_eq!(read.routes().await.unwrap().version, version);
}
