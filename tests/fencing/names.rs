//! Renew and raise in another AllocSvr's name: part of the fencing suite (`tests/fencing/main.rs`).

use super::*;

// ---------------------------------------------------------------------
// 7. Renew / raise in another AllocSvr's name
// ---------------------------------------------------------------------

/// Promises 3 and 4, plaintext: the store takes the name it is given, so
/// only the incarnation tells a ghost from the live process. Renewals,
/// take-overs, raises and handoffs naming alloc-1 with a wrong incarnation
/// (or alloc-2's) are refused with STALE_INCARNATION; a raise of more
/// than one step, even with the right incarnation and epoch, with
/// STEP_TOO_LARGE. alloc-1 keeps its incarnation, lease and sections.
///
/// Shown to fail: with `SetState::check_incarnation` accepting any
/// incarnation, both forged renewals were granted (with alloc-1's section
/// list) and the forged take-over began a new epoch of section 0; with
/// `MAX_STEPS_PER_RAISE` = 3 the raise by two steps and one landed
/// (`Ok(1501)`). The test stops at the typed-error assertions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_and_raise_in_another_allocs_name_are_refused() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (cluster, c) = ready().await;
    let read = cluster.store.read();
    let peer = cluster.store.peer();
    let (a1, a2) = (
        alloc_lease(&read, "alloc-1").await,
        alloc_lease(&read, "alloc-2").await,
    );
    let w = start_load(&c, 6);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let s0 = read.read_sections(0, 1).await.unwrap().remove(0).record;
    let ghost = a1.incarnation ^ 0x00ff_00ff;
    let mut results: Vec<(&str, Result<String, Error>)> = Vec::new();
    let sh = |r: Result<String, Error>| r;
    results.push((
        "renew, wrong incarnation",
        sh(peer.renew("alloc-1", ghost).await.map(|r| format!("{r:?}"))),
    ));
    results.push((
        "renew, alloc-2's incarnation",
        sh(peer
            .renew("alloc-1", a2.incarnation)
            .await
            .map(|r| format!("{r:?}"))),
    ));
    results.push((
        "raise, wrong incarnation",
        sh(peer
            .raise("alloc-1", ghost, 0, s0.epoch, s0.max_seq + 1)
            .await
            .map(|m| m.to_string())),
    ));
    results.push((
        "take-over, wrong incarnation",
        sh(peer
            .take_over("alloc-1", ghost, 0, vec![s0.epoch])
            .await
            .map(|g| format!("{g:?}"))),
    ));
    results.push((
        "handoff, wrong incarnation",
        sh(peer
            .handoff("alloc-1", ghost, "alloc-2", 0, s0.epoch)
            .await
            .map(|g| format!("{:?}", g.0))),
    ));
    // More than one step (two plus one: still more than one if a genuine
    // raise lands in between), right incarnation and epoch.
    let cur = read.read_sections(0, 1).await.unwrap()[0].record.max_seq;
    let big = peer
        .raise("alloc-1", a1.incarnation, 0, s0.epoch, cur + 2 * STEP + 1)
        .await;
    for (what, r) in &results {
        println!("{what}: {r:?}");
    }
    println!("raise by 2 steps + 1: {big:?}");
    let own = direct_next(
        &a1.addr,
        None,
        &uids_of([0]),
        Instant::now() + Duration::from_millis(500),
    )
    .await;
    let (b, _) = burst(&c, 3).await;
    let (mut obs, _) = w.finish().await;
    obs.extend(b);
    obs.extend(&own);
    assert_monotonic(&obs, || cluster.store.logs());
    for (what, r) in &results {
        assert!(
            matches!(r, Err(Error::Rejected(Rejection::StaleIncarnation { .. }))),
            "{what}: {r:?}"
        );
    }
    assert!(
        matches!(big, Err(Error::Rejected(Rejection::TooLarge { .. }))),
        "{big:?}"
    );
    let now = alloc_lease(&read, "alloc-1").await;
    assert_eq!(now.incarnation, a1.incarnation);
    assert!(!now.fenced && !now.expired);
    assert!(
        own.len() > 10,
        "alloc-1 stopped serving ({} numbers)",
        own.len()
    );
    let s = read.read_sections(0, 1).await.unwrap().remove(0).record;
    assert_eq!((s.owner.as_deref(), s.epoch), (Some("alloc-1"), s0.epoch));
}

