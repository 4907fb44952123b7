//! The client's error type: what a call returns once retrying is over.
//!
//! Retryable conditions (a moved section, a ceiling raise not landed yet, a
//! lapsed lease, a dropped connection) never surface on their own: the
//! client retries them inside the call's deadline, and only when the
//! deadline passes does the last one come back, as [`Error::Unavailable`],
//! [`Error::NoRoute`] or [`Error::DeadlineExceeded`].

pub use seqsvr_proto::ErrorKind;

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything a client call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No set serves the uid: it is in no range of the set directory (or,
    /// with servers that send no directory, in no known set's span), or
    /// the AllocSvr of its set says it is outside the set's span. Never
    /// retried: no seqsvr node serves this uid (promise 5: an error, never
    /// a wrong number).
    #[error("no set serves uid {uid}")]
    OutOfRange {
        /// The offending uid (the first one, for a batch).
        uid: u64,
    },
    /// The request or the client's configuration is malformed (bad seed
    /// address, zero deadline, or a server answering `INVALID_ARGUMENT`).
    /// Never retried.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The uid's section had no owner in the route table until the
    /// deadline (a take-over in progress, or a set still bootstrapping).
    #[error("no AllocSvr serves uid {uid} right now")]
    NoRoute {
        /// The uid whose section is unowned.
        uid: u64,
    },
    /// An AllocSvr kept answering a retryable error (ceiling exhausted,
    /// lease expired, not owner…) until the deadline, or the uid's
    /// section was served by no set until then (`NOT_SERVED`: a move
    /// between the source's freeze and the destination's install).
    #[error("unavailable ({kind:?}): {message}")]
    Unavailable {
        /// What the server reported last.
        kind: ErrorKind,
        /// The server's message.
        message: String,
    },
    /// The deadline passed without an answer: the last attempt failed on
    /// the transport (refused, reset, timed out).
    #[error("deadline exceeded; last failure: {last}")]
    DeadlineExceeded {
        /// The last transport failure seen.
        last: String,
    },
    /// No AllocSvr could be reached to learn the route tables (at connect).
    #[error("transport: {0}")]
    Transport(String),
    /// A server broke the protocol (a reply of the wrong length, a route
    /// table that does not validate) or failed with a non-retryable error
    /// the client has no better name for.
    #[error("internal: {0}")]
    Internal(String),
    /// A declared counter would pass its maximum: the call was refused
    /// whole, nothing handed out (`COUNTER_MAX_REACHED`, docs/counters.md).
    /// Never retried.
    #[error("counter {name} would pass its maximum {max}")]
    CounterMaxReached {
        /// The name (lossy UTF-8).
        name: String,
        /// Its maximum.
        max: u64,
    },
}

impl Error {
    /// Whether the same call may succeed if the caller tries again later
    /// (the client has already retried within its deadline).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::NoRoute { .. }
                | Error::Unavailable { .. }
                | Error::DeadlineExceeded { .. }
                | Error::Transport(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_split() {
        let transient = [
            Error::NoRoute { uid: 1 },
            Error::Unavailable {
                kind: ErrorKind::CeilingExhausted,
                message: String::new(),
            },
            Error::DeadlineExceeded {
                last: String::new(),
            },
            Error::Transport(String::new()),
        ];
        assert!(transient.iter().all(Error::is_retryable));
        let permanent = [
            Error::OutOfRange { uid: 1 },
            Error::InvalidArgument(String::new()),
            Error::Internal(String::new()),
        ];
        assert!(!permanent.iter().any(Error::is_retryable));
    }
}
