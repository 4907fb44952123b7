//! `serve_one`: a plane serving a single service with no router.

use crate::common::*;
use seqsvr_net::Plane;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// Serves `health()` alone on `plane` through `serve_one`.
async fn serve_one(plane: Plane, tls: Option<&seqsvr_net::ServerTls>) -> Served {
    start(plane, &quick(plane), tls, |l, stop| {
        let server = l.server();
        l.serve_one(server, health(), stop)
    })
    .await
}

/// A unary call with a health request to any `path`.
async fn call_path(ch: &Channel, path: &'static str) -> Result<HealthCheckResponse, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(ch.clone());
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    let req = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    grpc.unary(req, PathAndQuery::from_static(path), codec)
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn one_service_is_served_and_other_paths_are_unimplemented() {
    let s = serve_one(Plane::Client, None).await;
    let ch = channel(s.addr, None);
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    for path in [
        "/grpc.health.v1.Health/NoSuchMethod",
        "/seqsvr.v1.AllocPeer/Adopt",
        "/",
    ] {
        let e = call_path(&ch, path).await.unwrap_err();
        assert_eq!(e.code(), Code::Unimplemented, "{path}: {e:?}");
    }
    // The plane's own limits still hold without the router.
    let e = check(&ch, &"x".repeat(70_000)).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    // And the connection is still good.
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    assert_eq!(s.conns.accepted(), 1);
    s.stop().await;
}

#[tokio::test]
async fn one_service_with_tls() {
    let pki = Pki::new();
    let tls = pki.server("store-1", Plane::Client);
    let s = serve_one(Plane::Client, Some(&tls)).await;
    let ch = channel(s.addr, Some(&pki.server_only()));
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    // Plaintext to a TLS listener gets no answer.
    assert!(check(&channel(s.addr, None), "").await.is_err());
    s.stop().await;
}
