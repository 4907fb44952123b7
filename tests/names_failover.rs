//! A failover drill over named counters (`docs/counters.md`) through gRPC
//! (the Rust client's `next_name`) and the Redis-protocol door (`INCR
//! name`) at once: the owner of half the name sections is paused
//! (SIGSTOP) past its lease and woken, then the other AllocSvr is killed
//! (kill -9). Each AllocSvr holds at most 16 names while 48 are called,
//! so names are forgotten and recreated all along; among them are pairs
//! of names sharing a position. Every number a client received is checked
//! per name by the monotonicity checker (promise 1 of
//! `docs/architecture/promises.md`): no repeat, no regression.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use seqsvr_core::name_key;
use seqsvr_core::rng::Rng;
use seqsvr_testkit::door::Doors;
use seqsvr_testkit::{assert_monotonic, name_set as set, Bins, SetCluster, Workload, TEST_EXPIRY};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Names each AllocSvr holds at most: fewer than the drill calls.
const MAX_NAMES: usize = 16;

/// 40 names served by the set, and 4 pairs of names sharing a position.
fn drill_names() -> Vec<String> {
    let end = set().uid_end;
    let served = |n: &String| name_key(n.as_bytes()).unwrap() < end;
    let mut names: Vec<String> = (0u64..)
        .map(|i| format!("drill:{i}"))
        .filter(served)
        .take(40)
        .collect();
    let mut at: HashMap<u64, String> = HashMap::new();
    let mut pairs = 0;
    for n in (0u64..).map(|i| format!("pair:{i}")).filter(served) {
        let k = name_key(n.as_bytes()).unwrap();
        if let Some(other) = at.insert(k, n.clone()) {
            names.extend([other, n]);
            at.remove(&k);
            pairs += 1;
            if pairs == 4 {
                return names;
            }
        }
    }
    unreachable!()
}

/// A set of two AllocSvrs with doors, each holding at most [`MAX_NAMES`].
fn cluster() -> SetCluster {
    SetCluster::start_tuned(BINS, set(), 2, |cfg| cfg.max_names = MAX_NAMES)
}

/// `clients` callers, half through gRPC and half through the doors, each
/// calling random names of `names` (a number is checked per name index).
fn start_clients(
    c: &seqsvr_client::SeqClient,
    doors: &[String],
    names: &[String],
    clients: u64,
) -> Workload {
    let mut w = Workload::new();
    let names = std::sync::Arc::new(names.to_vec());
    w.tasks = (0..clients)
        .map(|k| {
            let (r, names, client) = (w.recorder(), names.clone(), c.clone());
            let mut doors = Doors::new(doors);
            tokio::spawn(async move {
                let mut rng = Rng::new(0x2545_f491_4f6c_dd1du64 ^ (k + 1));
                while !r.stopped() {
                    let x = rng.next_u64();
                    let i = (x >> 8) as usize % names.len();
                    let start = Instant::now();
                    let got = if k % 2 == 0 {
                        client.next_name(&names[i]).await.ok()
                    } else {
                        doors.incr(&names[i]).await
                    };
                    if !r.record_next(i as u64, got, start) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            })
        })
        .collect();
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_through_grpc_and_the_door_across_a_pause_and_a_kill() {
    let mut cluster = cluster();
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let names = drill_names();
    let drill = start_clients(&c, &cluster.resp_addrs, &names, 8);
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // The owner of sections 0..4 paused past its lease (they move), then
    // the other one (owning everything now) killed: every section moves
    // back to the one that was paused.
    let killed = cluster.pause_then_kill().await;

    let (obs, failed) = drill.finish().await;
    println!(
        "{} numbers of {} names, {failed} calls failed over",
        obs.len(),
        names.len()
    );
    assert_monotonic(&obs, || cluster.store.logs());
    let after_kill = killed + TEST_EXPIRY + Duration::from_millis(500);
    let served: std::collections::BTreeSet<u64> = (obs.iter())
        .filter(|o| o.start > after_kill)
        .map(|o| o.uid)
        .collect();
    assert_eq!(
        served.len(),
        names.len(),
        "not every name served after the kill\n{}",
        cluster.store.logs()
    );
}
