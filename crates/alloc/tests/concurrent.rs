//! Stress test: several threads hand out numbers for a few hot uids while
//! the raiser runs for real and a chaos thread keeps moving sections to a
//! second AllocSvr (which serves them for a while) and back (new epoch, skip
//! ahead each time). Checks promise 1 as a linearizability check: every call
//! is stamped with a global logical clock when it starts and when it ends,
//! and a call that started after another ended must get a larger number.
//! Also: no number twice for a uid, nothing above the store's ceiling
//! (promise 2).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seqsvr_alloc::mem::MemCeilingStore;
use seqsvr_alloc::{AllocConfig, AllocError, Allocator, Raiser, RaiserConfig};
use seqsvr_core::rng::Rng;
use seqsvr_core::{SetSpec, Uid};

const THREADS: usize = 3;
const CALLS: usize = 40_000;

fn spec() -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: 500,
        uid_end: 516,
        section_size: 8,
        step: 50,
    }
}

/// The global logical clock: a call's start and end stamps.
static CLOCK: AtomicU64 = AtomicU64::new(0);

/// One successful call: uid, number, start and end stamps.
#[derive(Debug, Clone, Copy)]
struct Call {
    uid: Uid,
    value: u64,
    start: u64,
    end: u64,
}

/// `next(uid)` on `alloc`, stamped; `None` if refused.
fn stamped(alloc: &Allocator, uid: Uid) -> Result<Call, AllocError> {
    let start = CLOCK.fetch_add(1, Ordering::SeqCst);
    let value = alloc.next(uid)?;
    let end = CLOCK.fetch_add(1, Ordering::SeqCst);
    Ok(Call {
        uid,
        value,
        start,
        end,
    })
}

fn worker(alloc: Arc<Allocator>, seed: u64) -> Vec<Call> {
    let mut calls = Vec::with_capacity(CALLS);
    let mut rng = Rng::new(seed);
    while calls.len() < CALLS {
        let x = rng.next_u64();
        match stamped(&alloc, 500 + x % 16) {
            Ok(call) => calls.push(call),
            // Waiting for a raise or a re-take: try again.
            Err(AllocError::Exhausted { .. } | AllocError::NotOwner { .. }) => {
                std::thread::yield_now()
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    calls
}

/// Checks promise 1 on one uid's calls: a call that started after another
/// ended has a larger number. Also no duplicates.
fn check_linearizable(uid: Uid, calls: &mut [Call]) {
    let mut by_end: Vec<Call> = calls.to_vec();
    by_end.sort_unstable_by_key(|c| c.end);
    calls.sort_unstable_by_key(|c| c.start);
    let mut ended = by_end.iter().peekable();
    let mut max_ended = 0;
    for c in calls.iter() {
        while let Some(e) = ended.next_if(|e| e.end < c.start) {
            max_ended = max_ended.max(e.value);
        }
        assert!(
            c.value > max_ended,
            "uid {uid}: {c:?} got a number not above {max_ended}, handed out by a call that had already ended"
        );
    }
    let mut values: Vec<u64> = calls.iter().map(|c| c.value).collect();
    values.sort_unstable();
    let n = values.len();
    values.dedup();
    assert_eq!(values.len(), n, "uid {uid} got a number twice");
}

#[test]
fn no_duplicates_or_regressions_under_contention_and_retakes() {
    let store = Arc::new(MemCeilingStore::new(spec()));
    let cfg = AllocConfig {
        raise_ahead_fraction: 0.25,
        adaptive: None,
        ..AllocConfig::default()
    };
    let alloc = Arc::new(Allocator::new(spec(), &cfg).unwrap());
    let raiser = Arc::new(Raiser::new(
        alloc.clone(),
        store.clone(),
        RaiserConfig {
            backoff_min: Duration::from_micros(100),
            ..RaiserConfig::default()
        },
    ));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(raiser.take_over(0, 2)).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let bg = {
        let raiser = Raiser::new(alloc.clone(), store.clone(), RaiserConfig::default());
        rt.spawn(raiser.run(async {
            let _ = stop_rx.await;
        }))
    };

    // Chaos: a second AllocSvr takes a section over, serves every uid of it
    // up to its ceiling, gives it up; we take it back; and again.
    let done = Arc::new(AtomicBool::new(false));
    let chaos = {
        let (alloc, store, raiser, done) =
            (alloc.clone(), store.clone(), raiser.clone(), done.clone());
        let other = Raiser::new(
            Arc::new(Allocator::new(spec(), &cfg).unwrap()),
            store.clone(),
            RaiserConfig::default(),
        );
        let handle = rt.handle().clone();
        std::thread::spawn(move || {
            let mut calls = Vec::new();
            let mut s = 0;
            let mut moves = 0;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(2));
                alloc.drop_section(s); // our lease ran out
                handle.block_on(other.take_over(s, 1)).unwrap();
                for uid in spec().uids_of(s) {
                    while let Ok(call) = stamped(other.allocator(), uid) {
                        calls.push(call);
                    }
                }
                other.allocator().drop_section(s);
                handle.block_on(raiser.take_over(s, 1)).unwrap();
                s = 1 - s;
                moves += 1;
            }
            (calls, moves)
        })
    };

    let workers: Vec<_> = (0..THREADS as u64)
        .map(|t| {
            let alloc = alloc.clone();
            std::thread::spawn(move || worker(alloc, 0x9E37_79B9_7F4A_7C15 ^ (t + 1)))
        })
        .collect();
    let mut calls: Vec<Call> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    done.store(true, Ordering::Relaxed);
    let (other_calls, moves) = chaos.join().unwrap();
    stop_tx.send(()).unwrap();
    rt.block_on(bg).unwrap();
    assert!(moves > 0, "the chaos thread never ran");
    assert!(!other_calls.is_empty(), "the other AllocSvr never served");
    calls.extend(other_calls);

    let mut by_uid: HashMap<Uid, Vec<Call>> = HashMap::new();
    for c in calls {
        let ceiling = store.section(spec().section_of(c.uid).unwrap()).max_seq;
        assert!(c.value <= ceiling, "{c:?} above ceiling {ceiling}");
        by_uid.entry(c.uid).or_default().push(c);
    }
    for (uid, calls) in &mut by_uid {
        check_linearizable(*uid, calls);
    }
}
