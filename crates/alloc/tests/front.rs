//! Forwarding, end to end (whole AllocSvr nodes over loopback gRPC against
//! the fake store; `docs/architecture/forwarding.md`): a caller that
//! knows ONE AllocSvr's address and has no routing code gets a number for
//! every uid — its AllocSvr's own from memory, the others' from their
//! owner — across a handoff both ways and the kill of an owner, with every
//! uid's numbers checked (promise 1: no repeat, no regression) and never a
//! wrong-node answer; two AllocSvrs that each think the other owns a
//! section end a call with a typed error after one hop, not a loop.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seqsvr_alloc::node::{AllocNode, AllocNodeConfig};
use seqsvr_core::checker::{check, Observation};
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb, detail_of, ErrorKind};
use tonic::transport::Channel;
use tonic::Code;

use seqsvr_testkit::node::*;

/// A fake store, and a1 and a2 started on it (with a1's config
/// changed by `tune`): sections 0–1 served by a1, 2–3 handed to a2.
async fn split_pair(tune: impl FnOnce(&mut AllocNodeConfig)) -> (FakeStore, AllocNode, AllocNode) {
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let (mut cfg, l) = node_config("a1", &addr, 50).await;
    tune(&mut cfg);
    let a1 = start_with(cfg, l).await;
    let a2 = start("a2", &addr, 50).await;
    hand_over(&store, &a1, (&a2, "a2"), &[2, 3]).await;
    (store, a1, a2)
}

/// What one caller saw.
#[derive(Default)]
struct Seen {
    obs: Vec<Observation>,
    /// Errors by kind (every one retried after its delay).
    errors: Vec<ErrorKind>,
}

/// A caller pointed at one address: `Next`, `NextBatch` and `Current` for
/// uids of every section, retried on retryable errors after the delay the
/// error names, until `stop`.
async fn caller(
    mut c: AllocClient<Channel>,
    seed: u64,
    stop: Arc<std::sync::atomic::AtomicBool>,
    seen: Arc<Mutex<Seen>>,
) {
    let mut i = seed;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        i += 1;
        let uid = (i * 7) % (SECTIONS as u64 * SECTION_SIZE);
        let start = Instant::now();
        let r = match (i / 7) % 5 {
            0 => {
                let uids = vec![uid, (uid + 13) % 40, uid, (uid + 29) % 40];
                c.next_batch(pb::NextBatchRequest { uids: uids.clone() })
                    .await
                    .map(|r| Observation::batch(&uids, &r.into_inner().seqs, start, Instant::now()))
            }
            1 => c
                .current(pb::CurrentRequest {
                    uid,
                    ..Default::default()
                })
                .await
                .map(|r| {
                    vec![Observation::current(
                        uid,
                        r.into_inner().seq,
                        start,
                        Instant::now(),
                    )]
                }),
            _ => c
                .next(pb::NextRequest {
                    uid,
                    count: 0,
                    ..Default::default()
                })
                .await
                .map(|r| {
                    vec![Observation::next(
                        uid,
                        r.into_inner().seq,
                        start,
                        Instant::now(),
                    )]
                }),
        };
        match r {
            Ok(o) => seen.lock().unwrap().obs.extend(o),
            Err(st) => {
                let d = detail_of(&st).unwrap_or_else(|| panic!("untyped error {st:?}"));
                let kind = ErrorKind::try_from(d.kind).unwrap();
                seen.lock().unwrap().errors.push(kind);
                assert!(d.retryable, "{kind:?} is not retryable: {st:?}");
                tokio::time::sleep(Duration::from_millis(d.retry_after_ms.max(5))).await;
            }
        }
    }
}

