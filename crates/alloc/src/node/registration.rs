//! Start-up's dealings with the store: the incarnation each process start
//! draws, its registration (retried while a twin holds the id), and the
//! first route read.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use seqsvr_core::Incarnation;
use seqsvr_store_api::{AllocAddrs, Error as StoreError, PeerClient, Rejection};

use crate::error::NodeError;

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

/// Registers this incarnation, retrying while a twin holds the id or the
/// store cannot answer. A twin is logged as an ERROR on every attempt: two
/// processes were started with one id, and this one serves nothing until
/// the other's lease has certainly ended (promise 3).
pub(super) async fn register(
    store: &PeerClient,
    id: &str,
    incarnation: Incarnation,
    addrs: &AllocAddrs,
    every: Duration,
) -> Result<(), NodeError> {
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        match store.register_alloc(id, incarnation, addrs).await {
            Ok(_) => {
                tracing::info!(id, incarnation = %format_args!("{incarnation:x}"), "registered");
                return Ok(());
            }
            Err(StoreError::Rejected(Rejection::Twin { alloc, live, addr })) => {
                tracing::error!(
                    id = %alloc,
                    live_incarnation = %format_args!("{live:x}"),
                    live_addr = %addr,
                    attempt,
                    "another process with this AllocSvr id is live at {addr}: not serving; \
                     retrying until its lease has certainly expired (stop one of the two)"
                );
                tokio::time::sleep(every.max(Duration::from_millis(500))).await;
            }
            Err(e) if e.is_retryable() || matches!(e, StoreError::Internal(_)) => {
                tracing::warn!(id, attempt, "store not ready, retrying registration: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(NodeError::Store(e)),
        }
    }
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
