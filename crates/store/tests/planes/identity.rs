//! Who may speak for whom: strangers, wrong roles and forgers on every
//! plane, Raft RPCs and forwarded calls from members of this group and
//! set only, terms, and the certificate a replica starts with.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_wrong_roles_and_forgers_are_refused_and_change_nothing() {
    let c = cluster().await;
    c.wait_configured().await;
    let before = c.alive("a", 1, 0).await;

    // A stranger without a certificate cannot even finish the handshake on
    // the peer plane.
    let mut raft = RaftClient::new(c.raw(0, None));
    let e = raft
        .vote(pb::RaftPayload { data: vec![1] })
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.code(),
            Code::Unavailable | Code::Unknown | Code::Cancelled
        ),
        "{e:?}"
    );

    // An AllocSvr certificate may not speak Raft.
    let mut raft = RaftClient::new(c.raw(0, Some("alloc-a")));
    let e = raft
        .vote(pb::RaftPayload { data: vec![1] })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    // alloc a may not renew, raise or hand off in b's name.
    let as_a = c.peer_as("alloc-a");
    for r in [
        as_a.renew("b", 2).await.map(|_| ()),
        as_a.raise("b", 2, 5, 1, 150).await.map(|_| ()),
        as_a.handoff("b", 2, "a", 5, 1).await.map(|_| ()),
        as_a.stopped("b", 2).await.map(|_| ()),
    ] {
        assert!(matches!(r, Err(Error::Denied(_))), "{r:?}");
    }
    // a itself may record only its own incarnation's stop.
    let r = as_a.stopped("a", 99).await;
    assert!(
        matches!(r, Err(Error::Rejected(Rejection::StaleIncarnation { .. }))),
        "{r:?}"
    );
    // An operator may not act on the peer plane as an AllocSvr either.
    let r = c.peer_as("ops").renew("a", 1).await;
    assert!(matches!(r, Err(Error::Denied(_))), "{r:?}");

    // Oversized ids are refused at the edge, before anything is proposed.
    let huge = "a".repeat(40_000);
    let mut peer = StorePeerClient::new(c.raw(1, Some("alloc-a")));
    let e = peer
        .renew(pb::RenewRequest {
            alloc_id: huge,
            incarnation: 1,
            known_sections_version: 0,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(e.code(), Code::PermissionDenied | Code::InvalidArgument),
        "{e:?}"
    );

    // A forged vote with an absurd term, sent with a genuine replica
    // certificate (the worst case: a compromised or buggy peer), is refused
    // before openraft sees it — every replica keeps running.
    for i in 0..3 {
        let mut raft = RaftClient::new(c.raw(i, Some("store-1")));
        for term in [u64::MAX, 1 << 40] {
            let vote = VoteRequest::<u64>::new(openraft::Vote::new(term, 1), None);
            let data = seqsvr_core::codec::encode(&vote).unwrap();
            let e = raft.vote(pb::RaftPayload { data }).await.unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        }
    }

    // The group is alive and nothing above changed anything: b's sections
    // are b's to take, and a's ceiling moved only by a's own take-over.
    let b = c.alive("b", 2, 0).await;
    assert_eq!((b.epoch, b.prev_ceiling, b.max_seq), (1, 0, 100));
    let after = c.alive("a", 1, before.epoch).await;
    assert_eq!(after.epoch, before.epoch + 1);
    assert_eq!(after.prev_ceiling, before.max_seq);
    for n in &c.nodes {
        assert!(n.raft.metrics().borrow().current_term < 1 << 32);
    }
}

