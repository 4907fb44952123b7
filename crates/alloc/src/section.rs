//! [`SectionSlot`]: one section of the set as this AllocSvr holds it.
//! While the section is served, a [`Block`]: every uid's `cur_seq` (8 bytes
//! a uid) under one ceiling. Once installed, for the allocator's life, the
//! newest epoch installed here and the notifier waiting callers sleep on.
//!
//! The hot path (`SectionSlot::take`) pins the thread (epoch-based
//! reclamation, below), loads the block pointer, reads the ceiling and the
//! block's base from one cache line and compare-and-swaps the uid's own cell.
//! Everything else (take-over, loss, raises) goes through a small
//! per-section mutex the hot path never touches.
//!
//! # Lazy cells
//! A block's cells are allocated zeroed, and a uid's `cur_seq` is
//! `max(cell, base)`, where `base` is the take-over's skip-ahead value. A
//! take-over therefore writes no cell: installing a section is O(1) whatever
//! its size, and the pages of uids never called are never written (nor
//! resident: cells come from fresh or dropped anonymous pages, see
//! `section/cells.rs`, which also puts them on huge pages).
//!
//! # Memory returned
//! Losing a section unlinks its block and stops it (ceiling 0, so a caller
//! still holding it hands out nothing more), then frees it once every call
//! that may have loaded it has finished. Calls are found by epoch-based
//! reclamation (crossbeam-epoch): each hot-path call pins its thread for the
//! few nanoseconds between loading the block pointer and its last touch of
//! the block; a block unlinked while a thread was pinned is freed only after
//! that thread unpinned. A guard is never held across an `.await` (callers
//! that wait for a raise sleep on the section's notifier, which is never
//! freed). What promises need after a loss stays in the slot: the newest
//! epoch installed (take-overs tell the store, and a replayed grant is
//! refused); the moved-floor and released-epoch rules live in the allocator
//! and the ownership code and read nothing from the block.
//!
//! A take-over after the block was freed allocates a new one and starts
//! every uid at the grant's previous ceiling. That is safe by promise 1
//! across owners (`docs/architecture/promises.md`): nothing above a ceiling
//! has ever been handed out (promise 2), this process only ever served under
//! ceilings the store acknowledged, and the store begins every epoch at its
//! current ceiling, which never decreases — so the grant's previous ceiling
//! is at least every number any owner, this one included, handed out for
//! any uid of the section.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

// crossbeam-epoch: the standard epoch-based reclamation crate (already in
// the workspace's lock file through the store's sled). It costs the hot path
// one uncontended atomic on a thread-local word per call; a reference count
// per section would put a contended one on a line shared by every core.
use crossbeam_epoch::{pin, Atomic, Guard, Owned, Shared};
use seqsvr_core::{Epoch, SectionId};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::ceiling::Grant;
use crate::steps::{Pace, StepPolicy};

mod cells;
mod floor;
use cells::{CellArena, Cells};

/// The ceiling of a block that was retired. A served ceiling is never 0: a
/// take-over raises it by a step of at least 1, so one load of the ceiling
/// answers both "still served" and "how far may we go".
pub(crate) const NOT_SERVING: u64 = 0;

/// Why a slot handed out nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The section is not served here (never taken over, or retired).
    NotServing,
    /// The uid is at the ceiling: wait for a raise.
    Exhausted,
}

/// A snapshot of a slot, for status pages, metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionState {
    /// The epoch we serve the section under.
    pub epoch: Epoch,
    /// The section's ceiling (`max_seq`) as known here.
    pub ceiling: u64,
    /// The highest number handed out since the take-over (the take-over's
    /// skip-ahead value if none yet).
    pub high_water: u64,
    /// Whether a raise is queued or in flight.
    pub raise_pending: bool,
    /// The step the next raise adds (`steps.rs`).
    pub step: u64,
    /// The headroom at which a raise is asked for.
    pub raise_margin: u64,
    /// When the ceiling last moved here: the last raise landed, or the
    /// take-over installed the section (monitor views).
    pub last_raise: Option<Instant>,
}

/// A `u64` on its own cache line, so that hot-path writes to it do not
/// slow down reads of the ceiling by other cores (false sharing).
#[repr(align(64))]
#[derive(Debug, Default)]
struct Padded(AtomicU64);

