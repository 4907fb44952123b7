//! What a failed attempt means, and the per-call retry budget.
//!
//! Every attempt ends in success or in a [`Failure`]; the client decides
//! from the failure whether to give up, retry at once (the section moved
//! and the error told us where), refresh its routes first (transport
//! failure, no owner, a section no set serves yet), or just back off (the
//! owner is busy raising its ceiling or renewing its lease).
//!
//! Retrying `next` is always safe: if a lost reply hid a number that was
//! handed out, the retry gets a larger one, and a gap is allowed where a
//! repeat is not (promise 1).

use std::time::Duration;

use seqsvr_core::SetId;
use seqsvr_proto::{self as pb, detail_of, ErrorKind};
use tokio::time::Instant;
use tonic::Code;

use crate::backoff::{jitter_seed, Backoff};
use crate::error::Error;
use crate::options::ClientOptions;
use crate::routes::{Hold, Target};

/// Most consecutive retries without a pause. A `NOT_OWNER` or `MOVED`
/// carrying a newer route is retried at once, but two AllocSvrs (or two
/// sets) with conflicting views could bounce a call between them; after
/// this many it backs off.
const MAX_AT_ONCE: u32 = 4;

/// The result of one attempt.
pub(crate) type Attempt<T> = std::result::Result<T, Failure>;

/// Why an attempt failed, as far as retrying is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Give up and return this.
    Fatal(Error),
    /// The AllocSvr called does not serve the uid: `NOT_OWNER` (another
    /// AllocSvr of its set owns the section, or none does), `MOVED` (its
    /// set gave the section to another set) or `NOT_SERVED` (its set does
    /// not serve the section). A route table an older server attached is
    /// installed before this is built; a newer server names only its
    /// route version, and the table is fetched (from that server) when
    /// the version is newer than the cached one.
    NotOwner {
        /// Which of the three.
        kind: ErrorKind,
        /// Whether the uid now routes to another AllocSvr (set on
        /// building, for ranking a batch's failures; the retry decision
        /// looks again, as a directory refresh may have changed it).
        moved: bool,
        /// The uid (the first of a batch part).
        uid: u64,
        /// The AllocSvr that refused it.
        addr: String,
        /// The set whose table sent the call there.
        set: SetId,
        /// The directory version the server holds (0: not said); newer
        /// than the client's means the client's directory is stale.
        directory: u64,
        /// The version of the server's route table (0: not said); newer
        /// than the cached table of `set` means the cached one is stale.
        version: u64,
        /// The section's owner in the server's table (`""`: none named),
        /// for the logs: the retry goes where the (fetched) table says.
        owner: String,
        /// The server's message.
        message: String,
    },
    /// No set serves the uid. Final, unless the cached sets may be out of
    /// date (a seed not heard from yet, or a directory not checked
    /// lately): then they are re-checked once.
    NoSet {
        /// The uid.
        uid: u64,
    },
    /// The cached routes know where the uid belongs but cannot send it
    /// there now (no owner, or a section no set serves yet).
    Held {
        /// The uid.
        uid: u64,
        /// Why, and which set to refresh.
        hold: Hold,
    },
    /// The owner answered a retryable error (ceiling, lease, not serving
    /// yet…).
    Busy {
        /// What it reported.
        kind: ErrorKind,
        /// Its message.
        message: String,
        /// How long it asked the caller to wait (zero: not said).
        retry_after: Duration,
    },
    /// The call never got an answer (refused, reset, timed out), or no
    /// store of a set answered for its table.
    Transport {
        /// What went wrong, with the address.
        message: String,
        /// The set of the AllocSvr that did not answer (its stores know
        /// who serves in its place); `None`: refresh from every source.
        set: Option<SetId>,
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
            Failure::Held { .. } => 1,
            Failure::Busy { .. } => 0,
        }
    }

    /// How long the server asked the caller to wait before the next try.
    pub(crate) fn retry_after(&self) -> Duration {
        match self {
            Failure::Busy { retry_after, .. } => *retry_after,
            _ => Duration::ZERO,
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

    /// [`Failure::worst`] of an optional failure and another.
    pub(crate) fn fold(a: Option<Failure>, b: Failure) -> Option<Failure> {
        Some(match a {
            Some(a) => Failure::worst(a, b),
            None => b,
        })
    }

    /// The error a call returns when its deadline passes after this.
    pub(crate) fn into_final(self) -> Error {
        match self {
            Failure::Fatal(e) => e,
            Failure::NotOwner { kind, message, .. } => Error::Unavailable { kind, message },
            Failure::NoSet { uid } => Error::OutOfRange { uid },
            Failure::Held {
                uid,
                hold: Hold::Unowned(_),
            } => Error::NoRoute { uid },
            Failure::Held { uid, hold } => Error::Unavailable {
                kind: ErrorKind::NotServed,
                message: format!(
                    "uid {uid}'s section is not served by set {} (yet): a move under way",
                    hold.set()
                ),
            },
            Failure::Busy { kind, message, .. } => Error::Unavailable { kind, message },
            Failure::Transport { message, .. } => Error::DeadlineExceeded { last: message },
        }
    }
}

/// What an error says about the server's route table.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RouteFacts {
    /// The whole table, as servers before `route_version` attached it
    /// (the caller installs it if it is newer).
    pub table: Option<pb::RouteTable>,
    /// The version of the server's table (0: not said).
    pub version: u64,
}

