//! A running AllocSvr: configuration, start-up, lease renewal, serving.
//!
//! Memory is never trusted (promise 1): the node registers its address with
//! the store and renews its lease; each granted renewal lists the sections
//! routed to it, and the node claims the ones it does not serve yet with a
//! take-over, which returns each section's previous ceiling — every uid
//! starts there (skip ahead). Sections no longer listed are dropped at once.
//!
//! The lease is counted from when the renewal was *sent*, on this process's
//! monotonic clock, so it always ends before the store's view of it; when
//! it runs out the service answers `LEASE_EXPIRED` until a renewal is
//! granted again (promise 3). A route loop publishes the route table for
//! clients and asks for an early renewal when it sees a section newly
//! routed here.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use seqsvr_core::{AllocId, SectionId};
use seqsvr_proto::alloc_server::AllocServer;
use seqsvr_store::client::{route_from_pb, StoreClient};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

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
        if self.route_poll_ms == 0 || self.renew_ms == 0 {
            return Err("route_poll_ms and renew_ms must be positive".into());
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
    /// Server, raiser, renewal and route tasks.
    tasks: Vec<JoinHandle<()>>,
}

/// What the background tasks share.
struct Ctx {
    shared: Arc<Shared>,
    /// Claims sections (take-over) for this node.
    raiser: Raiser<StoreCeilings>,
    store: StoreClient,
    me: AllocId,
    /// Wakes the renewal loop early.
    renew_now: Notify,
    renew_every: Duration,
}

impl AllocNode {
    /// Connects to the store, renews its lease, claims its sections and
    /// serves on `listener`. Waits (retrying) until the store answers.
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
            route_version: AtomicU64::new(routes.version),
            routes: RwLock::new(Arc::new(routes)),
            wait: Duration::from_millis(cfg.wait_ms),
            lease: crate::lease::Lease::new(Instant::now()),
            draining: AtomicBool::new(false),
            id: cfg.id.clone(),
            addr: cfg.addr.clone(),
            store: store.clone(),
        });
        let ceilings = Arc::new(StoreCeilings {
            store: store.clone(),
            alloc: cfg.id.clone(),
        });
        let ctx = Arc::new(Ctx {
            shared: shared.clone(),
            raiser: Raiser::new(alloc.clone(), ceilings.clone(), RaiserConfig::default()),
            store: store
                .clone()
                .with_deadline(Duration::from_millis(cfg.renew_ms.max(500))),
            me: cfg.id.clone(),
            renew_now: Notify::new(),
            renew_every: Duration::from_millis(cfg.renew_ms),
        });
        // A first lease and our sections before serving anything.
        renew_once(&ctx).await;
        let local_addr = listener.local_addr()?;
        let poll = Duration::from_millis(cfg.route_poll_ms);
        let raiser = Raiser::new(alloc.clone(), ceilings, RaiserConfig::default());
        let tasks = vec![
            tokio::spawn(serve(
                AllocService {
                    shared: shared.clone(),
                },
                listener,
            )),
            tokio::spawn(renew_loop(ctx.clone())),
            tokio::spawn(route_loop(ctx, poll)),
            tokio::spawn(raiser.run(std::future::pending())),
        ];
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

