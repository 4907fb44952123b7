//! What a failed attempt means, and the per-call retry budget.
//!
//! Every attempt ends in success or in a [`Failure`]; the client decides
//! from the failure whether to give up, retry at once (the section moved
//! and the error told us where), refresh its routes first (transport
//! failure, no owner), or just back off (the owner is busy raising its
//! ceiling or renewing its lease).
//!
//! Retrying `next` is always safe: if a lost reply hid a number that was
//! handed out, the retry gets a larger one, and a gap is allowed where a
//! repeat is not (promise 1).

use std::time::Duration;

use seqsvr_proto::{self as pb, detail_of, ErrorKind};
use tokio::time::Instant;
use tonic::Code;

use crate::backoff::{jitter_seed, Backoff};
use crate::error::Error;
use crate::options::ClientOptions;

/// Most consecutive retries without a pause. A `NOT_OWNER` carrying a
/// newer route is retried at once, but two AllocSvrs with conflicting
/// views could bounce a call between them; after this many it backs off.
const MAX_AT_ONCE: u32 = 4;

/// The result of one attempt.
pub(crate) type Attempt<T> = std::result::Result<T, Failure>;

/// Why an attempt failed, as far as retrying is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Give up and return this.
    Fatal(Error),
    /// The AllocSvr does not own the section; `moved`: the client's routes
    /// (updated from the error's table, or meanwhile) now send the call
    /// elsewhere, so an immediate retry is worth it.
    NotOwner {
        /// Whether the uid now routes to another AllocSvr.
        moved: bool,
        /// The server's message.
        message: String,
    },
    /// The uid is in no cached set. Final, unless a seed has not answered
    /// yet (its set may be the one missing): then routes are refreshed once.
    NoSet {
        /// The uid.
        uid: u64,
    },
    /// The uid's section has no owner in the cached route table.
    NoRoute {
        /// The uid.
        uid: u64,
    },
    /// The owner answered a retryable error (ceiling, lease…).
    Busy {
        /// What it reported.
        kind: ErrorKind,
        /// Its message.
        message: String,
    },
    /// The call never got an answer (refused, reset, timed out).
    Transport {
        /// What went wrong, with the address.
        message: String,
    },
}

impl Failure {
    /// How much this failure should steer the retry; the highest wins
    /// when a batch's parts fail differently.
    fn rank(&self) -> u8 {
        match self {
            Failure::Fatal(_) | Failure::NoSet { .. } => 5,
            Failure::NotOwner { moved: true, .. } => 4,
            Failure::Transport { .. } => 3,
            Failure::NotOwner { moved: false, .. } => 2,
            Failure::NoRoute { .. } => 1,
            Failure::Busy { .. } => 0,
        }
    }

    /// The failure of higher rank (the first on a tie).
    pub(crate) fn worst(a: Failure, b: Failure) -> Failure {
        if b.rank() > a.rank() {
            b
        } else {
            a
        }
    }

    /// Whether the next attempt needs fresh routes first.
    pub(crate) fn wants_refresh(&self) -> bool {
        matches!(
            self,
            Failure::Transport { .. }
                | Failure::NoRoute { .. }
                | Failure::NotOwner { moved: false, .. }
        )
    }

    /// The error a call returns when its deadline passes after this.
    pub(crate) fn into_final(self) -> Error {
        match self {
            Failure::Fatal(e) => e,
            Failure::NotOwner { message, .. } => Error::Unavailable {
                kind: ErrorKind::NotOwner,
                message,
            },
            Failure::NoSet { uid } => Error::OutOfRange { uid },
            Failure::NoRoute { uid } => Error::NoRoute { uid },
            Failure::Busy { kind, message } => Error::Unavailable { kind, message },
            Failure::Transport { message } => Error::DeadlineExceeded { last: message },
        }
    }
}

/// Reads a non-OK status from an AllocSvr called with `uids` (one uid, or
/// a batch part). Returns the failure and the route table the server
/// attached, which the caller installs; a `NotOwner` comes back with
/// `moved: false` for the caller to correct after installing.
pub(crate) fn classify(
    status: &tonic::Status,
    addr: &str,
    uids: &[u64],
) -> (Failure, Option<pb::RouteTable>) {
    let message = status.message().to_string();
    let Some(d) = detail_of(status) else {
        return (classify_bare(status.code(), addr, message, uids), None);
    };
    let kind = ErrorKind::try_from(d.kind).unwrap_or(ErrorKind::Unspecified);
    let failure = match kind {
        ErrorKind::NotOwner => Failure::NotOwner {
            moved: false,
            message,
        },
        ErrorKind::OutOfRange => {
            let set = d.route.as_ref().and_then(|r| r.set.as_ref());
            // Name the first uid the server's set really lacks, when it says.
            let outside = |u: &&u64| set.is_none_or(|s| !(s.uid_begin..s.uid_end).contains(*u));
            let uid = uids.iter().find(outside).or(uids.first()).copied();
            Failure::Fatal(Error::OutOfRange {
                uid: uid.unwrap_or_default(),
            })
        }
        ErrorKind::InvalidRequest => Failure::Fatal(Error::InvalidArgument(message)),
        kind if d.retryable => Failure::Busy { kind, message },
        kind => Failure::Fatal(Error::Internal(format!("{kind:?} from {addr}: {message}"))),
    };
    (failure, d.route)
}

/// Reads a status without a seqsvr detail: a transport failure reported
/// by tonic itself, or a server that is not an AllocSvr.
fn classify_bare(code: Code, addr: &str, message: String, uids: &[u64]) -> Failure {
    match code {
        // `Unknown` is what tonic reports for a connection reset mid-call.
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Unknown
        | Code::Aborted => Failure::Transport {
            message: format!("{addr}: {code:?}: {message}"),
        },
        Code::InvalidArgument => Failure::Fatal(Error::InvalidArgument(message)),
        Code::OutOfRange => Failure::Fatal(Error::OutOfRange {
            uid: uids.first().copied().unwrap_or_default(),
        }),
        code => Failure::Fatal(Error::Internal(format!("{addr}: {code:?}: {message}"))),
    }
}

