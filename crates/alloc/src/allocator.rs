//! [`Allocator`]: one set's sections as served by this AllocSvr, and the
//! calls the gRPC layer makes: `next`, `next_batch`, `current`.
//!
//! The section table is a boxed slice indexed by section id, one
//! [`SectionSlot`] per section of the set, so finding a uid's slot is index
//! arithmetic; its cells are behind one pointer the hot path loads with the
//! thread pinned (epoch-based reclamation): no lock shared by all sections,
//! no reference count, no allocation. A section lost frees its cells once
//! the calls that may still read them have finished
//! (`docs/architecture/alloc.md`, Memory and the hot path).

use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crossbeam_epoch::Guard;
use seqsvr_core::section::Runs;
use seqsvr_core::{Epoch, Incarnation, SectionId, SetSpec, Uid};
use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::ceiling::Grant;
use crate::error::{AllocError, Result};
use crate::names::{NameStats, NameTable};
use crate::section::{CellMemory, Refused, SectionSlot, SectionState, Shape};
use crate::steps::{AdaptiveSteps, StepPolicy};

/// Stand-in incarnations for allocators built by [`Allocator::new`]: unique
/// within this process, so two allocators sharing one in-memory store are
/// told apart as two processes would be.
static STAND_IN: AtomicU64 = AtomicU64::new(1);

mod named;
pub use named::NameView;
mod reserve;
pub use reserve::MAX_COUNT;

/// Tuning of the allocator.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocConfig {
    /// Raise a section's ceiling ahead of need once less than this fraction
    /// of a step is left between the highest number handed out and the
    /// ceiling (Leaf-style double buffering, `docs/architecture/alloc.md`). `0.0` raises only
    /// when exhausted; values are clamped to keep the margin below one step.
    /// With adaptive steps, the least headroom kept.
    pub raise_ahead_fraction: f64,
    /// Adaptive steps (`docs/architecture/alloc.md`, Adaptive steps):
    /// `None` raises every section by the set's step.
    pub adaptive: Option<AdaptiveSteps>,
    /// Most names held in memory (`docs/counters.md`, Memory): a name
    /// forgotten to stay within it is recreated above everything it had.
    pub max_names: usize,
}

impl Default for AllocConfig {
    fn default() -> Self {
        Self {
            raise_ahead_fraction: 0.25,
            adaptive: None,
            max_names: crate::names::DEFAULT_MAX_NAMES,
        }
    }
}

/// A raise the background raiser should ask the store for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaiseRequest {
    /// The section to raise.
    pub section: SectionId,
    /// The epoch we serve it under (the store rejects any other).
    pub epoch: Epoch,
    /// The new ceiling: one step above the highest number handed out.
    pub to: u64,
}

/// Counters for metrics, bumped only off the hot path.
#[derive(Debug, Default)]
struct Counters {
    /// Calls refused because their section was at its ceiling.
    exhausted: AtomicU64,
    /// Raises queued for the raiser.
    raises_queued: AtomicU64,
    /// Raises applied.
    raises_applied: AtomicU64,
    /// Sections that stopped being served.
    sections_dropped: AtomicU64,
    /// Raises queued by a caller that was served and found the headroom
    /// low (the others were queued by a caller that found none left).
    raises_early: AtomicU64,
    /// Callers that found their section exhausted and waited for its raise.
    raise_waits: AtomicU64,
    /// Of those, the ones whose wait ran out (answered a retryable error).
    raise_wait_timeouts: AtomicU64,
}

