//! Listening on one plane.
//!
//! [`listener`] takes a bound `TcpListener`, the plane, its [`Limits`] and
//! optionally [`ServerTls`], and gives a [`Listener`]. Its
//! [`server`](Listener::server) is a tonic server builder already set up
//! with the plane's per-connection limits; add services to it as usual and
//! hand the router back to [`serve`](Listener::serve):
//!
//! ```ignore
//! let l = seqsvr_net::server::listener(tcp, Plane::Client, &limits, tls.as_ref(), false)?;
//! let router = l.server().add_service(AllocServer::new(svc));
//! l.serve(router, shutdown).await?;
//! ```
//!
//! A plane that serves a single service can skip tonic's router with
//! [`serve_one`](Listener::serve_one): the same server, layers and
//! connection handling, and every call goes straight to the service (no
//! path table, no boxed service or future per call).
//!
//! `serve` runs tonic's `serve_with_incoming_shutdown` on the listener's
//! own stream of connections, which adds what tonic leaves out for a
//! caller-supplied listener: TCP_NODELAY on every socket (tonic ignores
//! `Server::tcp_nodelay` there), the connection cap, and the handshake and
//! idle timeouts.
//!
//! What each plane gets:
//!
//! | setting | where |
//! | --- | --- |
//! | TLS, client certificate required on peer/admin | [`ServerTls`], handshake run by the listener |
//! | `max_handshakes`, `max_handshakes_per_source` | accept loop: connections in their TLS handshake, outside the cap |
//! | `max_connections` | after the handshake: extra connections are closed at once |
//! | `handshake_timeout`, `idle_timeout` | per-connection timer under HTTP/2 |
//! | `max_concurrent_streams`, `max_pending_resets`, keepalive | HTTP/2 settings of tonic's server |
//! | `request_timeout` | [`PlaneLayer`], a timer only for calls that wait |
//! | `max_message` | [`PlaneLayer`], answering `RESOURCE_EXHAUSTED` |
//! | `max_unfinished_bytes` | [`PlaneLayer`]: messages not complete in one frame, per listener |
//!
//! # Plaintext
//!
//! A listener without TLS on an address other hosts can reach is refused
//! unless the caller passes `insecure = true` (and then warned about when
//! it starts serving): a peer or admin plane without TLS trusts every
//! caller ([`Auth::Insecure`]), and the client plane would carry users'
//! traffic unencrypted.
//!
//! # Cost per call
//!
//! The layers add no allocation per call: the message-size check wraps
//! the request body in a generic type and reads one response header, and
//! the request timeout makes its timer only for a call that has to wait;
//! the connection-level work is per socket read, not per call. The
//! `allocs` test counts allocations per call through plain tonic and
//! through a listener to keep it so. With TLS the listener makes one
//! allocation fewer per call than tonic's own TLS, because its connection
//! info is one request extension instead of two.

mod call;
mod conn;
mod handshake;
mod size;

pub use call::{PlaneFuture, PlaneLayer, PlaneService};
pub use conn::Connections;
pub(crate) use size::GRPC_STATUS;
pub use size::{Limited, Unfinished};

use crate::auth::Auth;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::plane::Plane;
use crate::tls::ServerTls;
use bytes::Bytes;
use conn::{Incoming, Timeouts};
use handshake::{Plain, Tls};
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tonic::body::Body;
use tonic::service::Routes;
use tonic::transport::server::Router;
use tonic::transport::Server;
use tower_layer::{Identity, Layer, Stack};
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The layers of a [`PlaneServer`].
pub type PlaneLayers = Stack<PlaneLayer, Identity>;

/// The tonic server builder a [`Listener`] hands out.
pub type PlaneServer = Server<PlaneLayers>;

