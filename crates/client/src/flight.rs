//! Single flight: callers that need the same route refresh at the same
//! time wait for one instead of each asking the servers.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

/// One kind of refresh (all sources, or one set's stores) that runs at
/// most once at a time.
#[derive(Debug, Default)]
pub(crate) struct Flight {
    /// Held while the refresh runs.
    gate: tokio::sync::Mutex<()>,
    /// Runs completed; tells a caller that waited on `gate` that a run
    /// finished meanwhile.
    done: AtomicU64,
}

impl Flight {
    /// Runs `f`, unless a run finished while this caller waited for the
    /// one in flight (its answers are as fresh as this caller's would
    /// be): then `None`.
    pub(crate) async fn join<F: Future>(&self, f: impl FnOnce() -> F) -> Option<F::Output> {
        let seen = self.done.load(Ordering::Acquire);
        let _gate = self.gate.lock().await;
        if self.done.load(Ordering::Acquire) != seen {
            return None;
        }
        Some(self.finish(f().await))
    }

    /// Runs `f` after the run in flight, if any (a caller that asked for
    /// a refresh now wants one that started after it asked).
    pub(crate) async fn run<F: Future>(&self, f: impl FnOnce() -> F) -> F::Output {
        let _gate = self.gate.lock().await;
        self.finish(f().await)
    }

    fn finish<T>(&self, out: T) -> T {
        self.done.fetch_add(1, Ordering::AcqRel);
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn callers_arriving_together_share_one_run() {
        let flight = Arc::new(Flight::default());
        let runs = Arc::new(AtomicU32::new(0));
        let calls = (0..8).map(|_| {
            let (flight, runs) = (flight.clone(), runs.clone());
            tokio::spawn(async move {
                flight
                    .join(|| async {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    })
                    .await
                    .is_some()
            })
        });
        let ran: Vec<bool> = futures::future::join_all(calls)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        // The first runs; the rest wait for it and need no run of their own.
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{ran:?}");
        assert_eq!(ran.iter().filter(|r| **r).count(), 1);
        // Later callers run again; `run` always does.
        assert!(flight.join(|| async {}).await.is_some());
        flight.run(|| async {}).await;
        assert_eq!(flight.done.load(Ordering::SeqCst), 3);
    }
}
