//! Time-ordered ids from the real binaries while an AllocSvr's clock is
//! shifted with `faketime` and the process is killed with `kill -9`
//! (docs/ids.md, "What is guaranteed").
//!
//! A store group of three replicas and two AllocSvrs; a namespace with the
//! `twitter` layout and a 1 s window. Ids are drawn continuously through
//! gRPC: by a `SeqClient` (which moves to the other AllocSvr while one is
//! down) and by one caller per AllocSvr, so that both worker ids issue all
//! along. Meanwhile `alloc-1`, holding a worker id, is killed with
//! SIGKILL and started again:
//!
//! - `clock_set_back_across_kill9`: started again with its clock 6 s
//!   behind real time;
//! - `clock_set_forward_then_back`: started again 6 s ahead, then killed
//!   again and started with the real clock.
//!
//! The checker: every id of every worker unique; within each caller (its
//! calls one after another) each worker's ids strictly increase and their
//! decoded ticks never go back; across callers, every id of a worker
//! received before a kill lies below every id of that worker asked for
//! after the restart. The restarted AllocSvr must get its worker id back
//! (so the ordering across the restart is really tested) and its late ids
//! must carry its shifted clock (so the shift really took effect).
//!
//! Without libfaketime the tests print why and pass, unless `CI` is set:
//! then they fail (`.ci/run` installs the `faketime` package).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use seqsvr_core::ids::Layout;
use seqsvr_testkit::ids::{
    assert_every_caller_drew, create_namespace, gone, latest, libfaketime, set, start_callers,
    under, wait_issuing, Callers, Calls,
};
use seqsvr_testkit::Bins;
use seqsvr_testkit::SetCluster;

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// The namespace drawn from.
const NS: &str = "clock";

/// Its window (ms): how far ahead of the clock a holder raises its ceiling.
const WINDOW_MS: u64 = 1000;

/// How far (s) the clock is shifted: more than the lease's expiry (2.5 s,
/// `kit::test_lease`) plus the window, so that a restarted AllocSvr
/// claims its worker id again while its clock is still below the ticks
/// it issued before the kill.
const SHIFT_S: u64 = 6;

/// Ids per call.
const BATCH: u32 = 20;

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Checks every promise over every caller's ids; `faults` are the
/// (kill, restarted) instants.
fn check(callers: &[Calls], layout: &Layout, faults: &[(Instant, Instant)]) -> usize {
    let mut seen = HashSet::new();
    let mut total = 0;
    for (n, calls) in callers.iter().enumerate() {
        let calls = calls.lock().unwrap();
        // worker → (last id, last tick) within this caller.
        let mut last: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for call in calls.iter() {
            for &id in &call.ids {
                total += 1;
                assert!(seen.insert(id), "id {id} issued twice (caller {n})");
                let d = layout.decode(id).unwrap();
                if let Some(&(prev, tick)) = last.get(&d.worker) {
                    assert!(
                        id > prev,
                        "caller {n}: worker {} issued {id} after {prev}",
                        d.worker
                    );
                    assert!(
                        d.tick >= tick,
                        "caller {n}: worker {}'s tick went back from {tick} to {}",
                        d.worker,
                        d.tick
                    );
                }
                last.insert(d.worker, (id, d.tick));
            }
        }
    }
    // Across callers: per worker, ids answered before a kill lie below ids
    // asked for after the restart.
    for &(killed, restarted) in faults {
        let mut before: BTreeMap<u64, u64> = BTreeMap::new();
        let mut after: BTreeMap<u64, u64> = BTreeMap::new();
        for calls in callers {
            for call in calls.lock().unwrap().iter() {
                for &id in &call.ids {
                    let w = layout.decode(id).unwrap().worker;
                    if call.answered < killed {
                        let m = before.entry(w).or_insert(0);
                        *m = (*m).max(id);
                    } else if call.asked > restarted {
                        let m = after.entry(w).or_insert(u64::MAX);
                        *m = (*m).min(id);
                    }
                }
            }
        }
        for (w, hi) in &before {
            if let Some(lo) = after.get(w) {
                let (a, b) = (layout.decode(*hi).unwrap(), layout.decode(*lo).unwrap());
                assert!(
                    lo > hi,
                    "worker {w}: id {lo} (tick {}) after the restart is not above \
                     {hi} (tick {}) before the kill",
                    b.tick,
                    a.tick
                );
            }
        }
    }
    total
}

/// Starts the cluster and the namespace, runs `alloc-1` through `shifts`
/// (one kill -9 and restart per shift, each restart under `faketime -f
/// shift`, `""` the real clock), and checks every id drawn.
async fn drill(lib: &str, shifts: &[String]) {
    let layout = Layout::twitter();
    let mut cl = SetCluster::start(BINS, set(), 2);
    create_namespace(&cl, NS, &layout, WINDOW_MS).await;
    let client = cl.client().await;
    let start = Instant::now();
    while let Err(e) = client.next_id(NS).await {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no id: {e}\n{}",
            cl.store.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let Callers {
        all: callers,
        direct,
        tasks,
    } = start_callers(&client, &cl.alloc_addrs, NS, BATCH, &stop);
    let t0 = Instant::now();
    let worker = wait_issuing(&direct[0], t0, &layout, &cl).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut faults = Vec::new();
    for shift in shifts {
        let killed = Instant::now();
        let pid = cl.allocs[0].pid().unwrap();
        cl.allocs[0].kill9();
        assert!(gone(pid), "alloc-1 (pid {pid}) still runs after kill -9");
        cl.allocs[0].set_under(under(lib, shift));
        cl.allocs[0].restart();
        let restarted = Instant::now();
        faults.push((killed, restarted));
        let w = wait_issuing(&direct[0], restarted, &layout, &cl).await;
        assert_eq!(
            w,
            worker,
            "alloc-1 restarted ({shift:?}) with another worker id\n{}",
            cl.store.logs()
        );
        // Past the window and the shift, so that the shifted clock, not
        // the predecessor's ceiling, sets the ticks.
        tokio::time::sleep(Duration::from_millis(SHIFT_S * 1000 + WINDOW_MS + 2000)).await;
        let (w, unix_ms) = latest(&direct[0], &layout).unwrap();
        assert_eq!(w, worker);
        let shift_ms: i64 = match shift.as_str() {
            "" => 0,
            s => s.trim_end_matches('s').parse::<i64>().unwrap() * 1000,
        };
        let off = unix_ms as i64 - wall_ms() as i64;
        assert!(
            (off - shift_ms).abs() < 1500,
            "alloc-1 under {shift:?}: its ids' clock is {off} ms off real time"
        );
        eprintln!("alloc-1 restarted under {shift:?}: worker {w}, ids {off} ms off real time");
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert_every_caller_drew(&callers, check(&callers, &layout, &faults));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_set_back_across_kill9() {
    let Some(lib) = libfaketime() else { return };
    drill(&lib, &[format!("-{SHIFT_S}s")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_set_forward_then_back() {
    let Some(lib) = libfaketime() else { return };
    drill(&lib, &[format!("+{SHIFT_S}s"), String::new()]).await;
}
