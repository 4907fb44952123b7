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
use seqsvr_proto::raft_server::RaftServer;
use seqsvr_proto::store_client::StoreClient;
use seqsvr_proto::store_server::StoreServer;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::arbiter::{Arbiter, LeaseConfig};
use crate::disk::Disk;
use crate::error::{Error, Result};
use crate::log_store::LogStore;
use crate::network::{channel, Network, MAX_MESSAGE};
use crate::proposer::Proposer;
use crate::service::{RaftApi, StoreApi};
use crate::state_machine::StateMachine;
use crate::types::{Command, NodeId, Raft};

/// One member of the store group, as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Raft node id (≥ 1, unique in the group).
    pub id: NodeId,
    /// `host:port` serving both the store API and Raft.
    pub addr: String,
}

/// An AllocSvr of the set and the sections first routed to it. Applied
/// once: only sections with no owner yet are assigned, so a restart with
/// the same config changes nothing and later moves are never undone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitialAlloc {
    /// The AllocSvr's id.
    pub id: String,
    /// Its client-facing `host:port`.
    pub addr: String,
    /// First section routed to it.
    pub first: u32,
    /// Number of sections routed to it.
    pub count: u32,
}

/// Raft timing, in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
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

/// Everything a store replica needs to run (one TOML file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreConfig {
    /// This replica's id; must be one of `members`.
    pub id: NodeId,
    /// Where its sled database lives.
    pub data_dir: PathBuf,
    /// Address to bind (defaults to this member's `addr`).
    #[serde(default)]
    pub listen: Option<String>,
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
    /// Lease timing (the arbiter's).
    #[serde(default)]
    pub lease: LeaseConfig,
}

impl StoreConfig {
    /// Parses and validates a TOML config.
    pub fn from_toml(text: &str) -> Result<Self> {
        let cfg: StoreConfig = toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the config for mistakes that would otherwise surface late.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.members.is_empty() {
            return bad("no members".into());
        }
        let ids: std::collections::BTreeSet<_> = self.members.iter().map(|m| m.id).collect();
        if ids.len() != self.members.len() || ids.contains(&0) {
            return bad("member ids must be unique and ≥ 1".into());
        }
        if !ids.contains(&self.id) {
            return bad(format!("id {} is not among the members", self.id));
        }
        self.set
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        let mut taken = vec![false; self.set.section_count() as usize];
        for a in &self.allocs {
            let end = a.first as u64 + a.count as u64;
            if a.id.is_empty() || a.count == 0 || end > taken.len() as u64 {
                return bad(format!(
                    "alloc {:?}: sections {}+{} not in the set",
                    a.id, a.first, a.count
                ));
            }
            for t in &mut taken[a.first as usize..end as usize] {
                if std::mem::replace(t, true) {
                    return bad(format!(
                        "alloc {:?}: sections overlap another alloc's",
                        a.id
                    ));
                }
            }
        }
        let l = &self.lease;
        if l.lease_ms == 0 || l.tick_ms == 0 || l.margin_ms * 20 < l.lease_ms {
            return bad(
                "lease: need lease_ms > 0, tick_ms > 0 and margin_ms ≥ 5% of lease_ms".into(),
            );
        }
        let t = &self.raft;
        if t.heartbeat_ms == 0
            || t.election_min_ms <= t.heartbeat_ms
            || t.election_max_ms <= t.election_min_ms
        {
            return bad("need 0 < heartbeat_ms < election_min_ms < election_max_ms".into());
        }
        Ok(())
    }

    /// This replica's advertised address.
    pub fn addr(&self) -> &str {
        let me = self.members.iter().find(|m| m.id == self.id);
        me.map(|m| m.addr.as_str()).unwrap_or_default()
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
        .map_err(|e| Error::Config(e.to_string()))
    }
}

/// A running store replica.
pub struct StoreNode {
    /// The Raft handle.
    pub raft: Raft,
    /// The client-facing API (also usable in-process).
    pub api: StoreApi,
    /// The address actually bound.
    pub local_addr: SocketAddr,
    /// The gRPC server task.
    server: JoinHandle<()>,
    /// Background tasks (bootstrap, set configuration).
    tasks: Vec<JoinHandle<()>>,
}

const NODE_ID_KEY: &[u8] = b"node_id";

/// Checks (or, on first start, records) which node a data dir belongs to.
fn claim_identity(disk: &Disk, id: NodeId) -> Result<()> {
    let tree = disk
        .tree("raft")
        .map_err(|e| Error::Internal(e.to_string()))?;
    match tree
        .get(NODE_ID_KEY)
        .map_err(|e| Error::Internal(e.to_string()))?
    {
        Some(v) if v.as_ref() == id.to_be_bytes() => Ok(()),
        Some(v) => Err(Error::Config(format!(
            "data dir {} belongs to store node {:?}, not {id}",
            disk.path().display(),
            seqsvr_core::codec::u64_of_key(&v)
        ))),
        None => {
            tree.insert(NODE_ID_KEY, &id.to_be_bytes())
                .map_err(|e| Error::Internal(e.to_string()))?;
            disk.sync().map_err(|e| Error::Internal(e.to_string()))
        }
    }
}