/// One plane's listener, not yet serving.
pub struct Listener {
    tcp: TcpListener,
    local: SocketAddr,
    plane: Plane,
    limits: Limits,
    tls: Option<ServerTls>,
    exposed_plaintext: bool,
    conns: Connections,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("local", &self.local)
            .field("plane", &self.plane)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// Prepares `tcp` to serve `plane` with `limits` and, if given, `tls`.
///
/// Refuses limits that do not [validate](Limits::validate), and plaintext
/// on a non-loopback address unless `insecure` (see the module doc). A
/// TLS setting for the wrong kind of plane (server-only TLS on the peer or
/// admin plane) is refused too: those planes identify callers by their
/// certificates.
pub fn listener(
    tcp: TcpListener,
    plane: Plane,
    limits: &Limits,
    tls: Option<&ServerTls>,
    insecure: bool,
) -> Result<Listener> {
    limits.validate(plane)?;
    let local = tcp.local_addr().map_err(Error::Listener)?;
    if let Some(t) = tls {
        if plane.mutual_tls() && !t.is_mutual() {
            return Err(Error::PlaneTls { plane });
        }
    }
    let exposed_plaintext = exposed(local, tls.is_some(), insecure, plane)?;
    // Lives as long as the process: the layer holds it by a plain
    // reference (see `PlaneLayer::new`), and a process makes a listener
    // per plane, so a few words per listener are all that is never freed.
    let unfinished: &'static Unfinished =
        Box::leak(Box::new(Unfinished::new(limits.max_unfinished_bytes)));
    Ok(Listener {
        tcp,
        local,
        plane,
        limits: limits.clone(),
        tls: tls.cloned(),
        exposed_plaintext,
        conns: Connections::new(
            limits.max_connections,
            limits.max_handshakes,
            limits.max_handshakes_per_source,
            unfinished,
        ),
    })
}

/// Whether serving on `addr` is plaintext that other hosts can reach;
/// an error if so and not `insecure`.
fn exposed(addr: SocketAddr, tls: bool, insecure: bool, plane: Plane) -> Result<bool> {
    let exposed = !tls && !addr.ip().is_loopback();
    if exposed && !insecure {
        return Err(Error::PlaintextExposed { plane, addr });
    }
    Ok(exposed)
}

impl Listener {
    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The plane it serves.
    pub fn plane(&self) -> Plane {
        self.plane
    }

    /// Its limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The listener's connection counts (they stay readable after
    /// [`serve`](Listener::serve) takes the listener).
    pub fn connections(&self) -> Connections {
        self.conns.clone()
    }

    /// How handlers on this listener identify callers: by certificate
    /// with TLS, not at all without. (On the client plane, whose callers
    /// present no certificate, every role check under TLS fails.)
    pub fn auth(&self) -> Auth {
        if self.tls.is_some() {
            Auth::Tls
        } else {
            Auth::Insecure
        }
    }

    /// A tonic server builder with this plane's limits: streams and
    /// pending resets per connection, keepalive (if on), request timeout and message size. Add
    /// services (and more layers, if wanted) and pass the router to
    /// [`serve`](Listener::serve).
    ///
    /// A service's own tonic decoding limit
    /// (`max_decoding_message_size`, 4 MiB by default) still applies
    /// beneath the plane's; raise it to the plane's
    /// [`max_message`](Limits::max_message) where the plane's is larger
    /// (the peer plane's is).
    pub fn server(&self) -> PlaneServer {
        let l = &self.limits;
        Server::builder()
            .max_concurrent_streams(l.max_concurrent_streams)
            .http2_max_pending_accept_reset_streams(Some(l.max_pending_resets))
            .http2_keepalive_interval(l.keepalive())
            .http2_keepalive_timeout(Some(l.keepalive_timeout))
            .layer(PlaneLayer::new(
                l.max_message,
                l.request_timeout,
                self.conns.unfinished,
            ))
    }

