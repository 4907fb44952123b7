//! TLS on the client plane: with `ClientOptions::tls` the client dials
//! AllocSvrs over TLS and checks their certificates against the CA; it
//! presents no certificate of its own.

mod common;

use std::path::Path;

use common::{quick, table, Fake};
use seqsvr_client::{ClientOptions, ClientTls, Error, SeqClient};
use seqsvr_net::{DevPki, Leaf, Role};

/// A development PKI in `dir` with one AllocSvr certificate.
fn pki(dir: &Path) -> DevPki {
    let leaf = Leaf::new("alloc-1", Role::Alloc("alloc-1".into()));
    DevPki::generate(dir, &[leaf], false).unwrap()
}

/// Options that trust the CA of `pki`.
fn trusting(pki: &DevPki, deadline_ms: u64) -> ClientOptions {
    ClientOptions {
        tls: Some(ClientTls::server_only(&pki.ca_path()).unwrap()),
        ..quick(deadline_ms)
    }
}

/// Two TLS fakes sharing set 1 (uids 0..1000): sections 0–4 on A, 5–9 on B.
async fn two_tls_owners(pki: &DevPki) -> (Fake, Fake) {
    let tls = pki.tls_config("alloc-1");
    let (a, b) = (
        Fake::start_tls(0, &tls).await,
        Fake::start_tls(1_000_000, &tls).await,
    );
    let t = table(1, 0..1000, 100, 1, &[(0, 5, &a.addr), (5, 5, &b.addr)]);
    a.set_route(t.clone());
    b.set_route(t);
    (a, b)
}

#[tokio::test]
async fn calls_go_over_tls_to_every_owner() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let (a, b) = two_tls_owners(&pki).await;
    let c = SeqClient::connect(std::slice::from_ref(&a.addr), trusting(&pki, 2000))
        .await
        .unwrap();
    assert_eq!(c.next(1).await, Ok(1));
    assert_eq!(c.next(999).await, Ok(1_000_001));
    assert_eq!(c.next_batch(&[1, 999, 1]).await, Ok(vec![2, 1_000_002, 3]));
    assert_eq!(c.current(1).await, Ok(3));
    assert_eq!((a.calls(), b.calls()), (3, 2));

    // A seed written as an https:// URI is the same AllocSvr.
    let uri = format!("https://{}", a.addr);
    let c = SeqClient::connect(&[uri], trusting(&pki, 2000))
        .await
        .unwrap();
    assert_eq!(c.next(2).await, Ok(1));
}

#[tokio::test]
async fn a_server_the_ca_did_not_sign_or_plaintext_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let (a, _b) = two_tls_owners(&pki).await;
    let seeds = std::slice::from_ref(&a.addr);

    // Another cluster's CA: the handshake fails, nothing is learned.
    let other_dir = tempfile::tempdir().unwrap();
    let other = DevPki::generate(other_dir.path(), &[], false).unwrap();
    let r = SeqClient::connect(seeds, trusting(&other, 300)).await;
    assert!(matches!(r, Err(Error::Transport(_))), "{r:?}");

    // Plaintext to a TLS listener.
    let r = SeqClient::connect(seeds, quick(300)).await;
    assert!(matches!(r, Err(Error::Transport(_))), "{r:?}");

    // An http:// seed contradicts the TLS setting: refused before dialing.
    let plain_uri = format!("http://{}", a.addr);
    let r = SeqClient::connect(&[plain_uri], trusting(&pki, 300)).await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert_eq!(a.routes_calls(), 0, "no Routes call got through");
}

/// Whoever answers at an AllocSvr's address must show an AllocSvr's
/// certificate, and a seed a server's: an operator's certificate from the
/// same CA (or a store replica's, where an AllocSvr is expected) hands out
/// no number to the client.
#[tokio::test]
async fn only_an_allocsvr_certificate_hands_out_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let leaves = [
        Leaf::new("alloc-1", Role::Alloc("alloc-1".into())),
        Leaf::new("alice", Role::Operator("alice".into())),
        Leaf::new("store-1", Role::Store(seqsvr_net::StoreId::new(1, 1))),
    ];
    let pki = DevPki::generate(dir.path(), &leaves, false).unwrap();
    let a = Fake::start_tls(0, &pki.tls_config("alloc-1")).await;
    let b = Fake::start_tls(1_000_000, &pki.tls_config("store-1")).await;
    let t = table(1, 0..1000, 100, 1, &[(0, 5, &a.addr), (5, 5, &b.addr)]);
    a.set_route(t.clone());
    b.set_route(t);

    let c = SeqClient::connect(std::slice::from_ref(&a.addr), trusting(&pki, 500))
        .await
        .unwrap();
    assert_eq!(c.next(1).await, Ok(1));
    // Sections 5–9 are routed to a process presenting a store's
    // certificate: refused at the handshake, no number taken from it, and
    // the error says what came and what was expected.
    let r = c.next(999).await;
    let e = format!("{r:?}");
    assert!(r.is_err() && e.contains("an AllocSvr was expected"), "{e}");
    assert_eq!(b.calls(), 0, "no call reached the impostor");

    // A seed presenting an operator's certificate teaches nothing.
    let op = Fake::start_tls(0, &pki.tls_config("alice")).await;
    op.set_route(table(1, 0..1000, 100, 1, &[(0, 10, &op.addr)]));
    let r = SeqClient::connect(std::slice::from_ref(&op.addr), trusting(&pki, 300)).await;
    assert!(matches!(r, Err(Error::Transport(_))), "{r:?}");
    assert_eq!(op.routes_calls(), 0, "no Routes call got through");

    // A store replica's certificate is a fine seed (seeds may be stores).
    let c = SeqClient::connect(std::slice::from_ref(&b.addr), trusting(&pki, 500))
        .await
        .unwrap();
    assert_eq!(c.next(2).await, Ok(1));
}
