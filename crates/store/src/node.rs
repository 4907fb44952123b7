//! A running store replica: configuration, identity, bootstrap, serving.
//!
//! Bootstrap is safe to repeat. A replica's data directory remembers the
//! node id it was created for; starting it with another id is refused.
//! Only a *brand-new* replica (no vote, no log) that is the lowest-id member
//! of the configured group initialises the cluster, and only after asking
//! its peers whether a cluster already exists: re-initialising a replica
//! that lost its disk (or one restarted with a fresh directory) would
//! otherwise start a second history. A restarted replica simply rejoins.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use seqsvr_core::SetSpec;
use seqsvr_net::Plane;
use seqsvr_proto::raft_server::RaftServer;
use seqsvr_proto::store_admin_server::StoreAdminServer;
use seqsvr_proto::store_peer_client::StorePeerClient;
use seqsvr_proto::store_peer_server::StorePeerServer;
use seqsvr_proto::store_read_server::StoreReadServer;
use seqsvr_store_api::client::Connector;
use serde::{Deserialize, Serialize};
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
use crate::service::StoreApi;
use crate::state_machine::StateMachine;
use crate::types::{Command, NodeId, Raft};
use seqsvr_core::LeaseTerms;
use seqsvr_net::{PlaneLimits, TlsConfig};
use seqsvr_store_api::{Error, Result};

/// One member of the store group, as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    /// Raft node id (≥ 1, unique in the group).
    pub id: NodeId,
    /// Its peer-plane `host:port` (Raft, and calls forwarded to the leader).
    pub addr: String,
}

/// The sections first routed to an AllocSvr of the set. Applied once the
/// AllocSvr has registered, and only to sections with no owner yet, so a
/// restart with the same config changes nothing and later moves are never
/// undone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitialAlloc {
    /// The AllocSvr's id.
    pub id: String,
    /// First section routed to it.
    pub first: u32,
    /// Number of sections routed to it.
    pub count: u32,
}

/// Raft timing, in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RaftTiming {
    /// Leader heartbeat interval.
    pub heartbeat_ms: u64,
    /// Election timeout, lower bound.
    pub election_min_ms: u64,
    /// Election timeout, upper bound.
    pub election_max_ms: u64,
    /// Build a snapshot after this many log entries.
    pub snapshot_every: u64,
}

impl Default for RaftTiming {
    fn default() -> Self {
        Self {
            heartbeat_ms: 100,
            election_min_ms: 400,
            election_max_ms: 800,
            snapshot_every: 10_000,
        }
    }
}

/// Lease timing as configured. `lease_ms` and `margin_ms` are only the
/// *initial* terms of a new group: the terms in force are replicated state,
/// changed with `seqctl store lease` (see `docs/operations.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaseSection {
    /// Initial lease length, in ms.
    pub lease_ms: u64,
    /// Initial drift margin, in ms.
    pub margin_ms: u64,
    /// How often the arbiter looks for expired leases, in ms.
    pub tick_ms: u64,
}

impl Default for LeaseSection {
    fn default() -> Self {
        let t = LeaseTerms::default();
        Self {
            lease_ms: t.lease_ms,
            margin_ms: t.margin_ms,
            tick_ms: ArbiterConfig::default().tick_ms,
        }
    }
}

impl LeaseSection {
    /// The initial terms.
    pub fn terms(&self) -> LeaseTerms {
        LeaseTerms {
            lease_ms: self.lease_ms,
            margin_ms: self.margin_ms,
        }
    }
}

