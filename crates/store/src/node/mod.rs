//! A running store replica: configuration, identity, bootstrap, serving.
//!
//! Bootstrap is safe to repeat. A replica's data directory remembers the
//! node id it was created for; starting it with another id is refused.
//! Only a *brand-new* replica (no vote, no log) that is the lowest-id member
//! of the configured group, and not configured to `join` a running one,
//! initialises the cluster, and only after asking its peers whether a
//! cluster already exists: re-initialising a replica that lost its disk
//! (or one restarted with a fresh directory) would otherwise start a
//! second history. A restarted replica simply rejoins, with the membership
//! its own log holds (the config's `members` are only the first one).
//!
//! # Layout
//! - `config`: [`StoreConfig`] and its parts ([`Member`], [`InitialAlloc`],
//!   [`RaftTiming`], [`LeaseSection`]), parsing and validation;
//! - this file: the listeners, the data directory's identity, start-up,
//!   the planes served, the arbiter loop (and, in test builds, the
//!   partition switch's watcher: see [`crate::fault`]);
//! - `bootstrap`: initialising a brand-new group and configuring its set
//!   and initial routes.

mod bootstrap;
mod config;
mod config_spec;
mod home;
mod rebalance;
mod watch;

pub use config::*;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use seqsvr_net::Plane;
use seqsvr_proto::raft_server::RaftServer;
use seqsvr_proto::store_admin_server::StoreAdminServer;
use seqsvr_proto::store_peer_server::StorePeerServer;
use seqsvr_proto::store_read_server::StoreReadServer;
use seqsvr_proto::store_sets_server::StoreSetsServer;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::arbiter::{Arbiter, ArbiterConfig};
use crate::disk::Disk;
use crate::log_store::LogStore;
use crate::network::{Network, MAX_MESSAGE};
use crate::proposer::Proposer;
use crate::service::admin::AdminService;
use crate::service::peer::PeerService;
use crate::service::raft::RaftService;
use crate::service::read::ReadService;
use crate::service::sets::SetsService;
use crate::service::StoreApi;
use crate::state_machine::StateMachine;
use crate::types::{Command, NodeId, Raft};
use seqsvr_net::TlsConfig;
use seqsvr_store_api::client::{connector, Connector};
use seqsvr_store_api::{Error, Result};
use seqsvr_store_core::arbiter::Runs;
use seqsvr_store_core::backup::RestorePlan;

use bootstrap::{bootstrap, configure_set, may_initialise};
use config::config_err;

/// The listeners of a store replica, bound by the caller (tests bind port
/// 0).
pub struct StoreListeners {
    /// Peer plane: Raft, AllocSvr calls, forwarded calls.
    pub peer: TcpListener,
    /// Client plane: read-only calls.
    pub client: TcpListener,
    /// Admin plane: operator calls.
    pub admin: TcpListener,
    /// Prometheus metrics, if served.
    pub metrics: Option<TcpListener>,
}

impl StoreListeners {
    /// Binds the addresses `cfg` names.
    pub async fn bind(cfg: &StoreConfig) -> Result<Self> {
        let bind = |key: &'static str, a: String| async move {
            TcpListener::bind(&a)
                .await
                .map_err(|e| config_err(key, format!("cannot bind {a}: {e}")))
        };
        Ok(Self {
            peer: bind("listen", cfg.peer_bind().to_string()).await?,
            client: bind("client_addr", cfg.client_bind().to_string()).await?,
            admin: bind("admin_addr", cfg.admin_bind().to_string()).await?,
            metrics: match &cfg.metrics_addr {
                Some(a) => Some(bind("metrics_addr", a.clone()).await?),
                None => None,
            },
        })
    }
}

/// The addresses a running replica is bound to.
#[derive(Debug, Clone, Copy)]
pub struct StoreAddrs {
    /// Peer plane.
    pub peer: SocketAddr,
    /// Client plane.
    pub client: SocketAddr,
    /// Admin plane.
    pub admin: SocketAddr,
    /// Prometheus metrics, if served.
    pub metrics: Option<SocketAddr>,
}

