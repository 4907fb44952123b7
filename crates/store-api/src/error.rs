//! The store API's error type, and its one mapping to and from gRPC
//! statuses: the store's servers call [`Error::to_status`], every client
//! calls [`Error::from_status`], and what one writes the other reads back
//! field for field (no fact is invented on the way).

use seqsvr_proto::{detail_of, status_with, ErrorDetail, ErrorKind};
use tonic::Code;

use crate::membership::{MemberRefusal, MemberRefusalKind};
use crate::rejection::{CounterRefusal, IdRefusal, Rejection};
use crate::NodeId;

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything a store call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The state machine refused the command (it changed nothing).
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// This replica is not the leader; `leader` is the one it knows of.
    #[error("not the leader ({})", leader_name(leader))]
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
    /// The caller's certificate does not allow the call.
    #[error("permission denied: {0}")]
    Denied(String),
    /// A size or count limit was exceeded.
    #[error("too large: {0}")]
    TooLarge(String),
    /// A bad configuration (at startup).
    #[error("configuration: {0}")]
    Config(String),
    /// A storage, Raft or transport failure.
    #[error("internal: {0}")]
    Internal(String),
    /// A membership change was refused (it changed nothing).
    #[error(transparent)]
    Member(#[from] MemberRefusal),
}

fn leader_name(leader: &Option<(NodeId, String)>) -> String {
    match leader {
        Some((id, addr)) => format!("the leader is store {id} at {addr}"),
        None => "no leader known".to_string(),
    }
}

impl Error {
    /// Whether retrying the same request later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::NotLeader { .. }
                | Error::NoLeader(_)
                | Error::Rejected(Rejection::NotConfigured)
        ) || matches!(self, Error::Member(m) if m.kind.is_retryable())
    }

    /// The gRPC status for this error, with its details (promise 5).
    pub fn to_status(&self) -> tonic::Status {
        let mut d = ErrorDetail {
            retryable: self.is_retryable(),
            ..Default::default()
        };
        let (code, kind) = match self {
            Error::Rejected(r) => rejection_detail(r, &mut d),
            Error::NotLeader { leader } => {
                if let Some((id, addr)) = leader {
                    d.leader_id = *id;
                    d.leader_addr = addr.clone();
                }
                (Code::Unavailable, ErrorKind::NoLeader)
            }
            Error::NoLeader(m) => {
                d.reason = m.clone();
                (Code::Unavailable, ErrorKind::NoLeader)
            }
            Error::Invalid(m) => {
                d.reason = m.clone();
                (Code::InvalidArgument, ErrorKind::InvalidRequest)
            }
            Error::Denied(m) => {
                d.reason = m.clone();
                (Code::PermissionDenied, ErrorKind::PermissionDenied)
            }
            Error::TooLarge(m) => {
                d.reason = m.clone();
                (Code::ResourceExhausted, ErrorKind::TooLarge)
            }
            Error::Config(m) | Error::Internal(m) => {
                d.reason = m.clone();
                (Code::Internal, ErrorKind::Internal)
            }
            Error::Member(m) => {
                d.given = m.id;
                d.addr = m.addr.clone();
                d.reason = m.reason.clone();
                let code = match m.kind {
                    MemberRefusalKind::UnknownMember => Code::NotFound,
                    MemberRefusalKind::IdInUse | MemberRefusalKind::AddrInUse => {
                        Code::AlreadyExists
                    }
                    MemberRefusalKind::CatchUpTimeout => Code::DeadlineExceeded,
                    MemberRefusalKind::Changing => Code::Unavailable,
                    _ => Code::FailedPrecondition,
                };
                (code, m.kind.error_kind())
            }
        };
        d.kind = kind as i32;
        status_with(code, self.to_string(), d)
    }

    /// Recovers the typed error from a status returned by a store server.
    /// Statuses without a seqsvr detail (transport failures, a proxy's
    /// answer) become [`Error::NoLeader`] when retryable, else the closest
    /// kind with the status message.
    pub fn from_status(s: &tonic::Status) -> Error {
        let msg = s.message().to_string();
        let Some(d) = detail_of(s) else {
            return match s.code() {
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
                    Error::NoLeader(msg)
                }
                Code::InvalidArgument => Error::Invalid(msg),
                Code::PermissionDenied | Code::Unauthenticated => Error::Denied(msg),
                Code::ResourceExhausted | Code::OutOfRange => Error::TooLarge(msg),
                _ => Error::Internal(format!("{:?}: {msg}", s.code())),
            };
        };
        let kind = ErrorKind::try_from(d.kind).unwrap_or(ErrorKind::Internal);
        if let Some(k) = MemberRefusalKind::of(kind) {
            return MemberRefusal::new(k, d.given, d.reason).at(d.addr).into();
        }
        match kind {
            // A refusal at the edge and one by the state machine mean the
            // same to a caller: the request is malformed.
            ErrorKind::InvalidRequest => Error::Invalid(d.reason),
            ErrorKind::NoLeader => match d.leader_id {
                0 => Error::NoLeader(d.reason),
                id => Error::NotLeader {
                    leader: Some((id, d.leader_addr)),
                },
            },
            ErrorKind::PermissionDenied => Error::Denied(d.reason),
            ErrorKind::TooLarge => Error::TooLarge(d.reason),
            _ => {
                let internal = if d.reason.is_empty() {
                    msg
                } else {
                    d.reason.clone()
                };
                rejection_of(kind, d).map_or(Error::Internal(internal), Into::into)
            }
        }
    }
}