/// Everything a store replica needs to run (one TOML file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// This replica's id; must be one of `members`.
    pub id: NodeId,
    /// Where its sled database lives.
    pub data_dir: PathBuf,
    /// Peer-plane bind address (defaults to this member's `addr`).
    #[serde(default)]
    pub listen: Option<String>,
    /// Client-plane address (read-only: routes, sections, status).
    pub client_addr: String,
    /// Admin-plane address (operator commands).
    pub admin_addr: String,
    /// Client- and admin-plane bind addresses, if they differ from the
    /// advertised ones.
    #[serde(default)]
    pub client_listen: Option<String>,
    /// See `client_listen`.
    #[serde(default)]
    pub admin_listen: Option<String>,
    /// TLS for every plane (mTLS on peer and admin). Without it every
    /// listener must be on loopback, or `insecure = true`.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Allow plaintext on non-loopback addresses (warned about at start).
    #[serde(default)]
    pub insecure: bool,
    /// Per-plane connection and message limits.
    #[serde(default)]
    pub limits: PlaneLimits,
    /// Where to serve Prometheus metrics (`GET /metrics`, plain HTTP);
    /// none if unset. A non-loopback address needs `insecure = true`.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// The initial members of the group.
    pub members: Vec<Member>,
    /// The set this group serves.
    pub set: SetSpec,
    /// Raft timing.
    #[serde(default)]
    pub raft: RaftTiming,
    /// The set's AllocSvrs and their initial sections.
    #[serde(default)]
    pub allocs: Vec<InitialAlloc>,
    /// Lease timing.
    #[serde(default)]
    pub lease: LeaseSection,
}

fn config_err(key: &str, msg: impl std::fmt::Display) -> Error {
    Error::Config(format!("{key}: {msg}"))
}

/// Checks that `addr` is `host:port`.
pub fn check_host_port(key: &str, addr: &str) -> Result<()> {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(config_err(key, format!("{addr:?} is not host:port"))),
    }
}

