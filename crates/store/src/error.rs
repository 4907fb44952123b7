//! The store's error type, and its one mapping to and from gRPC statuses.

use seqsvr_proto::{detail_of, status_with, ErrorDetail, ErrorKind};
use tonic::Code;

use crate::types::{NodeId, Rejection};

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything a store call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The state machine refused the command (it changed nothing).
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// This replica is not the leader; `leader` is the one it knows of.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The leader's id and address, if known.
        leader: Option<(NodeId, String)>,
    },
    /// No leader could be reached (election under way, partition…). Retry.
    #[error("no store leader available: {0}")]
    NoLeader(String),
    /// A malformed request.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A bad configuration (at startup).
    #[error("configuration: {0}")]
    Config(String),
    /// A storage, Raft or transport failure.
    #[error("internal: {0}")]
    Internal(String),
}

impl Error {
    /// Whether retrying the same request later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::NotLeader { .. }
                | Error::NoLeader(_)
                | Error::Rejected(Rejection::NotConfigured)
        )
    }

    /// The gRPC status for this error, with an [`ErrorDetail`] attached.
    pub fn to_status(&self) -> tonic::Status {
        let mut d = ErrorDetail {
            retryable: self.is_retryable(),
            ..Default::default()
        };
        let code = match self {
            Error::Rejected(r) => {
                let (code, kind) = match r {
                    Rejection::NotConfigured => (Code::Unavailable, ErrorKind::NotConfigured),
                    Rejection::SetMismatch(_) => (Code::FailedPrecondition, ErrorKind::SetMismatch),
                    Rejection::OwnedElsewhere { .. } => {
                        (Code::FailedPrecondition, ErrorKind::OwnedElsewhere)
                    }
                    Rejection::Invalid(_) => (Code::InvalidArgument, ErrorKind::InvalidRequest),
                    Rejection::UnknownSection { .. } => {
                        (Code::OutOfRange, ErrorKind::UnknownSection)
                    }
                    Rejection::StaleEpoch { current, .. } => {
                        d.current = *current;
                        (Code::FailedPrecondition, ErrorKind::StaleEpoch)
                    }
                    Rejection::NotAbove { current, .. } => {
                        d.current = *current;
                        (Code::FailedPrecondition, ErrorKind::CeilingNotAbove)
                    }
                    Rejection::TooLarge { current, .. } => {
                        d.current = *current;
                        (Code::InvalidArgument, ErrorKind::StepTooLarge)
                    }
                };
                d.kind = kind as i32;
                code
            }
            Error::NotLeader { leader } => {
                if let Some((id, addr)) = leader {
                    d.leader_id = *id;
                    d.leader_addr = addr.clone();
                }
                d.kind = ErrorKind::NoLeader as i32;
                Code::Unavailable
            }
            Error::NoLeader(_) => {
                d.kind = ErrorKind::NoLeader as i32;
                Code::Unavailable
            }
            Error::Invalid(_) => {
                d.kind = ErrorKind::InvalidRequest as i32;
                Code::InvalidArgument
            }
            _ => {
                d.kind = ErrorKind::Internal as i32;
                Code::Internal
            }
        };
        status_with(code, self.to_string(), d)
    }

    /// Recovers the typed error from a status returned by a store server.
    /// Statuses without a seqsvr detail (transport failures) become
    /// [`Error::NoLeader`] when retryable, [`Error::Internal`] otherwise.
    pub fn from_status(s: &tonic::Status) -> Error {
        let msg = s.message().to_string();
        let Some(d) = detail_of(s) else {
            return match s.code() {
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
                    Error::NoLeader(msg)
                }
                Code::InvalidArgument => Error::Invalid(msg),
                _ => Error::Internal(format!("{:?}: {msg}", s.code())),
            };
        };
        let section = 0;
        match ErrorKind::try_from(d.kind).unwrap_or(ErrorKind::Internal) {
            ErrorKind::NotConfigured => Rejection::NotConfigured.into(),
            ErrorKind::SetMismatch => Rejection::SetMismatch(msg).into(),
            ErrorKind::OwnedElsewhere => Rejection::OwnedElsewhere {
                section,
                owner: msg,
            }
            .into(),
            ErrorKind::InvalidRequest => Error::Invalid(msg),
            ErrorKind::UnknownSection => Rejection::UnknownSection { section, count: 0 }.into(),
            ErrorKind::StaleEpoch => Rejection::StaleEpoch {
                section,
                given: 0,
                current: d.current,
            }
            .into(),
            ErrorKind::CeilingNotAbove => Rejection::NotAbove {
                section,
                to: 0,
                current: d.current,
            }
            .into(),
            ErrorKind::StepTooLarge => Rejection::TooLarge {
                section,
                to: 0,
                current: d.current,
            }
            .into(),
            ErrorKind::NoLeader => match d.leader_id {
                0 => Error::NoLeader(msg),
                id => Error::NotLeader {
                    leader: Some((id, d.leader_addr)),
                },
            },
            _ => Error::Internal(msg),
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        e.to_status()
    }
}
