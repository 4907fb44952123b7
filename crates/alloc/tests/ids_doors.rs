//! Time-ordered ids through every door of a whole AllocSvr (in process,
//! against the fake store, which keeps id namespaces with the store's own
//! state machine): gRPC `NextId`/`DecodeId`, the Redis-protocol door's
//! `SEQ.ID`/`SEQ.DECODE`, the HTTP API with Leaf's shapes. Every id from
//! every door is unique and the ids of one worker strictly increase in
//! the order they were received; bad input is refused typed; a planned
//! stop releases the worker id and the next holder starts above it
//! (docs/ids.md).

use std::time::Duration;

use seqsvr_alloc::node::{AllocNode, RespSection};
use seqsvr_core::ids::Layout;
use seqsvr_proto::{self as pb, ErrorKind};
use tonic::Code;

use seqsvr_testkit::node::*;

const NS: &str = "msg";

async fn node(store: &FakeStore, addr: &str, id: &str) -> AllocNode {
    let (mut cfg, mut l) = node_config(id, addr, 50).await;
    open_door(&mut cfg, &mut l, RespSection::on("127.0.0.1:0")).await;
    open_http(&mut l).await;
    let _ = store;
    start_with(cfg, l).await
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_through_every_door_are_unique_and_ordered() {
    let store = FakeStore::new("a1", 3000);
    store.create_id_space(NS, Layout::twitter(), 1000);
    let addr = store.clone().serve().await;
    let a1 = node(&store, &addr, "a1").await;
    let mut c = client(&a1).await;
    let mut got: Vec<u64> = Vec::new();

    // gRPC: one, then many.
    let one = c
        .next_id(pb::NextIdRequest {
            namespace: NS.into(),
            count: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(one.ids.len(), 1);
    assert_eq!(one.worker, 0);
    got.extend(&one.ids);
    let many = c
        .next_id(pb::NextIdRequest {
            namespace: NS.into(),
            count: 5000,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!many.ids.is_empty());
    got.extend(&many.ids);
    let d = c
        .decode_id(pb::DecodeIdRequest {
            namespace: NS.into(),
            id: one.ids[0],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((d.worker, d.namespace.as_str()), (0, NS));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(d.unix_ms.abs_diff(now) < 60_000, "{} vs {now}", d.unix_ms);

    // Refusals: unknown namespace, too many, not an id of the layout.
    let e = c
        .next_id(pb::NextIdRequest {
            namespace: "nope".into(),
            count: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(kind(&e), (Code::NotFound, ErrorKind::IdRefused), "{e:?}");
    let e = c
        .next_id(pb::NextIdRequest {
            namespace: NS.into(),
            count: 100_001,
        })
        .await
        .unwrap_err();
    assert_eq!(kind(&e).1, ErrorKind::InvalidRequest, "{e:?}");
    let e = c
        .decode_id(pb::DecodeIdRequest {
            namespace: NS.into(),
            id: u64::MAX,
        })
        .await
        .unwrap_err();
    assert_eq!(kind(&e).1, ErrorKind::InvalidRequest, "{e:?}");

    // The Redis-protocol door.
    let at = a1.resp_local_addr.unwrap().to_string();
    let mut con = redis::Client::open(format!("redis://{at}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let v: u64 = redis::cmd("SEQ.ID")
        .arg(NS)
        .query_async(&mut con)
        .await
        .unwrap();
    got.push(v);
    let vs: Vec<u64> = redis::cmd("SEQ.ID")
        .arg(NS)
        .arg(100)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(vs.len(), 100);
    got.extend(&vs);
    let parts: Vec<(String, redis::Value)> = redis::cmd("SEQ.DECODE")
        .arg(v)
        .arg(NS)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(parts[0].0, "namespace");
    let bad: redis::RedisResult<u64> = redis::cmd("SEQ.ID")
        .arg(NS)
        .arg(0)
        .query_async(&mut con)
        .await;
    assert!(bad.is_err());
    let unknown: redis::RedisResult<u64> =
        redis::cmd("SEQ.ID").arg("nope").query_async(&mut con).await;
    let e = unknown.unwrap_err().to_string();
    assert!(e.contains("ID_REFUSED"), "{e}");

    // HTTP, ours and Leaf's shapes.
    let http = a1.http_local_addr.unwrap().to_string();
    let (st, body) = http_call(&http, "GET", &format!("/v1/id/{NS}")).await;
    assert_eq!(st, 200, "{body}");
    got.push(body.trim().parse().unwrap());
    let (st, body) = http_call(&http, "GET", &format!("/api/snowflake/get/{NS}")).await;
    assert_eq!(st, 200, "{body}");
    let leaf: u64 = body.parse().unwrap();
    got.push(leaf);
    let (st, body) = http_call(&http, "GET", &format!("/v1/ids/{NS}/10")).await;
    assert_eq!(st, 200, "{body}");
    for id in json(&body)["ids"].as_array().unwrap() {
        got.push(id.as_u64().unwrap());
    }
    let (st, body) = http_call(
        &http,
        "GET",
        &format!("/decodeSnowflakeId?snowflakeId={leaf}&namespace={NS}"),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let v = json(&body);
    assert_eq!(v["workerId"], "0");
    assert!(v["timestamp"].as_str().unwrap().contains('('), "{body}");
    let (st, _) = http_call(&http, "GET", "/v1/ids/msg/0").await;
    assert_eq!(st, 400);
    let (st, body) = http_call(&http, "GET", "/v1/id/nope").await;
    assert_eq!(st, 404, "{body}");

    // One worker id, every door: strictly increasing in the order received.
    assert!(got.windows(2).all(|w| w[0] < w[1]), "not increasing");

    // A planned stop releases the worker id; the next holder (another
    // AllocSvr) gets it and starts above every id issued.
    let report = a1.stop(Duration::from_secs(2)).await;
    let a2 = node(&store, &addr, "a2").await;
    let mut c2 = client(&a2).await;
    let next = c2
        .next_id(pb::NextIdRequest {
            namespace: NS.into(),
            count: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.worker, 0, "the released worker id");
    assert!(next.ids[0] > *got.last().unwrap());
    assert_eq!(report.id_workers_released, 1);
}
