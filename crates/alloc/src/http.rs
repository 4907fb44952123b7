//! The HTTP API: a door for `curl` users, scripts and health checkers, on
//! its own port (`http_addr`), answering through the [`Front`] like gRPC
//! does — any uid of the cluster, the owner's number (`docs/clients.md`,
//! HTTP).
//!
//! - `GET /v1/next/{uid}` → the number as `text/plain`, or
//!   `{"uid":…,"seq":…}` with `Accept: application/json`;
//! - `POST /v1/next-batch` with `{"uids":[…]}` → `{"seqs":[…]}`;
//! - `GET /v1/current/{uid}` → like `next`, without handing one out;
//! - `GET /v1/name/next/{name}` and `GET /v1/name/current/{name}`: the
//!   same for a named counter (`docs/counters.md`; the name
//!   percent-decoded, 1..=256 bytes), `uid` in JSON being its position;
//! - `GET /api/segment/get/{name}` → the name's next number as bare text
//!   (no newline), as Leaf's segment API answers, for teams migrating.
//! - the monitor of named counters (`crate::http_monitor`): `GET
//!   /v1/name/info/{name}`, `GET /v1/names?limit=&cursor=&prefix=` and
//!   Leaf's `GET /cache`, JSON, read only;
//! - time-ordered ids (docs/ids.md): `GET /v1/id/{ns}` → one id as
//!   `text/plain` (or `{"namespace":…,"id":…}`); `GET /v1/ids/{ns}/{n}` →
//!   `{"namespace":…,"ids":[…]}`; `GET /v1/decode-id/{ns}/{id}` →
//!   `{"namespace","time_ms","time","worker","sequence"}`; and Leaf's
//!   shapes: `GET /api/snowflake/get/{ns}` → bare text, `GET
//!   /decodeSnowflakeId?snowflakeId={id}[&namespace={ns}]` →
//!   `{"timestamp":"ms(date)","workerId":"…","sequenceId":"…"}` (namespace
//!   `default` unless named).
//!
//! Errors are JSON, `{"error":{"kind":"OWNER_UNAVAILABLE","message":…,
//! "retryable":true,"retry_after_ms":50}}`, with the kinds gRPC's
//! `ErrorDetail` names (the one mapping, `Shared::error_detail`) and an
//! HTTP status derived from its code: 400 for a bad uid or body, 404 for
//! an unknown path (or id namespace), 405 for a wrong method, 413 for a body over
//! [`MAX_BODY`], 429 for `OVERLOADED` and 503 with `Retry-After` for the
//! other retryable kinds. Bad input changes nothing: it is refused before
//! the front is called. Plain hyper (HTTP/1.1) — the doors are thin;
//! bounded: [`MAX_CONNECTIONS`], request heads read within
//! [`HEAD_TIMEOUT`], bodies of at most [`MAX_BODY`] bytes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use seqsvr_core::{Uid, MAX_BATCH};
use seqsvr_net::tls::ServerTls;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tonic::Code;

use crate::error::CallError;
use crate::front::Front;
use crate::http_ids::{percent_decode, IdRoute};
use crate::http_monitor::MonitorRoute;

/// Connections served at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 1024;
/// Largest request body: a batch of [`MAX_BATCH`] uids of 20 digits, with
/// room for spaces.
pub const MAX_BODY: usize = 128 * 1024;
/// Time a client has to send a request head (and a TLS handshake).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// A response body.
type Body = Full<Bytes>;

/// Serves the HTTP API on `tcp` until `stop` resolves: TLS with `tls`
/// (the client plane's identity; ALPN `http/1.1`), plaintext otherwise.
pub async fn serve(
    tcp: TcpListener,
    front: Arc<Front>,
    tls: Option<ServerTls>,
    stop: impl Future<Output = ()>,
) {
    let tls = tls.map(|t| t.for_http1().acceptor());
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(stop);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let sock = tokio::select! {
            _ = &mut stop => return,
            r = tcp.accept() => match r {
                Ok((sock, _)) => sock,
                Err(e) => {
                    tracing::warn!("http accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = sock.set_nodelay(true);
        let front = front.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => connection(sock, front).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(sock)).await {
                        Ok(Ok(s)) => connection(s, front).await,
                        Ok(Err(e)) => tracing::debug!("http tls handshake: {e}"),
                        Err(_) => tracing::debug!("http tls handshake timed out"),
                    }
                }
            }
        });
    }
}

