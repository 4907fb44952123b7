//! The error type of `seqsvr-core`.

use serde::{Deserialize, Serialize};

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in pure seqsvr logic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum Error {
    /// Bytes that do not decode: wrong format version, truncated or garbage.
    #[error("cannot decode {what}: {reason}")]
    Decode {
        /// What was being decoded (e.g. "log entry").
        what: String,
        /// Why it failed.
        reason: String,
    },
    /// A value that cannot be encoded (should never happen for our types).
    #[error("cannot encode: {0}")]
    Encode(String),
    /// A set specification that makes no sense (empty range, zero section size…).
    #[error("invalid set spec: {0}")]
    InvalidSet(String),
}