/// The store's refusal a detail of kind `kind` describes, if it is one.
fn rejection_of(kind: ErrorKind, d: ErrorDetail) -> Option<Rejection> {
    Some(match kind {
        ErrorKind::NotConfigured => Rejection::NotConfigured,
        ErrorKind::SetMismatch => Rejection::SetMismatch(d.reason),
        ErrorKind::Twin => Rejection::Twin {
            alloc: d.alloc,
            live: d.incarnation,
            addr: d.addr,
        },
        ErrorKind::StaleIncarnation => Rejection::StaleIncarnation {
            alloc: d.alloc,
            given: d.given,
            current: d.current,
        },
        ErrorKind::NotRegistered => Rejection::NotRegistered { alloc: d.alloc },
        ErrorKind::DirectoryRefused => Rejection::Directory(d.reason),
        ErrorKind::SetCommandRefused => Rejection::SetCommand {
            reason: d.reason,
            directory_version: d.directory_version,
        },
        ErrorKind::IdRefused => Rejection::Ids {
            namespace: d.id_namespace,
            kind: crate::rejection::id_refusal_of_wire(d.id_refusal),
            reason: d.reason,
        },
        ErrorKind::CounterConflict
        | ErrorKind::CounterFloorBackwards
        | ErrorKind::CounterUnknown => Rejection::Counter {
            name: d.counter_name,
            kind: match kind {
                ErrorKind::CounterConflict => CounterRefusal::Conflict,
                ErrorKind::CounterFloorBackwards => CounterRefusal::FloorBackwards,
                _ => CounterRefusal::Unknown,
            },
            floor: d.current,
            reason: d.reason,
        },
        ErrorKind::AllocInUse => Rejection::AllocInUse {
            alloc: d.alloc,
            reason: d.reason,
        },
        _ => return section_rejection_of(kind, d),
    })
}

/// [`rejection_of`] for the refusals about one section.
fn section_rejection_of(kind: ErrorKind, d: ErrorDetail) -> Option<Rejection> {
    let section = d.section;
    Some(match kind {
        ErrorKind::OwnedElsewhere => Rejection::OwnedElsewhere {
            section,
            owner: d.alloc,
        },
        ErrorKind::UnknownSection => Rejection::UnknownSection {
            section,
            count: d.count,
        },
        ErrorKind::StaleEpoch => Rejection::StaleEpoch {
            section,
            given: d.given,
            current: d.current,
        },
        ErrorKind::CeilingNotAbove => Rejection::NotAbove {
            section,
            to: d.to,
            current: d.current,
        },
        ErrorKind::StepTooLarge => Rejection::TooLarge {
            section,
            to: d.to,
            current: d.current,
        },
        ErrorKind::NotServed => Rejection::NotServing {
            section,
            moved_to: None,
        },
        ErrorKind::Moved => Rejection::NotServing {
            section,
            moved_to: Some(d.to_set),
        },
        _ => return None,
    })
}