/// What a section's block looks like; fixed for the section's life.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Shape {
    /// Uids in the section (the last section of a set may be shorter).
    pub len: usize,
    /// How raises are sized and when they are asked for (`steps.rs`).
    pub steps: StepPolicy,
}

/// The cell memory of one allocator: counted when a block is allocated and
/// when it is freed. Shared with the deferred frees, which may run on any
/// thread after the allocator is gone.
#[derive(Debug, Default)]
pub(crate) struct CellMemory {
    /// Where cells come from, if not the heap (`section/cells.rs`).
    arena: Option<Arc<CellArena>>,
    /// Bytes of cells allocated and not yet freed (retired blocks included
    /// until their last caller has finished).
    bytes: AtomicU64,
    /// Blocks freed since the allocator was built.
    freed: AtomicU64,
    /// The sections whose block is linked (served now), changed by
    /// install and retire under the slot's lock, so the set follows each
    /// slot exactly: `Status`, metrics and renewals read it instead of
    /// walking every slot of the set.
    serving: Mutex<BTreeSet<SectionId>>,
}

impl CellMemory {
    /// Cell memory for sections of up to `section_len` uids, on huge pages
    /// where the system allows.
    pub(crate) fn new(section_len: usize) -> Self {
        Self {
            arena: CellArena::new(section_len),
            ..Self::default()
        }
    }

    fn allocated(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Relaxed);
    }

    fn released(&self, bytes: u64) {
        self.bytes.fetch_sub(bytes, Relaxed);
        self.freed.fetch_add(1, Relaxed);
    }

    /// The sections served now, in order.
    pub(crate) fn serving(&self) -> Vec<SectionId> {
        self.serving_set().iter().copied().collect()
    }

    /// How many sections are served now.
    pub(crate) fn serving_count(&self) -> usize {
        self.serving_set().len()
    }

    fn serving_set(&self) -> std::sync::MutexGuard<'_, BTreeSet<SectionId>> {
        self.serving.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes of cells allocated now.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// Blocks freed so far.
    pub(crate) fn blocks_freed(&self) -> u64 {
        self.freed.load(Relaxed)
    }
}

/// One take-over's memory of a section: every uid's cell, the ceiling and
/// the raise bookkeeping. Allocated by [`SectionSlot::install`], freed only
/// by the deferred destruction [`SectionSlot::retire`] schedules.
///
/// The first cache line holds what every call reads (ceiling, base, margin,
/// the cells' pointer); the high-water mark, written by calls, has its own.
#[repr(C, align(64))]
#[derive(Debug)]
pub(crate) struct Block {
    /// The ceiling (`max_seq`), or [`NOT_SERVING`] once retired. Only grows
    /// while served, and only to values the store has made durable
    /// (promise 2).
    ceiling: AtomicU64,
    /// The skip-ahead value (only grows): a uid's `cur_seq` is `max(cell, base)`.
    base: AtomicU64,
    /// Ask for a raise once `ceiling - high_water <= raise_margin` (always
    /// `< step`). Set at install and by each raise that lands, from the
    /// section's [`Pace`]; the hot path only reads it.
    raise_margin: AtomicU64,
    /// One cell per uid, indexed from the section's first uid: 0 until the
    /// uid is first served here, then the last number handed out for it.
    /// Never decreases (promise 1).
    cells: Cells,
    /// Set by the caller that queues a raise, cleared when the raise is done
    /// or found unneeded: the hot path queues at most one raise at a time.
    raise_pending: AtomicBool,
    /// Highest number handed out since the take-over: raises target
    /// `high_water + step`, so the ceiling is never more than one step above
    /// what was handed out (promise 4, bounded gap).
    high_water: Padded,
    /// Set instead of freeing in unit tests, so a caller that still reads a
    /// block after its destruction ran is caught.
    #[cfg(test)]
    freed: AtomicBool,
}

/// Asks the CPU to bring `cell`'s cache line in, without waiting for it and
/// without any effect a program can observe.
#[inline(always)]
fn prefetch_line(cell: &AtomicU64) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of the x86_64 baseline, so the instruction
        // exists; `prefetcht0` is a hint that never faults, reads nothing
        // into the program and writes nothing, and the address is a live
        // cell's.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(cell.as_ptr().cast::<i8>().cast_const()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // Elsewhere a plain load does it: nothing waits for its value, so
        // the core goes on while the line arrives.
        std::hint::black_box(cell.load(Relaxed));
    }
}

