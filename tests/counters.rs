//! Declared counters end to end (`docs/counters.md`, Declared counters),
//! with the real binaries: `seqctl counter`, the admin plane called by a
//! plain gRPC client, the library call an importer uses, and numbers
//! through the Rust client and the Redis-protocol door. It tries to break
//! what a declaration promises: a floor set is in force for every later
//! call, also after the owner is killed (kill -9) and another takes the
//! section over; the maximum is a typed refusal at every door; every
//! number is in its class (≡ offset mod increment) across the take-over;
//! a deleted and re-created counter continues above everything it handed
//! out; bad input and re-runs change nothing.

use std::time::{Duration, Instant};

use seqsvr::ctl::counter::CounterAdmin;
use seqsvr_core::{name_key, NAME_KEYS};
use seqsvr_proto::{self as pb, CounterOp, ErrorKind};
use seqsvr_testkit::{name_set as set, Bins, SetCluster, TEST_EXPIRY};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// A name served by the set in sections 0..4 (first routed to alloc-1),
/// starting with `prefix`.
fn name_in_first_half(prefix: &str) -> String {
    (0u64..)
        .map(|i| format!("{prefix}:{i}"))
        .find(|n| name_key(n.as_bytes()).unwrap() < NAME_KEYS.start + 4000)
        .unwrap()
}

/// The kind in a status's detail.
fn kind_of(st: &tonic::Status) -> ErrorKind {
    let d = pb::detail_of(st).unwrap_or_default();
    ErrorKind::try_from(d.kind).unwrap_or(ErrorKind::Unspecified)
}

fn kind_of_err(e: &seqsvr::Error) -> ErrorKind {
    match e {
        seqsvr::Error::Rpc(st) => kind_of(st),
        other => panic!("not a status: {other}"),
    }
}

