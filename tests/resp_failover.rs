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

use seqsvr_testkit::{self as kit, Bins};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seqsvr_core::checker::Observation;
use seqsvr_core::rng::Rng;
use seqsvr_core::SetSpec;
use seqsvr_testkit::door::Door;
use seqsvr_testkit::{assert_monotonic, SetCluster};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Lease + margin of the test clusters (see `kit::test_lease`).
const EXPIRY: Duration = Duration::from_millis(2500);

fn set() -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: 8000,
        section_size: 1000,
        step: 500,
    }
}

struct Drill {
    obs: Arc<Mutex<Vec<Observation>>>,
    failed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn start_clients(doors: &[String], clients: u64) -> Drill {
    let obs = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = (0..clients)
        .map(|k| {
            let (obs, failed, stop) = (obs.clone(), failed.clone(), stop.clone());
            let mut doors: Vec<Door> = doors.iter().map(|a| Door::new(a)).collect();
            tokio::spawn(async move {
                let mut rng = Rng::new(0x2545_f491_4f6c_dd1du64 ^ (k + 1));
                let mut prefer = 0;
                while !stop.load(Ordering::Relaxed) {
                    let x = rng.next_u64();
                    let uid = (x % 8) * 1000 + (x >> 8) % 16;
                    let key = format!("seq:{uid}");
                    let start = Instant::now();
                    let mut got = None;
                    for i in 0..doors.len() {
                        let d = (prefer + i) % doors.len();
                        if let Some(v) = doors[d].incr(&key).await {
                            got = Some(v);
                            prefer = d;
                            break;
                        }
                    }
                    match got {
                        Some(seq) => obs.lock().unwrap().push(Observation::next(
                            uid,
                            seq,
                            start,
                            Instant::now(),
                        )),
                        None => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            })
        })
        .collect();
    Drill {
        obs,
        failed,
        stop,
        tasks,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incr_through_the_door_across_a_pause_and_a_kill() {
    let mut cluster = SetCluster::start(BINS, set(), 2);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let drill = start_clients(&cluster.resp_addrs, 8);
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // The owner of sections 0..4 paused past its lease: they move.
    let pid = cluster.allocs[0].pid().unwrap();
    kit::signal(pid, libc::SIGSTOP);
    tokio::time::sleep(EXPIRY * 2).await;
    kit::signal(pid, libc::SIGCONT);
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // Then the other one (owning everything now) is killed: every
    // section moves back to the one that was paused.
    cluster.allocs[1].kill9();
    let killed = Instant::now();
    tokio::time::sleep(EXPIRY * 2 + Duration::from_secs(1)).await;

    drill.stop.store(true, Ordering::Relaxed);
    for t in drill.tasks {
        t.await.unwrap();
    }
    let obs = std::mem::take(&mut *drill.obs.lock().unwrap());
    println!(
        "{} numbers through the door, {} calls failed over",
        obs.len(),
        drill.failed.load(Ordering::Relaxed)
    );
    assert_monotonic(&obs, || cluster.store.logs());
    let served_after_kill: std::collections::BTreeSet<u32> = obs
        .iter()
        .filter(|o| o.start > killed + EXPIRY + Duration::from_millis(500))
        .filter_map(|o| set().section_of(o.uid))
        .collect();
    assert_eq!(
        served_after_kill.len(),
        8,
        "not every section served through the door after the kill\n{}",
        cluster.store.logs()
    );
}