impl Block {
    /// A block serving `grant`: every uid starts at the grant's previous
    /// ceiling (the base), no cell written.
    fn new(shape: Shape, grant: &Grant, mem: &CellMemory, raise_margin: u64) -> Self {
        Self {
            ceiling: AtomicU64::new(grant.max_seq),
            base: AtomicU64::new(grant.prev_ceiling),
            raise_margin: AtomicU64::new(raise_margin),
            cells: Cells::zeroed(shape.len, mem.arena.as_ref()),
            raise_pending: AtomicBool::new(false),
            high_water: Padded(AtomicU64::new(grant.prev_ceiling)),
            #[cfg(test)]
            freed: AtomicBool::new(false),
        }
    }

    /// Bytes of cells.
    fn bytes(&self) -> u64 {
        (self.cells.len() * std::mem::size_of::<AtomicU64>()) as u64
    }

    /// Reserves `n` (≥ 1) numbers of the uid at `idx` with one
    /// compare-and-swap and returns the last: the caller owns `(v − n, v]`
    /// (`n = 1`: the next number). Refused when the ceiling leaves less
    /// than `n` (the raise it queues targets a step above the highest
    /// number handed out, which leaves room for `n` as long as `n` is at
    /// most a step: the allocator caps it so). Calls `queue_raise` (at most
    /// once per raise, on the caller that first finds the section low) when
    /// a raise must be queued.
    ///
    /// Lock-free: one compare-and-swap on the uid's own cell. The ceiling is
    /// re-read on every attempt; it only decreases when the block retires, so
    /// a number that passed the check was under a durable ceiling.
    ///
    /// Returns a small `Result` and takes the raise as a closure (instead of
    /// returning a richer enum) so the common path compiles to straight-line
    /// code in registers: every instruction before the next call's CAS
    /// counts. Inlined with a constant `n = 1`, the room check folds to
    /// `cur >= ceiling`. `queue_raise` is told whether the raise is early
    /// (the caller was served and found the headroom low) or not (the
    /// caller found the section exhausted).
    #[inline(always)]
    fn take_n(&self, idx: usize, n: u64, queue_raise: impl FnOnce(bool)) -> Result<u64, Refused> {
        let cell = &self.cells[idx];
        let mut raw = cell.load(Relaxed);
        let (v, ceiling) = loop {
            // Acquire pairs with the Release stores of the ceiling in
            // `reinstall` (and of the block pointer in `install`): a caller
            // that sees a take-over's ceiling also sees its base, so it never
            // serves a uid from below the skip ahead (promise 1).
            let ceiling = self.ceiling.load(Acquire);
            let cur = raw.max(self.base.load(Relaxed));
            if cur >= ceiling || ceiling - cur < n {
                return Err(self.refuse(cur, ceiling, queue_raise));
            }
            // The cell alone orders the numbers of one uid: every success
            // writes more than the value it replaced (`cur + n > raw`), so
            // the ranges of one uid rise in the cell's modification order
            // and never overlap, whatever base a racing caller read.
            // Relaxed is enough for the CAS.
            match cell.compare_exchange_weak(raw, cur + n, Relaxed, Relaxed) {
                Ok(_) => break (cur + n, ceiling),
                Err(seen) => raw = seen,
            }
        };
        // Load first: the RMW is paid only when the mark actually moves.
        if v > self.high_water.0.load(Relaxed) {
            self.high_water.0.fetch_max(v, Relaxed);
        }
        if ceiling - v <= self.raise_margin.load(Relaxed) {
            self.low(|| queue_raise(true));
        }
        Ok(v)
    }

    /// [`take_n`](Self::take_n) for a counter held outside the cells (a
    /// name's, `names.rs`), whose last number here is `held` and whose
    /// caller serialises its calls: returns the number handed out and the
    /// base it was served above.
    fn take_held(
        &self,
        held: u64,
        n: u64,
        queue_raise: impl FnOnce(bool),
    ) -> Result<(u64, u64), Refused> {
        // Acquire, as in `take_n`: a caller that sees a take-over's ceiling
        // also sees its base (promise 1).
        let ceiling = self.ceiling.load(Acquire);
        let base = self.base.load(Relaxed);
        let cur = held.max(base);
        if cur >= ceiling || ceiling - cur < n {
            return Err(self.refuse(cur, ceiling, queue_raise));
        }
        let v = cur + n;
        self.high_water.0.fetch_max(v, Relaxed);
        if ceiling - v <= self.raise_margin.load(Relaxed) {
            self.low(|| queue_raise(true));
        }
        Ok((v, base))
    }

