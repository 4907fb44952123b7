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
//!
//! # Layout
//! - `config`: [`AllocNodeConfig`], its defaults and validation;
//! - `registration`: the incarnation drawn at start, its registration,
//!   the first route read;
//! - this file: the listeners, start-up, shutdown, serving the planes;
//! - `renewal`: the renewal loop, executing the control loop's renewal
//!   cycle ([`Control`](crate::control::Control): reconcile, extend the
//!   lease, claim);
//! - `routes`: the route loop (its reads go to the control loop too);
//! - `effects`: the control loop's effects on memory, under the
//!   ownership lock.
//!
//! [`reconcile`]: crate::ownership::reconcile

mod config;
mod effects;
mod gate;
mod registration;
mod renewal;
mod resp;
mod routes;
mod start;
mod stop;

pub use config::*;
pub use registration::fresh_incarnation;
pub use resp::RespSection;
pub use stop::{StopReport, STOP_HANDOFF_BOUND, STOP_RECORD_BOUND};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use seqsvr_client::{ClientOptions, SeqClient};
use seqsvr_core::Incarnation;
use seqsvr_net::Plane;
use seqsvr_proto::alloc_server::AllocServer;
use seqsvr_store_api::client::connector;
use seqsvr_store_api::PeerClient;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::NodeError;
use crate::front::{Forwarder, Front};
use crate::raiser::Raiser;
use crate::service::ClientService;
use crate::shared::Shared;
use crate::store_link::StoreCeilings;
use crate::warm::Warmed;

use gate::{Gated, StartState};

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
    /// The Redis-protocol door, if served.
    pub resp: Option<TcpListener>,
    /// The HTTP API, if served (`docs/clients.md`, HTTP).
    pub http: Option<TcpListener>,
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
            resp: match &cfg.resp {
                Some(r) => Some(TcpListener::bind(&r.addr).await.map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("binding the resp door on {}: {e}", r.addr),
                    )
                })?),
                None => None,
            },
            http: match &cfg.http_addr {
                Some(a) => Some(TcpListener::bind(a).await.map_err(|e| {
                    std::io::Error::new(e.kind(), format!("binding the HTTP API on {a}: {e}"))
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
    /// The Redis-protocol door's address actually bound, if served.
    pub resp_local_addr: Option<SocketAddr>,
    /// The HTTP API's address actually bound, if served.
    pub http_local_addr: Option<SocketAddr>,
    /// Answers every door's calls (local or forwarded).
    pub front: Arc<Front>,
    /// Tells the servers to stop.
    stop: watch::Sender<bool>,
    /// Servers (and the metrics listener).
    tasks: Vec<JoinHandle<()>>,
    /// Renewal, route and raise tasks: what claims and extends sections.
    control: Vec<JoinHandle<()>>,
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
    /// The renewal interval.
    renew_every: Duration,
}

/// How other seqsvr processes are dialed: through the project's one client
/// transport, with TLS if configured.
/// Refuses to start with a certificate that does not name this AllocSvr:
/// peers would take its calls as another AllocSvr's, or refuse them all.
fn check_own_certificate(tls: &seqsvr_net::TlsConfig, id: &str) -> Result<(), NodeError> {
    let want = seqsvr_net::Role::Alloc(id.to_string());
    let role = tls.own_role()?;
    if role != want {
        return Err(NodeError::Identity(format!(
            "the certificate {} names {role}, not this AllocSvr ({want})",
            tls.cert.display()
        )));
    }
    Ok(())
}

/// The renewals' own thread and runtime (see `start`): runs until the
/// node stops (or its start-up fails), then drops the runtime and every
/// task on it. Returns a handle to spawn on it.
fn control_thread(
    id: &str,
    stop: &watch::Sender<bool>,
) -> Result<tokio::runtime::Handle, NodeError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| NodeError::Runtime(format!("the renewals' runtime: {e}")))?;
    let handle = rt.handle().clone();
    let mut stopped = stop.subscribe();
    std::thread::Builder::new()
        .name(format!("{id}-renewals"))
        .spawn(move || {
            rt.block_on(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
        })
        .map_err(|e| NodeError::Runtime(format!("the renewals' thread: {e}")))?;
    Ok(handle)
}

/// The front every door answers through: forwarding through the
/// project's client, marked as this AllocSvr's, seeded with its own
/// client plane (whose `Routes` answers from the table it holds) and given
/// that table at once (`docs/architecture/forwarding.md`).
fn front(
    cfg: &AllocNodeConfig,
    shared: &Arc<Shared>,
    tls: Option<seqsvr_net::ClientTls>,
) -> Result<Front, NodeError> {
    if !cfg.forward.enabled {
        return Ok(Front::new(shared.clone(), None));
    }
    let fwd = cfg.forward.config();
    let options = ClientOptions {
        deadline: fwd.deadline,
        attempt_timeout: fwd.deadline.min(Duration::from_millis(500)),
        tls,
        forwarded_by: Some(cfg.id.clone()),
        ..Default::default()
    };
    let client = SeqClient::unconnected(std::slice::from_ref(&cfg.addr), options).map_err(|e| {
        NodeError::Config(crate::error::ConfigError::Invalid {
            key: "forward".into(),
            reason: e.to_string(),
        })
    })?;
    client.install_route_table(shared.routes().table.clone());
    let forwarder = Forwarder::new(client, fwd, cfg.addr.clone());
    Ok(Front::new(shared.clone(), Some(forwarder)))
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
        let tls = start::Tls::of(&cfg)?;
        let (planes, doors) = start::Planes::listen(&cfg, &tls, listeners)?;
        let metrics = crate::metrics::AllocMetrics::new(&cfg.id)?;
        let (stop, _) = watch::channel(false);
        // The client plane answers from now on: `NOT_SERVING_YET` with the
        // reason until the node serves (gate.rs), never a hang.
        let start_state = StartState::new(cfg.id.clone());
        let gated = Gated::new(start_state.clone());
        let local_addr = planes.client.local_addr();
        let client_task = start::serve_gate(planes.client, gated.clone(), &metrics, &stop)?;
        // Whatever fails from here on stops the client plane again.
        let guard = StopOnDrop {
            stop: &stop,
            task: Some(client_task),
        };
        let links = start::StoreLinks::dial(&cfg, &tls, &stop)?;
        // A first lease and our sections before serving anything.
        let (shared, ctx, next_renewal) =
            start::join(&cfg, &links, &tls, &start_state, metrics).await?;
        let incarnation = shared.incarnation();
        let (peer_local_addr, admin_local_addr) =
            (planes.peer.local_addr(), planes.admin.local_addr());
        let mut tasks = vec![guard.defuse()];
        tasks.extend(start::serve_planes(
            planes.peer,
            planes.admin,
            &shared,
            &stop,
        )?);
        let control = start::spawn_control(&cfg, &ctx, &links, next_renewal, &stop);
        let front = Arc::new(
            front(&cfg, &shared, tls.client.clone())?.with_ids(start::ids(
                &cfg,
                &shared,
                incarnation,
                &links,
            )?),
        );
        let opened = start::open_doors(&cfg, doors, &tls, &shared, &front, &stop, &mut tasks)?;
        // The client plane serves one service, the hot path: no router.
        gated.open(Warmed::new(
            AllocServer::new(ClientService {
                front: front.clone(),
            }),
            shared.alloc.clone(),
        ));
        let resp_local_addr = start::open_resp(&cfg, opened.resp, &tls, &front, &stop, &mut tasks)?;
        tracing::info!(
            id = %cfg.id,
            incarnation = %format_args!("{incarnation:x}"),
            %local_addr,
            %peer_local_addr,
            %admin_local_addr,
            resp = ?resp_local_addr,
            http = ?opened.http,
            sections = shared.alloc.served_sections().len(),
            "alloc started"
        );
        Ok(AllocNode {
            shared,
            local_addr,
            peer_local_addr,
            admin_local_addr,
            resp_local_addr,
            http_local_addr: opened.http,
            front,
            stop,
            tasks,
            control,
        })
    }

    /// This process's incarnation.
    pub fn incarnation(&self) -> Incarnation {
        self.shared.incarnation()
    }

    /// Stops serving: the servers stop accepting, background tasks end.
    pub fn shutdown(self) {
        let _ = self.stop.send(true);
        if let Some(ids) = self.front.ids() {
            ids.halt();
        }
        for t in self.control.into_iter().chain(self.tasks) {
            t.abort();
        }
    }
}

/// Stops the client plane served during start-up if start-up fails.
struct StopOnDrop<'a> {
    stop: &'a watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl StopOnDrop<'_> {
    /// Start-up succeeded: the task is the node's from now on.
    fn defuse(mut self) -> JoinHandle<()> {
        self.task.take().expect("defused once")
    }
}

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            let _ = self.stop.send(true);
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
    "/seqsvr.v1.Alloc/NextId",
    "/seqsvr.v1.Alloc/DecodeId",
];

