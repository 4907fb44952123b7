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

/// Turns the Redis-protocol door on: bound as `door` says, in `cfg` and
/// among the listeners.
pub async fn open_door(
    cfg: &mut AllocNodeConfig,
    l: &mut AllocListeners,
    door: seqsvr_alloc::node::RespSection,
) {
    l.resp = Some(TcpListener::bind(&door.addr).await.unwrap());
    cfg.resp = Some(door);
}

/// Turns the HTTP API on, on a free loopback port.
pub async fn open_http(l: &mut AllocListeners) {
    l.http = Some(TcpListener::bind("127.0.0.1:0").await.unwrap());
}

/// Starts a node on `l` with `cfg` (within 10 s).
pub async fn start_with(cfg: AllocNodeConfig, l: AllocListeners) -> AllocNode {
    tokio::time::timeout(Duration::from_secs(10), AllocNode::start(cfg, l))
        .await
        .expect("started in time")
        .expect("started")
}

/// Starts node `id` against the store at `store`, renewing every
/// `renew_ms`.
pub async fn start(id: &str, store: &str, renew_ms: u64) -> AllocNode {
    let (cfg, l) = node_config(id, store, renew_ms).await;
    start_with(cfg, l).await
}

/// `from` hands `sections` over to `to` (named `to_id`); returns once `to`
/// serves them and both hold the store's routes after the moves.
pub async fn hand_over(
    store: &FakeStore,
    from: &AllocNode,
    (to, to_id): (&AllocNode, &str),
    sections: &[SectionId],
) {
    let moves: Vec<(SectionId, &str)> = sections.iter().map(|&s| (s, to_id)).collect();
    let results = handoff(from, &moves).await;
    assert!(results.iter().all(|r| r.ok), "{results:?}");
    eventually(&format!("{to_id} serves {sections:?}"), || {
        sections.iter().all(|&s| to.shared.alloc.is_serving(s))
    })
    .await;
    let version = store.st().route_version;
    eventually("both hold the new routes", || {
        from.shared.routes().table.version >= version && to.shared.routes().table.version >= version
    })
    .await;
}

/// a1 (started on `store`, which routes it every section) serving the
/// HTTP API and sections 0–1, a2 serving 2–3 (handed over); returns them
/// and a1's HTTP address.
pub async fn http_pair(store: &FakeStore) -> (AllocNode, AllocNode, String) {
    let addr = store.clone().serve().await;
    let (cfg, mut l) = node_config("a1", &addr, 50).await;
    open_http(&mut l).await;
    let a1 = start_with(cfg, l).await;
    let a2 = start("a2", &addr, 50).await;
    hand_over(store, &a1, (&a2, "a2"), &[2, 3]).await;
    let http = a1.http_local_addr.expect("the HTTP API is served");
    (a1, a2, http.to_string())
}

/// Sends `req` raw to the HTTP listener at `addr` on a fresh connection
/// and reads until it closes (at most 5 s); returns (status, head, body).
pub async fn http_raw(addr: &str, req: &[u8]) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    http_answer(&out)
}

/// An HTTP answer read whole, taken apart: (status, head, body); status 0
/// if there is none.
pub fn http_answer(out: &[u8]) -> (u16, String, String) {
    let text = String::from_utf8_lossy(out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// `method path` on a fresh connection to the HTTP listener at `addr`:
/// (status, body).
pub async fn http_call(addr: &str, method: &str, path: &str) -> (u16, String) {
    let req = format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let (status, _, body) = http_raw(addr, req.as_bytes()).await;
    (status, body)
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