    /// Starts loading the cell at `idx` into the cache, so that a later
    /// [`take_n`](Self::take_n) finds it there. Changes nothing; an index past
    /// the cells is ignored (`take` reports it).
    #[inline(always)]
    fn prefetch(&self, idx: usize) {
        if let Some(cell) = self.cells.get(idx) {
            prefetch_line(cell);
        }
    }

    /// The section is within the raise margin: queue a raise unless one is.
    #[cold]
    fn low(&self, queue_raise: impl FnOnce()) {
        if self.claim_raise() {
            queue_raise();
        }
    }

    /// The cold half of [`take_n`](Self::take_n): the uid is at `ceiling`.
    #[cold]
    fn refuse(&self, cur: u64, ceiling: u64, queue_raise: impl FnOnce(bool)) -> Refused {
        if ceiling == NOT_SERVING {
            return Refused::NotServing;
        }
        // The base starts strictly below the ceiling, so `cur` reached it by
        // being handed out: the high-water mark may lag (its update races),
        // and the raise target must be above the ceiling.
        self.high_water.0.fetch_max(cur, Relaxed);
        self.low(|| queue_raise(false));
        Refused::Exhausted
    }

    /// Claims the right to queue a raise; true for exactly one caller until
    /// the raise is done.
    #[inline]
    fn claim_raise(&self) -> bool {
        !self.raise_pending.load(Relaxed) && !self.raise_pending.swap(true, AcqRel)
    }

    /// The uid's `cur_seq`, or `None` once retired.
    fn current(&self, idx: usize) -> Option<u64> {
        // Ceiling first: its Acquire pairs with the take-over's Release, so
        // the base read after it is never from before the skip ahead.
        if self.ceiling.load(Acquire) == NOT_SERVING {
            return None;
        }
        Some(self.cells[idx].load(Relaxed).max(self.base.load(Relaxed)))
    }

    /// [`current`](Self::current) of a counter held outside the cells.
    fn current_held(&self, held: u64) -> Option<u64> {
        if self.ceiling.load(Acquire) == NOT_SERVING {
            return None;
        }
        Some(held.max(self.base.load(Relaxed)))
    }

    /// Serves a newer grant in this block, still served: O(1), the base
    /// moves up and no cell is written.
    fn reinstall(&self, grant: &Grant, raise_margin: u64) {
        // Stop serving while the base and the bookkeeping change, so no
        // caller pairs the new ceiling with the old base (promise 1).
        self.ceiling.store(NOT_SERVING, Release);
        // fetch_max: a uid's `cur_seq` never goes down, whatever the grant.
        self.base.fetch_max(grant.prev_ceiling, Relaxed);
        self.high_water.0.store(grant.prev_ceiling, Relaxed);
        self.raise_pending.store(false, Relaxed);
        self.raise_margin.store(raise_margin, Relaxed);
        self.ceiling.store(grant.max_seq, Release);
    }
}

/// Frees a block that was unlinked from its slot and that no caller can
/// reach any more.
///
/// # Safety
/// `block` was unlinked by [`SectionSlot::retire`], every thread pinned
/// when it was unlinked has since unpinned, and this is the only free of it.
unsafe fn free(block: Shared<'_, Block>) {
    #[cfg(not(test))]
    // SAFETY: the caller's contract: nobody else holds or frees it.
    drop(unsafe { block.into_owned() });
    #[cfg(test)]
    // SAFETY: unit tests keep the block (leaked) to catch late readers.
    unsafe { block.deref() }.freed.store(true, SeqCst);
}

