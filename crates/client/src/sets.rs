//! How the client learns a set it has no (or a stale) table of: from the
//! set's own store replicas, which the directory lists.
//!
//! - A set's table is fetched with `StoreRead.GetRoutes` on the stores'
//!   client plane, asked in parallel (any replica answers for the group:
//!   a follower forwards to the leader), the first valid table of that set
//!   kept. One fetch per set at a time (single flight).
//! - The directory rides on every table; the home set's (set 0) is the
//!   original, every other group holds a copy. So refreshing the
//!   directory is fetching set 0's table, and, if its stores cannot be
//!   reached, a full refresh from the seeds.
//! - A uid in no directory range is final, but a client's directory may
//!   predate the set that now serves it: such a uid re-checks the
//!   directory first, at most once per [`DIRECTORY_RECHECK`], so callers
//!   passing bad uids cannot turn into a stream of store reads.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use seqsvr_core::directory::HOME_SET;
use seqsvr_core::{RouteTable, SetId};
use seqsvr_proto::store_read_client::StoreReadClient;
use seqsvr_proto::{self as pb};
use tokio::time::Instant;

use crate::client::{lock, read, request, SeqClient};
use crate::flight::Flight;

/// Least time between two directory re-checks made for uids in no range.
pub(crate) const DIRECTORY_RECHECK: Duration = Duration::from_secs(1);

impl SeqClient {
    /// Asks the store at `addr` (its client plane) for its group's table.
    pub(crate) async fn store_routes_of(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> Result<pb::RouteTable, String> {
        let mut c = StoreReadClient::new(self.channel(addr, seqsvr_net::ServerRole::AnyStore)?);
        let req = request(pb::GetRoutesRequest {}, timeout);
        match tokio::time::timeout(timeout, c.get_routes(req)).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(format!("{addr}: {:?}: {}", s.code(), s.message())),
            Err(_) => Err(format!("{addr}: no answer within {timeout:?}")),
        }
    }

    /// The single-flight gate of set `set`'s fetches.
    pub(crate) fn set_flight(&self, set: SetId) -> Arc<Flight> {
        lock(&self.inner.set_flights)
            .entry(set)
            .or_default()
            .clone()
    }

    /// Fetches set `set`'s table from its stores within `timeout` and
    /// installs it, unless a fetch finished while this caller waited for
    /// the one in flight. `Err` if no store answered with a valid table
    /// of that set (or none is known).
    pub(crate) async fn fetch_set(&self, set: SetId, timeout: Duration) -> Result<(), String> {
        let flight = self.set_flight(set);
        flight
            .join(|| self.fetch_set_now(set, timeout))
            .await
            .unwrap_or(Ok(()))
    }

    async fn fetch_set_now(&self, set: SetId, timeout: Duration) -> Result<(), String> {
        let stores = read(&self.inner.routes).stores(set).to_vec();
        if stores.is_empty() {
            return Err(format!("set {set}: no store address known"));
        }
        let mut asks: FuturesUnordered<_> = stores
            .iter()
            .map(|a| async move {
                let t = self.store_routes_of(a, timeout).await?;
                let t = RouteTable::try_from(&t).map_err(|e| format!("{a}: {e}"))?;
                if t.set.set_id != set {
                    return Err(format!(
                        "{a}: listed for set {set}, answers for set {}",
                        t.set.set_id
                    ));
                }
                Ok((a, t))
            })
            .collect();
        let mut failures = Vec::new();
        while let Some(r) = asks.next().await {
            match r {
                Ok((a, t)) => {
                    self.install_table(t, a);
                    return Ok(());
                }
                Err(e) => failures.push(e),
            }
        }
        Err(format!("set {set}: {}", failures.join("; ")))
    }

    /// Brings set `set`'s table up to date: from its stores when the
    /// directory lists them, else (or if none answers) a full refresh.
    pub(crate) async fn refresh_set(&self, set: SetId, timeout: Duration) {
        match self.fetch_set(set, timeout).await {
            Ok(()) => {}
            Err(e) => {
                tracing::debug!(error = %e, "set refresh from its stores failed");
                self.refresh_shared(timeout).await;
            }
        }
    }

    /// Brings the directory up to date, to at least `want` if that is
    /// known (see the module docs).
    pub(crate) async fn refresh_directory(&self, want: u64, timeout: Duration) {
        *lock(&self.inner.dir_checked) = Some(Instant::now());
        let home = self.fetch_set(HOME_SET, timeout).await;
        let version = read(&self.inner.routes).directory_version();
        if home.is_err() || version < want {
            tracing::debug!(version, want, ?home, "directory refresh from set 0");
            self.refresh_shared(timeout).await;
        }
    }

    /// Whether a uid in no known set is worth one more look: with a
    /// directory, when it was not re-checked lately; without one (a
    /// single-set cluster, or older servers), while some seed has never
    /// answered (its set may be the one missing).
    pub(crate) fn sets_may_be_stale(&self) -> bool {
        if read(&self.inner.routes).directory().is_none() {
            let heard = lock(&self.inner.heard);
            return self.inner.seeds.iter().any(|s| !heard.contains(s));
        }
        lock(&self.inner.dir_checked).is_none_or(|t| t.elapsed() >= DIRECTORY_RECHECK)
    }

    /// Takes that one more look (see [`SeqClient::sets_may_be_stale`]).
    pub(crate) async fn recheck_sets(&self, timeout: Duration) {
        if read(&self.inner.routes).directory().is_some() {
            self.refresh_directory(0, timeout).await;
        } else {
            self.refresh_shared(timeout).await;
        }
    }
}
