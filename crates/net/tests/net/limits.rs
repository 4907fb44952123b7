//! What a listener allows: message size, streams, connections, timeouts.

use crate::common::*;
use seqsvr_net::{Limits, Plane};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::HealthServer;

#[tokio::test]
async fn an_oversized_message_is_resource_exhausted() {
    let limits = quick(Plane::Client);
    assert_eq!(limits.max_message, 64 * 1024);
    let s = serve(Plane::Client, &limits, None, |mut b| {
        b.add_service(health())
    })
    .await;
    let ch = channel(s.addr, None);

    let e = check(&ch, &"x".repeat(70_000)).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("65536"), "{e:?}");
    // Under the limit it reaches the service (which knows no such name).
    let e = check(&ch, &"x".repeat(60_000)).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    // The connection is still good.
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    assert_eq!(s.conns.accepted(), 1);
    s.stop().await;
}

/// A service whose own tonic limit is below the plane's answers with
/// tonic's OUT_OF_RANGE, which the listener rewrites.
#[tokio::test]
async fn tonics_own_limit_is_resource_exhausted_too() {
    let limits = quick(Plane::Peer);
    let s = serve(Plane::Peer, &limits, None, |mut b| {
        let (_, svc) = tonic_health::server::health_reporter();
        b.add_service(svc.max_decoding_message_size(10_000))
    })
    .await;
    let ch = channel(s.addr, None);
    let e = check(&ch, &"x".repeat(20_000)).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("too large"), "{e:?}");
    s.stop().await;
}

#[tokio::test]
async fn streams_beyond_the_limit_wait_their_turn() {
    let limits = Limits {
        max_concurrent_streams: 2,
        ..quick(Plane::Client)
    };
    let gate = Gate::new(HealthServer::new(
        tonic_health::server::HealthService::from_health_reporter(
            tonic_health::server::HealthReporter::new(),
        ),
    ));
    let (inside, most, open) = (gate.inside.clone(), gate.most.clone(), gate.gate.clone());
    let s = serve(Plane::Client, &limits, None, |mut b| b.add_service(gate)).await;
    let ch = channel(s.addr, None);

    // A client learns the limit from the server's first SETTINGS; calls it
    // sends before that are refused beyond the limit (REFUSED_STREAM,
    // safe to retry), never let in.
    let burst: Vec<_> = (0..6)
        .map(|_| {
            let ch = ch.clone();
            tokio::spawn(async move { check(&ch, "").await })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(2), || inside.load(Ordering::SeqCst)
            >= 1)
        .await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    open.add_permits(6);
    for c in burst {
        if let Err(e) = c.await.unwrap() {
            assert_eq!(e.code(), Code::Unavailable, "{e:?}");
        }
    }
    assert!(most.load(Ordering::SeqCst) <= 2);
    // Drain leftover permits, so the next calls wait at the gate.
    while open.try_acquire().map(|p| p.forget()).is_ok() {}

    // Once the client knows the limit, it holds the extra calls back.
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let ch = ch.clone();
            tokio::spawn(async move { check(&ch, "").await })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(2), || inside.load(Ordering::SeqCst)
            == 2)
        .await
    );
    // Held there: the client may not open a third stream.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(most.load(Ordering::SeqCst), 2);
    open.add_permits(6);
    for c in calls {
        assert_eq!(c.await.unwrap().unwrap(), ServingStatus::Serving);
    }
    assert_eq!(most.load(Ordering::SeqCst), 2);
    assert_eq!(s.conns.accepted(), 1, "all calls shared one connection");
    s.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed_at_once() {
    let limits = Limits {
        max_connections: 2,
        ..quick(Plane::Client)
    };
    let s = serve(Plane::Client, &limits, None, |mut b| {
        b.add_service(health())
    })
    .await;
    let a = channel(s.addr, None);
    let b = channel(s.addr, None);
    check(&a, "").await.unwrap();
    check(&b, "").await.unwrap();
    assert_eq!(s.conns.open(), 2);

    // A third is accepted and closed straight away, told why.
    let mut raw = TcpStream::connect(s.addr).await.unwrap();
    let mut got = Vec::new();
    let t = Instant::now();
    let _ = tokio::time::timeout(Duration::from_secs(2), raw.read_to_end(&mut got))
        .await
        .expect("an over-limit connection must be closed, not left hanging");
    assert!(t.elapsed() < Duration::from_secs(1));
    assert!(got.ends_with(b"connection limit reached"), "{got:?}");
    // A gRPC client reports it as UNAVAILABLE if its call was on the
    // connection when the GOAWAY came, else as CANCELLED ("connection
    // closed"): both are transport failures to retry.
    let e = check(&channel(s.addr, None), "").await.unwrap_err();
    assert!(
        matches!(e.code(), Code::Unavailable | Code::Cancelled),
        "{e:?}"
    );
    assert!(s.conns.refused() >= 2);
    assert_eq!(s.conns.open(), 2);

    // A slot frees when a client goes away.
    drop(a);
    assert!(eventually(Duration::from_secs(2), || s.conns.open() == 1).await);
    check(&channel(s.addr, None), "").await.unwrap();
    check(&b, "").await.unwrap();
    s.stop().await;
}

