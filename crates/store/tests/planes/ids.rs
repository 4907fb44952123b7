//! The store's id-namespace calls from the planes (docs/ids.md): only the
//! registered incarnation of the AllocSvr a call names may claim, raise or
//! release a worker id, and only its holder at its epoch may raise or
//! release it; operators create namespaces. Every refusal is typed and
//! changes nothing; a worker id whose holder's lease lapsed is reclaimed
//! above its ceiling.

use seqsvr_core::ids::Layout;
use seqsvr_store_api::ids::IdSpaceShown;
use seqsvr_store_api::{AdminClient, IdRefusal};

use super::*;

fn admin(c: &Cluster, cert: &str) -> AdminClient {
    let addrs: Vec<String> = c.nodes.iter().map(|n| n.addrs.admin.to_string()).collect();
    AdminClient::new(&addrs, &connector(Some(tls(&c.pki, cert)))).unwrap()
}

fn refusal<T: std::fmt::Debug>(r: Result<T, Error>) -> IdRefusal {
    match r {
        Err(Error::Rejected(Rejection::Ids { kind, .. })) => kind,
        other => panic!("expected ID_REFUSED, got {other:?}"),
    }
}

fn denied<T: std::fmt::Debug>(r: Result<T, Error>) {
    match r {
        Err(Error::Denied(_)) => {}
        other => panic!("expected PERMISSION_DENIED, got {other:?}"),
    }
}

async fn register(c: &Cluster, alloc: &str, inc: u64) -> PeerClient {
    let p = c.peer_as(&format!("alloc-{alloc}"));
    let addrs = AllocAddrs {
        client: format!("127.0.0.1:{}", 9400 + inc),
        peer: format!("127.0.0.1:{}", 9500 + inc),
        admin: format!("127.0.0.1:{}", 9600 + inc),
    };
    p.register_alloc(alloc, inc, &addrs).await.unwrap();
    p
}