/// A snapshot of an allocator's counters (monotonic since it was built).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Calls refused because their section was at its ceiling (each one a
    /// caller that had to wait for the store: should stay near zero).
    pub exhausted: u64,
    /// Raises queued for the raiser.
    pub raises_queued: u64,
    /// Raises applied.
    pub raises_applied: u64,
    /// Sections that stopped being served (lost, moved, stale epoch).
    pub sections_dropped: u64,
    /// Bytes of `cur_seq` cells allocated now: 8 a uid of every section
    /// served, and of sections lost whose last callers have not finished
    /// yet. Untouched pages of them may not be resident.
    pub cell_bytes: u64,
    /// Sections whose cells were freed after they were lost.
    pub sections_freed: u64,
    /// Raises queued while the section still had headroom (the rest were
    /// queued by a caller that found it exhausted).
    pub raises_early: u64,
    /// Callers that found their section exhausted and waited for its raise.
    pub raise_waits: u64,
    /// Waits that ran out before the raise landed (answered `Exhausted`,
    /// retryable).
    pub raise_wait_timeouts: u64,
    /// The named counters held (`docs/counters.md`).
    pub names: NameStats,
}

/// The sequence numbers of one set, as served by this AllocSvr.
#[derive(Debug)]
pub struct Allocator {
    /// The set served (validated).
    spec: SetSpec,
    /// The process this memory belongs to: take-overs and raises name it,
    /// and the epochs installed here are "known" only to it.
    incarnation: Incarnation,
    /// `spec.uid_end - spec.uid_begin`: the hot path's range check.
    uid_count: u64,
    /// How raises are sized and when sections ask for them.
    steps: StepPolicy,
    /// One entry per section of the set (24 bytes, served or not): the
    /// cells while served, the newest epoch installed once taken over.
    slots: Box<[SectionSlot]>,
    /// Cell memory allocated and freed (shared with deferred frees).
    mem: Arc<CellMemory>,
    /// Per section moved to another set: the epoch its store froze it at.
    /// A grant below it was made before the freeze (a take-over whose reply
    /// was still on its way) and is never installed. Checked and changed
    /// under this lock, with the install or the retire it guards.
    moved_floor: Mutex<std::collections::HashMap<SectionId, Epoch>>,
    /// Sections whose raise was claimed and not yet taken by the raiser.
    raise_queue: Mutex<Vec<SectionId>>,
    /// Wakes the raiser when `raise_queue` gains an entry.
    raise_signal: Notify,
    /// The named counters held, one per name (`names.rs`).
    names: NameTable,
    /// Metrics.
    counters: Counters,
}

impl Allocator {
    /// An allocator for `spec` that serves nothing until
    /// [`install`](Self::install), under a stand-in incarnation unique in
    /// this process (tests, benchmarks, simulations).
    pub fn new(spec: SetSpec, config: &AllocConfig) -> Result<Self> {
        let stand_in = STAND_IN.fetch_add(1, Relaxed);
        Self::with_incarnation(spec, config, stand_in)
    }

    /// An allocator for `spec` belonging to the process `incarnation`
    /// (non-zero), which serves nothing until [`install`](Self::install).
    pub fn with_incarnation(
        spec: SetSpec,
        config: &AllocConfig,
        incarnation: Incarnation,
    ) -> Result<Self> {
        spec.validate()?;
        let steps = StepPolicy::new(spec.step, config.raise_ahead_fraction, config.adaptive)
            .map_err(|reason| AllocError::InvalidSteps { reason })?;
        Ok(Self {
            incarnation,
            uid_count: spec.uid_end - spec.uid_begin,
            steps,
            slots: (0..spec.section_count())
                .map(|_| SectionSlot::empty())
                .collect(),
            mem: Arc::new(CellMemory::new(spec.section_size as usize)),
            moved_floor: Mutex::new(Default::default()),
            raise_queue: Mutex::new(Vec::new()),
            raise_signal: Notify::new(),
            names: NameTable::new(&spec, config.max_names),
            counters: Counters::default(),
            spec,
        })
    }

    /// The set served.
    pub fn spec(&self) -> &SetSpec {
        &self.spec
    }

    /// How raises are sized and timed.
    pub fn steps(&self) -> &StepPolicy {
        &self.steps
    }

