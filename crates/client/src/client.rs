//! [`SeqClient`]: connecting, single-uid calls and the retry driver.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use seqsvr_core::RouteTable;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb};
use tonic::transport::Channel;

use crate::error::{Error, Result};
use crate::options::ClientOptions;
use crate::retry::{classify, Attempt, Failure, Retry};
use crate::routes::{Lookup, RouteCache, Target};

/// A client of one or more seqsvr sets. Cheap to clone (clones share
/// routes and connections); `Send + Sync`, so one per process is enough.
#[derive(Clone)]
pub struct SeqClient {
    /// Everything clones share.
    pub(crate) inner: Arc<Inner>,
}

/// The shared state of a [`SeqClient`].
pub(crate) struct Inner {
    /// Addresses given at connect; always asked on a full refresh, so the
    /// client can find its way back even if every cached route is dead.
    pub(crate) seeds: Vec<String>,
    /// Deadlines and backoff.
    pub(crate) options: ClientOptions,
    /// The route table of every known set. A std lock: it is held only to
    /// look up or swap a table, never across an await.
    pub(crate) routes: RwLock<RouteCache>,
    /// One gRPC client (over one HTTP/2 channel) per AllocSvr address.
    pub(crate) channels: RwLock<HashMap<String, AllocClient<Channel>>>,
    /// Held while a full route refresh runs (single-flight).
    pub(crate) refresh_gate: tokio::sync::Mutex<()>,
    /// Full refreshes completed; tells a waiter on `refresh_gate` that the
    /// refresh it waited for already happened.
    pub(crate) refreshes: AtomicU64,
    /// Sets with a background refresh in flight (one at a time per set).
    pub(crate) refreshing: Mutex<HashSet<u32>>,
    /// Seeds that have answered `Routes` at least once. A seed never heard
    /// from may be the only way to a whole set, so until all are heard a
    /// uid in no known set is worth one refresh before `OutOfRange`.
    pub(crate) heard: Mutex<HashSet<String>>,
}

/// Which single-uid RPC to make.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// `Next`: hand out a new number.
    Next,
    /// `Current`: read the last one.
    Current,
}

impl SeqClient {
    /// Connects to the AllocSvrs at `seeds` (their client-plane `host:port`,
    /// of one or more sets; over TLS if `options.tls` is set) and learns
    /// every set's route table from them. Fails with
    /// [`Error::InvalidArgument`] for bad seeds or options, and with
    /// [`Error::Transport`] if no seed answered within the deadline.
    pub async fn connect(seeds: &[String], options: ClientOptions) -> Result<SeqClient> {
        options.validate()?;
        if seeds.is_empty() {
            return Err(Error::InvalidArgument("no seed addresses".into()));
        }
        for s in seeds {
            seqsvr_net::client::endpoint(s, options.tls.as_ref(), options.connect_timeout)
                .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        }
        let client = SeqClient::new(seeds, options);
        client.learn_routes().await?;
        Ok(client)
    }

