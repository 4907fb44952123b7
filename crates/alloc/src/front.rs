//! The front: what every door (gRPC's `Alloc`, the HTTP API, and any
//! other) calls to answer `next`, `next_batch` and `current` for **any**
//! uid of the cluster (`docs/architecture/forwarding.md`).
//!
//! A uid of a section this AllocSvr serves is answered from memory, on the
//! allocator's hot path, exactly as before there was a front. Any other
//! uid is *forwarded* to its owner — the owner the route table names
//! within this set, or, for a uid of another set, the owner the directory
//! leads to — through the project's client (`seqsvr-client`), which
//! follows `NOT_OWNER`, `MOVED` and the directory as it does for every
//! Rust caller. The answer is the owner's: forwarding adds a hop, never a
//! second source of numbers (promise 1 of `docs/architecture/promises.md`
//! holds because every number still comes from the one owner's memory).
//!
//! - **One hop.** Forwarded calls carry [`seqsvr_client::FORWARDED_BY`];
//!   a door that sees it answers from memory or with its typed error
//!   (`local_*`), never forwards again, so two AllocSvrs that each think
//!   the other owns a section end in a typed error, not a loop.
//! - **Coalescing.** Concurrent calls for one owner — single `Next`s and
//!   the parts of forwarded batches, from every caller — are sent as one
//!   `NextBatch` ([`coalesce`]); a forwarded batch is split by owner and
//!   put back in order.
//! - **Bounds.** At most `max_in_flight` calls wait on one owner (more get
//!   `OVERLOADED` with a retry delay); each forwarded call has a deadline.
//! - **Never wrong-node.** A caller of the front never gets `NOT_OWNER`,
//!   `MOVED` or `NOT_SERVED`: a transient state is `OWNER_UNAVAILABLE`
//!   with `retry_after_ms` ([`ForwardError`]).

pub mod coalesce;
mod ids;
mod named;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use seqsvr_client::{Owner, SeqClient};
use seqsvr_core::Uid;
use seqsvr_proto::ErrorKind;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::error::{AllocError, CallError, ForwardError};
use crate::ids::IdWorkers;
use crate::shared::Shared;
use coalesce::{BatchFuture, Coalescer, SendBatch};

/// How forwarding is bounded (`docs/architecture/forwarding.md`, Bounds).
#[derive(Debug, Clone)]
pub struct ForwardConfig {
    /// Most time one forwarded call may take, the client's retries
    /// (following a moved section, a new owner) included.
    pub deadline: Duration,
    /// Most calls in flight to one owner; more are refused `OVERLOADED`.
    pub max_in_flight: usize,
    /// The retry delay named in forwarding's retryable errors.
    pub retry_after_ms: u64,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        Self {
            deadline: Duration::from_millis(1000),
            max_in_flight: 4096,
            retry_after_ms: 50,
        }
    }
}

/// Answers every door's calls: locally when this AllocSvr serves the
/// uid's section, else by forwarding (if forwarding is on).
#[derive(Debug)]
pub struct Front {
    /// The allocator, lease and route table.
    shared: Arc<Shared>,
    /// How calls are forwarded (`None`: off; a uid owned elsewhere is
    /// refused with the owner's address, as without a front).
    fwd: Option<Forwarder>,
    /// Time-ordered ids (`None`: not served here).
    ids: Option<Arc<IdWorkers>>,
}

/// The forwarding half of the [`Front`].
pub struct Forwarder {
    /// Dials owners, follows routes and the directory, retries within the
    /// deadline; marks every call forwarded.
    client: SeqClient,
    /// One lane per owner address.
    lanes: Mutex<HashMap<String, Arc<Lane>>>,
    /// Bounds.
    cfg: ForwardConfig,
    /// This AllocSvr's client-plane address (never forwarded to).
    self_addr: String,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("self_addr", &self.self_addr)
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// Calls on their way to one owner.
struct Lane {
    /// Its address (`""`: owner not known yet; the client finds it).
    addr: String,
    /// Calls in flight to it, at most `max_in_flight`.
    permits: Arc<Semaphore>,
    /// Its calls (single `Next`s, parts of batches), combined.
    coalescer: Arc<Coalescer>,
}

/// What to do with a call this AllocSvr did not answer from memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Answer with this error.
    Answer(CallError),
    /// Forward to the owner at this address (`""`: not known yet; the
    /// forwarding client looks it up).
    Forward(String),
}