/// The listener's connections with Nagle's algorithm off. tonic ignores
/// `Server::tcp_nodelay` for `serve_with_incoming`, and small replies held
/// back for a delayed ACK cost ~40 ms at the tail.
fn nodelay(listener: TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

async fn serve(svc: AllocService, listener: TcpListener) {
    let res = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(AllocServer::new(svc))
        .serve_with_incoming(nodelay(listener))
        .await;
    if let Err(e) = res {
        tracing::error!("alloc server stopped: {e}");
    }
}

/// Renews the lease every `renew_every` (or sooner when asked).
async fn renew_loop(ctx: Arc<Ctx>) {
    loop {
        let next = Instant::now() + ctx.renew_every;
        renew_once(&ctx).await;
        let _ = tokio::time::timeout_at(next.into(), ctx.renew_now.notified()).await;
    }
}

/// One renewal: extend the lease from the send time, then serve exactly
/// the sections the grant lists.
async fn renew_once(ctx: &Ctx) {
    let sent = Instant::now();
    let reply = match ctx.store.renew(&ctx.me).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(
                lease_left_ms = ctx.shared.lease_left_ms(),
                "lease renewal failed: {e}"
            );
            return;
        }
    };
    let alloc = ctx.raiser.allocator();
    let mut mine = vec![false; alloc.spec().section_count() as usize];
    for run in &reply.sections {
        for s in run.first_section..run.first_section + run.count {
            if let Some(m) = mine.get_mut(s as usize) {
                *m = true;
            }
        }
    }
    // Drop what is no longer ours *before* extending the lease: a request
    // admitted by the new lease must not find a section moved away while
    // our lease had lapsed (promise 3). And if the lease *had* lapsed, drop
    // everything: a section can only have moved while our lease was gone,
    // and one that moved away and back since carries a newer epoch and
    // numbers we never saw — the listed ones are taken over again below
    // (skip ahead, promise 1). Found by the seeded simulation (seed 779).
    let lapsed = !ctx.shared.lease.valid_at(Instant::now());
    for s in alloc.served_sections() {
        if lapsed || !mine[s as usize] {
            tracing::info!(section = s, "section no longer routed here: dropping it");
            alloc.drop_section(s);
        }
    }
    ctx.shared
        .lease
        .granted(sent, Duration::from_millis(reply.lease_ms));
    ctx.shared.draining.store(reply.draining, Ordering::Relaxed);
    let served = alloc.served_sections();
    let missing: Vec<SectionId> = (0..mine.len() as SectionId)
        .filter(|s| mine[*s as usize] && served.binary_search(s).is_err())
        .collect();
    for (first, count) in runs(&missing) {
        match ctx.raiser.take_over(first, count).await {
            Ok(g) => tracing::info!(
                first,
                count,
                epoch = g.first().map(|g| g.epoch),
                "took over sections"
            ),
            Err(e) => tracing::warn!(first, count, "take-over failed, will retry: {e}"),
        }
    }
    if reply.route_version > ctx.shared.route_version.load(Ordering::Acquire) {
        refresh_routes(ctx).await;
    }
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
    let t = match ctx.store.routes().await {
        Ok(t) => t,
        Err(e) => return tracing::debug!("route refresh failed: {e}"),
    };
    let alloc = ctx.raiser.allocator();
    let served = alloc.served_sections();
    let mut gained = false;
    for s in 0..t.set.section_count() {
        let mine = t.entry_for_section(s).is_some_and(|e| e.alloc == ctx.me);
        let serving = served.binary_search(&s).is_ok();
        if serving && !mine {
            alloc.drop_section(s);
        }
        gained |= mine && !serving;
    }
    if gained {
        ctx.renew_now.notify_one();
    }
    if t.version >= ctx.shared.route_version.load(Ordering::Acquire) {
        ctx.shared.set_routes(seqsvr_store::service::route_pb(&t));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_configs_parse() {
        for text in [
            include_str!("../../../config/alloc-1.toml"),
            include_str!("../../../config/alloc-2.toml"),
        ] {
            let cfg = AllocNodeConfig::from_toml(text).unwrap();
            assert_eq!(cfg.store.len(), 3);
        }
        let bad =
            include_str!("../../../config/alloc-1.toml").replace("renew_ms = 1000", "renew_ms = 0");
        assert!(AllocNodeConfig::from_toml(&bad).is_err());
        assert!(AllocNodeConfig::from_toml("id = 1").is_err());
    }

    #[test]
    fn runs_group_consecutive_sections() {
        assert_eq!(runs(&[0, 1, 2, 5, 7, 8]), vec![(0, 3), (5, 1), (7, 2)]);
        assert!(runs(&[]).is_empty());
    }
}