    /// The process this memory belongs to.
    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    /// The newest epoch this allocator ever installed for `section`, served
    /// now or not (0: never, or not in the set). A take-over tells the
    /// store this, so a grant prepared for us at a newer epoch comes back
    /// unchanged instead of costing another step (promise 4), and one we
    /// already served is never handed back to start over (promise 1).
    pub fn known_epoch(&self, section: SectionId) -> Epoch {
        self.slot(section).map_or(0, SectionSlot::epoch)
    }

    /// Whether `section` is served now.
    pub fn is_serving(&self, section: SectionId) -> bool {
        self.slot(section).is_some_and(SectionSlot::is_serving)
    }

    /// Finds the slot and cell index of `uid` (whether the section is
    /// served is answered by the slot).
    #[inline(always)]
    fn locate(&self, uid: Uid) -> Result<(&SectionSlot, SectionId, usize)> {
        let off = uid.wrapping_sub(self.spec.uid_begin);
        if off >= self.uid_count {
            return Err(AllocError::OutOfRange { uid });
        }
        let section = (off / self.spec.section_size) as SectionId;
        let idx = (off - section as u64 * self.spec.section_size) as usize;
        Ok((&self.slots[section as usize], section, idx))
    }

    /// Hands out the next sequence number of `uid`: strictly above every
    /// number handed out for it before (promise 1), never above a durable
    /// ceiling (promise 2).
    ///
    /// `Exhausted` is retryable (see [`next_waiting`](Self::next_waiting)).
    #[inline(always)]
    pub fn next(&self, uid: Uid) -> Result<u64> {
        let (slot, section, idx) = self.locate(uid)?;
        self.serve(slot, section, idx, &crossbeam_epoch::pin())
    }

    /// Starts loading `uid`'s cell into the CPU's cache, so that a
    /// [`next`](Self::next) for it soon after finds it there. Changes
    /// nothing; a uid out of range or in a section not served here is
    /// ignored (the call that follows reports it). See `warm.rs`.
    #[inline]
    pub fn prefetch(&self, uid: Uid) {
        if let Ok((slot, _, idx)) = self.locate(uid) {
            slot.prefetch_pinned(idx, &crossbeam_epoch::pin());
        }
    }

    /// Serves one uid with the thread pinned by `guard` (held no longer
    /// than the call: never across an `.await`).
    #[inline(always)]
    fn serve(
        &self,
        slot: &SectionSlot,
        section: SectionId,
        idx: usize,
        guard: &Guard,
    ) -> Result<u64> {
        self.serve_n(slot, section, idx, 1, guard)
    }

    /// Reserves `n` numbers of one uid with the thread pinned by `guard`
    /// (one, for [`serve`](Self::serve)); the refusal as the allocator's
    /// error.
    #[inline(always)]
    fn serve_n(
        &self,
        slot: &SectionSlot,
        section: SectionId,
        idx: usize,
        n: u64,
        guard: &Guard,
    ) -> Result<u64> {
        match slot.take_n_pinned(idx, n, guard, |early| self.queue_raise(section, early)) {
            Ok(v) => Ok(v),
            Err(Refused::Exhausted) => Err(self.exhausted(section)),
            Err(Refused::NotServing) => Err(AllocError::NotOwner { section }),
        }
    }

    #[cold]
    fn exhausted(&self, section: SectionId) -> AllocError {
        self.counters.exhausted.fetch_add(1, Relaxed);
        AllocError::Exhausted { section }
    }

