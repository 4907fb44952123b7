//! How the client reaches servers and learns route tables from seeds and
//! AllocSvrs.
//!
//! - One lazily connected tonic `Channel` per address (AllocSvr or
//!   store), cached; tonic reconnects it after failures, and clones share
//!   it. Channels are dialed the way every seqsvr client dials
//!   (`seqsvr_net::client`): TCP no-delay, HTTP/2 keepalive while calls
//!   are open, and TLS checked against the CA in `ClientOptions::tls` when
//!   it is set.
//! - Route tables come from the `Routes` RPC of seeds and of AllocSvrs the
//!   client already knows: all of them on a full refresh (after a
//!   transport failure the set's stores could not settle, or a uid in no
//!   known set), or just the one whose reply carried a newer
//!   `route_version` (in the background, off the caller's path). A seed
//!   that is a store's client plane (it answers `Routes` with
//!   `UNIMPLEMENTED`) is asked `StoreRead.GetRoutes` instead. Tables of
//!   one set, from its stores, are `sets.rs`'s.
//! - A full refresh is single-flight: callers that fail together wait for
//!   one refresh instead of each asking every AllocSvr.

use std::collections::HashSet;
use std::time::Duration;

use futures::future::join_all;
use seqsvr_core::{RouteTable, SetId};
use seqsvr_net::ServerRole;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb};
use tonic::transport::Channel;
use tonic::Code;

use crate::client::{lock, read, request, write, SeqClient};
use crate::routes::Installed;

impl SeqClient {
    /// The cached channel to `addr` for a call that needs `role` of the
    /// server, made on first use. Over TLS the server's certificate must
    /// show that role (`docs/architecture/security.md`, "Whom a client
    /// dials"): an AllocSvr's for the calls that hand out numbers, a store
    /// replica's for a set's table from its stores, either for a seed. A
    /// channel already made for a narrower role serves a wider one (one
    /// verified as an AllocSvr's serves "a store replica or an AllocSvr").
    pub(crate) fn channel(&self, addr: &str, role: ServerRole) -> Result<Channel, String> {
        let tls = self.inner.options.tls.as_ref();
        let fits = |have: ServerRole| tls.is_none() || covers(have, role);
        if let Some(d) = read(&self.inner.channels).get(addr) {
            if let Some((_, c)) = d.iter().find(|(have, _)| fits(*have)) {
                return Ok(c.clone());
            }
        }
        let o = &self.inner.options;
        let tls = tls.map(|t| t.clone().expecting(role));
        let ch = seqsvr_net::client::channel(addr, tls.as_ref(), o.connect_timeout)
            .map_err(|e| e.to_string())?;
        let mut channels = write(&self.inner.channels);
        let dialed = channels.entry(addr.to_string()).or_default();
        if let Some((_, c)) = dialed.iter().find(|(have, _)| fits(*have)) {
            return Ok(c.clone());
        }
        dialed.push((role, ch.clone()));
        Ok(ch)
    }

    /// The AllocSvr client for `addr` over its cached channel, the server
    /// verified as an AllocSvr.
    pub(crate) fn alloc(&self, addr: &str) -> Result<AllocClient<Channel>, String> {
        self.channel(addr, ServerRole::Alloc).map(AllocClient::new)
    }

    /// Installs a table a server at `from` sent, if it is valid; returns
    /// what it took (the table if newer, its directory if newer).
    pub(crate) fn install(&self, table: &pb::RouteTable, from: &str) -> Installed {
        match RouteTable::try_from(table) {
            Ok(t) => self.install_table(t, from),
            Err(e) => {
                tracing::warn!(from, error = %e, "ignoring a bad route table");
                Installed::default()
            }
        }
    }

    /// Installs `t` (see [`crate::routes::RouteCache::install`]).
    pub(crate) fn install_table(&self, t: RouteTable, from: &str) -> Installed {
        let (set_id, version) = (t.set.set_id, t.version);
        let directory = t.directory.as_ref().map_or(0, |d| d.version);
        let done = write(&self.inner.routes).install(t);
        if done.table {
            tracing::debug!(from, set_id, version, "route table installed");
        }
        if done.directory {
            tracing::debug!(from, version = directory, "directory installed");
        }
        if done.table || done.directory {
            self.prune_channels();
        }
        done
    }

    /// Drops channels to addresses that are neither seeds nor in any
    /// route or in the directory, so a client living through many moves
    /// does not leak them.
    fn prune_channels(&self) {
        let keep: HashSet<String> = {
            let routes = read(&self.inner.routes);
            let known = routes.addrs().map(str::to_string);
            self.inner.seeds.iter().cloned().chain(known).collect()
        };
        write(&self.inner.channels).retain(|a, _| keep.contains(a));
    }

