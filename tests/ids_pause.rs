//! Time-ordered ids from the real binaries while the AllocSvr holding a
//! worker id is paused (SIGSTOP) past its lease, its worker id is taken
//! by a successor, and it is resumed (docs/ids.md, "What is guaranteed").
//!
//! A store group of three replicas and two AllocSvrs; a `twitter`
//! namespace with a 1 s window. `alloc-1` runs with its clock 10 s ahead
//! (libfaketime), so the ids it issued before the pause carry ticks the
//! real clock reaches only later: a successor that started at its own
//! clock instead of above the ceiling would issue below them. Callers draw
//! continuously: two through a `SeqClient` (which moves to another
//! AllocSvr while one does not answer) and one per AllocSvr. Then:
//!
//! 1. `alloc-1` is stopped with SIGSTOP and stays stopped well past its
//!    lease;
//! 2. a third AllocSvr starts and, asked for ids, takes `alloc-1`'s worker
//!    id (the store reclaims it: the lease certainly expired);
//! 3. `alloc-1` is resumed with SIGCONT and asked for ids again.
//!
//! The checker, over every id any caller received: unique; each worker
//! id's ids strictly increasing in real time (an id answered before
//! another of the same worker id was asked for is below it), which also
//! orders the holdings (all of `alloc-1`'s ids of the worker id below all
//! of its successor's). The successor must really have taken the worker
//! id, and `alloc-1` must really have answered after the resume.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use seqsvr_core::ids::Layout;
use seqsvr_testkit::ids::{
    assert_every_caller_drew, create_namespace, draw_direct, libfaketime, set, start_callers,
    under, wait_issuing, Call, Callers, Calls,
};
use seqsvr_testkit::SetCluster;
use seqsvr_testkit::{self as kit, Bins};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// The namespace drawn from.
const NS: &str = "pause";
/// Its window (ms).
const WINDOW_MS: u64 = 1000;
/// How far ahead `alloc-1`'s clock runs: more than the pause and the
/// successor's claim after it, so that its last ids lie above the
/// successor's clock.
const AHEAD: &str = "+10s";
/// Ids per call.
const BATCH: u32 = 20;

/// Every id unique, and per worker id strictly increasing in real time:
/// for calls `a`, `b` with `a` answered before `b` was asked, every id of
/// worker `w` in `a` is below every id of `w` in `b`. Returns the number
/// of ids checked.
fn check(callers: &[Calls], layout: &Layout) -> usize {
    let mut seen = HashSet::new();
    // Per call: when, and per worker id its lowest and highest id.
    type Span = (Instant, Instant, BTreeMap<u64, (u64, u64)>);
    let mut spans: Vec<Span> = Vec::new();
    for (n, calls) in callers.iter().enumerate() {
        for Call {
            asked,
            answered,
            ids,
        } in calls.lock().unwrap().iter()
        {
            let mut per: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
            for &id in ids {
                assert!(seen.insert(id), "id {id} issued twice (caller {n})");
                let w = layout.decode(id).unwrap().worker;
                let e = per.entry(w).or_insert((id, id));
                e.0 = e.0.min(id);
                e.1 = e.1.max(id);
            }
            spans.push((*asked, *answered, per));
        }
    }
    // Sweep: calls by the time they were asked; the highest id per worker
    // among the calls answered before.
    let mut by_answer: Vec<usize> = (0..spans.len()).collect();
    by_answer.sort_by_key(|&i| spans[i].1);
    let mut by_ask: Vec<usize> = (0..spans.len()).collect();
    by_ask.sort_by_key(|&i| spans[i].0);
    let mut done: BTreeMap<u64, u64> = BTreeMap::new();
    let mut k = 0;
    for &b in &by_ask {
        while k < by_answer.len() && spans[by_answer[k]].1 < spans[b].0 {
            for (&w, &(_, hi)) in &spans[by_answer[k]].2 {
                let m = done.entry(w).or_insert(0);
                *m = (*m).max(hi);
            }
            k += 1;
        }
        for (&w, &(lo, _)) in &spans[b].2 {
            if let Some(&hi) = done.get(&w) {
                let (x, y) = (layout.decode(hi).unwrap(), layout.decode(lo).unwrap());
                assert!(
                    lo > hi,
                    "worker {w}: id {lo} (tick {}) asked for after {hi} (tick {}) was answered",
                    y.tick,
                    x.tick
                );
            }
        }
    }
    seen.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_past_the_lease_while_a_successor_takes_its_worker_id() {
    let Some(lib) = libfaketime() else { return };
    let layout = Layout::twitter();
    let mut cl = SetCluster::start(BINS, set(), 2);
    // alloc-1 runs ahead of real time from the start.
    cl.allocs[0].kill9();
    cl.allocs[0].set_under(under(&lib, AHEAD));
    cl.allocs[0].restart();
    create_namespace(&cl, NS, &layout, WINDOW_MS).await;
    let client = cl.client().await;

    let stop = Arc::new(AtomicBool::new(false));
    let Callers {
        all: mut callers,
        direct,
        mut tasks,
    } = start_callers(&client, &cl.alloc_addrs, NS, BATCH, &stop);
    let worker = wait_issuing(&direct[0], Instant::now(), &layout, &cl).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. Paused well past its lease (expiry 2.5 s, `kit::test_lease`).
    let pid = cl.allocs[0].pid().unwrap();
    kit::signal(pid, libc::SIGSTOP);
    let paused = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;

    // 2. A successor takes its worker id (reclaimed: the lease certainly
    // expired).
    let i = cl.add_alloc();
    let (c, h) = draw_direct(cl.alloc_addrs[i].clone(), NS, BATCH, stop.clone());
    callers.push(c.clone());
    tasks.push(h);
    let w = wait_issuing(&c, paused, &layout, &cl).await;
    assert_eq!(
        w,
        worker,
        "the successor did not take alloc-1's worker id\n{}",
        cl.store.logs()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 3. Resumed: it must answer again (from another worker id).
    kit::signal(pid, libc::SIGCONT);
    let resumed = Instant::now();
    let again = wait_issuing(&direct[0], resumed, &layout, &cl).await;
    eprintln!("alloc-1 paused with worker {worker}; resumed with worker {again}");
    tokio::time::sleep(Duration::from_secs(2)).await;

    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert_every_caller_drew(&callers, check(&callers, &layout));
}
