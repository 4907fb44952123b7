//! A running AllocSvr: configuration, start-up, route sync, serving.
//!
//! Start-up never trusts memory (promise 1): the node registers its address
//! with the store, reads the route table, and claims the sections routed to
//! it with a take-over, which returns each section's previous ceiling; every
//! uid starts there (skip ahead). Afterwards a sync loop re-reads the route
//! table: sections newly routed here are taken over, sections routed away
//! are dropped at once.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use seqsvr_core::{AllocId, SectionId};
use seqsvr_proto::alloc_server::AllocServer;
use seqsvr_store::client::{route_from_pb, StoreClient};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;

use crate::allocator::{AllocConfig, Allocator};
use crate::raiser::{Raiser, RaiserConfig};
use crate::service::{AllocService, Shared};
use crate::store_link::StoreCeilings;

/// An AllocSvr's configuration (one TOML file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocNodeConfig {
    /// This AllocSvr's id (as the store's route table names it).
    pub id: AllocId,
    /// Its client-facing `host:port`, as clients should dial it.
    pub addr: String,
    /// Address to bind, if not `addr`.
    #[serde(default)]
    pub listen: Option<String>,
    /// The set's store replicas (`host:port`).
    pub store: Vec<String>,
    /// How often the route table is re-read from the store, in ms.
    #[serde(default = "default_route_poll_ms")]
    pub route_poll_ms: u64,
    /// How long a call may wait for an exhausted section's raise, in ms.
    #[serde(default = "default_wait_ms")]
    pub wait_ms: u64,
    /// Raise a section ahead of need when less than this fraction of a
    /// step is left (0.0–1.0).
    #[serde(default = "default_fraction")]
    pub raise_ahead_fraction: f64,
}

fn default_route_poll_ms() -> u64 {
    500
}
fn default_wait_ms() -> u64 {
    1000
}
fn default_fraction() -> f64 {
    0.25
}

impl AllocNodeConfig {
    /// Parses and checks a TOML config.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let cfg: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks for mistakes that would otherwise surface late.
    pub fn validate(&self) -> Result<(), String> {
        if self.id.is_empty() || self.addr.is_empty() {
            return Err("id and addr must be set".into());
        }
        if self.store.is_empty() {
            return Err("no store addresses".into());
        }
        if !(0.0..=1.0).contains(&self.raise_ahead_fraction) {
            return Err("raise_ahead_fraction must be within 0.0..=1.0".into());
        }
        if self.route_poll_ms == 0 {
            return Err("route_poll_ms must be positive".into());
        }
        Ok(())
    }
}

/// A running AllocSvr.
pub struct AllocNode {
    /// State shared with the gRPC service.
    pub shared: Arc<Shared>,
    /// The address actually bound.
    pub local_addr: SocketAddr,
    /// Server, raiser and route-sync tasks.
    tasks: Vec<JoinHandle<()>>,
}