/// Set at a section's first take-over and kept for the allocator's life.
#[derive(Debug)]
struct Control {
    /// The epoch of the latest grant installed, served now or not, so a
    /// replayed or delayed grant with an older epoch is refused. Its lock
    /// guards every change of the block or its ceiling.
    epoch: Mutex<Epoch>,
    /// Wakes callers waiting on an exhausted section when its ceiling moves
    /// or its ownership changes. Never freed, so a waiter may sleep on it
    /// without holding a guard across the `.await`.
    changed: Notify,
    /// The section's step and rate (`steps.rs`). Locked only under the
    /// epoch's lock, off the hot path.
    pace: Mutex<Pace>,
}

impl Control {
    fn lock(&self) -> MutexGuard<'_, Epoch> {
        // One plain value; a panic elsewhere cannot leave it torn, so a
        // poisoned lock is still sound to use.
        self.epoch.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pace(&self) -> MutexGuard<'_, Pace> {
        self.pace.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One section of the set, served here or not.
///
/// Small on purpose (three words, none of them the cells): the allocator's
/// section table holds slots inline, one per section of the set.
#[derive(Debug)]
pub struct SectionSlot {
    /// The block served now; null when the section is not served here.
    /// Changed only under the control's lock. A block unlinked from here is
    /// freed only after every thread pinned at the time has unpinned.
    block: Atomic<Block>,
    /// Epoch and notifier, from the first take-over on.
    ctl: OnceLock<Box<Control>>,
}

impl SectionSlot {
    /// A slot never taken over.
    pub(crate) fn empty() -> Self {
        Self {
            block: Atomic::null(),
            ctl: OnceLock::new(),
        }
    }