/// Serves one connection (HTTP/1.1, keep-alive).
async fn connection<S>(io: S, front: Arc<Front>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| {
        let front = front.clone();
        async move { Ok::<_, std::convert::Infallible>(handle(&front, req).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(16 * 1024)
        .serve_connection(TokioIo::new(io), svc)
        .await;
    if let Err(e) = served {
        tracing::debug!("http connection: {e}");
    }
}

/// What a request asks for, once its path and method are understood.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    Next(Uid),
    Current(Uid),
    Batch,
    /// `/v1/name/next/{name}`: the name (checked) and its position.
    NameNext(Vec<u8>, Uid),
    /// `/v1/name/current/{name}`.
    NameCurrent(Vec<u8>, Uid),
    /// Leaf's `/api/segment/get/{key}`: a name's next, as bare text.
    Leaf(Vec<u8>),
    /// Time-ordered ids (`crate::http_ids`).
    Id(IdRoute),
    /// The monitor of named counters (`crate::http_monitor`).
    Monitor(MonitorRoute),
}

/// Why a request is refused before the front is called.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    NotFound,
    Method(&'static str),
    Invalid(String),
    TooLarge,
}

/// The route of `method path` (no query), or why not.
#[cfg(test)]
fn route(method: &Method, path: &str) -> Result<Route, Refusal> {
    route_q(method, path, None)
}

/// The route of `method path?query`, or why not.
fn route_q(method: &Method, path: &str, query: Option<&str>) -> Result<Route, Refusal> {
    let uid = |s: &str| {
        parse_uid(s).ok_or_else(|| {
            Refusal::Invalid(format!("{s:?} is not a uid (a decimal number below 2^64)"))
        })
    };
    let (want, r) = if let Some(u) = path.strip_prefix("/v1/next/") {
        (Method::GET, uid(u).map(Route::Next))
    } else if let Some(u) = path.strip_prefix("/v1/current/") {
        (Method::GET, uid(u).map(Route::Current))
    } else if let Some(n) = path.strip_prefix("/v1/name/next/") {
        (Method::GET, name(n).map(|(n, k)| Route::NameNext(n, k)))
    } else if let Some(n) = path.strip_prefix("/v1/name/current/") {
        (Method::GET, name(n).map(|(n, k)| Route::NameCurrent(n, k)))
    } else if let Some(n) = path.strip_prefix("/api/segment/get/") {
        (Method::GET, name(n).map(|(n, _)| Route::Leaf(n)))
    } else if path == "/v1/next-batch" {
        (Method::POST, Ok(Route::Batch))
    } else if let Some(r) = crate::http_monitor::route(path, query) {
        (Method::GET, r.map(Route::Monitor).map_err(Refusal::Invalid))
    } else if let Some(r) = crate::http_ids::route(path, query) {
        (Method::GET, r.map(Route::Id).map_err(Refusal::Invalid))
    } else {
        return Err(Refusal::NotFound);
    };
    if *method != want {
        return Err(Refusal::Method(if want == Method::GET {
            "GET"
        } else {
            "POST"
        }));
    }
    r
}

/// A name, `s` percent-decoded (1..=256 bytes), and its position
/// (`seqsvr_core::names`).
fn name(s: &str) -> Result<(Vec<u8>, Uid), Refusal> {
    let bytes = percent_decode(s)
        .ok_or_else(|| Refusal::Invalid(format!("{s:?} is not percent-encoded")))?;
    let key = seqsvr_core::name_key(&bytes).map_err(|e| Refusal::Invalid(e.to_string()))?;
    Ok((bytes, key))
}

/// A uid: decimal digits only (no sign, no spaces), below 2^64.
fn parse_uid(s: &str) -> Option<Uid> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The body of `POST /v1/next-batch`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    uids: Vec<Uid>,
}

/// Answers one request.
async fn handle(front: &Front, req: Request<Incoming>) -> Response<Body> {
    let json = wants_json(&req);
    let r = match route_q(req.method(), req.uri().path(), req.uri().query()) {
        Err(refusal) => return refused(front, refusal),
        Ok(r) => r,
    };
    match r {
        Route::Next(uid) => one(front, uid, front.next(uid).await, json),
        Route::Current(uid) => one(front, uid, front.current(uid).await, json),
        Route::NameNext(name, key) => one(front, key, front.next_name(&name, 1).await, json),
        Route::NameCurrent(name, key) => one(front, key, front.current_name(&name).await, json),
        Route::Leaf(name) => match front.next_name(&name, 1).await {
            Ok(seq) => reply(StatusCode::OK, "text/plain; charset=utf-8", seq.to_string()),
            Err(e) => error(front, &e),
        },
        Route::Monitor(r) => match crate::http_monitor::answer(front, r) {
            Ok((status, body)) => reply(status, "application/json", body),
            Err(e) => error(front, &e),
        },
        Route::Id(r) => match crate::http_ids::answer(front, r, json).await {
            Ok((status, content_type, body)) => reply(status, content_type, body),
            Err(e) => error(front, &e),
        },
        Route::Batch => match read_batch(req).await {
            Err(refusal) => refused(front, refusal),
            Ok(uids) => match front.next_batch(&uids).await {
                Ok(seqs) => reply(
                    StatusCode::OK,
                    "application/json",
                    serde_json::json!({ "seqs": seqs }).to_string(),
                ),
                Err(e) => error(front, &e),
            },
        },
    }
}

/// Whether the caller asked for JSON.
fn wants_json<B>(req: &Request<B>) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains("application/json")))
}