/// A running store replica.
pub struct StoreNode {
    /// The Raft handle.
    pub raft: Raft,
    /// The services' shared state (also usable in-process).
    pub api: StoreApi,
    /// The addresses actually bound.
    pub addrs: StoreAddrs,
    /// The three servers.
    servers: Vec<JoinHandle<()>>,
    /// Background tasks (bootstrap, set configuration, arbiter).
    tasks: Vec<JoinHandle<()>>,
}

const NODE_ID_KEY: &[u8] = b"node_id";

/// Checks (or, on first start, records) which node a data dir belongs to.
fn claim_identity(disk: &Disk, id: NodeId) -> Result<()> {
    let at = |e: &dyn std::fmt::Display| {
        Error::Internal(format!("data dir {}: {e}", disk.path().display()))
    };
    let tree = disk.tree("raft").map_err(|e| at(&e))?;
    match tree.get(NODE_ID_KEY).map_err(|e| at(&e))? {
        Some(v) if v.as_ref() == id.to_be_bytes() => Ok(()),
        Some(v) => Err(Error::Config(format!(
            "data dir {} belongs to store node {:?}, not {id}",
            disk.path().display(),
            seqsvr_core::codec::u64_of_key(&v)
        ))),
        None => {
            tree.insert(NODE_ID_KEY, &id.to_be_bytes())
                .map_err(|e| at(&e))?;
            disk.sync().map_err(|e| at(&e))
        }
    }
}

/// Refuses to start with a config whose set differs from the one the data
/// dir holds: a set never changes shape in place.
fn check_stored_set(sm: &StateMachine, cfg: &StoreConfig) -> Result<()> {
    match &sm.read().state.set {
        Some(stored) if *stored != cfg.set => Err(Error::Config(format!(
            "set: the data dir {} holds set {stored:?}, the config says {:?}; \
             a set never changes shape in place",
            cfg.data_dir.display(),
            cfg.set
        ))),
        _ => Ok(()),
    }
}

impl StoreNode {
    /// Opens the replica's storage, starts Raft and serves its three planes.
    pub async fn start(cfg: StoreConfig, listeners: StoreListeners) -> Result<StoreNode> {
        Self::start_with(cfg, listeners, None).await
    }

    /// [`start`](Self::start) for a group seeded from a backup
    /// (docs/operations.md, Backup and disaster recovery): while it leads,
    /// this replica writes the plan's restore instead of configuring a
    /// new set, and nothing is served before each section has landed at
    /// its raised ceiling. Refused unless the backup is of the configured
    /// set (and so of any set the data directory holds).
    pub async fn start_restoring(
        cfg: StoreConfig,
        listeners: StoreListeners,
        plan: RestorePlan,
    ) -> Result<StoreNode> {
        if plan.backup.state.set.as_ref() != Some(&cfg.set) {
            return Err(Error::Config(format!(
                "the backup is of {:?}, the config's [set] is {:?}",
                plan.backup.state.set, cfg.set
            )));
        }
        tracing::info!(
            set = cfg.set.set_id,
            log_index = plan.backup.header.log_index,
            margin = plan.margin,
            "restoring a backup: every ceiling raised by the margin"
        );
        Self::start_with(cfg, listeners, Some(Arc::new(plan))).await
    }