const PEER_PATHS: &[&str] = &["/seqsvr.v1.AllocPeer/Adopt", "/seqsvr.v1.AllocPeer/Counter"];

const ADMIN_PATHS: &[&str] = &[
    "/seqsvr.v1.AllocAdmin/Handoff",
    "/seqsvr.v1.AllocAdmin/Status",
    "/seqsvr.v1.AllocAdmin/Release",
    "/seqsvr.v1.AllocAdmin/Refresh",
    "/seqsvr.v1.AllocAdmin/Drain",
    "/seqsvr.v1.AllocAdmin/Counter",
];

/// Serves one plane until stopped; logs why it stopped otherwise.
async fn serve(plane: Plane, serving: impl std::future::Future<Output = seqsvr_net::Result<()>>) {
    if let Err(e) = serving.await {
        tracing::error!(%plane, "alloc server stopped: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seqsvr_net::{DevPki, Leaf, Role, StoreId};

    #[test]
    fn an_allocsvr_refuses_another_ones_certificate() {
        let dir = std::env::temp_dir().join(format!("seqsvr-own-cert-{}", std::process::id()));
        let leaves = [
            Leaf::new("alloc-1", Role::Alloc("alloc-1".into())),
            Leaf::new("alloc-2", Role::Alloc("alloc-2".into())),
            Leaf::new("store-1", Role::Store(StoreId::new(0, 1))),
        ];
        let pki = DevPki::generate(&dir, &leaves, false).unwrap();
        let tls = |name: &str| seqsvr_net::TlsConfig {
            ca: pki.ca_path(),
            cert: pki.cert_path(name),
            key: pki.key_path(name),
        };
        check_own_certificate(&tls("alloc-1"), "alloc-1").unwrap();
        for other in ["alloc-2", "store-1"] {
            let e = check_own_certificate(&tls(other), "alloc-1").unwrap_err();
            assert!(
                e.to_string().contains("not this AllocSvr (alloc:alloc-1)"),
                "{e}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
