//! A failover drill over named counters (`docs/counters.md`) through gRPC
//! (the Rust client's `next_name`) and the Redis-protocol door (`INCR
//! name`) at once: the owner of half the name sections is paused
//! (SIGSTOP) past its lease and woken, then the other AllocSvr is killed
//! (kill -9). Each AllocSvr holds at most 16 names while 48 are called,
//! so names are forgotten and recreated all along; among them are pairs
//! of names sharing a position. Every number a client received is checked
//! per name by the monotonicity checker (promise 1 of
//! `docs/architecture/promises.md`): no repeat, no regression.

use seqsvr_testkit::{self as kit, Bins};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seqsvr_core::checker::Observation;
use seqsvr_core::rng::Rng;
use seqsvr_core::{name_key, SetSpec, NAME_KEYS};
use seqsvr_store::node::InitialAlloc;
use seqsvr_testkit::door::Door;
use seqsvr_testkit::{assert_monotonic, SetCluster, StoreCluster};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Lease + margin of the test clusters (see `kit::test_lease`).
const EXPIRY: Duration = Duration::from_millis(2500);

/// Names each AllocSvr holds at most: fewer than the drill calls.
const MAX_NAMES: usize = 16;

/// The first 8,000 positions of the name range, in 8 sections.
fn set() -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: NAME_KEYS.start,
        uid_end: NAME_KEYS.start + 8000,
        section_size: 1000,
        step: 500,
    }
}

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
    let initial = InitialAlloc::even_split(["alloc-1", "alloc-2"].map(String::from), 8);
    let store = StoreCluster::start_opts(BINS, 3, set(), initial, Default::default());
    let mut c = SetCluster {
        store,
        alloc_addrs: Vec::new(),
        allocs: Vec::new(),
        resp_addrs: Vec::new(),
        http_addrs: Vec::new(),
        forward: true,
    };
    for i in 1..=2 {
        let [addr, resp] = [(); 2].map(|_| format!("127.0.0.1:{}", kit::free_port()));
        let peers = c.store.peer_addrs.clone();
        c.allocs.push(kit::start_alloc_with(
            &c.store,
            &format!("alloc-{i}"),
            &addr,
            &peers,
            |cfg| {
                cfg.resp = Some(seqsvr_alloc::node::RespSection::on(&resp));
                cfg.max_names = MAX_NAMES;
            },
        ));
        c.alloc_addrs.push(addr);
        c.resp_addrs.push(resp);
    }
    c
}

struct Drill {
    obs: Arc<Mutex<Vec<Observation>>>,
    failed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// `clients` callers, half through gRPC and half through the doors, each
/// calling random names of `names`.
fn start_clients(
    c: &seqsvr_client::SeqClient,
    doors: &[String],
    names: &[String],
    clients: u64,
) -> Drill {
    let obs = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let names = Arc::new(names.to_vec());
    let tasks = (0..clients)
        .map(|k| {
            let (obs, failed, stop, names) =
                (obs.clone(), failed.clone(), stop.clone(), names.clone());
            let client = c.clone();
            let mut doors: Vec<Door> = (doors.iter()).map(|a| Door::new(a)).collect();
            tokio::spawn(async move {
                let mut rng = Rng::new(0x2545_f491_4f6c_dd1du64 ^ (k + 1));
                let mut prefer = 0;
                while !stop.load(Ordering::Relaxed) {
                    let x = rng.next_u64();
                    let i = (x >> 8) as usize % names.len();
                    let start = Instant::now();
                    let got = if k % 2 == 0 {
                        client.next_name(&names[i]).await.ok()
                    } else {
                        let mut got = None;
                        for j in 0..doors.len() {
                            let d = (prefer + j) % doors.len();
                            if let Some(v) = doors[d].incr(&names[i]).await {
                                (got, prefer) = (Some(v), d);
                                break;
                            }
                        }
                        got
                    };
                    match got {
                        Some(seq) => obs.lock().unwrap().push(Observation::next(
                            i as u64,
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
async fn names_through_grpc_and_the_door_across_a_pause_and_a_kill() {
    let mut cluster = cluster();
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let names = drill_names();
    let drill = start_clients(&c, &cluster.resp_addrs, &names, 8);
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
        "{} numbers of {} names, {} calls failed over",
        obs.len(),
        names.len(),
        drill.failed.load(Ordering::Relaxed)
    );
    assert_monotonic(&obs, || cluster.store.logs());
    let after_kill = killed + EXPIRY + Duration::from_millis(500);
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