/// The caller talks to a1 only. Sections 2–3 are a2's; then a1 hands
/// section 1 to a2 and a2 hands section 3 to a1; then a2 is killed and
/// the store routes its sections to a1. Every uid's numbers are checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_answers_every_uid_across_handoffs_and_an_owner_kill() {
    let (store, a1, a2) = split_pair(|_| {}).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut tasks = Vec::new();
    for seed in 0..8 {
        let c = client(&a1).await;
        tasks.push(tokio::spawn(caller(
            c,
            seed * 1000,
            stop.clone(),
            seen.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let results = handoff(&a1, &[(1, "a2")]).await;
    assert!(results[0].ok, "{results:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let results = handoff(&a2, &[(3, "a1")]).await;
    assert!(results[0].ok, "{results:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // a2 dies; the store gives its sections to a1 (a take-over at the
    // ceiling: promise 1 across owners).
    a2.shutdown();
    {
        let mut st = store.st();
        for r in st.sections.iter_mut() {
            if r.owner.as_deref() == Some("a2") {
                r.owner = Some("a1".into());
            }
        }
        st.route_version += 1;
    }
    eventually("a1 serves every section", || {
        (0..SECTIONS).all(|s| a1.shared.alloc.is_serving(s))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let report = check(&seen.obs);
    println!(
        "{} numbers, {} reads, {} uids; errors {:?}",
        report.observations,
        report.reads,
        report.uids,
        kinds(&seen.errors)
    );
    assert!(report.ok(), "promise 1 broken: {report:?}");
    assert_eq!(report.uids, (SECTIONS as u64 * SECTION_SIZE) as usize);
    for wrong in [ErrorKind::NotOwner, ErrorKind::Moved, ErrorKind::NotServed] {
        assert!(
            !seen.errors.contains(&wrong),
            "a wrong-node answer: {wrong:?}"
        );
    }
    let m = &a1.shared.metrics.front;
    assert!(m.forwarded_count("next", "ok") > 0);
    assert!(m.forwarded_count("next_batch", "ok") > 0);
    assert!(m.forwarded_count("current", "ok") > 0);
    let text = a1.shared.render_metrics();
    assert!(
        text.contains("seqsvr_alloc_forward_batch_uids_count"),
        "{text}"
    );
    a1.shutdown();
}

fn kinds(errors: &[ErrorKind]) -> Vec<(ErrorKind, usize)> {
    let mut out: Vec<(ErrorKind, usize)> = Vec::new();
    for k in errors {
        match out.iter_mut().find(|(x, _)| x == k) {
            Some((_, n)) => *n += 1,
            None => out.push((*k, 1)),
        }
    }
    out
}

/// Concurrent single `Next`s through one non-owner reach the owner in
/// batches, and each caller's number is the owner's for its uid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_forwarded_calls_are_coalesced_into_batches() {
    let (_store, a1, a2) = split_pair(|_| {}).await;
    let mut before = Vec::new();
    for uid in 20..40 {
        let mut c = client(&a2).await;
        before.push(current(&mut c, uid).await.unwrap());
    }
    let mut calls = Vec::new();
    for i in 0..200u64 {
        let mut c = client(&a1).await;
        calls.push(tokio::spawn(async move {
            next(&mut c, 20 + i % 20).await.unwrap()
        }));
    }
    let mut got = Vec::new();
    for h in calls {
        got.push(h.await.unwrap());
    }
    // 200 numbers over 20 uids, 10 each, all distinct per uid.
    got.sort_unstable();
    got.dedup();
    assert!(got.len() >= 10, "{got:?}");
    let text = a1.shared.render_metrics();
    let count = metric(&text, "seqsvr_alloc_forward_batch_uids_count");
    let sum = metric(&text, "seqsvr_alloc_forward_batch_uids_sum");
    println!("200 forwarded calls went as {count} batches ({sum} uids)");
    assert_eq!(sum, 200.0);
    assert!(count < 200.0, "no call was coalesced: {count} batches");
    // What a2 handed out is what the callers got: 10 per uid.
    for (uid, before) in (20..40).zip(before) {
        let mut c = client(&a2).await;
        assert_eq!(
            current(&mut c, uid).await.unwrap(),
            before + 10,
            "uid {uid}"
        );
    }
    a1.shutdown();
    a2.shutdown();
}

/// Concurrent forwarded `NextBatch`es from many callers (each with a uid
/// of its own AllocSvr's and three of the other's) reach the owner as
/// combined batches, and each caller gets the owner's numbers for its
/// own uids, in its own order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_forwarded_batches_are_combined_across_callers() {
    let (_store, a1, a2) = split_pair(|_| {}).await;
    let mut before = Vec::new();
    for uid in 20..40 {
        let mut c = client(&a2).await;
        before.push(current(&mut c, uid).await.unwrap());
    }
    let mut calls = Vec::new();
    for i in 0..200u64 {
        let mut c = client(&a1).await;
        let uids = vec![i % 20, 20 + i % 20, 20 + (i + 7) % 20, 20 + i % 20];
        calls.push(tokio::spawn(async move {
            let r = c.next_batch(pb::NextBatchRequest { uids: uids.clone() });
            (uids, r.await.unwrap().into_inner().seqs)
        }));
    }
    let mut per_uid = vec![0u64; 40];
    for h in calls {
        let (uids, seqs) = h.await.unwrap();
        assert_eq!(seqs.len(), uids.len());
        // A uid listed twice gets two increasing numbers, in order.
        assert!(seqs[1] < seqs[3], "{uids:?} got {seqs:?}");
        for u in uids {
            per_uid[u as usize] += 1;
        }
    }
    let text = a1.shared.render_metrics();
    let batches = metric(&text, "seqsvr_alloc_forward_batch_calls_count");
    let combined = metric(&text, "seqsvr_alloc_forward_batch_calls_sum");
    println!("200 forwarded batches went to the owner as {batches} batches");
    assert_eq!(combined, 200.0);
    assert!(batches < 200.0, "no batch was combined: {batches} sent");
    // What a2 handed out is exactly what the callers got.
    for (uid, before) in (20..40).zip(before) {
        let mut c = client(&a2).await;
        let now = current(&mut c, uid).await.unwrap();
        assert_eq!(now, before + per_uid[uid as usize], "uid {uid}");
    }
    a1.shutdown();
    a2.shutdown();
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// With forwarding off, a uid owned elsewhere is refused `NOT_OWNER`
/// naming the owner (what every caller got before forwarding; the
/// forwarding test above fails that way when forwarding is off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_forwarding_off_a_foreign_uid_is_refused_with_its_owner() {
    let (_store, a1, a2) = split_pair(|cfg| cfg.forward.enabled = false).await;
    let mut c = client(&a1).await;
    let e = next(&mut c, 25).await.unwrap_err();
    assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::NotOwner));
    assert_eq!(detail_of(&e).unwrap().owner_addr, a2.local_addr.to_string());
    assert!(next(&mut c, 5).await.is_ok());
    a1.shutdown();
    a2.shutdown();
}

/// A call marked as forwarded is answered from memory or refused, never
/// forwarded again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_call_is_never_forwarded_again() {
    let (_store, a1, a2) = split_pair(|_| {}).await;
    let mut c = client(&a1).await;
    let mut req = tonic::Request::new(pb::NextRequest {
        uid: 25,
        count: 0,
        ..Default::default()
    });
    req.metadata_mut()
        .insert(seqsvr_client::FORWARDED_BY, "a9".parse().unwrap());
    let e = c.next(req).await.unwrap_err();
    assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::NotOwner));
    assert_eq!(a1.shared.metrics.front.forwarded_count("next", "ok"), 0);
    // Unmarked, the same call is forwarded and answered by the owner.
    let mut owner = client(&a2).await;
    let last = current(&mut owner, 25).await.unwrap();
    assert_eq!(next(&mut c, 25).await.unwrap(), last + 1);
    assert_eq!(a1.shared.metrics.front.forwarded_count("next", "ok"), 1);
    a1.shutdown();
    a2.shutdown();
}

