//! Whom a client dials: a server's certificate from the cluster's CA must
//! also name the role the caller expects of it.

use crate::common::*;
use seqsvr_net::{ClientTls, Plane, ServerRole};
use std::error::Error as _;
use tonic::Status;
use tonic_health::pb::health_check_response::ServingStatus;

/// A peer-plane server presenting `name`'s certificate.
async fn server(pki: &Pki, name: &str) -> Served {
    let tls = pki.server(name, Plane::Peer);
    serve(Plane::Peer, &quick(Plane::Peer), Some(&tls), |mut b| {
        b.add_service(health())
    })
    .await
}

/// The whole chain of causes of a failed call, as one string.
fn causes(e: &Status) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

async fn dial(s: &Served, tls: &ClientTls) -> Result<ServingStatus, Status> {
    check(&channel(s.addr, Some(tls)), "").await
}

/// A refusal: no connection, and the error says what the server presented
/// and what was expected.
async fn refused(s: &Served, tls: &ClientTls, found: &str, expected: &str) {
    let e = dial(s, tls).await.unwrap_err();
    assert_no_connection(&e);
    let text = causes(&e);
    let want = format!("presented {found}; {expected} was expected");
    assert!(
        text.contains(&want) && text.contains(&s.addr.to_string()),
        "{text}"
    );
}

/// An AllocSvr's certificate cannot answer for a store replica: the
/// client expecting a store refuses the handshake; the same client takes a
/// store's certificate, and one expecting an AllocSvr takes the AllocSvr.
#[tokio::test]
async fn an_alloc_certificate_cannot_pass_for_a_store() {
    let pki = Pki::new();
    let alloc = server(&pki, "a1").await;
    let store = server(&pki, "store-1").await;
    let to_store = pki.client("a2").expecting(ServerRole::AnyStore);
    let to_alloc = pki.client("a2").expecting(ServerRole::Alloc);

    refused(
        &alloc,
        &to_store,
        "an alloc certificate (alloc:a1)",
        "a store replica",
    )
    .await;
    assert_eq!(
        dial(&store, &to_store).await.unwrap(),
        ServingStatus::Serving
    );
    assert_eq!(
        dial(&alloc, &to_alloc).await.unwrap(),
        ServingStatus::Serving
    );
    refused(
        &store,
        &to_alloc,
        "a store certificate (store:0:1)",
        "an AllocSvr",
    )
    .await;
    // Without an expectation, any certificate of the CA is taken.
    assert_eq!(
        dial(&alloc, &pki.client("alice")).await.unwrap(),
        ServingStatus::Serving
    );
    alloc.stop().await;
    store.stop().await;
}

/// A replica of another set cannot answer for one of this set.
#[tokio::test]
async fn another_sets_store_cannot_pass_for_this_sets() {
    let pki = Pki::new();
    let set0 = server(&pki, "store-1").await;
    let set1 = server(&pki, "set1-store-4").await;
    let of_set0 = pki.client("store-2").expecting(ServerRole::Store(0));

    assert_eq!(dial(&set0, &of_set0).await.unwrap(), ServingStatus::Serving);
    refused(
        &set1,
        &of_set0,
        "a store certificate (store:1:4)",
        "a store replica of set 0",
    )
    .await;
    let of_set1 = pki.client("a1").expecting(ServerRole::Store(1));
    assert_eq!(dial(&set1, &of_set1).await.unwrap(), ServingStatus::Serving);
    // Kind only: either set's replica passes.
    let any = pki.client("alice").expecting(ServerRole::AnyStore);
    assert_eq!(dial(&set0, &any).await.unwrap(), ServingStatus::Serving);
    assert_eq!(dial(&set1, &any).await.unwrap(), ServingStatus::Serving);
    set0.stop().await;
    set1.stop().await;
}