/// Decides what to do with `uid` after this AllocSvr's own refusal
/// `local`, given where the routes send it (`owner`) and this AllocSvr's
/// address. Pure: the routing rules in one place, tested alone.
pub fn decide(
    uid: Uid,
    local: &CallError,
    owner: &Owner,
    self_addr: &str,
    retry_ms: u64,
) -> Decision {
    if !local.is_elsewhere() {
        return Decision::Answer(local.clone());
    }
    let unavailable = |reason: &str| {
        Decision::Answer(CallError::Forward(ForwardError::OwnerUnavailable {
            uid,
            reason: reason.to_string(),
            retry_after_ms: retry_ms,
        }))
    };
    match owner {
        Owner::At { addr, .. } if addr == self_addr => match local {
            // Ours by the routes, but the lease is not valid (yet) or this
            // process was fenced: its own typed, retryable error.
            CallError::LeaseExpired { .. } | CallError::Fenced { .. } => {
                Decision::Answer(local.clone())
            }
            _ => unavailable("the routes name this AllocSvr, which does not serve the section now"),
        },
        Owner::At { addr, .. } => Decision::Forward(addr.clone()),
        Owner::Held => Decision::Forward(String::new()),
        // A name's position no set is known to serve: the directory copy
        // may predate the set added for names (`docs/counters.md`), so the
        // forwarding client looks again (it re-reads the directory, at most
        // so often) rather than this door refusing at once.
        Owner::NoSet if seqsvr_core::is_name_key(uid) => Decision::Forward(String::new()),
        Owner::NoSet => match local {
            CallError::Alloc(AllocError::OutOfRange { .. }) => Decision::Answer(local.clone()),
            _ => Decision::Answer(CallError::Alloc(AllocError::OutOfRange { uid })),
        },
    }
}

/// The error a door answers for a forwarded call the client gave up on.
/// Wrong-node answers (`NOT_OWNER`, `MOVED`, `NOT_SERVED`) and transport
/// failures become `OWNER_UNAVAILABLE`; the owner's other retryable errors
/// are passed on as it said them.
pub fn from_client(e: seqsvr_client::Error, uid: Uid, retry_ms: u64) -> CallError {
    use seqsvr_client::Error as E;
    let unavailable = |reason: String| {
        CallError::Forward(ForwardError::OwnerUnavailable {
            uid,
            reason,
            retry_after_ms: retry_ms,
        })
    };
    match e {
        E::OutOfRange { uid } => CallError::Alloc(AllocError::OutOfRange { uid }),
        E::InvalidArgument(m) => CallError::Invalid(m),
        E::Internal(m) => CallError::Internal(m),
        // The owner's typed refusal, passed on as it said it.
        E::CounterMaxReached { name, max } => {
            CallError::Alloc(AllocError::CounterMaxReached { name, max })
        }
        E::Unavailable { kind, message } => match kind {
            ErrorKind::NotOwner | ErrorKind::Moved | ErrorKind::NotServed => {
                unavailable(format!("the section is moving ({message})"))
            }
            ErrorKind::StaleIncarnation | ErrorKind::Unspecified => unavailable(message),
            kind => CallError::Forward(ForwardError::Owner {
                kind,
                message,
                retry_after_ms: retry_ms,
            }),
        },
        E::NoRoute { .. } => unavailable("the section has no owner yet".into()),
        E::DeadlineExceeded { last } => unavailable(format!("the owner did not answer: {last}")),
        E::Transport(m) => unavailable(format!("the owner is unreachable: {m}")),
    }
}

