//! Unit tests of [`SectionSlot`]: the hot path, raises, the epoch guard,
//! and freeing a retired block under callers that still race it.

use super::*;

/// The step of the slots here.
const STEP: u64 = 10;

/// A slot with its allocator's parts: shape and memory count.
struct Slot {
    slot: SectionSlot,
    shape: Shape,
    mem: Arc<CellMemory>,
}

impl std::ops::Deref for Slot {
    type Target = SectionSlot;
    fn deref(&self) -> &SectionSlot {
        &self.slot
    }
}

impl Slot {
    /// A slot of `len` uids serving `grant`, with fixed steps of 10 (the
    /// raise margin a fraction of them).
    fn new(len: usize, raise_margin: u64, grant: &Grant) -> Self {
        let steps = StepPolicy::fixed(STEP, raise_margin as f64 / STEP as f64);
        let s = Slot {
            slot: SectionSlot::empty(),
            shape: Shape { len, steps },
            mem: Arc::new(CellMemory::new(len)),
        };
        assert!(s.install(grant));
        assert_eq!(s.state().unwrap().raise_margin, raise_margin);
        s
    }

    fn install(&self, grant: &Grant) -> bool {
        self.slot
            .install(grant, self.shape, &self.mem, Instant::now())
    }

    /// The raise wanted, with fixed steps of `step` (always [`STEP`]).
    fn raise_target(&self, step: u64) -> Option<(Epoch, u64)> {
        assert_eq!(step, STEP);
        self.slot.raise_target(&self.shape.steps, Instant::now())
    }

    fn apply_raise(&self, epoch: Epoch, new_max: u64) -> bool {
        self.slot
            .apply_raise(epoch, new_max, &self.shape.steps, Instant::now())
    }

    fn retire(&self, epoch: Option<Epoch>) -> bool {
        self.slot.retire(0, epoch, &self.mem)
    }

    fn claim_raise(&self) -> bool {
        self.slot.block(&pin()).unwrap().claim_raise()
    }

    /// As if the high-water mark's update were still racing.
    fn lag_high_water(&self) {
        self.slot
            .block(&pin())
            .unwrap()
            .high_water
            .0
            .store(0, Relaxed);
    }
}

/// One `take`, with whether it asked for a raise, as one value.
#[derive(Debug, PartialEq, Eq)]
enum Take {
    Got(u64),
    GotWantsRaise(u64),
    Exhausted { wants_raise: bool },
    NotServing,
}

fn take(s: &SectionSlot, idx: usize) -> Take {
    let mut asked = false;
    match s.take(idx, |_| asked = true) {
        Ok(v) if asked => Take::GotWantsRaise(v),
        Ok(v) => Take::Got(v),
        Err(Refused::Exhausted) => Take::Exhausted { wants_raise: asked },
        Err(Refused::NotServing) => Take::NotServing,
    }
}

fn grant(epoch: Epoch, prev: u64, max: u64) -> Grant {
    Grant {
        section: 0,
        epoch,
        prev_ceiling: prev,
        max_seq: max,
    }
}

#[test]
fn skips_ahead_then_counts_to_the_ceiling() {
    let s = Slot::new(3, 0, &grant(1, 100, 103));
    assert_eq!(
        s.current(0),
        Some(100),
        "skip ahead: cur starts at prev ceiling"
    );
    assert_eq!(take(&s, 0), Take::Got(101));
    assert_eq!(take(&s, 0), Take::Got(102));
    assert_eq!(take(&s, 1), Take::Got(101), "uids count independently");
    assert_eq!(
        take(&s, 0),
        Take::GotWantsRaise(103),
        "margin 0: raise at the ceiling"
    );
    assert_eq!(take(&s, 0), Take::Exhausted { wants_raise: false });
    assert_eq!(s.current(0), Some(103));
    assert_eq!(s.current(2), Some(100));
}

#[test]
fn raise_ahead_is_edge_triggered_and_targets_one_step_above_high_water() {
    let s = Slot::new(2, 2, &grant(7, 0, 10));
    let takes: Vec<_> = (0..9).map(|_| take(&s, 0)).collect();
    let wants: Vec<_> = takes
        .iter()
        .map(|t| matches!(t, Take::GotWantsRaise(_)))
        .collect();
    // ceiling 10, margin 2: the first number with 10 - v <= 2 is 8.
    assert_eq!(wants.iter().filter(|w| **w).count(), 1);
    assert_eq!(takes[7], Take::GotWantsRaise(8));
    assert_eq!(s.raise_target(10), Some((7, 19)));
    assert!(s.apply_raise(7, 19));
    assert_eq!(s.state().unwrap().ceiling, 19);
    assert!(!s.state().unwrap().raise_pending);
}

#[test]
fn unneeded_raise_clears_the_flag() {
    let s = Slot::new(1, 5, &grant(1, 0, 10));
    assert_eq!(s.raise_target(10), None, "nothing claimed");
    assert!(s.claim_raise());
    // high water 0 + step 10 is not above the ceiling 10.
    assert_eq!(s.raise_target(10), None);
    assert!(!s.state().unwrap().raise_pending);
}