impl StoreConfig {
    /// Parses and validates a TOML config.
    pub fn from_toml(text: &str) -> Result<Self> {
        let cfg: StoreConfig = toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads, parses and validates a config file; errors name the file.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
        Self::from_toml(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
    }

    /// Checks the config for mistakes that would otherwise surface late.
    pub fn validate(&self) -> Result<()> {
        if self.members.is_empty() {
            return Err(config_err("members", "no members"));
        }
        let ids: std::collections::BTreeSet<_> = self.members.iter().map(|m| m.id).collect();
        if ids.len() != self.members.len() || ids.contains(&0) {
            return Err(config_err(
                "members.id",
                "member ids must be unique and ≥ 1",
            ));
        }
        let addrs: std::collections::BTreeSet<_> = self.members.iter().map(|m| &m.addr).collect();
        if addrs.len() != self.members.len() {
            return Err(config_err(
                "members.addr",
                "member addresses must be unique",
            ));
        }
        for m in &self.members {
            check_host_port("members.addr", &m.addr)?;
        }
        if !ids.contains(&self.id) {
            return Err(config_err(
                "id",
                format!("{} is not among the members", self.id),
            ));
        }
        check_host_port("client_addr", &self.client_addr)?;
        check_host_port("admin_addr", &self.admin_addr)?;
        for (key, v) in [
            ("metrics_addr", &self.metrics_addr),
            ("listen", &self.listen),
            ("client_listen", &self.client_listen),
            ("admin_listen", &self.admin_listen),
        ] {
            if let Some(a) = v {
                check_host_port(key, a)?;
            }
        }
        let planes = [self.peer_bind(), self.client_bind(), self.admin_bind()];
        if planes[0] == planes[1] || planes[1] == planes[2] || planes[0] == planes[2] {
            return Err(config_err(
                "client_addr/admin_addr",
                "each plane needs its own address",
            ));
        }
        self.set.validate().map_err(|e| config_err("set", e))?;
        let mut taken = vec![false; self.set.section_count() as usize];
        let mut seen = std::collections::BTreeSet::new();
        for a in &self.allocs {
            if !seen.insert(&a.id) {
                return Err(config_err(
                    "allocs.id",
                    format!("{:?} is listed twice", a.id),
                ));
            }
            let end = a.first as u64 + a.count as u64;
            if a.id.is_empty() || a.count == 0 || end > taken.len() as u64 {
                return Err(config_err(
                    "allocs",
                    format!(
                        "alloc {:?}: sections {}+{} not in the set",
                        a.id, a.first, a.count
                    ),
                ));
            }
            for t in &mut taken[a.first as usize..end as usize] {
                if std::mem::replace(t, true) {
                    return Err(config_err(
                        "allocs",
                        format!("alloc {:?}: sections overlap another alloc's", a.id),
                    ));
                }
            }
        }
        self.lease
            .terms()
            .validate()
            .map_err(|e| config_err("lease", e))?;
        if self.lease.tick_ms == 0 {
            return Err(config_err("lease.tick_ms", "must be positive"));
        }
        let t = &self.raft;
        if t.heartbeat_ms == 0
            || t.election_min_ms <= t.heartbeat_ms
            || t.election_max_ms <= t.election_min_ms
        {
            return Err(config_err(
                "raft",
                "need 0 < heartbeat_ms < election_min_ms < election_max_ms",
            ));
        }
        if t.snapshot_every == 0 {
            return Err(config_err("raft.snapshot_every", "must be at least 1"));
        }
        self.limits
            .validate()
            .map_err(|e| config_err("limits", e))?;
        Ok(())
    }

    /// This replica's advertised peer-plane address.
    pub fn addr(&self) -> &str {
        let me = self.members.iter().find(|m| m.id == self.id);
        me.map(|m| m.addr.as_str()).unwrap_or_default()
    }

    /// Where to bind the peer plane.
    pub fn peer_bind(&self) -> &str {
        self.listen.as_deref().unwrap_or(self.addr())
    }

    /// Where to bind the client plane.
    pub fn client_bind(&self) -> &str {
        self.client_listen.as_deref().unwrap_or(&self.client_addr)
    }

    /// Where to bind the admin plane.
    pub fn admin_bind(&self) -> &str {
        self.admin_listen.as_deref().unwrap_or(&self.admin_addr)
    }

    fn raft_config(&self) -> Result<openraft::Config> {
        let t = &self.raft;
        openraft::Config {
            cluster_name: format!("seqsvr-set-{}", self.set.set_id),
            heartbeat_interval: t.heartbeat_ms,
            election_timeout_min: t.election_min_ms,
            election_timeout_max: t.election_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(t.snapshot_every),
            max_in_snapshot_log_to_keep: 1000,
            snapshot_max_chunk_size: 4 << 20,
            ..Default::default()
        }
        .validate()
        .map_err(|e| config_err("raft", e))
    }
}

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
        cfg.validate()?;
        let at = |e: &dyn std::fmt::Display| {
            Error::Internal(format!("data dir {}: {e}", cfg.data_dir.display()))
        };
        let tls = match &cfg.tls {
            Some(t) => Some(Tls::load(t)?),
            None => None,
        };
        let disk = Disk::open(&cfg.data_dir).map_err(|e| at(&e))?;
        claim_identity(&disk, cfg.id)?;
        let log = LogStore::open(&disk).map_err(|e| at(&e))?;
        let fresh = log.is_fresh().map_err(|e| at(&e))?;
        let sm = StateMachine::open(&disk).map_err(|e| at(&e))?;
        check_stored_set(&sm, &cfg)?;
        let raft_cfg = Arc::new(cfg.raft_config()?);
        let connect = seqsvr_store_api::client::connector(tls.as_ref().map(|t| t.client.clone()));
        let network = Network::new(connect.clone());
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
            raft: raft.clone(),
            sm,
            proposer: Proposer::spawn(raft.clone()),
            disk,
            connect,
            peers: Default::default(),
            arbiter: Arc::new(Arbiter::new(ArbiterConfig {
                tick_ms: cfg.lease.tick_ms,
            })),
            auth: peer.auth(),
            isolated: isolated.clone(),
            metrics: crate::metrics::StoreMetrics::new(cfg.id)
                .map_err(|e| Error::Internal(format!("metrics: {e}")))?,
        };
        let calls = |plane: &str, paths: &[&str]| {
            seqsvr_net::calls::CallMetrics::register(&api.metrics.registry, plane, paths)
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
        if let Some(tcp) = listeners.metrics {
            let a = api.clone();
            let render: seqsvr_net::metrics::Render =
                Arc::new(move || a.metrics.render(a.id, &a.raft, &a.sm, &a.disk));
            let insecure = cfg.insecure;
            servers.push(tokio::spawn(async move {
                if let Err(e) = seqsvr_net::metrics::serve(tcp, render, insecure).await {
                    tracing::error!("metrics listener: {e}");
                }
            }));
        }
        let mut tasks = vec![tokio::spawn(watch_isolation(
            cfg.data_dir.join(ISOLATE_FILE),
            isolated,
        ))];
        let lowest = cfg.members.iter().map(|m| m.id).min() == Some(cfg.id);
        if fresh && lowest {
            tasks.push(tokio::spawn(bootstrap(
                raft.clone(),
                cfg.clone(),
                api.connect.clone(),
            )));
        }
        tasks.push(tokio::spawn(arbitrate(api.clone())));
        tasks.push(tokio::spawn(configure_set(api.clone(), cfg.clone())));
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
    fn load(config: &TlsConfig) -> Result<Self> {
        let client = config.client().map_err(|e| config_err("tls", e))?;
        Ok(Self {
            config: config.clone(),
            client,
        })
    }
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

/// A file whose presence in the data directory cuts this replica off from
/// its peers (while clients can still reach it): the drill's partition
/// fault, for test and dev clusters. Remove it to heal.
pub const ISOLATE_FILE: &str = "ISOLATE";

async fn watch_isolation(path: PathBuf, isolated: Arc<std::sync::atomic::AtomicBool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        let now = path.exists();
        if isolated.swap(now, std::sync::atomic::Ordering::Relaxed) != now {
            tracing::warn!(
                isolated = now,
                "partition fault {}",
                if now { "on" } else { "healed" }
            );
        }
    }
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
    "/seqsvr.v1.StoreAdmin/Status",
];