    async fn start_with(
        cfg: StoreConfig,
        listeners: StoreListeners,
        restore: Option<Arc<RestorePlan>>,
    ) -> Result<StoreNode> {
        cfg.validate()?;
        let at = |e: &dyn std::fmt::Display| {
            Error::Internal(format!("data dir {}: {e}", cfg.data_dir.display()))
        };
        let tls = (cfg.tls.as_ref())
            .map(|t| Tls::load(t, cfg.set.set_id, cfg.id, cfg.legacy_store_certificates))
            .transpose()?;
        let metrics = crate::metrics::StoreMetrics::new(cfg.id, cfg.set.set_id)
            .map_err(|e| Error::Internal(format!("metrics: {e}")))?;
        let (disk, log, sm, fresh) = open_storage(&cfg, &metrics)?;
        let raft_cfg = Arc::new(cfg.raft_config()?);
        let dial = Dialers::new(tls.as_ref());
        if fresh {
            if let Some(why) = bootstrap::lost_disk(&cfg, &dial.group).await {
                return Err(Error::Config(why));
            }
        }
        let network = Network::new(dial.group.clone(), metrics.stages.clone());
        let isolated = network.isolated.clone();
        let raft = Raft::new(cfg.id, raft_cfg, network, log, sm.clone())
            .await
            .map_err(|e| at(&e))?;
        let peer = plane_listener(listeners.peer, Plane::Peer, &cfg, tls.as_ref())?;
        let client = plane_listener(listeners.client, Plane::Client, &cfg, tls.as_ref())?;
        let admin = plane_listener(listeners.admin, Plane::Admin, &cfg, tls.as_ref())?;
        let addrs = StoreAddrs {
            peer: peer.local_addr(),
            client: client.local_addr(),
            admin: admin.local_addr(),
            metrics: listeners.metrics.as_ref().and_then(|l| l.local_addr().ok()),
        };
        let api = StoreApi {
            id: cfg.id,
            addr: cfg.addr().to_string(),
            client_addr: cfg.client_addr.clone(),
            admin_addr: cfg.admin_addr.clone(),
            raft: raft.clone(),
            sm,
            proposer: Proposer::spawn(raft.clone(), metrics.stages.clone()),
            disk,
            connect: dial.group,
            home_connect: dial.home,
            alloc_connect: dial.allocs,
            peers: Default::default(),
            arbiter: Arc::new(Arbiter::new(
                ArbiterConfig {
                    tick_ms: cfg.lease.tick_ms,
                },
                cfg.rebalance.clone(),
            )),
            auth: peer.auth(),
            store_certs: crate::auth::StoreCerts::new(
                cfg.set.set_id,
                cfg.legacy_store_certificates,
            ),
            isolated,
            metrics,
            member_changes: Default::default(),
            barriers: crate::service::barriers(&raft),
            route_snapshot: Default::default(),
            reads: Arc::new(tokio::sync::Semaphore::new(cfg.max_concurrent_reads)),
        };
        let servers = serve(&api, [peer, client, admin], listeners.metrics, cfg.insecure)?;
        let tasks = spawn_tasks(&api, &cfg, fresh, restore);
        tracing::info!(id = cfg.id, peer = %addrs.peer, client = %addrs.client, admin = %addrs.admin, fresh, "store replica started");
        Ok(StoreNode {
            raft,
            api,
            addrs,
            servers,
            tasks,
        })
    }

    /// Stops serving and shuts Raft down.
    pub async fn shutdown(self) {
        for t in self.tasks.iter().chain(&self.servers) {
            t.abort();
        }
        let _ = self.raft.shutdown().await;
    }
}

/// A replica's TLS material: server settings per plane, and the client
/// identity it dials peers with.
struct Tls {
    config: TlsConfig,
    client: seqsvr_net::ClientTls,
}

impl Tls {
    /// Loads the files of replica `id` of `set`, refusing a certificate
    /// that names anything else: the replica would speak for another one
    /// (of this group or of another set's) in every Raft request
    /// (`docs/architecture/security.md`). One of the old form, naming no
    /// set, is taken only if `legacy` allows it.
    fn load(config: &TlsConfig, set: u32, id: NodeId, legacy: bool) -> Result<Self> {
        let role = config.own_role().map_err(|e| config_err("tls", e))?;
        check_own_role(&role, set, id, legacy).map_err(|e| {
            Error::Config(format!(
                "tls: the certificate {} {e}",
                config.cert.display()
            ))
        })?;
        if let seqsvr_net::Role::LegacyStore(_) = role {
            tracing::warn!(
                "tls: the certificate {} names {role}, the old form without a set; taken \
                 because legacy_store_certificates = true. Re-issue it as store:{set}:{id} \
                 (docs/operations.md, Rotating certificates)",
                config.cert.display()
            );
        }
        // Peers must present store certificates of this set: another
        // set's replica, or an AllocSvr, must not receive this group's
        // Raft messages or answer for its leader (security.md, "Whom a
        // client dials").
        let client = config
            .client()
            .map_err(|e| config_err("tls", e))?
            .expecting(seqsvr_net::ServerRole::Store(set))
            .allowing_legacy_stores(legacy);
        Ok(Self {
            config: config.clone(),
            client,
        })
    }
}