/// a1's store routes section 2 to a2; a2's store routes it to a1. A call
/// for a uid of section 2 — at either — ends with a typed, retryable
/// `OWNER_UNAVAILABLE` within the forwarding deadline: one hop, no loop,
/// and neither AllocSvr hands out a number for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_allocsvrs_that_each_think_the_other_owns_a_section_end_in_a_typed_error() {
    let (mut cfg1, l1) = node_config("a1", "127.0.0.1:1", 50).await;
    let (mut cfg2, l2) = node_config("a2", "127.0.0.1:1", 50).await;
    let x = FakeStore::new("a1", 3000);
    let y = FakeStore::new("a2", 3000);
    x.st().sections[2].owner = Some("a2".into());
    y.st().sections[2].owner = Some("a1".into());
    for (store, other, at) in [(&x, "a2", &cfg2.addr), (&y, "a1", &cfg1.addr)] {
        store.st().allocs.insert(
            other.into(),
            AllocRec {
                incarnation: 0,
                addr: at.clone(),
                peer_addr: String::new(),
                fenced: false,
            },
        );
    }
    cfg1.store = vec![x.clone().serve().await];
    cfg2.store = vec![y.clone().serve().await];
    for cfg in [&mut cfg1, &mut cfg2] {
        cfg.forward.deadline_ms = 500;
    }
    let a1 = start_with(cfg1, l1).await;
    let a2 = start_with(cfg2, l2).await;
    for n in [&a1, &a2] {
        let mut c = client(n).await;
        let started = Instant::now();
        let e = next(&mut c, 25).await.unwrap_err();
        let took = started.elapsed();
        assert_eq!(
            kind(&e),
            (Code::Unavailable, ErrorKind::OwnerUnavailable),
            "{e:?}"
        );
        let d = detail_of(&e).unwrap();
        assert!(d.retryable && d.retry_after_ms > 0, "{d:?}");
        assert!(took < Duration::from_secs(3), "took {took:?}");
        let e = current(&mut c, 25).await.unwrap_err();
        assert_eq!(kind(&e), (Code::Unavailable, ErrorKind::OwnerUnavailable));
    }
    // Each forwarded its caller's calls once; the calls it received from
    // the other were answered from memory (refused), not forwarded back.
    for n in [&a1, &a2] {
        let m = &n.shared.metrics.front;
        assert_eq!(m.forwarded_count("next", "OWNER_UNAVAILABLE"), 1);
        assert_eq!(m.forwarded_count("current", "OWNER_UNAVAILABLE"), 1);
        assert_eq!(n.shared.alloc.current(25).ok(), None);
    }
    a1.shutdown();
    a2.shutdown();
}

