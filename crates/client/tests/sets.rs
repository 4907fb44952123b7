//! Sets: the client finds a uid's set in the directory, learns sets from
//! their stores, follows sections moved between sets (MOVED, NOT_SERVED)
//! and corrects a stale directory from what servers answer.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::store::{absent, directory, moved, FakeStore};
use common::{quick, table, Fake};
use seqsvr_client::{ClientOptions, Error, ErrorKind, SeqClient};
use seqsvr_proto::{self as pb};

/// Base of set 1's AllocSvr's numbers (set 0's starts at 0).
const B: u64 = 1_000_000;
/// Base of set 2's AllocSvr's numbers.
const C: u64 = 2_000_000;

/// Set 0 (home, uids 0..1000) and set 1 (span 0..2000: it may receive
/// set 0's ranges), sections of 100, one AllocSvr and one store each.
/// Directory v1: 0..1000 → set 0, 1000..2000 → set 1.
struct Cluster {
    a0: Fake,
    a1: Fake,
    s0: FakeStore,
    s1: FakeStore,
}

impl Cluster {
    async fn start() -> Cluster {
        let c = Cluster {
            a0: Fake::start(0).await,
            a1: Fake::start(B).await,
            s0: FakeStore::start().await,
            s1: FakeStore::start().await,
        };
        let d = c.directory(1, &[(0, 1000, 0), (1000, 2000, 1)]);
        c.set0(c.table0(1, &[(0, 10)], vec![], &d));
        c.set1(c.table1(1, &[(10, 10)], vec![absent(0, 10)], &d));
        c
    }

    /// The directory at `version` with `ranges` over sets 0 and 1.
    fn directory(&self, version: u64, ranges: &[(u64, u64, u32)]) -> pb::Directory {
        let sets: [(u32, std::ops::Range<u64>, u64, &[&str]); 2] = [
            (0, 0..1000, 100, &[self.s0.addr.as_str()]),
            (1, 0..2000, 100, &[self.s1.addr.as_str()]),
        ];
        directory(version, &sets, ranges)
    }

    /// Set 0's table: `runs` of sections on its AllocSvr.
    fn table0(
        &self,
        version: u64,
        runs: &[(u32, u32)],
        placement: Vec<pb::PlaceRun>,
        d: &pb::Directory,
    ) -> pb::RouteTable {
        let runs: Vec<_> = runs.iter().map(|&(f, n)| (f, n, &*self.a0.addr)).collect();
        pb::RouteTable {
            placement,
            directory: Some(d.clone()),
            ..table(0, 0..1000, 100, version, &runs)
        }
    }

    /// Set 1's table, likewise.
    fn table1(
        &self,
        version: u64,
        runs: &[(u32, u32)],
        placement: Vec<pb::PlaceRun>,
        d: &pb::Directory,
    ) -> pb::RouteTable {
        let runs: Vec<_> = runs.iter().map(|&(f, n)| (f, n, &*self.a1.addr)).collect();
        pb::RouteTable {
            placement,
            directory: Some(d.clone()),
            ..table(1, 0..2000, 100, version, &runs)
        }
    }

    /// Set 0's group (its AllocSvr and store) now holds `t`.
    fn set0(&self, t: pb::RouteTable) {
        self.a0.set_route(t.clone());
        self.s0.set_route(t);
    }

    /// Set 1's group now holds `t`.
    fn set1(&self, t: pb::RouteTable) {
        self.a1.set_route(t.clone());
        self.s1.set_route(t);
    }

    /// The move of uids 500..1000 (sections 5..10) from set 0 to set 1,
    /// step 1: the move is begun in the directory (v2) and set 0 freezes
    /// the sections.
    fn freeze(&self) {
        let mut d = self.directory(2, &[(0, 1000, 0), (1000, 2000, 1)]);
        d.moving = Some(pb::PendingMove {
            begin: 500,
            end: 1000,
            from_set: 0,
            to_set: 1,
        });
        self.set0(self.table0(2, &[(0, 5)], vec![moved(5, 10, 1)], &d));
        self.set1(self.table1(1, &[(10, 10)], vec![absent(0, 10)], &d));
    }

