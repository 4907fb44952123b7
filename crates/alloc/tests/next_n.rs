//! `Allocator::next_n`: reserving n numbers of one uid in one step
//! (`INCRBY`, a `Next` with a count). The caller owns `(v − n, v]`; those
//! ranges never overlap each other or a `next`'s number, across threads
//! and raises (promise 1), never pass the ceiling (promise 2), and a count
//! outside `1..=max_count` is refused with nothing handed out (promise 5).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use seqsvr_alloc::mem::MemCeilingStore;
use seqsvr_alloc::{AllocConfig, AllocError, Allocator, Raiser, RaiserConfig};
use seqsvr_core::rng::Rng;
use seqsvr_core::SetSpec;

fn spec() -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: 16,
        section_size: 8,
        step: 64,
    }
}

fn served() -> (
    Arc<Allocator>,
    Arc<MemCeilingStore>,
    tokio::runtime::Runtime,
) {
    let store = Arc::new(MemCeilingStore::new(spec()));
    let alloc = Arc::new(Allocator::new(spec(), &AllocConfig::default()).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let raiser = Raiser::new(alloc.clone(), store.clone(), RaiserConfig::default());
    rt.block_on(raiser.take_over(0, 2)).unwrap();
    rt.spawn(raiser.run(std::future::pending()));
    (alloc, store, rt)
}

#[test]
fn a_reservation_is_one_step_and_a_bad_count_changes_nothing() {
    let (alloc, store, rt) = served();
    assert_eq!(alloc.max_count(), 64, "capped by the step");
    let a = alloc.next(3).unwrap();
    let v = alloc.next_n(3, 10).unwrap();
    assert_eq!(v, a + 10);
    assert_eq!(alloc.next(3).unwrap(), v + 1);
    for bad in [0, 65] {
        assert!(matches!(
            alloc.next_n(3, bad),
            Err(AllocError::InvalidCount { count, max: 64 }) if count == bad
        ));
    }
    assert_eq!(
        alloc.current(3).unwrap(),
        v + 1,
        "a refused count changed the uid"
    );
    // Never above the ceiling: an exhausted reservation waits for the
    // raise it queued and then fits whole.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    for _ in 0..50 {
        let v = rt.block_on(alloc.next_n_waiting(3, 64, deadline)).unwrap();
        assert!(v <= store.section(0).max_seq);
    }
    assert!(matches!(
        alloc.next_n(99, 2),
        Err(AllocError::OutOfRange { uid: 99 })
    ));
}

/// One success: the numbers `(lo, hi]` and the logical times around it.
#[derive(Debug, Clone, Copy)]
struct Got {
    uid: u64,
    lo: u64,
    hi: u64,
    start: u64,
    end: u64,
}

static CLOCK: AtomicU64 = AtomicU64::new(0);

fn worker(alloc: Arc<Allocator>, seed: u64, ops: usize, max_n: u64) -> Vec<Got> {
    let mut rng = Rng::new(seed);
    let mut got = Vec::with_capacity(ops);
    while got.len() < ops {
        let x = rng.next_u64();
        let uid = x % 4 * 5; // uids 0, 5, 10, 15: both sections
        let n = if (x >> 40) & 1 == 0 {
            1
        } else {
            1 + (x >> 20) % max_n
        };
        let start = CLOCK.fetch_add(1, Ordering::SeqCst);
        let r = if n == 1 {
            alloc.next(uid)
        } else {
            alloc.next_n(uid, n)
        };
        let end = CLOCK.fetch_add(1, Ordering::SeqCst);
        match r {
            Ok(hi) => got.push(Got {
                uid,
                lo: hi - n,
                hi,
                start,
                end,
            }),
            Err(AllocError::Exhausted { .. }) => std::thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
    got
}

fn check(mut all: Vec<Got>) {
    all.sort_by_key(|g| (g.uid, g.lo));
    for w in all.windows(2) {
        if w[0].uid == w[1].uid {
            assert!(w[0].hi <= w[1].lo, "overlapping reservations: {w:?}");
        }
    }
    // Real-time order: whatever started after another ended lies above it.
    for a in &all {
        for b in all
            .iter()
            .filter(|b| b.uid == a.uid && b.start > a.end)
            .take(50)
        {
            assert!(
                b.lo >= a.hi,
                "{b:?} started after {a:?} ended but is not above it"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn next_n_never_overlaps_next_across_threads(seed in any::<u64>(), max_n in 2u64..=64) {
        let (alloc, _store, _rt) = served();
        let threads: Vec<_> = (0..3u64)
            .map(|t| {
                let alloc = alloc.clone();
                std::thread::spawn(move || worker(alloc, seed ^ ((t + 1) * 0x9E37_79B9), 3000, max_n))
            })
            .collect();
        let all: Vec<Got> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        check(all);
    }
}