/// The other doors answer through the same front: a1's Redis door gives
/// a number for a uid of a2's section (a2's number: forwarded), `INCRBY`
/// and `Next` with a count reserve their whole range at the owner, and
/// `GET` reads the owner's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_door_and_counted_next_are_forwarded_to_the_owner() {
    use redis::AsyncCommands;
    let door = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = door.local_addr().unwrap().to_string();
    let mut door = Some(door);
    let store = FakeStore::new("a1", 3000);
    let addr = store.clone().serve().await;
    let (mut cfg, mut l) = node_config("a1", &addr, 50).await;
    l.resp = door.take();
    cfg.resp = Some(seqsvr_alloc::node::RespSection::on(at.clone()));
    let a1 = start_with(cfg, l).await;
    let a2 = start("a2", &addr, 50).await;
    hand_over(&store, &a1, (&a2, "a2"), &[2]).await;
    let uid = a1.shared.alloc.spec().uids_of(2).start + 7;
    let key = format!("seq:{uid}");

    let mut r = redis::Client::open(format!("redis://{at}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let v1: u64 = r.incr(&key, 1).await.unwrap();
    let mut c2 = client(&a2).await;
    let v2 = next_here(&mut c2, uid).await.unwrap();
    assert!(v2 > v1, "the owner's next {v2} after the door's {v1}");
    let v3: u64 = r.incr(&key, 10).await.unwrap();
    assert_eq!(v3, v2 + 10, "INCRBY 10 reserved (v2, v2 + 10] at the owner");
    assert_eq!(current_here(&mut c2, uid).await.unwrap(), v3);
    let got: String = r.get(&key).await.unwrap();
    assert_eq!(got, v3.to_string());

    let mut c1 = client(&a1).await;
    let v4 = c1
        .next(pb::NextRequest {
            uid,
            count: 5,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .seq;
    assert_eq!(v4, v3 + 5, "Next with count 5 through a1");
    assert_eq!(current_here(&mut c2, uid).await.unwrap(), v4);
    assert!(
        !a1.shared.alloc.is_serving(2),
        "a1 answered without serving the section"
    );
}
