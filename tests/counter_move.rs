//! Declared counters across a range move between sets, end to end (real
//! binaries; `docs/counters.md`, Moves and backups): a floor, a maximum
//! and an odd-numbers counter declared at set 0 are honoured by their new
//! owner in set 1 once `seqctl set move` moved their section, whether the
//! move ran at once or was stopped after a step and run again, and
//! running it again after it finished changes nothing.

use std::time::{Duration, Instant};

use seqsvr::ctl::counter::CounterAdmin;
use seqsvr_core::{name_key, SetSpec, NAME_KEYS};
use seqsvr_proto::{self as pb, CounterOp};
use seqsvr_testkit::sets::{seqctl, two_sets_of};
use seqsvr_testkit::{Bins, SetCluster, StoreOptions};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Set 0 serves the first 4,000 positions of the name range (4 sections of
/// 1,000); set 1 spans 8,000 and is added for the second 4,000.
fn spec(set_id: u32, positions: u64) -> SetSpec {
    SetSpec {
        set_id,
        uid_begin: NAME_KEYS.start,
        uid_end: NAME_KEYS.start + positions,
        section_size: 1000,
        step: 500,
    }
}

/// The moved range: set 0's first two sections.
const MOVED: u64 = 2000;

/// A name starting with `prefix` whose position lies in the moved range.
fn moved_name(prefix: &str) -> String {
    (0u64..)
        .map(|i| format!("{prefix}:{i}"))
        .find(|n| name_key(n.as_bytes()).unwrap() < NAME_KEYS.start + MOVED)
        .unwrap()
}

async fn two_sets() -> (SetCluster, SetCluster) {
    let range = format!("{}..{}", NAME_KEYS.start + 4000, NAME_KEYS.start + 8000);
    let specs = (spec(0, 4000), spec(1, 8000));
    two_sets_of(BINS, specs, &range, StoreOptions::default(), true).await
}

/// `seqctl set move` of the moved range to set 1, run until it succeeds
/// (a store election may fail a run; running it again resumes the move).
fn move_range(a: &SetCluster, stop_after: Option<&str>) -> String {
    let range = format!("{}..{}", NAME_KEYS.start, NAME_KEYS.start + MOVED);
    let mut args = vec!["set", "move", "--range", &range, "--to", "1"];
    if let Some(step) = stop_after {
        args.extend(["--stop-after", step]);
    }
    let start = Instant::now();
    loop {
        let (ok, out) = seqctl(a, &args);
        let stopped = stop_after.is_some() && out.contains("stopped after step");
        if ok || stopped {
            return out;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{out}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A counter write through the admin planes, retried while no owner
/// answers (a section being taken over).
async fn declare(admin: &CounterAdmin, req: pb::CounterRequest) {
    let start = Instant::now();
    while let Err(e) = admin.call(req.clone()).await {
        assert!(start.elapsed() < Duration::from_secs(30), "{req:?}: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `next(name)`: the number, or the client's error once retries are over.
async fn next(c: &seqsvr_client::SeqClient, name: &str) -> Result<u64, seqsvr_client::Error> {
    let start = Instant::now();
    loop {
        match c.next_name(name).await {
            Err(e) if e.is_retryable() && start.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// The three declarations, and the numbers handed out before the move.
struct Declared {
    floor: String,
    max: String,
    odd: String,
    odd_last: u64,
}

async fn declare_three(a: &SetCluster, c: &seqsvr_client::SeqClient, tag: &str) -> Declared {
    let admin = CounterAdmin::new(&a.store.client_addrs, None);
    let d = Declared {
        floor: moved_name(&format!("floor-{tag}")),
        max: moved_name(&format!("max-{tag}")),
        odd: moved_name(&format!("odd-{tag}")),
        odd_last: 0,
    };
    let op = |op: CounterOp, name: &str| pb::CounterRequest {
        op: op as i32,
        name: name.as_bytes().to_vec(),
        increment: 1,
        ..Default::default()
    };
    let set_floor = pb::CounterRequest {
        floor: 1_000_000,
        ..op(CounterOp::CounterSetFloor, &d.floor)
    };
    declare(&admin, set_floor).await;
    let max = pb::CounterRequest {
        has_max: true,
        max: 3,
        ..op(CounterOp::CounterCreate, &d.max)
    };
    declare(&admin, max).await;
    let odd = pb::CounterRequest {
        increment: 2,
        offset: 1,
        ..op(CounterOp::CounterCreate, &d.odd)
    };
    declare(&admin, odd).await;
    assert_eq!(next(c, &d.floor).await.unwrap(), 1_000_001);
    assert_eq!(next(c, &d.max).await.unwrap(), 1);
    assert_eq!(next(c, &d.max).await.unwrap(), 2);
    let odd_last = next(c, &d.odd).await.unwrap();
    assert_eq!(odd_last % 2, 1, "{odd_last}");
    Declared { odd_last, ..d }
}

/// The new owner in set 1 honours all three: above the floor, odd
/// numbers only, and nothing past the maximum — the take-over skipped the
/// name ahead to the section's final ceiling (`docs/counters.md`, What a
/// caller may observe), past 3, so the first call is a typed refusal.
async fn honoured(c: &seqsvr_client::SeqClient, d: &Declared) {
    let f = next(c, &d.floor).await.unwrap();
    assert!(f > 1_000_001, "{} after the move: {f}", d.floor);
    let refused = next(c, &d.max).await.unwrap_err();
    assert!(
        matches!(
            refused,
            seqsvr_client::Error::CounterMaxReached { max: 3, .. }
        ),
        "{}: {refused:?}",
        d.max
    );
    let mut last = d.odd_last;
    for _ in 0..5 {
        let v = next(c, &d.odd).await.unwrap();
        assert!(v > last && v % 2 == 1, "{}: {v} after {last}", d.odd);
        last = v;
    }
}

/// Both sets, a client over them, and the three declarations (names
/// tagged `tag`) at set 0.
async fn declared_on_two_sets(
    tag: &str,
) -> (SetCluster, SetCluster, seqsvr_client::SeqClient, Declared) {
    let (a, b) = two_sets().await;
    let c = SetCluster::client_over(&[&a, &b]).await;
    let d = declare_three(&a, &c, tag).await;
    (a, b, c, d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarations_move_with_their_section() {
    let (a, b, c, d) = declared_on_two_sets("x").await;
    // Stopped after the release (before the declarations are copied),
    // then run again: the run that resumes copies them before installing.
    let out = move_range(&a, Some("release"));
    assert!(out.contains("stopped after step release"), "{out}");
    let out = move_range(&a, None);
    assert!(
        out.contains("declared counters: 3 copied (3 written"),
        "{out}"
    );
    honoured(&c, &d).await;
    // The destination's store holds them, the maximum and the class with
    // them, and shows them to an operator.
    let admin = CounterAdmin::new(&b.store.client_addrs, None);
    let list = pb::CounterRequest {
        op: CounterOp::CounterList as i32,
        ..Default::default()
    };
    let listed = admin.call(list).await.unwrap();
    let shown: Vec<_> = (listed.counters.iter())
        .filter_map(|s| s.decl.as_ref())
        .map(|d| {
            (
                String::from_utf8_lossy(&d.name).into_owned(),
                d.floor,
                d.has_max,
                d.max,
                d.increment,
            )
        })
        .collect();
    assert!(shown.contains(&(d.max.clone(), 0, true, 3, 1)), "{shown:?}");
    assert!(
        shown.contains(&(d.odd.clone(), 0, false, 0, 2)),
        "{shown:?}"
    );
    assert!(
        shown.contains(&(d.floor.clone(), 1_000_000, false, 0, 1)),
        "{shown:?}"
    );
    // Run again once finished: nothing moves, nothing is copied again.
    let out = move_range(&a, None);
    assert!(out.contains("already moved"), "{out}");
    honoured_again(&c, &d).await;
}

/// After the move finished and was run again: still the maximum, still
/// odd numbers.
async fn honoured_again(c: &seqsvr_client::SeqClient, d: &Declared) {
    let refused = next(c, &d.max).await.unwrap_err();
    assert!(
        matches!(refused, seqsvr_client::Error::CounterMaxReached { .. }),
        "{refused:?}"
    );
    let v = next(c, &d.odd).await.unwrap();
    assert_eq!(v % 2, 1, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_stopped_after_its_install_keeps_the_declarations() {
    let (a, _b, c, d) = declared_on_two_sets("y").await;
    // Copied and installed, then stopped: the destination serves the
    // sections with the declarations already; the run that finishes the
    // move copies nothing more.
    let out = move_range(&a, Some("install"));
    assert!(out.contains("stopped after step install"), "{out}");
    let out = move_range(&a, None);
    assert!(
        out.contains("declared counters: 3 copied (0 written"),
        "{out}"
    );
    honoured(&c, &d).await;
}

/// A mover older than the copy of declarations says nothing of copying in
/// its freeze and install (`copies_counters`, `counters_copied` unset):
/// for a move under way of a range holding names, both are refused at
/// every replica, before anything is frozen. The names keep being served with their
/// declarations, and the move run by this version then carries them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mover_that_does_not_copy_declarations_is_refused() {
    use pb::store_sets_client::StoreSetsClient;
    let (a, b, c, d) = declared_on_two_sets("z").await;
    // The move recorded, as by any mover; its id is in the directory.
    let out = move_range(&a, Some("begin"));
    assert!(out.contains("stopped after step begin"), "{out}");
    let routes = pb::store_read_client::StoreReadClient::connect(format!(
        "http://{}",
        a.store.client_addrs[0]
    ))
    .await
    .unwrap()
    .get_routes(pb::GetRoutesRequest {})
    .await
    .unwrap()
    .into_inner();
    let directory = routes.directory.expect("set 0 holds the directory");
    assert!(directory.moving.is_some(), "{directory:?}");
    let move_id = directory.move_id;
    let (begin, end) = (NAME_KEYS.start, NAME_KEYS.start + MOVED);
    let refused = |e: tonic::Status| {
        assert!(
            e.message()
                .contains("does not copy their declared counters"),
            "{e:?}"
        );
    };
    for addr in &a.store.admin_addrs {
        let mut sets = StoreSetsClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let freeze = pb::FreezeRequest {
            first_section: 0,
            count: 2,
            to_set: 1,
            move_id,
            set_id: 0,
            begin,
            end,
            ..Default::default()
        };
        refused(sets.freeze(freeze).await.unwrap_err());
    }
    for addr in &b.store.admin_addrs {
        let mut sets = StoreSetsClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let install = pb::InstallRequest {
            first_section: 0,
            floors: vec![0, 0],
            move_id,
            set_id: 1,
            begin,
            end,
            kind: Some(pb::install_request::Kind::MovedFrom(0)),
            ..Default::default()
        };
        refused(sets.install(install).await.unwrap_err());
    }
    // Nothing was frozen: set 0 still serves the names as declared.
    let v = next(&c, &d.odd).await.unwrap();
    assert_eq!(v % 2, 1, "{v}");
    let out = move_range(&a, None);
    assert!(
        out.contains("declared counters: 3 copied (3 written"),
        "{out}"
    );
    honoured_again(&c, &d).await;
}
