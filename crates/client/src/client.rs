//! [`SeqClient`]: connecting, single-uid calls and the retry driver.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use seqsvr_core::{Directory, RouteTable, SetId};
use seqsvr_net::ServerRole;
use seqsvr_proto::{self as pb};
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::error::{Error, Result};
use crate::flight::Flight;
use crate::options::ClientOptions;
use crate::retry::{classify, Attempt, Failure, Retry};
use crate::routes::{Hold, Located, Lookup, RouteCache, Target};

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
    /// The route table of every known set and the newest directory. A
    /// std lock: it is held only to look up or swap a table, never across
    /// an await.
    pub(crate) routes: RwLock<RouteCache>,
    /// The HTTP/2 channels to each AllocSvr or store address, each with
    /// the role its server was verified to have (usually one per address;
    /// a seed asked for routes before it is known as an AllocSvr may have
    /// two under TLS).
    pub(crate) channels: RwLock<HashMap<String, Vec<(ServerRole, Channel)>>>,
    /// Full refreshes (every seed and known AllocSvr), single-flight.
    pub(crate) full: Flight,
    /// Per set, its fetches from its stores, single-flight.
    pub(crate) set_flights: Mutex<HashMap<SetId, Arc<Flight>>>,
    /// When the directory was last re-checked at set 0 (see `sets.rs`).
    pub(crate) dir_checked: Mutex<Option<Instant>>,
    /// Sets with a background refresh in flight (one at a time per set).
    pub(crate) refreshing: Mutex<HashSet<SetId>>,
    /// Seeds that have answered `Routes` at least once. A seed never heard
    /// from may be the only way to a whole set, so until all are heard a
    /// uid in no known set is worth one refresh before `OutOfRange`.
    pub(crate) heard: Mutex<HashSet<String>>,
}

/// Which single-uid RPC to make.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// `Next`: hand out a new number (`count` numbers, the last returned,
    /// when above one).
    Next { count: u64 },
    /// `Current`: read the last one.
    Current,
}

impl SeqClient {
    /// Connects through `seeds` (client-plane `host:port` of AllocSvrs or
    /// of store replicas, of one or more sets; over TLS if `options.tls`
    /// is set) and learns their sets' route tables and the set directory
    /// from them; other sets are learned from their stores on first use.
    /// Fails with
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

    /// A client that has learned nothing yet and dialed nobody: its first
    /// call learns routes from `seeds` (or from tables given to
    /// [`SeqClient::install_routes`] meanwhile). For a process that holds
    /// a route table already — an AllocSvr forwarding calls it does not
    /// own — and must not wait on the network to build its client.
    pub fn unconnected(seeds: &[String], options: ClientOptions) -> Result<SeqClient> {
        options.validate()?;
        if seeds.is_empty() {
            return Err(Error::InvalidArgument("no seed addresses".into()));
        }
        Ok(SeqClient::new(seeds, options))
    }

    /// Installs a route table learned elsewhere (an AllocSvr's own, from
    /// its store), if it is valid and newer than the cached one of its set
    /// (its directory likewise). Returns whether anything was installed.
    pub fn install_routes(&self, table: &pb::RouteTable) -> bool {
        let done = self.install(table, "installed");
        done.table || done.directory
    }

    /// [`SeqClient::install_routes`] for a table already decoded and
    /// checked (an AllocSvr's own, which it keeps in this form): nothing is
    /// converted again.
    pub fn install_route_table(&self, table: RouteTable) -> bool {
        let done = self.install_table(table, "installed");
        done.table || done.directory
    }

    /// Where the cached routes send `uid` now, without calling anyone.
    pub fn owner_of(&self, uid: u64) -> Owner {
        match read(&self.inner.routes).locate(uid) {
            Located::Owner(t, e) => Owner::At {
                set: t.set.set_id,
                addr: e.addr.clone(),
            },
            Located::Held(_) => Owner::Held,
            Located::NoSet => Owner::NoSet,
        }
    }

