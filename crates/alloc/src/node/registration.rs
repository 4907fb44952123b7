//! Start-up's dealings with the store: the incarnation each process start
//! draws, its registration (retried while a twin holds the id), and the
//! first route read.

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use seqsvr_core::Incarnation;
use seqsvr_store_api::{AllocAddrs, Error as StoreError, PeerClient, Rejection};

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

/// Registers this incarnation, retrying while another incarnation holds
/// the id or the store cannot answer; `state` tells callers of the client
/// plane why nothing is served yet.
///
/// Another incarnation holding the id at this process's own address is
/// its previous process (a restart, a replaced pod) whose lease has not
/// run out: logged once, as a warning that says so and about how long is
/// left (from the store leader's lease view). One at another address may
/// be a second process started with the same id (a copied config): an
/// ERROR naming it, on every attempt. Either way this one serves nothing until
/// the store admits it (promise 3).
pub(super) async fn register(
    store: &PeerClient,
    id: &str,
    incarnation: Incarnation,
    addrs: &AllocAddrs,
    every: Duration,
    state: &StartState,
) -> Result<(), NodeError> {
    let mut attempt = 0u64;
    let mut told = false;
    loop {
        attempt += 1;
        match store.register_alloc(id, incarnation, addrs).await {
            Ok(_) => {
                tracing::info!(id, incarnation = %format_args!("{incarnation:x}"), "registered");
                return Ok(());
            }
            Err(StoreError::Rejected(Rejection::Twin { alloc, live, addr })) => {
                let left = lease_left(store, &alloc, live).await;
                state.set(Phase::WaitingOutLease {
                    until: Instant::now() + left.unwrap_or(every * 5),
                });
                let about = match left {
                    Some(l) => format!("about {:.1} s", l.as_secs_f64()),
                    None => "an unknown time: no store leader answered".into(),
                };
                if addr != addrs.client {
                    // Another address: perhaps a second process started
                    // with this id (a copied config). Said on every try.
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
                } else if !told {
                    // Same advertised address: this AllocSvr's own previous
                    // process (a restart, a replaced pod). Said once.
                    told = true;
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
                tokio::time::sleep(
                    every.clamp(Duration::from_millis(100), Duration::from_millis(500)),
                )
                .await;
            }
            Err(e) if e.is_retryable() || matches!(e, StoreError::Internal(_)) => {
                tracing::warn!(id, attempt, "store not ready, retrying registration: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(NodeError::Store(e)),
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

/// Reads the route table, retrying until the store answers with one that
/// can be used (the store may not be configured with its set yet).
pub(super) async fn read_routes(store: &PeerClient) -> seqsvr_core::RouteTable {
    loop {
        match store.routes().await {
            Ok(t) => return t,
            Err(e) => {
                tracing::warn!("route table not available yet, retrying: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
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
