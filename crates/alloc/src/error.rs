//! The error types of `seqsvr-alloc`.
//!
//! - [`AllocError`]: what the allocator (the hot path) can answer instead
//!   of a number.
//! - [`StoreErr`]: not a second error type of this crate's logic but the
//!   *contract* of [`crate::CeilingStore`]: what the store can answer to a
//!   take-over or a raise.
//! - [`CallError`]: everything a gRPC call to this AllocSvr can fail with;
//!   `service.rs` maps it to a status once, at the edge (promise 5).
//! - [`AdoptRefusal`]: why an adopt the store does not confirm installs
//!   nothing (`ownership::decide_adopt`).
//! - [`MoveError`]: why one move of a handoff did not happen.
//! - [`ConfigError`] and [`NodeError`]: a node that cannot start.

use seqsvr_core::{AllocId, Epoch, Incarnation, SectionId, Uid};
use seqsvr_store_api::Rejection;

/// Result alias for this crate.
pub type Result<T, E = AllocError> = std::result::Result<T, E>;

/// Everything a caller of the allocator can be told instead of a number.
///
/// Promise 5 (bad input gets a clear error, never a wrong number): every way
/// a request can fail has its own variant, so the client can act on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// The uid is not in this set's uid range: the client routed it wrongly.
    #[error("uid {uid} is not in this set")]
    OutOfRange {
        /// The uid asked for.
        uid: Uid,
    },
    /// This AllocSvr does not serve the uid's section (never took it over, or
    /// lost it). The client should refresh its route table and retry there.
    #[error("section {section} is not served here")]
    NotOwner {
        /// The section of the uid asked for.
        section: SectionId,
    },
    /// The section has handed out every number up to its ceiling and a raise
    /// is pending in the store. Retryable: it clears when the raise lands.
    #[error("section {section} is at its ceiling; a raise is pending")]
    Exhausted {
        /// The exhausted section.
        section: SectionId,
    },
    /// A grant names a section that is not in this set.
    #[error("section {section} is not in this set")]
    UnknownSection {
        /// The section named.
        section: SectionId,
    },
    /// A grant that cannot be served (its ceiling is not above its skip-ahead
    /// value): a store bug, refused rather than trusted.
    #[error("invalid grant for section {section}: {reason}")]
    InvalidGrant {
        /// The section of the grant.
        section: SectionId,
        /// What is wrong with it.
        reason: String,
    },
    /// A reservation of a count outside `1..=max` (promise 5: refused,
    /// nothing handed out).
    #[error("a reservation takes 1..={max} numbers, not {count}")]
    InvalidCount {
        /// The count asked for.
        count: u64,
        /// The most one reservation takes.
        max: u64,
    },
    /// The set spec given to the allocator does not validate.
    #[error(transparent)]
    InvalidSet(#[from] seqsvr_core::Error),
    /// The store refused or failed a take-over.
    #[error("store: {0}")]
    Store(#[from] StoreErr),
    /// The adaptive-step settings do not fit the set (a base step above
    /// the set's step, which is the largest, or a zero duration).
    #[error("adaptive steps: {reason}")]
    InvalidSteps {
        /// What is wrong.
        reason: String,
    },
    /// A name that is empty or too long (promise 5: refused, nothing
    /// handed out).
    #[error(transparent)]
    InvalidName(#[from] seqsvr_core::NameError),
    /// A declared counter would pass its maximum: the call is refused
    /// whole and nothing is handed out (`docs/counters.md`).
    #[error("counter {name} would pass its maximum {max}")]
    CounterMaxReached {
        /// The name (lossy UTF-8).
        name: String,
        /// Its maximum.
        max: u64,
    },
}

impl AllocError {
    /// Whether retrying the same request at the same AllocSvr may succeed
    /// (as opposed to: fix the request, or go to another AllocSvr).
    pub fn is_retryable(&self) -> bool {
        match self {
            AllocError::Exhausted { .. } => true,
            AllocError::Store(e) => e.is_transient(),
            _ => false,
        }
    }
}

/// What the store can answer instead of a grant or a raised ceiling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreErr {
    /// The epoch sent is not the section's current one: another AllocSvr took
    /// the section over. The sender must stop serving it (promise 3).
    #[error("stale epoch: the section has a newer owner")]
    StaleEpoch,
    /// The target is not above the stored ceiling. With the right epoch this
    /// means an earlier attempt of ours already landed.
    #[error("ceiling not raised: target is not above current {current}")]
    NotAbove {
        /// The stored ceiling (durable).
        current: u64,
    },
    /// The target is more than `MAX_STEPS_PER_RAISE` steps above the ceiling.
    #[error("ceiling raise too large")]
    TooLarge,
    /// The section is not in the store's set.
    #[error("unknown section")]
    UnknownSection,
    /// This process's incarnation is no longer the registered one (it was
    /// replaced or fenced): it must stop serving everything (promise 3).
    #[error("this process was replaced or fenced in the store")]
    Fenced,
    /// No answer or a transient failure (no leader, timeout, I/O). The
    /// outcome is unknown: the raise may or may not have landed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

impl StoreErr {
    /// Whether the same request may succeed later.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreErr::Unavailable(_))
    }
}

/// Maps a store answer to the allocator's contract. A section routed to
/// another AllocSvr, or one this set no longer serves (frozen or moved to
/// another set, or never installed), is, for us, the same as a stale
/// epoch: stop serving it at once (promise 3). Waiting for the lease to
/// run out instead would let a host the mover waits for (or one fenced
/// behind a partition) keep answering from memory after the move.
impl From<seqsvr_store_api::Error> for StoreErr {
    fn from(e: seqsvr_store_api::Error) -> Self {
        use seqsvr_store_api::Error as E;
        match e {
            E::Rejected(
                Rejection::StaleEpoch { .. }
                | Rejection::OwnedElsewhere { .. }
                | Rejection::NotServing { .. },
            ) => StoreErr::StaleEpoch,
            E::Rejected(Rejection::NotAbove { current, .. }) => StoreErr::NotAbove { current },
            E::Rejected(Rejection::TooLarge { .. }) => StoreErr::TooLarge,
            E::Rejected(Rejection::UnknownSection { .. }) => StoreErr::UnknownSection,
            E::Rejected(Rejection::StaleIncarnation { .. } | Rejection::NotRegistered { .. }) => {
                StoreErr::Fenced
            }
            other => StoreErr::Unavailable(other.to_string()),
        }
    }
}

/// Everything a gRPC call to this AllocSvr can fail with. `service.rs`
/// maps each to one status code and `ErrorDetail` (promise 5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The allocator refused (out of range, not owner, exhausted…).
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// The lease is not valid: this AllocSvr serves nothing until a
    /// renewal is granted (promise 3). Retryable.
    #[error("{alloc}: lease expired, not serving")]
    LeaseExpired {
        /// This AllocSvr.
        alloc: AllocId,
    },
    /// This process was replaced by another incarnation or fenced by an
    /// operator: it never serves again (promise 3). Retryable elsewhere:
    /// the route table says where.
    #[error("{alloc}: incarnation {incarnation:x} was replaced or fenced; this process no longer serves")]
    Fenced {
        /// This AllocSvr.
        alloc: AllocId,
        /// This process's incarnation.
        incarnation: Incarnation,
    },
    /// This AllocSvr is starting and serves nothing yet; the caller may
    /// retry after `retry_after_ms` (`docs/operations.md`, Start-up).
    #[error("{alloc}: not serving yet ({reason}); retry in {retry_after_ms} ms")]
    Starting {
        /// This AllocSvr.
        alloc: AllocId,
        /// Why: registering, or waiting out the previous incarnation's
        /// lease (and about how long).
        reason: String,
        /// When to try again.
        retry_after_ms: u64,
    },
    /// A malformed request (empty or oversized batch or adopt).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A section named in a request is not in the set.
    #[error("section {section} is not in this set")]
    UnknownSection {
        /// The section named.
        section: SectionId,
    },
    /// The caller's certificate does not allow the call.
    #[error("permission denied: {0}")]
    Denied(String),
    /// An adopt the store does not confirm: nothing was installed.
    #[error(transparent)]
    Adopt(#[from] AdoptRefusal),
    /// A failure inside this AllocSvr (a task that panicked).
    #[error("internal: {0}")]
    Internal(String),
    /// A store read this call needed failed (the outcome of nothing is
    /// unknown: reads change nothing). Retryable.
    #[error("store: {0}")]
    Store(#[from] seqsvr_store_api::Error),
    /// A call for a uid another AllocSvr owns could not be answered by
    /// forwarding it (`docs/architecture/forwarding.md`). Retryable.
    #[error(transparent)]
    Forward(#[from] ForwardError),
    /// The clock is behind the last id tick issued by more than may be
    /// borrowed (docs/ids.md, the clock policy). Nothing was issued;
    /// retryable after `behind_ms`.
    #[error("id namespace {namespace:?}: the clock is behind the last id issued; retry in {behind_ms} ms")]
    ClockBehind {
        /// The namespace.
        namespace: String,
        /// How far the clock must still move forward, in ms.
        behind_ms: u64,
    },
    /// The worker id's time ceiling was not raised in time (the store is
    /// slow or unreachable). Nothing was issued; retryable.
    #[error("id namespace {namespace:?}: the time ceiling was not raised in time; retry in {retry_after_ms} ms")]
    IdCeiling {
        /// The namespace.
        namespace: String,
        /// When to try again.
        retry_after_ms: u64,
    },
    /// No worker id of the namespace is held here now and none can be
    /// claimed (stopping, or just taken back). Retryable.
    #[error(
        "id namespace {namespace:?}: no worker id held ({reason}); retry in {retry_after_ms} ms"
    )]
    IdUnavailable {
        /// The namespace.
        namespace: String,
        /// Why.
        reason: String,
        /// When to try again.
        retry_after_ms: u64,
    },
}

impl CallError {
    /// Whether this AllocSvr refused because the uid is not its to serve
    /// now: another section's owner or set, or no valid lease. Only such a
    /// refusal is worth forwarding; every other error is the answer.
    pub fn is_elsewhere(&self) -> bool {
        matches!(
            self,
            CallError::Alloc(AllocError::NotOwner { .. } | AllocError::OutOfRange { .. })
                | CallError::LeaseExpired { .. }
                | CallError::Fenced { .. }
        )
    }
}

/// Why a forwarded call has no number for its caller. Every variant is
/// retryable, and none hands a number out: what an owner handed out for a
/// call that ends here is forgotten, a gap (promise 1 of
/// `docs/architecture/promises.md`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    /// No owner answered with a number in time: the section is moving or
    /// has no owner yet, the owner is unreachable, or the tables of the
    /// AllocSvrs disagree (a loop, cut after one hop).
    #[error("uid {uid}: no owner answers right now ({reason}); retry in {retry_after_ms} ms")]
    OwnerUnavailable {
        /// The uid asked for (the first one a batch could not place).
        uid: Uid,
        /// What stood in the way.
        reason: String,
        /// When to try again.
        retry_after_ms: u64,
    },
    /// Too many calls are in flight to the owner already.
    #[error("{limit} calls are forwarded to {owner} already; retry in {retry_after_ms} ms")]
    Overloaded {
        /// The owner's address.
        owner: String,
        /// The bound that was reached.
        limit: usize,
        /// When to try again.
        retry_after_ms: u64,
    },
    /// The owner answered with a retryable error of its own (ceiling
    /// exhausted, lease expired, starting…): passed on as it said it.
    #[error("the owner answered {kind:?}: {message}")]
    Owner {
        /// The owner's error kind.
        kind: seqsvr_proto::ErrorKind,
        /// The owner's message.
        message: String,
        /// When to try again.
        retry_after_ms: u64,
    },
}