    /// A client with no routes yet.
    fn new(seeds: &[String], options: ClientOptions) -> Self {
        let inner = Inner {
            seeds: seeds.to_vec(),
            options,
            routes: RwLock::default(),
            channels: RwLock::default(),
            refresh_gate: tokio::sync::Mutex::new(()),
            refreshes: AtomicU64::new(0),
            refreshing: Mutex::default(),
            heard: Mutex::default(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Asks the seeds for routes until one answers or the deadline passes.
    async fn learn_routes(&self) -> Result<()> {
        let mut retry = Retry::new(&self.inner.options);
        loop {
            let (answered, failures) = self.fetch_all(retry.attempt_timeout()).await;
            if answered > 0 {
                return Ok(());
            }
            retry.pause().await;
            if retry.expired() {
                return Err(Error::Transport(format!(
                    "no seed answered with a route table: {}",
                    failures.join("; ")
                )));
            }
        }
    }

    /// Hands out the next sequence number of `uid`: larger than every
    /// number any earlier completed `next(uid)` returned (promise 1).
    pub async fn next(&self, uid: u64) -> Result<u64> {
        self.single(uid, Op::Next).await
    }

    /// The last number handed out for `uid` (or the skip-ahead point after
    /// a take-over), without handing out a new one.
    pub async fn current(&self, uid: u64) -> Result<u64> {
        self.single(uid, Op::Current).await
    }

    /// Asks every seed and known AllocSvr for its route table now and
    /// keeps the newest per set. Failures are logged, not returned: the
    /// cached routes stay usable and calls refresh again when they must.
    pub async fn refresh_routes(&self) {
        let timeout = self.inner.options.attempt_timeout;
        let _gate = self.inner.refresh_gate.lock().await;
        let (answered, failures) = self.fetch_all(timeout).await;
        if !failures.is_empty() {
            tracing::debug!(answered, ?failures, "route refresh: some sources failed");
        }
    }

    /// The cached route version of set `set_id`, if the set is known.
    pub fn route_version(&self, set_id: u32) -> Option<u64> {
        read(&self.inner.routes).version(set_id)
    }

    /// A copy of every cached route table, ordered by the sets' first uid.
    pub fn route_tables(&self) -> Vec<RouteTable> {
        self.tables()
    }

    /// The options this client was made with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// Runs a single-uid call with retries until it succeeds, fails for
    /// good, or runs out of time.
    async fn single(&self, uid: u64, op: Op) -> Result<u64> {
        let mut retry = Retry::new(&self.inner.options);
        loop {
            match self.try_single(uid, op, retry.attempt_timeout()).await {
                Ok(seq) => return Ok(seq),
                Err(f) => self.recover(&mut retry, f).await?,
            }
        }
    }

    /// One attempt of a single-uid call at the uid's cached owner.
    async fn try_single(&self, uid: u64, op: Op, timeout: Duration) -> Attempt<u64> {
        let target = self.target(uid)?;
        let mut c = self
            .alloc(&target.addr)
            .map_err(|message| Failure::Transport { message })?;
        let call = async {
            match op {
                Op::Next => c
                    .next(request(pb::NextRequest { uid }, timeout))
                    .await
                    .map(|r| (r.get_ref().seq, r.get_ref().route_version)),
                Op::Current => c
                    .current(request(pb::CurrentRequest { uid }, timeout))
                    .await
                    .map(|r| (r.get_ref().seq, r.get_ref().route_version)),
            }
        };
        let reply = tokio::time::timeout(timeout, call).await;
        let (seq, replied) = self.outcome(reply, &target, &[uid], timeout)?;
        self.note_version(target.set_id, target.version, replied, &target.addr);
        Ok(seq)
    }

    /// Where `uid` goes now, from the cached routes (no network call).
    fn target(&self, uid: u64) -> Attempt<Target> {
        match read(&self.inner.routes).lookup(uid) {
            Lookup::Owner(t) => Ok(t),
            Lookup::Unowned => Err(Failure::NoRoute { uid }),
            Lookup::NoSet => Err(Failure::NoSet { uid }),
        }
    }

    /// Turns an attempt's result into a value or a [`Failure`], installing
    /// any route table the server attached to its error.
    pub(crate) fn outcome<T>(
        &self,
        reply: std::result::Result<
            std::result::Result<T, tonic::Status>,
            tokio::time::error::Elapsed,
        >,
        target: &Target,
        uids: &[u64],
        timeout: Duration,
    ) -> Attempt<T> {
        let status = match reply {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(status)) => status,
            Err(_) => {
                return Err(Failure::Transport {
                    message: format!("{}: no answer within {timeout:?}", target.addr),
                })
            }
        };
        let (mut failure, route) = classify(&status, &target.addr, uids);
        if let Some(r) = route {
            self.install(&r, &target.addr);
        }
        if let Failure::NotOwner { moved, .. } = &mut failure {
            // Retrying at once only helps if the uid now routes elsewhere,
            // whether the attached table or a concurrent refresh moved it.
            *moved = self.owner_moved(uids, &target.addr);
        }
        Err(failure)
    }

    /// Whether the first of `uids` now routes somewhere other than `addr`.
    fn owner_moved(&self, uids: &[u64], addr: &str) -> bool {
        let Some(&uid) = uids.first() else {
            return false;
        };
        !matches!(read(&self.inner.routes).lookup(uid), Lookup::Owner(t) if t.addr == addr)
    }

    /// Whether some seed has never answered `Routes`.
    fn seeds_unheard(&self) -> bool {
        let heard = lock(&self.inner.heard);
        self.inner.seeds.iter().any(|s| !heard.contains(s))
    }

    /// Decides what to do after a failed attempt: give up (fatal, or out
    /// of time), retry at once (the section moved and we know where), or
    /// refresh routes if they look stale and back off.
    pub(crate) async fn recover(&self, retry: &mut Retry, failure: Failure) -> Result<()> {
        match failure {
            Failure::Fatal(e) => return Err(e),
            Failure::NoSet { .. } if self.seeds_unheard() && retry.recheck_sets() => {
                self.refresh_shared(retry.attempt_timeout()).await;
                return Ok(());
            }
            f @ Failure::NoSet { .. } => return Err(f.into_final()),
            _ => {}
        }
        if retry.expired() {
            return Err(failure.into_final());
        }
        if matches!(failure, Failure::NotOwner { moved: true, .. }) && retry.at_once() {
            return Ok(());
        }
        if failure.wants_refresh() {
            self.refresh_shared(retry.attempt_timeout()).await;
        }
        retry.pause().await;
        if retry.expired() {
            return Err(failure.into_final());
        }
        Ok(())
    }
}

impl std::fmt::Debug for SeqClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeqClient")
            .field("seeds", &self.inner.seeds)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

/// A request that tells the server how long the caller will wait
/// (`grpc-timeout`), so it can drop work nobody is waiting for.
pub(crate) fn request<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(timeout);
    r
}

/// Reads a lock, ignoring poisoning: nothing panics while holding these
/// locks, and the data (routes, channels) stays valid either way.
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Writes a lock, ignoring poisoning (see [`read`]).
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

/// Locks a mutex, ignoring poisoning (see [`read`]).
pub(crate) fn lock<T>(l: &Mutex<T>) -> MutexGuard<'_, T> {
    l.lock().unwrap_or_else(PoisonError::into_inner)
}
