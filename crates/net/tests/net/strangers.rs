//! Limits a stranger cannot use against others: sockets that never finish
//! their handshake hold no slot under the connection cap, and one source
//! holds at most its share of the handshake pool. Each test holds a limit
//! full with a stranger while a legitimate caller connects and calls.

use crate::common::*;
use seqsvr_net::{ClientTls, Limits, Plane};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::net::{TcpSocket, TcpStream};
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;

/// The stranger's address, and the legitimate caller's (another loopback
/// address: another host, as far as the listener can tell).
const STRANGER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const CALLER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// `n` TCP connections from `from` that say nothing.
async fn silent(to: SocketAddr, from: Ipv4Addr, n: usize) -> Vec<TcpStream> {
    let mut v = Vec::new();
    for _ in 0..n {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::new(IpAddr::V4(from), 0)).unwrap();
        v.push(s.connect(to).await.unwrap());
    }
    v
}

/// A TLS channel dialing from `from`.
fn channel_from(addr: SocketAddr, from: Ipv4Addr, tls: &ClientTls) -> Channel {
    let tls = tls.clone().with_domain_name("localhost");
    let ep = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .local_address(Some(IpAddr::V4(from)))
        .connect_timeout(CONNECT);
    tls.apply(ep, &addr.to_string()).unwrap().connect_lazy()
}

/// `max_connections` counts only connections whose handshake is done: a
/// stranger holding more silent sockets than the cap does not keep a
/// store's AllocSvr out of the peer plane, nor an operator out of the
/// admin plane.
#[tokio::test]
async fn silent_sockets_do_not_fill_the_connection_cap() {
    let pki = Pki::new();
    for (plane, who) in [(Plane::Peer, "a1"), (Plane::Admin, "alice")] {
        let limits = Limits {
            max_connections: 2,
            max_handshakes: 64,
            max_handshakes_per_source: 16,
            ..quick(plane)
        };
        let tls = pki.server("store-1", plane);
        let s = serve(plane, &limits, Some(&tls), |mut b| b.add_service(health())).await;
        let held = silent(s.addr, STRANGER, 8).await;
        // All 8 taken in (or, were they to count under the cap, 6 refused).
        let seen = || s.conns.handshaking() + s.conns.refused() as usize;
        assert!(
            eventually(Duration::from_secs(2), || seen() == 8).await,
            "{plane}: {} seen",
            seen()
        );
        let mut ok = 0;
        for _ in 0..10 {
            let ch = channel_from(s.addr, CALLER, &pki.client(who));
            if matches!(check(&ch, "").await, Ok(ServingStatus::Serving)) {
                ok += 1;
            }
        }
        println!(
            "{plane}: {ok}/10 calls on new connections with 8 silent sockets held (cap 2, {} \
             handshaking)",
            s.conns.handshaking()
        );
        assert_eq!(
            ok, 10,
            "{plane}: a stranger's silent sockets locked callers out"
        );
        assert_eq!(s.conns.refused(), 0, "{plane}");
        drop(held);
        s.stop().await;
    }
}

/// One source holds at most `max_handshakes_per_source` handshakes; its
/// further sockets are closed at once, and the pool stays open to others.
#[tokio::test]
async fn one_source_holds_only_its_share_of_the_handshake_pool() {
    let pki = Pki::new();
    let plane = Plane::Client;
    let limits = Limits {
        max_handshakes: 16,
        max_handshakes_per_source: 4,
        ..quick(plane)
    };
    let tls = pki.server("store-1", plane);
    let s = serve(plane, &limits, Some(&tls), |mut b| b.add_service(health())).await;
    let held = silent(s.addr, STRANGER, 40).await;
    let seen = || s.conns.handshaking() + s.conns.refused_handshakes() as usize;
    assert!(
        eventually(Duration::from_secs(2), || seen() == 40).await,
        "{} seen",
        seen()
    );
    let held_places = s.conns.handshaking();
    let server_only = pki.server_only();
    let mut ok = 0;
    for _ in 0..10 {
        let ch = channel_from(s.addr, CALLER, &server_only);
        if matches!(check(&ch, "").await, Ok(ServingStatus::Serving)) {
            ok += 1;
        }
    }
    println!(
        "client: {ok}/10 calls on new connections with 40 silent sockets from one source \
         ({held_places} of them handshaking, pool 16, share 4)"
    );
    assert_eq!(
        ok, 10,
        "a stranger's silent sockets filled the handshake pool"
    );
    assert_eq!(held_places, 4);
    drop(held);
    s.stop().await;
}