    /// A client with no routes yet.
    fn new(seeds: &[String], options: ClientOptions) -> Self {
        let inner = Inner {
            seeds: seeds.to_vec(),
            options,
            routes: RwLock::default(),
            channels: RwLock::default(),
            full: Flight::default(),
            set_flights: Mutex::default(),
            dir_checked: Mutex::default(),
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
            let (answered, failures, retry_after) = self.fetch_all(retry.attempt_timeout()).await;
            if answered > 0 {
                return Ok(());
            }
            // A starting AllocSvr answers at once with when to ask again.
            retry.pause_at_least(retry_after).await;
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
        self.single(uid, Op::Next { count: 0 }).await
    }

    /// Reserves `count` numbers of `uid` in one step and returns the last:
    /// the caller owns `(v − count, v]`, every one above any number handed
    /// out for `uid` before (promise 1). A count of 0 or 1 is [`next`];
    /// one above the server's cap is refused (`InvalidArgument`).
    ///
    /// [`next`]: SeqClient::next
    pub async fn next_n(&self, uid: u64, count: u64) -> Result<u64> {
        self.single(uid, Op::Next { count }).await
    }

    /// The last number handed out for `uid` (or the skip-ahead point after
    /// a take-over), without handing out a new one.
    pub async fn current(&self, uid: u64) -> Result<u64> {
        self.single(uid, Op::Current).await
    }

    /// The next number of the named counter `name` (1..=256 bytes, any
    /// bytes): routed to its position in the range reserved for names,
    /// with a uid's promises (`docs/counters.md`). A bad name is
    /// `InvalidArgument`, nothing sent.
    pub async fn next_name(&self, name: impl AsRef<[u8]>) -> Result<u64> {
        self.next_name_n(name, 0).await
    }

    /// Reserves `count` numbers of the named counter `name` in one step
    /// (the caller owns `(v − count, v]`), as [`next_n`](Self::next_n).
    /// The name travels with the call, so the owner keeps a counter for
    /// it alone (two names at one position never share one).
    pub async fn next_name_n(&self, name: impl AsRef<[u8]>, count: u64) -> Result<u64> {
        let name = name.as_ref();
        let key = name_position(name)?;
        self.single_for(key, name, Op::Next { count }).await
    }

    /// The last number handed out for the named counter `name`.
    pub async fn current_name(&self, name: impl AsRef<[u8]>) -> Result<u64> {
        let name = name.as_ref();
        let key = name_position(name)?;
        self.single_for(key, name, Op::Current).await
    }

    /// Asks every seed and known AllocSvr for its route table now and
    /// keeps the newest per set. Failures are logged, not returned: the
    /// cached routes stay usable and calls refresh again when they must.
    pub async fn refresh_routes(&self) {
        let timeout = self.inner.options.attempt_timeout;
        let (answered, failures, _) = self.inner.full.run(|| self.fetch_all(timeout)).await;
        if !failures.is_empty() {
            tracing::debug!(answered, ?failures, "route refresh: some sources failed");
        }
    }

    /// The cached route version of set `set_id`, if the set is known.
    pub fn route_version(&self, set_id: u32) -> Option<u64> {
        read(&self.inner.routes).version(set_id)
    }

    /// A copy of every cached route table, ordered by the sets' first uid
    /// (without their directory: see [`SeqClient::directory`]).
    pub fn route_tables(&self) -> Vec<RouteTable> {
        self.tables()
    }

    /// A copy of the newest set directory any route table carried, if
    /// any (servers older than sets send none).
    pub fn directory(&self) -> Option<Directory> {
        read(&self.inner.routes).directory().cloned()
    }

    /// The options this client was made with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// Runs a single-uid call with retries until it succeeds, fails for
    /// good, or runs out of time.
    async fn single(&self, uid: u64, op: Op) -> Result<u64> {
        self.single_for(uid, &[], op).await
    }

    /// [`single`](Self::single) for the key `uid`, or for the named
    /// counter `name` (non-empty) served at the position `uid`.
    async fn single_for(&self, uid: u64, name: &[u8], op: Op) -> Result<u64> {
        let mut retry = Retry::new(&self.inner.options);
        let mut answered = None;
        loop {
            match self.try_single(uid, name, op, &retry).await {
                Ok(seq) => return Ok(seq),
                Err(f) => {
                    let f = retry.settle(f, &mut answered);
                    self.recover(&mut retry, f).await?
                }
            }
        }
    }

    /// One attempt of a single-uid call at the uid's owner.
    async fn try_single(&self, uid: u64, name: &[u8], op: Op, retry: &Retry) -> Attempt<u64> {
        let target = self.target(uid, retry).await?;
        let mut c = self
            .alloc(&target.addr)
            .map_err(|message| Failure::Transport {
                message,
                set: Some(target.set_id),
            })?;
        let timeout = retry.attempt_timeout();
        let call = async {
            match op {
                Op::Next { count } => c
                    .next(self.data_request(
                        pb::NextRequest {
                            uid,
                            count,
                            name: name.to_vec(),
                        },
                        timeout,
                    ))
                    .await
                    .map(|r| (r.get_ref().seq, r.get_ref().route_version)),
                Op::Current => c
                    .current(self.data_request(
                        pb::CurrentRequest {
                            uid,
                            name: name.to_vec(),
                        },
                        timeout,
                    ))
                    .await
                    .map(|r| (r.get_ref().seq, r.get_ref().route_version)),
            }
        };
        let reply = tokio::time::timeout(timeout, call).await;
        let (seq, replied) = self.outcome(reply, &target, &[uid], timeout)?;
        self.note_version(target.set_id, target.version, replied, &target.addr);
        Ok(seq)
    }

    /// Where `uid` goes now: from the cached routes, after fetching the
    /// tables of sets they name but do not hold (from the sets' stores).
    async fn target(&self, uid: u64, retry: &Retry) -> Attempt<Target> {
        let mut fetched: Vec<SetId> = Vec::new();
        loop {
            let lookup = read(&self.inner.routes).lookup(uid);
            match lookup {
                Lookup::Owner(t) => return Ok(t),
                Lookup::NoSet => return Err(Failure::NoSet { uid }),
                Lookup::Held(Hold::Missing(set)) if !fetched.contains(&set) => {
                    fetched.push(set);
                    let fetch = self.fetch_set(set, retry.attempt_timeout()).await;
                    fetch.map_err(|message| Failure::Transport { message, set: None })?;
                }
                Lookup::Held(Hold::Missing(set)) => return Err(missing(set)),
                Lookup::Held(hold) => return Err(Failure::Held { uid, hold }),
            }
        }
    }

    /// Turns an attempt's result into a value or a [`Failure`], acting on
    /// what the error says of the server's route table: a table an older
    /// server attached is installed; a newer version named by an error
    /// other than a refusal is fetched in the background, as for an OK
    /// reply (a refusal's is fetched before its retry, in [`Self::recover`]).
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
                    set: Some(target.set_id),
                })
            }
        };
        let (mut failure, facts) = classify(&status, target, uids);
        if let Some(r) = &facts.table {
            self.install(r, &target.addr);
        } else if !matches!(failure, Failure::NotOwner { .. }) {
            self.note_version(target.set_id, target.version, facts.version, &target.addr);
        }
        if let Failure::NotOwner {
            moved,
            uid,
            addr,
            version,
            ..
        } = &mut failure
        {
            // Steer by a uid the refusal is about: in a batch, the first
            // one the installed table no longer routes there.
            let routes = read(&self.inner.routes);
            let elsewhere =
                |u: &&u64| !matches!(routes.locate(**u), Located::Owner(_, e) if e.addr == *addr);
            if let Some(&u) = uids.iter().find(elsewhere) {
                *uid = u;
            }
            let stale = routes.version(target.set_id).is_some_and(|v| v < *version);
            drop(routes);
            let step = self.step_after_refusal(*uid, addr, target.set_id);
            // A table older than the server's: the fetch before the retry
            // may well send the uid elsewhere.
            *moved = stale || matches!(step, Step::AtOnce);
        }
        Err(failure)
    }

    /// What to do after `uid` could not go to `addr` (an AllocSvr of set
    /// `set` that refused it, or `""`: nowhere), by the routes as they
    /// are now (an attached table or a refresh may have changed them).
    fn step_after_refusal(&self, uid: u64, addr: &str, set: SetId) -> Step {
        match read(&self.inner.routes).lookup(uid) {
            // The uid routes elsewhere now (another AllocSvr, or a set
            // whose table the next attempt fetches first): go there.
            Lookup::Owner(t) if t.addr != addr => Step::AtOnce,
            Lookup::Held(Hold::Missing(_)) => Step::AtOnce,
            // The next attempt fails for good without a call.
            Lookup::NoSet => Step::AtOnce,
            // Still routed there although the server says no: our table
            // of its set is not older than what it sent; ask the set.
            Lookup::Owner(_) => Step::Refresh(Some(set)),
            Lookup::Held(h) => Step::Refresh(Some(h.set())),
        }
    }

    /// What to do before retrying after `failure` (not fatal).
    fn step(&self, failure: &Failure) -> Step {
        match failure {
            Failure::NotOwner { uid, addr, set, .. } => self.step_after_refusal(*uid, addr, *set),
            Failure::Held { uid, hold } => self.step_after_refusal(*uid, "", hold.set()),
            Failure::Transport { set, .. } => Step::Refresh(*set),
            Failure::Busy { .. } | Failure::Fatal(_) | Failure::NoSet { .. } => Step::Wait,
        }
    }

    /// Decides what to do after a failed attempt: give up (fatal, or out
    /// of time), retry at once (the uid routes elsewhere now), or refresh
    /// the routes that look stale and back off.
    pub(crate) async fn recover(&self, retry: &mut Retry, failure: Failure) -> Result<()> {
        match failure {
            Failure::Fatal(e) => return Err(e),
            Failure::NoSet { .. } if self.sets_may_be_stale() && retry.recheck_sets() => {
                self.recheck_sets(retry.attempt_timeout()).await;
                return Ok(());
            }
            f @ Failure::NoSet { .. } => return Err(f.into_final()),
            _ => {}
        }
        if retry.expired() {
            return Err(failure.into_final());
        }
        let mut fetched = false;
        if let Failure::NotOwner {
            directory,
            version,
            addr,
            set,
            ..
        } = &failure
        {
            // The refusing server holds a newer table of the set than
            // ours: fetch it from that server (one fetch per set at a
            // time), then look again. Only when stale: the error itself
            // names the version, never the table.
            fetched = self
                .fetch_newer(*set, *version, addr, retry.attempt_timeout())
                .await;
            // The server holds a newer directory than the one its table
            // brought us (or brought none): fetch it before deciding.
            if *directory > read(&self.inner.routes).directory_version() {
                self.refresh_directory(*directory, retry.attempt_timeout())
                    .await;
            }
        }
        match self.step(&failure) {
            Step::AtOnce if retry.at_once() => return Ok(()),
            // A newer table came in: the next attempt goes where it says.
            _ if fetched && retry.at_once() => return Ok(()),
            Step::AtOnce | Step::Wait => {}
            Step::Refresh(set) => {
                match set {
                    Some(set) => self.refresh_set(set, retry.attempt_timeout()).await,
                    None => self.refresh_shared(retry.attempt_timeout()).await,
                }
                // The refresh showed where the uid goes now (the install
                // a frozen section waited for, say): no reason to wait.
                let routed = matches!(failure, Failure::NotOwner { .. } | Failure::Held { .. });
                if routed && self.step(&failure) == Step::AtOnce && retry.at_once() {
                    return Ok(());
                }
            }
        }
        retry.pause_at_least(failure.retry_after()).await;
        if retry.expired() {
            return Err(failure.into_final());
        }
        Ok(())
    }
}