#[test]
fn epoch_guard() {
    let s = Slot::new(1, 0, &grant(5, 0, 10));
    assert!(!s.apply_raise(4, 50), "older epoch");
    assert!(!s.apply_raise(6, 50), "newer epoch");
    assert!(!s.retire(Some(4)));
    assert!(s.retire(Some(5)));
    assert_eq!(take(&s, 0), Take::NotServing);
    assert_eq!(s.current(0), None);
    assert!(!s.apply_raise(5, 50), "a late reply must not resurrect");
    assert_eq!(take(&s, 0), Take::NotServing);
    assert!(!s.install(&grant(5, 10, 20)), "replayed grant");
    assert!(s.install(&grant(6, 10, 20)));
    assert_eq!(take(&s, 0), Take::Got(11));
}

#[test]
fn reinstall_never_lowers_a_cell() {
    let s = Slot::new(2, 0, &grant(1, 0, 100));
    for _ in 0..50 {
        let _ = take(&s, 0);
    }
    // A (buggy) grant below what was handed out must not move cells back.
    assert!(s.install(&grant(2, 10, 100)));
    assert_eq!(take(&s, 0), Take::Got(51));
    assert_eq!(take(&s, 1), Take::Got(11));
    assert_eq!(s.state().unwrap().high_water, 51);
}

#[test]
fn exhaustion_lifts_a_lagging_high_water_mark() {
    let s = Slot::new(1, 0, &grant(1, 0, 2));
    let _ = take(&s, 0);
    let _ = take(&s, 0);
    s.lag_high_water();
    assert_eq!(take(&s, 0), Take::Exhausted { wants_raise: false });
    assert_eq!(s.state().unwrap().high_water, 2);
}

/// Runs collections on this thread until `mem` counts `bytes`; false if
/// it never does (another test's thread may hold a pin for a while, so
/// this retries rather than expecting the first collection to free).
fn reclaimed_to(mem: &CellMemory, bytes: u64) -> bool {
    for _ in 0..10_000 {
        if mem.bytes() == bytes {
            return true;
        }
        pin().flush();
        std::thread::yield_now();
    }
    false
}

#[test]
fn a_retired_block_is_freed_and_a_retake_skips_ahead() {
    let s = Slot::new(1000, 0, &grant(1, 0, 100));
    assert_eq!(s.mem.bytes(), 8000);
    assert_eq!(take(&s, 7), Take::Got(1));
    assert!(s.retire(None));
    assert!(reclaimed_to(&s.mem, 0), "retired cells freed");
    assert_eq!(s.mem.blocks_freed(), 1);
    assert_eq!(s.epoch(), 1, "the epoch outlives the block");
    assert!(s.install(&grant(2, 100, 200)));
    assert_eq!(s.mem.bytes(), 8000);
    assert_eq!(s.current(7), Some(100), "a new block starts at the base");
    assert_eq!(take(&s, 7), Take::Got(101));
}

/// Callers racing retires, frees and take-overs (each at the previous
/// ceiling, as the store grants them) never use a freed block, and each
/// uid's numbers only go up and never repeat. The callers yield between
/// loading the block and using it, so a free that did not wait for them
/// would be caught by the freed mark.
#[test]
fn callers_racing_frees_never_read_freed_memory_nor_repeat() {
    const UIDS: usize = 4;
    const CALLS: usize = 20_000;
    let s = Arc::new(Slot::new(UIDS, 0, &grant(1, 0, 1_000)));
    let done = Arc::new(AtomicBool::new(false));
    let mover = {
        let (s, done) = (s.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut epoch, mut ceiling, mut moves) = (1, 1_000, 0u64);
            while !done.load(Relaxed) {
                assert!(s.retire(Some(epoch)));
                pin().flush();
                epoch += 1;
                assert!(s.install(&grant(epoch, ceiling, ceiling + 1_000)));
                ceiling += 1_000;
                moves += 1;
                std::thread::yield_now();
            }
            moves
        })
    };
    let callers: Vec<_> = (0..3)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                hooks::pause_here(true);
                let mut got: Vec<Vec<u64>> = vec![Vec::new(); UIDS];
                let mut n = 0;
                while n < CALLS {
                    let uid = (n + t) % UIDS;
                    if let Ok(v) = s.take(uid, |_| {}) {
                        got[uid].push(v);
                        n += 1;
                    }
                }
                got
            })
        })
        .collect();
    let got: Vec<Vec<Vec<u64>>> = callers.into_iter().map(|c| c.join().unwrap()).collect();
    done.store(true, Relaxed);
    assert!(mover.join().unwrap() > 0, "no section was ever moved");
    assert!(s.mem.blocks_freed() > 0, "no block was ever freed");
    for uid in 0..UIDS {
        let mut all = Vec::new();
        for caller in &got {
            let seen = &caller[uid];
            assert!(
                seen.windows(2).all(|w| w[0] < w[1]),
                "uid {uid}: one caller saw its numbers go down or repeat"
            );
            all.extend_from_slice(seen);
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "uid {uid} got a number twice");
    }
}
