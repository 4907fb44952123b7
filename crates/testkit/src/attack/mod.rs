//! What the fencing and adversary tests share: the ways an attacker, a
//! ghost or an operator's mistake can reach a running cluster, built from
//! the project's own generated gRPC clients used as plain clients.
//!
//! - the set every test serves, its workload and the checks of what clients
//!   received ([`set`], [`start_load`], [`burst`]);
//! - raw calls: [`channel`] (with or without a certificate), [`Retarget`]
//!   (any message to any method), [`kind`] and [`Outcome`];
//! - a cluster of real processes with TLS from a development PKI and
//!   per-replica metrics ([`Cluster`]), for what the plaintext harness
//!   cannot do;
//! - floods: a hand-written HTTP/2 client that opens streams and never
//!   finishes them ([`H2Flood`]), idle connections, and a process's RSS;
//! - running the binary to completion ([`run_seqsvr`]).
//!
//! The cluster and the floods are in `attack/cluster.rs` and
//! `attack/floods.rs`, re-exported here.

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
use seqsvr_core::rng::Rng;
use seqsvr_core::SetSpec;
use seqsvr_net::{ClientTls, DevPki, Leaf, Role, StoreId};
use seqsvr_proto::{detail_of, ErrorKind};
use seqsvr_store::node::{InitialAlloc, LeaseSection, Member};
use seqsvr_store::StoreConfig;
use seqsvr_store_api::client::connector;
use seqsvr_store_api::{AdminClient, PeerClient, ReadClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::codegen::http;
use tonic::transport::Channel;

use crate::check::Workload;
use crate::cluster::TEST_RENEW_MS;
use crate::process::{free_port, logs_in, Bins, Proc};

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
/// of every section (through the client library, as an IM backend would);
/// every 4th call reads `current` instead (checked against the numbers
/// around it).
pub fn start_load(c: &SeqClient, callers: u64) -> Workload {
    let mut w = Workload::new();
    w.tasks = (0..callers)
        .map(|k| {
            let (c, r) = (c.clone(), w.recorder());
            tokio::spawn(async move {
                let mut rng = Rng::new(0x2545_f491_4f6c_dd1du64 ^ (k + 1));
                let mut i = 0u64;
                while !r.stopped() {
                    let x = rng.next_u64();
                    let uid = uid((x % SECTIONS as u64) as u32, (x >> 8) % UIDS_PER_SECTION);
                    i += 1;
                    let ok = if i.is_multiple_of(4) {
                        r.current(&c, uid).await
                    } else {
                        r.next(&c, uid).await
                    };
                    if !ok {
                        tokio::time::sleep(Duration::from_millis(5)).await;
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
                            Ok(seq) => got.push(Observation::next(uid, seq, start, Instant::now())),
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

/// The longest time after `at` that a section in `sections` (of [`set`])
/// went without a successful call: up to its last success, or, given
/// `until`, measured up to `until` (successes after it are not counted).
pub fn outage_after(
    obs: &[Observation],
    at: Instant,
    until: Option<Instant>,
    sections: &[u32],
) -> Duration {
    let set = set();
    sections
        .iter()
        .map(|&s| {
            let mut ends: Vec<Instant> = obs
                .iter()
                .filter(|o| set.section_of(o.uid) == Some(s) && o.end > at)
                .filter(|o| until.is_none_or(|u| o.end <= u))
                .map(|o| o.end)
                .collect();
            ends.sort();
            ends.extend(until);
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
            if let Ok(r) = c
                .next(crate::cluster::from_memory(seqsvr_proto::NextRequest {
                    uid,
                    count: 0,
                    ..Default::default()
                }))
                .await
            {
                let seq = r.into_inner().seq;
                got.push(Observation::next(uid, seq, start, Instant::now()));
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

// The cluster with TLS and metrics, and the floods, in files of their own.
mod cluster;
mod floods;

pub use cluster::*;
pub use floods::*;

// ---------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------

/// Runs `seqsvr args…` until it exits or `limit` passes (then kills it);
/// returns its exit status (`None`: still running at the limit, killed)
/// and everything it wrote to stderr.
pub fn run_seqsvr(
    bins: Bins,
    args: &[&str],
    limit: Duration,
) -> (Option<std::process::ExitStatus>, String) {
    use std::process::{Command, Stdio};
    let mut child = Command::new(bins.seqsvr)
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