/// Why an adopt is refused. A refusal installs nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptRefusal {
    /// The store says another AllocSvr (or nobody) owns the section.
    #[error(
        "section {section} is owned by {} in the store, not by this AllocSvr",
        owner.as_deref().unwrap_or("no AllocSvr")
    )]
    OwnedElsewhere {
        /// The section.
        section: SectionId,
        /// Its owner in the store (`None`: unowned).
        owner: Option<AllocId>,
    },
    /// The store's grant is for another process with this AllocSvr's id
    /// (an earlier one, or 0: routed here but not claimed yet; a take-over
    /// will claim it).
    #[error(
        "section {section} is held by incarnation {holder:x} in the store, not by this process"
    )]
    OtherIncarnation {
        /// The section.
        section: SectionId,
        /// The incarnation the store's epoch was granted to.
        holder: Incarnation,
    },
    /// The epoch named is not the section's epoch in the store (a replayed,
    /// late or forged adopt).
    #[error("section {section}: adopt names epoch {named}, the store has {current}")]
    StaleEpoch {
        /// The section.
        section: SectionId,
        /// The epoch the adopt named.
        named: Epoch,
        /// The section's epoch in the store.
        current: Epoch,
    },
    /// The store's record has no room to serve (its ceiling is not above
    /// its start): never trusted (promise 2).
    #[error("section {section}: the store's ceiling {max_seq} is not above its start {start}")]
    NoRoom {
        /// The section.
        section: SectionId,
        /// The epoch's start.
        start: u64,
        /// The ceiling.
        max_seq: u64,
    },
}