impl AllocNode {
    /// Connects to the store, claims this node's sections and serves on
    /// `listener`. Waits (retrying) until the store answers.
    pub async fn start(cfg: AllocNodeConfig, listener: TcpListener) -> anyhow::Result<AllocNode> {
        cfg.validate().map_err(anyhow::Error::msg)?;
        let store = StoreClient::new(&cfg.store)?;
        let routes = loop {
            match register_and_read(&store, &cfg).await {
                Ok(r) => break r,
                Err(e) => {
                    tracing::warn!("store not ready, retrying: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        let set = route_from_pb(&routes)?.set;
        let alloc_cfg = AllocConfig {
            raise_ahead_fraction: cfg.raise_ahead_fraction,
        };
        let alloc = Arc::new(Allocator::new(set, &alloc_cfg)?);
        let shared = Arc::new(Shared {
            alloc: alloc.clone(),
            route_version: AtomicU64::new(0),
            routes: RwLock::new(Arc::new(routes.clone())),
            wait: Duration::from_millis(cfg.wait_ms),
        });
        let ceilings = Arc::new(StoreCeilings {
            store: store.clone(),
            alloc: cfg.id.clone(),
        });
        let raiser = Raiser::new(alloc.clone(), ceilings.clone(), RaiserConfig::default());
        // Claim our sections before serving anything (skip ahead).
        sync_routes(&raiser, &shared, &cfg.id, routes).await;
        let local_addr = listener.local_addr()?;
        let mut tasks = vec![tokio::spawn(serve(
            AllocService {
                shared: shared.clone(),
            },
            listener,
        ))];
        let poll = Duration::from_millis(cfg.route_poll_ms);
        let sync_raiser = Raiser::new(alloc.clone(), ceilings, RaiserConfig::default());
        tasks.push(tokio::spawn(route_loop(
            sync_raiser,
            shared.clone(),
            store,
            cfg.id.clone(),
            poll,
        )));
        tasks.push(tokio::spawn(raiser.run(std::future::pending())));
        tracing::info!(id = %cfg.id, %local_addr, sections = alloc.served_sections().len(), "alloc started");
        Ok(AllocNode {
            shared,
            local_addr,
            tasks,
        })
    }

    /// Stops serving.
    pub fn shutdown(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

async fn register_and_read(
    store: &StoreClient,
    cfg: &AllocNodeConfig,
) -> anyhow::Result<seqsvr_proto::RouteTable> {
    store.register_alloc(&cfg.id, &cfg.addr).await?;
    let t = store.routes().await?;
    Ok(seqsvr_store::service::route_pb(&t))
}

async fn serve(svc: AllocService, listener: TcpListener) {
    let res = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(AllocServer::new(svc))
        .serve_with_incoming(TcpListenerStream::new(listener))
        .await;
    if let Err(e) = res {
        tracing::error!("alloc server stopped: {e}");
    }
}

/// Re-reads the route table every `poll` and acts on changes.
async fn route_loop(
    raiser: Raiser<StoreCeilings>,
    shared: Arc<Shared>,
    store: StoreClient,
    me: AllocId,
    poll: Duration,
) {
    let mut tick = tokio::time::interval(poll);
    loop {
        tick.tick().await;
        match store.routes().await {
            Ok(t) => sync_routes(&raiser, &shared, &me, seqsvr_store::service::route_pb(&t)).await,
            Err(e) => tracing::debug!("route refresh failed: {e}"),
        }
    }
}

/// Serves exactly the sections `routes` gives to `me`: drops the others at
/// once, takes over the missing ones (skip ahead), then publishes the table.
async fn sync_routes(
    raiser: &Raiser<StoreCeilings>,
    shared: &Shared,
    me: &str,
    routes: seqsvr_proto::RouteTable,
) {
    let alloc = raiser.allocator();
    let mut mine = vec![false; alloc.spec().section_count() as usize];
    for e in routes.entries.iter().filter(|e| e.alloc_id == me) {
        for s in e.first_section..e.first_section + e.count {
            if let Some(m) = mine.get_mut(s as usize) {
                *m = true;
            }
        }
    }
    for s in alloc.served_sections() {
        if !mine[s as usize] {
            tracing::info!(section = s, "section routed away: dropping it");
            alloc.drop_section(s);
        }
    }
    let served = alloc.served_sections();
    let missing: Vec<SectionId> = (0..mine.len() as SectionId)
        .filter(|s| mine[*s as usize] && served.binary_search(s).is_err())
        .collect();
    for (first, count) in runs(&missing) {
        match raiser.take_over(first, count).await {
            Ok(g) => tracing::info!(
                first,
                count,
                epoch = g.first().map(|g| g.epoch),
                "took over sections"
            ),
            Err(e) => tracing::warn!(first, count, "take-over failed, will retry: {e}"),
        }
    }
    if routes.version
        >= shared
            .route_version
            .load(std::sync::atomic::Ordering::Acquire)
    {
        shared.set_routes(routes);
    }
}

/// Consecutive runs `(first, count)` of sorted section ids.
fn runs(sections: &[SectionId]) -> Vec<(SectionId, u32)> {
    let mut out: Vec<(SectionId, u32)> = Vec::new();
    for &s in sections {
        match out.last_mut() {
            Some((f, c)) if *f + *c == s => *c += 1,
            _ => out.push((s, 1)),
        }
    }
    out
}
