//! Lease terms and a leader change: part of the fencing suite (`tests/fencing/main.rs`).

use super::*;

// ---------------------------------------------------------------------
// 6. Lease terms and a leader change
// ---------------------------------------------------------------------

/// Promise 3 across a change of lease terms and of leader: the terms are
/// replicated, and a new leader waits the longer of the current and the
/// replaced terms' lease + margin before moving anything.
///
/// The check: the terms go up to a 6 s lease (6.6 s with margin), then —
/// with alloc-1 paused, holding a lease granted under them — down to 1 s
/// (1.25 s), and the store leader is killed. alloc-1 is resumed 4.5 s
/// after the pause: past the new terms, within the old ones, so it can
/// still serve from memory. A new leader judging by the new terms alone
/// moves alloc-1's sections about 1.25 s into its office (elected within
/// about a second of the kill), before alloc-1 resumes; the right one
/// waits 6.6 s, by when the resumed alloc-1 has renewed. So: sections 0..4 must never leave alloc-1, and the
/// requests queued at alloc-1 while it was stopped (answered from its
/// memory when it resumes) plus the workload pass the checker.
///
/// Shown to fail: with `LeaseState::office_wait_ms` returning only the
/// current terms' expiry, the new leader moved sections 0..4 to alloc-2
/// 3.1 s after the pause, and the resumed alloc-1 answered a queued call
/// with 324 after alloc-2 had handed out 511 for that uid: 1 regression
/// (and the "moved while its old-terms lease ran" assertion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_lease_and_a_new_leader_move_nothing_early() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (mut cluster, c) = ready().await;
    let read = cluster.store.read();
    let admin = cluster.store.admin();
    let w = start_load(&c, 6);
    let long = LeaseTerms {
        lease_ms: 6000,
        margin_ms: 600,
    };
    let short = LeaseTerms {
        lease_ms: 1000,
        margin_ms: 250,
    };
    // A leader changes terms only after a full wait in office.
    let start = Instant::now();
    loop {
        match admin.set_lease(long).await {
            Ok(t) if t == long => break,
            r => assert!(
                start.elapsed() < Duration::from_secs(20),
                "set_lease: {r:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And not again before 6.6 s: alloc-1 renews under the long terms
    // meanwhile.
    tokio::time::sleep(Duration::from_millis(long.expiry_ms() + 300)).await;
    let ch = channel(&cluster.alloc_addrs[0], None, Duration::from_secs(15));
    let mut a1 = AllocClient::new(ch);
    a1.status(pb::AllocStatusRequest {}).await.unwrap();
    let before = owners(&read).await;

    let leader = cluster.store.wait_ready(Duration::from_secs(5)).await;
    let pid = cluster.allocs[0].pid().unwrap();
    kit::signal(pid, libc::SIGSTOP);
    let paused = Instant::now();
    let start = Instant::now();
    loop {
        match admin.set_lease(short).await {
            Ok(t) if t == short => break,
            r => assert!(start.elapsed() < Duration::from_secs(2), "set_lease: {r:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.store.procs[leader].kill9();
    println!(
        "terms 6000+600 -> 1000+250, leader store-{} killed {:?} after alloc-1 paused",
        leader + 1,
        paused.elapsed()
    );

    // Watch the routes through the new office's whole wait.
    let watch = {
        let read = cluster.store.read();
        tokio::spawn(async move {
            let mut moved = Vec::new();
            let until = Instant::now() + Duration::from_millis(long.expiry_ms() + 2500);
            while Instant::now() < until {
                if let Ok(r) = read.routes().await {
                    for s in 0..4 {
                        if let Some(e) = r.entry_for_section(s) {
                            if e.alloc != "alloc-1" {
                                moved.push((s, e.alloc.clone(), paused.elapsed()));
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            moved
        })
    };
    // Requests queued at the stopped alloc-1, answered from its memory the
    // moment it resumes, 4.5 s after the pause (its lease, sent before the
    // pause, runs until about 6 s).
    tokio::time::sleep(Duration::from_millis(4300).saturating_sub(paused.elapsed())).await;
    let queued: Vec<_> = uids_of(0..4)
        .into_iter()
        .map(|uid| {
            let mut a1 = a1.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                let r = a1
                    .next(kit::from_memory(pb::NextRequest {
                        uid,
                        count: 0,
                        ..Default::default()
                    }))
                    .await;
                r.ok()
                    .map(|r| Observation::next(uid, r.into_inner().seq, start, Instant::now()))
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(4500).saturating_sub(paused.elapsed())).await;
    kit::signal(pid, libc::SIGCONT);
    println!("alloc-1 resumed {:?} after the pause", paused.elapsed());
    let mut resumed = Vec::new();
    for t in queued {
        resumed.extend(t.await.unwrap());
    }
    let moved = watch.await.unwrap();
    let (b, _) = burst(&c, 3).await;
    let (mut obs, _) = w.finish().await;
    obs.extend(b);
    obs.extend(&resumed);
    println!(
        "alloc-1 answered {} of {} queued calls on resuming; sections moved meanwhile: {:?}",
        resumed.len(),
        SECTIONS / 2 * attack::UIDS_PER_SECTION as u32,
        moved.first()
    );
    assert_monotonic(&obs, || cluster.store.logs());
    assert!(
        moved.is_empty(),
        "sections of alloc-1 moved while its old-terms lease ran: {moved:?}"
    );
    let now = owners(&read).await;
    for s in 0..4 {
        assert_eq!(now[s].0.as_deref(), Some("alloc-1"), "section {s}: {now:?}");
    }
    assert_eq!(
        before[0..4].iter().map(|o| &o.0).collect::<Vec<_>>(),
        now[0..4].iter().map(|o| &o.0).collect::<Vec<_>>()
    );
    let st = read.leader_status().await.unwrap();
    assert_eq!(
        (st.lease_ms, st.margin_ms),
        (short.lease_ms, short.margin_ms)
    );
}