/// Whether `role`, found in this replica's own certificate, is replica
/// `id` of set `set` (or, if `legacy`, the old form naming `id`); the
/// error says what the certificate names instead.
fn check_own_role(
    role: &seqsvr_net::Role,
    set: u32,
    id: NodeId,
    legacy: bool,
) -> std::result::Result<(), String> {
    use seqsvr_net::{Role, StoreId};
    let want = Role::Store(StoreId::new(set, id));
    match role {
        r if *r == want => Ok(()),
        Role::LegacyStore(n) if *n == id && legacy => Ok(()),
        Role::LegacyStore(n) if *n == id => Err(format!(
            "names {role}, the old form without a set; this replica is {want}. \
             Re-issue it (seqsvr certs --set {set} --store {id}), or set \
             legacy_store_certificates = true while certificates are re-issued"
        )),
        Role::Store(StoreId { set: other, .. }) if *other != set => Err(format!(
            "names {role}, a replica of set {other}; this replica is {want}, of set {set}"
        )),
        _ => Err(format!("names {role}, not this replica ({want})")),
    }
}

/// Whom a replica dials, each expecting the role its certificate must
/// show.
struct Dialers {
    /// Its group's replicas.
    group: Connector,
    /// The home group's replicas, for this set's directory entry.
    home: Connector,
    /// The set's AllocSvrs' admin planes, for a rebalance's handoffs.
    allocs: Connector,
}

impl Dialers {
    fn new(tls: Option<&Tls>) -> Self {
        let expecting = |role| tls.map(|t| (t.client.clone()).expecting(role));
        let home = seqsvr_net::ServerRole::Store(seqsvr_core::directory::HOME_SET);
        Dialers {
            group: connector(tls.map(|t| t.client.clone())),
            home: connector(expecting(home)),
            allocs: connector(expecting(seqsvr_net::ServerRole::Alloc)),
        }
    }
}

/// Opens the data dir: the disk (claimed for replica `cfg.id`), the log
/// and the state machine (its stored set checked against the config's).
/// The last value says whether nothing was ever logged here (fresh).
fn open_storage(
    cfg: &StoreConfig,
    metrics: &crate::metrics::StoreMetrics,
) -> Result<(Disk, LogStore, StateMachine, bool)> {
    let at = |e: &dyn std::fmt::Display| {
        Error::Internal(format!("data dir {}: {e}", cfg.data_dir.display()))
    };
    let disk = Disk::open(&cfg.data_dir).map_err(|e| at(&e))?;
    claim_identity(&disk, cfg.id)?;
    let log = LogStore::open(&disk)
        .map_err(|e| at(&e))?
        .with_stages(metrics.stages.clone());
    let fresh = log.is_fresh().map_err(|e| at(&e))?;
    let sm = StateMachine::open(&disk)
        .map_err(|e| at(&e))?
        .with_stages(metrics.stages.clone());
    check_stored_set(&sm, cfg)?;
    Ok((disk, log, sm, fresh))
}