    /// The block served now.
    #[inline(always)]
    fn block<'g>(&self, guard: &'g Guard) -> Option<&'g Block> {
        // SAFETY: the pointer is null or a block published by `install` that
        // is not freed while `guard` pins this thread: `retire` unlinks a
        // block before it defers the free, and the free waits for every
        // thread pinned at that time. Acquire pairs with `install`'s Release,
        // so the block's header and zeroed cells are visible.
        unsafe { self.block.load(Acquire, guard).as_ref() }
    }

    /// Hands out the next number of the uid at `idx`, or says why not (see
    /// [`Block::take_n`]). The thread is pinned from the block's load to its
    /// last use, nothing longer: no `.await` in between.
    #[cfg(test)]
    pub(crate) fn take(&self, idx: usize, queue_raise: impl FnOnce(bool)) -> Result<u64, Refused> {
        self.take_n_pinned(idx, 1, &pin(), queue_raise)
    }

    /// Starts loading the uid's cell at `idx` into the cache (see
    /// [`Allocator::next_batch`](crate::Allocator::next_batch)); nothing if
    /// the section is not served here.
    #[inline(always)]
    pub(crate) fn prefetch_pinned(&self, idx: usize, guard: &Guard) {
        if let Some(block) = self.block(guard) {
            block.prefetch(idx);
        }
    }

    /// [`Block::take_n`] under a guard the caller holds (a batch pins once
    /// for all its uids): `n` numbers reserved in one step, one for `next`.
    #[inline(always)]
    pub(crate) fn take_n_pinned(
        &self,
        idx: usize,
        n: u64,
        guard: &Guard,
        queue_raise: impl FnOnce(bool),
    ) -> Result<u64, Refused> {
        let Some(block) = self.block(guard) else {
            return Err(Refused::NotServing);
        };
        #[cfg(test)]
        hooks::pause();
        let taken = block.take_n(idx, n, queue_raise);
        #[cfg(test)]
        hooks::check_live(block);
        taken
    }

    /// [`Block::take_held`] under a guard the caller holds: `n` numbers of
    /// a counter whose last number here is `held` (a name's).
    pub(crate) fn take_held_pinned(
        &self,
        held: u64,
        n: u64,
        guard: &Guard,
        queue_raise: impl FnOnce(bool),
    ) -> Result<(u64, u64), Refused> {
        let Some(block) = self.block(guard) else {
            return Err(Refused::NotServing);
        };
        block.take_held(held, n, queue_raise)
    }

    /// The `cur_seq` of a counter whose last number here is `held`, or
    /// `None` if the section is not served here.
    pub(crate) fn current_held(&self, held: u64) -> Option<u64> {
        let guard = pin();
        self.block(&guard)?.current_held(held)
    }

    /// The uid's `cur_seq`, or `None` if the section is not served here.
    ///
    /// This is the last number handed out for the uid, except before its
    /// first since the take-over, when it is the skip-ahead value (the
    /// previous ceiling), which this owner never handed out. Either way it is
    /// ≥ every number ever handed out for the uid, and the next one will be
    /// above it.
    pub(crate) fn current(&self, idx: usize) -> Option<u64> {
        let guard = pin();
        self.block(&guard)?.current(idx)
    }

    /// Serves `grant`. False if the grant is not newer than the last one
    /// installed (a replay must not skip anything back). A section still
    /// served moves its base up in place; otherwise a new zeroed block is
    /// allocated: O(1) writes either way. `now` starts the section's rate
    /// measurement (its step carries over from an earlier take-over here).
    pub(crate) fn install(
        &self,
        grant: &Grant,
        shape: Shape,
        mem: &Arc<CellMemory>,
        now: Instant,
    ) -> bool {
        let mut fresh = false;
        let ctl = self.ctl.get_or_init(|| {
            fresh = true;
            Box::new(Control {
                epoch: Mutex::new(grant.epoch),
                changed: Notify::new(),
                pace: Mutex::new(Pace::new(&shape.steps)),
            })
        });
        let mut epoch = ctl.lock();
        if !fresh && grant.epoch <= *epoch {
            return false;
        }
        *epoch = grant.epoch;
        let margin = {
            let mut pace = ctl.pace();
            pace.restart(now, grant.prev_ceiling);
            pace.margin(&shape.steps)
        };
        let guard = pin();
        match self.block(&guard) {
            Some(block) => block.reinstall(grant, margin),
            None => {
                // Every uid starts at the grant's previous ceiling, whatever
                // this process handed out before: safe by promise 1 across
                // owners (see the module docs).
                let block = Block::new(shape, grant, mem, margin);
                mem.allocated(block.bytes());
                self.block.store(Owned::new(block), Release);
                mem.serving_set().insert(grant.section);
            }
        }
        drop(epoch);
        ctl.changed.notify_waiters();
        true
    }

    /// Stops serving, if `epoch` is `None` or the epoch we serve under, and
    /// frees the block once its last caller has finished. Returns whether
    /// the slot was serving and now is not.
    pub(crate) fn retire(
        &self,
        section: SectionId,
        epoch: Option<Epoch>,
        mem: &Arc<CellMemory>,
    ) -> bool {
        let Some(ctl) = self.ctl.get() else {
            return false;
        };
        let current = ctl.lock();
        if epoch.is_some_and(|e| e != *current) {
            return false;
        }
        let guard = pin();
        let old = self.block.load(Acquire, &guard);
        // SAFETY: as in `block` (and under the lock nobody else unlinks it).
        let Some(block) = (unsafe { old.as_ref() }) else {
            return false;
        };
        // A caller that loaded the block already hands out nothing more: it
        // re-reads the ceiling before every compare-and-swap.
        block.ceiling.store(NOT_SERVING, Release);
        self.block.store(Shared::null(), Release);
        mem.serving_set().remove(&section);
        let (mem, bytes) = (mem.clone(), block.bytes());
        // SAFETY: `old` is unlinked, so no caller that pins from now on can
        // reach it; the closure runs once every thread pinned now (any caller
        // that may have loaded it) has unpinned; and only this retire, under
        // the lock, unlinked it.
        unsafe {
            guard.defer_unchecked(move || {
                free(old);
                mem.released(bytes);
            });
        }
        drop(current);
        // Hand the free to the global queue, so the next collection on any
        // thread runs it, and try one now.
        guard.flush();
        ctl.changed.notify_waiters();
        true
    }

    /// The epoch of the latest grant installed, serving or not: the newest
    /// epoch this process ever installed for the section (0: never).
    pub(crate) fn epoch(&self) -> Epoch {
        self.ctl.get().map_or(0, |c| *c.lock())
    }

    /// Whether the slot is currently served.
    pub(crate) fn is_serving(&self) -> bool {
        let guard = pin();
        !self.block.load(Acquire, &guard).is_null()
    }

    /// The raise this slot wants, if it still wants one: the target is one
    /// step above the high-water mark, the step as the section's pace plans
    /// it at `now`, never more than the set's step (promise 4). Clears the
    /// pending flag when no raise is needed any more.
    pub(crate) fn raise_target(&self, steps: &StepPolicy, now: Instant) -> Option<(Epoch, u64)> {
        let ctl = self.ctl.get()?;
        let epoch = ctl.lock();
        let guard = pin();
        // Not served: a stale queue entry (the block it was for is gone).
        let block = self.block(&guard)?;
        if !block.raise_pending.load(Acquire) {
            return None; // a stale queue entry: nothing was claimed
        }
        let ceiling = block.ceiling.load(Acquire);
        let mut pace = ctl.pace();
        let step = pace.plan(steps, now);
        let to = block.high_water.0.load(Relaxed).saturating_add(step);
        if to <= ceiling {
            pace.unplanned();
            block.raise_pending.store(false, Release);
            return None;
        }
        Some((*epoch, to))
    }

    /// Applies a ceiling the store made durable under `epoch`. Ignored (false)
    /// if we no longer serve under that epoch: a late reply must never bring
    /// a lost section back (promise 3). The section's pace measures the
    /// raise, landed at `now`, and sets the headroom for the next one.
    pub(crate) fn apply_raise(
        &self,
        epoch: Epoch,
        new_max: u64,
        steps: &StepPolicy,
        now: Instant,
    ) -> bool {
        let Some(ctl) = self.ctl.get() else {
            return false;
        };
        let current = ctl.lock();
        let guard = pin();
        let Some(block) = self.block(&guard).filter(|_| *current == epoch) else {
            return false;
        };
        let high_water = block.high_water.0.load(Relaxed);
        let margin = ctl.pace().landed(steps, now, high_water);
        block.raise_margin.store(margin, Relaxed);
        block.ceiling.fetch_max(new_max, Release);
        block.raise_pending.store(false, Release);
        drop(current);
        ctl.changed.notify_waiters();
        true
    }

    /// After a raise landed: whether callers already used so much of it that
    /// another raise is due (true: the caller must queue it).
    pub(crate) fn claim_if_low(&self) -> bool {
        let guard = pin();
        self.block(&guard).is_some_and(|b| {
            let ceiling = b.ceiling.load(Acquire);
            ceiling != NOT_SERVING
                && ceiling.saturating_sub(b.high_water.0.load(Relaxed))
                    <= b.raise_margin.load(Relaxed)
                && b.claim_raise()
        })
    }

    /// A snapshot, or `None` if not serving.
    pub(crate) fn state(&self) -> Option<SectionState> {
        let ctl = self.ctl.get()?;
        let epoch = ctl.lock();
        let guard = pin();
        let b = self.block(&guard)?;
        let pace = ctl.pace();
        Some(SectionState {
            epoch: *epoch,
            ceiling: b.ceiling.load(Acquire),
            high_water: b.high_water.0.load(Relaxed),
            raise_pending: b.raise_pending.load(Relaxed),
            step: pace.step(),
            raise_margin: b.raise_margin.load(Relaxed),
            last_raise: pace.moved_at(),
        })
    }

    /// The notifier fired whenever the ceiling or ownership changes (`None`
    /// before the first take-over). It lives as long as the slot.
    pub(crate) fn changed(&self) -> Option<&Notify> {
        self.ctl.get().map(|c| &c.changed)
    }
}

impl Drop for SectionSlot {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no caller holds the slot, hence none its block,
        // and a retired block is no longer here (its free is deferred).
        unsafe {
            let block = self.block.load(Relaxed, crossbeam_epoch::unprotected());
            if !block.is_null() {
                drop(block.into_owned());
            }
        }
    }
}

/// Test-only hooks on the hot path: widen the window between loading a
/// block and using it, and catch a use after the block's free ran.
#[cfg(test)]
pub(crate) mod hooks {
    use std::cell::Cell;
    use std::sync::atomic::Ordering::SeqCst;

    thread_local! {
        /// Whether this thread yields between loading a block and using it.
        static PAUSE: Cell<bool> = const { Cell::new(false) };
    }

    /// Makes this thread yield inside every `take` (stress tests).
    pub(crate) fn pause_here(on: bool) {
        PAUSE.with(|p| p.set(on));
    }

    pub(super) fn pause() {
        if PAUSE.with(Cell::get) {
            std::thread::yield_now();
        }
    }

    pub(super) fn check_live(block: &super::Block) {
        assert!(
            !block.freed.load(SeqCst),
            "a caller used a block after its free ran"
        );
    }
}

#[cfg(test)]
mod tests;
