//! [`Raiser`]: the background task that turns the allocator's raise
//! requests into store writes, and take-overs into served sections.
//!
//! The hot path only flips a per-section flag and queues the section id, on
//! the edge of "wants a raise"; this task does the slow part (a Raft write)
//! off the request path and wakes callers waiting on the section. When a
//! round runs, what each answer does and how long failed raises wait are
//! the control loop's ([`Control`], `control/raise.rs`), which the seeded
//! simulation runs too: this task performs its effects.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use seqsvr_core::SectionId;
use tokio::time::Instant;

use crate::allocator::{Allocator, RaiseRequest};
use crate::ceiling::{CeilingStore, Grant};
use crate::control::{Control, Effect, Event, Stepper, Timer};
use crate::error::{Result, StoreErr};
use crate::ownership::{take_over_known, Backoff};

/// Tuning of the raiser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaiserConfig {
    /// Most raises sent to the store at once.
    pub max_in_flight: usize,
    /// First wait before retrying raises that failed transiently.
    pub backoff_min: Duration,
    /// Longest wait between retries (the back-off doubles up to this).
    pub backoff_max: Duration,
}

impl Default for RaiserConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
        }
    }
}

/// What one round of raises did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Raises applied to a served section.
    pub raised: usize,
    /// Sections dropped because the store says someone else owns them.
    pub dropped: usize,
    /// Answers ignored because the section changed epoch meanwhile.
    pub ignored: usize,
    /// Sections whose raise failed and must be retried (still pending; hand
    /// them to [`Allocator::requeue_raises`] after a back-off).
    pub retry: Vec<SectionId>,
}

/// Drives take-overs and ceiling raises for one allocator against one store.
pub struct Raiser<S> {
    /// The allocator whose sections we raise.
    alloc: Arc<Allocator>,
    /// Where ceilings live.
    store: Arc<S>,
    /// Tuning.
    config: RaiserConfig,
    /// The control loop deciding the rounds (the node's own, or one of
    /// this raiser's when it runs alone).
    control: Arc<dyn Stepper>,
}