/// The group's own elections carry its term past 2^32 (the absolute cap
/// the wire once had, which left a group with no possible leader there)
/// and it keeps electing and writing; a jump of more than 2^24 over a
/// replica's term is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_carry_the_term_past_2_pow_32() {
    let mut c = cluster().await;
    c.wait_configured().await;
    c.alive("a", 1, 0).await;
    c.restart_at_term((1 << 32) - 3).await;
    c.wait_configured().await;
    let term = |i: usize| c.nodes[i].raft.metrics().borrow().current_term;
    let leader = || {
        c.nodes.iter().position(|n| {
            let m = n.raft.metrics().borrow().clone();
            m.current_leader == Some(m.id)
        })
    };
    // Force elections on followers until the term is past 2^32.
    let mut elections = 0;
    while term(0) <= (1 << 32) + 1 {
        let Some(l) = leader() else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let before = term(l);
        c.nodes[(l + 1) % 3].raft.trigger().elect().await.unwrap();
        elections += 1;
        assert!(elections < 50, "the term stopped at {}", term(0));
        for _ in 0..100 {
            if leader().is_some_and(|l| term(l) > before) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    println!("term {} after {elections} forced elections", term(0));
    // Still electing and writing.
    let g = c.alive("b", 2, 0).await;
    assert_eq!(g.epoch, 1);

    // A genuine member's vote that jumps too far is refused.
    let own = term(0);
    let mut raft = RaftClient::new(c.raw(0, Some("store-2")));
    let vote = VoteRequest::<u64>::new(openraft::Vote::new(own + (1 << 25), 2), None);
    let data = seqsvr_core::codec::encode(&vote).unwrap();
    let e = raft.vote(pb::RaftPayload { data }).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("jumps more than 2^24"), "{e:?}");
}

/// A store certificate speaks only for its own replica, and only while
/// that replica is a member of the group: a vote or an append in another
/// replica's name, or from a store no membership names (another set's
/// replica, a removed one), is refused before openraft sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_and_forwarded_calls_only_from_members() {
    let c = cluster().await;
    c.wait_configured().await;
    let terms_before: Vec<u64> = c
        .nodes
        .iter()
        .map(|n| n.raft.metrics().borrow().current_term)
        .collect();
    for (i, &own) in terms_before.iter().enumerate() {
        // store-1 in store-2's name.
        let mut raft = RaftClient::new(c.raw(i, Some("store-1")));
        let vote = VoteRequest::<u64>::new(openraft::Vote::new(own + 1, 2), None);
        let data = seqsvr_core::codec::encode(&vote).unwrap();
        let e = raft.vote(pb::RaftPayload { data }).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("may not speak for store 2"), "{e:?}");
        // store-9, a member of no group here, in its own name: an append
        // as a leader of a higher term would make the replica follow it.
        let mut raft = RaftClient::new(c.raw(i, Some("store-9")));
        let append = openraft::raft::AppendEntriesRequest::<seqsvr_store::types::TypeConfig> {
            vote: openraft::Vote::new_committed(own + 1, 9),
            prev_log_id: None,
            entries: vec![],
            leader_commit: None,
        };
        let data = seqsvr_core::codec::encode(&append).unwrap();
        let e = raft
            .append_entries(pb::RaftPayload { data })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("not a member"), "{e:?}");
    }
    // A forwarded AllocSvr call is taken only from a member: store-9's
    // forged hand-off of a's sections, registration of a made-up AllocSvr
    // and record of a's stop (which would free a's sections) are refused
    // on every replica.
    let a = c.alive("a", 1, 0).await;
    for i in 0..3 {
        for r in forwarded_as(&c, i, "store-9", a.epoch).await {
            let e = r.unwrap_err();
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
            assert!(e.message().contains("marked forwarded"), "{e:?}");
        }
    }
    // A member's forwarded call is refused as well: nothing is forwarded
    // (it is told to have the AllocSvr call the leader).
    forwarding_is_refused(&c, 0, "store-2").await;

    // Nothing moved: the term is the one before, and the group writes.
    for (n, before) in c.nodes.iter().zip(&terms_before) {
        assert_eq!(n.raft.metrics().borrow().current_term, *before);
    }
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq, "the section stayed a's");
}

/// Node ids are numbered per group, so set 1's replica 2 carries the id of
/// set 0's replica 2: its certificate names its set, and set 0's replicas
/// refuse it on Raft and forwarded calls alike, naming both sets, and
/// nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sets_replica_is_refused_even_with_a_members_id() {
    let c = cluster().await;
    c.wait_configured().await;
    let a = c.alive("a", 1, 0).await;
    // b is registered, so a forged hand-off of a's section to b would
    // take effect if it got past the check.
    c.alive("b", 2, 0).await;
    let before = terms(&c);
    for i in 0..3 {
        for e in raft_as(&c, i, "set1-2", 2).await {
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
            assert!(
                e.message().contains("a replica of set 1")
                    && e.message().contains("this replica serves set 0"),
                "{e:?}"
            );
        }
        for r in forwarded_as(&c, i, "set1-2", a.epoch).await {
            let e = r.unwrap_err();
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
            assert!(e.message().contains("marked forwarded"), "{e:?}");
        }
    }
    // Nothing moved: no election, a's section is a's, no ghost.
    assert_eq!(terms(&c), before);
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq, "the section stayed a's");
    assert!(!registered(&c).await.contains(&"ghost".to_string()));
}

