//! Time-ordered ids on an AllocSvr (docs/ids.md): per namespace, a worker
//! id claimed from the store on first use, its time ceiling kept ahead of
//! the clock in the background, and the core's [`Generator`] issuing ids
//! under it.
//!
//! The rules, each protecting a promise of docs/ids.md ("What is
//! guaranteed"):
//! - **Never above the ceiling the store acknowledged** (1): the generator
//!   refuses a tick above it, and the ceiling it knows only grows by a
//!   raise the store answered `Ok` to. A successor — another process, or
//!   this one after a restart with its clock set back — starts above it.
//! - **Kept ahead** (3): a task per holding raises the ceiling to `now +
//!   window` whenever it is less than half a window ahead; a call that
//!   finds the ceiling reached wakes it and waits, bounded, for the raise.
//! - **Clock behind**: the generator keeps issuing from its last tick
//!   (sequence, then at most a window of borrowed ticks), then the call is
//!   refused at once with [`CallError::ClockBehind`] and counted — never a
//!   sleep or a spin.
//! - **Lost holdings stop**: a raise refused because this incarnation no
//!   longer holds the worker id (fenced, replaced, reclaimed) ends the
//!   holding; nothing more is issued from it and the next call claims
//!   again.
//! - **Released on a clean stop** ([`IdWorkers::release_all`]), so the
//!   next holder need not wait for the lease.
//!
//! # Layout
//! - [`store`]: what the holder needs from the store ([`WorkerStore`]):
//!   the peer plane, or the store's state machine in memory.
//! - this file: [`IdWorkers`], the holdings of one AllocSvr.
//! - `metrics`: [`IdMetrics`].

mod metrics;
pub mod store;
#[cfg(test)]
mod tests;

pub use metrics::IdMetrics;
pub use store::{MemHolder, MemWorkers, StoreWorkers, WorkerStore};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seqsvr_core::ids::{Decoded, Generator, IdError, Layout};
use seqsvr_core::Epoch;
use seqsvr_store_api::{Error as StoreError, IdRefusal, Rejection};
use tokio::sync::Notify;

use crate::error::CallError;

/// Most ids one call may ask for.
pub const MAX_IDS_PER_CALL: u32 = 100_000;

/// The clock ids are stamped with: Unix milliseconds.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system clock, in Unix milliseconds.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    })
}

/// One worker id held for one namespace.
struct Holding {
    /// The namespace.
    ns: String,
    /// The worker id.
    worker: u64,
    /// The holding's fencing epoch (raises and the release carry it).
    epoch: Epoch,
    /// The ceiling window, in ticks.
    window: u64,
    /// The generator (short critical sections, never held across an
    /// await).
    gen: Mutex<Generator>,
    /// Wakes the raiser at once (a call found the ceiling near or reached).
    kick: Notify,
    /// Wakes the calls waiting for a raise.
    raised: Notify,
    /// Set when the store says this incarnation no longer holds it, or on
    /// a stop: nothing more is issued from it.
    lost: AtomicBool,
    /// The count of lease lapses when the store last confirmed the
    /// holding (its claim, a raise): behind the count now, the worker id
    /// may have been reclaimed while the lease was out, and nothing is
    /// issued until a raise confirms it.
    confirmed: AtomicU64,
}

/// Every worker id this AllocSvr holds, by namespace.
pub struct IdWorkers {
    /// The store's id calls.
    store: Arc<dyn WorkerStore>,
    /// The clock.
    clock: Clock,
    /// Holdings by namespace.
    held: Mutex<HashMap<String, Arc<Holding>>>,
    /// Layouts of namespaces looked up for decoding (a namespace's layout
    /// never changes).
    layouts: Mutex<HashMap<String, Layout>>,
    /// One claim at a time (a claim is rare: the first call of a
    /// namespace).
    claiming: tokio::sync::Mutex<()>,
    /// Set by a stop: nothing is claimed or issued any more.
    stopped: AtomicBool,
    /// How long a call waits for a raise when the ceiling is reached.
    wait: Duration,
    /// The AllocSvr's lease lapses ([`IdWorkers::following`]).
    lapses: Arc<AtomicU64>,
    /// What it counts.
    metrics: IdMetrics,
}

impl std::fmt::Debug for IdWorkers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held: Vec<String> = self.lock_held().keys().cloned().collect();
        f.debug_struct("IdWorkers")
            .field("held", &held)
            .finish_non_exhaustive()
    }
}

/// Why a holding issued nothing.
enum Issue {
    /// The store no longer counts it ours (or a stop ended it).
    Lost,
    /// The lease lapsed since the store last confirmed it.
    Unconfirmed,
    /// The generator refused.
    Refused(IdError),
}

