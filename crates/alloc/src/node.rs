//! A running AllocSvr: configuration, start-up, lease renewal, serving.
//!
//! Memory is never trusted (promise 1). Every process start draws a fresh
//! [`Incarnation`] and registers it with the store together with its three
//! addresses; the store admits one incarnation per AllocSvr id, so a second
//! process with the same id (a copied config, a replacement started while
//! the old one is only partitioned) is refused as a *twin* and waits,
//! serving nothing, until the first one's lease has certainly ended
//! (promise 3). Then the node renews its lease; each granted renewal lists
//! the sections routed to it, and the node claims the ones it does not
//! serve with a take-over, which returns where every uid starts (skip
//! ahead). Sections no longer listed are dropped before the lease is
//! extended ([`reconcile`]).
//!
//! The lease is counted from when the renewal was *sent*, on this process's
//! monotonic clock, so it always ends before the store's view of it; when
//! it runs out the services answer `LEASE_EXPIRED` until a renewal is
//! granted again (promise 3). If the store says this incarnation was
//! replaced or fenced, the node drops everything, stops renewing and
//! answers every call `UNAVAILABLE` until it is restarted. A route loop
//! publishes the route table for clients and asks for an early renewal
//! when it sees a section newly routed here.
//!
//! See `docs/architecture/alloc.md` and `docs/architecture/failover.md`.

use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use seqsvr_core::{AllocId, Incarnation, SectionId, MAX_SECTIONS_PER_CALL};
use seqsvr_net::calls::{CallMetrics, CallMetricsLayer};
use seqsvr_net::{Plane, PlaneLimits, TlsConfig};
use seqsvr_proto::alloc_admin_server::AllocAdminServer;
use seqsvr_proto::alloc_peer_server::AllocPeerServer;
use seqsvr_proto::alloc_server::AllocServer;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::client::Connector;
use seqsvr_store_api::{AllocAddrs, Error as StoreError, PeerClient, Rejection};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::allocator::{AllocConfig, Allocator};
use crate::error::{AllocError, ConfigError, NodeError, StoreErr};
use crate::lease::Lease;
use crate::ownership::reconcile;
use crate::raiser::{Raiser, RaiserConfig};
use crate::service::{AdminService, ClientService, PeerService};
use crate::shared::{runs, Ownership, Shared};
use crate::store_link::StoreCeilings;

/// An AllocSvr's configuration (one TOML file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocNodeConfig {
    /// This AllocSvr's id (as the store's route table names it, and as its
    /// certificate names it: `urn:seqsvr:alloc:<id>`).
    pub id: AllocId,
    /// Its client-plane `host:port`, as clients should dial it.
    pub addr: String,
    /// Its peer-plane `host:port`, as other AllocSvrs should dial it.
    pub peer_addr: String,
    /// Its admin-plane `host:port`, as operators should dial it.
    pub admin_addr: String,
    /// Address to bind the client plane, if not `addr`.
    #[serde(default)]
    pub listen: Option<String>,
    /// Address to bind the peer plane, if not `peer_addr`.
    #[serde(default)]
    pub peer_listen: Option<String>,
    /// Address to bind the admin plane, if not `admin_addr`.
    #[serde(default)]
    pub admin_listen: Option<String>,
    /// The set's store replicas' **peer-plane** addresses (`host:port`).
    pub store: Vec<String>,
    /// TLS files (every plane, and dialing the store and other AllocSvrs).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Allow plaintext on addresses other hosts can reach (every caller is
    /// then trusted). Off by default.
    #[serde(default)]
    pub insecure: bool,
    /// Per-plane listener limits (defaults per plane where missing).
    #[serde(default)]
    pub limits: Option<PlaneLimits>,
    /// Where to serve Prometheus metrics (`GET /metrics`, plain HTTP), if
    /// anywhere. A non-loopback address needs `insecure = true`.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// How often the route table is re-read from the store, in ms.
    #[serde(default = "default_route_poll_ms")]
    pub route_poll_ms: u64,
    /// How often the lease is renewed, in ms (well below the lease length
    /// the store grants, so one or two lost renewals do not interrupt
    /// service).
    #[serde(default = "default_renew_ms")]
    pub renew_ms: u64,
    /// How long a call may wait for an exhausted section's raise, in ms.
    #[serde(default = "default_wait_ms")]
    pub wait_ms: u64,
    /// Raise a section ahead of need when less than this fraction of a
    /// step is left (0.0–1.0).
    #[serde(default = "default_fraction")]
    pub raise_ahead_fraction: f64,
}

