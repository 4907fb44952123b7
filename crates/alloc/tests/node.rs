//! Whole AllocSvr nodes over real gRPC (loopback, plaintext) against a
//! fake store that speaks the store's peer plane with its semantics:
//! registered incarnations and twins, fenced renewals, take-overs with
//! known epochs and prepared grants, one-step raises fenced by owner,
//! incarnation and epoch, conditional handoffs, linearizable reads. Faults
//! are injected per test (refused or lost handoff replies, renewals that
//! fail, an incarnation fenced).
//!
//! What is checked: a node serves the sections routed to it; a handoff
//! moves a section with the new owner starting above everything the old
//! one handed out (promise 1) without a second step (promise 4); a failed
//! handoff serves the section again from memory, a lost reply leaves it to
//! the new owner; invalid moves (a target the store does not list
//! included) and forged adopts change nothing
//! (promise 3); `Current` follows the lease; a fenced or twin process
//! serves nothing (promise 3); every refusal is typed (promise 5).

use std::time::Duration;

use seqsvr_alloc::node::AllocNode;
use seqsvr_core::SectionId;
use seqsvr_proto::{self as pb, detail_of, ErrorKind};
use tonic::Code;

use seqsvr_testkit::node::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_sections_routed_to_it() {
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let a1 = start("a1", &addr, 50).await;
    assert_ne!(a1.incarnation(), 0);
    let mut c = client(&a1).await;
    assert_eq!(next(&mut c, 5).await.unwrap(), 1);
    assert_eq!(next(&mut c, 5).await.unwrap(), 2);
    assert_eq!(current(&mut c, 5).await.unwrap(), 2);
    let status = c
        .status(pb::AllocStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.incarnation, a1.incarnation());
    assert_eq!(status.sections, vec![0, 1, 2, 3]);
    assert_eq!(store.section(0).incarnation, a1.incarnation());
    let e = next(&mut c, 1000).await.unwrap_err();
    assert_eq!(kind(&e), (Code::OutOfRange, ErrorKind::OutOfRange));
    let e = c
        .next_batch(pb::NextBatchRequest { uids: vec![] })
        .await
        .unwrap_err();
    assert_eq!(kind(&e), (Code::InvalidArgument, ErrorKind::InvalidRequest));
    a1.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_moves_a_section_and_the_new_owner_adopts_it_at_once() {
    let store = FakeStore::new("a1", 30_000);
    let addr = store.clone().serve().await;
    let a1 = start("a1", &addr, 50).await;
    // a2 renews only at start: whatever it serves later came by adopt.
    let a2 = start("a2", &addr, 20_000).await;
    let (mut c1, mut c2) = (client(&a1).await, client(&a2).await);
    let mut last = 0;
    for _ in 0..5 {
        last = next(&mut c1, 15).await.unwrap();
    }
    let before = store.section(1);
    let results = handoff(&a1, &[(1, "a2")]).await;
    assert_eq!(results.len(), 1);
    assert!(results[0].ok && results[0].error.is_empty(), "{results:?}");
    assert!(results[0].unavailable_us > 0);
    // The old owner stopped, for `next` and `current` alike (asked
    // alone: unmarked, it would forward to the new owner).
    let e = next_here(&mut c1, 15).await.unwrap_err();
    assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::NotOwner));
    let e = current_here(&mut c1, 15).await.unwrap_err();
    assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::NotOwner));
    // The new owner serves at once, above everything handed out before.
    let v = next(&mut c2, 15).await.unwrap();
    assert!(v > last, "{v} after {last} (promise 1)");
    let after = store.section(1);
    assert_eq!(after.epoch, before.epoch + 1, "one write, one new epoch");
    assert_eq!(v, after.start + 1, "starts at the handed-over ceiling");
    assert_eq!(after.incarnation, a2.incarnation());
    // Other sections stay where they were.
    assert!(next(&mut c1, 5).await.is_ok());
    a1.shutdown();
    a2.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_moves_change_nothing() {
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let a1 = start("a1", &addr, 50).await;
    let a2 = start("a2", &addr, 50).await;
    let mut c1 = client(&a1).await;
    assert_eq!(next(&mut c1, 25).await.unwrap(), 1);
    let epoch = store.section(2).epoch;
    let results = handoff(&a1, &[(2, ""), (2, "a1"), (99, "a2"), (3, "a2"), (3, "a2")]).await;
    let errors: Vec<&str> = results.iter().map(|r| r.error.as_str()).collect();
    assert!(
        !results[0].ok && errors[0].contains("to_alloc is empty"),
        "{errors:?}"
    );
    assert!(!results[1].ok && errors[1].contains("itself"), "{errors:?}");
    assert!(
        !results[2].ok && errors[2].contains("not in this set"),
        "{errors:?}"
    );
    assert!(results[3].ok, "{results:?}");
    assert!(
        !results[4].ok && errors[4].contains("not served here"),
        "{errors:?}"
    );
    // Section 2 was never released: same epoch, served from memory.
    assert_eq!(store.section(2).epoch, epoch);
    assert_eq!(next(&mut c1, 25).await.unwrap(), 2);
    a1.shutdown();
    a2.shutdown();
}