    /// Serves `router` (built from [`server`](Listener::server)) until
    /// `shutdown` completes; then stops accepting and waits for open calls
    /// to finish, as tonic's `serve_with_incoming_shutdown` does.
    pub async fn serve<L, ResBody, F>(self, router: Router<L>, shutdown: F) -> Result<()>
    where
        L: Layer<Routes>,
        L::Service: Service<http::Request<Body>, Response = http::Response<ResBody>>
            + Clone
            + Send
            + 'static,
        <L::Service as Service<http::Request<Body>>>::Future: Send,
        <L::Service as Service<http::Request<Body>>>::Error: Into<BoxError> + Send,
        ResBody: http_body::Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
        F: Future<Output = ()>,
    {
        match self.start() {
            Either::Tls(i) => router.serve_with_incoming_shutdown(i, shutdown).await?,
            Either::Plain(i) => router.serve_with_incoming_shutdown(i, shutdown).await?,
        }
        Ok(())
    }

    /// Serves the one service `svc` under `server` (built from
    /// [`server`](Listener::server), with any layers added) until
    /// `shutdown` completes, like [`serve`](Listener::serve) but without
    /// tonic's router: every call goes to `svc`, which answers the paths it
    /// does not know itself (a tonic-generated server answers
    /// `UNIMPLEMENTED`, as the router would).
    ///
    /// For a plane that serves a single gRPC service on its hot path: the
    /// router (path matching, a boxed service and a boxed future per call)
    /// is per-call work with nothing to choose between.
    pub async fn serve_one<L, S, ResBody, F>(
        self,
        server: Server<L>,
        svc: S,
        shutdown: F,
    ) -> Result<()>
    where
        L: Layer<S>,
        L::Service: Service<http::Request<Body>, Response = http::Response<ResBody>>
            + Clone
            + Send
            + 'static,
        <L::Service as Service<http::Request<Body>>>::Future: Send,
        <L::Service as Service<http::Request<Body>>>::Error: Into<BoxError> + Send + 'static,
        ResBody: http_body::Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
        F: Future<Output = ()>,
    {
        match self.start() {
            Either::Tls(i) => {
                server
                    .serve_with_incoming_shutdown(svc, i, shutdown)
                    .await?
            }
            Either::Plain(i) => {
                server
                    .serve_with_incoming_shutdown(svc, i, shutdown)
                    .await?
            }
        }
        Ok(())
    }

    /// The stream of connections to serve (TLS or plain), logged.
    fn start(self) -> Either {
        let timeouts = Timeouts {
            handshake: self.limits.handshake_timeout,
            idle: self.limits.idle_timeout,
        };
        let conns = self.conns;
        let plane = self.plane;
        match self.tls {
            Some(tls) => {
                tracing::info!(%plane, addr = %self.local, mutual = tls.is_mutual(), "serving with TLS");
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.config);
                Either::Tls(Incoming::new(
                    self.tcp,
                    Tls(acceptor),
                    plane,
                    conns,
                    timeouts,
                ))
            }
            None => {
                if self.exposed_plaintext {
                    tracing::warn!(
                        %plane,
                        addr = %self.local,
                        "serving in PLAINTEXT on a non-loopback address: traffic is unencrypted \
                         and every caller is trusted"
                    );
                } else {
                    tracing::info!(%plane, addr = %self.local, "serving in plaintext on loopback");
                }
                Either::Plain(Incoming::new(self.tcp, Plain, plane, conns, timeouts))
            }
        }
    }
}

/// A listener's stream of connections, with or without TLS.
enum Either {
    Tls(Incoming<Tls>),
    Plain(Incoming<Plain>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_only_on_loopback_unless_insecure() {
        let p = Plane::Peer;
        for a in ["127.0.0.1:7101", "127.8.9.10:1", "[::1]:7101"] {
            assert!(
                !exposed(a.parse().unwrap(), false, false, p).unwrap(),
                "{a}"
            );
        }
        for a in ["0.0.0.0:7101", "[::]:7101", "10.1.2.3:7101", "192.0.2.7:80"] {
            let addr: SocketAddr = a.parse().unwrap();
            let e = exposed(addr, false, false, p).unwrap_err();
            assert!(matches!(e, Error::PlaintextExposed { .. }), "{a}: {e}");
            assert!(e.to_string().contains("insecure"), "{e}");
            assert!(exposed(addr, false, true, p).unwrap(), "{a}");
            assert!(!exposed(addr, true, false, p).unwrap(), "{a}");
        }
    }
}
