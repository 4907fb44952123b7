//! The client plane during start-up: served from the moment the process
//! starts, answering every call at once with a typed `NOT_SERVING_YET`
//! (the reason and when to retry) until the node serves; then every call
//! goes to the real service.
//!
//! Without it the client plane's listener is bound but not served while
//! the node registers or waits out its previous incarnation's lease: the
//! kernel accepts connections nobody answers, and every call (`Routes`
//! too) hangs until the caller's deadline (`docs/operations.md`,
//! Start-up).

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::Either;
use seqsvr_core::AllocId;
use tower_service::Service;

use crate::error::CallError;
use crate::service::starting_status;

/// How long a caller is told to wait while the node registers or claims
/// its first lease.
const RETRY_REGISTERING: Duration = Duration::from_millis(200);
/// The longest wait a caller is told while the previous incarnation's
/// lease runs out (it asks again, and hears the time left).
const RETRY_LEASE_MAX: Duration = Duration::from_millis(500);

/// Where start-up stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Registering this incarnation (or reading the route table): the
    /// store has not answered yet.
    Registering,
    /// The store still holds the previous incarnation of this id, whose
    /// lease may run until about `until` (promise 3).
    WaitingOutLease {
        /// When its lease has certainly ended, as far as this process can
        /// tell.
        until: Instant,
    },
    /// Registered: claiming the first lease and the sections.
    Claiming,
}

/// The start-up state shared by start-up and the gate.
#[derive(Debug)]
pub struct StartState {
    id: AllocId,
    phase: Mutex<Phase>,
}

impl StartState {
    /// Start-up of `id`, registering.
    pub fn new(id: AllocId) -> Arc<Self> {
        Arc::new(Self {
            id,
            phase: Mutex::new(Phase::Registering),
        })
    }

    /// Moves to `phase`.
    pub fn set(&self, phase: Phase) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = phase;
    }

    /// The answer to a call now: the reason and when to retry.
    pub fn error(&self) -> CallError {
        let phase = *self.phase.lock().unwrap_or_else(|e| e.into_inner());
        let (reason, retry) = match phase {
            Phase::Registering => ("registering with the store".to_string(), RETRY_REGISTERING),
            Phase::WaitingOutLease { until } => {
                let left = until.saturating_duration_since(Instant::now());
                (
                    format!(
                        "waiting out the previous incarnation's lease, about {:.1} s",
                        left.as_secs_f64()
                    ),
                    left.clamp(RETRY_REGISTERING, RETRY_LEASE_MAX),
                )
            }
            Phase::Claiming => ("claiming its sections".to_string(), RETRY_REGISTERING),
        };
        CallError::Starting {
            alloc: self.id.clone(),
            reason,
            retry_after_ms: retry.as_millis() as u64,
        }
    }
}

/// The client plane's service: the start-up answer until [`Gated::open`]
/// installs the real service.
#[derive(Debug)]
pub struct Gated<S> {
    inner: Arc<OnceLock<S>>,
    state: Arc<StartState>,
}

impl<S> Clone for Gated<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            state: self.state.clone(),
        }
    }
}

impl<S> Gated<S> {
    /// A gate answering from `state` until opened.
    pub fn new(state: Arc<StartState>) -> Self {
        Self {
            inner: Arc::new(OnceLock::new()),
            state,
        }
    }

    /// Serves `svc` from now on.
    pub fn open(&self, svc: S) {
        let _ = self.inner.set(svc);
    }
}

type Reply = http::Response<tonic::body::Body>;

/// The client plane's service: its calls get the start-up answer.
const ALLOC_PREFIX: &str = "/seqsvr.v1.Alloc/";

impl<S, B> Service<http::Request<B>> for Gated<S>
where
    S: Service<http::Request<B>, Response = Reply, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Reply;
    type Error = Infallible;
    /// The real service's own future once open: no box and no extra
    /// allocation on the serving path (the client plane is served without
    /// a router for that reason); a ready answer while starting.
    type Future = Either<S::Future, Ready<Result<Reply, Infallible>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The inner service (a tonic-generated server) is always ready; it
        // is asked below, before its call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        match self.inner.get() {
            Some(svc) => {
                let mut svc = svc.clone();
                // A tonic-generated server is ready at once; Tower asks
                // that it be polled before it is called.
                let mut cx = Context::from_waker(std::task::Waker::noop());
                match svc.poll_ready(&mut cx) {
                    Poll::Ready(Ok(())) => Either::Left(svc.call(req)),
                    Poll::Ready(Err(never)) => match never {},
                    Poll::Pending => Either::Right(ready(Ok(tonic::Status::unavailable(
                        "the client plane is not ready; retry",
                    )
                    .into_http()))),
                }
            }
            // Another service's path: unimplemented, as the real service
            // answers it (a prober tells a store from an AllocSvr so).
            None if !req.uri().path().starts_with(ALLOC_PREFIX) => {
                let st = tonic::Status::unimplemented(format!(
                    "{} is not served here",
                    req.uri().path()
                ));
                Either::Right(ready(Ok(st.into_http())))
            }
            None => {
                let st = starting_status(&self.state.error());
                Either::Right(ready(Ok(st.into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_the_reason_and_the_wait() {
        let s = StartState::new("alloc-1".into());
        let CallError::Starting {
            reason,
            retry_after_ms,
            ..
        } = s.error()
        else {
            panic!("not a start-up answer");
        };
        assert!(reason.contains("registering"), "{reason}");
        assert_eq!(retry_after_ms, 200);
        s.set(Phase::WaitingOutLease {
            until: Instant::now() + Duration::from_secs(5),
        });
        let CallError::Starting {
            reason,
            retry_after_ms,
            ..
        } = s.error()
        else {
            panic!("not a start-up answer");
        };
        assert!(
            reason.contains("previous incarnation's lease, about"),
            "{reason}"
        );
        assert_eq!(retry_after_ms, 500);
    }
}