/// Why one move of a handoff did not happen. The section keeps being
/// served here unless the message says otherwise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    /// The section is not in the set.
    #[error("section {section} is not in this set")]
    UnknownSection {
        /// The section named.
        section: SectionId,
    },
    /// The section is not served here (nothing to hand off).
    #[error("section {section} is not served here")]
    NotServed {
        /// The section named.
        section: SectionId,
    },
    /// Another handoff of the section is under way.
    #[error("section {section} is already being handed off")]
    Releasing {
        /// The section named.
        section: SectionId,
    },
    /// The move names no target.
    #[error("to_alloc is empty")]
    NoTarget,
    /// The move names this AllocSvr as the target.
    #[error("cannot hand section {section} to this AllocSvr itself")]
    ToSelf {
        /// The section named.
        section: SectionId,
    },
    /// The store's leader does not list the target among its AllocSvrs:
    /// nothing was released.
    #[error(
        "alloc {to:?} is not registered with the store: section {section} not released, \
         still served here"
    )]
    UnknownTarget {
        /// The section named.
        section: SectionId,
        /// The target named.
        to: AllocId,
    },
    /// The store's leader lists the target as unable to take sections
    /// (`state`: fenced or draining): nothing was released.
    #[error(
        "alloc {to:?} is {state} in the store: section {section} not released, still served here"
    )]
    TargetUnfit {
        /// The section named.
        section: SectionId,
        /// The target named.
        to: AllocId,
        /// Why it cannot take sections.
        state: &'static str,
    },
    /// The store refused the handoff or its outcome is unknown; the
    /// section was checked in the store and served again here if it is
    /// still ours at the released epoch.
    #[error("store handoff of section {section} at epoch {epoch}: {error}; {after}")]
    Store {
        /// The section.
        section: SectionId,
        /// The epoch released.
        epoch: Epoch,
        /// What the store said.
        error: seqsvr_store_api::Error,
        /// What was done afterwards.
        after: String,
    },
}