/// Fills `d` with a rejection's facts; returns its code and kind (the one
/// mapping, also used by an AllocSvr passing a store's refusal on).
pub fn rejection_detail(r: &Rejection, d: &mut ErrorDetail) -> (Code, ErrorKind) {
    match r {
        Rejection::UnknownSection { .. }
        | Rejection::OwnedElsewhere { .. }
        | Rejection::StaleEpoch { .. }
        | Rejection::NotAbove { .. }
        | Rejection::TooLarge { .. }
        | Rejection::NotServing { .. } => section_detail(r, d),
        Rejection::Ids { .. } | Rejection::Counter { .. } => namespace_detail(r, d),
        Rejection::NotConfigured => (Code::Unavailable, ErrorKind::NotConfigured),
        Rejection::SetMismatch(m) => {
            d.reason = m.clone();
            (Code::FailedPrecondition, ErrorKind::SetMismatch)
        }
        Rejection::Invalid(m) => {
            d.reason = m.clone();
            (Code::InvalidArgument, ErrorKind::InvalidRequest)
        }
        Rejection::Twin { alloc, live, addr } => {
            d.alloc = alloc.clone();
            d.incarnation = *live;
            d.addr = addr.clone();
            (Code::FailedPrecondition, ErrorKind::Twin)
        }
        Rejection::StaleIncarnation {
            alloc,
            given,
            current,
        } => {
            d.alloc = alloc.clone();
            (d.given, d.current) = (*given, *current);
            (Code::FailedPrecondition, ErrorKind::StaleIncarnation)
        }
        Rejection::NotRegistered { alloc } => {
            d.alloc = alloc.clone();
            (Code::NotFound, ErrorKind::NotRegistered)
        }
        Rejection::Directory(m) => {
            d.reason = m.clone();
            (Code::FailedPrecondition, ErrorKind::DirectoryRefused)
        }
        Rejection::SetCommand {
            reason,
            directory_version,
        } => {
            d.reason = reason.clone();
            d.directory_version = *directory_version;
            (Code::FailedPrecondition, ErrorKind::SetCommandRefused)
        }
        Rejection::AllocInUse { alloc, reason } => {
            d.alloc = alloc.clone();
            d.reason = reason.clone();
            (Code::FailedPrecondition, ErrorKind::AllocInUse)
        }
    }
}

/// [`rejection_detail`] of a refusal about one section.
fn section_detail(r: &Rejection, d: &mut ErrorDetail) -> (Code, ErrorKind) {
    let mut at = |section: u32| {
        d.section = section;
        d.has_section = true;
    };
    match r {
        Rejection::UnknownSection { section, count } => {
            at(*section);
            d.count = *count;
            (Code::OutOfRange, ErrorKind::UnknownSection)
        }
        Rejection::OwnedElsewhere { section, owner } => {
            at(*section);
            d.alloc = owner.clone();
            (Code::FailedPrecondition, ErrorKind::OwnedElsewhere)
        }
        Rejection::StaleEpoch {
            section,
            given,
            current,
        } => {
            at(*section);
            (d.given, d.current) = (*given, *current);
            (Code::FailedPrecondition, ErrorKind::StaleEpoch)
        }
        Rejection::NotAbove {
            section,
            to,
            current,
        } => {
            at(*section);
            (d.to, d.current) = (*to, *current);
            (Code::FailedPrecondition, ErrorKind::CeilingNotAbove)
        }
        Rejection::TooLarge {
            section,
            to,
            current,
        } => {
            at(*section);
            (d.to, d.current) = (*to, *current);
            (Code::InvalidArgument, ErrorKind::StepTooLarge)
        }
        Rejection::NotServing { section, moved_to } => {
            at(*section);
            match moved_to {
                Some(to) => {
                    d.to_set = *to;
                    (Code::FailedPrecondition, ErrorKind::Moved)
                }
                None => (Code::FailedPrecondition, ErrorKind::NotServed),
            }
        }
        other => unreachable!("{other:?} is not about a section"),
    }
}

/// [`rejection_detail`] of a refusal about an id namespace or a counter.
fn namespace_detail(r: &Rejection, d: &mut ErrorDetail) -> (Code, ErrorKind) {
    match r {
        Rejection::Ids {
            namespace,
            kind,
            reason,
        } => {
            d.id_namespace = namespace.clone();
            d.reason = reason.clone();
            d.id_refusal = crate::rejection::id_refusal_to_wire(*kind) as i32;
            let code = match kind {
                IdRefusal::UnknownNamespace => Code::NotFound,
                IdRefusal::WorkersExhausted | IdRefusal::TimeExhausted => Code::ResourceExhausted,
                IdRefusal::Mismatch | IdRefusal::NotHolder => Code::FailedPrecondition,
            };
            (code, ErrorKind::IdRefused)
        }
        Rejection::Counter {
            name,
            kind,
            floor,
            reason,
        } => {
            d.counter_name = name.clone();
            d.current = *floor;
            d.reason = reason.clone();
            match kind {
                CounterRefusal::Conflict => (Code::AlreadyExists, ErrorKind::CounterConflict),
                CounterRefusal::FloorBackwards => {
                    (Code::FailedPrecondition, ErrorKind::CounterFloorBackwards)
                }
                CounterRefusal::Unknown => (Code::NotFound, ErrorKind::CounterUnknown),
            }
        }
        other => unreachable!("{other:?} is not about a namespace or a counter"),
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        e.to_status()
    }
}