    /// Hands out one number per entry of `uids`, in order, appending them to
    /// `out`. A uid listed k times gets k increasing numbers, in list order.
    ///
    /// Not all-or-nothing: it stops at the first uid that cannot be served
    /// and returns that error. The numbers already appended (one for each of
    /// the first `out.len() - len_before` uids) were handed out and must be
    /// delivered or forgotten, never reused; the uid at that position and
    /// those after it got nothing.
    ///
    /// Costs what `next` costs per uid (a range check, a table load, one
    /// compare-and-swap) and no allocation beyond `out`'s growth, reserved
    /// once. A batch's saving is per request (one RPC, one lease check, one
    /// reply), not per uid: every uid still needs its own CAS.
    ///
    /// The uids of a batch are usually far apart, so each cell is a cache
    /// miss; and on x86 each CAS is a locked instruction, which lets no
    /// later load start before it completes, so in the CAS loop alone the
    /// misses would be paid one after another. A first pass therefore
    /// prefetches every cell of the batch: the misses overlap, and the CAS
    /// loop finds the cells in cache (`docs/benchmarks-log.md` has the
    /// profile).
    pub fn next_batch(&self, uids: &[Uid], out: &mut Vec<u64>) -> Result<()> {
        out.reserve(uids.len());
        // One pin for the batch (no `.await` in it).
        let guard = crossbeam_epoch::pin();
        for &uid in uids {
            if let Ok((slot, _, idx)) = self.locate(uid) {
                slot.prefetch_pinned(idx, &guard);
            }
        }
        for &uid in uids {
            let (slot, section, idx) = self.locate(uid)?;
            out.push(self.serve(slot, section, idx, &guard)?);
        }
        Ok(())
    }

    /// The uid's `cur_seq`: ≥ every number ever handed out for it, and below
    /// the next one. Right after a take-over it is the skip-ahead value (the
    /// section's previous ceiling), which no one handed out.
    pub fn current(&self, uid: Uid) -> Result<u64> {
        let (slot, section, idx) = self.locate(uid)?;
        slot.current(idx).ok_or(AllocError::NotOwner { section })
    }

    /// Like [`next`](Self::next), but when the section is exhausted waits for
    /// its raise (up to `deadline`) and retries. Other errors return at once.
    pub async fn next_waiting(&self, uid: Uid, deadline: Instant) -> Result<u64> {
        self.retry_exhausted(deadline, || self.next(uid)).await
    }

    /// Like [`next_batch`](Self::next_batch), but waits (up to `deadline`) on
    /// each exhausted section and carries on from the uid that was refused.
    pub async fn next_batch_waiting(
        &self,
        uids: &[Uid],
        out: &mut Vec<u64>,
        deadline: Instant,
    ) -> Result<()> {
        let start = out.len();
        self.retry_exhausted(deadline, || {
            let done = out.len() - start;
            self.next_batch(&uids[done..], out)
        })
        .await
    }