/// One call's retry budget: its deadline and its backoff.
#[derive(Debug)]
pub(crate) struct Retry {
    /// When the call must return.
    deadline: Instant,
    /// The longest single attempt.
    attempt_timeout: Duration,
    /// Pauses between attempts.
    backoff: Backoff,
    /// Retries in a row made without a pause.
    at_once: u32,
    /// Whether routes were already refreshed for a uid in no known set.
    rechecked_sets: bool,
}

impl Retry {
    /// The budget for a call starting now.
    pub(crate) fn new(o: &ClientOptions) -> Self {
        Self {
            deadline: Instant::now() + o.deadline,
            attempt_timeout: o.attempt_timeout,
            backoff: Backoff::new(o.initial_backoff, o.max_backoff),
            at_once: 0,
            rechecked_sets: false,
        }
    }

    /// Time left before the deadline.
    pub(crate) fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the deadline has passed.
    pub(crate) fn expired(&self) -> bool {
        self.remaining().is_zero()
    }

    /// How long the next attempt (or route refresh) may take.
    pub(crate) fn attempt_timeout(&self) -> Duration {
        self.attempt_timeout.min(self.remaining())
    }

    /// Whether another retry without a pause is allowed (and counts it).
    pub(crate) fn at_once(&mut self) -> bool {
        self.at_once += 1;
        self.at_once <= MAX_AT_ONCE
    }

    /// Whether a uid in no known set may still be re-checked (once a call).
    pub(crate) fn recheck_sets(&mut self) -> bool {
        !std::mem::replace(&mut self.rechecked_sets, true)
    }

    /// Sleeps for the next jittered backoff, but not past the deadline.
    pub(crate) async fn pause(&mut self) {
        self.at_once = 0;
        let d = self.backoff.pause(jitter_seed()).min(self.remaining());
        tokio::time::sleep(d).await;
    }
}

#[cfg(test)]
mod tests {
    use seqsvr_proto::{status_with, ErrorDetail};

    use super::*;

    fn status(
        code: Code,
        kind: ErrorKind,
        retryable: bool,
        route: Option<pb::RouteTable>,
    ) -> tonic::Status {
        let d = ErrorDetail {
            kind: kind as i32,
            retryable,
            route,
            ..Default::default()
        };
        status_with(code, "msg", d)
    }

    #[test]
    fn classifies_server_errors() {
        let c = |s: tonic::Status| classify(&s, "a:1", &[7, 8]).0;
        let busy = c(status(
            Code::Unavailable,
            ErrorKind::CeilingExhausted,
            true,
            None,
        ));
        assert!(matches!(
            busy,
            Failure::Busy {
                kind: ErrorKind::CeilingExhausted,
                ..
            }
        ));
        let lease = c(status(
            Code::Unavailable,
            ErrorKind::LeaseExpired,
            true,
            None,
        ));
        assert!(matches!(
            lease,
            Failure::Busy {
                kind: ErrorKind::LeaseExpired,
                ..
            }
        ));
        let moved = c(status(Code::Unavailable, ErrorKind::NotOwner, true, None));
        assert!(matches!(moved, Failure::NotOwner { moved: false, .. }));
        let bad = c(status(
            Code::InvalidArgument,
            ErrorKind::InvalidRequest,
            false,
            None,
        ));
        assert_eq!(bad, Failure::Fatal(Error::InvalidArgument("msg".into())));
        let internal = c(status(Code::Internal, ErrorKind::Internal, false, None));
        assert!(matches!(internal, Failure::Fatal(Error::Internal(_))));
    }

    #[test]
    fn out_of_range_names_the_uid_outside_the_attached_set() {
        let route = pb::RouteTable {
            set: Some(pb::SetSpec {
                uid_begin: 0,
                uid_end: 8,
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = status(Code::OutOfRange, ErrorKind::OutOfRange, false, Some(route));
        let (f, r) = classify(&s, "a:1", &[7, 8, 9]);
        assert_eq!(f, Failure::Fatal(Error::OutOfRange { uid: 8 }));
        assert!(r.is_some());
    }

    #[test]
    fn bare_statuses_are_transport_or_typed() {
        let c = |code| classify(&tonic::Status::new(code, "x"), "a:1", &[3]).0;
        assert!(matches!(c(Code::Unavailable), Failure::Transport { .. }));
        assert!(matches!(c(Code::Unknown), Failure::Transport { .. }));
        assert_eq!(
            c(Code::OutOfRange),
            Failure::Fatal(Error::OutOfRange { uid: 3 })
        );
        assert!(matches!(
            c(Code::PermissionDenied),
            Failure::Fatal(Error::Internal(_))
        ));
    }

    #[test]
    fn worst_failure_steers() {
        let t = Failure::Transport {
            message: "t".into(),
        };
        let m = Failure::NotOwner {
            moved: true,
            message: "m".into(),
        };
        let b = Failure::Busy {
            kind: ErrorKind::LeaseExpired,
            message: "b".into(),
        };
        assert_eq!(Failure::worst(b.clone(), t.clone()), t);
        assert_eq!(Failure::worst(t, m.clone()), m);
        let f = Failure::Fatal(Error::OutOfRange { uid: 1 });
        assert_eq!(Failure::worst(f.clone(), m), f);
        assert_eq!(
            b.into_final(),
            Error::Unavailable {
                kind: ErrorKind::LeaseExpired,
                message: "b".into()
            }
        );
    }
}