    /// Step 2: set 1 installs the sections and its AllocSvr takes them.
    fn install(&self) {
        let d = self
            .s0
            .state
            .route
            .lock()
            .unwrap()
            .directory
            .clone()
            .unwrap();
        self.set1(self.table1(2, &[(5, 15)], vec![absent(0, 5)], &d));
    }

    /// Step 3: the directory flips (v3); the copy reaches set 1. Route
    /// versions do not change.
    fn flip(&self) {
        let d = self.directory(3, &[(0, 500, 0), (500, 2000, 1)]);
        self.set0(self.table0(2, &[(0, 5)], vec![moved(5, 10, 1)], &d));
        self.set1(self.table1(2, &[(5, 15)], vec![absent(0, 5)], &d));
    }

    /// A client seeded with set 0's AllocSvr only.
    async fn client(&self, options: ClientOptions) -> SeqClient {
        SeqClient::connect(std::slice::from_ref(&self.a0.addr), options)
            .await
            .unwrap()
    }
}

/// The shortest pause of [`no_pause`]'s client (its backoff, jittered
/// down to half).
const PAUSE_AT_LEAST: Duration = Duration::from_secs(10);

/// How long a call that did not pause may take here: far above what it
/// takes (a few ms), far below a pause, so a loaded machine does not
/// blur the two.
const NO_PAUSE_BOUND: Duration = Duration::from_secs(4);

/// Quick attempts, but a first pause of 20 s (at least 10, with jitter),
/// inside a deadline of a minute: a call that paused before following a
/// move would take that long.
fn no_pause() -> ClientOptions {
    ClientOptions {
        initial_backoff: PAUSE_AT_LEAST * 2,
        max_backoff: PAUSE_AT_LEAST * 2,
        ..quick(60_000)
    }
}

/// Asserts a call that began at `start` did not pause; prints its time.
fn assert_no_pause(what: &str, start: Instant) {
    let took = start.elapsed();
    println!("{what}: {took:?} (bound {NO_PAUSE_BOUND:?}; a pause is at least {PAUSE_AT_LEAST:?})");
    assert!(took < NO_PAUSE_BOUND, "{what} paused: {took:?}");
}

/// The most store reads a call retrying with [`quick`]'s backoff (pauses
/// of 5 ms doubling to 50 ms, each at least half that) can make in
/// `took`: one, then one after each pause that fits, and two more (a read
/// at once after a refusal, a refresh) so that the bound does not hang
/// on the exact path. A call that read in a loop without pausing would
/// make hundreds.
fn most_reads(took: Duration) -> u64 {
    let (mut planned, mut spent, mut reads) = (5.0_f64, 0.0_f64, 3);
    loop {
        spent += planned / 2.0;
        if spent > took.as_secs_f64() * 1000.0 {
            return reads;
        }
        reads += 1;
        planned = (planned * 2.0).min(50.0);
    }
}

/// Waits (up to 10 s) until `cond` holds, looking every millisecond.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not within 10 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn a_set_is_learned_from_its_stores() {
    let k = Cluster::start().await;
    let c = k.client(quick(1000)).await;
    assert_eq!(c.directory().map(|d| d.version), Some(1));
    assert_eq!(c.route_version(1), None);
    assert_eq!(c.next(700).await, Ok(1));
    // Set 1 is in no seed: its table comes from its store, listed in the
    // directory set 0 sent.
    assert_eq!(c.next(1500).await, Ok(B + 1));
    assert_eq!(c.route_version(1), Some(1));
    assert_eq!((k.s1.calls(), k.a1.routes_calls()), (1, 0));
    assert_eq!(c.next(1999).await, Ok(B + 1));
    assert_eq!(k.s1.calls(), 1, "a cached set is not fetched again");
}

