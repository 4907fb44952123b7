//! The steps of [`AllocNode::start`](super::AllocNode::start), each named:
//! TLS and the planes' listeners, the client plane's gate, the store
//! links, the state shared by the services, the planes and the doors, and
//! the background tasks that execute the control loop.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use seqsvr_core::{Incarnation, RouteTable};
use seqsvr_net::calls::{CallMetrics, CallMetricsLayer};
use seqsvr_net::server::Listener as PlaneListener;
use seqsvr_net::{ClientTls, Plane, ServerTls};
use seqsvr_proto::alloc_admin_server::AllocAdminServer;
use seqsvr_proto::alloc_peer_server::AllocPeerServer;
use seqsvr_store_api::{AllocAddrs, PeerClient};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::allocator::{AllocConfig, Allocator};
use crate::control::{Control, Stepper};
use crate::error::NodeError;
use crate::front::Front;
use crate::ids::{system_clock, IdMetrics, IdWorkers, StoreWorkers};
use crate::lease::Lease;
use crate::metrics::AllocMetrics;
use crate::raiser::{Raiser, RaiserConfig};
use crate::service::{AdminService, ClientService, PeerService};
use crate::shared::{Routes, Shared};
use crate::store_link::StoreCeilings;
use crate::warm::Warmed;
use seqsvr_proto::alloc_server::AllocServer;

use super::gate::{Gated, StartState};
use super::registration::{fresh_incarnation, start_up};
use super::renewal::{renew_loop, run_effects};
use super::routes::route_loop;
use super::{
    check_own_certificate, connector, control_thread, resp, serve, AllocListeners, AllocNodeConfig,
    Ctx, ADMIN_PATHS, CLIENT_PATHS, PEER_PATHS,
};

