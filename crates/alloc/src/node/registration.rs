//! Start-up's dealings with the store: the incarnation each process start
//! draws, its registration (tried again while a twin holds the id), and
//! the first route read, in the order the control loop gives
//! ([`Control`], `control/start.rs`).

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use seqsvr_core::{Incarnation, RouteTable};
use seqsvr_store_api::{AllocAddrs, Error as StoreError, PeerClient, Rejection};

use crate::control::{Control, Effect, Event, RegisterAnswer};
use crate::error::NodeError;

use super::gate::{Phase, StartState};

/// Draws this process's incarnation: random, non-zero. The hasher's keys
/// come from the operating system's randomness once per process; the
/// clock and process id only make two draws in one process differ.
pub fn fresh_incarnation() -> Incarnation {
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        h.write_u128(now.as_nanos());
        h.write_u32(std::process::id());
        let v = h.finish();
        if v != 0 {
            return v;
        }
    }
}

/// Performs start-up as the control loop orders it ([`Event::Start`] to
/// [`Event::StartRoutesRead`]): registers this incarnation — tried again
/// while another incarnation holds the id or the store cannot answer —
/// then reads the route table; `state` tells callers of the client plane
/// why nothing is served yet. Returns the table the allocator is built
/// from and the first renewal's effects, left for the node to perform
/// once it is built.
///
/// Fails on a registration the store refuses for good (other than a
/// twin): promise 3 holds either way, nothing is served.
pub(super) async fn start_up(
    store: &PeerClient,
    control: &mut Control,
    id: &str,
    incarnation: Incarnation,
    addrs: &AllocAddrs,
    state: &StartState,
) -> Result<(RouteTable, Vec<Effect>), NodeError> {
    let start = Event::Start {
        alloc: id.to_string(),
        incarnation,
    };
    let mut todo: VecDeque<Effect> = control.on(Instant::now(), start).into();
    let mut log = Registration {
        every: control.renew_every(),
        ..Registration::default()
    };
    let mut routes = None;
    while let Some(effect) = todo.pop_front() {
        let event = match effect {
            Effect::Register => {
                let answer = store.register_alloc(id, incarnation, addrs).await;
                Event::Registered(
                    log.answer(store, id, incarnation, addrs, answer, state)
                        .await,
                )
            }
            Effect::ReadStartRoutes => {
                state.set(Phase::Registering);
                routes = read_routes(store).await;
                Event::StartRoutesRead {
                    ok: routes.is_some(),
                }
            }
            Effect::SetTimer { timer, at } => {
                tokio::time::sleep_until(at.into()).await;
                Event::Due { timer, at }
            }
            Effect::GiveUp => {
                let e = log.refused.take().expect("the refusal given up on");
                return Err(NodeError::Store(e));
            }
            first => {
                // The first renewal: performed once the node is built.
                let routes = routes.take().expect("the routes, read before any renewal");
                state.set(Phase::Claiming);
                let mut effects = vec![first];
                effects.extend(todo);
                return Ok((routes, effects));
            }
        };
        todo.extend(control.on(Instant::now(), event));
    }
    unreachable!("start-up ends with the first renewal or a refusal")
}

/// What start-up's registration attempts said, for the logs.
#[derive(Default)]
struct Registration {
    /// Attempts so far.
    attempt: u64,
    /// The warning about this AllocSvr's previous process was logged.
    told: bool,
    /// The refusal for good, if any.
    refused: Option<StoreError>,
    /// The renewal interval (what a twin's wait is guessed from when no
    /// store leader says).
    every: Duration,
}

impl Registration {
    /// Maps the store's answer for the control loop and says what it
    /// means: a twin at this process's own address is its previous process
    /// (a restart, a replaced pod) whose lease has not run out, logged once
    /// as a warning with about how long is left (from the store leader's
    /// lease view); one at another address may be a second process started
    /// with the same id (a copied config), an ERROR on every attempt.
    async fn answer(
        &mut self,
        store: &PeerClient,
        id: &str,
        incarnation: Incarnation,
        addrs: &AllocAddrs,
        answer: Result<impl Sized, StoreError>,
        state: &StartState,
    ) -> RegisterAnswer {
        self.attempt += 1;
        let attempt = self.attempt;
        match answer {
            Ok(_) => {
                tracing::info!(id, incarnation = %format_args!("{incarnation:x}"), "registered");
                RegisterAnswer::Ok
            }
            Err(StoreError::Rejected(Rejection::Twin { alloc, live, addr })) => {
                let left = lease_left(store, &alloc, live).await;
                state.set(Phase::WaitingOutLease {
                    until: Instant::now() + left.unwrap_or(self.every * 5),
                });
                let about = match left {
                    Some(l) => format!("about {:.1} s", l.as_secs_f64()),
                    None => "an unknown time: no store leader answered".into(),
                };
                if addr != addrs.client {
                    tracing::error!(
                        id = %alloc,
                        live_incarnation = %format_args!("{live:x}"),
                        live_addr = %addr,
                        attempt,
                        "another process with this AllocSvr id is live at {addr} (its \
                         lease ends in {about}): not serving until then; expected if it is \
                         this AllocSvr's previous process at another address, otherwise \
                         stop one of the two"
                    );
                } else if !std::mem::replace(&mut self.told, true) {
                    tracing::warn!(
                        id = %alloc,
                        previous_incarnation = %format_args!("{live:x}"),
                        previous_addr = %addr,
                        "the previous incarnation of this AllocSvr still holds the id \
                         (or another process started with this config): waiting out its \
                         lease ({about}) before serving; clients are answered \
                         NOT_SERVING_YET meanwhile"
                    );
                } else {
                    tracing::debug!(id = %alloc, attempt, ?left, "still waiting out the previous incarnation's lease");
                }
                RegisterAnswer::Twin
            }
            Err(e) if e.is_retryable() || matches!(e, StoreError::Internal(_)) => {
                tracing::warn!(id, attempt, "store not ready, retrying registration: {e}");
                RegisterAnswer::Unavailable
            }
            Err(e) => {
                self.refused = Some(e);
                RegisterAnswer::Refused
            }
        }
    }
}

/// How long the lease of `alloc`'s incarnation `live` may still run, as
/// the store leader sees it (lease + margin after its last grant); `None`
/// if no leader answers or it has no grant of it.
async fn lease_left(store: &PeerClient, alloc: &str, live: Incarnation) -> Option<Duration> {
    let status = store.leader_status().await?;
    let a = status
        .allocs
        .iter()
        .find(|a| a.alloc_id == alloc && a.incarnation == live)?;
    if a.expired {
        return Some(Duration::ZERO);
    }
    let since = u64::try_from(a.since_grant_ms).ok()?;
    let ends = status.lease_ms + status.margin_ms;
    Some(Duration::from_millis(ends.saturating_sub(since)))
}

/// Reads the route table (the store may not be configured with its set
/// yet: the control loop tries again).
async fn read_routes(store: &PeerClient) -> Option<RouteTable> {
    match store.routes().await {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!("route table not available yet, retrying: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incarnations_are_non_zero_and_differ() {
        let a = fresh_incarnation();
        let b = fresh_incarnation();
        assert!(a != 0 && b != 0 && a != b);
    }
}
