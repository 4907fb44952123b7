//! Who gets in on each plane.

use crate::common::*;
use seqsvr_net::{Auth, ClientTls, DevPki, Leaf, Plane, Role};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

#[tokio::test]
async fn mutual_tls_with_the_right_role_succeeds() {
    let pki = Pki::new();
    let tls = pki.server("store-1", Plane::Peer);
    let s = serve(Plane::Peer, &quick(Plane::Peer), Some(&tls), |mut b| {
        b.add_service(gated(|r| Auth::Tls.require_alloc(r, "a1")))
    })
    .await;
    let ch = channel(s.addr, Some(&pki.client("a1")));
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    assert_eq!(s.conns.open(), 1);
    s.stop().await;

    let tls = pki.server("store-1", Plane::Admin);
    let s = serve(Plane::Admin, &quick(Plane::Admin), Some(&tls), |mut b| {
        b.add_service(gated(|r| {
            let who = Auth::Tls.require_operator(r)?;
            assert_eq!(Auth::Tls.caller(r)?, who);
            Ok(who)
        }))
    })
    .await;
    let ch = channel(s.addr, Some(&pki.client("alice")));
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    s.stop().await;
}

#[tokio::test]
async fn a_wrong_role_or_alloc_id_is_permission_denied() {
    let pki = Pki::new();
    let tls = pki.server("store-1", Plane::Peer);
    let s = serve(Plane::Peer, &quick(Plane::Peer), Some(&tls), |mut b| {
        b.add_service(gated(|r| Auth::Tls.require_alloc(r, "a1")))
    })
    .await;

    let e = check(&channel(s.addr, Some(&pki.client("store-2"))), "")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().contains("alloc:a1") && e.message().contains("store:0:2"),
        "{e:?}"
    );

    let e = check(&channel(s.addr, Some(&pki.client("a2"))), "")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().contains("alloc:a1") && e.message().contains("alloc:a2"),
        "{e:?}"
    );

    // Many calls on one connection keep giving the same answer (the role
    // is cached per connection).
    let ch = channel(s.addr, Some(&pki.client("a1")));
    for _ in 0..20 {
        check(&ch, "").await.unwrap();
    }
    s.stop().await;

    let s = serve(Plane::Peer, &quick(Plane::Peer), Some(&tls), |mut b| {
        b.add_service(gated(|r| Auth::Tls.require_store(r)))
    })
    .await;
    check(&channel(s.addr, Some(&pki.client("store-2"))), "")
        .await
        .unwrap();
    let e = check(&channel(s.addr, Some(&pki.client("alice"))), "")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    s.stop().await;
}