impl Front {
    /// A front over `shared`, forwarding through `fwd` (or not at all).
    pub fn new(shared: Arc<Shared>, fwd: Option<Forwarder>) -> Self {
        Self {
            shared,
            fwd,
            ids: None,
        }
    }

    /// What the front answers from.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Where the forwarding client's routes send `uid` now, without
    /// calling anyone (`None`: forwarding is off).
    pub fn owner_of(&self, uid: Uid) -> Option<Owner> {
        self.fwd.as_ref().map(|f| f.client.owner_of(uid))
    }

    /// The route version replies carry.
    pub fn route_version(&self) -> u64 {
        self.shared.version()
    }

    /// The next number of any uid of the cluster.
    pub async fn next(&self, uid: Uid) -> Result<u64, CallError> {
        match self.local_next(uid).await {
            Err(e) if e.is_elsewhere() => self.forward_next(uid, e).await,
            r => r,
        }
    }

    /// `count` numbers of any uid of the cluster reserved in one step, the
    /// last returned: the caller owns `(v − count, v]` (`INCRBY`, and
    /// `Next` with a count).
    pub async fn next_n(&self, uid: Uid, count: u64) -> Result<u64, CallError> {
        match self.local_next_n(uid, count).await {
            Err(e) if e.is_elsewhere() => self.forward_next_n(uid, count, e).await,
            r => r,
        }
    }

    /// The last number handed out for any uid of the cluster.
    pub async fn current(&self, uid: Uid) -> Result<u64, CallError> {
        match self.local_current(uid) {
            Err(e) if e.is_elsewhere() => self.forward_current(uid, e).await,
            r => r,
        }
    }

    /// The next number of every uid, in order, wherever each is owned.
    pub async fn next_batch(&self, uids: &[Uid]) -> Result<Vec<u64>, CallError> {
        let mut out = Vec::with_capacity(uids.len());
        match self.local_next_batch(uids, &mut out).await {
            Ok(()) => Ok(out),
            Err(e) if e.is_elsewhere() => self.forward_batch(uids, out, e).await,
            Err(e) => Err(e),
        }
    }

    /// `next` from this AllocSvr's memory only: the owner's hot path (a
    /// lease check, one compare-and-swap), or its typed refusal.
    #[inline]
    pub async fn local_next(&self, uid: Uid) -> Result<u64, CallError> {
        let s = &self.shared;
        if !s.admitted() {
            return Err(s.not_admitted());
        }
        let seq = match s.alloc.next(uid) {
            Ok(seq) => seq,
            Err(AllocError::Exhausted { .. }) => {
                s.alloc.next_waiting(uid, self.wait_deadline()).await?
            }
            Err(e) => return Err(e.into()),
        };
        s.metrics.numbers.inc();
        Ok(seq)
    }

    /// `next_n` from this AllocSvr's memory only: one compare-and-swap
    /// within the ceiling, or a wait for a raise. A count outside
    /// `1..=max_count` is refused before anything is handed out.
    pub async fn local_next_n(&self, uid: Uid, count: u64) -> Result<u64, CallError> {
        let s = &self.shared;
        let max = s.alloc.max_count();
        if count == 0 || count > max {
            return Err(AllocError::InvalidCount { count, max }.into());
        }
        if !s.admitted() {
            return Err(s.not_admitted());
        }
        let seq = match s.alloc.next_n(uid, count) {
            Ok(seq) => seq,
            Err(AllocError::Exhausted { .. }) => {
                s.alloc
                    .next_n_waiting(uid, count, self.wait_deadline())
                    .await?
            }
            Err(e) => return Err(e.into()),
        };
        s.metrics.numbers.inc_by(count);
        Ok(seq)
    }

    /// `current` from this AllocSvr's memory only. Linearizable like
    /// `next`: only with a valid lease, and only for a section served here
    /// now (memory of a section no longer owned may be below numbers its
    /// new owner handed out; promise 1).
    pub fn local_current(&self, uid: Uid) -> Result<u64, CallError> {
        let s = &self.shared;
        if !s.admitted() {
            return Err(s.not_admitted());
        }
        Ok(s.alloc.current(uid)?)
    }