fn default_route_poll_ms() -> u64 {
    250
}
fn default_renew_ms() -> u64 {
    1000
}
fn default_wait_ms() -> u64 {
    1000
}
fn default_fraction() -> f64 {
    0.25
}

/// Bounds of the timing keys, in ms.
const MIN_RENEW_MS: u64 = 10;
const MAX_RENEW_MS: u64 = 600_000;
const MAX_ROUTE_POLL_MS: u64 = 3_600_000;
const MAX_WAIT_MS: u64 = 60_000;

impl AllocNodeConfig {
    /// Parses and checks a TOML config.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let cfg: Self = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The address to bind for `plane`.
    pub fn listen_addr(&self, plane: Plane) -> &str {
        let (listen, addr) = match plane {
            Plane::Client => (&self.listen, &self.addr),
            Plane::Peer => (&self.peer_listen, &self.peer_addr),
            Plane::Admin => (&self.admin_listen, &self.admin_addr),
        };
        listen.as_deref().unwrap_or(addr)
    }

    /// Checks for mistakes that would otherwise surface late; the error
    /// names the key at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, reason: String| {
            Err(ConfigError::Invalid {
                key: key.to_string(),
                reason,
            })
        };
        check_id(&self.id).or_else(|r| bad("id", r))?;
        let advertised = [
            ("addr", &self.addr),
            ("peer_addr", &self.peer_addr),
            ("admin_addr", &self.admin_addr),
        ];
        for (i, (key, a)) in advertised.iter().enumerate() {
            check_addr(a, false).or_else(|r| bad(key, r))?;
            if let Some((other, _)) = advertised[..i].iter().find(|(_, b)| b == a) {
                return bad(
                    key,
                    format!("{a} is also {other}: every plane needs its own"),
                );
            }
        }
        let listens = [
            ("listen", &self.listen),
            ("peer_listen", &self.peer_listen),
            ("admin_listen", &self.admin_listen),
        ];
        for (key, l) in &listens {
            if let Some(l) = l {
                check_addr(l, true).or_else(|r| bad(key, r))?;
            }
        }
        if let Some(m) = &self.metrics_addr {
            check_addr(m, true).or_else(|r| bad("metrics_addr", r))?;
        }
        let binds: Vec<(&str, &str)> = listens
            .iter()
            .zip(Plane::ALL)
            .map(|((key, _), plane)| (*key, self.listen_addr(plane)))
            .collect();
        for (i, (key, b)) in binds.iter().enumerate() {
            let fixed_port = !b.ends_with(":0");
            if let Some((other, _)) = binds[..i].iter().find(|(_, c)| c == b && fixed_port) {
                return bad(
                    key,
                    format!("binds {b}, as {other} does: every plane needs its own"),
                );
            }
        }
        if self.store.is_empty() {
            return bad("store", "no store addresses".into());
        }
        for (i, a) in self.store.iter().enumerate() {
            let key = format!("store[{i}]");
            check_addr(a, false).or_else(|r| bad(&key, r))?;
            if let Some(j) = self.store[..i].iter().position(|b| b == a) {
                return bad(&key, format!("{a} is listed twice (also store[{j}])"));
            }
        }
        if !(MIN_RENEW_MS..=MAX_RENEW_MS).contains(&self.renew_ms) {
            return bad(
                "renew_ms",
                format!(
                    "{} is outside {MIN_RENEW_MS}..={MAX_RENEW_MS}",
                    self.renew_ms
                ),
            );
        }
        if !(1..=MAX_ROUTE_POLL_MS).contains(&self.route_poll_ms) {
            return bad(
                "route_poll_ms",
                format!("{} is outside 1..={MAX_ROUTE_POLL_MS}", self.route_poll_ms),
            );
        }
        if self.wait_ms > MAX_WAIT_MS {
            return bad(
                "wait_ms",
                format!("{} is above {MAX_WAIT_MS}", self.wait_ms),
            );
        }
        if !(0.0..=1.0).contains(&self.raise_ahead_fraction) {
            return bad(
                "raise_ahead_fraction",
                format!("{} is outside 0.0..=1.0", self.raise_ahead_fraction),
            );
        }
        if let Some(l) = &self.limits {
            l.validate().or_else(|e| bad("limits", e.to_string()))?;
        }
        Ok(())
    }
}