fn refused(ns: &str, kind: IdRefusal, reason: String) -> CallError {
    CallError::Store(StoreError::Rejected(Rejection::Ids {
        namespace: ns.into(),
        kind,
        reason,
    }))
}

impl IdWorkers {
    /// Holdings claimed through `store`, stamped by `clock`; a call waits
    /// at most `wait` for a raise.
    pub fn new(
        store: Arc<dyn WorkerStore>,
        clock: Clock,
        wait: Duration,
        metrics: IdMetrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            clock,
            held: Mutex::default(),
            layouts: Mutex::default(),
            claiming: tokio::sync::Mutex::new(()),
            stopped: AtomicBool::new(false),
            wait,
            lapses: Default::default(),
            metrics,
        })
    }

    /// The same workers, following the lease lapses `lapses` counts: a
    /// worker id held across a lapse issues nothing until the store
    /// confirms it (the store reclaims a worker id only once its holder's
    /// lease has certainly expired; a holder that was paused past it and
    /// renewed must not issue below its successor's ids — docs/ids.md,
    /// "What is guaranteed" 2). Call before any claim.
    pub fn following(self: Arc<Self>, lapses: Arc<AtomicU64>) -> Arc<Self> {
        let mut me = Arc::try_unwrap(self).unwrap_or_else(|_| panic!("following: workers shared"));
        me.lapses = lapses;
        Arc::new(me)
    }

    fn lock_held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Holding>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `count` ids of `ns` (0 counts as 1), strictly increasing; fewer
    /// only when a limit (clock, ceiling) was reached after the first.
    pub async fn next(self: &Arc<Self>, ns: &str, count: u32) -> Result<Vec<u64>, CallError> {
        let n = count.max(1);
        if n > MAX_IDS_PER_CALL {
            return Err(CallError::Invalid(format!(
                "at most {MAX_IDS_PER_CALL} ids per call, not {n}"
            )));
        }
        let (mut waited, mut reclaimed) = (false, false);
        loop {
            let h = self.holding(ns).await?;
            match self.issue(&h, n as usize) {
                Ok(ids) => return Ok(ids),
                Err(Issue::Lost) if !reclaimed => {
                    // The store took the worker id back: claim again.
                    reclaimed = true;
                    self.forget(&h);
                }
                Err(Issue::Lost) => return Err(self.unavailable(ns, "its worker id was lost")),
                Err(Issue::Unconfirmed) if !waited && !self.wait.is_zero() => {
                    // The raiser confirms it (or learns it lost): wait for
                    // that, bounded.
                    waited = true;
                    let raised = h.raised.notified();
                    h.kick.notify_one();
                    let _ = tokio::time::timeout(self.wait, raised).await;
                }
                Err(Issue::Unconfirmed) => {
                    h.kick.notify_one();
                    return Err(
                        self.unavailable(ns, "the lease lapsed; its worker id is being confirmed")
                    );
                }
                Err(Issue::Refused(IdError::CeilingReached { .. }))
                    if !waited && !self.wait.is_zero() =>
                {
                    // Wake the raiser and wait for it, bounded.
                    waited = true;
                    let raised = h.raised.notified();
                    h.kick.notify_one();
                    let _ = tokio::time::timeout(self.wait, raised).await;
                }
                Err(Issue::Refused(e)) => return Err(self.refusal(ns, &h, e)),
            }
        }
    }

    /// Issues from a holding, unless it was lost.
    fn issue(&self, h: &Holding, n: usize) -> Result<Vec<u64>, Issue> {
        let now = (self.clock)();
        let mut out = Vec::with_capacity(n);
        let (r, wants, stats) = {
            let mut g = h.gen.lock().unwrap_or_else(|e| e.into_inner());
            if h.lost.load(Ordering::Acquire) {
                return Err(Issue::Lost);
            }
            // Read after the call was admitted: a lease valid then and no
            // lapse counted since the confirmation means the lease held
            // all along, so the worker id cannot have been reclaimed.
            if h.confirmed.load(Ordering::SeqCst) != self.lapses.load(Ordering::SeqCst) {
                h.kick.notify_one();
                return Err(Issue::Unconfirmed);
            }
            let before = g.stats();
            let r = g.next_n(now, n, &mut out);
            let wants = g.wants_raise(now, h.window);
            (r, wants, (before, g.stats()))
        };
        self.metrics.counted(&stats.0, &stats.1);
        if wants.is_some() {
            h.kick.notify_one();
        }
        r.map(|()| out).map_err(Issue::Refused)
    }

    fn unavailable(&self, ns: &str, reason: &str) -> CallError {
        CallError::IdUnavailable {
            namespace: ns.into(),
            reason: reason.into(),
            retry_after_ms: 100,
        }
    }

    /// The typed error of a generator's refusal.
    fn refusal(&self, ns: &str, h: &Holding, e: IdError) -> CallError {
        let unit = h.gen.lock().map_or(1, |g| g.layout().unit_ms);
        match e {
            IdError::ClockBehind { behind_ms } => CallError::ClockBehind {
                namespace: ns.into(),
                behind_ms,
            },
            IdError::CeilingReached { .. } => CallError::IdCeiling {
                namespace: ns.into(),
                retry_after_ms: unit.max(10),
            },
            IdError::TimeExhausted { .. } => refused(ns, IdRefusal::TimeExhausted, e.to_string()),
            other => CallError::Internal(other.to_string()),
        }
    }

    /// The holding of `ns`, claimed now if there is none.
    async fn holding(self: &Arc<Self>, ns: &str) -> Result<Arc<Holding>, CallError> {
        if let Some(h) = self.held_live(ns) {
            return Ok(h);
        }
        let _one = self.claiming.lock().await;
        if let Some(h) = self.held_live(ns) {
            return Ok(h);
        }
        if self.stopped.load(Ordering::Acquire) {
            return Err(self.unavailable(ns, "this AllocSvr is stopping"));
        }
        let confirmed = self.lapses.load(Ordering::SeqCst);
        let claimed = match self.store.claim(ns, (self.clock)()).await {
            Ok(c) => c,
            Err(e) => {
                if let StoreError::Rejected(Rejection::Ids {
                    kind: IdRefusal::WorkersExhausted,
                    ..
                }) = &e
                {
                    self.metrics.exhausted.inc();
                }
                return Err(CallError::Store(e));
            }
        };
        let g = claimed.grant;
        let layout = claimed.layout;
        let window = layout.ticks_in(claimed.window_ms).max(1);
        // Borrowing is bounded by the window: ids run at most a window
        // ahead of the clock before a call is refused as clock-behind.
        let gen = Generator::new(layout, g.worker, g.floor, g.ceiling, window)
            .map_err(|e| refused(ns, IdRefusal::TimeExhausted, e.to_string()))?;
        let h = Arc::new(Holding {
            ns: ns.into(),
            worker: g.worker,
            epoch: g.epoch,
            window,
            gen: Mutex::new(gen),
            kick: Notify::new(),
            raised: Notify::new(),
            lost: AtomicBool::new(false),
            confirmed: AtomicU64::new(confirmed),
        });
        tracing::info!(
            namespace = ns,
            worker = g.worker,
            epoch = g.epoch,
            floor = g.floor,
            ceiling = g.ceiling,
            "claimed an id worker"
        );
        self.lock_held().insert(ns.into(), h.clone());
        self.layouts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ns.into(), layout);
        self.metrics.held.inc();
        self.metrics.days_left(ns, &layout, (self.clock)());
        tokio::spawn(raise_loop(self.clone(), h.clone()));
        Ok(h)
    }

    fn held_live(&self, ns: &str) -> Option<Arc<Holding>> {
        let held = self.lock_held();
        held.get(ns)
            .filter(|h| !h.lost.load(Ordering::Acquire))
            .cloned()
    }

    /// Ends a holding: nothing more is issued from it.
    fn forget(&self, h: &Holding) {
        if !h.lost.swap(true, Ordering::AcqRel) {
            self.metrics.held.dec();
        }
        let mut held = self.lock_held();
        if held.get(&h.ns).is_some_and(|x| x.epoch == h.epoch) {
            held.remove(&h.ns);
        }
        h.raised.notify_waiters();
        h.kick.notify_one();
    }

    /// Takes `id` of `ns` apart by the namespace's layout (looked up in
    /// the store once).
    pub async fn decode(&self, ns: &str, id: u64) -> Result<(Decoded, Layout), CallError> {
        let known = self.layout_known(ns);
        let layout = match known {
            Some(l) => l,
            None => {
                let l = self.store.layout(ns).await.map_err(CallError::Store)?;
                self.layouts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(ns.into(), l);
                l
            }
        };
        let d = layout
            .decode(id)
            .map_err(|e| CallError::Invalid(e.to_string()))?;
        Ok((d, layout))
    }

    fn layout_known(&self, ns: &str) -> Option<Layout> {
        let layouts = self.layouts.lock().unwrap_or_else(|e| e.into_inner());
        layouts.get(ns).copied()
    }

    /// The worker id in `id` of `ns` (0 if the layout is not known here).
    pub fn worker_of(&self, ns: &str, id: u64) -> u64 {
        (self.layout_known(ns))
            .and_then(|l| l.decode(id).ok())
            .map_or(0, |d| d.worker)
    }

    /// The worker ids held, by namespace (for status and tests).
    pub fn held(&self) -> Vec<(String, u64, u64)> {
        let held = self.lock_held();
        let mut v: Vec<_> = (held.values())
            .map(|h| {
                let c = h.gen.lock().map_or(0, |g| g.ceiling());
                (h.ns.clone(), h.worker, c)
            })
            .collect();
        v.sort();
        v
    }

    /// Stops issuing and raising without releasing anything (the node
    /// shuts down without a planned stop: the store frees the worker ids
    /// once the lease has certainly expired, or when the next incarnation
    /// registers).
    pub fn halt(&self) {
        self.stopped.store(true, Ordering::Release);
        for h in self.lock_held().drain().map(|(_, h)| h) {
            if !h.lost.swap(true, Ordering::AcqRel) {
                self.metrics.held.dec();
            }
            h.kick.notify_one();
            h.raised.notify_waiters();
        }
    }

    /// A clean stop: nothing more is claimed or issued, and every worker
    /// id is released in the store (within `bound`), so its next holder
    /// need not wait for the lease. Its ceiling stays: the next holder
    /// starts above it. Returns how many were released.
    pub async fn release_all(&self, bound: Duration) -> usize {
        self.stopped.store(true, Ordering::Release);
        let _one = self.claiming.lock().await;
        let all: Vec<Arc<Holding>> = self.lock_held().drain().map(|(_, h)| h).collect();
        let mut released = 0;
        for h in &all {
            // Under the generator's lock: no call issues after this.
            {
                let _g = h.gen.lock().unwrap_or_else(|e| e.into_inner());
                if !h.lost.swap(true, Ordering::AcqRel) {
                    self.metrics.held.dec();
                }
            }
            h.kick.notify_one();
            let r = tokio::time::timeout(bound, self.store.release(&h.ns, h.worker, h.epoch));
            match r.await {
                Ok(Ok(())) => released += 1,
                Ok(Err(e)) => {
                    tracing::warn!(namespace = %h.ns, worker = h.worker, "releasing an id worker: {e}")
                }
                Err(_) => {
                    tracing::warn!(namespace = %h.ns, worker = h.worker, "releasing an id worker timed out")
                }
            }
        }
        released
    }
}