/// A store certificate of the old form (`store:<id>`, no set) is refused
/// by default, saying how to re-issue it; with
/// `legacy_store_certificates = true` a group whose replicas all run
/// with such certificates elects and writes — while another set's
/// certificate stays refused. (No forwarded AllocSvr call is heard from
/// any certificate.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_form_store_certificates_only_with_the_allowance() {
    let mut c = cluster().await;
    c.wait_configured().await;
    let a = c.alive("a", 1, 0).await;
    let before = terms(&c);
    for i in 0..3 {
        for e in raft_as(&c, i, "old-2", 2).await {
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
            assert!(
                e.message().contains("legacy_store_certificates = true")
                    && e.message().contains("store:0:2"),
                "{e:?}"
            );
        }
        for r in forwarded_as(&c, i, "old-2", a.epoch).await {
            let e = r.unwrap_err();
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
            assert!(e.message().contains("marked forwarded"), "{e:?}");
        }
    }
    assert_eq!(terms(&c), before);
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq, "the section stayed a's");
    assert!(!registered(&c).await.contains(&"ghost".to_string()));
    for n in std::mem::take(&mut c.nodes) {
        n.shutdown().await;
    }

    // Replicas still on old-form certificates, allowed: the group works.
    let c = cluster_with(true, "old").await;
    c.wait_configured().await;
    let a = c.alive("a", 1, 0).await;
    // The allowance is for the old form, not for other sets.
    let before = terms(&c);
    for i in 0..3 {
        for e in raft_as(&c, i, "set1-2", 2).await {
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        }
        for r in forwarded_as(&c, i, "set1-2", a.epoch).await {
            assert_eq!(r.unwrap_err().code(), Code::PermissionDenied);
        }
    }
    assert_eq!(terms(&c), before);
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq, "the section stayed a's");
}

/// A replica refuses to start with a certificate that names another
/// replica (it would speak for that one in every Raft request): another
/// node id, the same node id of another set, or the old form naming no
/// set unless its config allows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_refuses_another_replicas_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = DevPki::generate(&dir.path().join("pki"), &leaves(), false).unwrap();
    for (cert, legacy, refusal) in [
        (
            "store-2",
            false,
            "names store:0:2, not this replica (store:0:1)",
        ),
        (
            "set1-1",
            false,
            "names store:1:1, a replica of set 1; this replica is store:0:1, of set 0",
        ),
        (
            "set1-1",
            true,
            "names store:1:1, a replica of set 1; this replica is store:0:1, of set 0",
        ),
        (
            "old-1",
            false,
            "names store:1, the old form without a set; this replica is store:0:1",
        ),
        ("old-2", true, "names store:2, not this replica (store:0:1)"),
    ] {
        let l = StoreListeners {
            peer: bind().await,
            client: bind().await,
            admin: bind().await,
            metrics: None,
        };
        let mut text = config_text(1, &dir.path().join("store-1"), &l, &pki, cert);
        if legacy {
            text = format!("legacy_store_certificates = true\n{text}");
        }
        let mut cfg: StoreConfig = toml::from_str(&text).unwrap();
        cfg.members = vec![Member {
            id: 1,
            addr: addr(&l.peer),
        }];
        cfg.validate().unwrap();
        let e = StoreNode::start(cfg, l).await.err().expect("refused");
        let msg = e.to_string();
        assert!(msg.contains(refusal), "{cert}: {msg}");
        assert!(
            !dir.path().join("store-1").exists(),
            "nothing written: {msg}"
        );
    }
}