/// An AllocSvr id: what a certificate can carry (`urn:seqsvr:alloc:<id>`).
fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 128 {
        return Err("must be 1 to 128 characters".into());
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
    {
        return Err(format!(
            "{id:?}: use only letters, digits, '-', '.', '_' and '~'"
        ));
    }
    Ok(())
}

/// A `host:port`: an IPv4 address, a bracketed IPv6 address or a DNS name,
/// and a port (0 only where `any_port`, for binding).
fn check_addr(a: &str, any_port: bool) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{a:?} is not a host:port address: {why}"));
    let Some((host, port)) = a.rsplit_once(':') else {
        return bad("no port");
    };
    match port.parse::<u16>() {
        Ok(0) if !any_port => return bad("port 0"),
        Ok(_) => {}
        Err(_) => return bad("the port is not a number in 0..=65535"),
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return match v6.parse::<Ipv6Addr>() {
            Ok(_) => Ok(()),
            Err(_) => bad("bad IPv6 address"),
        };
    }
    if host.contains(':') {
        return bad("an IPv6 address goes in brackets, as [::1]:7201");
    }
    if host.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let dns = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if dns {
        Ok(())
    } else {
        bad("bad host name")
    }
}

/// The three listeners of an AllocSvr, bound by the caller (so tests can
/// bind port 0 and learn the ports first).
#[derive(Debug)]
pub struct AllocListeners {
    /// Client plane (`Alloc`).
    pub client: TcpListener,
    /// Peer plane (`AllocPeer`).
    pub peer: TcpListener,
    /// Admin plane (`AllocAdmin`).
    pub admin: TcpListener,
    /// Prometheus metrics, if served.
    pub metrics: Option<TcpListener>,
}

impl AllocListeners {
    /// Binds each plane's listen address (or its advertised address).
    pub async fn bind(cfg: &AllocNodeConfig) -> std::io::Result<AllocListeners> {
        let bind = |plane| {
            let addr = cfg.listen_addr(plane).to_string();
            async move {
                TcpListener::bind(&addr).await.map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("binding the {plane} plane on {addr}: {e}"),
                    )
                })
            }
        };
        Ok(AllocListeners {
            client: bind(Plane::Client).await?,
            peer: bind(Plane::Peer).await?,
            admin: bind(Plane::Admin).await?,
            metrics: match &cfg.metrics_addr {
                Some(a) => Some(TcpListener::bind(a).await.map_err(|e| {
                    std::io::Error::new(e.kind(), format!("binding metrics on {a}: {e}"))
                })?),
                None => None,
            },
        })
    }
}

/// A running AllocSvr.
pub struct AllocNode {
    /// State shared with the gRPC services.
    pub shared: Arc<Shared>,
    /// The client-plane address actually bound.
    pub local_addr: SocketAddr,
    /// The peer-plane address actually bound.
    pub peer_local_addr: SocketAddr,
    /// The admin-plane address actually bound.
    pub admin_local_addr: SocketAddr,
    /// Tells the servers to stop.
    stop: watch::Sender<bool>,
    /// Servers, raiser, renewal and route tasks.
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for AllocNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocNode")
            .field("id", &self.shared.id)
            .field("incarnation", &self.shared.incarnation())
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

/// What the background tasks share.
struct Ctx {
    shared: Arc<Shared>,
    /// Claims sections (take-over) for this node.
    raiser: Raiser<StoreCeilings>,
    /// Renewals: deadline `renew_ms`, a replica silent for a quarter of it
    /// is not waited for (a gray failure must not cost the lease).
    renewer: PeerClient,
    /// Route reads.
    reader: PeerClient,
    /// The section list of the last renewal that carried one, and its
    /// `sections_version`: renewals send the version and get the list only
    /// when it changed.
    listed: Mutex<(u64, Vec<SectionId>)>,
    renew_every: Duration,
}

/// Draws this process's incarnation: random, non-zero. The hasher's keys
/// come from the operating system's randomness once per process; the
/// clock and process id only make two draws in one process differ.
pub fn fresh_incarnation() -> Incarnation {
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        h.write_u128(now.as_nanos());
        h.write_u32(std::process::id());
        let v = h.finish();
        if v != 0 {
            return v;
        }
    }
}