impl<S> std::fmt::Debug for Raiser<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Raiser")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S: CeilingStore> Raiser<S> {
    /// A raiser for `alloc` backed by `store`.
    pub fn new(alloc: Arc<Allocator>, store: Arc<S>, config: RaiserConfig) -> Self {
        let backoff = Backoff::new(config.backoff_min, config.backoff_max);
        let control = Control::default().with_backoff(backoff);
        Self {
            alloc,
            store,
            config,
            control: Arc::new(Mutex::new(control)),
        }
    }

    /// The same raiser, its rounds decided by `control` (the node's
    /// control loop).
    pub fn with_control(mut self, control: Arc<dyn Stepper>) -> Self {
        self.control = control;
        self
    }

    /// Steps the control loop on `event` now.
    fn step(&self, event: Event) -> Vec<Effect> {
        self.control.step(Instant::now().into_std(), event)
    }

    /// The allocator driven.
    pub fn allocator(&self) -> &Arc<Allocator> {
        &self.alloc
    }

    /// Takes over sections `first .. first + count` in the store and starts
    /// serving them, every uid skipped ahead to the grant's start. Returns
    /// the grants (all of them; replays the allocator ignored included).
    ///
    /// The store is told the newest epoch this allocator installed per
    /// section, so a grant prepared for this process (a handoff to it, or
    /// a take-over whose reply was lost) comes back unchanged rather than
    /// costing another step (promise 4), and a section served here before
    /// gets a new epoch and skips ahead (promise 1).
    pub async fn take_over(&self, first: SectionId, count: u32) -> Result<Vec<Grant>> {
        let known = take_over_known(&self.alloc, first, count);
        let grants = self
            .store
            .take_over(self.alloc.incarnation(), first, known)
            .await?;
        // Not installed if this fails: the next take-over gets the same
        // grant back (promise 4) and reads them again.
        load_counters(&self.alloc, &*self.store, &grants).await?;
        self.alloc.install(&grants)?;
        Ok(grants)
    }

    /// Sends every queued raise to the store (up to `max_in_flight` at once)
    /// and applies the answers.
    pub async fn run_once(&self) -> RoundReport {
        self.round().await.1
    }

    /// One round: how many raises it sent, and what they did.
    async fn round(&self) -> (usize, RoundReport) {
        let requests = self.alloc.take_raise_requests();
        let sent = requests.len();
        let incarnation = self.alloc.incarnation();
        let answers: Vec<_> = futures::stream::iter(requests)
            .map(|r| async move {
                let answer = self
                    .store
                    .raise(incarnation, r.section, r.epoch, r.to)
                    .await;
                (r, answer)
            })
            .buffer_unordered(self.config.max_in_flight.max(1))
            .collect()
            .await;
        let mut report = RoundReport::default();
        for (r, answer) in answers {
            self.settle(r, answer, &mut report);
        }
        (sent, report)
    }

    /// Applies one store answer to the allocator, as the control loop
    /// decides ([`Event::RaiseAnswered`]).
    fn settle(&self, r: RaiseRequest, answer: Result<u64, StoreErr>, report: &mut RoundReport) {
        // Every outcome but `ApplyRaise` comes from a refusal.
        let error = answer.as_ref().err().map(ToString::to_string);
        let error = error.unwrap_or_default();
        let answered = Event::RaiseAnswered {
            section: r.section,
            epoch: r.epoch,
            to: r.to,
            answer,
        };
        for effect in self.step(answered) {
            match effect {
                Effect::ApplyRaise {
                    section,
                    epoch,
                    landed,
                } => {
                    if self.alloc.apply_raise(section, epoch, landed) {
                        report.raised += 1;
                    } else {
                        report.ignored += 1;
                    }
                }
                Effect::DropRaised { section, epoch } => {
                    // Guarded by epoch so a newer take-over stays.
                    if self.alloc.drop_section_if_epoch(section, epoch) {
                        tracing::warn!(section, epoch, %error, "raise refused for good; section dropped");
                        report.dropped += 1;
                    } else {
                        report.ignored += 1;
                    }
                }
                Effect::RaiseFailed {
                    section,
                    transient: true,
                } => {
                    tracing::debug!(section, %error, "raise failed; will retry");
                    report.retry.push(section);
                }
                Effect::RaiseFailed {
                    section,
                    transient: false,
                } => {
                    // The store and we disagree on the set: keep retrying
                    // slowly (the section serves what it has) and make noise.
                    tracing::error!(section, to = r.to, %error, "raise refused");
                    report.retry.push(section);
                }
                other => tracing::debug!(?other, "raiser: effect not its own"),
            }
        }
    }

    /// Runs until `shutdown` resolves: waits for raise requests and
    /// performs the rounds, the back-off and the retries the control loop
    /// orders.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = pin!(shutdown);
        let mut retry_at: Option<std::time::Instant> = None;
        let mut todo: VecDeque<Effect> = VecDeque::new();
        loop {
            while let Some(effect) = todo.pop_front() {
                match effect {
                    Effect::RaiseRound => {
                        let (sent, _) = self.round().await;
                        todo.extend(self.step(Event::RaiseRoundDone { sent }));
                    }
                    Effect::SetTimer {
                        timer: Timer::Raises,
                        at,
                    } => retry_at = Some(at),
                    Effect::Requeue { sections } => self.alloc.requeue_raises(&sections),
                    other => tracing::debug!(?other, "raiser: effect not its own"),
                }
            }
            let wanted = self.alloc.raise_wanted();
            let at = retry_at.map(Instant::from_std);
            tokio::select! {
                _ = &mut shutdown => return,
                _ = wanted => todo.extend(self.step(Event::RaisesQueued)),
                _ = tokio::time::sleep_until(at.unwrap_or_else(Instant::now)), if at.is_some() => {
                    let at = retry_at.take().expect("a retry set");
                    todo.extend(self.step(Event::Due { timer: Timer::Raises, at }));
                }
            }
        }
    }
}

/// Loads the counter declarations of the sections of `grants` that hold
/// name positions, before the grants are installed (`docs/counters.md`,
/// Declared counters): a name is never served under a grant without the
/// declarations written before it began (a write under an older epoch
/// is refused once a newer one began, so the read sees every one that
/// landed). Nothing is read for a set that serves no names.
pub async fn load_counters<S: CeilingStore>(
    alloc: &Allocator,
    store: &S,
    grants: &[Grant],
) -> Result<()> {
    load_section_counters(alloc, store, grants.iter().map(|g| g.section)).await
}