    /// `next_batch` from this AllocSvr's memory only: numbers in order into
    /// `out`. Not all-or-nothing: on an error `out` holds the numbers of
    /// the uids served before it, which were handed out.
    pub async fn local_next_batch(
        &self,
        uids: &[Uid],
        out: &mut Vec<u64>,
    ) -> Result<(), CallError> {
        let s = &self.shared;
        if uids.is_empty() || uids.len() > seqsvr_core::MAX_BATCH {
            return Err(CallError::Invalid(format!(
                "a batch holds 1..={} uids, not {}",
                seqsvr_core::MAX_BATCH,
                uids.len()
            )));
        }
        if !s.admitted() {
            return Err(s.not_admitted());
        }
        let start = out.len();
        if let Err(e) = s.alloc.next_batch(uids, out) {
            if !matches!(e, AllocError::Exhausted { .. }) {
                s.metrics.numbers.inc_by((out.len() - start) as u64);
                return Err(e.into());
            }
            let done = out.len() - start;
            let r = s
                .alloc
                .next_batch_waiting(&uids[done..], out, self.wait_deadline())
                .await;
            s.metrics.numbers.inc_by((out.len() - start) as u64);
            return r.map_err(Into::into);
        }
        s.metrics.numbers.inc_by(uids.len() as u64);
        Ok(())
    }

    /// The deadline of a call that may wait for a raise.
    fn wait_deadline(&self) -> Instant {
        Instant::now() + self.shared.wait
    }

    /// Whether this AllocSvr serves `uid` from memory now.
    fn serves(&self, uid: Uid) -> bool {
        let s = &self.shared;
        s.admitted()
            && s.alloc
                .spec()
                .section_of(uid)
                .is_some_and(|sec| s.alloc.is_serving(sec))
    }

    /// Forwards a `next` this AllocSvr refused with `local`.
    pub async fn forward_next(&self, uid: Uid, local: CallError) -> Result<u64, CallError> {
        self.forward_one("next", uid, local, |f, lane| async move {
            let call = lane.coalescer.next(uid);
            match tokio::time::timeout(f.cfg.deadline, call).await {
                Ok(r) => r.map_err(|e| from_client(e, uid, f.cfg.retry_after_ms)),
                Err(_) => Err(f.late(uid)),
            }
        })
        .await
    }

    /// Forwards a `current` this AllocSvr refused with `local` (one call:
    /// there is no batch of `current`s).
    pub async fn forward_current(&self, uid: Uid, local: CallError) -> Result<u64, CallError> {
        self.forward_one("current", uid, local, |f, _| async move {
            let retry_ms = f.cfg.retry_after_ms;
            f.client
                .current(uid)
                .await
                .map_err(|e| from_client(e, uid, retry_ms))
        })
        .await
    }

    /// Forwards a `next` of `count` numbers this AllocSvr refused with
    /// `local` (one call, not coalesced: a batch hands out one number per
    /// uid).
    pub async fn forward_next_n(
        &self,
        uid: Uid,
        count: u64,
        local: CallError,
    ) -> Result<u64, CallError> {
        self.forward_one("next", uid, local, |f, _| async move {
            let retry_ms = f.cfg.retry_after_ms;
            f.client
                .next_n(uid, count)
                .await
                .map_err(|e| from_client(e, uid, retry_ms))
        })
        .await
    }

