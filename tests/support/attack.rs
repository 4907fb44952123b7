//! What the fencing and adversary tests share: the ways an attacker, a
//! ghost or an operator's mistake can reach a running cluster, built from
//! the project's own generated gRPC clients used as plain clients.
//!
//! - the set every test serves, its workload and the checks of what clients
//!   received ([`set`], [`start_load`], [`burst`], [`reads_below`]);
//! - raw calls: [`channel`] (with or without a certificate), [`Retarget`]
//!   (any message to any method), [`kind`] and [`Outcome`];
//! - a cluster of real processes with TLS from a development PKI and
//!   per-replica metrics ([`Cluster`]), for what the plaintext harness
//!   cannot do;
//! - floods: a hand-written HTTP/2 client that opens streams and never
//!   finishes them ([`H2Flood`]), idle connections, and a process's RSS;
//! - running the binary to completion ([`run_seqsvr`]).
//!
//! Include with `#[path = "support/attack.rs"] mod attack;` after
//! `mod support;`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use seqsvr_alloc::node::AllocNodeConfig;
use seqsvr_client::{ClientOptions, SeqClient};
use seqsvr_core::checker::Observation;
use seqsvr_core::SetSpec;
use seqsvr_net::{ClientTls, DevPki, Leaf, Role};
use seqsvr_proto::{detail_of, ErrorKind};
use seqsvr_store::node::{InitialAlloc, LeaseSection, Member};
use seqsvr_store::StoreConfig;
use seqsvr_store_api::client::connector;
use seqsvr_store_api::{AdminClient, PeerClient, ReadClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::codegen::http;
use tonic::transport::Channel;

use crate::support::{free_port, logs_in, Proc, Workload, TEST_RENEW_MS};

// ---------------------------------------------------------------------
// The set and the workload
// ---------------------------------------------------------------------

/// Sections of [`set`].
pub const SECTIONS: u32 = 8;
/// Uids per section that the workload uses.
pub const UIDS_PER_SECTION: u64 = 16;
/// Step of [`set`].
pub const STEP: u64 = 500;

/// 8 sections of 1000 uids, step 500 (what `SetCluster::start(set(), 2)`
/// splits 4 + 4 between alloc-1 and alloc-2).
pub fn set() -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: SECTIONS as u64 * 1000,
        section_size: 1000,
        step: STEP,
    }
}

/// The `k`-th workload uid of `section`.
pub fn uid(section: u32, k: u64) -> u64 {
    section as u64 * 1000 + k
}

/// Every uid the workload uses in `sections`.
pub fn uids_of(sections: impl IntoIterator<Item = u32>) -> Vec<u64> {
    sections
        .into_iter()
        .flat_map(|s| (0..UIDS_PER_SECTION).map(move |k| uid(s, k)))
        .collect()
}