/// How other seqsvr processes are dialed: through the project's one client
/// transport, with TLS if configured.
fn connector(tls: Option<seqsvr_net::ClientTls>) -> Connector {
    Arc::new(move |addr: &str| {
        seqsvr_net::client::channel(addr, tls.as_ref(), Duration::from_millis(500))
            .map_err(|e| e.to_string())
    })
}

impl AllocNode {
    /// Sets up the three planes on `listeners`, registers a fresh
    /// incarnation with the store (waiting, without serving, while a twin
    /// holds the id or the store is unreachable), renews its lease, claims
    /// its sections and serves.
    ///
    /// Fails at once on a configuration, TLS or listener mistake, and on a
    /// registration the store refuses for good (other than a twin).
    pub async fn start(
        cfg: AllocNodeConfig,
        listeners: AllocListeners,
    ) -> Result<AllocNode, NodeError> {
        cfg.validate()?;
        let limits = cfg.limits.clone().unwrap_or_default();
        let (server_tls, client_tls) = match &cfg.tls {
            Some(t) => {
                let per_plane = [
                    t.server(Plane::Client)?,
                    t.server(Plane::Peer)?,
                    t.server(Plane::Admin)?,
                ];
                (Some(per_plane), Some(t.client()?))
            }
            None => (None, None),
        };
        let tls_for = |i: usize| server_tls.as_ref().map(|t| &t[i]);
        let listen = |tcp, plane, i| {
            seqsvr_net::server::listener(tcp, plane, limits.get(plane), tls_for(i), cfg.insecure)
        };
        let client_l = listen(listeners.client, Plane::Client, 0)?;
        let peer_l = listen(listeners.peer, Plane::Peer, 1)?;
        let admin_l = listen(listeners.admin, Plane::Admin, 2)?;

        let store = PeerClient::new(&cfg.store, &connector(client_tls.clone()))?;
        let renew_every = Duration::from_millis(cfg.renew_ms);
        let renewer = store.clone().with_deadline(renew_every, renew_every / 4);
        let slow = renew_every.max(Duration::from_millis(1000));
        let reader = store.clone().with_deadline(slow, slow / 4);
        let incarnation = fresh_incarnation();
        let addrs = AllocAddrs {
            client: cfg.addr.clone(),
            peer: cfg.peer_addr.clone(),
            admin: cfg.admin_addr.clone(),
        };
        register(&reader, &cfg.id, incarnation, &addrs, renew_every).await?;
        let routes = read_routes(&reader).await;
        let alloc_cfg = AllocConfig {
            raise_ahead_fraction: cfg.raise_ahead_fraction,
        };
        let alloc = Arc::new(Allocator::with_incarnation(
            routes.set.clone(),
            &alloc_cfg,
            incarnation,
        )?);
        let shared = Arc::new(Shared {
            alloc: alloc.clone(),
            route_version: AtomicU64::new(routes.version),
            routes: RwLock::new(Arc::new(pb::RouteTable::from(&routes))),
            wait: Duration::from_millis(cfg.wait_ms),
            lease: Lease::new(Instant::now()),
            draining: AtomicBool::new(false),
            fenced: AtomicBool::new(false),
            id: cfg.id.clone(),
            addrs,
            store: store.clone(),
            client_tls,
            ownership: Mutex::new(Ownership::default()),
            peers: Default::default(),
            metrics: crate::metrics::AllocMetrics::new(&cfg.id)?,
            renew_now: Notify::new(),
        });
        let ceilings = Arc::new(StoreCeilings {
            store: reader.clone(),
            alloc: cfg.id.clone(),
            metrics: shared.metrics.clone(),
        });
        let ctx = Arc::new(Ctx {
            shared: shared.clone(),
            raiser: Raiser::new(alloc.clone(), ceilings.clone(), RaiserConfig::default()),
            renewer,
            reader,
            listed: Mutex::new((0, Vec::new())),
            renew_every,
        });
        // A first lease and our sections before serving anything.
        renew_once(&ctx).await;

        let local_addr = client_l.local_addr();
        let peer_local_addr = peer_l.local_addr();
        let admin_local_addr = admin_l.local_addr();
        let (stop, _) = watch::channel(false);
        let stopped = |stop: &watch::Sender<bool>| {
            let mut rx = stop.subscribe();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let calls = |plane: Plane, paths: &[&str]| {
            CallMetrics::register(&shared.metrics.registry, plane.name(), paths)
                .map(CallMetricsLayer)
        };
        let client_router = client_l
            .server()
            .layer(calls(Plane::Client, CLIENT_PATHS)?)
            .add_service(AllocServer::new(ClientService {
                shared: shared.clone(),
            }));
        let peer_router = peer_l
            .server()
            .layer(calls(Plane::Peer, PEER_PATHS)?)
            .add_service(AllocPeerServer::new(PeerService {
                shared: shared.clone(),
                auth: peer_l.auth(),
            }));
        let admin_router = admin_l
            .server()
            .layer(calls(Plane::Admin, ADMIN_PATHS)?)
            .add_service(AllocAdminServer::new(AdminService {
                shared: shared.clone(),
                auth: admin_l.auth(),
            }));
        let raiser = Raiser::new(alloc.clone(), ceilings, RaiserConfig::default());
        let poll = Duration::from_millis(cfg.route_poll_ms);
        let mut tasks = vec![
            tokio::spawn(serve(
                Plane::Client,
                client_l.serve(client_router, stopped(&stop)),
            )),
            tokio::spawn(serve(
                Plane::Peer,
                peer_l.serve(peer_router, stopped(&stop)),
            )),
            tokio::spawn(serve(
                Plane::Admin,
                admin_l.serve(admin_router, stopped(&stop)),
            )),
            tokio::spawn(renew_loop(ctx.clone())),
            tokio::spawn(route_loop(ctx, poll)),
            tokio::spawn(raiser.run(stopped(&stop))),
        ];
        if let Some(tcp) = listeners.metrics {
            let s = shared.clone();
            let render: seqsvr_net::metrics::Render = Arc::new(move || s.render_metrics());
            let insecure = cfg.insecure;
            tasks.push(tokio::spawn(async move {
                if let Err(e) = seqsvr_net::metrics::serve(tcp, render, insecure).await {
                    tracing::error!("metrics listener: {e}");
                }
            }));
        }
        tracing::info!(
            id = %cfg.id,
            incarnation = %format_args!("{incarnation:x}"),
            %local_addr,
            %peer_local_addr,
            %admin_local_addr,
            sections = alloc.served_sections().len(),
            "alloc started"
        );
        Ok(AllocNode {
            shared,
            local_addr,
            peer_local_addr,
            admin_local_addr,
            stop,
            tasks,
        })
    }

    /// This process's incarnation.
    pub fn incarnation(&self) -> Incarnation {
        self.shared.incarnation()
    }

    /// Stops serving: the servers stop accepting, background tasks end.
    pub fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            t.abort();
        }
    }
}

