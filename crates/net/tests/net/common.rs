//! Servers, clients and certificates for the tests. Every server binds
//! 127.0.0.1:0, so tests run in parallel.

use seqsvr_net::server::{listener, Connections, Listener, PlaneLayers};
use seqsvr_net::{ClientTls, DevPki, Leaf, Limits, Plane, Role, ServerTls, StoreId};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::service::Interceptor;
use tonic::transport::server::Router;
use tonic::transport::Channel;
use tonic::{Request, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{health_check_response::ServingStatus, HealthCheckRequest};
use tonic_health::server::{HealthReporter, HealthService};

pub type TestRouter = Router<PlaneLayers>;

pub const CONNECT: Duration = Duration::from_secs(2);

/// A CA with two of set 0's store replicas, one of set 1's, two AllocSvrs
/// and an operator.
pub struct Pki {
    _dir: tempfile::TempDir,
    pub pki: DevPki,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let pki = DevPki::generate(
            dir.path(),
            &[
                Leaf::new("store-1", Role::Store(StoreId::new(0, 1))),
                Leaf::new("store-2", Role::Store(StoreId::new(0, 2))),
                Leaf::new("set1-store-4", Role::Store(StoreId::new(1, 4))),
                Leaf::new("a1", Role::Alloc("a1".into())),
                Leaf::new("a2", Role::Alloc("a2".into())),
                Leaf::new("alice", Role::Operator("alice".into())),
            ],
            false,
        )
        .unwrap();
        Pki { _dir: dir, pki }
    }

    pub fn server(&self, name: &str, plane: Plane) -> ServerTls {
        self.pki.tls_config(name).server(plane).unwrap()
    }

    pub fn client(&self, name: &str) -> ClientTls {
        self.pki.tls_config(name).client().unwrap()
    }

    pub fn server_only(&self) -> ClientTls {
        ClientTls::server_only(&self.pki.ca_path()).unwrap()
    }
}

/// A running server; stops (and checks it stopped cleanly) on `stop`.
pub struct Served {
    pub addr: SocketAddr,
    pub conns: Connections,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<seqsvr_net::Result<()>>,
}

impl Served {
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let r = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
        r.expect("server did not stop").unwrap().unwrap();
    }
}

/// Binds a listener for `plane` and runs `run` on it (with a shutdown
/// signal) in a task of its own.
pub async fn start<F>(
    plane: Plane,
    limits: &Limits,
    tls: Option<&ServerTls>,
    run: impl FnOnce(Listener, Pin<Box<dyn Future<Output = ()> + Send>>) -> F,
) -> Served
where
    F: Future<Output = seqsvr_net::Result<()>> + Send + 'static,
{
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let l = listener(tcp, plane, limits, tls, false).unwrap();
    let addr = l.local_addr();
    let conns = l.connections();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(run(
        l,
        Box::pin(async move {
            let _ = rx.await;
        }),
    ));
    Served {
        addr,
        conns,
        stop: Some(tx),
        task,
    }
}

/// Serves what `build` adds to the plane's server.
pub async fn serve(
    plane: Plane,
    limits: &Limits,
    tls: Option<&ServerTls>,
    build: impl FnOnce(seqsvr_net::server::PlaneServer) -> TestRouter,
) -> Served {
    start(plane, limits, tls, |l, stop| {
        let router = build(l.server());
        l.serve(router, stop)
    })
    .await
}

pub fn health() -> HealthServer<impl Health> {
    tonic_health::server::health_reporter().1
}

/// The health service behind a role check.
pub fn gated<F>(
    check: F,
) -> tonic::service::interceptor::InterceptedService<HealthServer<HealthService>, Check<F>>
where
    F: Fn(&Request<()>) -> Result<Role, Status> + Clone + Send + Sync + 'static,
{
    let svc = HealthService::from_health_reporter(HealthReporter::new());
    HealthServer::with_interceptor(svc, Check(check))
}

#[derive(Clone)]
pub struct Check<F>(F);

impl<F> Interceptor for Check<F>
where
    F: Fn(&Request<()>) -> Result<Role, Status>,
{
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        (self.0)(&req)?;
        Ok(req)
    }
}

pub fn channel(addr: SocketAddr, tls: Option<&ClientTls>) -> Channel {
    let tls = tls.map(|t| t.clone().with_domain_name("localhost"));
    seqsvr_net::client::channel(&addr.to_string(), tls.as_ref(), CONNECT).unwrap()
}

/// One health check ("" is the whole server).
pub async fn check(ch: &Channel, service: &str) -> Result<ServingStatus, Status> {
    let r = HealthClient::new(ch.clone())
        .check(HealthCheckRequest {
            service: service.to_string(),
        })
        .await?;
    Ok(r.into_inner().status())
}

/// Wraps a service so each call waits for a permit from `gate` and the
/// number of calls inside is tracked.
#[derive(Clone)]
pub struct Gate<S> {
    pub inner: S,
    pub gate: Arc<Semaphore>,
    pub inside: Arc<AtomicUsize>,
    pub most: Arc<AtomicUsize>,
}

impl<S> Gate<S> {
    pub fn new(inner: S) -> Gate<S> {
        Gate {
            inner,
            gate: Arc::new(Semaphore::new(0)),
            inside: Arc::default(),
            most: Arc::default(),
        }
    }
}

impl<S: NamedService> NamedService for Gate<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower_service::Service<http::Request<Body>> for Gate<S>
where
    S: tower_service::Service<
            http::Request<Body>,
            Response = http::Response<Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let mut inner = self.inner.clone();
        let (gate, inside, most) = (self.gate.clone(), self.inside.clone(), self.most.clone());
        Box::pin(async move {
            let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(n, Ordering::SeqCst);
            let _left = Left(inside);
            gate.acquire().await.unwrap().forget();
            inner.call(req).await
        })
    }
}

/// Counts a call out of the gate even when it is cancelled.
struct Left(Arc<AtomicUsize>);

impl Drop for Left {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Limits with short timeouts for tests.
pub fn quick(plane: Plane) -> Limits {
    Limits {
        idle_timeout: Duration::from_secs(30),
        handshake_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        ..Limits::for_plane(plane)
    }
}

/// Waits up to `within` for `cond`.
pub async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// A call that failed because the connection could not be made (a TLS
/// handshake refused, say). tonic reports transport failures as
/// `UNAVAILABLE` or, for I/O errors such as a TLS alert, `UNKNOWN`.
#[track_caller]
pub fn assert_no_connection(e: &Status) {
    assert!(
        matches!(e.code(), tonic::Code::Unavailable | tonic::Code::Unknown),
        "{e:?}"
    );
}