type Calls = seqsvr_net::calls::CallMetricsLayer;

async fn serve_peer(api: StoreApi, l: seqsvr_net::Listener, calls: Calls) {
    let max = l.limits().max_message;
    let raft = RaftServer::new(RaftService {
        raft: api.raft.clone(),
        auth: api.auth,
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
        .add_service(StoreAdminServer::new(AdminService(api)));
    report("admin", l.serve(router, std::future::pending()).await);
}

/// The arbiter loop: tracks this replica's office and, while it leads,
/// moves sections whose owner's lease has certainly expired.
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
        let moves = {
            let a = api.sm.read();
            api.arbiter.plan(&a.state, now)
        };
        for cmd in moves {
            tracing::info!(?cmd, "arbiter: moving sections whose owner's lease expired");
            match api.proposer.propose(cmd).await {
                Ok(Ok(_)) => api.metrics.moved(),
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
    }
}

/// Whether any peer already belongs to an initialised cluster.
async fn peers_initialised(cfg: &StoreConfig, connect: &Connector) -> bool {
    for m in cfg.members.iter().filter(|m| m.id != cfg.id) {
        let Ok(ch) = connect(&m.addr) else {
            continue;
        };
        let mut c = StorePeerClient::new(ch);
        let call = c.status(seqsvr_proto::StatusRequest {});
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(500), call).await {
            let s = s.into_inner();
            if s.term > 0 || s.last_log_index > 0 || !s.members.is_empty() {
                return true;
            }
        }
    }
    false
}

/// Initialises a brand-new cluster from the configured members (see the
/// module docs for why this only ever happens once).
async fn bootstrap(raft: Raft, cfg: StoreConfig, connect: Connector) {
    if peers_initialised(&cfg, &connect).await {
        tracing::warn!(
            "a peer already belongs to a cluster: not initialising; waiting to be caught up"
        );
        return;
    }
    let members: BTreeMap<NodeId, BasicNode> = cfg
        .members
        .iter()
        .map(|m| {
            (
                m.id,
                BasicNode {
                    addr: m.addr.clone(),
                },
            )
        })
        .collect();
    match raft.initialize(members).await {
        Ok(()) => tracing::info!("initialised a new store cluster"),
        Err(e) => tracing::info!("not initialising: {e}"),
    }
}

/// Makes sure the replicated state holds the configured set, the initial
/// lease terms and the initial routes: whichever replica leads proposes
/// them (idempotently). Initial routes wait for each AllocSvr to register
/// (a route needs its address) and touch only sections still unowned.
async fn configure_set(api: StoreApi, cfg: StoreConfig) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let (pending, done) = initial_commands(&api, &cfg);
        if done && pending.is_empty() {
            return;
        }
        if api.raft.metrics().borrow().current_leader != Some(api.id) {
            continue;
        }
        for cmd in pending {
            match api.proposer.propose(cmd).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!("initial configuration refused: {e}"),
                Err(e) => {
                    tracing::warn!("initial configuration failed, will retry: {e}");
                    break;
                }
            }
        }
    }
}