/// `callers` tasks calling `next` in a closed loop on the workload's uids
/// of every section (through the client library, as an IM backend would).
pub fn start_load(c: &SeqClient, callers: u64) -> Workload {
    let mut w = Workload::new();
    let (obs, errors, stop) = (w.obs.clone(), w.errors.clone(), w.stop.clone());
    w.tasks = (0..callers)
        .map(|k| {
            let (c, obs, errors, stop) = (c.clone(), obs.clone(), errors.clone(), stop.clone());
            tokio::spawn(async move {
                let mut x = 0x2545_f491_4f6c_dd1du64 ^ (k + 1);
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let uid = uid((x % SECTIONS as u64) as u32, (x >> 8) % UIDS_PER_SECTION);
                    let start = Instant::now();
                    match c.next(uid).await {
                        Ok(seq) => obs.lock().unwrap().push(Observation {
                            uid,
                            seq,
                            start,
                            end: Instant::now(),
                        }),
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
            })
        })
        .collect();
    w
}

/// A burst after an attack: every workload uid of every section `rounds`
/// times, 8 callers at once. Failed calls are counted, not fatal.
pub async fn burst(c: &SeqClient, rounds: usize) -> (Vec<Observation>, u64) {
    let uids = uids_of(0..SECTIONS);
    let tasks: Vec<_> = (0..8)
        .map(|k| {
            let c = c.clone();
            let mine: Vec<u64> = uids.iter().copied().skip(k).step_by(8).collect();
            tokio::spawn(async move {
                let (mut got, mut failed) = (Vec::new(), 0u64);
                for _ in 0..rounds {
                    for &uid in &mine {
                        let start = Instant::now();
                        match c.next(uid).await {
                            Ok(seq) => got.push(Observation {
                                uid,
                                seq,
                                start,
                                end: Instant::now(),
                            }),
                            Err(_) => failed += 1,
                        }
                    }
                }
                (got, failed)
            })
        })
        .collect();
    let (mut all, mut failed) = (Vec::new(), 0);
    for t in tasks {
        let (g, f) = t.await.unwrap();
        all.extend(g);
        failed += f;
    }
    (all, failed)
}

/// The checker's verdict without failing: (regressions, repeats).
pub fn violations(obs: &[Observation]) -> (usize, usize) {
    let r = seqsvr_core::checker::check(obs);
    (r.regressions.len(), r.repeats.len())
}

/// A `current` read: the uid, what it answered, and when it was sent.
#[derive(Debug, Clone, Copy)]
pub struct Read {
    /// The uid read.
    pub uid: u64,
    /// The number it answered.
    pub seq: u64,
    /// When the call was sent.
    pub start: Instant,
}

/// Reads that answered below a number some `next` call had already
/// returned before the read was sent (promise 1 for `current`).
pub fn reads_below(obs: &[Observation], reads: &[Read]) -> Vec<String> {
    reads
        .iter()
        .filter_map(|r| {
            let before = obs
                .iter()
                .filter(|o| o.uid == r.uid && o.end < r.start)
                .map(|o| o.seq)
                .max()?;
            (r.seq < before).then(|| {
                format!(
                    "uid {}: current answered {} after {before} was handed out",
                    r.uid, r.seq
                )
            })
        })
        .collect()
}

/// The longest time after `at` that a section in `sections` went without
/// a successful `next` (measured up to `until`).
pub fn outage_after(
    obs: &[Observation],
    at: Instant,
    until: Instant,
    sections: &[u32],
) -> Duration {
    let set = set();
    sections
        .iter()
        .map(|&s| {
            let mut ends: Vec<Instant> = obs
                .iter()
                .filter(|o| set.section_of(o.uid) == Some(s) && o.end > at && o.end <= until)
                .map(|o| o.end)
                .collect();
            ends.sort();
            ends.push(until);
            let mut prev = at;
            let mut worst = Duration::ZERO;
            for e in ends {
                worst = worst.max(e - prev);
                prev = e;
            }
            worst
        })
        .max()
        .unwrap_or_default()
}

// ---------------------------------------------------------------------
// Raw calls
// ---------------------------------------------------------------------

/// A lazily connecting channel to `addr`, with TLS if given (the identity
/// in `tls`, if any, is presented when the server asks). Every call on it
/// gives up after `timeout`.
pub fn channel(addr: &str, tls: Option<&ClientTls>, timeout: Duration) -> Channel {
    seqsvr_net::client::endpoint(addr, tls, Duration::from_millis(1000))
        .unwrap()
        .timeout(timeout)
        .connect_lazy()
}

/// The seqsvr error kind a status carries, if any.
pub fn kind(st: &tonic::Status) -> Option<ErrorKind> {
    detail_of(st).and_then(|d| ErrorKind::try_from(d.kind).ok())
}

/// What one raw call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered OK.
    Ok,
    /// The server answered this status (and this seqsvr kind, if any).
    Status(tonic::Code, Option<ErrorKind>),
    /// No answer from a server: the connection or the TLS handshake
    /// failed, or the call timed out on the transport.
    Transport(String),
}

impl Outcome {
    /// Classifies a call's result. A status without a seqsvr detail that
    /// tonic made up on the client side (unavailable, unknown or cancelled
    /// transport errors, an HTTP/2 protocol error from reading what is not
    /// HTTP/2) means no server answered the call.
    pub fn of<T>(r: &Result<T, tonic::Status>) -> Outcome {
        match r {
            Ok(_) => Outcome::Ok,
            Err(st) => {
                let k = kind(st);
                let transport = k.is_none()
                    && (matches!(
                        st.code(),
                        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
                    ) || (st.code() == tonic::Code::Internal
                        && st.message().starts_with("h2 protocol error")));
                if transport {
                    use std::error::Error as _;
                    let mut why = format!("{:?}: {}", st.code(), st.message());
                    let mut e: Option<&dyn std::error::Error> = st.source();
                    while let Some(x) = e {
                        why += &format!(" <- {x}");
                        e = x.source();
                    }
                    Outcome::Transport(why)
                } else {
                    Outcome::Status(st.code(), k)
                }
            }
        }
    }

