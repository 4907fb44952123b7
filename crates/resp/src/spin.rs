//! Busy-polling between rounds (`spin_us` in `[resp]`; off by default):
//! after a round is answered the door's thread keeps polling its sockets
//! for up to `spin` before it sleeps, so a client's next request finds it
//! awake.
//!
//! Why: on one machine a server thread that sleeps in `epoll_wait` has to
//! be woken by every request that finds it asleep, and the wake-up is paid
//! in the client's `send` (the scheduler's wake-up of a thread on another
//! core) and in the round trip. A door faster than its clients sleeps
//! between nearly every request. Spinning trades the door's idle CPU for
//! that: while requests keep coming within `spin` of each other one core
//! stays busy; a door idle for longer than `spin` sleeps as before. Figures
//! in `docs/benchmarks.md`, the trade in `docs/operations.md`.
//!
//! How: a task of the door's runtime that yields while rounds keep being
//! answered. A yielding task keeps the runtime from sleeping: between its
//! turns the runtime polls its sockets without waiting (tokio wakes
//! yielded tasks after a non-blocking poll of its I/O driver), so
//! readiness is found by polling, not by a wake-up. Once no round has been
//! answered for `spin` the task waits on [`Activity::wake`], which the
//! next round's connection notifies.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Rounds answered, and the spinner's wake-up: what every connection of a
/// door tells the spinner.
#[derive(Debug, Default)]
pub struct Activity {
    /// Rounds answered since the door started.
    rounds: AtomicU64,
    /// Whether the spinner waits for a round (then a round notifies it).
    parked: AtomicBool,
    /// Wakes the spinner.
    wake: Notify,
    /// Times the spinner stopped spinning to wait.
    parks: AtomicU64,
}

impl Activity {
    /// A connection answered a round: keeps the spinner spinning, or
    /// wakes it. One relaxed add, and a notify only when it waits.
    pub fn round(&self) {
        self.rounds.fetch_add(1, Relaxed);
        if self.parked.load(Relaxed) {
            self.wake.notify_one();
        }
    }

    /// Whether the spinner waits now.
    pub fn parked(&self) -> bool {
        self.parked.load(Relaxed)
    }

    /// Times the spinner went to wait.
    pub fn parks(&self) -> u64 {
        self.parks.load(Relaxed)
    }
}

/// Spins while rounds are answered less than `spin` apart, waits
/// otherwise; runs until its task is dropped.
pub async fn spinner(activity: Arc<Activity>, spin: Duration) {
    let a = &*activity;
    loop {
        let mut seen = a.rounds.load(Relaxed);
        let mut last = Instant::now();
        loop {
            tokio::task::yield_now().await;
            let now = a.rounds.load(Relaxed);
            if now != seen {
                seen = now;
                last = Instant::now();
            } else if last.elapsed() >= spin {
                break;
            }
        }
        a.parked.store(true, Relaxed);
        a.parks.fetch_add(1, Relaxed);
        // A round between the check above and this one left a permit in
        // `wake` (`notify_one` stores one when nobody waits): no round is
        // missed either way.
        if a.rounds.load(Relaxed) == seen {
            a.wake.notified().await;
        }
        a.parked.store(false, Relaxed);
    }
}

/// The spinner's task, ended when dropped (the door stops).
pub struct Spinner(Option<tokio::task::JoinHandle<()>>);

impl Spinner {
    /// Starts the spinner on the current runtime when `spin` is not zero.
    pub fn start(activity: &Arc<Activity>, spin: Duration) -> Spinner {
        if spin.is_zero() {
            return Spinner(None);
        }
        Spinner(Some(tokio::spawn(spinner(activity.clone(), spin))))
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn until(what: &str, f: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !f() {
            assert!(t0.elapsed() < Duration::from_secs(5), "never {what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn spins_while_rounds_come_and_waits_once_they_stop() {
        let a = Arc::new(Activity::default());
        let _s = Spinner::start(&a, Duration::from_millis(20));
        // Idle: it waits after one spin.
        until("parked while idle", || a.parked()).await;
        let parks = a.parks();
        // Rounds 5 ms apart, for 200 ms: it never waits meanwhile.
        for _ in 0..40 {
            a.round();
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(!a.parked(), "waited while rounds came 5 ms apart");
        }
        assert_eq!(a.parks(), parks, "waited while rounds came");
        // They stop: it waits again, once.
        until("parked after the rounds stopped", || a.parked()).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(a.parks(), parks + 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn off_when_zero_and_stops_with_its_door() {
        let a = Arc::new(Activity::default());
        drop(Spinner::start(&a, Duration::ZERO));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!((a.parked(), a.parks()), (false, 0), "a spinner ran");
        let s = Spinner::start(&a, Duration::from_millis(1));
        until("parked", || a.parked()).await;
        drop(s);
        tokio::time::sleep(Duration::from_millis(5)).await;
        // Dropped while it waited: nothing left to wake.
        let before = a.parks();
        a.round();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(a.parks(), before, "the spinner outlived its door");
    }
}
