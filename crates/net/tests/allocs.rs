//! The listener adds no allocation per call: the same calls cost the same
//! number of allocations (client and server together, in one process)
//! through a plain tonic server and through a plane listener; and one
//! service served without tonic's router (`serve_one`) costs fewer.
//!
//! Its own test binary, because it counts with a global allocator.

use seqsvr_net::{ClientTls, DevPki, Leaf, Limits, Plane, Role, StoreId};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CALLS: u64 = 2000;

/// Allocations per call over `CALLS` sequential calls on one connection,
/// after a warm-up.
async fn per_call(addr: std::net::SocketAddr, tls: Option<&ClientTls>) -> f64 {
    let ch = seqsvr_net::client::channel(&addr.to_string(), tls, Duration::from_secs(2)).unwrap();
    let mut client = HealthClient::new(ch);
    let req = || HealthCheckRequest {
        service: String::new(),
    };
    for _ in 0..200 {
        client.check(req()).await.unwrap();
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..CALLS {
        client.check(req()).await.unwrap();
    }
    (ALLOCS.load(Ordering::Relaxed) - before) as f64 / CALLS as f64
}

/// One test, so nothing else allocates while it counts.
#[tokio::test(flavor = "current_thread")]
async fn the_listener_adds_no_allocation_per_call() {
    plaintext().await;
    mutual_tls().await;
}

async fn plaintext() {
    let limits = Limits {
        idle_timeout: Duration::from_secs(60),
        ..Limits::for_plane(Plane::Client)
    };

    // Plain tonic, set up the same way but for the listener's additions.
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let (_, health) = tonic_health::server::health_reporter();
    let plain = tokio::spawn(
        Server::builder()
            .max_concurrent_streams(limits.max_concurrent_streams)
            .http2_keepalive_interval(limits.keepalive())
            .http2_keepalive_timeout(Some(limits.keepalive_timeout))
            .timeout(limits.request_timeout)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(tcp).with_nodelay(Some(true))),
    );
    let baseline = per_call(addr, None).await;
    plain.abort();

    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let l = seqsvr_net::server::listener(tcp, Plane::Client, &limits, None, false).unwrap();
    let addr = l.local_addr();
    let (_, health) = tonic_health::server::health_reporter();
    let router = l.server().add_service(health);
    let ours = tokio::spawn(l.serve(router, std::future::pending()));
    let with_listener = per_call(addr, None).await;
    ours.abort();

    // The same service alone, without tonic's router (`serve_one`).
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let l = seqsvr_net::server::listener(tcp, Plane::Client, &limits, None, false).unwrap();
    let addr = l.local_addr();
    let (_, health) = tonic_health::server::health_reporter();
    let server = l.server();
    let ours = tokio::spawn(l.serve_one(server, health, std::future::pending()));
    let alone = per_call(addr, None).await;
    ours.abort();

    eprintln!(
        "allocations per call: plain tonic {baseline:.2}, plane listener {with_listener:.2}, \
         one service without the router {alone:.2}"
    );
    assert!(
        with_listener <= baseline + 0.1,
        "the listener adds allocations: {baseline:.2} -> {with_listener:.2} per call"
    );
    // The router boxes each call's service and future and copies the
    // path's parameters; without it those allocations go.
    assert!(
        alone <= with_listener - 1.0,
        "serving one service without the router saves no allocation: \
         {with_listener:.2} -> {alone:.2} per call"
    );
}

/// With mutual TLS the listener runs the handshake itself; tonic's own TLS
/// is the baseline.
async fn mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = DevPki::generate(
        dir.path(),
        &[
            Leaf::new("store-1", Role::Store(StoreId::new(0, 1))),
            Leaf::new("a1", Role::Alloc("a1".into())),
        ],
        false,
    )
    .unwrap();
    let server = pki.tls_config("store-1");
    let client = pki
        .tls_config("a1")
        .client()
        .unwrap()
        .with_domain_name("localhost");
    let limits = Limits::for_plane(Plane::Peer);

    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let (_, health) = tonic_health::server::health_reporter();
    let plain = tokio::spawn(
        Server::builder()
            .tls_config(server.tonic_server(Plane::Peer).unwrap())
            .unwrap()
            .max_concurrent_streams(limits.max_concurrent_streams)
            .http2_keepalive_interval(limits.keepalive())
            .http2_keepalive_timeout(Some(limits.keepalive_timeout))
            .timeout(limits.request_timeout)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(tcp).with_nodelay(Some(true))),
    );
    let baseline = per_call(addr, Some(&client)).await;
    plain.abort();

    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tls = server.server(Plane::Peer).unwrap();
    let l = seqsvr_net::server::listener(tcp, Plane::Peer, &limits, Some(&tls), false).unwrap();
    let addr = l.local_addr();
    let (_, health) = tonic_health::server::health_reporter();
    let router = l.server().add_service(health);
    let ours = tokio::spawn(l.serve(router, std::future::pending()));
    let with_listener = per_call(addr, Some(&client)).await;
    ours.abort();

    eprintln!(
        "allocations per call with mTLS: tonic's TLS {baseline:.2}, plane listener {with_listener:.2}"
    );
    assert!(
        with_listener <= baseline + 0.1,
        "the listener adds allocations: {baseline:.2} -> {with_listener:.2} per call"
    );
}

/// Rough throughput, plain tonic against the plane listener, plaintext:
/// `cargo test -p seqsvr-net --release --test allocs -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement, not a check"]
async fn throughput() {
    let limits = Limits::for_plane(Plane::Client);
    for round in 0..2 {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let (_, health) = tonic_health::server::health_reporter();
        let plain = tokio::spawn(
            Server::builder()
                .max_concurrent_streams(limits.max_concurrent_streams)
                .timeout(limits.request_timeout)
                .add_service(health)
                .serve_with_incoming(TcpIncoming::from(tcp).with_nodelay(Some(true))),
        );
        let a = rate(addr).await;
        plain.abort();

        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let l = seqsvr_net::server::listener(tcp, Plane::Client, &limits, None, false).unwrap();
        let addr = l.local_addr();
        let (_, health) = tonic_health::server::health_reporter();
        let router = l.server().add_service(health);
        let ours = tokio::spawn(l.serve(router, std::future::pending()));
        let b = rate(addr).await;
        ours.abort();
        eprintln!("round {round}: plain tonic {a:.0} calls/s, plane listener {b:.0} calls/s");
    }
}

/// Calls per second from 64 concurrent callers on 4 connections for 2 s.
async fn rate(addr: std::net::SocketAddr) -> f64 {
    let chans: Vec<_> = (0..4)
        .map(|_| {
            seqsvr_net::client::channel(&addr.to_string(), None, Duration::from_secs(2)).unwrap()
        })
        .collect();
    let end = tokio::time::Instant::now() + Duration::from_secs(2);
    let done = std::sync::Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let mut c = HealthClient::new(chans[i % chans.len()].clone());
            let done = done.clone();
            tokio::spawn(async move {
                while tokio::time::Instant::now() < end {
                    c.check(HealthCheckRequest::default()).await.unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / 2.0
}
