//! Per-call metrics for a gRPC server: calls and errors by method, status
//! code and error kind, and latency, as Prometheus metrics.
//!
//! The kind is what the server's typed error says (`not_owner`, `moved`,
//! `stale_epoch` …), read from the [`KIND_HEADER`] its statuses carry;
//! `none` for a successful call and for an error without one (tonic's
//! own, a transport's). Only the kinds given at registration are labels,
//! anything else is `other`: the label's values stay bounded.
//!
//! A tower layer around the server's routes. It reads the method from the
//! request path and the status from the response headers: tonic answers a
//! failed unary call with its status in the headers ("trailers-only"),
//! while a successful one carries no `grpc-status` header (its `OK` comes in
//! the trailers), so headers without one count as `OK`. Per call it costs
//! two clock reads, a look-up in a small per-method table by path, one
//! header look-up and a few atomic adds — no allocation.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::server::GRPC_STATUS;

/// The response header naming a failed call's error kind (set by
/// `seqsvr_proto::status_with`; the two must agree).
pub const KIND_HEADER: &str = "seqsvr-error-kind";

/// The kind of a call with no typed error.
const NO_KIND: &str = "none";

/// The gRPC status names, indexed by code.
const CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// A `grpc-status` value as a code; anything but a number in range counts
/// as `UNKNOWN`.
fn code(v: &[u8]) -> usize {
    match v {
        [d @ b'0'..=b'9'] => usize::from(d - b'0'),
        [b'1', d @ b'0'..=b'6'] => 10 + usize::from(d - b'0'),
        _ => 2,
    }
}

/// One method's metric handles, resolved once.
struct Method {
    path: String,
    name: String,
    seconds: Histogram,
    /// Per code, the calls without an error kind.
    codes: Vec<IntCounter>,
}

/// The metrics of every method of one server.
pub struct CallMetrics {
    methods: Vec<Method>,
    other: Method,
    /// `seqsvr_calls_total`, for the series of failed calls with a kind
    /// (made on first use: errors only).
    calls: IntCounterVec,
    /// The error kinds taken as labels.
    kinds: Vec<String>,
}

impl CallMetrics {
    /// Registers `seqsvr_calls_total{plane,method,code,kind}` and
    /// `seqsvr_call_seconds{plane,method}` for the given gRPC paths (e.g.
    /// `/seqsvr.v1.Alloc/Next`); calls to other paths count as `other`.
    /// `kinds` are the error kinds taken as labels
    /// (`seqsvr_proto::kind_labels`).
    pub fn register(
        registry: &Registry,
        plane: &str,
        paths: &[&str],
        kinds: &[String],
    ) -> prometheus::Result<Arc<Self>> {
        let calls = IntCounterVec::new(
            Opts::new(
                "seqsvr_calls_total",
                "gRPC calls served, by method, status code and error kind (none: no typed error)",
            )
            .const_label("plane", plane),
            &["method", "code", "kind"],
        )?;
        let seconds = HistogramVec::new(
            HistogramOpts::new("seqsvr_call_seconds", "gRPC call latency at the server")
                .const_label("plane", plane)
                .buckets(vec![
                    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                    0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ]),
            &["method"],
        )?;
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(seconds.clone()))?;
        let method = |path: &str| {
            let name = path.rsplit('/').next().unwrap_or(path);
            Method {
                path: path.to_string(),
                name: name.to_string(),
                seconds: seconds.with_label_values(&[name]),
                codes: CODES
                    .iter()
                    .map(|c| calls.with_label_values(&[name, c, NO_KIND]))
                    .collect(),
            }
        };
        Ok(Arc::new(Self {
            methods: paths.iter().map(|p| method(p)).collect(),
            other: method("other"),
            calls,
            kinds: kinds.to_vec(),
        }))
    }

    /// Counts one call of `m` answered with `code` and the kind header
    /// `kind` (if any).
    fn count(&self, m: &Method, code: usize, kind: Option<&[u8]>) {
        let Some(kind) = kind.filter(|_| code != 0) else {
            m.codes[code].inc();
            return;
        };
        let label = (self.kinds.iter())
            .find(|k| k.as_bytes() == kind)
            .map_or("other", String::as_str);
        self.calls
            .with_label_values(&[m.name.as_str(), CODES[code], label])
            .inc();
    }

    #[cfg(test)]
    fn method(&self, path: &str) -> &Method {
        self.methods
            .iter()
            .find(|m| m.path == path)
            .unwrap_or(&self.other)
    }
}