/// Reads and checks a batch body: at most [`MAX_BODY`] bytes, JSON
/// `{"uids":[…]}` with 1..=[`MAX_BATCH`] uids.
async fn read_batch(req: Request<Incoming>) -> Result<Vec<Uid>, Refusal> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(Refusal::TooLarge);
    }
    let body = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Refusal::TooLarge
            } else {
                Refusal::Invalid(format!("reading the body: {e}"))
            }
        })?
        .to_bytes();
    let b: BatchBody = serde_json::from_slice(&body)
        .map_err(|e| Refusal::Invalid(format!("the body is not {{\"uids\":[…]}}: {e}")))?;
    if b.uids.is_empty() || b.uids.len() > MAX_BATCH {
        return Err(Refusal::Invalid(format!(
            "a batch holds 1..={MAX_BATCH} uids, not {}",
            b.uids.len()
        )));
    }
    Ok(b.uids)
}

/// The answer to `next` or `current`.
fn one(front: &Front, uid: Uid, r: Result<u64, CallError>, json: bool) -> Response<Body> {
    match r {
        Ok(seq) if json => reply(
            StatusCode::OK,
            "application/json",
            serde_json::json!({ "uid": uid, "seq": seq }).to_string(),
        ),
        Ok(seq) => reply(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            format!("{seq}\n"),
        ),
        Err(e) => error(front, &e),
    }
}

/// A refusal before the front: JSON like every error, counted alike.
fn refused(front: &Front, refusal: Refusal) -> Response<Body> {
    let (status, kind, message) = match refusal {
        Refusal::NotFound => (
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "paths: GET /v1/next/{uid}, GET /v1/current/{uid}, POST /v1/next-batch, \
             GET /v1/name/info/{name}, GET /v1/names"
                .to_string(),
        ),
        Refusal::Method(allow) => {
            let mut r = json_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "INVALID_REQUEST",
                &format!("this path takes {allow}"),
                false,
                0,
            );
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
            front
                .shared()
                .metrics
                .error(seqsvr_proto::ErrorKind::InvalidRequest);
            return r;
        }
        Refusal::Invalid(m) => (StatusCode::BAD_REQUEST, "INVALID_REQUEST", m),
        Refusal::TooLarge => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "TOO_LARGE",
            format!("the body is over {MAX_BODY} bytes"),
        ),
    };
    if let Ok(k) = kind.parse::<KindName>() {
        front.shared().metrics.error(k.0);
    }
    json_error(status, kind, &message, false, 0)
}