/// The handshake itself fails: the server demands a certificate.
#[tokio::test]
async fn no_client_certificate_on_peer_or_admin_plane_fails() {
    let pki = Pki::new();
    for plane in [Plane::Peer, Plane::Admin] {
        let tls = pki.server("store-1", plane);
        let s = serve(plane, &quick(plane), Some(&tls), |mut b| {
            b.add_service(health())
        })
        .await;
        let e = check(&channel(s.addr, Some(&pki.server_only())), "")
            .await
            .unwrap_err();
        assert_no_connection(&e);
        // Plaintext to a TLS listener fails too.
        let e = check(&channel(s.addr, None), "").await.unwrap_err();
        assert_no_connection(&e);
        assert!(
            eventually(std::time::Duration::from_secs(2), || s.conns.open() == 0).await,
            "failed handshakes must free their slots"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn a_certificate_from_another_ca_fails() {
    let pki = Pki::new();
    let other_dir = tempfile::tempdir().unwrap();
    let other = DevPki::generate(
        other_dir.path(),
        &[Leaf::new("a1", Role::Alloc("a1".into()))],
        false,
    )
    .unwrap();
    let tls = pki.server("store-1", Plane::Peer);
    let s = serve(Plane::Peer, &quick(Plane::Peer), Some(&tls), |mut b| {
        b.add_service(gated(|r| Auth::Tls.require_alloc(r, "a1")))
    })
    .await;

    // The client trusts the server's CA but presents a certificate
    // (with the right role) from another CA: the server refuses it.
    let forged = seqsvr_net::TlsConfig {
        ca: pki.pki.ca_path(),
        ..other.tls_config("a1")
    }
    .client()
    .unwrap();
    let e = check(&channel(s.addr, Some(&forged)), "")
        .await
        .unwrap_err();
    assert_no_connection(&e);

    // A client that trusts only the other CA refuses the server.
    let e = check(
        &channel(s.addr, Some(&other.tls_config("a1").client().unwrap())),
        "",
    )
    .await
    .unwrap_err();
    assert_no_connection(&e);
    s.stop().await;
}

#[tokio::test]
async fn client_plane_with_server_only_tls_and_with_plaintext() {
    let pki = Pki::new();
    let tls = pki.server("store-1", Plane::Client);
    assert!(!tls.is_mutual());
    // Client-plane callers present no certificate, so a role check (which
    // the client plane never makes) finds none.
    let s = serve(Plane::Client, &quick(Plane::Client), Some(&tls), |mut b| {
        b.add_service(gated(|r| Auth::Tls.require_store(r)))
    })
    .await;
    let e = check(&channel(s.addr, Some(&pki.server_only())), "")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    s.stop().await;

    let s = serve(Plane::Client, &quick(Plane::Client), Some(&tls), |mut b| {
        b.add_service(health())
    })
    .await;
    let ch = channel(s.addr, Some(&pki.server_only()));
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    // A client with a certificate is welcome too; it is not asked for it.
    let ch = channel(s.addr, Some(&pki.client("a1")));
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    s.stop().await;

    let s = serve(Plane::Client, &quick(Plane::Client), None, |mut b| {
        b.add_service(health())
    })
    .await;
    let ch = channel(s.addr, None);
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    s.stop().await;
}

#[tokio::test]
async fn server_only_tls_is_refused_for_peer_and_admin_planes() {
    let pki = Pki::new();
    for plane in [Plane::Peer, Plane::Admin] {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let weak = pki.server("store-1", Plane::Client);
        let e = seqsvr_net::server::listener(tcp, plane, &quick(plane), Some(&weak), false)
            .unwrap_err();
        assert!(matches!(e, seqsvr_net::Error::PlaneTls { .. }), "{e}");
    }
}

#[tokio::test]
async fn a_server_name_the_certificate_lacks_is_refused() {
    let pki = Pki::new();
    let tls = pki.server("store-1", Plane::Client);
    let s = serve(Plane::Client, &quick(Plane::Client), Some(&tls), |mut b| {
        b.add_service(health())
    })
    .await;
    let wrong = pki.server_only().with_domain_name("elsewhere.example");
    let ch = seqsvr_net::client::channel(&s.addr.to_string(), Some(&wrong), CONNECT).unwrap();
    let e = check(&ch, "").await.unwrap_err();
    assert_no_connection(&e);
    // Dialing "localhost" needs no override: the certificate names it.
    let right: ClientTls = pki.server_only();
    let ch = seqsvr_net::client::channel(
        &format!("localhost:{}", s.addr.port()),
        Some(&right),
        CONNECT,
    )
    .unwrap();
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    s.stop().await;
}

/// A certificate from the cluster's CA gets through TLS, but one without
/// exactly one seqsvr role is closed by the listener before it takes a
/// slot under the cap (the handlers' role check would refuse its calls
/// `PERMISSION_DENIED` in any case).
#[tokio::test]
async fn a_certificate_with_no_role_or_two_roles_is_refused() {
    let pki = Pki::new();
    let ca_pem = std::fs::read_to_string(pki.pki.ca_path()).unwrap();
    let ca_key = std::fs::read_to_string(pki.pki.ca_key_path()).unwrap();
    let issuer =
        rcgen::Issuer::from_ca_cert_pem(&ca_pem, rcgen::KeyPair::from_pem(&ca_key).unwrap())
            .unwrap();
    let issue = |name: &str, uris: &[&str]| {
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        for u in uris {
            p.subject_alt_names
                .push(rcgen::SanType::URI((*u).try_into().unwrap()));
        }
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &issuer).unwrap();
        let dir = pki.pki.dir();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).unwrap();
        pki.client(name)
    };
    let tls = pki.server("store-1", Plane::Peer);
    let s = serve(Plane::Peer, &quick(Plane::Peer), Some(&tls), |mut b| {
        b.add_service(gated(|r| Auth::Tls.caller(r)))
    })
    .await;
    for (name, uris) in [
        ("nobody", &["spiffe://elsewhere/x"][..]),
        (
            "twofaced",
            &["urn:seqsvr:store:0:1", "urn:seqsvr:operator:eve"][..],
        ),
    ] {
        let e = check(&channel(s.addr, Some(&issue(name, uris))), "")
            .await
            .unwrap_err();
        assert_no_connection(&e);
    }
    assert_eq!(s.conns.refused(), 2);
    assert_eq!(s.conns.accepted(), 0);
    assert_eq!(s.conns.open(), 0);
    // A certificate with its one role gets in.
    let ch = channel(s.addr, Some(&pki.client("a1")));
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    s.stop().await;
}