    /// Forwards one call for `uid` that this AllocSvr refused with
    /// `local`: to the owner the routes name (or the answer they give
    /// instead), within that owner's in-flight bound, made by `call` over
    /// the owner's lane; counted and timed under `op`.
    async fn forward_one<'a, F, Fut>(
        &'a self,
        op: &str,
        uid: Uid,
        local: CallError,
        call: F,
    ) -> Result<u64, CallError>
    where
        F: FnOnce(&'a Forwarder, Arc<Lane>) -> Fut,
        Fut: std::future::Future<Output = Result<u64, CallError>>,
    {
        let Some(f) = &self.fwd else {
            return Err(local);
        };
        let addr = match f.decide(&self.shared, uid, &local) {
            Decision::Answer(e) => return Err(e),
            Decision::Forward(addr) => addr,
        };
        let started = std::time::Instant::now();
        let lane = f.lane(&addr, &self.shared);
        let r = match f.admit(&lane) {
            Ok(_permit) => {
                let _gauge = InFlight::new(&self.shared);
                call(f, lane.clone()).await
            }
            Err(e) => Err(e),
        };
        self.count(op, &r, started);
        r
    }

    /// Forwards what is left of a batch after this AllocSvr served the
    /// prefix `served` and refused the next uid with `local`: the uids it
    /// serves are served here, the rest split by owner and forwarded in
    /// parallel, and every number put back at its uid's position.
    pub async fn forward_batch(
        &self,
        uids: &[Uid],
        served: Vec<u64>,
        local: CallError,
    ) -> Result<Vec<u64>, CallError> {
        let Some(f) = &self.fwd else {
            return Err(local);
        };
        let started = std::time::Instant::now();
        let r = self.split_and_send(f, uids, served, &local).await;
        self.count("next_batch", &r, started);
        r
    }

    /// [`Self::forward_batch`]'s work.
    async fn split_and_send(
        &self,
        f: &Forwarder,
        uids: &[Uid],
        served: Vec<u64>,
        local: &CallError,
    ) -> Result<Vec<u64>, CallError> {
        let base = served.len();
        let rest = &uids[base..];
        let mut here: Vec<usize> = Vec::new();
        let mut parts: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, &uid) in rest.iter().enumerate() {
            if self.serves(uid) {
                here.push(i);
                continue;
            }
            let addr = match f.decide(&self.shared, uid, local) {
                Decision::Answer(e) => return Err(e),
                Decision::Forward(addr) => addr,
            };
            match parts.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, idx)) => idx.push(i),
                None => parts.push((addr, vec![i])),
            }
        }
        let mut out = served;
        out.resize(uids.len(), 0);
        if !here.is_empty() {
            let mine: Vec<Uid> = here.iter().map(|&i| rest[i]).collect();
            let mut seqs = Vec::with_capacity(mine.len());
            self.local_next_batch(&mine, &mut seqs)
                .await
                .map_err(|e| f.settle_local(mine[seqs.len().min(mine.len() - 1)], e))?;
            for (&i, seq) in here.iter().zip(seqs) {
                out[base + i] = seq;
            }
        }
        let sends = parts.into_iter().map(|(addr, idx)| async move {
            let lane = f.lane(&addr, &self.shared);
            let _permit = f.admit(&lane)?;
            let _gauge = InFlight::new(&self.shared);
            let part: Vec<Uid> = idx.iter().map(|&i| rest[i]).collect();
            let first = part[0];
            // Combined with the other callers' calls to this owner: one
            // `NextBatch` in flight per owner (`coalesce`).
            let seqs = (lane.coalescer.batch(part).await)
                .map_err(|e| from_client(e, first, f.cfg.retry_after_ms))?;
            Ok::<_, CallError>((idx, seqs))
        });
        for r in join_all(sends).await {
            let (idx, seqs) = r?;
            for (i, seq) in idx.into_iter().zip(seqs) {
                out[base + i] = seq;
            }
        }
        Ok(out)
    }

    /// Counts a forwarded call's outcome and latency.
    fn count<T>(&self, op: &str, r: &Result<T, CallError>, started: std::time::Instant) {
        let outcome = match r {
            Ok(_) => "ok",
            Err(e) => kind_name(e),
        };
        let m = &self.shared.metrics.front;
        m.forwarded(op, outcome, started.elapsed());
    }
}