/// An [`seqsvr_proto::ErrorKind`] by its name (`NOT_FOUND` is none).
struct KindName(seqsvr_proto::ErrorKind);

impl std::str::FromStr for KindName {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        seqsvr_proto::ErrorKind::from_str_name(s)
            .map(KindName)
            .ok_or(())
    }
}

/// The answer to an error of the front, through the one mapping.
fn error(front: &Front, e: &CallError) -> Response<Body> {
    let (code, d) = front.shared().error_detail(e);
    use seqsvr_proto::ErrorKind as K;
    let kind = K::try_from(d.kind).unwrap_or(K::Internal);
    // A declared counter's maximum: the counter's state refuses the call
    // (docs/counters.md), not the request's form nor the load.
    let at_limit = kind == K::CounterMaxReached;
    let kind = kind.as_str_name();
    let status = match code {
        _ if at_limit => StatusCode::CONFLICT,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::PermissionDenied | Code::Unauthenticated => StatusCode::FORBIDDEN,
        _ if d.retryable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    json_error(status, kind, &e.to_string(), d.retryable, d.retry_after_ms)
}

/// `{"error":{…}}` with `status`; a retryable error says when to retry,
/// in the body (ms) and in `Retry-After` (whole seconds, at least 1).
fn json_error(
    status: StatusCode,
    kind: &str,
    message: &str,
    retryable: bool,
    retry_after_ms: u64,
) -> Response<Body> {
    let body = serde_json::json!({
        "error": {
            "kind": kind,
            "message": message,
            "retryable": retryable,
            "retry_after_ms": retry_after_ms,
        }
    });
    let mut r = reply(status, "application/json", body.to_string());
    if retryable {
        let secs = retry_after_ms.div_ceil(1000).max(1);
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    r
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_refusals() {
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(route(&get, "/v1/next/42"), Ok(Route::Next(42)));
        assert_eq!(route(&get, "/v1/current/0"), Ok(Route::Current(0)));
        assert_eq!(
            route(&get, "/v1/next/18446744073709551615"),
            Ok(Route::Next(u64::MAX))
        );
        assert_eq!(route(&post, "/v1/next-batch"), Ok(Route::Batch));
        for bad in [
            "/v1/next/",
            "/v1/next/-1",
            "/v1/next/+1",
            "/v1/next/1x",
            "/v1/next/18446744073709551616",
            "/v1/next/ 1",
            "/v1/next/1/2",
        ] {
            assert!(
                matches!(route(&get, bad), Err(Refusal::Invalid(_))),
                "{bad}"
            );
        }
        let pos = |n: &str| seqsvr_core::name_key(n.as_bytes()).unwrap();
        assert_eq!(
            route(&get, "/api/segment/get/order:20261126"),
            Ok(Route::Leaf(b"order:20261126".to_vec()))
        );
        assert_eq!(
            route(&get, "/v1/name/next/a%20b%2Fc"),
            Ok(Route::NameNext(b"a b/c".to_vec(), pos("a b/c")))
        );
        assert_eq!(
            route(&get, "/v1/name/current/x"),
            Ok(Route::NameCurrent(b"x".to_vec(), pos("x")))
        );
        let long = format!("/api/segment/get/{}", "k".repeat(257));
        for bad in [
            "/api/segment/get/",
            "/v1/name/next/%zz",
            "/v1/name/next/%4",
            &long,
        ] {
            assert!(
                matches!(route(&get, bad), Err(Refusal::Invalid(_))),
                "{bad}"
            );
        }
        assert_eq!(
            route(&post, "/api/segment/get/a"),
            Err(Refusal::Method("GET"))
        );
        assert_eq!(route(&get, "/v1/nope"), Err(Refusal::NotFound));
        assert_eq!(route(&get, "/"), Err(Refusal::NotFound));
        assert_eq!(route(&post, "/v1/next/1"), Err(Refusal::Method("GET")));
        assert_eq!(route(&get, "/v1/next-batch"), Err(Refusal::Method("POST")));
    }
}