/// Frames a raw HTTP/2 client sends: the preface with empty SETTINGS, and
/// PINGs.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
const PING: &[u8] = b"\0\0\x08\x06\0\0\0\0\0ABCDEFGH";

/// Reads until the server closes; how long that took.
async fn until_closed(mut r: impl tokio::io::AsyncRead + Unpin, within: Duration) -> Duration {
    let t = Instant::now();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the server kept the connection open");
    t.elapsed()
}

#[tokio::test]
async fn an_idle_connection_is_closed() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(400),
        request_timeout: Duration::from_millis(200),
        // The server pings often; the answers must not count as use.
        keepalive_interval: Duration::from_millis(50),
        keepalive_timeout: Duration::from_secs(5),
        ..quick(Plane::Client)
    };
    let s = serve(Plane::Client, &limits, None, |mut b| {
        b.add_service(health())
    })
    .await;

    // A raw HTTP/2 connection that pings but makes no calls.
    let (r, mut w) = TcpStream::connect(s.addr).await.unwrap().into_split();
    w.write_all(PREFACE).await.unwrap();
    let pinger = tokio::spawn(async move {
        while w.write_all(PING).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let took = until_closed(r, Duration::from_secs(3)).await;
    assert!(took >= Duration::from_millis(350), "closed early: {took:?}");
    pinger.abort();

    // A connection in use stays open past the idle timeout.
    let ch = channel(s.addr, None);
    let end = Instant::now() + Duration::from_millis(1200);
    while Instant::now() < end {
        check(&ch, "").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        s.conns.accepted(),
        2,
        "the busy connection was never re-made"
    );
    // Then, left alone, it is closed.
    assert!(eventually(Duration::from_secs(2), || s.conns.open() == 0).await);
    s.stop().await;
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_handshake_timeout() {
    let pki = Pki::new();
    let limits = Limits {
        handshake_timeout: Duration::from_millis(300),
        ..quick(Plane::Peer)
    };
    let tls = pki.server("store-1", Plane::Peer);
    for tls in [None, Some(&tls)] {
        let s = serve(Plane::Peer, &limits, tls, |mut b| b.add_service(health())).await;
        let raw = TcpStream::connect(s.addr).await.unwrap();
        let took = until_closed(raw, Duration::from_secs(3)).await;
        assert!(took >= Duration::from_millis(250), "closed early: {took:?}");

        // Half a preface is no better.
        let mut raw = TcpStream::connect(s.addr).await.unwrap();
        if tls.is_none() {
            raw.write_all(&PREFACE[..10]).await.unwrap();
        }
        until_closed(raw, Duration::from_secs(3)).await;
        assert!(eventually(Duration::from_secs(1), || s.conns.open() == 0).await);
        s.stop().await;
    }
}

#[tokio::test]
async fn a_call_past_the_request_timeout_is_cancelled() {
    let limits = Limits {
        request_timeout: Duration::from_millis(200),
        ..quick(Plane::Admin)
    };
    let gate = Gate::new(HealthServer::new(
        tonic_health::server::HealthService::from_health_reporter(
            tonic_health::server::HealthReporter::new(),
        ),
    ));
    let s = serve(Plane::Admin, &limits, None, |mut b| b.add_service(gate)).await;
    let t = Instant::now();
    let e = check(&channel(s.addr, None), "").await.unwrap_err();
    assert_eq!(e.code(), Code::Cancelled, "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(2));
    s.stop().await;
}
