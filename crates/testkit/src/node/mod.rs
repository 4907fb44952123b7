//! AllocSvr nodes started in-process on loopback against the fake store
//! ([`FakeStore`]), clients of their three planes, and small helpers
//! (calls, error kinds, waiting for a condition): what the AllocSvr's own
//! tests and benches share.

mod store;

pub use store::*;

use std::time::Duration;

use seqsvr_alloc::node::{AllocListeners, AllocNode, AllocNodeConfig};
use seqsvr_core::SectionId;
use seqsvr_proto::alloc_admin_client::AllocAdminClient;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::alloc_peer_client::AllocPeerClient;
use seqsvr_proto::{self as pb, detail_of, ErrorKind};
use tokio::net::TcpListener;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// A node's listeners on loopback and a config naming them.
pub async fn node_config(
    id: &str,
    store: &str,
    renew_ms: u64,
) -> (AllocNodeConfig, AllocListeners) {
    let bind = || async { TcpListener::bind("127.0.0.1:0").await.unwrap() };
    let l = AllocListeners {
        client: bind().await,
        peer: bind().await,
        admin: bind().await,
        metrics: None,
        resp: None,
        http: None,
    };
    let at = |t: &TcpListener| t.local_addr().unwrap().to_string();
    let cfg = AllocNodeConfig {
        id: id.into(),
        addr: at(&l.client),
        peer_addr: at(&l.peer),
        admin_addr: at(&l.admin),
        listen: None,
        peer_listen: None,
        admin_listen: None,
        store: vec![store.to_string()],
        tls: None,
        insecure: false,
        limits: None,
        metrics_addr: None,
        route_poll_ms: 50,
        renew_ms,
        wait_ms: 200,
        raise_ahead_fraction: 0.25,
        resp: None,
        forward: Default::default(),
        http_addr: None,
        adaptive_steps: None,
        max_names: seqsvr_alloc::names::DEFAULT_MAX_NAMES,
    };
    (cfg, l)
}

pub async fn start(id: &str, store: &str, renew_ms: u64) -> AllocNode {
    let (cfg, l) = node_config(id, store, renew_ms).await;
    tokio::time::timeout(Duration::from_secs(10), AllocNode::start(cfg, l))
        .await
        .expect("started in time")
        .expect("started")
}

pub async fn channel(addr: std::net::SocketAddr) -> Channel {
    seqsvr_net::client::endpoint(&addr.to_string(), None, Duration::from_secs(1))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

pub async fn client(n: &AllocNode) -> AllocClient<Channel> {
    AllocClient::new(channel(n.local_addr).await)
}

pub async fn admin(n: &AllocNode) -> AllocAdminClient<Channel> {
    AllocAdminClient::new(channel(n.admin_local_addr).await)
}

pub async fn peer(n: &AllocNode) -> AllocPeerClient<Channel> {
    AllocPeerClient::new(channel(n.peer_local_addr).await)
}

pub async fn next(c: &mut AllocClient<Channel>, uid: u64) -> Result<u64, Status> {
    c.next(pb::NextRequest {
        uid,
        count: 0,
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().seq)
}

pub async fn current(c: &mut AllocClient<Channel>, uid: u64) -> Result<u64, Status> {
    c.current(pb::CurrentRequest {
        uid,
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().seq)
}

/// A call that AllocSvr answers from its own memory or refuses, never
/// forwarding it to the owner (it carries the mark a forwarded call
/// carries; `docs/architecture/forwarding.md`): for tests asking what one
/// process itself would hand out, as a paused, fenced or replaced
/// AllocSvr.
pub fn from_memory<T>(msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert(seqsvr_client::FORWARDED_BY, "test".parse().unwrap());
    r
}

/// `next` answered by this AllocSvr alone (no forwarding).
pub async fn next_here(c: &mut AllocClient<Channel>, uid: u64) -> Result<u64, Status> {
    c.next(from_memory(pb::NextRequest {
        uid,
        count: 0,
        ..Default::default()
    }))
    .await
    .map(|r| r.into_inner().seq)
}

/// `current` answered by this AllocSvr alone (no forwarding).
pub async fn current_here(c: &mut AllocClient<Channel>, uid: u64) -> Result<u64, Status> {
    c.current(from_memory(pb::CurrentRequest {
        uid,
        ..Default::default()
    }))
    .await
    .map(|r| r.into_inner().seq)
}

/// The status's code and `ErrorDetail` kind.
pub fn kind(s: &Status) -> (Code, ErrorKind) {
    let d = detail_of(s).unwrap_or_else(|| panic!("no detail in {s:?}"));
    (s.code(), ErrorKind::try_from(d.kind).unwrap())
}

pub async fn handoff(n: &AllocNode, moves: &[(SectionId, &str)]) -> Vec<pb::MoveResult> {
    let moves = moves
        .iter()
        .map(|&(section, to)| pb::Move {
            section,
            to_alloc: to.into(),
        })
        .collect();
    admin(n)
        .await
        .handoff(pb::AllocHandoffRequest { moves })
        .await
        .unwrap()
        .into_inner()
        .results
}

/// Waits (up to 5 s) until `f` holds.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what}");
}