#[tokio::test]
async fn a_store_is_a_seed_too() {
    let k = Cluster::start().await;
    let seeds = [k.s0.addr.clone()];
    let c = SeqClient::connect(&seeds, quick(1000)).await.unwrap();
    assert_eq!(c.route_version(0), Some(1));
    assert_eq!(c.next(5).await, Ok(1));
    assert_eq!(c.next(1500).await, Ok(B + 1));
    assert_eq!(k.s0.calls(), 1);
}

#[tokio::test]
async fn moved_section_is_followed_to_the_other_set_at_once() {
    let k = Cluster::start().await;
    let c = k.client(no_pause()).await;
    assert_eq!(c.next(700).await, Ok(1));
    assert_eq!(c.next(1500).await, Ok(B + 1));
    k.freeze();
    k.install();
    // The client still routes 700 to set 0, which answers MOVED with its
    // table; set 1's cached table predates the install, so the client
    // asks set 1's store and goes there without a pause.
    let start = Instant::now();
    assert_eq!(c.next(700).await, Ok(B + 1));
    assert_no_pause("following the move", start);
    assert_eq!((k.a0.calls(), k.a1.calls()), (2, 2));
    assert_eq!((c.route_version(0), c.route_version(1)), (Some(2), Some(2)));
    // A client that never saw set 1 fetches it the same way.
    let fresh = k.client(no_pause()).await;
    let start = Instant::now();
    assert_eq!(fresh.next(701).await, Ok(B + 1));
    assert_no_pause("a fresh client following the move", start);
}

#[tokio::test]
async fn not_served_between_freeze_and_install_is_retried_until_installed() {
    let k = Cluster::start().await;
    let c = k.client(quick(3000)).await;
    assert_eq!(c.next(1500).await, Ok(B + 1));
    k.freeze();
    let before = (k.a0.calls(), k.s1.calls());
    let start = Instant::now();
    // Installed once the call has asked set 1's store twice (it is
    // retrying), and no sooner than 100 ms in: time for a loop that does
    // not pause to show (the bound on reads is from the time it took).
    let installer = async {
        until("the call asks set 1's store twice", || {
            k.s1.calls() - before.1 >= 2
        })
        .await;
        tokio::time::sleep_until((start + Duration::from_millis(100)).into()).await;
        k.install();
    };
    let (got, ()) = tokio::join!(c.next(700), installer);
    let took = start.elapsed();
    assert_eq!(got, Ok(B + 1));
    // One MOVED from set 0; then set 1's store is asked once a backoff
    // (5 ms doubling to 50 ms): a handful of reads, no busy loop.
    assert_eq!(k.a0.calls() - before.0, 1);
    let reads = k.s1.calls() - before.1;
    let most = most_reads(took);
    println!("{reads} store reads in {took:?} (at most {most} with the backoff)");
    assert!(
        (2..=most).contains(&reads),
        "{reads} store reads in {took:?}"
    );
}

