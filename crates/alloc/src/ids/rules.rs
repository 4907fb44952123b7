//! The pure part of an id holding (docs/ids.md, "On the AllocSvr"): the
//! generator a claim starts, one issue under the generator's lock, what a
//! raise's answer does, how often the ceiling is looked at, and the typed
//! error of a refusal. No clock is read and nothing waits here: the node
//! ([`IdWorkers`](super::IdWorkers)) and the seeded simulation
//! (`crates/sim`) both call these, with their own clocks and timers.

use std::time::Duration;

use seqsvr_core::ids::{GenStats, Generator, IdError};
use seqsvr_store_api::ids::Claimed;
use seqsvr_store_api::{Error as StoreError, IdRefusal, Rejection};

use crate::error::CallError;

/// The generator of a claimed holding and its window in ticks. It starts
/// at the claim's floor (the ceiling before the claim plus one), so its
/// first tick is `max(clock, ceiling + 1)` whatever its clock says
/// (docs/ids.md, guarantee 2: a successor starts above its predecessor).
pub fn start(claimed: &Claimed) -> Result<(Generator, u64), IdError> {
    let g = claimed.grant;
    let layout = claimed.layout;
    let window = layout.ticks_in(claimed.window_ms).max(1);
    // Borrowing is bounded by the window: ids run at most a window ahead
    // of the clock before a call is refused as clock-behind.
    let gen = Generator::new(layout, g.worker, g.floor, g.ceiling, window)?;
    Ok((gen, window))
}

/// What one issue did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The ids, strictly increasing, or the generator's refusal.
    pub result: Result<Vec<u64>, IdError>,
    /// The ceiling is less than half a window ahead: wake the raiser.
    pub wants_raise: bool,
    /// The generator's counters before the issue (for the metrics).
    pub before: GenStats,
    /// And after it.
    pub after: GenStats,
}

/// Up to `n` ids from `gen` at Unix time `now_ms` (fewer only when a limit
/// was reached after the first), and whether the raiser should be woken.
/// Never above the ceiling `gen` knows, which only a raise the store
/// acknowledged moves (guarantee 1: a successor starts above it).
pub fn issue(gen: &mut Generator, window: u64, now_ms: u64, n: usize) -> Issued {
    let before = gen.stats();
    let mut out = Vec::with_capacity(n);
    let result = gen.next_n(now_ms, n, &mut out).map(|()| out);
    let wants_raise = gen.wants_raise(now_ms, window).is_some();
    Issued {
        result,
        wants_raise,
        before,
        after: gen.stats(),
    }
}

/// Whether a holding may issue: the store last confirmed it ours (its
/// claim, or a raise it answered) under the lease-lapse count `lapses_now`.
/// After a lapse the store may have reclaimed the worker id (it does so
/// only once the lease has certainly expired) while this process, paused
/// or cut off, did not hear of it; a renewal then makes the lease valid
/// again, but not the holding: until a raise — fenced by holder and epoch
/// — is answered, the process would issue from a worker id another holds
/// (two holders at once, and ids of one worker id out of order in real
/// time; docs/ids.md, guarantee 2).
pub fn confirmed(confirmed_at: u64, lapses_now: u64) -> bool {
    confirmed_at == lapses_now
}

/// The ceiling the raiser asks for: what the generator wants
/// (`max(clock, last) + window` when less than half a window is left),
/// or, for a holding not confirmed since the last lapse, the ceiling it
/// has — a raise that changes nothing, but that the store answers only to
/// the holder at its epoch.
pub fn raise_target(gen: &Generator, now_ms: u64, window: u64, confirmed: bool) -> Option<u64> {
    (gen.wants_raise(now_ms, window)).or((!confirmed).then(|| gen.ceiling()))
}

/// The lapse count a raise answered `Ok` confirms the holding at: the
/// count when it was sent, if no lapse came since.
pub fn confirms(sent_at: u64, lapses_now: u64) -> Option<u64> {
    (sent_at == lapses_now).then_some(sent_at)
}

/// What a raise's answer does to a holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaiseSettled {
    /// The store acknowledged this ceiling (durable): it may be used.
    Raised(u64),
    /// This incarnation no longer holds the worker id (fenced, replaced,
    /// reclaimed after its lease certainly expired): nothing more may be
    /// issued from it.
    Lost,
    /// No answer, or a transient refusal: try again after a back-off; the
    /// ceiling stays where the store last acknowledged it.
    Retry,
}

/// Settles a raise's answer.
pub fn settle_raise(answer: Result<u64, &StoreError>) -> RaiseSettled {
    match answer {
        Ok(ceiling) => RaiseSettled::Raised(ceiling),
        Err(StoreError::Rejected(
            Rejection::Ids {
                kind: IdRefusal::NotHolder,
                ..
            }
            | Rejection::StaleIncarnation { .. }
            | Rejection::NotRegistered { .. },
        )) => RaiseSettled::Lost,
        Err(_) => RaiseSettled::Retry,
    }
}

/// How often the raiser looks at a holding's ceiling: every quarter
/// window, within 5 ms and 1 s.
pub fn raise_interval(window: u64, unit_ms: u64) -> Duration {
    let window_ms = window.saturating_mul(unit_ms);
    Duration::from_millis((window_ms / 4).clamp(5, 1000))
}

/// The first back-off after a failed raise.
pub const RAISE_BACKOFF_MIN: Duration = Duration::from_millis(10);

/// The back-off after `backoff` failed again: doubled, at most the
/// raiser's interval (and at least 100 ms).
pub fn next_backoff(backoff: Duration, every: Duration) -> Duration {
    (backoff * 2).min(every.max(Duration::from_millis(100)))
}

/// The typed error of a generator's refusal in namespace `ns` (a layout
/// of `unit_ms` ticks): `CLOCK_BEHIND` with how far behind, never a wait.
pub fn refusal(ns: &str, unit_ms: u64, e: IdError) -> CallError {
    match e {
        IdError::ClockBehind { behind_ms } => CallError::ClockBehind {
            namespace: ns.into(),
            behind_ms,
        },
        IdError::CeilingReached { .. } => CallError::IdCeiling {
            namespace: ns.into(),
            retry_after_ms: unit_ms.max(10),
        },
        IdError::TimeExhausted { .. } => CallError::Store(StoreError::Rejected(Rejection::Ids {
            namespace: ns.into(),
            kind: IdRefusal::TimeExhausted,
            reason: e.to_string(),
        })),
        other => CallError::Internal(other.to_string()),
    }
}