/// A forwarded AllocSvr call carries nothing the AllocSvr made, so even a
/// current member of the group — whose certificate is genuine and whose
/// node id is in the membership — could invent one: hand a live section
/// to another AllocSvr, register a made-up AllocSvr at an attacker's
/// address, record a live AllocSvr's stop. Such calls are refused on every
/// replica, leader included, and nothing changes (a member's refusal names
/// the leader, for the older replica forwarding during an upgrade); the
/// AllocSvr's own call to a follower is answered NOT_LEADER naming the
/// leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_certificate_cannot_invent_an_allocsvrs_call() {
    let c = cluster().await;
    c.wait_configured().await;
    let a = c.alive("a", 1, 0).await;
    c.alive("b", 2, 0).await;
    let before = terms(&c);
    for member in ["store-1", "store-2", "store-3"] {
        for i in 0..3 {
            for r in forwarded_as(&c, i, member, a.epoch).await {
                assert_call_the_leader(&c, &r.unwrap_err());
            }
        }
    }
    assert_eq!(terms(&c), before);
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq, "the section stayed a's");
    assert!(!registered(&c).await.contains(&"ghost".to_string()));
    // a's own renewal sent to a follower: NOT_LEADER with the leader's
    // address, never served there or passed on.
    let leader = leader_of(&c);
    let follower = (leader + 1) % 3;
    let mut peer =
        seqsvr_proto::store_peer_client::StorePeerClient::new(c.raw(follower, Some("alloc-a")));
    let e = peer
        .renew(pb::RenewRequest {
            alloc_id: "a".into(),
            incarnation: 1,
            known_sections_version: 0,
        })
        .await
        .unwrap_err();
    let err = seqsvr_store_api::Error::from_status(&e);
    let seqsvr_store_api::Error::NotLeader {
        leader: Some((_, addr)),
    } = err
    else {
        panic!("a follower answers NOT_LEADER naming the leader: {e:?}");
    };
    assert_eq!(addr, c.peer[leader], "{e:?}");
}

/// A rolling upgrade: a replica of an older version still forwards an
/// AllocSvr's renewal to the leader (as a member, with its own
/// certificate). The leader does not take it, but its refusal — which the
/// older replica passes back unchanged — is a retryable NOT_LEADER naming
/// the leader, so the AllocSvr's client calls the leader itself and is
/// served, instead of failing for good on PERMISSION_DENIED. Nothing the
/// forwarded call asked for happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_replicas_forward_sends_the_allocsvr_to_the_leader() {
    let c = cluster().await;
    c.wait_configured().await;
    let a = c.alive("a", 1, 0).await;
    c.alive("b", 2, 0).await;
    let leader = leader_of(&c);
    let old = (leader + 1) % 3;
    // The older replica forwards a's renewal, and a's hand-off of its
    // section to b, to the leader.
    let mut fwd = StorePeerClient::new(c.raw(leader, Some(&format!("store-{}", old + 1))));
    let e = fwd
        .renew(forwarded(pb::RenewRequest {
            alloc_id: "a".into(),
            incarnation: 1,
            known_sections_version: 0,
        }))
        .await
        .unwrap_err();
    assert_call_the_leader(&c, &e);
    assert!(
        e.message().contains(&format!("by store {}", old + 1)),
        "{e:?}"
    );
    let e = fwd
        .handoff(forwarded(pb::HandoffRequest {
            from_alloc: "a".into(),
            incarnation: 1,
            to_alloc: "b".into(),
            section: 0,
            epoch: a.epoch,
        }))
        .await
        .unwrap_err();
    assert_call_the_leader(&c, &e);
    // What the AllocSvr's client does with the answer passed back: the
    // replica it names is called, as a itself, and renews.
    let Error::NotLeader {
        leader: Some((_, addr)),
    } = Error::from_status(&e)
    else {
        unreachable!("checked above");
    };
    let i = c.peer.iter().position(|p| *p == addr).expect("a replica");
    let mut own = StorePeerClient::new(c.raw(i, Some("alloc-a")));
    let lease = own
        .renew(pb::RenewRequest {
            alloc_id: "a".into(),
            incarnation: 1,
            known_sections_version: 0,
        })
        .await
        .expect("the leader serves a's own call")
        .into_inner();
    assert!(lease.lease_ms > 0, "{lease:?}");
    // The forwarded hand-off changed nothing: a's section is a's.
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq, "the section stayed a's");
}
