//! Named counters through the Redis-protocol door of a whole AllocSvr (in
//! process, against the fake store, whose set serves the first positions
//! of the range reserved for names): `INCR`, `INCRBY` and `GET` on string
//! keys the uid mapping does not claim (`docs/counters.md`). Concurrent
//! `INCRBY`s of one name from many connections never overlap, and every
//! number received goes through the per-key checker (promise 1).

use std::time::Instant;

use seqsvr_alloc::node::{AllocNode, RespSection};
use seqsvr_core::checker::{check, Observation};
use seqsvr_core::{name_key, NAME_KEYS};

use seqsvr_testkit::node::*;

/// Names whose positions the fake store's set serves.
fn names(count: usize) -> Vec<String> {
    let end = spec_at(NAME_KEYS.start).uid_end;
    (0u64..)
        .map(|i| format!("order:{i}"))
        .filter(|n| name_key(n.as_bytes()).unwrap() < end)
        .take(count)
        .collect()
}

async fn with_door() -> (FakeStore, AllocNode, String) {
    let store = FakeStore::at("a1", 30_000, NAME_KEYS.start);
    let addr = store.clone().serve().await;
    let (mut cfg, mut l) = node_config("a1", &addr, 50).await;
    let door = RespSection::on("127.0.0.1:0");
    open_door(&mut cfg, &mut l, door).await;
    let node = start_with(cfg, l).await;
    let at = node.resp_local_addr.expect("the door is on").to_string();
    (store, node, at)
}

async fn conn(at: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{at}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_through_the_redis_door_never_overlap_nor_go_back() {
    let (_store, node, at) = with_door().await;
    let names = names(3);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..8u64 {
        let (at, names) = (at.clone(), names.clone());
        tasks.push(tokio::spawn(async move {
            let mut con = conn(&at).await;
            let mut obs = Vec::new();
            for i in 0..150u64 {
                let k = ((c + i) % 3) as usize;
                let n = 1 + (c * 5 + i) % 9;
                let start = t0.elapsed();
                let v: u64 = if n == 1 {
                    redis::cmd("INCR")
                        .arg(&names[k])
                        .query_async(&mut con)
                        .await
                        .unwrap()
                } else {
                    redis::cmd("INCRBY")
                        .arg(&names[k])
                        .arg(n)
                        .query_async(&mut con)
                        .await
                        .unwrap()
                };
                let end = t0.elapsed();
                for seq in v + 1 - n..=v {
                    obs.push(Observation::next(k as u64, seq, start, end));
                }
            }
            obs
        }));
    }
    let mut obs = Vec::new();
    for t in tasks {
        obs.extend(t.await.unwrap());
    }
    let report = check(&obs);
    assert!(report.ok(), "{report:?}");
    // Every number of every name went to exactly one caller.
    for k in 0..3u64 {
        let mut seqs: Vec<u64> = obs.iter().filter(|o| o.uid == k).map(|o| o.seq).collect();
        let len = seqs.len();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), len, "name {k}: a number went to two callers");
    }
    // GET reads without handing out; a bad name is a typed error.
    let mut con = conn(&at).await;
    let before: String = redis::cmd("GET")
        .arg(&names[0])
        .query_async(&mut con)
        .await
        .unwrap();
    let next: u64 = redis::cmd("INCR")
        .arg(&names[0])
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(next, before.parse::<u64>().unwrap() + 1);
    let e = redis::cmd("INCR")
        .arg(vec![b'k'; 257])
        .query_async::<u64>(&mut con)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("a name is 1..=256 bytes, not 257"), "{e}");
    node.shutdown();
}