#[cfg(test)]
mod tests {

    /// Messages are sentences, not Rust `Debug` output (`Some(..)`,
    /// quoted ids).
    #[test]
    fn messages_read_as_sentences() {
        let cases: Vec<(Error, &str)> = vec![
            (
                Error::NotLeader {
                    leader: Some((2, "10.0.0.2:7101".into())),
                },
                "not the leader (the leader is store 2 at 10.0.0.2:7101)",
            ),
            (
                Error::NotLeader { leader: None },
                "not the leader (no leader known)",
            ),
            (
                Rejection::OwnedElsewhere {
                    section: 3,
                    owner: "alloc-2".into(),
                }
                .into(),
                "section 3 is routed to alloc-2",
            ),
            (
                Rejection::OwnedElsewhere {
                    section: 3,
                    owner: String::new(),
                }
                .into(),
                "section 3 is routed to no AllocSvr",
            ),
            (
                Rejection::NotRegistered {
                    alloc: "alloc-9".into(),
                }
                .into(),
                "alloc alloc-9 is not registered",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }

    use super::*;

    #[test]
    fn every_error_survives_the_wire_unchanged() {
        let cases = vec![
            Error::Rejected(Rejection::NotConfigured),
            Error::Rejected(Rejection::SetMismatch("stored A, given B".into())),
            Error::Rejected(Rejection::AllocInUse {
                alloc: "alloc-2".into(),
                reason: "it owns 3 section(s) of this set (first: 4)".into(),
            }),
            Error::Rejected(Rejection::UnknownSection {
                section: 9,
                count: 4,
            }),
            Error::Rejected(Rejection::OwnedElsewhere {
                section: 2,
                owner: "alloc-2".into(),
            }),
            Error::Rejected(Rejection::StaleEpoch {
                section: 1,
                given: 3,
                current: 5,
            }),
            Error::Rejected(Rejection::NotAbove {
                section: 1,
                to: 10,
                current: 20,
            }),
            Error::Rejected(Rejection::TooLarge {
                section: 0,
                to: 99,
                current: 20,
            }),
            Error::Rejected(Rejection::Twin {
                alloc: "a".into(),
                live: 0xabc,
                addr: "10.0.0.1:7201".into(),
            }),
            Error::Rejected(Rejection::StaleIncarnation {
                alloc: "a".into(),
                given: 7,
                current: 8,
            }),
            Error::Rejected(Rejection::NotRegistered { alloc: "z".into() }),
            Error::Rejected(Rejection::NotServing {
                section: 4,
                moved_to: None,
            }),
            Error::Rejected(Rejection::NotServing {
                section: 5,
                moved_to: Some(2),
            }),
            Error::Rejected(Rejection::Directory("no set 7".into())),
            Error::Rejected(Rejection::SetCommand {
                reason: "no move is under way".into(),
                directory_version: 9,
            }),
            Error::NotLeader {
                leader: Some((2, "127.0.0.1:7102".into())),
            },
            Error::NoLeader("election".into()),
            Error::Invalid("alloc_id is empty".into()),
            Error::Denied("alloc:a may not act as alloc:b".into()),
            Error::TooLarge("alloc id of 40000 bytes".into()),
            Error::Internal("disk".into()),
        ];
        let cases = cases.into_iter().chain(
            MemberRefusalKind::ALL
                .map(|k| MemberRefusal::new(k, 4, "why").at("127.0.0.1:7104").into()),
        );
        for e in cases {
            let back = Error::from_status(&e.to_status());
            assert_eq!(back, e, "{e}");
            assert_eq!(back.to_string(), e.to_string());
        }
    }

    #[test]
    fn a_refused_malformed_command_reads_as_invalid() {
        let e = Error::Rejected(Rejection::Invalid("count must be at least 1".into()));
        let back = Error::from_status(&e.to_status());
        assert_eq!(back, Error::Invalid("count must be at least 1".into()));
        assert_eq!(back.to_string(), e.to_string());
    }

    #[test]
    fn plain_statuses_map_to_the_closest_kind() {
        assert!(Error::from_status(&tonic::Status::unavailable("down")).is_retryable());
        assert!(matches!(
            Error::from_status(&tonic::Status::permission_denied("no")),
            Error::Denied(_)
        ));
        assert!(matches!(
            Error::from_status(&tonic::Status::resource_exhausted("big")),
            Error::TooLarge(_)
        ));
    }
}