/// A short name of an error's kind, for the forwarded-calls counter.
fn kind_name(e: &CallError) -> &'static str {
    match e {
        CallError::Forward(ForwardError::OwnerUnavailable { .. }) => "OWNER_UNAVAILABLE",
        CallError::Forward(ForwardError::Overloaded { .. }) => "OVERLOADED",
        CallError::Forward(ForwardError::Owner { kind, .. }) => kind.as_str_name(),
        CallError::Alloc(AllocError::OutOfRange { .. }) => "OUT_OF_RANGE",
        CallError::LeaseExpired { .. } => "LEASE_EXPIRED",
        CallError::Invalid(_) => "INVALID_REQUEST",
        _ => "OTHER",
    }
}

/// Counts a call in flight to an owner while it lives.
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn new(s: &'a Shared) -> Self {
        s.metrics.front.in_flight.inc();
        Self(s)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.metrics.front.in_flight.dec();
    }
}

impl Forwarder {
    /// Forwarding through `client` (whose options must name this AllocSvr
    /// in `forwarded_by`), with bounds `cfg`; `self_addr` is this
    /// AllocSvr's client-plane address.
    pub fn new(client: SeqClient, cfg: ForwardConfig, self_addr: String) -> Self {
        Self {
            client,
            lanes: Mutex::default(),
            cfg,
            self_addr,
        }
    }

    /// Where `uid` goes after this AllocSvr's refusal `local`, by the
    /// newest routes (this AllocSvr's own table is given to the client
    /// first when it is newer than the client's copy).
    fn decide(&self, shared: &Shared, uid: Uid, local: &CallError) -> Decision {
        let set = shared.alloc.spec().set_id;
        if self.client.route_version(set) < Some(shared.version()) {
            self.client
                .install_route_table(shared.routes().table.clone());
        }
        let owner = self.client.owner_of(uid);
        decide(uid, local, &owner, &self.self_addr, self.cfg.retry_after_ms)
    }