/// Promise 3 with TLS: alloc X may act only as X. alloc-1's certificate
/// calling Renew, Raise, TakeOver, Handoff and RegisterAlloc as alloc-2,
/// with alloc-2's real incarnation and epochs, is refused with
/// PERMISSION_DENIED; alloc-1's own certificate with a wrong incarnation
/// gets STALE_INCARNATION, and a raise of more than one step
/// STEP_TOO_LARGE.
///
/// Shown to fail: with `Auth::require_alloc` passing any AllocSvr role,
/// alloc-1's certificate renewed, raised, took over and registered as
/// alloc-2 (all OK; the take-over began a new epoch of alloc-2's section
/// 4); the test stops at the PERMISSION_DENIED assertions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_an_alloc_certificate_acts_only_as_its_alloc() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(
        BINS,
        Options {
            tls: true,
            ..Default::default()
        },
    )
    .await;
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let read = cluster.read();
    let (a1, a2) = (
        alloc_lease(&read, "alloc-1").await,
        alloc_lease(&read, "alloc-2").await,
    );
    let w = start_load(&c, 6);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let s4 = read.read_sections(4, 1).await.unwrap().remove(0).record;
    let s0 = read.read_sections(0, 1).await.unwrap().remove(0).record;
    let as1 = cluster.peer_as("alloc-1");
    let addrs = seqsvr_store_api::AllocAddrs {
        client: a2.addr.clone(),
        peer: a2.peer_addr.clone(),
        admin: a2.admin_addr.clone(),
    };
    let i2 = a2.incarnation;
    let denied: Vec<(&str, Result<String, Error>)> = vec![
        (
            "renew as alloc-2",
            as1.renew("alloc-2", i2).await.map(|r| format!("{r:?}")),
        ),
        (
            "raise as alloc-2",
            as1.raise("alloc-2", i2, 4, s4.epoch, s4.max_seq + 1)
                .await
                .map(|m| m.to_string()),
        ),
        (
            "take-over as alloc-2",
            as1.take_over("alloc-2", i2, 4, vec![s4.epoch])
                .await
                .map(|g| format!("{g:?}")),
        ),
        (
            "handoff as alloc-2",
            as1.handoff("alloc-2", i2, "alloc-1", 4, s4.epoch)
                .await
                .map(|g| format!("{:?}", g.0)),
        ),
        (
            "register as alloc-2",
            as1.register_alloc("alloc-2", i2, &addrs)
                .await
                .map(|v| v.to_string()),
        ),
    ];
    // The same on the wire: the status code itself.
    let mut raw = seqsvr_proto::store_peer_client::StorePeerClient::new(channel(
        &cluster.stores[0].peer,
        Some(&cluster.identity("alloc-1")),
        Duration::from_secs(5),
    ));
    let wire = raw
        .renew(pb::RenewRequest {
            alloc_id: "alloc-2".into(),
            incarnation: i2,
            known_sections_version: 0,
        })
        .await;
    println!(
        "raw renew as alloc-2 with alloc-1's certificate: {:?}",
        Outcome::of(&wire)
    );
    let stale = as1.renew("alloc-1", a1.incarnation ^ 0x77).await;
    let cur = read.read_sections(0, 1).await.unwrap()[0].record.max_seq;
    let big = as1
        .raise("alloc-1", a1.incarnation, 0, s0.epoch, cur + 2 * STEP + 1)
        .await;
    for (what, r) in &denied {
        println!("alloc-1's certificate, {what}: {r:?}");
    }
    println!("alloc-1's certificate, renew with a wrong incarnation: {stale:?}");
    println!("alloc-1's certificate, raise by 2 steps + 1: {big:?}");
    let (b, _) = burst(&c, 3).await;
    let (mut obs, _) = w.finish().await;
    obs.extend(b);
    assert_monotonic(&obs, || cluster.logs());
    for (what, r) in &denied {
        assert!(matches!(r, Err(Error::Denied(_))), "{what}: {r:?}");
    }
    assert_eq!(
        Outcome::of(&wire),
        Outcome::Status(tonic::Code::PermissionDenied, None)
    );
    assert!(
        matches!(
            stale,
            Err(Error::Rejected(Rejection::StaleIncarnation { .. }))
        ),
        "{stale:?}"
    );
    assert!(
        matches!(big, Err(Error::Rejected(Rejection::TooLarge { .. }))),
        "{big:?}"
    );
    let (n1, n2) = (
        alloc_lease(&read, "alloc-1").await,
        alloc_lease(&read, "alloc-2").await,
    );
    assert_eq!(
        (n1.incarnation, n2.incarnation),
        (a1.incarnation, a2.incarnation)
    );
    assert_eq!(
        read.read_sections(4, 1).await.unwrap()[0].record.epoch,
        s4.epoch
    );
}