/// Serves `api` on the peer, client and admin `planes`, and the metrics
/// on `metrics` if there is one (plain HTTP only if `insecure`).
fn serve(
    api: &StoreApi,
    planes: [seqsvr_net::Listener; 3],
    metrics: Option<TcpListener>,
    insecure: bool,
) -> Result<Vec<JoinHandle<()>>> {
    let [peer, client, admin] = planes;
    let kinds = seqsvr_proto::kind_labels();
    let calls = |plane: &str, paths: &[&str]| {
        seqsvr_net::calls::CallMetrics::register(&api.metrics.registry, plane, paths, &kinds)
            .map(seqsvr_net::calls::CallMetricsLayer)
            .map_err(|e| Error::Internal(format!("metrics: {e}")))
    };
    let mut servers = vec![
        tokio::spawn(serve_peer(api.clone(), peer, calls("peer", PEER_PATHS)?)),
        tokio::spawn(serve_client(
            api.clone(),
            client,
            calls("client", CLIENT_PATHS)?,
        )),
        tokio::spawn(serve_admin(
            api.clone(),
            admin,
            calls("admin", ADMIN_PATHS)?,
        )),
    ];
    if let Some(tcp) = metrics {
        let a = api.clone();
        let render: seqsvr_net::metrics::Render =
            Arc::new(move || a.metrics.render(a.id, &a.raft, &a.sm, &a.disk, &a.arbiter));
        servers.push(tokio::spawn(async move {
            if let Err(e) = seqsvr_net::metrics::serve(tcp, render, insecure).await {
                tracing::error!("metrics listener: {e}");
            }
        }));
    }
    Ok(servers)
}

/// A replica's background tasks: the fault hook (a test build's), the
/// group's bootstrap (by the lowest member of a fresh group), the
/// arbiter, the leadership watch, the set's configuration (with the
/// backup to restore, if any) and its own entry in the home set's
/// directory.
fn spawn_tasks(
    api: &StoreApi,
    cfg: &StoreConfig,
    fresh: bool,
    restore: Option<Arc<RestorePlan>>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    #[cfg(feature = "fault-hooks")]
    tasks.push(tokio::spawn(
        (api.isolated.clone()).watch(cfg.data_dir.join(crate::fault::ISOLATE_FILE)),
    ));
    if may_initialise(cfg, fresh) {
        tasks.push(tokio::spawn(bootstrap(
            api.raft.clone(),
            cfg.clone(),
            api.connect.clone(),
        )));
    } else if fresh && cfg.join {
        tracing::info!("joining a running group: waiting for its leader to add this replica");
    }
    tasks.push(tokio::spawn(arbitrate(api.clone())));
    tasks.push(tokio::spawn(watch::watch(api.raft.clone(), api.id)));
    tasks.push(tokio::spawn(configure_set(
        api.clone(),
        cfg.clone(),
        restore,
    )));
    tasks.push(tokio::spawn(home::keep_own_entry(api.clone())));
    tasks
}

fn plane_listener(
    tcp: TcpListener,
    plane: Plane,
    cfg: &StoreConfig,
    tls: Option<&Tls>,
) -> Result<seqsvr_net::Listener> {
    let server_tls = match tls {
        Some(t) => Some(t.config.server(plane).map_err(|e| config_err("tls", e))?),
        None => None,
    };
    seqsvr_net::server::listener(
        tcp,
        plane,
        cfg.limits.get(plane),
        server_tls.as_ref(),
        cfg.insecure,
    )
    .map_err(|e| config_err(plane.name(), e))
}

fn report(plane: &str, res: seqsvr_net::Result<()>) {
    if let Err(e) = res {
        tracing::error!("store {plane} server stopped: {e}");
    }
}

/// The methods each plane serves, for per-call metrics.
const PEER_PATHS: &[&str] = &[
    "/seqsvr.v1.Raft/AppendEntries",
    "/seqsvr.v1.Raft/Vote",
    "/seqsvr.v1.Raft/InstallSnapshot",
    "/seqsvr.v1.StorePeer/RegisterAlloc",
    "/seqsvr.v1.StorePeer/Renew",
    "/seqsvr.v1.StorePeer/TakeOver",
    "/seqsvr.v1.StorePeer/Raise",
    "/seqsvr.v1.StorePeer/Handoff",
    "/seqsvr.v1.StorePeer/Stopped",
    "/seqsvr.v1.StorePeer/ReadSections",
    "/seqsvr.v1.StorePeer/GetRoutes",
    "/seqsvr.v1.StorePeer/Status",
];

