//! Memory returned: a lost section's cells are freed (counted by the
//! allocator's `cell_bytes` stat), what promises need is kept, a take-over
//! after the free skips ahead, and callers racing losses, frees and
//! take-overs never see a uid's numbers repeat or go down
//! (`docs/architecture/alloc.md`, Memory and the hot path).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::executor::block_on;
use seqsvr_alloc::mem::MemCeilingStore;
use seqsvr_alloc::{AllocConfig, AllocError, Allocator, Raiser, RaiserConfig};
use seqsvr_core::SetSpec;

/// 4 sections of 1,000 uids from uid 0, step 100.
fn spec() -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: 4_000,
        section_size: 1_000,
        step: 100,
    }
}

/// An allocator, its raiser and an in-memory store.
fn setup() -> (Arc<MemCeilingStore>, Raiser<MemCeilingStore>) {
    let store = Arc::new(MemCeilingStore::new(spec()));
    let alloc = Arc::new(Allocator::new(spec(), &AllocConfig::default()).unwrap());
    let raiser = Raiser::new(alloc, store.clone(), RaiserConfig::default());
    (store, raiser)
}

/// Reclaims until the allocator holds `bytes` of cells; false if it never
/// does. Other tests' threads may be pinned for a moment, so a collection
/// may free nothing yet: retry (not a timed assertion: a bound on tries).
fn reclaimed_to(alloc: &Allocator, bytes: u64) -> bool {
    for _ in 0..100_000 {
        if alloc.stats().cell_bytes == bytes {
            return true;
        }
        alloc.reclaim();
        std::thread::yield_now();
    }
    false
}

#[test]
fn losing_sections_frees_their_cells_and_keeps_their_epochs() {
    let (_store, raiser) = setup();
    let a = raiser.allocator().clone();
    assert_eq!(
        a.stats().cell_bytes,
        0,
        "nothing allocated before a take-over"
    );
    block_on(raiser.take_over(0, 4)).unwrap();
    assert_eq!(
        a.stats().cell_bytes,
        4 * 8_000,
        "8 bytes a uid of each section"
    );
    for uid in (0..4_000).step_by(7) {
        a.next(uid).unwrap();
    }
    let epoch = a.section_state(1).unwrap().epoch;
    // Lost three ways: lease or listing, a stale epoch, a move to another set.
    assert!(a.drop_section(1));
    assert!(a.drop_section_if_epoch(2, a.section_state(2).unwrap().epoch));
    assert!(a.release_moved(3, 9));
    assert!(reclaimed_to(&a, 8_000), "{:?}", a.stats());
    let st = a.stats();
    assert_eq!((st.sections_dropped, st.sections_freed), (3, 3));
    // What promises need is kept: the newest epoch (take-overs), the floor
    // of a moved section (no grant from before the freeze).
    assert_eq!(a.known_epoch(1), epoch);
    assert_eq!(a.served_sections(), vec![0]);
    let before_freeze = seqsvr_alloc::Grant {
        section: 3,
        epoch: 8,
        prev_ceiling: 500,
        max_seq: 600,
    };
    assert_eq!(a.install(&[before_freeze]).unwrap(), 0);
    assert_eq!(
        a.stats().cell_bytes,
        8_000,
        "a refused grant allocates nothing"
    );
    assert_eq!(a.next(1_000), Err(AllocError::NotOwner { section: 1 }));
    assert_eq!(a.current(2_000), Err(AllocError::NotOwner { section: 2 }));
}

#[test]
fn a_take_over_after_a_free_skips_ahead() {
    let (store, raiser) = setup();
    let a = raiser.allocator().clone();
    block_on(raiser.take_over(0, 1)).unwrap();
    let mut last = 0;
    for _ in 0..30 {
        last = a.next(5).unwrap();
    }
    assert_eq!(last, 30);
    assert!(a.drop_section(0));
    assert!(reclaimed_to(&a, 0), "{:?}", a.stats());
    let ceiling = store.section(0).max_seq;
    assert!(ceiling >= last, "nothing above the ceiling was handed out");
    let grants = block_on(raiser.take_over(0, 1)).unwrap();
    assert_eq!(
        grants[0].prev_ceiling, ceiling,
        "the new epoch starts there"
    );
    assert_eq!(a.stats().cell_bytes, 8_000);
    assert_eq!(a.current(5), Ok(ceiling), "skip ahead, memory not trusted");
    assert_eq!(a.next(5), Ok(ceiling + 1));
    assert_eq!(a.next(6), Ok(ceiling + 1), "every uid starts at the base");
}

/// Callers on several threads race a mover that drops sections, frees
/// them and takes them over again (new epoch, skip ahead each time): every
/// caller sees each uid's numbers strictly rise, and no number is handed
/// out twice. (The unit tests of `section` also check that no caller uses
/// a block after its free ran.)
#[test]
fn callers_racing_losses_and_frees_never_repeat_or_go_back() {
    const CALLS: usize = 30_000;
    const UIDS: [u64; 6] = [0, 1, 999, 1_000, 1_001, 1_999];
    let (_store, raiser) = setup();
    let a = raiser.allocator().clone();
    block_on(raiser.take_over(0, 2)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let mover = {
        let done = done.clone();
        std::thread::spawn(move || {
            let a = raiser.allocator().clone();
            let mut moves = 0u64;
            while !done.load(Ordering::Relaxed) {
                let s = (moves % 2) as u32;
                a.drop_section(s);
                a.reclaim();
                block_on(raiser.take_over(s, 1)).unwrap();
                // Raises the callers asked for, so they do not only wait.
                block_on(raiser.run_once());
                moves += 1;
                std::thread::yield_now();
            }
            moves
        })
    };
    let callers: Vec<_> = (0..3)
        .map(|t| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut got: Vec<Vec<u64>> = vec![Vec::new(); UIDS.len()];
                let mut n = 0;
                while n < CALLS {
                    let i = (n + t) % UIDS.len();
                    match a.next(UIDS[i]) {
                        Ok(v) => {
                            got[i].push(v);
                            n += 1;
                        }
                        Err(AllocError::NotOwner { .. } | AllocError::Exhausted { .. }) => {
                            std::thread::yield_now()
                        }
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
                got
            })
        })
        .collect();
    let got: Vec<_> = callers.into_iter().map(|c| c.join().unwrap()).collect();
    done.store(true, Ordering::Relaxed);
    assert!(mover.join().unwrap() > 0, "the mover never ran");
    assert!(a.stats().sections_dropped > 0);
    for (i, uid) in UIDS.iter().enumerate() {
        let mut all = Vec::new();
        for caller in &got {
            assert!(
                caller[i].windows(2).all(|w| w[0] < w[1]),
                "uid {uid}: a caller saw its numbers repeat or go down"
            );
            all.extend_from_slice(&caller[i]);
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "uid {uid} got a number twice");
    }
}
