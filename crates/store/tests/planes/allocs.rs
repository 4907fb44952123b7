//! The store's list of AllocSvrs: twins, retiring (by the operator and by
//! the arbiter), and the metrics that show them.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twins_are_refused_with_the_live_address() {
    let c = cluster().await;
    c.wait_configured().await;
    c.alive("a", 1, 0).await;
    let twin = c.peer_as("alloc-a");
    let addrs = AllocAddrs {
        client: "127.0.0.1:9999".into(),
        peer: "127.0.0.1:9998".into(),
        admin: "127.0.0.1:9997".into(),
    };
    let r = twin.register_alloc("a", 77, &addrs).await;
    match r {
        Err(Error::Rejected(seqsvr_store_api::Rejection::Twin { alloc, live, addr })) => {
            assert_eq!(
                (alloc.as_str(), live, addr.as_str()),
                ("a", 1, "127.0.0.1:9001")
            );
        }
        other => panic!("expected TWIN, got {other:?}"),
    }
    // Its renewals are refused too.
    let r = twin.renew("a", 77).await;
    assert!(
        matches!(
            r,
            Err(Error::Rejected(
                seqsvr_store_api::Rejection::StaleIncarnation { .. }
            ))
        ),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_scraped_and_move() {
    let c = cluster().await;
    c.wait_configured().await;
    c.alive("a", 1, 0).await;
    let mut texts = Vec::new();
    for n in &c.nodes {
        let a = n.addrs.metrics.expect("metrics served");
        texts.push(scrape(a).await);
    }
    let all = texts.concat();
    for name in [
        "seqsvr_store_commands_total",
        "seqsvr_store_command_seconds",
        "seqsvr_store_fsyncs_total",
        "seqsvr_raft_term{",
        "seqsvr_store_unserved_sections{",
        "seqsvr_calls_total",
    ] {
        assert!(all.contains(name), "{name} missing");
    }
    assert!(all.contains(r#"command="take_over",outcome="ok""#), "{all}");
}

async fn scrape(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// `RetireAlloc`: refused while the AllocSvr may still serve (a live
/// lease), typed and changing nothing; an AllocSvr that never renewed
/// goes once the leader's first `lease + margin` is over, and its
/// process is refused from then on. Running it again says it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retire_waits_for_the_lease_and_runs_again_safely() {
    let c = cluster().await;
    c.wait_configured().await;
    let a = c.alive("a", 1, 0).await;
    let admin_addrs: Vec<String> = c.nodes.iter().map(|n| n.addrs.admin.to_string()).collect();
    let admin =
        seqsvr_store_api::AdminClient::new(&admin_addrs, &connector(Some(tls(&c.pki, "ops"))))
            .unwrap();
    // a holds a live lease (and sections): refused.
    c.peer_as("alloc-a").renew("a", 1).await.unwrap();
    match admin.retire_alloc("a").await {
        Err(Error::Rejected(seqsvr_store_api::Rejection::AllocInUse { alloc, reason })) => {
            assert_eq!(alloc, "a");
            assert!(reason.contains("lease may still run"), "{reason}");
        }
        other => panic!("expected ALLOC_IN_USE, got {other:?}"),
    }
    let r = admin.retire_alloc("ghost").await;
    assert!(
        matches!(
            r,
            Err(Error::Rejected(
                seqsvr_store_api::Rejection::NotRegistered { .. }
            ))
        ),
        "{r:?}"
    );
    // b registers and never renews: once the office's first lease +
    // margin is over, its lease has certainly expired.
    let b = c.peer_as("alloc-b");
    let addrs = AllocAddrs {
        client: "127.0.0.1:9301".into(),
        peer: "127.0.0.1:9302".into(),
        admin: "127.0.0.1:9303".into(),
    };
    b.register_alloc("b", 7, &addrs).await.unwrap();
    let mut waited = 0;
    loop {
        match admin.retire_alloc("b").await {
            Ok(()) => break,
            Err(Error::Rejected(seqsvr_store_api::Rejection::AllocInUse { .. }))
                if waited < 100 =>
            {
                waited += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("retire b: {other:?}"),
        }
    }
    println!("b retired after {} ms of waiting", waited * 100);
    let r = b.renew("b", 7).await;
    assert!(
        matches!(
            r,
            Err(Error::Rejected(
                seqsvr_store_api::Rejection::NotRegistered { .. }
            ))
        ),
        "{r:?}"
    );
    let r = admin.retire_alloc("b").await;
    assert!(
        matches!(
            r,
            Err(Error::Rejected(
                seqsvr_store_api::Rejection::NotRegistered { .. }
            ))
        ),
        "{r:?}"
    );
    // a was untouched.
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq);
}

/// The arbiter retires a fenced AllocSvr by itself once its lease is
/// certainly over: it first moves the AllocSvr's sections to a live one,
/// then takes it off the list; its process is refused from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_alloc_leaves_the_list_by_itself_once_its_sections_moved() {
    let c = cluster().await;
    c.wait_configured().await;
    let admin_addrs: Vec<String> = c.nodes.iter().map(|n| n.addrs.admin.to_string()).collect();
    let admin =
        seqsvr_store_api::AdminClient::new(&admin_addrs, &connector(Some(tls(&c.pki, "ops"))))
            .unwrap();
    // a takes section 0 over, b section 5; neither has renewed yet, so
    // the arbiter has routed nothing to either.
    c.alive("a", 1, 0).await;
    let b_grant = c.alive("b", 7, 0).await;
    assert_eq!(b_grant.section, 5);
    admin.fence_alloc("b", 7).await.unwrap();
    let (a, b) = (c.peer_as("alloc-a"), c.peer_as("alloc-b"));
    let r = b.renew("b", 7).await;
    assert!(
        matches!(r, Err(Error::Rejected(Rejection::StaleIncarnation { .. }))),
        "{r:?}"
    );
    // a renews on; nobody retires b by hand.
    let started = std::time::Instant::now();
    loop {
        a.renew("a", 1).await.unwrap();
        // No leader's answer counts as still listed.
        let listed = a
            .leader_status()
            .await
            .is_none_or(|s| s.allocs.iter().any(|l| l.alloc_id == "b"));
        if !listed {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the fenced b is still listed after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "b left the list {:?} after it was fenced",
        started.elapsed()
    );
    // Its section moved to the live a before it left.
    let s5 = a.read_sections(5, 1).await.unwrap();
    assert_eq!(s5[0].record.owner.as_deref(), Some("a"), "{s5:?}");
    assert!(s5[0].record.epoch > b_grant.epoch);
    let r = b.renew("b", 7).await;
    assert!(
        matches!(r, Err(Error::Rejected(Rejection::NotRegistered { .. }))),
        "{r:?}"
    );
    let status = a.leader_status().await.expect("a leader");
    assert!(status.allocs.iter().any(|l| l.alloc_id == "a"), "a stays");
}