/// Where the cached routes send a uid ([`SeqClient::owner_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The AllocSvr at `addr` owns its section, in set `set`.
    At {
        /// The set serving the uid.
        set: SetId,
        /// The owner's client-plane address.
        addr: String,
    },
    /// A set serves it, but no owner is known now (section unowned, being
    /// moved between sets, or the set's table not fetched yet); a call
    /// learns more.
    Held,
    /// No known set serves it.
    NoSet,
}

/// What to do before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Retry at once (if not done too often in a row; else back off).
    AtOnce,
    /// Refresh set `Some(set)`'s table (from its stores if known), or
    /// every source (`None`), then back off.
    Refresh(Option<SetId>),
    /// Just back off.
    Wait,
}

/// The failure for a set whose table stays missing after a fetch (the
/// fetch that ran meanwhile failed, or its stores answered for another
/// set): a full refresh may still find it through a seed.
pub(crate) fn missing(set: SetId) -> Failure {
    Failure::Transport {
        message: format!("set {set}: no route table could be had"),
        set: None,
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

impl SeqClient {
    /// A `Next`, `NextBatch` or `Current` request: [`request`], marked
    /// forwarded when this client forwards for an AllocSvr
    /// ([`ClientOptions::forwarded_by`]).
    pub(crate) fn data_request<T>(&self, msg: T, timeout: Duration) -> tonic::Request<T> {
        let mut r = request(msg, timeout);
        if let Some(id) = &self.inner.options.forwarded_by {
            // Checked printable in `ClientOptions::validate`.
            if let Ok(v) = tonic::metadata::MetadataValue::try_from(id.as_str()) {
                r.metadata_mut().insert(crate::options::FORWARDED_BY, v);
            }
        }
        r
    }
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

/// The key a name is served at, or why it is not a name.
fn name_position(name: &[u8]) -> Result<u64> {
    seqsvr_core::name_key(name).map_err(|e| Error::InvalidArgument(e.to_string()))
}