/// The methods each plane serves, for per-call metrics.
const CLIENT_PATHS: &[&str] = &[
    "/seqsvr.v1.Alloc/Next",
    "/seqsvr.v1.Alloc/NextBatch",
    "/seqsvr.v1.Alloc/Current",
    "/seqsvr.v1.Alloc/Routes",
    "/seqsvr.v1.Alloc/Status",
];
const PEER_PATHS: &[&str] = &["/seqsvr.v1.AllocPeer/Adopt"];
const ADMIN_PATHS: &[&str] = &[
    "/seqsvr.v1.AllocAdmin/Handoff",
    "/seqsvr.v1.AllocAdmin/Status",
];

/// Serves one plane until stopped; logs why it stopped otherwise.
async fn serve(plane: Plane, serving: impl std::future::Future<Output = seqsvr_net::Result<()>>) {
    if let Err(e) = serving.await {
        tracing::error!(%plane, "alloc server stopped: {e}");
    }
}

/// Registers this incarnation, retrying while a twin holds the id or the
/// store cannot answer. A twin is logged as an ERROR on every attempt: two
/// processes were started with one id, and this one serves nothing until
/// the other's lease has certainly ended (promise 3).
async fn register(
    store: &PeerClient,
    id: &str,
    incarnation: Incarnation,
    addrs: &AllocAddrs,
    every: Duration,
) -> Result<(), NodeError> {
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        match store.register_alloc(id, incarnation, addrs).await {
            Ok(_) => {
                tracing::info!(id, incarnation = %format_args!("{incarnation:x}"), "registered");
                return Ok(());
            }
            Err(StoreError::Rejected(Rejection::Twin { alloc, live, addr })) => {
                tracing::error!(
                    id = %alloc,
                    live_incarnation = %format_args!("{live:x}"),
                    live_addr = %addr,
                    attempt,
                    "another process with this AllocSvr id is live at {addr}: not serving; \
                     retrying until its lease has certainly expired (stop one of the two)"
                );
                tokio::time::sleep(every.max(Duration::from_millis(500))).await;
            }
            Err(e) if e.is_retryable() || matches!(e, StoreError::Internal(_)) => {
                tracing::warn!(id, attempt, "store not ready, retrying registration: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(NodeError::Store(e)),
        }
    }
}

/// Reads the route table, retrying until the store answers with one that
/// can be used (the store may not be configured with its set yet).
async fn read_routes(store: &PeerClient) -> seqsvr_core::RouteTable {
    loop {
        match store.routes().await {
            Ok(t) => return t,
            Err(e) => {
                tracing::warn!("route table not available yet, retrying: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Renews the lease every `renew_every` (or sooner when asked), until the
/// process is fenced.
async fn renew_loop(ctx: Arc<Ctx>) {
    loop {
        let next = Instant::now() + ctx.renew_every;
        renew_once(&ctx).await;
        if ctx.shared.is_fenced() {
            return;
        }
        let _ = tokio::time::timeout_at(next.into(), ctx.shared.renew_now.notified()).await;
    }
}

/// One renewal: drop what is no longer ours, extend the lease from the
/// send time, then claim what is newly ours.
async fn renew_once(ctx: &Ctx) {
    let shared = &ctx.shared;
    if shared.is_fenced() {
        return;
    }
    let known_version = ctx.listed.lock().unwrap_or_else(|e| e.into_inner()).0;
    let sent = Instant::now();
    let renewal = ctx
        .renewer
        .renew_since(&shared.id, shared.incarnation(), known_version);
    let reply = match renewal.await {
        Ok(r) => {
            shared.metrics.renewal(true);
            r
        }
        Err(
            e @ StoreError::Rejected(
                Rejection::StaleIncarnation { .. } | Rejection::NotRegistered { .. },
            ),
        ) => {
            shared.metrics.renewal(false);
            return shared.fence(&e);
        }
        Err(e) => {
            shared.metrics.renewal(false);
            tracing::warn!(
                lease_left_ms = shared.lease_left_ms(),
                "lease renewal failed: {e}"
            );
            return;
        }
    };
    let alloc = &shared.alloc;
    let listed = {
        let mut cache = ctx.listed.lock().unwrap_or_else(|e| e.into_inner());
        if !reply.sections_unchanged {
            let count = alloc.spec().section_count();
            *cache = (reply.sections_version, expand(&reply.sections, count));
        } else if cache.0 == 0 || cache.0 != known_version {
            // "Unchanged" from a list we do not hold: not a grant we can
            // act on. Ask for the full list next time.
            tracing::warn!(
                known_version,
                "renewal says the list is unchanged, but none is held"
            );
            *cache = (0, Vec::new());
            return;
        }
        cache.1.clone()
    };
    let claim = {
        // Under the ownership lock: an adopt installing a section either
        // sees the lapse counted here or is seen by the drops below
        // (promise 3); a handoff settling one unmarks it under it too.
        let mut own = shared.ownership();
        if shared.is_fenced() {
            return;
        }
        // Drop what is no longer ours *before* extending the lease: a
        // request admitted by the new lease must not find a section moved
        // away while our lease had lapsed; and if it had lapsed, drop
        // everything (promises 1 and 3, see `ownership::reconcile`).
        let lapsed = !shared.lease.valid_at(Instant::now());
        let releasing: Vec<SectionId> = own.releasing.keys().copied().collect();
        let r = reconcile(&alloc.served_sections(), &listed, &releasing, lapsed);
        if lapsed {
            own.lapses += 1;
            shared.metrics.lapses.inc();
        }
        for &s in &r.drop {
            if alloc.drop_section(s) {
                tracing::info!(section = s, lapsed, "section no longer ours: dropped");
            }
        }
        shared
            .lease
            .granted(sent, Duration::from_millis(reply.lease_ms));
        r.claim
    };
    shared.draining.store(reply.draining, Ordering::Relaxed);
    // Claims go out at once, in pieces the store accepts: a restart with
    // 10^4 sections is a handful of take-overs that the store commits
    // together, not one write per section.
    let pieces =
        runs(&claim)
            .into_iter()
            .flat_map(|(first, count)| {
                (0..count)
                    .step_by(MAX_SECTIONS_PER_CALL as usize)
                    .map(move |o| (first + o, (count - o).min(MAX_SECTIONS_PER_CALL)))
            })
            .map(|(first, count)| async move {
                (first, count, ctx.raiser.take_over(first, count).await)
            });
    for (first, count, result) in futures::future::join_all(pieces).await {
        match result {
            Ok(g) => {
                shared.metrics.sections_started("took_over", g.len());
                tracing::info!(
                    first,
                    count,
                    epoch = g.first().map(|g| g.epoch),
                    "took over sections"
                )
            }
            Err(AllocError::Store(StoreErr::Fenced)) => {
                return shared.fence(&"a take-over found this incarnation replaced or fenced");
            }
            Err(e) => tracing::warn!(first, count, "take-over failed, will retry: {e}"),
        }
    }
    if reply.route_version > shared.route_version.load(Ordering::Acquire) {
        refresh_routes(ctx).await;
    }
}

/// The sections of `runs`, in order; sections outside the set (of
/// `count` sections) are left out, with a warning.
fn expand(runs: &[pb::SectionRun], count: u32) -> Vec<SectionId> {
    let mut listed = Vec::new();
    for run in runs {
        let end = run.first_section.saturating_add(run.count);
        if end > count {
            tracing::warn!(
                first = run.first_section,
                count = run.count,
                "renewal lists sections outside the set; ignored"
            );
        }
        listed.extend(run.first_section..end.min(count));
    }
    listed
}

/// Re-reads the route table every `poll`: publishes it, drops sections
/// routed away at once, and renews early when a section was routed here.
async fn route_loop(ctx: Arc<Ctx>, poll: Duration) {
    let mut tick = tokio::time::interval(poll);
    loop {
        tick.tick().await;
        refresh_routes(&ctx).await;
    }
}

async fn refresh_routes(ctx: &Ctx) {
    let shared = &ctx.shared;
    let alloc = &shared.alloc;
    // What was served *before* the read, with its epoch: a section taken
    // over or adopted while the read was under way is newer than the table
    // may know, and is left alone (dropping it would cost a step, promise
    // 4; renewals remain the authority on what is ours).
    let before: Vec<(SectionId, seqsvr_core::Epoch)> = alloc
        .served_sections()
        .into_iter()
        .filter_map(|s| Some((s, alloc.section_state(s)?.epoch)))
        .collect();
    let t = match ctx.reader.routes().await {
        Ok(t) => t,
        Err(e) => return tracing::debug!("route refresh failed: {e}"),
    };
    let mine = |s: SectionId| t.entry_for_section(s).is_some_and(|e| e.alloc == shared.id);
    for &(s, epoch) in &before {
        // Promise 3: the table says someone else owns it now.
        if !mine(s) && alloc.drop_section_if_epoch(s, epoch) {
            tracing::info!(section = s, epoch, "section routed elsewhere: dropped");
        }
    }
    let gained = (0..t.set.section_count()).any(|s| mine(s) && !alloc.is_serving(s));
    if gained && !shared.is_fenced() {
        ctx.shared.renew_now.notify_one();
    }
    if t.version >= shared.route_version.load(Ordering::Acquire) {
        shared.set_routes(pb::RouteTable::from(&t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
id = "alloc-1"
addr = "127.0.0.1:7201"
peer_addr = "127.0.0.1:7211"
admin_addr = "127.0.0.1:7221"
store = ["127.0.0.1:7111", "127.0.0.1:7112", "store-3.example:7113"]
renew_ms = 1000
route_poll_ms = 250
wait_ms = 1000
raise_ahead_fraction = 0.25
"#;

    fn key_of(text: &str) -> String {
        match AllocNodeConfig::from_toml(text) {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an invalid key, got {other:?}"),
        }
    }

    #[test]
    fn a_full_config_parses_with_defaults() {
        let cfg = AllocNodeConfig::from_toml(GOOD).unwrap();
        assert_eq!(cfg.store.len(), 3);
        assert!(!cfg.insecure && cfg.tls.is_none() && cfg.limits.is_none());
        assert_eq!(cfg.listen_addr(Plane::Peer), "127.0.0.1:7211");
        let more = format!(
            "{GOOD}listen = \"0.0.0.0:7201\"\ninsecure = true\n\
             [tls]\nca = \"ca.pem\"\ncert = \"a.pem\"\nkey = \"a-key.pem\"\n\
             [limits.client]\nmax_connections = 9\n"
        );
        let cfg = AllocNodeConfig::from_toml(&more).unwrap();
        assert_eq!(cfg.listen_addr(Plane::Client), "0.0.0.0:7201");
        assert_eq!(cfg.limits.unwrap().client.max_connections, 9);
        assert!(cfg.tls.is_some() && cfg.insecure);
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (
                "addr = \"127.0.0.1:7201\"",
                "addr = \"not-an-address\"",
                "addr",
            ),
            (
                "peer_addr = \"127.0.0.1:7211\"",
                "peer_addr = \"h:99999\"",
                "peer_addr",
            ),
            (
                "admin_addr = \"127.0.0.1:7221\"",
                "admin_addr = \"[::1:7221\"",
                "admin_addr",
            ),
            (
                "admin_addr = \"127.0.0.1:7221\"",
                "admin_addr = \"127.0.0.1:7201\"",
                "admin_addr",
            ),
            (
                "admin_addr = \"127.0.0.1:7221\"",
                "admin_addr = \"10.0.0.1:0\"",
                "admin_addr",
            ),
            ("renew_ms = 1000", "renew_ms = 0", "renew_ms"),
            ("route_poll_ms = 250", "route_poll_ms = 0", "route_poll_ms"),
            ("wait_ms = 1000", "wait_ms = 600000", "wait_ms"),
            (
                "raise_ahead_fraction = 0.25",
                "raise_ahead_fraction = 1.5",
                "raise_ahead_fraction",
            ),
            (
                "raise_ahead_fraction = 0.25",
                "raise_ahead_fraction = nan",
                "raise_ahead_fraction",
            ),
            ("id = \"alloc-1\"", "id = \"\"", "id"),
            ("id = \"alloc-1\"", "id = \"alloc 1\"", "id"),
            ("\"store-3.example:7113\"", "\"127.0.0.1:7111\"", "store[2]"),
            (
                "\"store-3.example:7113\"",
                "\"-bad-.example:7113\"",
                "store[2]",
            ),
            (
                "store = [\"127.0.0.1:7111\", \"127.0.0.1:7112\", \"store-3.example:7113\"]",
                "store = []",
                "store",
            ),
        ];
        for (from, to, key) in cases {
            let text = GOOD.replace(from, to);
            assert_ne!(text, GOOD, "{from} not in the sample");
            assert_eq!(key_of(&text), key, "{to}");
        }
        let bind_twice =
            format!("{GOOD}listen = \"0.0.0.0:7000\"\npeer_listen = \"0.0.0.0:7000\"\n");
        assert_eq!(key_of(&bind_twice), "peer_listen");
        let bad_listen = format!("{GOOD}admin_listen = \"nowhere\"\n");
        assert_eq!(key_of(&bad_listen), "admin_listen");
        let ephemeral = format!("{GOOD}listen = \"127.0.0.1:0\"\npeer_listen = \"127.0.0.1:0\"\n");
        AllocNodeConfig::from_toml(&ephemeral).unwrap();
        let limits = format!("{GOOD}[limits.client]\nmax_connections = 0\n");
        assert_eq!(key_of(&limits), "limits");
    }

    #[test]
    fn unknown_and_missing_keys_are_refused() {
        for text in [
            format!("{GOOD}renew_every = 3\n"),
            GOOD.replace("peer_addr = \"127.0.0.1:7211\"\n", ""),
            "id = 1".to_string(),
        ] {
            assert!(
                matches!(
                    AllocNodeConfig::from_toml(&text),
                    Err(ConfigError::Parse(_))
                ),
                "{text}"
            );
        }
    }

    #[test]
    fn addresses() {
        for ok in [
            "127.0.0.1:1",
            "[::1]:7201",
            "alloc-1.svc.local:7201",
            "h:65535",
        ] {
            assert_eq!(check_addr(ok, false), Ok(()), "{ok}");
        }
        for bad in [
            "not-an-address",
            "127.0.0.1",
            ":7201",
            "h:",
            "h:0",
            "::1:7201",
            "http://h:1",
            "h h:1",
            "h..x:1",
        ] {
            assert!(check_addr(bad, false).is_err(), "{bad}");
        }
        assert_eq!(check_addr("0.0.0.0:0", true), Ok(()));
    }

    #[test]
    fn incarnations_are_non_zero_and_differ() {
        let a = fresh_incarnation();
        let b = fresh_incarnation();
        assert!(a != 0 && b != 0 && a != b);
    }
}
