//! Gray failures: part of the fencing suite (`tests/fencing/main.rs`).

use super::*;

// ---------------------------------------------------------------------
// 8. Gray failures
// ---------------------------------------------------------------------

/// One prober per section, calling the section's owner directly for one
/// uid (so its ceiling is raised every few hundred calls, also while a
/// replica is paused): every number received, and every error kind with
/// when it came.
struct Probe {
    obs: Vec<Observation>,
    errors: Vec<(Instant, String)>,
}

async fn probe(allocs: Vec<String>, until: Instant) -> Probe {
    let tasks: Vec<_> = (0..SECTIONS)
        .map(|s| {
            let addr = allocs[(s / 4) as usize].clone();
            tokio::spawn(async move {
                let mut c = AllocClient::new(channel(&addr, None, Duration::from_millis(500)));
                let (mut obs, mut errors) = (Vec::new(), Vec::new());
                while Instant::now() < until {
                    let uid = uid(s, 0);
                    let start = Instant::now();
                    match c
                        .next(pb::NextRequest {
                            uid,
                            count: 0,
                            ..Default::default()
                        })
                        .await
                    {
                        Ok(r) => {
                            let seq = r.into_inner().seq;
                            obs.push(Observation::next(uid, seq, start, Instant::now()))
                        }
                        Err(st) => {
                            errors.push((Instant::now(), Outcome::of::<()>(&Err(st)).short()))
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                (obs, errors)
            })
        })
        .collect();
    let mut p = Probe {
        obs: Vec::new(),
        errors: Vec::new(),
    };
    for t in tasks {
        let (o, e) = t.await.unwrap();
        p.obs.extend(o);
        p.errors.extend(e);
    }
    p
}

/// Pauses the replica the AllocSvrs talk to (the leader if `leader`, else
/// a follower) for twice the lease under load and checks the answers.
async fn pause_the_replica_in_use(leader: bool) {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(
        BINS,
        Options {
            order: if leader {
                StoreOrder::LeaderFirst
            } else {
                StoreOrder::FollowerFirst
            },
            ..Default::default()
        },
    )
    .await;
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let lead = cluster.wait_leader(Duration::from_secs(5)).await;
    // Which replicas serve the AllocSvrs' renewals directly: a follower's
    // count grows only with calls made to it.
    let counts = |cl: &Cluster| (0..3).map(|i| cl.renewals_served(i)).collect::<Vec<f64>>();
    let c0 = counts(&cluster);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let c1 = counts(&cluster);
    // Two AllocSvrs renew about 6 times a second; a hedge now and then
    // may reach another replica, so "talk to" means most direct calls.
    let grew: Vec<f64> = (0..3).map(|i| c1[i] - c0[i]).collect();
    let target = if leader {
        let others: f64 = (0..3).filter(|&i| i != lead).map(|i| grew[i]).sum();
        assert!(
            grew[lead] >= 4.0 && others * 4.0 <= grew[lead],
            "the AllocSvrs do not talk to the leader: {c0:?} -> {c1:?}"
        );
        lead
    } else {
        // A follower is listed first, but an AllocSvr's calls are served by
        // the leader alone (docs/architecture/security.md): the follower
        // only names the leader. Pause the follower the AllocSvrs try first.
        assert!(
            grew[lead] >= 4.0,
            "the AllocSvrs do not renew at the leader: {c0:?} -> {c1:?}"
        );
        (0..3).find(|&i| i != lead).unwrap()
    };
    let what = if leader { "leader" } else { "follower" };
    println!(
        "the AllocSvrs talk to store-{} (the {what}); renewals served {c0:?} -> {c1:?}",
        target + 1
    );

    let allocs: Vec<String> = cluster.allocs.iter().map(|a| a.client.clone()).collect();
    let start = Instant::now();
    let paused_for = LEASE * 2;
    let until = start + Duration::from_millis(1000) + paused_for + Duration::from_millis(2500);
    let prober = tokio::spawn(probe(allocs, until));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let pid = cluster.stores[target].proc.pid().unwrap();
    kit::signal(pid, libc::SIGSTOP);
    let paused = Instant::now();
    tokio::time::sleep(paused_for).await;
    kit::signal(pid, libc::SIGCONT);
    let resumed = Instant::now();
    let p = prober.await.unwrap();
    let lease_expired = p
        .errors
        .iter()
        .filter(|e| e.1.contains("LEASE_EXPIRED"))
        .count();
    let mut by_kind: std::collections::BTreeMap<&str, usize> = Default::default();
    for e in &p.errors {
        *by_kind.entry(e.1.as_str()).or_default() += 1;
    }
    let outage = attack::outage_after(
        &p.obs,
        paused,
        Some(until),
        &(0..SECTIONS).collect::<Vec<_>>(),
    );
    let during = attack::outage_after(
        &p.obs,
        paused,
        Some(resumed),
        &(0..SECTIONS).collect::<Vec<_>>(),
    );
    let new_leader = cluster.wait_leader(Duration::from_secs(10)).await;
    // The bound: the AllocSvrs serve from memory under their lease, so a
    // section waits only for a ceiling raise, which waits at most for an
    // election (election timeout up to 800 ms, a second round if the first
    // splits) after a hedge (a quarter of the 300 ms renewal) — and the
    // renewal interval before the AllocSvr tries again. 300 + 2 × 800 ms,
    // plus 1 s for a loaded 2-core machine.
    let bound = Duration::from_millis(TEST_RENEW_MS + 2 * 800 + 1000);
    println!(
        "store-{} ({what}) paused {paused_for:?}: {} numbers, {} failed calls {by_kind:?}, \
         {lease_expired} LEASE_EXPIRED; longest section gap {outage:?} (while paused {during:?}; bound {bound:?}); \
         leader now store-{}",
        target + 1,
        p.obs.len(),
        p.errors.len(),
        new_leader + 1
    );
    let (b, _) = burst(&c, 2).await;
    let mut obs = p.obs;
    obs.extend(b);
    assert_monotonic(&obs, || cluster.logs());
    assert_eq!(
        lease_expired,
        0,
        "leases lapsed while one replica was paused: {by_kind:?}\n{}",
        cluster.logs()
    );
    assert!(
        outage <= bound,
        "a section was unavailable for {outage:?} (bound {bound:?})\n{}",
        cluster.logs()
    );
}

/// Gray failure of the leader: the replica the AllocSvrs talk to, and the
/// leader, SIGSTOPped for twice the lease under load. Promise 3 is cheap
/// to keep only if a paused replica costs no lease: no LEASE_EXPIRED
/// answer, and no section unavailable longer than the renewal interval
/// plus an election (bound justified in `pause_the_replica_in_use`).
///
/// Shown to fail: with the store client's hedging switched off (each
/// replica keeps a call's whole deadline), leases lapsed during the
/// pause: 3033 LEASE_EXPIRED answers with the leader paused and 2578 with
/// the follower, and sections down for up to 2.9 s and 3.2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_store_leader_costs_no_lease() {
    pause_the_replica_in_use(true).await;
}

/// Gray failure of a follower the AllocSvrs talk to (they dial it first):
/// as for the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_follower_in_use_costs_no_lease() {
    pause_the_replica_in_use(false).await;
}