    /// Asks the server at `addr` for its set's route table: `Alloc.Routes`,
    /// or `StoreRead.GetRoutes` if it is a store (no `Alloc` service).
    pub(crate) async fn routes_of(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> Result<pb::RouteTable, Failed> {
        // A seed may be a store replica or an AllocSvr; an address from a
        // route table is an AllocSvr's.
        let role = if self.inner.seeds.iter().any(|s| s == addr) {
            ServerRole::Server
        } else {
            ServerRole::Alloc
        };
        let mut c = AllocClient::new(self.channel(addr, role)?);
        let req = request(pb::GetRoutesRequest {}, timeout);
        match tokio::time::timeout(timeout, c.routes(req)).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) if s.code() == Code::Unimplemented => {
                Ok(self.store_routes_of(addr, timeout).await?)
            }
            Ok(Err(s)) => Err(Failed {
                message: format!("{addr}: {:?}: {}", s.code(), s.message()),
                // A starting AllocSvr says when to ask again.
                retry_after: seqsvr_proto::detail_of(&s)
                    .map_or(Duration::ZERO, |d| Duration::from_millis(d.retry_after_ms)),
            }),
            Err(_) => Err(format!("{addr}: no answer within {timeout:?}").into()),
        }
    }

    /// Asks every seed and known AllocSvr for routes, in parallel, and
    /// installs what they send. Returns how many answered with a valid
    /// table, the failures, and the longest delay a source asked for
    /// before the next try (zero if none did).
    pub(crate) async fn fetch_all(&self, timeout: Duration) -> (usize, Vec<String>, Duration) {
        let sources = self.sources();
        let calls = sources.iter().map(|a| async move {
            let t = self.routes_of(a, timeout).await?;
            let t = RouteTable::try_from(&t).map_err(|e| Failed::from(format!("{a}: {e}")))?;
            self.install_table(t, a);
            if self.inner.seeds.contains(a) {
                lock(&self.inner.heard).insert(a.clone());
            }
            Ok::<_, Failed>(())
        });
        let results = join_all(calls).await;
        let answered = results.iter().filter(|r| r.is_ok()).count();
        let failed: Vec<Failed> = results.into_iter().filter_map(Result::err).collect();
        let retry_after = failed.iter().map(|f| f.retry_after).max();
        let failures = failed.into_iter().map(|f| f.message).collect();
        (answered, failures, retry_after.unwrap_or_default())
    }

    /// A full refresh within `timeout`, unless one finished while this
    /// caller waited for the one in flight (its answers are as fresh).
    pub(crate) async fn refresh_shared(&self, timeout: Duration) {
        let done = self.inner.full.join(|| self.fetch_all(timeout)).await;
        if let Some((answered, failures, _)) = done {
            if !failures.is_empty() {
                tracing::debug!(answered, ?failures, "route refresh: some sources failed");
            }
        }
    }

    /// Seeds first, then every AllocSvr in a cached route, without repeats.
    fn sources(&self) -> Vec<String> {
        let routes = read(&self.inner.routes);
        let mut seen = HashSet::new();
        let known = routes.allocs().map(str::to_string);
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
    pub(crate) fn note_version(&self, set_id: SetId, cached: u64, replied: u64, addr: &str) {
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

    /// After a refusal from `addr` naming route `version` of set `set`:
    /// if the cached table of `set` is older, asks `addr` for its table
    /// and installs it (one fetch per set at a time; a caller that waited
    /// for another's fetch does not repeat it). Returns whether the cached
    /// table was older and now is at least `version`: the routes changed.
    pub(crate) async fn fetch_newer(
        &self,
        set: SetId,
        version: u64,
        addr: &str,
        timeout: Duration,
    ) -> bool {
        let fresh = || {
            read(&self.inner.routes)
                .version(set)
                .is_some_and(|v| v >= version)
        };
        if version == 0 || fresh() {
            return false;
        }
        self.set_flight(set)
            .join(|| async {
                match self.routes_of(addr, timeout).await {
                    Ok(t) => {
                        self.install(&t, addr);
                    }
                    Err(e) => {
                        tracing::debug!(addr, error = %e, "route fetch after a refusal failed")
                    }
                }
            })
            .await;
        fresh()
    }

    /// A copy of every cached route table.
    pub(crate) fn tables(&self) -> Vec<RouteTable> {
        read(&self.inner.routes).tables()
    }
}

/// A route fetch that failed: why, and how long the source asked the
/// caller to wait before asking again (zero: it did not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failed {
    /// What went wrong, with the address.
    pub message: String,
    /// The delay the source asked for (`NOT_SERVING_YET`).
    pub retry_after: Duration,
}

impl From<String> for Failed {
    fn from(message: String) -> Self {
        Failed {
            message,
            retry_after: Duration::ZERO,
        }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Whether a channel whose server was verified as `have` may carry a call
/// that needs `want`.
fn covers(have: ServerRole, want: ServerRole) -> bool {
    have == want
        || match want {
            ServerRole::Server => true,
            ServerRole::AnyStore => matches!(have, ServerRole::Store(_)),
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::covers;
    use seqsvr_net::ServerRole::*;

    #[test]
    fn a_narrower_verification_serves_a_wider_need() {
        // (verified as, needed, may serve)
        let table = [
            (Alloc, Alloc, true),
            (Alloc, Server, true),
            (Store(1), Server, true),
            (Store(1), AnyStore, true),
            (AnyStore, Server, true),
            (Server, Alloc, false),
            (Server, AnyStore, false),
            (AnyStore, Alloc, false),
            (Alloc, AnyStore, false),
            (AnyStore, Store(1), false),
        ];
        for (have, want, ok) in table {
            assert_eq!(covers(have, want), ok, "{have:?} for {want:?}");
        }
    }
}