/// The layer to add to a server builder.
#[derive(Clone)]
pub struct CallMetricsLayer(pub Arc<CallMetrics>);

impl<S> Layer<S> for CallMetricsLayer {
    type Service = Measured<S>;

    fn layer(&self, inner: S) -> Measured<S> {
        Measured {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// A service whose calls are counted and timed.
#[derive(Clone)]
pub struct Measured<S> {
    inner: S,
    metrics: Arc<CallMetrics>,
}

impl<S, B, RB> Service<http::Request<B>> for Measured<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = MeasuredFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let idx = self
            .metrics
            .methods
            .iter()
            .position(|m| m.path == req.uri().path());
        MeasuredFuture {
            inner: self.inner.call(req),
            metrics: self.metrics.clone(),
            idx,
            start: Instant::now(),
        }
    }
}

pin_project_lite::pin_project! {
    /// A call being measured.
    pub struct MeasuredFuture<F> {
        #[pin]
        inner: F,
        metrics: Arc<CallMetrics>,
        idx: Option<usize>,
        start: Instant,
    }
}

impl<F, RB, E> Future for MeasuredFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = std::task::ready!(this.inner.poll(cx));
        let m = match this.idx {
            Some(i) => &this.metrics.methods[*i],
            None => &this.metrics.other,
        };
        m.seconds.observe(this.start.elapsed().as_secs_f64());
        match &res {
            Ok(r) => {
                let h = r.headers();
                let code = h.get(&GRPC_STATUS).map_or(0, |v| code(v.as_bytes()));
                let kind = h.get(KIND_HEADER).map(|v| v.as_bytes());
                this.metrics.count(m, code, kind);
            }
            Err(_) => m.codes[2].inc(),
        }
        Poll::Ready(res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_values_are_read_as_codes() {
        for (i, name) in CODES.iter().enumerate() {
            assert_eq!(code(i.to_string().as_bytes()), i, "{name}");
        }
        for bad in ["", "17", "99", "-1", "1 ", "007", "x"] {
            assert_eq!(code(bad.as_bytes()), 2, "{bad:?}");
        }
    }

    #[test]
    fn methods_resolve_once_and_unknown_paths_are_other() {
        let r = Registry::new();
        let kinds = ["not_owner".to_string(), "stale_epoch".to_string()];
        let m = CallMetrics::register(&r, "client", &["/seqsvr.v1.Alloc/Next"], &kinds).unwrap();
        assert_eq!(
            m.method("/seqsvr.v1.Alloc/Next").path,
            "/seqsvr.v1.Alloc/Next"
        );
        assert_eq!(m.method("/x/Y").path, "other");
        m.method("/seqsvr.v1.Alloc/Next").codes[14].inc();
        let next = m.method("/seqsvr.v1.Alloc/Next");
        m.count(next, 9, Some(b"not_owner"));
        m.count(next, 9, Some(b"not_owner"));
        // Not a known kind: `other`, whatever a server (or a proxy) said.
        m.count(next, 14, Some(b"made_up_kind"));
        // A success carries no kind, whatever its headers say.
        m.count(next, 0, Some(b"not_owner"));
        m.count(next, 13, None);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&r.gather())
            .unwrap();
        for line in [
            r#"seqsvr_calls_total{code="UNAVAILABLE",kind="none",method="Next",plane="client"} 1"#,
            r#"seqsvr_calls_total{code="FAILED_PRECONDITION",kind="not_owner",method="Next",plane="client"} 2"#,
            r#"seqsvr_calls_total{code="UNAVAILABLE",kind="other",method="Next",plane="client"} 1"#,
            r#"seqsvr_calls_total{code="OK",kind="none",method="Next",plane="client"} 1"#,
            r#"seqsvr_calls_total{code="INTERNAL",kind="none",method="Next",plane="client"} 1"#,
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        assert!(!text.contains("made_up_kind"), "{text}");
    }
}