/// Reads a non-OK status from the AllocSvr at `target` called with `uids`
/// (one uid, or a batch part). Returns the failure and what the server
/// said of its route table, which the caller acts on; a `NotOwner` comes
/// back with `moved: false` for the caller to correct.
pub(crate) fn classify(
    status: &tonic::Status,
    target: &Target,
    uids: &[u64],
) -> (Failure, RouteFacts) {
    let addr = target.addr.as_str();
    let message = status.message().to_string();
    let Some(d) = detail_of(status) else {
        let code = match status.code() {
            Code::Internal if peer_hung_up(status) => Code::Unavailable,
            code => code,
        };
        let f = classify_bare(code, target, message, uids);
        return (f, RouteFacts::default());
    };
    #[allow(deprecated)] // still decoded from older servers
    let facts = RouteFacts {
        version: d.route.as_ref().map_or(d.route_version, |r| r.version),
        table: d.route,
    };
    let kind = ErrorKind::try_from(d.kind).unwrap_or(ErrorKind::Unspecified);
    let failure = match kind {
        ErrorKind::NotOwner | ErrorKind::Moved | ErrorKind::NotServed => Failure::NotOwner {
            kind,
            moved: false,
            uid: uids.first().copied().unwrap_or_default(),
            addr: addr.to_string(),
            set: target.set_id,
            directory: d.directory_version,
            version: facts.version,
            owner: d.owner_addr,
            message,
        },
        ErrorKind::OutOfRange => {
            let set = d
                .set
                .as_ref()
                .or(facts.table.as_ref().and_then(|r| r.set.as_ref()));
            // Name the first uid the server's set really lacks, when it says.
            let outside = |u: &&u64| set.is_none_or(|s| !(s.uid_begin..s.uid_end).contains(*u));
            let uid = uids.iter().find(outside).or(uids.first()).copied();
            Failure::Fatal(Error::OutOfRange {
                uid: uid.unwrap_or_default(),
            })
        }
        ErrorKind::InvalidRequest => Failure::Fatal(Error::InvalidArgument(message)),
        ErrorKind::CounterMaxReached => Failure::Fatal(Error::CounterMaxReached {
            name: String::from_utf8_lossy(&d.counter_name).into_owned(),
            max: d.current,
        }),
        kind if d.retryable => Failure::Busy {
            kind,
            message,
            retry_after: Duration::from_millis(d.retry_after_ms),
        },
        kind => Failure::Fatal(Error::Internal(format!("{kind:?} from {addr}: {message}"))),
    };
    (failure, facts)
}

/// Whether a bare `INTERNAL` status is the peer closing the connection
/// under a call rather than a fault of the call: tonic reports HTTP/2
/// errors as `INTERNAL` ("h2 protocol error"), among them a server that
/// goes away mid-call (its GOAWAY or stream reset, or the socket closing)
/// — a transport failure, retried like `UNAVAILABLE`. A protocol error
/// this side detected itself (a TLS server answered a plaintext call, say)
/// stays `INTERNAL`: retrying cannot mend it.
fn peer_hung_up(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    let mut source: Option<&(dyn std::error::Error + 'static)> = status.source();
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.is_io() || h2.is_remote() || h2.reason() == Some(h2::Reason::NO_ERROR);
        }
        source = e.source();
    }
    false
}