#[tokio::test]
async fn a_section_never_installed_ends_in_a_typed_error() {
    let k = Cluster::start().await;
    let deadline = Duration::from_millis(400);
    let c = k.client(quick(deadline.as_millis() as u64)).await;
    assert_eq!(c.next(1500).await, Ok(B + 1));
    k.freeze();
    let before = k.s1.calls();
    let start = Instant::now();
    let r = c.next(700).await;
    let took = start.elapsed();
    assert!(
        matches!(
            r,
            Err(Error::Unavailable {
                kind: ErrorKind::NotServed,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(r.unwrap_err().is_retryable());
    // It gave up at its deadline: not before, and not long after (the
    // bound is generous: a loaded machine may be slow to wake it).
    let late = Duration::from_secs(3);
    println!("gave up after {took:?} (deadline {deadline:?}, bound deadline + {late:?})");
    assert!(took >= deadline && took < deadline + late, "{took:?}");
    let reads = k.s1.calls() - before;
    let most = most_reads(took);
    println!("{reads} store reads (at most {most} with the backoff)");
    assert!(
        (2..=most).contains(&reads),
        "{reads} store reads in {took:?}"
    );
}

#[tokio::test]
async fn directory_flip_while_a_client_is_calling() {
    let k = Cluster::start().await;
    let c = k.client(quick(3000)).await;
    assert_eq!(c.next(1500).await, Ok(B + 1));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let caller = {
        let (c, stop, done) = (c.clone(), stop.clone(), done.clone());
        tokio::spawn(async move {
            let mut got = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                got.push(c.next(700).await);
                done.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            got
        })
    };
    // Each step waits for the caller to show it, not for a fixed time: a
    // few calls on set 0; the freeze seen (it asks set 1's store); a few
    // calls once installed; a few after the flip.
    let more_calls = |n: usize| {
        let (done, from) = (done.clone(), done.load(Ordering::SeqCst));
        until("the caller makes more calls", move || {
            done.load(Ordering::SeqCst) >= from + n
        })
    };
    more_calls(3).await;
    let reads = k.s1.calls();
    k.freeze();
    until("the caller sees the freeze", || k.s1.calls() > reads).await;
    k.install();
    more_calls(3).await;
    k.flip();
    more_calls(3).await;
    stop.store(true, Ordering::SeqCst);
    let got: Vec<u64> = caller
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
    assert!(got[0] < B, "set 0 served first: {got:?}");
    assert!(*got.last().unwrap() > B, "set 1 serves last: {got:?}");
    // After the flip, a fresh client goes straight to set 1.
    let fresh = k.client(quick(1000)).await;
    let before = k.a0.calls();
    assert!(fresh.next(700).await.unwrap() > B);
    assert_eq!(k.a0.calls(), before);
    assert_eq!(fresh.directory().map(|d| d.version), Some(3));
}

/// Adds set 2 (span 0..1000, its own AllocSvr and store) and moves uids
/// 500..1000 from set 0 to it, all the way: directory v4.
async fn move_to_new_set(k: &Cluster) -> (Fake, FakeStore) {
    let (a2, s2) = (Fake::start(C).await, FakeStore::start().await);
    let sets: [(u32, std::ops::Range<u64>, u64, &[&str]); 3] = [
        (0, 0..1000, 100, &[k.s0.addr.as_str()]),
        (1, 0..2000, 100, &[k.s1.addr.as_str()]),
        (2, 0..1000, 100, &[s2.addr.as_str()]),
    ];
    let d = directory(4, &sets, &[(0, 500, 0), (500, 1000, 2), (1000, 2000, 1)]);
    k.set0(k.table0(2, &[(0, 5)], vec![moved(5, 10, 2)], &d));
    let t2 = pb::RouteTable {
        placement: vec![absent(0, 5)],
        directory: Some(d),
        ..table(2, 0..1000, 100, 1, &[(5, 5, &a2.addr)])
    };
    a2.set_route(t2.clone());
    s2.set_route(t2);
    (a2, s2)
}

#[tokio::test]
async fn stale_directory_is_corrected_from_the_error() {
    let k = Cluster::start().await;
    let c = k.client(no_pause()).await;
    assert_eq!(c.next(700).await, Ok(1));
    let (_a2, s2) = move_to_new_set(&k).await;
    // The client's directory (v1) has never heard of set 2; set 0's
    // MOVED carries v4, which names set 2's store.
    let start = Instant::now();
    assert_eq!(c.next(700).await, Ok(C + 1));
    assert_no_pause("correcting the directory", start);
    assert_eq!(c.directory().map(|d| d.version), Some(4));
    assert_eq!(s2.calls(), 1);
}

#[tokio::test]
async fn stale_directory_is_fetched_when_the_error_names_a_newer_one() {
    let k = Cluster::start().await;
    let c = k.client(no_pause()).await;
    assert_eq!(c.next(700).await, Ok(1));
    let (_a2, _s2) = move_to_new_set(&k).await;
    // Set 0's AllocSvr sends tables without the directory, but names its
    // version: the client fetches it from set 0's store.
    k.a0.state.strip_directory.store(true, Ordering::SeqCst);
    let before = k.s0.calls();
    assert_eq!(c.next(700).await, Ok(C + 1));
    assert_eq!(c.directory().map(|d| d.version), Some(4));
    assert_eq!(k.s0.calls() - before, 1);
}

#[tokio::test]
async fn uid_in_no_directory_range_is_a_typed_error() {
    let k = Cluster::start().await;
    // 1500..2000 is in set 1's span but in no range.
    let d = k.directory(1, &[(0, 1000, 0), (1000, 1500, 1)]);
    k.set0(k.table0(1, &[(0, 10)], vec![], &d));
    k.set1(k.table1(1, &[(10, 10)], vec![absent(0, 10)], &d));
    let c = k.client(quick(1000)).await;
    assert_eq!(c.next(1200).await, Ok(B + 1));
    let before = [k.a0.calls(), k.a1.calls(), k.s0.calls()];
    let r = c.next(1700).await;
    assert_eq!(r, Err(Error::OutOfRange { uid: 1700 }));
    let e = r.unwrap_err();
    assert_eq!(e.to_string(), "no set serves uid 1700");
    assert!(!e.is_retryable());
    // The first such uid re-checked the directory at set 0's store; the
    // next ones, within the re-check interval, cost no call at all.
    assert_eq!(k.s0.calls(), before[2] + 1);
    assert_eq!(c.next(1800).await, Err(Error::OutOfRange { uid: 1800 }));
    assert_eq!(
        c.next_batch(&[5, 1900]).await,
        Err(Error::OutOfRange { uid: 1900 })
    );
    let after = [k.a0.calls(), k.a1.calls(), k.s0.calls()];
    assert_eq!(after, [before[0], before[1], before[2] + 1]);
    // Later the range is given to set 1: a re-check finds it.
    let d = k.directory(2, &[(0, 1000, 0), (1000, 2000, 1)]);
    k.set0(k.table0(1, &[(0, 10)], vec![], &d));
    tokio::time::sleep(Duration::from_millis(1050)).await;
    assert_eq!(c.next(1700).await, Ok(B + 1));
}

#[tokio::test]
async fn batch_is_split_across_sets() {
    let k = Cluster::start().await;
    let c = k.client(no_pause()).await;
    let seqs = c.next_batch(&[700, 1500, 701, 1501, 5]).await.unwrap();
    assert_eq!(seqs, vec![1, B + 1, 1, B + 1, 1]);
    assert_eq!(k.a0.batches(), vec![vec![700, 701, 5]]);
    assert_eq!(k.a1.batches(), vec![vec![1500, 1501]]);
    // Mid-move (frozen and installed, not flipped): 700 follows the move
    // to set 1 while 300 stays on set 0, in one call, without a pause
    // (set 0 refuses the part [300, 700, 700] for 700, not 300).
    k.freeze();
    k.install();
    let start = Instant::now();
    let seqs = c.next_batch(&[300, 700, 1500, 700]).await.unwrap();
    assert_no_pause("a batch split mid-move", start);
    assert_eq!(seqs, vec![1, B + 1, B + 2, B + 2]);
    assert_eq!(k.a0.batches()[1], [300, 700, 700]);
    assert_eq!(k.a0.batches().last(), Some(&vec![300]));
    assert_eq!(k.a1.batches().last(), Some(&vec![700, 700]));
    // Fresh routes: one request per set and owner straight away.
    c.refresh_routes().await;
    let (n0, n1) = (k.a0.batches().len(), k.a1.batches().len());
    let seqs = c.next_batch(&[301, 702, 1502]).await.unwrap();
    assert_eq!(seqs, vec![1, B + 1, B + 1]);
    assert_eq!(k.a0.batches()[n0..], [vec![301]]);
    assert_eq!(k.a1.batches()[n1..], [vec![702, 1502]]);
}