/// A future that resolves once the node is told to stop.
pub(super) fn stopped(stop: &watch::Sender<bool>) -> impl std::future::Future<Output = ()> {
    let mut rx = stop.subscribe();
    async move {
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// The client plane's one service, once the node serves.
pub(super) type ClientSvc = Warmed<AllocServer<ClientService>>;

/// The node's TLS: per plane served (client, peer, admin) and as a client.
pub(super) struct Tls {
    /// Per plane, in that order.
    server: Option<[ServerTls; 3]>,
    /// Dialing the store and other AllocSvrs.
    pub client: Option<ClientTls>,
}

impl Tls {
    /// From the config; refuses a certificate that names another process.
    pub fn of(cfg: &AllocNodeConfig) -> Result<Tls, NodeError> {
        Ok(match &cfg.tls {
            Some(t) => {
                check_own_certificate(t, &cfg.id)?;
                let per_plane = [
                    t.server(Plane::Client)?,
                    t.server(Plane::Peer)?,
                    t.server(Plane::Admin)?,
                ];
                Tls {
                    server: Some(per_plane),
                    client: Some(t.client()?),
                }
            }
            None => Tls {
                server: None,
                client: None,
            },
        })
    }

    /// The server TLS of plane `i` (0 client, 1 peer, 2 admin).
    pub fn server(&self, i: usize) -> Option<&ServerTls> {
        self.server.as_ref().map(|t| &t[i])
    }
}

/// The three planes' listeners.
pub(super) struct Planes {
    pub client: PlaneListener,
    pub peer: PlaneListener,
    pub admin: PlaneListener,
}

/// The optional doors' sockets, opened once the node serves.
pub(super) struct Doors {
    metrics: Option<TcpListener>,
    http: Option<TcpListener>,
    resp: Option<TcpListener>,
}

impl Planes {
    /// The planes' listeners with their limits and TLS; the doors' sockets.
    pub fn listen(
        cfg: &AllocNodeConfig,
        tls: &Tls,
        l: AllocListeners,
    ) -> Result<(Planes, Doors), NodeError> {
        let limits = cfg.limits.clone().unwrap_or_default();
        let listen = |tcp, plane, i| {
            seqsvr_net::server::listener(tcp, plane, limits.get(plane), tls.server(i), cfg.insecure)
        };
        let planes = Planes {
            client: listen(l.client, Plane::Client, 0)?,
            peer: listen(l.peer, Plane::Peer, 1)?,
            admin: listen(l.admin, Plane::Admin, 2)?,
        };
        let doors = Doors {
            metrics: l.metrics,
            http: l.http,
            resp: l.resp,
        };
        Ok((planes, doors))
    }
}

/// Per-call metrics of `plane`'s `paths`.
fn calls(
    metrics: &AllocMetrics,
    plane: Plane,
    paths: &[&str],
) -> Result<CallMetricsLayer, NodeError> {
    let kinds = seqsvr_proto::kind_labels();
    Ok(CallMetricsLayer(CallMetrics::register(
        &metrics.registry,
        plane.name(),
        paths,
        &kinds,
    )?))
}

/// Serves the client plane behind its gate (`NOT_SERVING_YET` until the
/// node opens it).
pub(super) fn serve_gate(
    client: PlaneListener,
    gated: Gated<ClientSvc>,
    metrics: &AllocMetrics,
    stop: &watch::Sender<bool>,
) -> Result<JoinHandle<()>, NodeError> {
    let server = client
        .server()
        .layer(calls(metrics, Plane::Client, CLIENT_PATHS)?);
    let serving = client.serve_one(server, gated, stopped(stop));
    Ok(tokio::spawn(serve(Plane::Client, serving)))
}

/// The node's connections to its store.
pub(super) struct StoreLinks {
    /// Admin-side and handoff calls.
    pub store: PeerClient,
    /// Renewals: deadline `renew_ms`, a replica silent for a quarter of it
    /// is not waited for (a gray failure must not cost the lease).
    pub renewer: PeerClient,
    /// Route reads, registration, take-overs and raises.
    pub reader: PeerClient,
    /// The renewal interval.
    pub renew_every: Duration,
    /// The renewals' own runtime.
    pub control: tokio::runtime::Handle,
}

impl StoreLinks {
    /// Dials the store. Its replicas must present store certificates: with
    /// an AllocSvr's, a process could take this AllocSvr's renewals and
    /// raises (docs/architecture/security.md, "Whom a client dials"). The
    /// config names no set, so any set's replica passes. Renewals run on a
    /// thread of their own, with their own connections to the store: the
    /// client plane's calls (a flood of them, from anyone who can connect)
    /// cannot queue a renewal, or the handling of its reply, until the
    /// lease lapses.
    pub fn dial(
        cfg: &AllocNodeConfig,
        tls: &Tls,
        stop: &watch::Sender<bool>,
    ) -> Result<StoreLinks, NodeError> {
        let to_store = (tls.client.clone()).map(|t| t.expecting(seqsvr_net::ServerRole::AnyStore));
        let store = PeerClient::new(&cfg.store, &connector(to_store.clone()))?;
        let renew_every = Duration::from_millis(cfg.renew_ms);
        let control = control_thread(&cfg.id, stop)?;
        let renewer = {
            let _in = control.enter();
            PeerClient::new(&cfg.store, &connector(to_store))?
                .with_deadline(renew_every, renew_every / 4)
        };
        let slow = renew_every.max(Duration::from_millis(1000));
        let reader = store.clone().with_deadline(slow, slow / 4);
        Ok(StoreLinks {
            store,
            renewer,
            reader,
            renew_every,
            control,
        })
    }
}

/// Joins the cluster as a fresh incarnation ([`start_up`]: registers,
/// waiting while a twin holds the id, and reads the routes), builds the
/// shared state from what it read, and performs the first renewal's
/// effects: a first lease and this AllocSvr's sections before anything is
/// served. Returns the shared state, the loops' context and when the next
/// renewal is due.
pub(super) async fn join(
    cfg: &AllocNodeConfig,
    links: &StoreLinks,
    tls: &Tls,
    start_state: &StartState,
    metrics: Arc<AllocMetrics>,
) -> Result<(Arc<Shared>, Arc<Ctx>, Option<Instant>), NodeError> {
    let incarnation = fresh_incarnation();
    let addrs = AllocAddrs {
        client: cfg.addr.clone(),
        peer: cfg.peer_addr.clone(),
        admin: cfg.admin_addr.clone(),
    };
    let mut control = Control::new(links.renew_every);
    let (routes, first) = start_up(
        &links.reader,
        &mut control,
        &cfg.id,
        incarnation,
        &addrs,
        start_state,
    )
    .await?;
    let shared = shared(
        cfg,
        links,
        tls,
        routes,
        incarnation,
        addrs,
        control,
        metrics,
    )?;
    let ctx = context(cfg, &shared, links);
    let next_renewal = run_effects(&ctx, first).await;
    Ok((shared, ctx, next_renewal))
}

/// The state the services and the background tasks share, built from the
/// route table start-up read and the control loop it registered.
#[allow(clippy::too_many_arguments)]
pub(super) fn shared(
    cfg: &AllocNodeConfig,
    links: &StoreLinks,
    tls: &Tls,
    routes: RouteTable,
    incarnation: Incarnation,
    addrs: AllocAddrs,
    control: Control,
    metrics: Arc<AllocMetrics>,
) -> Result<Arc<Shared>, NodeError> {
    let alloc_cfg = AllocConfig {
        raise_ahead_fraction: cfg.raise_ahead_fraction,
        adaptive: cfg.adaptive_steps.as_ref().map(|a| a.config()),
        max_names: cfg.max_names,
    };
    let alloc = Allocator::with_incarnation(routes.set.clone(), &alloc_cfg, incarnation)?;
    Ok(Arc::new(Shared {
        alloc: Arc::new(alloc),
        route_version: AtomicU64::new(routes.version),
        routes: RwLock::new(Arc::new(Routes::new(routes))),
        wait: Duration::from_millis(cfg.wait_ms),
        lease: Lease::new(Instant::now()),
        draining: AtomicBool::new(false),
        stopping: AtomicBool::new(false),
        stop_asked: Default::default(),
        fenced: AtomicBool::new(false),
        id: cfg.id.clone(),
        addrs,
        store: links.store.clone(),
        client_tls: tls.client.clone(),
        ownership: Mutex::new(control),
        peers: Default::default(),
        metrics,
        renew_now: Notify::new(),
    }))
}

/// The store's ceilings as the raisers see them.
fn ceilings(cfg: &AllocNodeConfig, shared: &Shared, links: &StoreLinks) -> Arc<StoreCeilings> {
    Arc::new(StoreCeilings {
        store: links.reader.clone(),
        alloc: cfg.id.clone(),
        metrics: shared.metrics.clone(),
    })
}

/// What the renewal and route loops share.
pub(super) fn context(cfg: &AllocNodeConfig, shared: &Arc<Shared>, links: &StoreLinks) -> Arc<Ctx> {
    let ceilings = ceilings(cfg, shared, links);
    Arc::new(Ctx {
        shared: shared.clone(),
        raiser: Raiser::new(shared.alloc.clone(), ceilings, RaiserConfig::default()),
        renewer: links.renewer.clone(),
        reader: links.reader.clone(),
        renew_every: links.renew_every,
    })
}

/// Serves the peer and admin planes.
pub(super) fn serve_planes(
    peer: PlaneListener,
    admin: PlaneListener,
    shared: &Arc<Shared>,
    stop: &watch::Sender<bool>,
) -> Result<Vec<JoinHandle<()>>, NodeError> {
    let metrics = &shared.metrics;
    let peer_router = (peer.server())
        .layer(calls(metrics, Plane::Peer, PEER_PATHS)?)
        .add_service(AllocPeerServer::new(PeerService {
            shared: shared.clone(),
            auth: peer.auth(),
        }));
    let admin_router = (admin.server())
        .layer(calls(metrics, Plane::Admin, ADMIN_PATHS)?)
        .add_service(AllocAdminServer::new(AdminService {
            shared: shared.clone(),
            auth: admin.auth(),
        }));
    Ok(vec![
        tokio::spawn(serve(Plane::Peer, peer.serve(peer_router, stopped(stop)))),
        tokio::spawn(serve(
            Plane::Admin,
            admin.serve(admin_router, stopped(stop)),
        )),
    ])
}

/// The control loop's executors: renewals (on their own thread), route
/// reads and the raiser, whose rounds the node's control loop decides.
pub(super) fn spawn_control(
    cfg: &AllocNodeConfig,
    ctx: &Arc<Ctx>,
    links: &StoreLinks,
    next_renewal: Option<Instant>,
    stop: &watch::Sender<bool>,
) -> Vec<JoinHandle<()>> {
    let shared = &ctx.shared;
    let ceilings = ceilings(cfg, shared, links);
    let control: Arc<dyn Stepper> = shared.clone();
    let raiser =
        Raiser::new(shared.alloc.clone(), ceilings, RaiserConfig::default()).with_control(control);
    let poll = Duration::from_millis(cfg.route_poll_ms);
    vec![
        links.control.spawn(renew_loop(ctx.clone(), next_renewal)),
        tokio::spawn(route_loop(ctx.clone(), poll)),
        tokio::spawn(raiser.run(stopped(stop))),
    ]
}

/// The time-ordered id workers, leasing from the store.
pub(super) fn ids(
    cfg: &AllocNodeConfig,
    shared: &Arc<Shared>,
    incarnation: Incarnation,
    links: &StoreLinks,
) -> Result<Arc<IdWorkers>, NodeError> {
    let slow = links.renew_every.max(Duration::from_millis(1000));
    let ids = IdWorkers::new(
        Arc::new(StoreWorkers {
            store: shared.store.clone().with_deadline(slow, slow / 4),
            alloc: cfg.id.clone(),
            incarnation,
        }),
        system_clock(),
        shared.wait,
        IdMetrics::register(&shared.metrics.registry)?,
    );
    // A worker id held across a lease lapse issues nothing until the
    // store confirms it (docs/ids.md, `ids::rules::confirmed`).
    let watched = shared.clone();
    ids.watch_lapses(Arc::new(move || watched.ownership().lapses()));
    Ok(ids)
}

/// The doors opened before the client plane: what is left to open after.
pub(super) struct Opened {
    /// The HTTP API's address, if served.
    pub http: Option<std::net::SocketAddr>,
    /// The Redis-protocol door's socket, opened after the client plane.
    pub resp: Option<TcpListener>,
}

/// Serves the metrics listener and the HTTP API.
pub(super) fn open_doors(
    cfg: &AllocNodeConfig,
    doors: Doors,
    tls: &Tls,
    shared: &Arc<Shared>,
    front: &Arc<Front>,
    stop: &watch::Sender<bool>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Result<Opened, NodeError> {
    if let Some(tcp) = doors.metrics {
        let s = shared.clone();
        let render: seqsvr_net::metrics::Render = Arc::new(move || s.render_metrics());
        let insecure = cfg.insecure;
        tasks.push(tokio::spawn(async move {
            if let Err(e) = seqsvr_net::metrics::serve(tcp, render, insecure).await {
                tracing::error!("metrics listener: {e}");
            }
        }));
    }
    let http = match doors.http {
        Some(tcp) => {
            let at = tcp.local_addr()?;
            let tls = tls.server(0).cloned();
            // Plaintext where other hosts can reach it only if the
            // operator says so, as for every plane.
            if tls.is_none() && !at.ip().is_loopback() && !cfg.insecure {
                return Err(NodeError::Net(seqsvr_net::Error::PlaintextExposed {
                    plane: Plane::Client,
                    addr: at,
                }));
            }
            let serving = crate::http::serve(tcp, front.clone(), tls, stopped(stop));
            tasks.push(tokio::spawn(serving));
            Some(at)
        }
        None => None,
    };
    Ok(Opened {
        http,
        resp: doors.resp,
    })
}

/// Serves the Redis-protocol door, if configured.
pub(super) fn open_resp(
    cfg: &AllocNodeConfig,
    tcp: Option<TcpListener>,
    tls: &Tls,
    front: &Arc<Front>,
    stop: &watch::Sender<bool>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Result<Option<std::net::SocketAddr>, NodeError> {
    match (&cfg.resp, tcp) {
        (Some(section), Some(tcp)) => {
            let (addr, task) = resp::start(
                section,
                tcp,
                tls.server(0),
                cfg.insecure,
                front,
                stopped(stop),
            )?;
            tasks.push(task);
            Ok(Some(addr))
        }
        _ => Ok(None),
    }
}