/// Reads a status without a seqsvr detail: a transport failure reported
/// by tonic itself, or a server that is not an AllocSvr.
fn classify_bare(code: Code, target: &Target, message: String, uids: &[u64]) -> Failure {
    let addr = target.addr.as_str();
    match code {
        // `Unknown` is what tonic reports for a connection reset mid-call.
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Unknown
        | Code::Aborted => Failure::Transport {
            message: format!("{addr}: {code:?}: {message}"),
            set: Some(target.set_id),
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

    /// The failure to act on after an attempt failed with `f`, given the
    /// last failure an owner answered with (`answered`, updated here).
    ///
    /// An attempt gets at most the time left before the deadline, so the
    /// last one may be cut to a fraction of a millisecond and time out at
    /// the deadline. Such a timeout says nothing about the owner beyond what
    /// it last answered, so that answer stands for it: a call whose owner
    /// kept answering "busy" ends `Unavailable` with the owner's reason, not
    /// `DeadlineExceeded`. Any other failure becomes the last answer.
    pub(crate) fn settle(&self, f: Failure, answered: &mut Option<Failure>) -> Failure {
        match f {
            Failure::Transport { .. } if self.expired() => answered.clone().unwrap_or(f),
            Failure::Transport { .. } => f,
            f => {
                *answered = Some(f.clone());
                f
            }
        }
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

    /// Sleeps for the next jittered backoff or `hint` (the delay a server
    /// asked for), whichever is longer, but not past the deadline.
    pub(crate) async fn pause_at_least(&mut self, hint: Duration) {
        self.at_once = 0;
        let d = self
            .backoff
            .pause(jitter_seed())
            .max(hint)
            .min(self.remaining());
        tokio::time::sleep(d).await;
    }
}

#[cfg(test)]
mod tests {
    use seqsvr_proto::{status_with, ErrorDetail};

    use super::*;

    /// A status as servers before `route_version` built them (`route`:
    /// the whole table).
    #[allow(deprecated)]
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

    fn target() -> Target {
        Target {
            set_id: 3,
            version: 1,
            addr: "a:1".into(),
        }
    }

    #[tokio::test]
    async fn a_starting_server_is_retried_after_the_delay_it_gives() {
        let d = ErrorDetail {
            kind: ErrorKind::NotServingYet as i32,
            retryable: true,
            retry_after_ms: 300,
            reason: "waiting out the previous incarnation's lease, about 2.0 s".into(),
            ..Default::default()
        };
        let st = status_with(Code::Unavailable, "alloc-1: not serving yet", d);
        let (f, _) = classify(&st, &target(), &[7]);
        assert!(
            matches!(
                f,
                Failure::Busy {
                    kind: ErrorKind::NotServingYet,
                    ..
                }
            ),
            "{f:?}"
        );
        assert_eq!(f.retry_after(), Duration::from_millis(300));
        let mut retry = Retry::new(&ClientOptions::default());
        let t = std::time::Instant::now();
        retry.pause_at_least(f.retry_after()).await;
        // The backoff alone starts at 10 ms.
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn a_timeout_at_the_deadline_does_not_hide_the_last_answer() {
        let busy = Failure::Busy {
            kind: ErrorKind::CeilingExhausted,
            message: "raising".into(),
            retry_after: Duration::ZERO,
        };
        let timeout = Failure::Transport {
            message: "no answer within 408µs".into(),
            set: Some(0),
        };
        let open = Retry::new(&ClientOptions::default());
        let done = Retry::new(&ClientOptions {
            deadline: Duration::ZERO,
            ..Default::default()
        });
        assert!(done.expired() && !open.expired());
        let mut answered = None;
        // Before the deadline a timeout is acted on as it is, and an
        // answer is remembered.
        assert_eq!(open.settle(timeout.clone(), &mut answered), timeout);
        assert_eq!(answered, None);
        assert_eq!(open.settle(busy.clone(), &mut answered), busy);
        assert_eq!(answered, Some(busy.clone()));
        // At the deadline the last answer stands for the timeout...
        assert_eq!(done.settle(timeout.clone(), &mut answered), busy);
        // ...and with no answer at all, the timeout is what there is.
        assert_eq!(done.settle(timeout.clone(), &mut None), timeout);
    }

    #[test]
    fn classifies_server_errors() {
        let c = |s: tonic::Status| classify(&s, &target(), &[7, 8]).0;
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
    fn not_owner_moved_and_not_served_name_uid_set_and_directory() {
        for kind in [ErrorKind::NotOwner, ErrorKind::Moved, ErrorKind::NotServed] {
            let d = ErrorDetail {
                kind: kind as i32,
                retryable: true,
                to_set: 4,
                directory_version: 9,
                route_version: 12,
                owner_addr: "b:2".into(),
                ..Default::default()
            };
            let s = status_with(Code::Unavailable, "msg", d);
            let (f, facts) = classify(&s, &target(), &[7, 8]);
            let want = Failure::NotOwner {
                kind,
                moved: false,
                uid: 7,
                addr: "a:1".into(),
                set: 3,
                directory: 9,
                version: 12,
                owner: "b:2".into(),
                message: "msg".into(),
            };
            assert_eq!(f, want);
            assert_eq!(
                facts,
                RouteFacts {
                    table: None,
                    version: 12
                }
            );
            assert_eq!(
                f.into_final(),
                Error::Unavailable {
                    kind,
                    message: "msg".into()
                }
            );
        }
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
        let s = status(
            Code::OutOfRange,
            ErrorKind::OutOfRange,
            false,
            Some(route.clone()),
        );
        let (f, r) = classify(&s, &target(), &[7, 8, 9]);
        assert_eq!(f, Failure::Fatal(Error::OutOfRange { uid: 8 }));
        assert!(r.table.is_some());
        // As servers send it now: the set alone.
        let d = ErrorDetail {
            kind: ErrorKind::OutOfRange as i32,
            set: route.set,
            route_version: 3,
            ..Default::default()
        };
        let s = status_with(Code::OutOfRange, "msg", d);
        let (f, r) = classify(&s, &target(), &[7, 8, 9]);
        assert_eq!(f, Failure::Fatal(Error::OutOfRange { uid: 8 }));
        assert_eq!((r.table, r.version), (None, 3));
    }

    #[test]
    fn bare_statuses_are_transport_or_typed() {
        let c = |code| classify(&tonic::Status::new(code, "x"), &target(), &[3]).0;
        assert!(matches!(
            c(Code::Unavailable),
            Failure::Transport { set: Some(3), .. }
        ));
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

    /// An owner that goes away under a call (a failover, a restart)
    /// reaches the caller as tonic's `INTERNAL` "h2 protocol error": that
    /// is a transport failure and is retried; a protocol error this side
    /// detected (a TLS server's bytes read as HTTP/2) is not.
    #[test]
    fn a_peer_hanging_up_mid_call_is_transport_not_internal() {
        let of = |e: h2::Error| {
            let st = tonic::Status::from_error(Box::new(e));
            assert_eq!(st.code(), Code::Internal, "{st:?}");
            assert!(st.message().starts_with("h2 protocol error"), "{st:?}");
            classify(&st, &target(), &[3]).0
        };
        let f = of(h2::Error::from(h2::Reason::NO_ERROR));
        assert!(
            matches!(f, Failure::Transport { set: Some(3), .. }),
            "{f:?}"
        );
        for reason in [h2::Reason::PROTOCOL_ERROR, h2::Reason::FRAME_SIZE_ERROR] {
            let f = of(h2::Error::from(reason));
            assert!(matches!(f, Failure::Fatal(Error::Internal(_))), "{f:?}");
        }
        // Without the h2 error underneath, INTERNAL is the server's word.
        let bare = tonic::Status::new(Code::Internal, "h2 protocol error: http2 error");
        let f = classify(&bare, &target(), &[3]).0;
        assert!(matches!(f, Failure::Fatal(Error::Internal(_))), "{f:?}");
    }

    #[test]
    fn worst_failure_steers() {
        let t = Failure::Transport {
            message: "t".into(),
            set: None,
        };
        let m = Failure::NotOwner {
            kind: ErrorKind::Moved,
            moved: true,
            uid: 1,
            addr: "a".into(),
            set: 0,
            directory: 0,
            version: 0,
            owner: String::new(),
            message: "m".into(),
        };
        let b = Failure::Busy {
            kind: ErrorKind::LeaseExpired,
            message: "b".into(),
            retry_after: Duration::ZERO,
        };
        let h = Failure::Held {
            uid: 5,
            hold: Hold::NotServed(2),
        };
        assert_eq!(Failure::worst(b.clone(), t.clone()), t);
        assert_eq!(Failure::worst(b.clone(), h.clone()), h);
        assert_eq!(Failure::worst(h.clone(), t.clone()), t);
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
        assert!(matches!(
            h.into_final(),
            Error::Unavailable {
                kind: ErrorKind::NotServed,
                ..
            }
        ));
        let unowned = Failure::Held {
            uid: 5,
            hold: Hold::Unowned(2),
        };
        assert_eq!(unowned.into_final(), Error::NoRoute { uid: 5 });
    }
}