/// `next(name)` through the client, retried while the section moves.
async fn next(c: &seqsvr_client::SeqClient, name: &str) -> u64 {
    let start = Instant::now();
    loop {
        match c.next_name(name).await {
            Ok(v) => return v,
            Err(e) if start.elapsed() < Duration::from_secs(30) => {
                println!("next({name}): {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("next({name}): {e}"),
        }
    }
}

/// A counter call through the admin planes, retried while the section
/// moves (a typed refusal is returned at once).
async fn admin_call(
    admin: &CounterAdmin,
    req: pb::CounterRequest,
) -> Result<pb::CounterReply, seqsvr::Error> {
    let start = Instant::now();
    loop {
        match admin.call(req.clone()).await {
            Err(seqsvr::Error::Rpc(st))
                if pb::detail_of(&st).is_some_and(|d| d.retryable)
                    && start.elapsed() < Duration::from_secs(30) =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_counters_hold_across_a_kill_and_at_every_door() {
    let mut cluster = SetCluster::start(BINS, set(), 2);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let admin = CounterAdmin::new(&cluster.store.client_addrs, None);
    let ticket = name_in_first_half("ticket");

    // Bad input from seqctl changes nothing.
    for (bad, says) in [
        (vec!["create", ""], "a name is 1..=256 bytes"),
        (
            vec!["create", &ticket, "--increment", "0"],
            "increment must be within",
        ),
        (
            vec!["create", &ticket, "--increment", "2", "--offset", "2"],
            "offset must be below",
        ),
        (
            vec!["create", &ticket, "--floor", "5", "--max", "5"],
            "must be above the floor",
        ),
    ] {
        let (code, _, err) = seqctl(&cluster, &bad);
        assert_ne!(code, 0, "{bad:?} accepted");
        assert!(err.contains(says), "{bad:?}: {err}");
    }
    // And from the admin plane, with a plain gRPC client.
    let st = (cluster.store.ctl().leader_status().await).expect("a leader");
    let admin_addr = st.allocs.iter().find(|a| !a.admin_addr.is_empty()).unwrap();
    let mut plain = pb::alloc_admin_client::AllocAdminClient::connect(format!(
        "http://{}",
        admin_addr.admin_addr
    ))
    .await
    .unwrap();
    let too_long = vec![b'x'; 257];
    for name in [Vec::new(), too_long] {
        let r = plain
            .counter(pb::CounterRequest {
                op: CounterOp::CounterCreate as i32,
                name,
                increment: 1,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(kind_of(&r), ErrorKind::InvalidRequest, "{r:?}");
    }
    let (_, listed, _) = seqctl(&cluster, &["list"]);
    assert!(listed.trim().is_empty(), "bad input left {listed}");

    // Declare: odd numbers. Re-running is a no-op; other rules conflict.
    let (code, out, _) = seqctl(
        &cluster,
        &["create", &ticket, "--increment", "2", "--offset", "1"],
    );
    assert_eq!(code, 0);
    assert!(out.contains("changed"), "{out}");
    let (code, out, _) = seqctl(
        &cluster,
        &["create", &ticket, "--increment", "2", "--offset", "1"],
    );
    assert_eq!(code, 0);
    assert!(out.contains("unchanged"), "{out}");
    let (code, _, err) = seqctl(&cluster, &["create", &ticket, "--increment", "3"]);
    assert_ne!(code, 0);
    assert!(err.contains("declared already"), "{err}");

    let mut last = 0;
    for _ in 0..20 {
        let v = next(&c, &ticket).await;
        assert!(v > last && v % 2 == 1, "{v} after {last}");
        last = v;
    }

    // A floor, set as an importer does: in force for the very next call.
    let floor = last + 100_000;
    assert_eq!(
        admin
            .set_counter_floor(ticket.as_bytes(), floor)
            .await
            .unwrap(),
        floor
    );
    assert_eq!(
        admin
            .set_counter_floor(ticket.as_bytes(), floor)
            .await
            .unwrap(),
        floor
    );
    let back = admin
        .set_counter_floor(ticket.as_bytes(), floor - 1)
        .await
        .unwrap_err();
    assert_eq!(kind_of_err(&back), ErrorKind::CounterFloorBackwards);
    let v = next(&c, &ticket).await;
    assert!(v > floor && v % 2 == 1, "{v} after floor {floor}");
    last = v;

    // A capped counter: refused whole past its maximum, typed at every door.
    let capped = name_in_first_half("capped");
    let (code, _, _) = seqctl(&cluster, &["create", &capped, "--max", "3"]);
    assert_eq!(code, 0);
    assert_eq!(c.next_name_n(&capped, 2).await.unwrap(), 2);
    let e = c.next_name_n(&capped, 2).await.unwrap_err();
    assert!(
        matches!(e, seqsvr_client::Error::CounterMaxReached { max: 3, .. }),
        "{e:?}"
    );
    // Through the door of an AllocSvr that may not own it (forwarded).
    let resp = redis::Client::open(format!("redis://{}/", cluster.resp_addrs[1])).unwrap();
    let mut conn = resp.get_multiplexed_async_connection().await.unwrap();
    assert_eq!(
        redis::cmd("INCR")
            .arg(&capped)
            .query_async::<u64>(&mut conn)
            .await
            .unwrap(),
        3
    );
    let e = redis::cmd("INCR")
        .arg(&capped)
        .query_async::<u64>(&mut conn)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("COUNTER_MAX_REACHED"), "{e}");

    // An import from a Leaf dump sets floors through the owners: the
    // imported name continues above its Leaf max_id; run again, nothing
    // moves back ("already above").
    let imported = name_in_first_half("leaf");
    let dump = cluster.store.dir.path().join("leaf_alloc.sql");
    std::fs::write(
        &dump,
        format!("INSERT INTO `leaf_alloc` VALUES ('{imported}',120001,2000,'t',NULL);\n"),
    )
    .unwrap();
    let dump = dump.to_str().unwrap();
    let (code, out, _) = seqctl(&cluster, &["import", "leaf", dump]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("imported 1, already above 0, refused 0"),
        "{out}"
    );
    let v = next(&c, &imported).await;
    assert!(v > 120_001, "{v} after an import at 120001");
    let (code, out, _) = seqctl(&cluster, &["import", "leaf", dump]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("imported 0, already above 1, refused 0"),
        "{out}"
    );
    assert!(next(&c, &imported).await > v);

    // The owner of the names' sections killed: the other AllocSvr takes
    // them over, loads the declarations, and serves above the floor, odd.
    let routes = cluster.store.read().routes().await.unwrap();
    let owner = routes
        .entry_for_uid(name_key(ticket.as_bytes()).unwrap())
        .unwrap();
    let i: usize = owner.alloc.trim_start_matches("alloc-").parse().unwrap();
    cluster.allocs[i - 1].kill9();
    tokio::time::sleep(TEST_EXPIRY).await;
    for _ in 0..20 {
        let v = next(&c, &ticket).await;
        assert!(v > last && v % 2 == 1, "after the kill: {v} after {last}");
        last = v;
    }
    let e = loop {
        match c.next_name(&capped).await {
            Err(seqsvr_client::Error::CounterMaxReached { max, .. }) => break max,
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(e, 3);
    let shown = admin_call(
        &admin,
        pb::CounterRequest {
            op: CounterOp::CounterShow as i32,
            name: ticket.as_bytes().to_vec(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let d = shown.counters[0].decl.clone().unwrap();
    assert!(d.declared && d.floor == floor && d.increment == 2, "{d:?}");

    // Delete: a tombstone; the name continues above everything, with the
    // defaults; re-created, it continues above everything too.
    let (code, _, _) = seqctl(&cluster, &["delete", &ticket]);
    assert_eq!(code, 0);
    let (code, out, _) = seqctl(&cluster, &["delete", &ticket]);
    assert!(code == 0 && out.contains("unchanged"), "{out}");
    let v = next(&c, &ticket).await;
    assert!(v > last, "after delete: {v} after {last}");
    last = v;
    let (code, _, _) = seqctl(
        &cluster,
        &["create", &ticket, "--increment", "2", "--offset", "1"],
    );
    assert_eq!(code, 0);
    let v = next(&c, &ticket).await;
    assert!(v > last && v % 2 == 1, "re-created: {v} after {last}");

    let (_, listed, _) = seqctl(&cluster, &["list"]);
    assert!(
        listed.contains(&ticket) && listed.contains(&capped),
        "{listed}"
    );
}

/// `seqctl --store … counter <args>`: exit code, stdout, stderr.
fn seqctl(c: &SetCluster, args: &[&str]) -> (i32, String, String) {
    let r = c.seqctl(&[&["counter"], args].concat());
    (r.code.unwrap_or(-1), r.out, r.err)
}