/// [`load_counters`] for `sections` (an adopt reads them before its
/// grants are decided under the ownership lock).
pub async fn load_section_counters<S: CeilingStore>(
    alloc: &Allocator,
    store: &S,
    sections: impl Iterator<Item = SectionId>,
) -> Result<()> {
    let mut sections: Vec<SectionId> = sections.filter(|&s| alloc.has_name_positions(s)).collect();
    sections.sort_unstable();
    sections.dedup();
    for (first, count) in seqsvr_core::section::runs(&sections) {
        let mut by_section: std::collections::BTreeMap<SectionId, Vec<_>> =
            (first..first + count).map(|s| (s, Vec::new())).collect();
        for (name, section, decl) in store.counters(first, count).await? {
            if let Some(v) = by_section.get_mut(&section) {
                v.push((name, decl));
            }
        }
        for (section, decls) in by_section {
            alloc.load_counter_decls(section, decls);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::AllocConfig;
    use crate::error::AllocError;
    use crate::mem::{Fault, MemCeilingStore};
    use seqsvr_core::SetSpec;

    fn setup() -> (Arc<MemCeilingStore>, Raiser<MemCeilingStore>) {
        let spec = SetSpec {
            set_id: 0,
            uid_begin: 0,
            uid_end: 20,
            section_size: 10,
            step: 10,
        };
        let store = Arc::new(MemCeilingStore::new(spec.clone()));
        let cfg = AllocConfig {
            raise_ahead_fraction: 0.0,
            adaptive: None,
            ..AllocConfig::default()
        };
        let alloc = Arc::new(Allocator::new(spec, &cfg).unwrap());
        (
            store.clone(),
            Raiser::new(alloc, store, RaiserConfig::default()),
        )
    }

    fn exhaust(a: &Allocator, uid: u64) {
        while a.next(uid).is_ok() {}
    }

    #[tokio::test]
    async fn take_over_skips_ahead_and_raise_lands() {
        let (store, r) = setup();
        store.steal(0); // an earlier owner had ceiling 10
        let grants = r.take_over(0, 2).await.unwrap();
        assert_eq!(
            grants[0],
            Grant {
                section: 0,
                epoch: 2,
                prev_ceiling: 10,
                max_seq: 20
            }
        );
        let a = r.allocator();
        assert_eq!(a.next(0), Ok(11));
        exhaust(a, 0);
        let report = r.run_once().await;
        assert_eq!(
            report,
            RoundReport {
                raised: 1,
                ..Default::default()
            }
        );
        assert_eq!(store.section(0).max_seq, 30);
        assert_eq!(a.next(0), Ok(21));
    }

    #[tokio::test]
    async fn stale_epoch_drops_the_section() {
        let (store, r) = setup();
        r.take_over(0, 2).await.unwrap();
        let a = r.allocator();
        exhaust(a, 3);
        store.steal(0);
        let report = r.run_once().await;
        assert_eq!(report.dropped, 1);
        assert_eq!(a.next(3), Err(AllocError::NotOwner { section: 0 }));
        assert_eq!(a.next(13), Ok(1), "other sections unaffected");
    }

    #[tokio::test]
    async fn lost_reply_is_retried_and_not_above_counts_as_success() {
        let (store, r) = setup();
        r.take_over(0, 1).await.unwrap();
        let a = r.allocator();
        exhaust(a, 0);
        store.set_fault(Fault::LoseReplies);
        let report = r.run_once().await;
        assert_eq!(report.retry, vec![0]);
        assert_eq!(store.section(0).max_seq, 20, "landed in the store");
        assert_eq!(
            a.next(0),
            Err(AllocError::Exhausted { section: 0 }),
            "but not applied"
        );
        store.set_fault(Fault::None);
        a.requeue_raises(&report.retry);
        let report = r.run_once().await;
        assert_eq!(report.raised, 1);
        assert_eq!(
            store.raises(),
            1,
            "the retry was answered NotAbove, not re-raised"
        );
        assert_eq!(a.next(0), Ok(11));
    }

    #[tokio::test]
    async fn unavailable_store_leaves_the_ceiling_alone() {
        let (store, r) = setup();
        r.take_over(0, 1).await.unwrap();
        exhaust(r.allocator(), 0);
        store.set_fault(Fault::Unavailable);
        assert_eq!(r.run_once().await.retry, vec![0]);
        assert_eq!(store.section(0).max_seq, 10);
        assert!(r.allocator().section_state(0).unwrap().raise_pending);
        assert!(matches!(
            r.take_over(1, 1).await,
            Err(AllocError::Store(StoreErr::Unavailable(_)))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn background_task_serves_waiters_through_an_outage() {
        let (store, r) = setup();
        r.take_over(0, 2).await.unwrap();
        let a = r.allocator().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        store.set_fault(Fault::Unavailable);
        let task = tokio::spawn(r.run(async {
            let _ = stopped.await;
        }));
        exhaust(&a, 5);
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move {
                a.next_waiting(5, Instant::now() + Duration::from_secs(10))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "no raise can land during the outage");
        store.set_fault(Fault::None);
        assert_eq!(waiter.await.unwrap(), Ok(11), "retried after back-off");
        stop.send(()).unwrap();
        task.await.unwrap();
    }
}