    /// The lane to `addr`, made on first use.
    fn lane(&self, addr: &str, shared: &Shared) -> Arc<Lane> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = lanes.get(addr) {
            return l.clone();
        }
        let client = self.client.clone();
        let send: SendBatch = Arc::new(move |uids: Vec<u64>| -> BatchFuture {
            let c = client.clone();
            Box::pin(async move { c.next_batch(&uids).await })
        });
        let m = shared.metrics.front.clone();
        let lane = Arc::new(Lane {
            addr: addr.to_string(),
            permits: Arc::new(Semaphore::new(self.cfg.max_in_flight)),
            coalescer: Coalescer::new(send, Arc::new(move |n, k| m.batch_sent(n, k))),
        });
        lanes.insert(addr.to_string(), lane.clone());
        lane
    }

    /// A place in `lane`'s in-flight bound, or `OVERLOADED`.
    fn admit(&self, lane: &Lane) -> Result<OwnedSemaphorePermit, CallError> {
        lane.permits.clone().try_acquire_owned().map_err(|_| {
            CallError::Forward(ForwardError::Overloaded {
                owner: lane.addr.clone(),
                limit: self.cfg.max_in_flight,
                retry_after_ms: self.cfg.retry_after_ms,
            })
        })
    }

    /// The error of a forwarded call past its deadline.
    fn late(&self, uid: Uid) -> CallError {
        CallError::Forward(ForwardError::OwnerUnavailable {
            uid,
            reason: format!("no answer within {:?}", self.cfg.deadline),
            retry_after_ms: self.cfg.retry_after_ms,
        })
    }

    /// The error of the local part of a forwarded batch: a section lost
    /// between the split and the call is moving, not another node's.
    fn settle_local(&self, uid: Uid, e: CallError) -> CallError {
        if !e.is_elsewhere() {
            return e;
        }
        CallError::Forward(ForwardError::OwnerUnavailable {
            uid,
            reason: format!("the section is moving ({e})"),
            retry_after_ms: self.cfg.retry_after_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(addr: &str) -> Owner {
        Owner::At {
            set: 0,
            addr: addr.into(),
        }
    }

    fn not_owner() -> CallError {
        CallError::Alloc(AllocError::NotOwner { section: 3 })
    }

    fn unavailable(reason: &str) -> Decision {
        Decision::Answer(CallError::Forward(ForwardError::OwnerUnavailable {
            uid: 42,
            reason: reason.into(),
            retry_after_ms: 50,
        }))
    }

    /// The routing rules, case by case: what this AllocSvr refused, where
    /// the routes send the uid, and what the front does.
    #[test]
    fn routing_decisions() {
        let me = "10.0.0.1:7201";
        let lapsed = CallError::LeaseExpired { alloc: "a".into() };
        let outside = CallError::Alloc(AllocError::OutOfRange { uid: 42 });
        let exhausted = CallError::Alloc(AllocError::Exhausted { section: 3 });
        let cases: Vec<(CallError, Owner, Decision)> = vec![
            // Owned elsewhere in this set, or in another set: forward.
            (
                not_owner(),
                at("10.0.0.2:7201"),
                Decision::Forward("10.0.0.2:7201".into()),
            ),
            (
                outside.clone(),
                at("10.0.1.1:7201"),
                Decision::Forward("10.0.1.1:7201".into()),
            ),
            // Our lease lapsed but the section is someone else's: forward.
            (
                lapsed.clone(),
                at("10.0.0.2:7201"),
                Decision::Forward("10.0.0.2:7201".into()),
            ),
            // No owner known right now: the forwarding client finds it.
            (not_owner(), Owner::Held, Decision::Forward(String::new())),
            // Ours by the routes, lease lapsed: our own retryable error.
            (lapsed.clone(), at(me), Decision::Answer(lapsed)),
            // Ours by the routes but not served (taking it over, handing
            // it off): never a wrong-node answer, never a self-call.
            (
                not_owner(),
                at(me),
                unavailable("the routes name this AllocSvr, which does not serve the section now"),
            ),
            // No set serves it: out of range, from any door.
            (
                outside.clone(),
                Owner::NoSet,
                Decision::Answer(outside.clone()),
            ),
            (not_owner(), Owner::NoSet, Decision::Answer(outside)),
            // Not a routing matter: the answer stands.
            (exhausted.clone(), at("x"), Decision::Answer(exhausted)),
        ];
        for (local, owner, want) in cases {
            let got = decide(42, &local, &owner, me, 50);
            assert_eq!(got, want, "after {local:?} with the routes at {owner:?}");
        }
        // A name's position in no known set: the client looks again.
        let name = seqsvr_core::NAME_KEYS.start + 7;
        let out = CallError::Alloc(AllocError::OutOfRange { uid: name });
        let got = decide(name, &out, &Owner::NoSet, me, 50);
        assert_eq!(got, Decision::Forward(String::new()));
    }

    /// A forwarded call's failure never reaches a caller as wrong-node:
    /// the client's last answer becomes a retryable, typed error.
    #[test]
    fn client_failures_map_to_typed_retryable_errors() {
        use seqsvr_client::Error as E;
        let moving = |kind| E::Unavailable {
            kind,
            message: "m".into(),
        };
        for e in [
            moving(ErrorKind::NotOwner),
            moving(ErrorKind::Moved),
            moving(ErrorKind::NotServed),
            E::NoRoute { uid: 42 },
            E::DeadlineExceeded { last: "x".into() },
            E::Transport("x".into()),
        ] {
            let got = from_client(e.clone(), 42, 50);
            assert!(
                matches!(
                    got,
                    CallError::Forward(ForwardError::OwnerUnavailable {
                        uid: 42,
                        retry_after_ms: 50,
                        ..
                    })
                ),
                "{e:?} -> {got:?}"
            );
        }
        assert_eq!(
            from_client(moving(ErrorKind::CeilingExhausted), 42, 50),
            CallError::Forward(ForwardError::Owner {
                kind: ErrorKind::CeilingExhausted,
                message: "m".into(),
                retry_after_ms: 50
            })
        );
        assert_eq!(
            from_client(E::OutOfRange { uid: 9 }, 42, 50),
            CallError::Alloc(AllocError::OutOfRange { uid: 9 })
        );
        assert!(matches!(
            from_client(E::InvalidArgument("x".into()), 42, 50),
            CallError::Invalid(_)
        ));
    }
}