/// Keeps one holding's ceiling ahead of the clock: every quarter window,
/// or at once when a call wakes it, raises to `max(clock, last) + window`
/// if the ceiling is less than half a window ahead. Ends when the holding
/// is lost or released.
async fn raise_loop(ids: Arc<IdWorkers>, h: Arc<Holding>) {
    let unit = h.gen.lock().map_or(1, |g| g.layout().unit_ms);
    let window_ms = h.window.saturating_mul(unit);
    let every = Duration::from_millis((window_ms / 4).clamp(5, 1000));
    let mut backoff = Duration::from_millis(10);
    loop {
        if h.lost.load(Ordering::Acquire) || ids.stopped.load(Ordering::Acquire) {
            return;
        }
        let lapses = ids.lapses.load(Ordering::SeqCst);
        let unconfirmed = h.confirmed.load(Ordering::SeqCst) != lapses;
        let wants = {
            let g = h.gen.lock().unwrap_or_else(|e| e.into_inner());
            // Unconfirmed, a raise to the ceiling it has: fenced like any
            // raise, it changes nothing and proves the holding.
            g.wants_raise((ids.clock)(), h.window)
                .or(unconfirmed.then(|| g.ceiling()))
        };
        let Some(to) = wants else {
            let _ = tokio::time::timeout(every, h.kick.notified()).await;
            continue;
        };
        match ids.store.raise(&h.ns, h.worker, h.epoch, to).await {
            Ok(ceiling) => {
                backoff = Duration::from_millis(10);
                h.gen
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .set_ceiling(ceiling);
                h.confirmed.store(lapses, Ordering::SeqCst);
                h.raised.notify_waiters();
            }
            Err(StoreError::Rejected(
                r @ (Rejection::Ids {
                    kind: IdRefusal::NotHolder,
                    ..
                }
                | Rejection::StaleIncarnation { .. }
                | Rejection::NotRegistered { .. }),
            )) => {
                tracing::warn!(namespace = %h.ns, worker = h.worker, "id worker lost: {r}");
                ids.forget(&h);
                return;
            }
            Err(e) => {
                tracing::debug!(namespace = %h.ns, "raising an id worker's ceiling: {e}");
                h.raised.notify_waiters();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(every.max(Duration::from_millis(100)));
            }
        }
    }
}
