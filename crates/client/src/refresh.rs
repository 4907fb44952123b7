//! How the client reaches AllocSvrs and learns their route tables.
//!
//! - One lazily connected tonic `Channel` per AllocSvr address, cached;
//!   tonic reconnects it after failures, and clones share it. Channels are
//!   dialed the way every seqsvr client dials (`seqsvr_net::client`): TCP
//!   no-delay, HTTP/2 keepalive while calls are open, and TLS checked
//!   against the CA in `ClientOptions::tls` when it is set.
//! - Route tables come from the `Routes` RPC of seeds and of AllocSvrs the
//!   client already knows: all of them on a full refresh (after a transport
//!   failure or an unowned section), or just the one whose reply carried a
//!   newer `route_version` (in the background, off the caller's path).
//! - A full refresh is single-flight: callers that fail together wait for
//!   one refresh instead of each asking every AllocSvr.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::join_all;
use seqsvr_core::RouteTable;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb};
use tonic::transport::Channel;

use crate::client::{lock, read, write, SeqClient};

impl SeqClient {
    /// The cached gRPC client for `addr`, made on first use.
    pub(crate) fn alloc(&self, addr: &str) -> Result<AllocClient<Channel>, String> {
        if let Some(c) = read(&self.inner.channels).get(addr) {
            return Ok(c.clone());
        }
        let o = &self.inner.options;
        let ch = seqsvr_net::client::channel(addr, o.tls.as_ref(), o.connect_timeout)
            .map_err(|e| e.to_string())?;
        let mut channels = write(&self.inner.channels);
        Ok(channels
            .entry(addr.to_string())
            .or_insert_with(|| AllocClient::new(ch))
            .clone())
    }

    /// Installs a table an AllocSvr at `from` sent, if it is valid and
    /// newer than the cached one; returns whether it was installed.
    pub(crate) fn install(&self, table: &pb::RouteTable, from: &str) -> bool {
        match RouteTable::try_from(table) {
            Ok(t) => self.install_table(t, from),
            Err(e) => {
                tracing::warn!(from, error = %e, "ignoring a bad route table");
                false
            }
        }
    }

    /// Installs `t` if it is newer than the cached table of its set.
    fn install_table(&self, t: RouteTable, from: &str) -> bool {
        let (set_id, version) = (t.set.set_id, t.version);
        if !write(&self.inner.routes).install(t) {
            return false;
        }
        tracing::debug!(from, set_id, version, "route table installed");
        self.prune_channels();
        true
    }

    /// Drops channels to addresses that are neither seeds nor in any
    /// route, so a client living through many moves does not leak them.
    fn prune_channels(&self) {
        let keep: HashSet<String> = {
            let routes = read(&self.inner.routes);
            let known = routes.addrs().map(str::to_string);
            self.inner.seeds.iter().cloned().chain(known).collect()
        };
        write(&self.inner.channels).retain(|a, _| keep.contains(a));
    }

    /// Asks the AllocSvr at `addr` for its set's route table.
    pub(crate) async fn routes_of(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> Result<pb::RouteTable, String> {
        let mut c = self.alloc(addr)?;
        let mut req = tonic::Request::new(pb::GetRoutesRequest {});
        req.set_timeout(timeout);
        match tokio::time::timeout(timeout, c.routes(req)).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(format!("{addr}: {:?}: {}", s.code(), s.message())),
            Err(_) => Err(format!("{addr}: no answer within {timeout:?}")),
        }
    }

    /// Asks every seed and known AllocSvr for routes, in parallel, and
    /// installs what they send. Returns how many answered with a valid
    /// table, and the failures.
    pub(crate) async fn fetch_all(&self, timeout: Duration) -> (usize, Vec<String>) {
        let sources = self.sources();
        let calls = sources.iter().map(|a| async move {
            let t = self.routes_of(a, timeout).await?;
            let t = RouteTable::try_from(&t).map_err(|e| format!("{a}: {e}"))?;
            self.install_table(t, a);
            if self.inner.seeds.contains(a) {
                lock(&self.inner.heard).insert(a.clone());
            }
            Ok::<_, String>(())
        });
        let results = join_all(calls).await;
        let answered = results.iter().filter(|r| r.is_ok()).count();
        let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        self.inner.refreshes.fetch_add(1, Ordering::AcqRel);
        (answered, failures)
    }

    /// A full refresh within `timeout`, unless one finished while this
    /// caller waited for the one in flight (its answers are as fresh).
    pub(crate) async fn refresh_shared(&self, timeout: Duration) {
        let seen = self.inner.refreshes.load(Ordering::Acquire);
        let _gate = self.inner.refresh_gate.lock().await;
        if self.inner.refreshes.load(Ordering::Acquire) != seen {
            return;
        }
        let (answered, failures) = self.fetch_all(timeout).await;
        if !failures.is_empty() {
            tracing::debug!(answered, ?failures, "route refresh: some sources failed");
        }
    }

    /// Seeds first, then every AllocSvr in a cached route, without repeats.
    fn sources(&self) -> Vec<String> {
        let routes = read(&self.inner.routes);
        let mut seen = HashSet::new();
        let known = routes.addrs().map(str::to_string);
        self.inner
            .seeds
            .iter()
            .cloned()
            .chain(known)
            .filter(|a| seen.insert(a.clone()))
            .collect()
    }

    /// Notes the `route_version` of an OK reply from `addr` for a call
    /// routed with `cached`: if it is newer, fetches that AllocSvr's table
    /// in the background (one fetch per set at a time), so this call is
    /// not delayed and the next ones go to the right owners.
    pub(crate) fn note_version(&self, set_id: u32, cached: u64, replied: u64, addr: &str) {
        if replied <= cached || !lock(&self.inner.refreshing).insert(set_id) {
            return;
        }
        let this = self.clone();
        let addr = addr.to_string();
        let timeout = self.inner.options.attempt_timeout;
        tokio::spawn(async move {
            match this.routes_of(&addr, timeout).await {
                Ok(t) => {
                    this.install(&t, &addr);
                }
                Err(e) => tracing::debug!(error = %e, "background route refresh failed"),
            }
            lock(&this.inner.refreshing).remove(&set_id);
        });
    }

    /// A copy of every cached route table.
    pub(crate) fn tables(&self) -> Vec<RouteTable> {
        read(&self.inner.routes).tables()
    }
}
