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
//! - [`rules`]: the pure part (the generator a claim starts, an issue, a
//!   raise's answer, the typed refusals), which the seeded simulation
//!   drives too.
//! - this file: [`IdWorkers`], the holdings of one AllocSvr.
//! - `metrics`: [`IdMetrics`].

mod metrics;
pub mod rules;
pub mod store;
#[cfg(test)]
mod tests;

pub use metrics::IdMetrics;
pub use store::{MemHolder, MemWorkers, StoreWorkers, WorkerStore};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seqsvr_core::ids::{Decoded, Generator, IdError, Layout};

use rules::RaiseSettled;
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
    /// The lease-lapse count under which the store last confirmed it ours
    /// (its claim, or a raise answered): after a lapse nothing is issued
    /// until a raise confirms it again ([`rules::confirmed`]).
    confirmed: std::sync::atomic::AtomicU64,
}

/// How many times this process's lease has lapsed (the control loop's
/// count).
pub type Lapses = Arc<dyn Fn() -> u64 + Send + Sync>;

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
    /// The lease's lapse count, once the node wires it
    /// ([`watch_lapses`](Self::watch_lapses); none: never lapses).
    lapses: std::sync::OnceLock<Lapses>,
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
    /// Not confirmed ours since the lease last lapsed.
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
            lapses: std::sync::OnceLock::new(),
            metrics,
        })
    }

    /// Counts lease lapses with `lapses` from now on (the node's control
    /// loop): a holding issues only while the store confirmed it since the
    /// last lapse.
    pub fn watch_lapses(&self, lapses: Lapses) {
        let _ = self.lapses.set(lapses);
    }

    fn lapses_now(&self) -> u64 {
        self.lapses.get().map_or(0, |f| f())
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
                    // Wake the raiser to confirm the holding, bounded.
                    waited = true;
                    let raised = h.raised.notified();
                    h.kick.notify_one();
                    let _ = tokio::time::timeout(self.wait, raised).await;
                }
                Err(Issue::Unconfirmed) => {
                    h.kick.notify_one();
                    return Err(self
                        .unavailable(ns, "its worker id is being confirmed after a lease lapse"));
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
        let issued = {
            let mut g = h.gen.lock().unwrap_or_else(|e| e.into_inner());
            if h.lost.load(Ordering::Acquire) {
                return Err(Issue::Lost);
            }
            if !rules::confirmed(h.confirmed.load(Ordering::Acquire), self.lapses_now()) {
                return Err(Issue::Unconfirmed);
            }
            rules::issue(&mut g, h.window, now, n)
        };
        self.metrics.counted(&issued.before, &issued.after);
        if issued.wants_raise {
            h.kick.notify_one();
        }
        issued.result.map_err(Issue::Refused)
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
        rules::refusal(ns, unit, e)
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
        let lapses = self.lapses_now();
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
        let (gen, window) = rules::start(&claimed)
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
            confirmed: lapses.into(),
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
    let every = rules::raise_interval(h.window, unit);
    let mut backoff = rules::RAISE_BACKOFF_MIN;
    loop {
        if h.lost.load(Ordering::Acquire) || ids.stopped.load(Ordering::Acquire) {
            return;
        }
        let sent = ids.lapses_now();
        let wants = {
            let g = h.gen.lock().unwrap_or_else(|e| e.into_inner());
            let confirmed = rules::confirmed(h.confirmed.load(Ordering::Acquire), sent);
            rules::raise_target(&g, (ids.clock)(), h.window, confirmed)
        };
        let Some(to) = wants else {
            let _ = tokio::time::timeout(every, h.kick.notified()).await;
            continue;
        };
        let answer = ids.store.raise(&h.ns, h.worker, h.epoch, to).await;
        match rules::settle_raise(answer.as_ref().copied()) {
            RaiseSettled::Raised(ceiling) => {
                backoff = rules::RAISE_BACKOFF_MIN;
                {
                    let mut g = h.gen.lock().unwrap_or_else(|e| e.into_inner());
                    g.set_ceiling(ceiling);
                    if let Some(at) = rules::confirms(sent, ids.lapses_now()) {
                        h.confirmed.store(at, Ordering::Release);
                    }
                }
                h.raised.notify_waiters();
            }
            RaiseSettled::Lost => {
                if let Err(r) = &answer {
                    tracing::warn!(namespace = %h.ns, worker = h.worker, "id worker lost: {r}");
                }
                ids.forget(&h);
                return;
            }
            RaiseSettled::Retry => {
                if let Err(e) = &answer {
                    tracing::debug!(namespace = %h.ns, "raising an id worker's ceiling: {e}");
                }
                h.raised.notify_waiters();
                tokio::time::sleep(backoff).await;
                backoff = rules::next_backoff(backoff, every);
            }
        }
    }
}