/// A move to an AllocSvr the store's leader does not list as able to take
/// a section — not registered, or fenced — is refused before the section
/// is released: it is served on from memory at the same epoch, nothing
/// skipped, and the store is not asked to hand it over. With no list to
/// be had (a leader change) the store's handoff decides, as it always
/// does: a drain is not failed by an election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_to_a_target_the_store_does_not_list_keeps_the_section_served() {
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let a1 = start("a1", &addr, 50).await;
    let a2 = start("a2", &addr, 50).await;
    let mut c1 = client(&a1).await;
    let mut last = next(&mut c1, 12).await.unwrap();
    let before = store.section(1);
    store.st().allocs.insert(
        "a3".into(),
        AllocRec {
            incarnation: 0xA3,
            addr: "127.0.0.1:1".into(),
            peer_addr: "127.0.0.1:2".into(),
            fenced: true,
        },
    );
    let cases = [
        ("a9", "is not registered with the store"),
        ("a3", "is fenced in the store"),
    ];
    for (to, says) in cases {
        let results = handoff(&a1, &[(1, to)]).await;
        assert!(!results[0].ok, "{results:?}");
        let error = &results[0].error;
        assert!(
            error.contains(says) && error.contains("still served here"),
            "to {to}: {error}"
        );
        // Never released: same owner, incarnation and epoch in the store,
        // and served on from memory, one number after the last.
        let now = store.section(1);
        assert_eq!(
            (now.owner, now.incarnation, now.epoch),
            (before.owner.clone(), before.incarnation, before.epoch),
            "to {to}"
        );
        assert!(a1.shared.alloc.is_serving(1));
        let v = next(&mut c1, 12).await.unwrap();
        assert_eq!(v, last + 1, "to {to}: nothing skipped");
        last = v;
    }
    // With no list to be had, a move to a registered AllocSvr goes
    // through: the store's handoff checked it.
    store.st().status_down = true;
    let results = handoff(&a1, &[(1, "a2")]).await;
    assert!(results[0].ok, "{results:?}");
    assert_eq!(store.section(1).owner.as_deref(), Some("a2"));
    a1.shutdown();
    a2.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_handoff_serves_the_section_again_at_a_new_epoch() {
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let a1 = start("a1", &addr, 50).await;
    let a2 = start("a2", &addr, 50).await;
    let mut c1 = client(&a1).await;
    let mut last = 0;
    for _ in 0..3 {
        let v = next(&mut c1, 12).await.unwrap();
        assert!(v > last, "{v} after {last}");
        last = v;
    }
    let released = store.section(1);
    store.st().handoff_fault = HandoffFault::Refuse;
    let results = handoff(&a1, &[(1, "a2")]).await;
    assert!(!results[0].ok, "{results:?}");
    assert!(
        results[0].error.contains("left dropped") && results[0].error.contains("new epoch"),
        "{}",
        results[0].error
    );
    // Never served again at the released epoch (a late copy of the handoff
    // could still move it): the (early) renewal's take-over claims it at a
    // new epoch, which fences every late copy.
    let s = store.clone();
    eventually("a1 serves section 1 at a new epoch", || {
        a1.shared.alloc.is_serving(1) && s.section(1).epoch > released.epoch
    })
    .await;
    let now = store.section(1);
    assert_eq!(now.owner.as_deref(), Some("a1"));
    assert_eq!(a1.shared.alloc.known_epoch(1), now.epoch);
    // Skip ahead: strictly above every number handed out before, nothing
    // lost (each call still gets a number).
    let v = next(&mut c1, 12).await.unwrap();
    assert!(v > last, "{v} after {last}");
    assert!(now.start >= released.max_seq, "{now:?} after {released:?}");
    assert_eq!(v, now.start + 1);
    let w = next(&mut c1, 12).await.unwrap();
    assert!(w > v, "{w} after {v}");
    a1.shutdown();
    a2.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_whose_reply_is_lost_leaves_the_section_to_the_new_owner() {
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let a1 = start("a1", &addr, 50).await;
    let a2 = start("a2", &addr, 50).await;
    let (mut c1, mut c2) = (client(&a1).await, client(&a2).await);
    let mut last = 0;
    for _ in 0..3 {
        last = next(&mut c1, 31).await.unwrap();
    }
    store.st().handoff_fault = HandoffFault::LoseReply;
    let results = handoff(&a1, &[(3, "a2")]).await;
    assert!(!results[0].ok, "{results:?}");
    assert!(
        results[0].error.contains("left dropped"),
        "{}",
        results[0].error
    );
    let e = next_here(&mut c1, 31).await.unwrap_err();
    assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::NotOwner));
    let handed = store.section(3);
    assert_eq!(handed.owner.as_deref(), Some("a2"));
    // a2 claims the prepared grant at its next renewal: no second step.
    let a2_inc = a2.incarnation();
    let s = store.clone();
    eventually("a2 serves section 3", || a2.shared.alloc.is_serving(3)).await;
    let v = next(&mut c2, 31).await.unwrap();
    assert!(v > last, "{v} after {last}");
    let now = s.section(3);
    assert_eq!(
        (now.epoch, now.start),
        (handed.epoch, handed.start),
        "prepared grant reused"
    );
    assert_eq!(now.incarnation, a2_inc);
    assert_eq!(v, handed.start + 1);
    a1.shutdown();
    a2.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replayed_and_malformed_adopts_install_nothing() {
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let a1 = start("a1", &addr, 50).await;
    let a2 = start("a2", &addr, 50).await;
    let mut p2 = peer(&a2).await;
    let adopt = |sections: Vec<(SectionId, u64)>| pb::AdoptRequest {
        sections: sections
            .into_iter()
            .map(|(section, epoch)| pb::Adopted { section, epoch })
            .collect(),
    };
    // Forged: the store says a1 owns section 0.
    let e0 = store.section(0).epoch;
    let e = p2.adopt(adopt(vec![(0, e0)])).await.unwrap_err();
    assert_eq!(
        kind(&e),
        (Code::FailedPrecondition, ErrorKind::OwnedElsewhere)
    );
    assert!(!a2.shared.alloc.is_serving(0));
    // A real handoff, then replays of its adopt: nothing more installed.
    let results = handoff(&a1, &[(0, "a2")]).await;
    assert!(results[0].ok, "{results:?}");
    let e0 = store.section(0).epoch;
    let r = p2.adopt(adopt(vec![(0, e0)])).await.unwrap().into_inner();
    assert_eq!(r.installed, 0, "replayed");
    let r = p2
        .adopt(adopt(vec![(0, e0 - 1)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.installed, 0, "older epoch");
    // Forged epoch far ahead of the store's.
    let e = p2.adopt(adopt(vec![(0, 1 << 63)])).await.unwrap_err();
    assert_eq!(kind(&e), (Code::FailedPrecondition, ErrorKind::StaleEpoch));
    // An installed one beside a forged one: refused, nothing installed.
    let e = p2
        .adopt(adopt(vec![(0, e0), (1, store.section(1).epoch)]))
        .await
        .unwrap_err();
    assert_eq!(
        kind(&e),
        (Code::FailedPrecondition, ErrorKind::OwnedElsewhere)
    );
    assert!(!a2.shared.alloc.is_serving(1));
    // Malformed.
    let e = p2.adopt(adopt(vec![])).await.unwrap_err();
    assert_eq!(kind(&e), (Code::InvalidArgument, ErrorKind::InvalidRequest));
    let e = p2.adopt(adopt(vec![(0, e0); 1025])).await.unwrap_err();
    assert_eq!(kind(&e), (Code::InvalidArgument, ErrorKind::InvalidRequest));
    let e = p2.adopt(adopt(vec![(SECTIONS, 1)])).await.unwrap_err();
    assert_eq!(kind(&e), (Code::OutOfRange, ErrorKind::UnknownSection));
    a1.shutdown();
    a2.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_follows_the_lease() {
    let store = FakeStore::new("a1", 300);
    let addr = store.clone().serve().await;
    let a1 = start("a1", &addr, 50).await;
    let mut c = client(&a1).await;
    assert_eq!(next(&mut c, 0).await.unwrap(), 1);
    assert_eq!(current(&mut c, 0).await.unwrap(), 1);
    store.st().renew_down = true;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let e = current(&mut c, 0).await.unwrap_err();
    assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::LeaseExpired));
    let e = next(&mut c, 0).await.unwrap_err();
    assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::LeaseExpired));
    // Back: the lapse dropped every section; they are claimed again with a
    // new epoch, and every uid skips ahead (memory is not trusted).
    let epoch = store.section(0).epoch;
    store.st().renew_down = false;
    let s = store.clone();
    eventually("section 0 claimed again", || s.section(0).epoch > epoch).await;
    eventually("section 0 served", || a1.shared.alloc.is_serving(0)).await;
    let v = next(&mut c, 0).await.unwrap();
    assert_eq!(v, store.section(0).start + 1);
    a1.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twin_waits_without_serving_and_the_replaced_process_stops() {
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let first = start("a1", &addr, 50).await;
    let mut c1 = client(&first).await;
    assert_eq!(next(&mut c1, 7).await.unwrap(), 1);
    // A second process with the same id: refused as a twin, keeps trying.
    let (cfg, l) = node_config("a1", &addr, 50).await;
    let twin = tokio::spawn(AllocNode::start(cfg, l));
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!twin.is_finished(), "a twin must not start serving");
    assert_eq!(
        next(&mut c1, 7).await.unwrap(),
        2,
        "the first one serves on"
    );
    // The first one's lease is over (as the store sees it): the twin
    // registers and the first one, at its next renewal, is told it was
    // replaced.
    store.st().replace_twins = true;
    let second = tokio::time::timeout(Duration::from_secs(5), twin)
        .await
        .expect("registered in time")
        .unwrap()
        .expect("started");
    assert_ne!(second.incarnation(), first.incarnation());
    eventually("first fenced", || first.shared.is_fenced()).await;
    let e = next(&mut c1, 7).await.unwrap_err();
    assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::StaleIncarnation));
    assert!(detail_of(&e).unwrap().retryable);
    let e = current(&mut c1, 7).await.unwrap_err();
    assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::StaleIncarnation));
    assert!(first.shared.alloc.served_sections().is_empty());
    // The second one claims every section with a new epoch and skips ahead.
    eventually("second serves", || second.shared.alloc.is_serving(0)).await;
    let mut c2 = client(&second).await;
    assert!(next(&mut c2, 7).await.unwrap() > 2);
    first.shutdown();
    second.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_incarnation_drops_everything() {
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let a1 = start("a1", &addr, 50).await;
    let mut c = client(&a1).await;
    assert_eq!(next(&mut c, 33).await.unwrap(), 1);
    store.st().allocs.get_mut("a1").unwrap().fenced = true;
    eventually("fenced", || a1.shared.is_fenced()).await;
    let e = next(&mut c, 33).await.unwrap_err();
    assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::StaleIncarnation));
    let status = c
        .status(pb::AllocStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(status.sections.is_empty());
    // Handoffs have nothing to move.
    let results = handoff(&a1, &[(3, "a2")]).await;
    assert!(results[0].error.contains("not served here"), "{results:?}");
    a1.shutdown();
}

/// A stop with no live peer to take its sections (this fake store's
/// leader lists no live lease) still exits, within its bound, and reports every
/// section as left to its lease (`node/stop.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_with_no_live_peer_still_exits_and_says_what_is_left() {
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let a1 = start("a1", &addr, 50).await;
    let mut c = client(&a1).await;
    assert_eq!(next(&mut c, 5).await.unwrap(), 1);
    let t = std::time::Instant::now();
    let report = a1.stop(Duration::from_secs(2)).await;
    println!("stop with no peer: {report:?} after {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(report.handed_off, 0);
    assert_eq!(report.left, vec![0, 1, 2, 3]);
}
