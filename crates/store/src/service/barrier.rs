//! One linearizable barrier in flight, shared by every caller that
//! arrived before it started.
//!
//! A linearizable read (a route table, sections, a renewal's grant) needs
//! a barrier that *started after the read arrived*: the leader confirms
//! its leadership with a quorum and applies everything its log held at
//! that moment, so every write acknowledged before the read arrived is
//! seen (promise 1). A barrier costs one round of AppendEntries to every
//! voter. Run one per call and a flood of cheap reads from anyone who can
//! reach the client plane queues renewals behind it, into lease lapses,
//! which the threat model rules out (`docs/architecture/security.md`).
//!
//! So barriers are coalesced: while one runs, every caller that arrives
//! waits for the *next* one, which starts as soon as the running one ends
//! and serves all of them. However many reads arrive, at most one barrier
//! runs and one waits; a caller waits for at most the rest of the running
//! barrier and one whole barrier. The barrier runs in a task of its own,
//! so a caller that gives up does not cancel it for the others.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use seqsvr_store_api::Error;
use tokio::sync::watch;

/// Runs one barrier.
pub type BarrierFn =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send>> + Send + Sync>;

/// Coalesces barriers; cheap to clone (shared).
#[derive(Clone)]
pub struct Barriers {
    inner: Arc<Inner>,
}

struct Inner {
    /// What one barrier is.
    run: BarrierFn,
    /// Which barriers have started and whether more are wanted.
    state: Mutex<State>,
    /// The generation of the last barrier that finished, and its outcome.
    done: watch::Sender<(u64, Result<(), Error>)>,
}

#[derive(Default)]
struct State {
    /// The generation of the latest barrier started (0: none yet).
    started: u64,
    /// Whether a barrier is running.
    running: bool,
    /// Whether a caller arrived while it ran (the next one is wanted).
    wanted: bool,
}

impl Barriers {
    /// Coalesces barriers run by `run`.
    pub fn new(run: BarrierFn) -> Self {
        let (done, _) = watch::channel((0, Ok(())));
        Self {
            inner: Arc::new(Inner {
                run,
                state: Mutex::new(State::default()),
                done,
            }),
        }
    }

    /// Returns once a barrier that started after this call began has
    /// finished, with its outcome.
    pub async fn barrier(&self) -> Result<(), Error> {
        let mut rx = self.inner.done.subscribe();
        let target = {
            let mut s = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            if s.running {
                s.wanted = true;
                s.started + 1
            } else {
                s.started += 1;
                s.running = true;
                let first = s.started;
                tokio::spawn(drive(self.inner.clone(), first));
                first
            }
        };
        let done = rx
            .wait_for(|(generation, _)| *generation >= target)
            .await
            .map_err(|_| Error::Internal("read barrier: the driver stopped".into()))?;
        done.1.clone()
    }

    /// How many barriers have started: the cost, whatever the callers.
    pub fn started(&self) -> u64 {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .started
    }
}

/// Runs barrier `generation`, then the next while callers want one.
async fn drive(inner: Arc<Inner>, mut generation: u64) {
    loop {
        let outcome = (inner.run)().await;
        let _previous = inner.done.send_replace((generation, outcome));
        let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.wanted {
            s.wanted = false;
            s.started += 1;
            generation = s.started;
        } else {
            s.running = false;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;
    use tokio::time::Instant;

    /// A barrier that takes 10 ms and records when each one started and
    /// ended.
    type Runs = Arc<Mutex<Vec<(Instant, Option<Instant>)>>>;

    fn counted() -> (Barriers, Runs) {
        let runs: Runs = Arc::default();
        let r = runs.clone();
        let run: BarrierFn = Arc::new(move || {
            let r = r.clone();
            let i = {
                let mut v = r.lock().unwrap();
                v.push((Instant::now(), None));
                v.len() - 1
            };
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                r.lock().unwrap()[i].1 = Some(Instant::now());
                Ok(())
            })
        });
        (Barriers::new(run), runs)
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_shares_barriers_and_each_caller_gets_one_started_after_it_arrived() {
        let (b, runs) = counted();
        let mut calls = Vec::new();
        for i in 0..1000u64 {
            let b = b.clone();
            let runs = runs.clone();
            calls.push(tokio::spawn(async move {
                // Arrive spread over 50 ms, a few at the same instant.
                tokio::time::sleep(Duration::from_micros(i / 3 * 150)).await;
                let arrived = Instant::now();
                b.barrier().await.unwrap();
                // A barrier that started at or after arrival has finished.
                let v = runs.lock().unwrap();
                assert!(
                    v.iter()
                        .any(|&(start, end)| start >= arrived && end.is_some()),
                    "no finished barrier started after {arrived:?}"
                );
            }));
        }
        for c in calls {
            c.await.unwrap();
        }
        // 50 ms of arrivals, 10 ms a barrier: about 6, never 1000.
        let n = b.started();
        assert!((5..=7).contains(&n), "{n} barriers for 1000 reads");
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_gives_up_cancels_nothing_and_errors_reach_everyone() {
        let failures = Arc::new(AtomicU64::new(0));
        let f = failures.clone();
        let run: BarrierFn = Arc::new(move || {
            let f = f.clone();
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                if f.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(Error::NoLeader("quorum not reached".into()))
                } else {
                    Ok(())
                }
            })
        });
        let b = Barriers::new(run);
        // One caller gives up after 1 ms; the barrier still runs for the rest.
        let quitter = b.clone();
        let _ = tokio::time::timeout(Duration::from_millis(1), quitter.barrier()).await;
        let e = b.barrier().await;
        // The first barrier failed; this caller arrived while it ran and
        // waits for the second, which succeeds.
        assert!(e.is_ok(), "{e:?}");
        assert_eq!(b.started(), 2);
        // A caller arriving alone starts a third.
        b.barrier().await.unwrap();
        assert_eq!(b.started(), 3);
    }
}