const CLIENT_PATHS: &[&str] = &[
    "/seqsvr.v1.StoreRead/GetRoutes",
    "/seqsvr.v1.StoreRead/ReadSections",
    "/seqsvr.v1.StoreRead/Status",
];

const ADMIN_PATHS: &[&str] = &[
    "/seqsvr.v1.StoreAdmin/Assign",
    "/seqsvr.v1.StoreAdmin/SetDraining",
    "/seqsvr.v1.StoreAdmin/SetLease",
    "/seqsvr.v1.StoreAdmin/FenceAlloc",
    "/seqsvr.v1.StoreAdmin/RetireAlloc",
    "/seqsvr.v1.StoreAdmin/Status",
    "/seqsvr.v1.StoreSets/Freeze",
    "/seqsvr.v1.StoreSets/Install",
    "/seqsvr.v1.StoreSets/ChangeDirectory",
    "/seqsvr.v1.StoreSets/CopyDirectory",
    "/seqsvr.v1.StoreAdmin/AddMember",
    "/seqsvr.v1.StoreAdmin/RemoveMember",
    "/seqsvr.v1.StoreAdmin/Snapshot",
    "/seqsvr.v1.StoreAdmin/Backup",
];

type Calls = seqsvr_net::calls::CallMetricsLayer;

async fn serve_peer(api: StoreApi, l: seqsvr_net::Listener, calls: Calls) {
    let max = l.limits().max_message;
    let raft = RaftServer::new(RaftService {
        raft: api.raft.clone(),
        auth: api.auth,
        store_certs: api.store_certs.clone(),
        isolated: api.isolated.clone(),
    })
    .max_decoding_message_size(max)
    .max_encoding_message_size(MAX_MESSAGE);
    let peer = StorePeerServer::new(PeerService(api));
    let router = l.server().layer(calls).add_service(raft).add_service(peer);
    report("peer", l.serve(router, std::future::pending()).await);
}

async fn serve_client(api: StoreApi, l: seqsvr_net::Listener, calls: Calls) {
    let router = l
        .server()
        .layer(calls)
        .add_service(StoreReadServer::new(ReadService(api)));
    report("client", l.serve(router, std::future::pending()).await);
}

async fn serve_admin(mut api: StoreApi, l: seqsvr_net::Listener, calls: Calls) {
    api.auth = l.auth();
    let router = l
        .server()
        .layer(calls)
        .add_service(StoreAdminServer::new(AdminService(
            api.clone(),
            l.limits().request_timeout,
        )))
        .add_service(StoreSetsServer::new(SetsService(api)));
    report("admin", l.serve(router, std::future::pending()).await);
}

