//! The error type of `seqsvr-alloc`.
//!
//! One enum for the crate ([`AllocError`]); the gRPC layer maps it to status
//! codes once, at the edge. [`StoreErr`] is not a second error type of this
//! crate's logic but the *contract* of [`crate::CeilingStore`]: what the
//! store can answer to a take-over or a raise.

use seqsvr_core::{SectionId, Uid};

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
    /// The set spec given to the allocator does not validate.
    #[error(transparent)]
    InvalidSet(#[from] seqsvr_core::Error),
    /// The store refused or failed a take-over.
    #[error("store: {0}")]
    Store(#[from] StoreErr),
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