impl StoreNode {
    /// Opens the replica's storage, starts Raft and serves on `listener`.
    pub async fn start(cfg: StoreConfig, listener: TcpListener) -> Result<StoreNode> {
        cfg.validate()?;
        let internal = |e: &dyn std::fmt::Display| Error::Internal(e.to_string());
        let disk = Disk::open(&cfg.data_dir).map_err(|e| internal(&e))?;
        claim_identity(&disk, cfg.id)?;
        let log = LogStore::open(&disk).map_err(|e| internal(&e))?;
        let fresh = log.is_fresh().map_err(|e| internal(&e))?;
        let sm = StateMachine::open(&disk).map_err(|e| internal(&e))?;
        let raft_cfg = Arc::new(cfg.raft_config()?);
        let network = Network::default();
        let isolated = network.isolated.clone();
        let raft = Raft::new(cfg.id, raft_cfg, network, log, sm.clone())
            .await
            .map_err(|e| internal(&e))?;
        let api = StoreApi {
            id: cfg.id,
            addr: cfg.addr().to_string(),
            raft: raft.clone(),
            sm,
            proposer: Proposer::spawn(raft.clone()),
            disk,
            peers: Default::default(),
            arbiter: Arc::new(Arbiter::new(cfg.lease.clone())),
            isolated: isolated.clone(),
        };
        let local_addr = listener.local_addr().map_err(|e| internal(&e))?;
        let server = tokio::spawn(serve(api.clone(), raft.clone(), listener));
        let mut tasks = vec![tokio::spawn(watch_isolation(
            cfg.data_dir.join(ISOLATE_FILE),
            isolated,
        ))];
        let lowest = cfg.members.iter().map(|m| m.id).min() == Some(cfg.id);
        if fresh && lowest {
            tasks.push(tokio::spawn(bootstrap(raft.clone(), cfg.clone())));
        }
        tasks.push(tokio::spawn(arbitrate(api.clone())));
        tasks.push(tokio::spawn(configure_set(
            api.clone(),
            cfg.set.clone(),
            cfg.allocs.clone(),
        )));
        tracing::info!(id = cfg.id, %local_addr, fresh, "store replica started");
        Ok(StoreNode {
            raft,
            api,
            local_addr,
            server,
            tasks,
        })
    }

    /// Stops serving and shuts Raft down.
    pub async fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        self.server.abort();
        let _ = self.raft.shutdown().await;
    }
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

/// The listener's connections with Nagle's algorithm off. tonic ignores
/// `Server::tcp_nodelay` for `serve_with_incoming`, and small replies held
/// back for a delayed ACK cost ~40 ms at the tail.
fn nodelay(listener: TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

async fn serve(api: StoreApi, raft: Raft, listener: TcpListener) {
    let isolated = api.isolated.clone();
    let store = StoreServer::new(api);
    let raft = RaftServer::new(RaftApi { raft, isolated })
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let res = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(store)
        .add_service(raft)
        .serve_with_incoming(nodelay(listener))
        .await;
    if let Err(e) = res {
        tracing::error!("store server stopped: {e}");
    }
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
            if let Err(e) = api.proposer.propose(cmd).await {
                tracing::warn!("arbiter move failed: {e}");
                break;
            }
        }
    }
}

/// Whether any peer already belongs to an initialised cluster.
async fn peers_initialised(cfg: &StoreConfig) -> bool {
    for m in cfg.members.iter().filter(|m| m.id != cfg.id) {
        let Ok(ch) = channel(&m.addr, Duration::from_millis(300)) else {
            continue;
        };
        let mut c = StoreClient::new(ch);
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
async fn bootstrap(raft: Raft, cfg: StoreConfig) {
    if peers_initialised(&cfg).await {
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

/// Makes sure the replicated state holds the configured set and the
/// initial routes: whichever replica leads proposes them (idempotently); a
/// stored set that differs from the config is reported, never overwritten.
async fn configure_set(api: StoreApi, spec: SetSpec, allocs: Vec<InitialAlloc>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let pending = match initial_commands(&api, &spec, &allocs) {
            None => return,
            Some(cmds) if cmds.is_empty() => return,
            Some(cmds) => cmds,
        };
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

/// What is still missing of the configured set and routes (`None` if the
/// store holds a different set).
fn initial_commands(
    api: &StoreApi,
    spec: &SetSpec,
    allocs: &[InitialAlloc],
) -> Option<Vec<Command>> {
    let a = api.sm.read();
    match &a.state.set {
        None => return Some(vec![Command::ConfigureSet(spec.clone())]),
        Some(s) if s != spec => {
            tracing::error!(stored = ?s, ?spec, "the store holds a different set than configured");
            return None;
        }
        Some(_) => {}
    }
    let mut cmds = Vec::new();
    for al in allocs {
        if !a.state.allocs.contains_key(&al.id) {
            cmds.push(Command::RegisterAlloc {
                alloc: al.id.clone(),
                addr: al.addr.clone(),
            });
        }
        let unowned = |s: u32| a.state.sections[s as usize].owner.is_none();
        let mut s = al.first;
        while s < al.first + al.count {
            if !unowned(s) {
                s += 1;
                continue;
            }
            let start = s;
            while s < al.first + al.count && unowned(s) {
                s += 1;
            }
            cmds.push(Command::Assign {
                alloc: al.id.clone(),
                first: start,
                count: s - start,
            });
        }
    }
    Some(cmds)
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
        ] {
            let text = good.replacen(from, to, 1);
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