    /// Runs `attempt` until it returns anything but `Exhausted`, sleeping on
    /// the exhausted section's notifier in between; gives up at `deadline`.
    async fn retry_exhausted<T>(
        &self,
        deadline: Instant,
        mut attempt: impl FnMut() -> Result<T>,
    ) -> Result<T> {
        loop {
            let section = match attempt() {
                Err(AllocError::Exhausted { section }) => section,
                other => return other,
            };
            // The notifier is never freed, so sleeping on it holds no guard
            // across the `.await` (each attempt pins and unpins on its own).
            let Some(changed) = self.slot(section).and_then(SectionSlot::changed) else {
                return Err(AllocError::NotOwner { section });
            };
            let mut changed = pin!(changed.notified());
            changed.as_mut().enable();
            // Try again *after* registering: a raise that landed since the
            // first attempt has already fired its notification.
            match attempt() {
                Err(AllocError::Exhausted { section: s }) if s == section => {}
                Err(AllocError::Exhausted { .. }) => continue,
                other => return other,
            }
            self.counters.raise_waits.fetch_add(1, Relaxed);
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                self.counters.raise_wait_timeouts.fetch_add(1, Relaxed);
                return Err(AllocError::Exhausted { section });
            }
        }
    }

    /// Starts serving the sections of a take-over. Every uid of a granted
    /// section starts at the grant's previous ceiling (skip ahead, promise 1
    /// across owners). Grants older than what is already installed are
    /// skipped. Returns how many grants were installed.
    ///
    /// All grants are checked before any is installed.
    pub fn install(&self, grants: &[Grant]) -> Result<usize> {
        for g in grants {
            if !self.spec.has_section(g.section) {
                return Err(AllocError::UnknownSection { section: g.section });
            }
            if g.max_seq <= g.prev_ceiling {
                return Err(AllocError::InvalidGrant {
                    section: g.section,
                    reason: format!("ceiling {} not above {}", g.max_seq, g.prev_ceiling),
                });
            }
        }
        let installed: Vec<SectionId> = (grants.iter())
            .filter(|g| self.install_one(g))
            .map(|g| g.section)
            .collect();
        if !installed.is_empty() {
            // One line a batch (a take-over, an adopt), not one a section.
            let (n, runs) = (installed.len(), Runs(&installed));
            tracing::info!(count = n, sections = %runs, "serving {n} sections ({runs})");
        }
        Ok(installed.len())
    }

    fn install_one(&self, g: &Grant) -> bool {
        let floors = self.moved_floor.lock().unwrap_or_else(|e| e.into_inner());
        if floors.get(&g.section).is_some_and(|&f| g.epoch < f) {
            tracing::warn!(
                section = g.section,
                epoch = g.epoch,
                "ignored a grant made before the section was frozen for a move"
            );
            return false;
        }
        let uids = self.spec.uids_of(g.section);
        let shape = Shape {
            len: (uids.end - uids.start) as usize,
            steps: self.steps,
        };
        let installed = self.slots[g.section as usize].install(g, shape, &self.mem, Instant::now());
        if installed {
            tracing::debug!(
                section = g.section,
                epoch = g.epoch,
                from = g.prev_ceiling,
                ceiling = g.max_seq,
                "serving section"
            );
        } else {
            tracing::warn!(
                section = g.section,
                epoch = g.epoch,
                "ignored a grant not newer than the one installed"
            );
        }
        installed
    }

    /// Stops serving `section`, frozen by its store at `epoch` for a move to
    /// another set, and never installs a grant older than that epoch (one
    /// made before the freeze may still be on its way). Returns whether it
    /// was served.
    pub fn release_moved(&self, section: SectionId, epoch: Epoch) -> bool {
        let mut floors = self.moved_floor.lock().unwrap_or_else(|e| e.into_inner());
        let f = floors.entry(section).or_insert(0);
        *f = (*f).max(epoch);
        self.retire(section, None)
    }

    /// Stops serving `section` (lost ownership, lease gone, planned move).
    /// Its cells are freed once the calls that may still read them have
    /// finished; its newest epoch is kept. Returns whether it was served.
    pub fn drop_section(&self, section: SectionId) -> bool {
        self.retire(section, None)
    }

    /// Stops serving `section` only if we still serve it under `epoch`: a
    /// store's "stale epoch" answer for an old epoch must not drop a newer
    /// take-over of the same section.
    pub fn drop_section_if_epoch(&self, section: SectionId, epoch: Epoch) -> bool {
        self.retire(section, Some(epoch))
    }

    fn retire(&self, section: SectionId, epoch: Option<Epoch>) -> bool {
        let dropped = self
            .slot(section)
            .is_some_and(|slot| slot.retire(section, epoch, &self.mem));
        if dropped {
            self.counters.sections_dropped.fetch_add(1, Relaxed);
            // The callers log one line a batch.
            tracing::debug!(section, ?epoch, "stopped serving section");
        }
        dropped
    }

    fn slot(&self, section: SectionId) -> Option<&SectionSlot> {
        self.slots.get(section as usize)
    }

    /// Frees the cells of lost sections whose last callers have finished.
    /// Threads that serve do this on their own as they go (every so many
    /// calls); an AllocSvr with nothing to serve calls it from its renewal
    /// loop, so memory is returned even when idle. Cheap: a pin and one
    /// collection step; a lost section's cells are freed by the second or
    /// third call after its last caller finished.
    pub fn reclaim(&self) {
        crossbeam_epoch::pin().flush();
    }

    /// Queues a raise for `section`. Called only by the caller that won the
    /// slot's pending flag, so at most once per raise; `early` when that
    /// caller was served and found the headroom low.
    #[cold]
    #[inline(never)]
    fn queue_raise(&self, section: SectionId, early: bool) {
        self.counters.raises_queued.fetch_add(1, Relaxed);
        if early {
            self.counters.raises_early.fetch_add(1, Relaxed);
        }
        self.raise_queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(section);
        self.raise_signal.notify_one();
    }

    /// Puts sections whose raise failed transiently back in the queue, without
    /// waking the raiser (it retries them after its back-off).
    pub fn requeue_raises(&self, sections: &[SectionId]) {
        let mut q = self.raise_queue.lock().unwrap_or_else(|e| e.into_inner());
        q.extend_from_slice(sections);
    }

    /// Resolves when some section wants a raise (a stored permit: a signal
    /// sent while nobody waited is not lost).
    pub fn raise_wanted(&self) -> Notified<'_> {
        self.raise_signal.notified()
    }

    /// Drains the raise queue into the requests to send to the store, one per
    /// section at most. Sections that no longer need one are skipped.
    pub fn take_raise_requests(&self) -> Vec<RaiseRequest> {
        let mut sections =
            std::mem::take(&mut *self.raise_queue.lock().unwrap_or_else(|e| e.into_inner()));
        sections.sort_unstable();
        sections.dedup();
        let now = Instant::now();
        sections
            .into_iter()
            .filter_map(|section| {
                let (epoch, to) = self.slot(section)?.raise_target(&self.steps, now)?;
                Some(RaiseRequest { section, epoch, to })
            })
            .collect()
    }

    /// Applies a ceiling the store made durable. Ignored (false) unless we
    /// still serve `section` under `epoch`: a late reply must never resurrect
    /// a lost section (promise 3). Wakes callers waiting on the section.
    pub fn apply_raise(&self, section: SectionId, epoch: Epoch, new_max: u64) -> bool {
        let Some(slot) = self.slot(section) else {
            return false;
        };
        let applied = slot.apply_raise(epoch, new_max, &self.steps, Instant::now());
        if applied {
            self.counters.raises_applied.fetch_add(1, Relaxed);
        }
        if applied && slot.claim_if_low() {
            // Callers used the new room while the raise was in flight.
            self.queue_raise(section, true);
        }
        applied
    }

    /// The counters, for metrics.
    pub fn stats(&self) -> AllocStats {
        let c = &self.counters;
        AllocStats {
            exhausted: c.exhausted.load(Relaxed),
            raises_queued: c.raises_queued.load(Relaxed),
            raises_applied: c.raises_applied.load(Relaxed),
            sections_dropped: c.sections_dropped.load(Relaxed),
            cell_bytes: self.mem.bytes(),
            sections_freed: self.mem.blocks_freed(),
            raises_early: c.raises_early.load(Relaxed),
            raise_waits: c.raise_waits.load(Relaxed),
            raise_wait_timeouts: c.raise_wait_timeouts.load(Relaxed),
            names: self.names.stats(),
        }
    }

    /// How many served sections raise by each step now: `(step, sections)`,
    /// by step (metrics: the steps of a set).
    pub fn step_counts(&self) -> Vec<(u64, usize)> {
        let mut counts = std::collections::BTreeMap::new();
        for s in self.served_sections() {
            if let Some(st) = self.section_state(s) {
                *counts.entry(st.step).or_insert(0) += 1;
            }
        }
        counts.into_iter().collect()
    }

    /// A snapshot of `section`, or `None` if not served here.
    pub fn section_state(&self, section: SectionId) -> Option<SectionState> {
        self.slot(section)?.state()
    }

    /// The sections served here, in order: kept as sections are
    /// installed and retired, O(served), not a walk over every slot.
    pub fn served_sections(&self) -> Vec<SectionId> {
        self.mem.serving()
    }

    /// How many sections are served here (kept, like
    /// [`served_sections`](Self::served_sections)).
    pub fn served_count(&self) -> usize {
        self.mem.serving_count()
    }
}

#[cfg(test)]
mod tests;