    /// A short name for tables.
    pub fn short(&self) -> String {
        match self {
            Outcome::Ok => "OK".into(),
            Outcome::Status(c, Some(k)) => format!("{c:?}/{}", k.as_str_name()),
            Outcome::Status(c, None) => format!("{c:?}"),
            Outcome::Transport(_) => "no answer (transport)".into(),
        }
    }
}

/// A channel whose every call goes to `path` instead of the method the
/// generated client names: sends any message to any method (the server
/// sees a body it decodes as that method's request).
#[derive(Clone)]
pub struct Retarget {
    /// The underlying channel.
    pub inner: Channel,
    /// The gRPC path every call goes to, e.g. `/seqsvr.v1.StoreRead/GetRoutes`.
    pub path: &'static str,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for Retarget {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tonic::codegen::Service::<http::Request<tonic::body::Body>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut req: http::Request<tonic::body::Body>) -> Self::Future {
        let mut parts = req.uri().clone().into_parts();
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static(self.path));
        *req.uri_mut() = http::Uri::from_parts(parts).unwrap();
        let fut = tonic::codegen::Service::call(&mut self.inner, req);
        Box::pin(fut)
    }
}

/// Calls `addr` directly (not through the client library) with `next` for
/// `uids`, round after round until `until`; returns every number it
/// handed out, as observations for the checker.
pub async fn direct_next(
    addr: &str,
    tls: Option<&ClientTls>,
    uids: &[u64],
    until: Instant,
) -> Vec<Observation> {
    let ch = channel(addr, tls, Duration::from_millis(500));
    let mut c = seqsvr_proto::alloc_client::AllocClient::new(ch);
    let mut got = Vec::new();
    while Instant::now() < until {
        for &uid in uids {
            if Instant::now() >= until {
                break;
            }
            let start = Instant::now();
            if let Ok(r) = c.next(seqsvr_proto::NextRequest { uid }).await {
                got.push(Observation {
                    uid,
                    seq: r.into_inner().seq,
                    start,
                    end: Instant::now(),
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    got
}

/// How the store leader sees AllocSvr `id` (addresses, incarnation, lease).
pub async fn alloc_lease(read: &ReadClient, id: &str) -> seqsvr_proto::AllocLease {
    let start = Instant::now();
    loop {
        if let Some(st) = read.leader_status().await {
            if let Some(a) = st.allocs.into_iter().find(|a| a.alloc_id == id) {
                return a;
            }
        }
        assert!(
            // Long: status calls time out on a loaded machine.
            start.elapsed() < Duration::from_secs(60),
            "the store leader does not know {id}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `what` holds, polling every 50 ms, for at most `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < within, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------
// A cluster with TLS and metrics
// ---------------------------------------------------------------------

/// Which store replica the AllocSvrs dial first (they stay with the one
/// that last answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOrder {
    /// Replica order, as configured.
    AsConfigured,
    /// The leader first.
    LeaderFirst,
    /// A follower first.
    FollowerFirst,
}

/// How to start a [`Cluster`].
#[derive(Debug, Clone)]
pub struct Options {
    /// TLS on every plane of every process, from a development PKI.
    pub tls: bool,
    /// The store's initial lease terms.
    pub lease: LeaseSection,
    /// How many AllocSvrs (sections split evenly, alloc-1 first).
    pub allocs: usize,
    /// Which replica the AllocSvrs dial first.
    pub order: StoreOrder,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tls: false,
            lease: crate::support::test_lease(),
            allocs: 2,
            order: StoreOrder::AsConfigured,
        }
    }
}

/// One server process and its three planes' addresses.
pub struct Node {
    /// `store-1`, `alloc-2`…
    pub name: String,
    /// The process.
    pub proc: Proc,
    /// Client plane.
    pub client: String,
    /// Peer plane.
    pub peer: String,
    /// Admin plane.
    pub admin: String,
    /// Prometheus metrics (store replicas only).
    pub metrics: Option<String>,
}

/// 3 store replicas and some AllocSvrs as real processes on loopback, with
/// TLS if asked, started store first (so the AllocSvrs' store order can
/// name the leader or a follower first).
pub struct Cluster {
    /// Data, configs, logs, PKI.
    pub dir: tempfile::TempDir,
    /// The PKI (with TLS): `store-<n>`, `alloc-<n>`, operator `ops`, and
    /// `store-9` (a store certificate of a node id that is not a member).
    pub pki: Option<DevPki>,
    /// Another CA's PKI with `alloc-1` and `ops` (with TLS).
    pub rogue: Option<DevPki>,
    /// The set.
    pub set: SetSpec,
    /// Store replicas (id = index + 1).
    pub stores: Vec<Node>,
    /// AllocSvrs (`alloc-1` is index 0).
    pub allocs: Vec<Node>,
}

fn addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

impl Cluster {
    /// Starts the store group, waits for its leader, then starts the
    /// AllocSvrs and waits until every section is served.
    pub async fn start(opts: Options) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let set = set();
        let n_allocs = opts.allocs;
        let (pki, rogue) = if opts.tls {
            let mut leaves: Vec<Leaf> = (1..=3)
                .map(|i| Leaf::new(format!("store-{i}"), Role::Store(i)))
                .collect();
            for i in 1..=n_allocs {
                let id = format!("alloc-{i}");
                leaves.push(Leaf::new(id.clone(), Role::Alloc(id)));
            }
            leaves.push(Leaf::new("ops", Role::Operator("ops".into())));
            leaves.push(Leaf::new("store-9", Role::Store(9)));
            let pki = DevPki::generate(&dir.path().join("pki"), &leaves, false).unwrap();
            let rogue = DevPki::generate(
                &dir.path().join("rogue"),
                &[
                    Leaf::new("alloc-1", Role::Alloc("alloc-1".into())),
                    Leaf::new("ops", Role::Operator("ops".into())),
                ],
                false,
            )
            .unwrap();
            (Some(pki), Some(rogue))
        } else {
            (None, None)
        };
        let sections = set.section_count();
        let share = sections / n_allocs as u32;
        let initial: Vec<InitialAlloc> = (0..n_allocs)
            .map(|i| InitialAlloc {
                id: format!("alloc-{}", i + 1),
                first: i as u32 * share,
                count: if i + 1 == n_allocs {
                    sections - i as u32 * share
                } else {
                    share
                },
            })
            .collect();
        let peers: Vec<String> = (0..3).map(|_| addr()).collect();
        let members: Vec<Member> = peers
            .iter()
            .enumerate()
            .map(|(i, a)| Member {
                id: i as u64 + 1,
                addr: a.clone(),
            })
            .collect();
        let mut stores = Vec::new();
        for id in 1..=3u64 {
            let name = format!("store-{id}");
            let (client, admin, metrics) = (addr(), addr(), addr());
            // Built as TOML, naming only the keys set here: keys added to
            // the config later keep their defaults.
            let mut t = toml::Table::new();
            t.insert("id".into(), (id as i64).into());
            t.insert("data_dir".into(), toml_path(&dir.path().join(&name)).into());
            t.insert("client_addr".into(), client.clone().into());
            t.insert("admin_addr".into(), admin.clone().into());
            t.insert("metrics_addr".into(), metrics.clone().into());
            t.insert("members".into(), toml::Value::try_from(&members).unwrap());
            t.insert("set".into(), toml::Value::try_from(&set).unwrap());
            t.insert("lease".into(), toml::Value::try_from(&opts.lease).unwrap());
            t.insert("allocs".into(), toml::Value::try_from(&initial).unwrap());
            if let Some(p) = &pki {
                t.insert(
                    "tls".into(),
                    toml::Value::try_from(p.tls_config(&name)).unwrap(),
                );
            }
            let text = toml::to_string(&t).unwrap();
            StoreConfig::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            let path = dir.path().join(format!("{name}.toml"));
            std::fs::write(&path, text).unwrap();
            let proc = Proc::start(
                &name,
                vec![
                    "store".into(),
                    "--config".into(),
                    path.display().to_string(),
                ],
                dir.path().join(format!("{name}.log")),
            );
            stores.push(Node {
                name,
                proc,
                client,
                peer: peers[id as usize - 1].clone(),
                admin,
                metrics: Some(metrics),
            });
        }
        let mut c = Cluster {
            dir,
            pki,
            rogue,
            set,
            stores,
            allocs: Vec::new(),
        };
        let leader = c.wait_leader(Duration::from_secs(30)).await;
        let mut order: Vec<usize> = (0..3).collect();
        match opts.order {
            StoreOrder::AsConfigured => {}
            StoreOrder::LeaderFirst => order.sort_by_key(|&i| i != leader),
            StoreOrder::FollowerFirst => order.sort_by_key(|&i| i == leader),
        }
        let store_list: Vec<String> = order.iter().map(|&i| c.stores[i].peer.clone()).collect();
        for i in 1..=n_allocs {
            let node = c.start_alloc(&format!("alloc-{i}"), &store_list, "");
            c.allocs.push(node);
        }
        c
    }

    /// Starts an AllocSvr process named `id` (a second one with an
    /// existing id is a twin), dialing `store` in that order; `suffix`
    /// tells its files apart.
    pub fn start_alloc(&self, id: &str, store: &[String], suffix: &str) -> Node {
        let name = format!("{id}{suffix}");
        let (client, peer, admin) = (addr(), addr(), addr());
        let mut t = toml::Table::new();
        t.insert("id".into(), id.into());
        t.insert("addr".into(), client.clone().into());
        t.insert("peer_addr".into(), peer.clone().into());
        t.insert("admin_addr".into(), admin.clone().into());
        t.insert("store".into(), toml::Value::try_from(store).unwrap());
        t.insert("route_poll_ms".into(), 200.into());
        t.insert("renew_ms".into(), (TEST_RENEW_MS as i64).into());
        t.insert("wait_ms".into(), 500.into());
        if let Some(p) = &self.pki {
            t.insert(
                "tls".into(),
                toml::Value::try_from(p.tls_config(id)).unwrap(),
            );
        }
        let text = toml::to_string(&t).unwrap();
        AllocNodeConfig::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        let path = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let proc = Proc::start(
            &name,
            vec![
                "alloc".into(),
                "--config".into(),
                path.display().to_string(),
            ],
            self.dir.path().join(format!("{name}.log")),
        );
        Node {
            name,
            proc,
            client,
            peer,
            admin,
            metrics: None,
        }
    }

    /// Server-only TLS (the client plane), if the cluster runs TLS.
    pub fn server_only(&self) -> Option<ClientTls> {
        self.pki
            .as_ref()
            .map(|p| ClientTls::server_only(&p.ca_path()).unwrap())
    }

    /// TLS presenting the certificate `name` of the cluster's PKI.
    pub fn identity(&self, name: &str) -> ClientTls {
        self.pki
            .as_ref()
            .expect("a TLS cluster")
            .tls_config(name)
            .client()
            .unwrap()
    }

    /// TLS presenting the rogue CA's certificate `name` (the server is
    /// still checked against the cluster's CA).
    pub fn foreign(&self, name: &str) -> ClientTls {
        let rogue = self.rogue.as_ref().expect("a TLS cluster");
        let mut cfg = rogue.tls_config(name);
        cfg.ca = self.pki.as_ref().unwrap().ca_path();
        cfg.client().unwrap()
    }

    fn addrs(nodes: &[Node], f: impl Fn(&Node) -> &String) -> Vec<String> {
        nodes.iter().map(|n| f(n).clone()).collect()
    }

    /// The store's client plane.
    pub fn read(&self) -> ReadClient {
        ReadClient::new(
            &Self::addrs(&self.stores, |n| &n.client),
            &connector(self.server_only()),
        )
        .unwrap()
    }

    /// The store's admin plane, as operator `ops` (with TLS).
    pub fn admin(&self) -> AdminClient {
        let tls = self.pki.as_ref().map(|_| self.identity("ops"));
        AdminClient::new(&Self::addrs(&self.stores, |n| &n.admin), &connector(tls)).unwrap()
    }

    /// The store's peer plane with the certificate `name` (with TLS).
    pub fn peer_as(&self, name: &str) -> PeerClient {
        let tls = self.pki.as_ref().map(|_| self.identity(name));
        PeerClient::new(&Self::addrs(&self.stores, |n| &n.peer), &connector(tls)).unwrap()
    }

    /// The client library, seeded with every AllocSvr.
    pub async fn client(&self) -> SeqClient {
        let opts = ClientOptions {
            deadline: Duration::from_secs(5),
            tls: self.server_only(),
            ..Default::default()
        };
        let seeds = Self::addrs(&self.allocs, |n| &n.client);
        let start = Instant::now();
        loop {
            match SeqClient::connect(&seeds, opts.clone()).await {
                Ok(c) => return c,
                Err(e) => assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "no alloc answered: {e}\n{}",
                    self.logs()
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until every section is served through `c`.
    pub async fn wait_serving(&self, c: &SeqClient) {
        for s in 0..self.set.section_count() {
            let uid = self.set.uids_of(s).start;
            let start = Instant::now();
            while let Err(e) = c.next(uid).await {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "section {s} not served: {e}\n{}",
                    self.logs()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Waits until a replica says it leads with the set configured;
    /// returns its index.
    pub async fn wait_leader(&self, within: Duration) -> usize {
        let read = self.read();
        let start = Instant::now();
        loop {
            for (a, st) in read.status_all().await {
                if let Ok(s) = st {
                    if s.has_leader && s.set.is_some() && s.state == "Leader" {
                        return self.stores.iter().position(|n| n.client == a).unwrap();
                    }
                }
            }
            assert!(
                start.elapsed() < within,
                "no ready leader within {within:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How many `StorePeer.Renew` calls replica `i` has served (direct or
    /// forwarded to it), from its metrics.
    pub fn renewals_served(&self, i: usize) -> f64 {
        let text = scrape(self.stores[i].metrics.as_ref().unwrap());
        text.lines()
            .filter(|l| {
                l.starts_with("seqsvr_calls_total{")
                    && l.contains("method=\"Renew\"")
                    && l.contains("plane=\"peer\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Every log, tails only.
    pub fn logs(&self) -> String {
        logs_in(self.dir.path())
    }
}

/// `GET /metrics` over plain HTTP/1.1.
pub fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("metrics listener");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

// ---------------------------------------------------------------------
// Floods
// ---------------------------------------------------------------------

/// Raises this process's open-file limit towards `want` (as far as the
/// hard limit allows), so a flood of connections is not cut short by the
/// test's own limit; processes started afterwards inherit it.
pub fn raise_fd_limit(want: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on this process with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
    r.rlim_cur
}

/// A process's resident set size, in KiB (`VmRSS` in `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The largest RSS of `pid` sampled every 50 ms while `f` runs.
pub async fn peak_rss_during<T>(pid: u32, f: impl Future<Output = T>) -> (T, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(rss_kib(pid)));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let out = f.await;
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
    (out, peak.load(Ordering::Relaxed))
}

/// Opens up to `n` TCP connections to `addr` (within `limit`), writes
/// `first` on each (nothing if empty) and keeps them open; returns them
/// and how many could not be opened.
pub async fn idle_connections(
    addr: &str,
    n: usize,
    first: &[u8],
    limit: Duration,
) -> (Vec<tokio::net::TcpStream>, usize) {
    let until = Instant::now() + limit;
    let mut open = Vec::with_capacity(n);
    let mut failed = 0;
    for _ in 0..n {
        if Instant::now() > until {
            failed += 1;
            continue;
        }
        match tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr))
            .await
        {
            Ok(Ok(mut s)) => {
                if !first.is_empty() && s.write_all(first).await.is_err() {
                    failed += 1;
                    continue;
                }
                open.push(s);
            }
            _ => failed += 1,
        }
    }
    (open, failed)
}

/// How many of `conns` the server has closed (a read sees EOF or an
/// error; what the server sent before, such as SETTINGS or GOAWAY, is
/// read past). Does not wait.
pub fn closed_by_server(conns: &mut [tokio::net::TcpStream]) -> usize {
    let mut closed = 0;
    let mut buf = [0u8; 4096];
    for s in conns.iter_mut() {
        loop {
            match s.try_read(&mut buf) {
                Ok(0) => {
                    closed += 1;
                    break;
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    closed += 1;
                    break;
                }
            }
        }
    }
    closed
}

/// The first bytes of a TLS ClientHello: a handshake record announcing
/// 512 bytes, of which only the start is ever sent.
pub const PARTIAL_CLIENT_HELLO: &[u8] = &[
    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
];

/// The HTTP/2 connection preface and an empty SETTINGS frame.
pub const H2_PREFACE: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// What an [`H2Flood`] did and what the server answered.
#[derive(Debug, Default, Clone)]
pub struct FloodReport {
    /// Streams opened (HEADERS sent).
    pub streams: u32,
    /// Request body bytes sent, over all streams.
    pub body_bytes: u64,
    /// Streams the server reset (e.g. REFUSED_STREAM beyond its limit).
    pub resets: u32,
    /// Streams the server answered and ended (e.g. a timeout status).
    pub answered: u32,
    /// Whether the server sent GOAWAY.
    pub goaway: bool,
    /// The server's advertised SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_streams: Option<u32>,
}

#[derive(Debug)]
struct H2State {
    conn_window: i64,
    init_window: i64,
    windows: HashMap<u32, i64>,
    reset: std::collections::HashSet<u32>,
    max_frame: usize,
    settings: bool,
    report: FloodReport,
    closed: bool,
}

type Writer = Arc<tokio::sync::Mutex<tokio::net::tcp::OwnedWriteHalf>>;

/// A hand-written plaintext HTTP/2 client (h2c, prior knowledge) that
/// opens gRPC calls and never finishes their bodies: what an attacker
/// with a TCP connection to a client plane can do. It honours the
/// server's flow control (or it would be cut off for breaking the
/// protocol, which tests nothing).
pub struct H2Flood {
    write: Writer,
    state: Arc<Mutex<H2State>>,
    wake: Arc<tokio::sync::Notify>,
    reader: tokio::task::JoinHandle<()>,
    next_id: u32,
    authority: String,
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK string: no Huffman, 7-bit prefix length.
fn hpack_str(out: &mut Vec<u8>, s: &str) {
    let n = s.len();
    if n < 127 {
        out.push(n as u8);
    } else {
        out.push(127);
        let mut rest = n - 127;
        while rest >= 128 {
            out.push((rest % 128) as u8 | 0x80);
            rest /= 128;
        }
        out.push(rest as u8);
    }
    out.extend_from_slice(s.as_bytes());
}

/// A header as an HPACK literal without indexing, with a new name.
fn hpack_literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x00);
    hpack_str(out, name);
    hpack_str(out, value);
}

impl H2Flood {
    /// Connects to `addr`, sends the preface and waits for the server's
    /// SETTINGS.
    pub async fn connect(addr: &str) -> std::io::Result<H2Flood> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (mut r, w) = s.into_split();
        let write: Writer = Arc::new(tokio::sync::Mutex::new(w));
        write.lock().await.write_all(H2_PREFACE).await?;
        let state = Arc::new(Mutex::new(H2State {
            conn_window: 65_535,
            init_window: 65_535,
            windows: HashMap::new(),
            reset: Default::default(),
            max_frame: 16_384,
            settings: false,
            report: FloodReport::default(),
            closed: false,
        }));
        let wake = Arc::new(tokio::sync::Notify::new());
        let reader = {
            let (state, wake, write) = (state.clone(), wake.clone(), write.clone());
            tokio::spawn(async move {
                let mut head = [0u8; 9];
                loop {
                    if r.read_exact(&mut head).await.is_err() {
                        break;
                    }
                    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                    let (kind, flags) = (head[3], head[4]);
                    let stream =
                        u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                    let mut payload = vec![0u8; len];
                    if r.read_exact(&mut payload).await.is_err() {
                        break;
                    }
                    let mut reply = None;
                    {
                        let mut st = state.lock().unwrap();
                        match kind {
                            // HEADERS: an answer; with END_STREAM, the end of it.
                            0x1 if flags & 0x1 != 0 => st.report.answered += 1,
                            // DATA with END_STREAM.
                            0x0 if flags & 0x1 != 0 => st.report.answered += 1,
                            0x3 => {
                                st.report.resets += 1;
                                st.reset.insert(stream);
                            }
                            0x4 if flags & 0x1 == 0 => {
                                for p in payload.chunks_exact(6) {
                                    let id = u16::from_be_bytes([p[0], p[1]]);
                                    let v = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
                                    match id {
                                        0x3 => st.report.max_streams = Some(v),
                                        0x4 => {
                                            let delta = v as i64 - st.init_window;
                                            st.init_window = v as i64;
                                            for w in st.windows.values_mut() {
                                                *w += delta;
                                            }
                                        }
                                        0x5 => st.max_frame = v as usize,
                                        _ => {}
                                    }
                                }
                                st.settings = true;
                                reply = Some(frame(0x4, 0x1, 0, &[]));
                            }
                            0x6 if flags & 0x1 == 0 => reply = Some(frame(0x6, 0x1, 0, &payload)),
                            0x7 => st.report.goaway = true,
                            0x8 if payload.len() == 4 => {
                                let inc = (u32::from_be_bytes([
                                    payload[0], payload[1], payload[2], payload[3],
                                ]) & 0x7fff_ffff) as i64;
                                if stream == 0 {
                                    st.conn_window += inc;
                                } else if let Some(w) = st.windows.get_mut(&stream) {
                                    *w += inc;
                                }
                            }
                            _ => {}
                        }
                    }
                    if let Some(f) = reply {
                        if write.lock().await.write_all(&f).await.is_err() {
                            break;
                        }
                    }
                    wake.notify_waiters();
                }
                state.lock().unwrap().closed = true;
                wake.notify_waiters();
            })
        };
        let f = H2Flood {
            write,
            state,
            wake,
            reader,
            next_id: 1,
            authority: addr.to_string(),
        };
        let start = Instant::now();
        while !f.state.lock().unwrap().settings {
            if start.elapsed() > Duration::from_secs(5) || f.state.lock().unwrap().closed {
                return Err(std::io::Error::other("no SETTINGS from the server"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(f)
    }

    /// Opens `streams` gRPC calls to `path`, each announcing a message of
    /// `declared` bytes and sending `sent` of it, never ending the body.
    /// Stops at `until` (flow control may hold the bodies back).
    pub async fn flood(
        &mut self,
        path: &str,
        streams: u32,
        declared: u32,
        sent: usize,
        until: Instant,
    ) -> FloodReport {
        let mut headers = Vec::new();
        hpack_literal(&mut headers, ":method", "POST");
        hpack_literal(&mut headers, ":scheme", "http");
        hpack_literal(&mut headers, ":path", path);
        hpack_literal(&mut headers, ":authority", &self.authority);
        hpack_literal(&mut headers, "content-type", "application/grpc");
        hpack_literal(&mut headers, "te", "trailers");
        let mut ids = Vec::new();
        for _ in 0..streams {
            if Instant::now() > until || self.state.lock().unwrap().closed {
                break;
            }
            let id = self.next_id;
            self.next_id += 2;
            {
                let mut st = self.state.lock().unwrap();
                let w = st.init_window;
                st.windows.insert(id, w);
                st.report.streams += 1;
            }
            // END_HEADERS only: the body follows and never ends.
            let f = frame(0x1, 0x4, id, &headers);
            if self.write.lock().await.write_all(&f).await.is_err() {
                break;
            }
            ids.push(id);
        }
        // The bodies: a gRPC prefix announcing `declared` bytes, then `sent`
        // bytes of it, in frames the windows allow.
        let mut body = vec![0u8, 0, 0, 0, 0];
        body[1..5].copy_from_slice(&declared.to_be_bytes());
        body.resize(5 + sent, 0x5a);
        for id in ids {
            let mut off = 0;
            while off < body.len() {
                if Instant::now() > until {
                    return self.report();
                }
                let n = {
                    let mut st = self.state.lock().unwrap();
                    if st.closed {
                        drop(st);
                        return self.report();
                    }
                    if st.reset.contains(&id) {
                        break; // refused or reset: nothing more to send on it
                    }
                    let w = st.windows.get(&id).copied().unwrap_or(0);
                    let n = (body.len() - off)
                        .min(st.max_frame)
                        .min(st.conn_window.max(0) as usize)
                        .min(w.max(0) as usize);
                    if n > 0 {
                        st.conn_window -= n as i64;
                        *st.windows.get_mut(&id).unwrap() -= n as i64;
                        st.report.body_bytes += n as u64;
                    }
                    n
                };
                if n == 0 {
                    let _ =
                        tokio::time::timeout(Duration::from_millis(50), self.wake.notified()).await;
                    continue;
                }
                let f = frame(0x0, 0x0, id, &body[off..off + n]);
                if self.write.lock().await.write_all(&f).await.is_err() {
                    return self.report();
                }
                off += n;
            }
        }
        self.report()
    }

    /// What happened so far.
    pub fn report(&self) -> FloodReport {
        self.state.lock().unwrap().report.clone()
    }
}

impl Drop for H2Flood {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

// ---------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------

/// Runs `seqsvr args…` until it exits or `limit` passes (then kills it);
/// returns its exit status (`None`: still running at the limit, killed)
/// and everything it wrote to stderr.
pub fn run_seqsvr(args: &[&str], limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    use std::process::{Command, Stdio};
    let mut child = Command::new(crate::support::seqsvr_bin())
        .args(args)
        .env("RUST_LOG", "info,openraft=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    (status, err)
}

/// A file path as TOML wants it.
pub fn toml_path(p: &Path) -> String {
    p.display().to_string()
}

/// Where a config for a one-off run goes.
pub fn config_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.toml"))
}