/// A configuration that cannot be used; names the key at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not valid TOML for this config (unknown key, wrong
    /// type, missing key).
    #[error("alloc config: {0}")]
    Parse(String),
    /// A key has a value that cannot work.
    #[error("alloc config: {key}: {reason}")]
    Invalid {
        /// The key (dotted for nested ones, e.g. `store[1]`).
        key: String,
        /// What is wrong with its value.
        reason: String,
    },
}

/// Why an AllocSvr could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The configuration does not validate.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// TLS files, listeners or limits could not be set up.
    #[error(transparent)]
    Net(#[from] seqsvr_net::Error),
    /// The store refused this AllocSvr for good (not a twin, which is
    /// retried, nor a transient failure).
    #[error("store refused registration: {0}")]
    Store(#[from] seqsvr_store_api::Error),
    /// The store's route table cannot be used (its set does not validate).
    #[error("route table from the store: {0}")]
    Routes(String),
    /// The allocator could not be built for the store's set.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// The TLS certificate is not this AllocSvr's: it would act in
    /// another process's name (or in none).
    #[error("{0}")]
    Identity(String),
    /// A socket could not be inspected.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// A thread or runtime could not be started.
    #[error("cannot start {0}")]
    Runtime(String),
    /// The metrics could not be registered.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}
