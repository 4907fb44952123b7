//! The plane's rules for each call: the message-size limit and the
//! request timeout, in one layer.
//!
//! [`PlaneLayer`] wraps every request body in [`Limited`] (the size check,
//! see the `size` module) and every call in [`PlaneFuture`], which
//!
//! - answers tonic's "message too large" `OUT_OF_RANGE` as
//!   `RESOURCE_EXHAUSTED`, and
//! - answers `CANCELLED` for a call still unfinished `request_timeout`
//!   after it first had to wait, dropping the handler's future.
//!
//! # A timer only for calls that wait
//!
//! tonic's own `Server::timeout` makes a timer for every call: a clock
//! read and a handle on the runtime's timer when the call starts, a
//! registration in the timer wheel when it first waits, a removal when it
//! ends. Most calls on the client plane never wait: the request is in
//! hand when the handler runs and the answer comes from memory. So the
//! timer here is made only when the call's future first returns
//! `Pending`, and the timeout runs from then. A call that is answered on
//! its first poll, as a `Next` from memory is, costs no timer at all; one
//! that waits (on a raise, a slow request body, a store) gets its full
//! `request_timeout` from the moment it started waiting, which is within
//! the same poll as the call's start.
//!
//! A client's own `grpc-timeout` is still honoured by tonic beneath this
//! layer; the shorter of the two ends the call.

use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;
use tonic::Status;
use tower_layer::Layer;
use tower_service::Service;

use super::size::{rewrite_too_large, Limited, Unfinished};

/// The plane's per-call rules (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct PlaneLayer {
    max_message: usize,
    request_timeout: Duration,
    unfinished: &'static Unfinished,
}

impl PlaneLayer {
    /// Refuses request messages over `max_message` bytes and unfinished
    /// ones that find no room in `unfinished` (see the `size` module), and
    /// ends calls still unfinished `request_timeout` after they first wait.
    ///
    /// The budget is a `'static` reference so that the layer stays `Copy`:
    /// tonic clones the service for every call, and a shared counted
    /// pointer would make each clone an atomic update on one cache line
    /// shared by all connections. A listener makes one budget for its
    /// life ([`Listener::server`](super::Listener::server)).
    pub fn new(
        max_message: usize,
        request_timeout: Duration,
        unfinished: &'static Unfinished,
    ) -> PlaneLayer {
        PlaneLayer {
            max_message,
            request_timeout,
            unfinished,
        }
    }
}

impl<S> Layer<S> for PlaneLayer {
    type Service = PlaneService<S>;

    fn layer(&self, inner: S) -> PlaneService<S> {
        PlaneService {
            inner,
            rules: *self,
        }
    }
}

/// The service [`PlaneLayer`] makes.
#[derive(Clone, Debug)]
pub struct PlaneService<S> {
    inner: S,
    rules: PlaneLayer,
}

impl<S, B, ResBody> Service<http::Request<B>> for PlaneService<S>
where
    S: Service<http::Request<Limited<B>>, Response = http::Response<ResBody>>,
    ResBody: Default,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = PlaneFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let max = self.rules.max_message;
        let budget = self.rules.unfinished;
        PlaneFuture {
            inner: self
                .inner
                .call(req.map(|body| Limited::new(body, max, budget))),
            timeout: self.rules.request_timeout,
            timer: None,
        }
    }
}

pin_project! {
    /// One call under the plane's rules.
    pub struct PlaneFuture<F> {
        #[pin]
        inner: F,
        timeout: Duration,
        // Made when the call first waits (see the module doc).
        timer: Option<Pin<Box<Sleep>>>,
    }
}

impl<F, ResBody, E> Future for PlaneFuture<F>
where
    F: Future<Output = Result<http::Response<ResBody>, E>>,
    ResBody: Default,
{
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if let Poll::Ready(mut out) = this.inner.poll(cx) {
            if let Ok(res) = &mut out {
                rewrite_too_large(res.headers_mut());
            }
            return Poll::Ready(out);
        }
        let timeout = *this.timeout;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(Ok(timed_out(timeout)))
    }
}

/// The answer to a call past the request timeout: `CANCELLED`, as tonic's
/// own server timeout answers.
fn timed_out<B: Default>(timeout: Duration) -> http::Response<B> {
    let status = Status::cancelled(format!(
        "request timeout: the call was not done within {} ms",
        timeout.as_millis()
    ));
    status.into_http::<B>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A service whose calls are answered at once or never.
    #[derive(Clone)]
    struct Svc {
        wait: bool,
        polls: Arc<AtomicUsize>,
    }

    impl Service<http::Request<Limited<()>>> for Svc {
        type Response = http::Response<()>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<http::Response<()>, Infallible>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<Limited<()>>) -> Self::Future {
            let wait = self.wait;
            let polls = self.polls.clone();
            Box::pin(std::future::poll_fn(move |_| {
                polls.fetch_add(1, Ordering::Relaxed);
                if wait {
                    Poll::Pending
                } else {
                    Poll::Ready(Ok(http::Response::new(())))
                }
            }))
        }
    }

    fn svc(wait: bool) -> (PlaneService<Svc>, Arc<AtomicUsize>) {
        let polls = Arc::new(AtomicUsize::new(0));
        static BUDGET: std::sync::LazyLock<Unfinished> =
            std::sync::LazyLock::new(|| Unfinished::new(1 << 20));
        let s = PlaneLayer::new(1024, Duration::from_millis(300), &BUDGET).layer(Svc {
            wait,
            polls: polls.clone(),
        });
        (s, polls)
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_answered_at_once_makes_no_timer() {
        let (mut s, polls) = svc(false);
        let mut f = Box::pin(s.call(http::Request::new(())));
        let res = f
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()));
        assert!(matches!(res, Poll::Ready(Ok(_))));
        assert!(f.timer.is_none());
        assert_eq!(polls.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_call_is_cancelled_at_the_timeout_from_its_first_wait() {
        let (mut s, _) = svc(true);
        let start = tokio::time::Instant::now();
        let res = s.call(http::Request::new(())).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        assert!(has_status(res.headers(), "1"), "{:?}", res.headers());
        let msg = res.headers().get("grpc-message").unwrap().to_str().unwrap();
        assert!(msg.contains("300"), "{msg}");
    }

    fn has_status(headers: &HeaderMap, code: &str) -> bool {
        headers
            .get("grpc-status")
            .is_some_and(|v| v.as_bytes() == code.as_bytes())
    }
}