/// What is still missing of the configured set and routes, and whether
/// nothing more can become due (every configured AllocSvr registered).
fn initial_commands(api: &StoreApi, cfg: &StoreConfig) -> (Vec<Command>, bool) {
    let a = api.sm.read();
    if a.state.set.is_none() {
        let cmds = vec![
            Command::ConfigureSet(cfg.set.clone()),
            Command::SetLease(cfg.lease.terms()),
        ];
        return (cmds, false);
    }
    let mut cmds = Vec::new();
    let mut done = true;
    for al in &cfg.allocs {
        if !a.state.allocs.contains_key(&al.id) {
            done = false;
            continue;
        }
        let unowned = |s: u32| a.state.sections[s as usize].owner.is_none();
        let mut s = al.first;
        while s < al.first + al.count {
            if !unowned(s) {
                s += 1;
                continue;
            }
            let start = s;
            // In pieces a command may hold (MAX_SECTIONS_PER_CALL).
            while s < al.first + al.count
                && unowned(s)
                && s - start < crate::types::MAX_SECTIONS_PER_CALL
            {
                s += 1;
            }
            let expected = (start..s)
                .map(|x| a.state.sections[x as usize].epoch)
                .collect();
            cmds.push(Command::Assign {
                alloc: al.id.clone(),
                first: start,
                expected,
            });
        }
    }
    (cmds, done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_configs_parse() {
        for (i, text) in [
            include_str!("../../../config/store-1.toml"),
            include_str!("../../../config/store-2.toml"),
            include_str!("../../../config/store-3.toml"),
        ]
        .into_iter()
        .enumerate()
        {
            let cfg = StoreConfig::from_toml(text).unwrap();
            assert_eq!(cfg.id, i as u64 + 1);
            assert_eq!(cfg.members.len(), 3);
            assert_eq!(cfg.set.section_count(), 100);
        }
    }

    #[test]
    fn bad_configs_are_refused() {
        let good = include_str!("../../../config/store-1.toml");
        for (from, to) in [
            ("id = 1", "id = 9"),
            ("step = 10000", "step = 0"),
            ("election_min_ms = 400", "election_min_ms = 50"),
            ("id = 2\naddr", "id = 1\naddr"),
            ("first = 50", "first = 49"),
            ("count = 50\n\n[[allocs]]", "count = 0\n\n[[allocs]]"),
            ("first = 50", "first = 99"),
            ("id = \"alloc-2\"", "id = \"alloc-1\""),
            ("addr = \"127.0.0.1:7101\"", "addr = \"not-an-address\""),
            (
                "client_addr = \"127.0.0.1:7111\"",
                "client_addr = \"127.0.0.1:7101\"",
            ),
            ("snapshot_every = 10000", "snapshot_every = 0"),
            ("margin_ms = 1000", "margin_ms = 10"),
            ("tick_ms = 100", "tick_ms = 0"),
            // Unknown keys and misspelt tables are mistakes, not extensions.
            ("[raft]", "[raft]\nheartbeat = 100"),
            ("[lease]", "[leases]"),
            ("data_dir", "datadir"),
        ] {
            let text = good.replacen(from, to, 1);
            assert_ne!(text, good, "{from}");
            assert!(
                matches!(StoreConfig::from_toml(&text), Err(Error::Config(_))),
                "{to}"
            );
        }
        assert!(matches!(
            StoreConfig::from_toml("id = "),
            Err(Error::Config(_))
        ));
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
