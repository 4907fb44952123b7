//! A failover drill through the Redis-protocol door: clients `INCR` with
//! the `redis` crate while the owner of half the sections is paused
//! (SIGSTOP) past its lease, woken, and then the other AllocSvr is killed
//! (kill -9). Every number a client received is checked per uid by the
//! monotonicity checker (promise 1): no repeat, no regression, across
//! both faults and both doors.
//!
//! A client here knows every door and tries the next one when a door
//! refuses (`TRYAGAIN NOT_OWNER …`), hangs or drops the connection: the
//! door answers for the sections its AllocSvr owns.

use std::time::{Duration, Instant};

use seqsvr_core::rng::Rng;
use seqsvr_testkit::attack::set;
use seqsvr_testkit::door::Doors;
use seqsvr_testkit::{assert_monotonic, Bins, SetCluster, Workload, TEST_EXPIRY};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// `clients` callers, each `INCR`ing 16 uids of every section through
/// whichever door answers.
fn start_clients(doors: &[String], clients: u64) -> Workload {
    let mut w = Workload::new();
    w.tasks = (0..clients)
        .map(|k| {
            let r = w.recorder();
            let mut doors = Doors::new(doors);
            tokio::spawn(async move {
                let mut rng = Rng::new(0x2545_f491_4f6c_dd1du64 ^ (k + 1));
                while !r.stopped() {
                    let x = rng.next_u64();
                    let uid = (x % 8) * 1000 + (x >> 8) % 16;
                    let start = Instant::now();
                    let got = doors.incr(&format!("seq:{uid}")).await;
                    if !r.record_next(uid, got, start) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            })
        })
        .collect();
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incr_through_the_door_across_a_pause_and_a_kill() {
    drill(SetCluster::start(BINS, set(), 2)).await;
}

/// The same drill with both doors busy-polling between rounds
/// (`spin_us`): a door that never sleeps while its clients come, paused
/// and killed in the middle of its spin, answers the same numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_door_across_a_pause_and_a_kill() {
    drill(SetCluster::start_tuned(BINS, set(), 2, |cfg| {
        if let Some(door) = cfg.resp.as_mut() {
            door.spin_us = 200;
        }
    }))
    .await;
}

async fn drill(mut cluster: SetCluster) {
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let drill = start_clients(&cluster.resp_addrs, 8);
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // The owner of sections 0..4 paused past its lease (they move), then
    // the other one (owning everything now) killed: every section moves
    // back to the one that was paused.
    let killed = cluster.pause_then_kill().await;

    let (obs, failed) = drill.finish().await;
    println!(
        "{} numbers through the door, {failed} calls failed over",
        obs.len()
    );
    assert_monotonic(&obs, || cluster.store.logs());
    let served_after_kill: std::collections::BTreeSet<u32> = obs
        .iter()
        .filter(|o| o.start > killed + TEST_EXPIRY + Duration::from_millis(500))
        .filter_map(|o| set().section_of(o.uid))
        .collect();
    assert_eq!(
        served_after_kill.len(),
        8,
        "not every section served through the door after the kill\n{}",
        cluster.store.logs()
    );
}