async fn shown(c: &Cluster, ns: &str) -> IdSpaceShown {
    let mut all = admin(c, "ops").id_spaces(ns).await.unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_holder_claims_raises_and_releases_its_worker_id() {
    let c = cluster().await;
    c.wait_configured().await;
    let ops = admin(&c, "ops");
    let now = 1_700_000_000_000;

    // Namespaces: operators only; layouts and windows checked.
    assert!(ops
        .create_id_space("msg", &Layout::twitter(), 1000)
        .await
        .unwrap());
    assert!(!ops
        .create_id_space("msg", &Layout::twitter(), 1000)
        .await
        .unwrap());
    let r = ops.create_id_space("msg", &Layout::twitter(), 2000).await;
    assert_eq!(refusal(r), IdRefusal::Mismatch);
    let mut wide = Layout::twitter();
    wide.time_bits = 60;
    let r = ops.create_id_space("wide", &wide, 1000).await;
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    let r = ops.create_id_space("", &Layout::twitter(), 1000).await;
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    denied(
        admin(&c, "alloc-a")
            .create_id_space("x", &Layout::twitter(), 1000)
            .await,
    );
    denied(admin(&c, "alloc-a").id_spaces("").await);
    assert_eq!(ops.id_spaces("").await.unwrap().len(), 1);

    let a = register(&c, "a", 1).await;
    let b = register(&c, "b", 1).await;
    let claimed = a.claim_worker("a", 1, "msg", now).await.unwrap();
    assert_eq!(claimed.layout, Layout::twitter());
    assert_eq!(claimed.window_ms, 1000);
    let g = claimed.grant;
    assert_eq!((g.worker, g.epoch, g.floor), (0, 1, 1));
    let tick = Layout::twitter().tick_of(now);
    assert_eq!(g.ceiling, tick + 1000);
    // A retried claim gets the same holding back.
    assert_eq!(
        a.claim_worker("a", 1, "msg", now + 5).await.unwrap().grant,
        g
    );
    let before = shown(&c, "msg").await;

    // A stranger in a's name, an operator, a stale incarnation, another
    // AllocSvr, a wrong epoch, an unknown namespace: each refused.
    denied(b.claim_worker("a", 1, "msg", now).await);
    denied(
        b.raise_worker("a", 1, "msg", 0, g.epoch, g.ceiling + 10)
            .await,
    );
    denied(b.release_worker("a", 1, "msg", 0, g.epoch).await);
    denied(c.peer_as("ops").claim_worker("a", 1, "msg", now).await);
    let r = a
        .raise_worker("a", 2, "msg", 0, g.epoch, g.ceiling + 10)
        .await;
    assert!(
        matches!(r, Err(Error::Rejected(Rejection::StaleIncarnation { .. }))),
        "{r:?}"
    );
    let r = a.claim_worker("a", 2, "msg", now).await;
    assert!(
        matches!(r, Err(Error::Rejected(Rejection::StaleIncarnation { .. }))),
        "{r:?}"
    );
    let r = b
        .raise_worker("b", 1, "msg", 0, g.epoch, g.ceiling + 10)
        .await;
    assert_eq!(refusal(r), IdRefusal::NotHolder);
    let r = b.release_worker("b", 1, "msg", 0, g.epoch).await;
    assert_eq!(refusal(r), IdRefusal::NotHolder);
    let r = a
        .raise_worker("a", 1, "msg", 0, g.epoch + 1, g.ceiling + 10)
        .await;
    assert_eq!(refusal(r), IdRefusal::NotHolder);
    let r = a.claim_worker("a", 1, "nope", now).await;
    assert_eq!(refusal(r), IdRefusal::UnknownNamespace);
    let r = a.claim_worker("a", 1, "", now).await;
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    assert_eq!(
        shown(&c, "msg").await,
        before,
        "a refusal changed something"
    );

    // The holder raises (only up) and releases; the next holder starts
    // above the ceiling whatever its clock says.
    let up = a
        .raise_worker("a", 1, "msg", 0, g.epoch, g.ceiling + 500)
        .await
        .unwrap();
    assert_eq!(up, g.ceiling + 500);
    let same = a
        .raise_worker("a", 1, "msg", 0, g.epoch, g.ceiling)
        .await
        .unwrap();
    assert_eq!(same, up);
    let s = shown(&c, "msg").await;
    assert_eq!(s.workers[0].holder, Some(("a".into(), 1)));
    a.release_worker("a", 1, "msg", 0, g.epoch).await.unwrap();
    let r = a.release_worker("a", 1, "msg", 0, g.epoch).await;
    assert_eq!(refusal(r), IdRefusal::NotHolder);
    let back = b.claim_worker("b", 1, "msg", now - 60_000).await.unwrap();
    assert_eq!(back.grant.worker, 0);
    assert_eq!(back.grant.epoch, 2);
    assert_eq!(back.grant.floor, up + 1);
    assert!(back.grant.ceiling > up);
}

/// A holder whose lease lapsed (it never renews) loses its worker id to
/// the next claim once the leader sees the lease certainly expired; the
/// new holding starts above the old ceiling and the old holder's raises
/// are refused. Holders that renew keep theirs, and a claim when all are
/// held is refused as exhaustion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_holders_worker_id_is_reclaimed_above_its_ceiling() {
    let c = cluster().await;
    c.wait_configured().await;
    let mut two = Layout::twitter();
    two.worker_bits = 1;
    admin(&c, "ops")
        .create_id_space("pair", &two, 1000)
        .await
        .unwrap();
    let now = 1_700_000_000_000;
    let a = register(&c, "a", 1).await;
    let b = register(&c, "b", 1).await;
    let cc = register(&c, "c", 1).await;
    let ga = a.claim_worker("a", 1, "pair", now).await.unwrap().grant;
    let gb = b.claim_worker("b", 1, "pair", now).await.unwrap().grant;
    assert_eq!((ga.worker, gb.worker), (0, 1));
    // b and c keep their leases; a never renews.
    let (b2, c2) = (b.clone(), cc.clone());
    let renewing = tokio::spawn(async move {
        loop {
            let _ = b2.renew("b", 1).await;
            let _ = c2.renew("c", 1).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut waited = 0;
    let gc = loop {
        match cc.claim_worker("c", 1, "pair", now).await {
            Ok(cl) => break cl.grant,
            Err(Error::Rejected(Rejection::Ids {
                kind: IdRefusal::WorkersExhausted,
                ..
            })) if waited < 200 => {
                waited += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("claim by c: {other:?}"),
        }
    };
    println!("c reclaimed after {} ms of waiting", waited * 100);
    assert_eq!(gc.worker, 0, "only the lapsed holder's worker id is taken");
    assert_eq!(gc.epoch, ga.epoch + 1);
    assert_eq!(gc.floor, ga.ceiling + 1);
    let r = a
        .raise_worker("a", 1, "pair", 0, ga.epoch, ga.ceiling + 9)
        .await;
    assert_eq!(refusal(r), IdRefusal::NotHolder);
    // a's next incarnation finds every worker id held by a live holder.
    let a2 = register(&c, "a", 2).await;
    let r = a2.claim_worker("a", 2, "pair", now).await;
    assert_eq!(refusal(r), IdRefusal::WorkersExhausted);
    let s = shown(&c, "pair").await;
    assert_eq!(s.workers[1].holder, Some(("b".into(), 1)));
    assert!(s.workers[1].live);
    renewing.abort();
}