/// The arbiter loop: tracks this replica's office and, while it leads,
/// moves sections whose owner's lease has certainly expired, retires
/// fenced AllocSvrs that are gone, and evens out sections over the live
/// AllocSvrs (`rebalance`).
async fn arbitrate(api: StoreApi) {
    let mut tick = tokio::time::interval(Duration::from_millis(api.arbiter.config.tick_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Renewals wait while a plan is made and applied (`Arbiter::moves`).
        let _moves = api.arbiter.moves.lock().await;
        let m = api.raft.metrics().borrow().clone();
        let leading = (m.current_leader == Some(api.id)
            && m.state == openraft::ServerState::Leader)
            .then_some(m.current_term);
        let now = std::time::Instant::now();
        api.arbiter.observe(leading, now);
        let (moves, notes) = {
            let a = api.sm.read();
            let moves = api.arbiter.plan(&a.state, now);
            let notes: Vec<_> = (moves.iter())
                .map(|c| api.arbiter.explain(&a.state, c, now))
                .collect();
            (moves, notes)
        };
        for (cmd, note) in moves.into_iter().zip(notes) {
            // One line per move: to whom, from whom and why (a run of
            // sections per line, not a line per section).
            if let Some(n) = &note {
                tracing::info!(
                    to = %n.to,
                    from = %n.owners(),
                    sections = %Runs(&n.sections),
                    count = n.sections.len(),
                    "arbiter: moving {n}"
                );
            }
            match api.proposer.propose(cmd).await {
                // Counted only when sections leave an owner: a first
                // routing of unowned sections (a new group, sections
                // installed from another set) is no failover.
                Ok(Ok(_)) if note.as_ref().is_some_and(|n| n.from_an_owner()) => {
                    api.metrics.moved()
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::info!("arbiter move refused (state moved on): {e}");
                    break;
                }
                Err(e) => {
                    tracing::warn!("arbiter move failed: {e}");
                    break;
                }
            }
        }
        retire(&api, now).await;
        rebalance::start(&api, now);
    }
}

/// Retires the fenced AllocSvrs whose lease is over and whose sections
/// have moved (`Arbiter::retirements`), still under the arbiter's lock.
/// A refusal (the record changed since it was read) is left to the next
/// tick.
async fn retire(api: &StoreApi, now: std::time::Instant) {
    let retire = {
        let a = api.sm.read();
        api.arbiter.retirements(&a.state, now)
    };
    for cmd in retire {
        let Command::RetireAlloc { alloc, incarnation } = &cmd else {
            continue;
        };
        let (alloc, incarnation) = (alloc.clone(), *incarnation);
        match api.proposer.propose(cmd).await {
            Ok(Ok(_)) => tracing::info!(
                %alloc,
                incarnation,
                "arbiter: retired a fenced AllocSvr (lease certainly expired, owns no section)"
            ),
            Ok(Err(e)) => {
                tracing::info!(%alloc, "arbiter: retirement refused (state moved on): {e}")
            }
            Err(e) => {
                tracing::warn!(%alloc, "arbiter: retirement failed: {e}");
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_takes_only_its_own_certificate() {
        use seqsvr_net::{Role, StoreId};
        let ok = |r: &Role, legacy| check_own_role(r, 1, 4, legacy);
        assert!(ok(&Role::Store(StoreId::new(1, 4)), false).is_ok());
        let e = ok(&Role::Store(StoreId::new(0, 4)), true).unwrap_err();
        assert!(e.contains("set 0") && e.contains("set 1"), "{e}");
        let e = ok(&Role::Store(StoreId::new(1, 5)), false).unwrap_err();
        assert_eq!(e, "names store:1:5, not this replica (store:1:4)");
        let e = ok(&Role::LegacyStore(4), false).unwrap_err();
        assert!(e.contains("legacy_store_certificates"), "{e}");
        assert!(ok(&Role::LegacyStore(4), true).is_ok());
        assert!(ok(&Role::LegacyStore(5), true).is_err());
        assert!(ok(&Role::Alloc("a".into()), true).is_err());
    }

    /// A replica dials its peers requiring a store certificate of its own
    /// set, so another set's replica (or an AllocSvr) at a peer's address
    /// is refused at the handshake (`crates/net/tests/net/server_role.rs`
    /// shows the refusal itself).
    #[test]
    fn a_replica_dials_only_its_own_sets_replicas() {
        use seqsvr_net::{DevPki, Leaf, Role, ServerRole, StoreId};
        let dir = tempfile::tempdir().unwrap();
        let pki = DevPki::generate(
            dir.path(),
            &[Leaf::new("s", Role::Store(StoreId::new(1, 4)))],
            false,
        )
        .unwrap();
        let tls = Tls::load(&pki.tls_config("s"), 1, 4, false).unwrap();
        assert_eq!(tls.client.expected(), Some(ServerRole::Store(1)));
    }

    #[test]
    fn a_data_dir_keeps_its_identity() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::open(dir.path()).unwrap();
        claim_identity(&disk, 2).unwrap();
        claim_identity(&disk, 2).unwrap();
        assert!(matches!(claim_identity(&disk, 3), Err(Error::Config(_))));
    }
}
