//! Sets end to end (real processes): a set added online, uid ranges moved
//! between sets under load — whole, and crashed at every step of the move
//! then resumed — and operators' mistakes refused. Every number clients
//! received is checked per uid (promise 1; `docs/architecture/sets.md`),
//! and what each move skipped per section (promise 4).

mod fence_move;

use std::process::Command;
use std::time::{Duration, Instant};

use seqsvr::drill::{widest_section_jump, NUMBERS_PER_CALL};
use seqsvr_testkit::sets::{seqctl, set2, two_sets};
use seqsvr_testkit::{self as kit, Bins};
use seqsvr_testkit::{assert_monotonic, SetCluster, Workload};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Callers of the workload under moves.
const CALLERS: u64 = 8;

/// The largest jump a move may cost a drill of [`CALLERS`] over the test
/// sets: two steps, plus what the callers may not have seen (as
/// `Bounds::section_jump` counts it).
fn move_jump() -> u64 {
    2 * kit::sets::set1().step + 1 + 2 * NUMBERS_PER_CALL * CALLERS
}

/// Callers over every uid of both sets (`next`, and every 4th call
/// `current`), through one client seeded with every AllocSvr.
async fn workload(a: &SetCluster, b: &SetCluster, callers: u64) -> Workload {
    workload_over(&[a, b], callers).await
}

/// Callers over uids `[0, 4000)`, through one client seeded with every
/// AllocSvr of `sets`.
async fn workload_over(sets: &[&SetCluster], callers: u64) -> Workload {
    let seeds: Vec<String> = sets.iter().flat_map(|s| s.alloc_addrs.clone()).collect();
    let opts = seqsvr_client::ClientOptions {
        deadline: Duration::from_secs(3),
        ..Default::default()
    };
    let client = std::sync::Arc::new(
        seqsvr_client::SeqClient::connect(&seeds, opts)
            .await
            .unwrap(),
    );
    let mut w = Workload::new();
    for c in 0..callers {
        let (client, r) = (client.clone(), w.recorder());
        w.tasks.push(tokio::spawn(async move {
            let mut uid = c * 37;
            let mut i = 0u64;
            while !r.stopped() {
                uid = (uid + 101) % 4000;
                i += 1;
                // Every 4th call reads `current`, checked against the
                // numbers around it.
                if i.is_multiple_of(4) {
                    r.current(&client, uid).await;
                } else {
                    r.next(&client, uid).await;
                }
            }
        }));
    }
    w
}

/// The version of the directory, as `seqctl set status --json` prints it.
fn directory_version(home: &SetCluster) -> u64 {
    let (ok, out) = seqctl(home, &["set", "status", "--json"]);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    v["directory_version"].as_u64().unwrap()
}

/// Replaces store replica 3 of `set`'s group by a new replica 4 with
/// `seqctl store replace`, kills the old one and deletes its data.
async fn replace_a_replica(set: &mut SetCluster) {
    let peer = set.store.start_joining(4);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let new = format!("4={peer}");
    let (ok, out) = seqctl(set, &["store", "replace", "--old", "3", "--new", &new]);
    assert!(ok, "replace failed: {out}\n{}", set.store.logs());
    set.store.procs[2].kill9();
    std::fs::remove_dir_all(set.store.dir.path().join("store-3")).unwrap();
}

/// Set 1's leader keeps set 1's directory entry current: after one of its
/// replicas is replaced, the directory read from set 0 lists the new
/// replica's address and no longer the old one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replaced_replica_of_set_1_reaches_the_directory() {
    let (a, mut b) = two_sets(BINS).await;
    let old = b.store.client_addrs[2].clone();
    replace_a_replica(&mut b).await;
    let read = seqsvr_store_api::ReadClient::new(
        &a.store.client_addrs,
        &seqsvr_store_api::client::plaintext(),
    )
    .unwrap();
    let start = Instant::now();
    loop {
        let dir = read.routes().await.unwrap().directory.unwrap();
        let listed = dir.sets[&1].stores.clone();
        if listed.len() == 3 && !listed.contains(&old) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "set 1's entry still {listed:?} (replica 3 was {old})\n{}",
            b.store.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_set_added_and_ranges_moved_under_load_repeat_nothing() {
    let (mut a, mut b) = two_sets(BINS).await;
    let w = workload(&a, &b, CALLERS).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let moving = Instant::now();
    // Set 0 → set 1, a store replica of each set replaced, then part of
    // the range moved back.
    for (i, (range, to)) in [("500..1200", "1"), ("800..1000", "0")]
        .into_iter()
        .enumerate()
    {
        let (ok, out) = seqctl(&a, &["set", "move", "--range", range, "--to", to]);
        assert!(
            ok,
            "move failed: {out}\n{}\n{}",
            a.store.logs(),
            b.store.logs()
        );
        assert!(out.contains("unavailable:"), "{out}");
        if i == 0 {
            replace_a_replica(&mut a).await;
            replace_a_replica(&mut b).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // Running a finished move again reports it done and changes nothing.
    let v = directory_version(&a);
    let (ok, out) = seqctl(&a, &["set", "move", "--range", "800..1000", "--to", "0"]);
    assert!(ok && out.contains("already moved"), "{out}");
    assert_eq!(directory_version(&a), v);
    let (_, status) = seqctl(&a, &["status"]);
    assert!(status.contains("set 1:"), "{status}");
    let (obs, _) = w.finish().await;
    // Every moved uid was served again after its move.
    for uid in [500u64, 700, 850, 1100] {
        assert!(
            obs.iter()
                .any(|o| o.uid == uid && o.kind == seqsvr_core::checker::Kind::Next),
            "uid {uid} never served"
        );
    }
    assert_monotonic(&obs, || format!("{}\n{}", a.store.logs(), b.store.logs()));
    // Promise 4, one operation at a time (plus what the callers in flight
    // took): a move skips at most two steps (the destination installs at
    // the final ceiling plus a step, and its first owner's take-over
    // starts there), each handoff of a rebalance one. The sets' section
    // grids agree, so set 1's spec groups every uid with its ceiling.
    let grid = kit::sets::set1();
    let (section, jump) = widest_section_jump(&grid, &obs, moving..Instant::now());
    let bound = 2 * grid.step + 1 + NUMBERS_PER_CALL * CALLERS;
    println!("widest jump across the moves: {jump} in section {section} (bound {bound})");
    assert!(
        jump <= bound,
        "section {section} jumped {jump} > {bound}\n{}\n{}",
        a.store.logs(),
        b.store.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_crashed_after_each_step_resumes_and_repeats_nothing() {
    let (mut a, mut b) = two_sets(BINS).await;
    let w = workload(&a, &b, 6).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let steps = ["begin", "freeze", "release", "install", "claim"];
    for (i, step) in steps.iter().enumerate() {
        let range = format!("{}..{}", i * 200, i * 200 + 200);
        let (ok, out) = seqctl(
            &a,
            &[
                "set",
                "move",
                "--range",
                &range,
                "--to",
                "1",
                "--stop-after",
                step,
            ],
        );
        assert!(!ok && out.contains("stopped after step"), "{out}");
        // Crash a different node each time: source leader, destination
        // leader, a source AllocSvr, a destination AllocSvr, a source
        // follower.
        let la = a.store.wait_ready(Duration::from_secs(20)).await;
        let lb = b.store.wait_ready(Duration::from_secs(20)).await;
        let victim = match i % 5 {
            0 => &mut a.store.procs[la],
            1 => &mut b.store.procs[lb],
            2 => &mut a.allocs[0],
            3 => &mut b.allocs[1],
            _ => &mut a.store.procs[(la + 1) % 3],
        };
        println!("kill -9 {} after step {step}", victim.name);
        victim.kill9();
        tokio::time::sleep(Duration::from_millis(500)).await;
        victim.restart();
        a.store.wait_ready(Duration::from_secs(30)).await;
        b.store.wait_ready(Duration::from_secs(30)).await;
        let start = Instant::now();
        loop {
            let (ok, out) = seqctl(&a, &["set", "move", "--range", &range, "--to", "1"]);
            if ok {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "resume after {step} failed: {out}\n{}\n{}",
                a.store.logs(),
                b.store.logs()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (obs, _) = w.finish().await;
    // The moved range [0, 1000) ends up served by set 1 only.
    let (_, status) = seqctl(&a, &["set", "status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(status.trim()).unwrap();
    let set1_ranges = &v["sets"][1]["ranges"];
    assert_eq!(set1_ranges[0][0].as_u64(), Some(0), "{status}");
    assert_eq!(set1_ranges[0][1].as_u64(), Some(1000), "{status}");
    assert!(v["moving"].is_null(), "{status}");
    assert_monotonic(&obs, || format!("{}\n{}", a.store.logs(), b.store.logs()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_mistakes_are_refused_and_change_nothing() {
    let (a, b) = two_sets(BINS).await;
    let v = directory_version(&a);
    let stores = b.store.client_addrs.join(",");
    let home = a.store.client_addrs.join(",");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // Overlaps set 0.
        (
            vec![
                "set",
                "add",
                "--id",
                "2",
                "--range",
                "1500..2500",
                "--set-store",
                &stores,
            ],
            "the stores serve set 1",
        ),
        // Set 1's group again under its own id, for another range.
        (
            vec![
                "set",
                "add",
                "--id",
                "1",
                "--range",
                "500..600",
                "--set-store",
                &stores,
            ],
            "already exists",
        ),
        // Set 0's own group as a new set.
        (
            vec![
                "set",
                "add",
                "--id",
                "0",
                "--range",
                "5000..6000",
                "--set-store",
                &home,
            ],
            "outside set 0's span",
        ),
        (
            vec!["set", "move", "--range", "20..80", "--to", "1"],
            "whole sections",
        ),
        (
            vec!["set", "move", "--range", "100..200", "--to", "7"],
            "no set 7",
        ),
        (
            vec!["set", "move", "--range", "1900..2100", "--to", "1"],
            "outside set 0's span",
        ),
        (
            vec!["set", "move", "--range", "300..200", "--to", "1"],
            "inverted",
        ),
        (
            vec!["set", "move", "--range", "9000..9100", "--to", "1"],
            "no set serves uid 9000",
        ),
    ];
    for (args, want) in cases {
        let (ok, out) = seqctl(&a, &args);
        assert!(!ok, "accepted: {args:?}\n{out}");
        assert!(out.contains(want), "{args:?}: wanted {want:?} in\n{out}");
    }
    assert_eq!(
        directory_version(&a),
        v,
        "a refused command changed the directory"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_across_sets_with_a_move_as_its_fault_repeats_nothing() {
    // The drill measures each call against what its section had handed out
    // before it began, so it sees the move whenever the freeze comes after
    // the fault began. A move skips at most two steps (the install's
    // margin), stated here as the bound with what the callers may not
    // have seen; and at least one, which the drill must report. With the
    // arbiter's rebalance on, set 1 would even the sections the move
    // brought in over its AllocSvrs right after, by planned handoffs: a
    // second operation in the same window, which the drill would charge to
    // the move. The move alone is the fault here; tests/rebalance.rs
    // measures the handoffs.
    let opts = kit::StoreOptions {
        rebalance: seqsvr_store::arbiter::RebalanceConfig {
            enabled: false,
            ..Default::default()
        },
        ..Default::default()
    };
    let (a, b) = kit::sets::two_sets_with(BINS, opts, true).await;
    let mut seeds = a.alloc_addrs.clone();
    seeds.extend(b.alloc_addrs.iter().cloned());
    let store = a.store.client_addrs.join(",");
    let mover = format!(
        "{} --store {store} set move --range 1000..1400 --to 1",
        BINS.seqctl
    );
    let fault = format!("2s:exec:{mover}");
    let out = Command::new(BINS.seqctl)
        .args(["--store", &store, "--alloc", &seeds.join(",")])
        .args([
            "drill",
            "--uids",
            "0..4000",
            "--rate",
            "0",
            "--concurrency",
            &CALLERS.to_string(),
            "--max-section-jump",
            &move_jump().to_string(),
        ])
        .args(["--duration", "6s", "--json", "--fault", &fault])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "drill failed");
    let r: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(r["regressions"].as_u64(), Some(0));
    assert_eq!(r["repeats"].as_u64(), Some(0));
    assert!(r["numbers"].as_u64().unwrap() > 1000, "{text}");
    let jump = r["faults"][0]["section_skip_max"].as_u64().unwrap();
    assert!(
        jump > kit::sets::set1().step,
        "the drill did not see the move's skip ({jump})\n{text}"
    );
    let outcome = r["faults"][0]["outcome"].as_str().unwrap_or_default();
    assert!(outcome.contains("exit status: 0"), "{outcome}");
    // The range is set 1's now.
    let (_, status) = seqctl(&a, &["set", "status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(status.trim()).unwrap();
    assert_eq!(
        v["sets"][1]["ranges"][0][0].as_u64(),
        Some(1000),
        "{status}"
    );
}

/// What `seqctl set add` run again sent before set commands were checked
/// against the directory: set 1's addition installed again (floor 0), and
/// an install with an invented move id into sections no move brings in.
/// Both now go through the store's checks, so they are sent to set 1's
/// group directly (bypassing `seqctl`'s own refusal).
async fn raw_installs_into_set_1(b: &SetCluster) -> Vec<seqsvr_store_api::Error> {
    use seqsvr_core::{SetCall, SetKind};
    let c = seqsvr_store_api::SetsClient::new(
        &b.store.admin_addrs,
        &seqsvr_store_api::client::plaintext(),
    )
    .unwrap();
    let addition = SetCall {
        set: 1,
        move_id: 0,
        begin: 2000,
        end: 4000,
        kind: SetKind::Addition,
    };
    let invented = SetCall {
        set: 1,
        move_id: 1_000_000_000,
        begin: 0,
        end: 100,
        kind: SetKind::Move { from: 0, to: 1 },
    };
    let mut refused = Vec::new();
    for (first, floors, call) in [(20, vec![0; 20], addition), (0, vec![1], invented)] {
        match c.install(first, floors, &call).await {
            Ok(n) => panic!("{call} was accepted ({n} sections installed)"),
            Err(e) => refused.push(e),
        }
    }
    refused
}

/// Re-running `seqctl set add` (for the source and for the destination)
/// and another `set move` while a move is stopped after each of its steps
/// is refused, naming the move, and changes nothing; so are the raw
/// installs such a re-run used to send. The move then finishes, and no
/// uid ever got a number at or below one it had (promise 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_commands_run_again_during_a_stopped_move_are_refused_and_repeat_nothing() {
    let (a, b) = two_sets(BINS).await;
    let c = SetCluster::start(BINS, set2(), 2);
    c.store.wait_ready(Duration::from_secs(30)).await;
    let stores_1 = b.store.client_addrs.join(",");
    let stores_2 = c.store.client_addrs.join(",");
    let add_2 = [
        "set",
        "add",
        "--id",
        "2",
        "--range",
        "4000..6000",
        "--set-store",
        &stores_2,
    ];
    let (ok, out) = seqctl(&a, &add_2);
    assert!(ok, "set add 2 failed: {out}\n{}", c.store.logs());
    let w = workload_over(&[&a, &b, &c], 6).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let steps = ["begin", "freeze", "release", "install", "claim"];
    for (i, step) in steps.iter().enumerate() {
        // Uids [2000 + 200i, 2200 + 200i) move from set 1 to set 2.
        let range = format!("{}..{}", 2000 + i * 200, 2200 + i * 200);
        let mv = ["set", "move", "--range", &range, "--to", "2"];
        // Set 1's addition run again, for the range the directory still
        // gives it (the moved range is part of it until the flip).
        let served = format!("{}..4000", 2000 + i * 200);
        let add_1 = [
            "set",
            "add",
            "--id",
            "1",
            "--range",
            &served,
            "--set-store",
            &stores_1,
        ];
        let mut stopped = mv.to_vec();
        stopped.extend(["--stop-after", step]);
        let (ok, out) = seqctl(&a, &stopped);
        assert!(!ok && out.contains("stopped after step"), "{out}");
        let v = directory_version(&a);
        let pending = format!(
            "of [{}, {}) from set 1 to set 2 is under way",
            2000 + i * 200,
            2200 + i * 200
        );
        for args in [&add_1[..], &add_2[..]] {
            let (ok, out) = seqctl(&a, args);
            assert!(!ok, "after {step}: accepted {args:?}\n{out}");
            assert!(
                out.contains(&pending),
                "after {step}: {args:?} does not name the move: {out}"
            );
        }
        let other = ["set", "move", "--range", "0..100", "--to", "1"];
        let (ok, out) = seqctl(&a, &other);
        assert!(!ok && out.contains("under way"), "after {step}: {out}");
        for e in raw_installs_into_set_1(&b).await {
            assert!(
                matches!(
                    e,
                    seqsvr_store_api::Error::Rejected(
                        seqsvr_store_api::Rejection::SetCommand { .. }
                    )
                ),
                "after {step}: {e:?}"
            );
        }
        assert_eq!(
            directory_version(&a),
            v,
            "a refused command changed the directory"
        );
        // Clients keep calling meanwhile: had anything served the frozen
        // sections again, the checker would see it.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (ok, out) = seqctl(&a, &mv);
        assert!(
            ok,
            "resume after {step} failed: {out}\n{}\n{}",
            b.store.logs(),
            c.store.logs()
        );
    }
    // Run again once no move is pending, set 1's first addition is
    // refused by the directory (its range is no longer all set 1's), set
    // 2's reports the set as had, and the raw installs are still refused.
    let add_1 = [
        "set",
        "add",
        "--id",
        "1",
        "--range",
        "2000..4000",
        "--set-store",
        &stores_1,
    ];
    let (ok, out) = seqctl(&a, &add_1);
    assert!(!ok && out.contains("already exists"), "{out}");
    let (ok, out) = seqctl(&a, &add_2);
    assert!(ok && out.contains("already had"), "{out}");
    for e in raw_installs_into_set_1(&b).await {
        assert!(
            matches!(
                e,
                seqsvr_store_api::Error::Rejected(seqsvr_store_api::Rejection::SetCommand { .. })
            ),
            "{e:?}"
        );
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (obs, _) = w.finish().await;
    for uid in [2000u64, 2300, 2500, 2700, 2900] {
        assert!(
            obs.iter()
                .any(|o| o.uid == uid && o.kind == seqsvr_core::checker::Kind::Next),
            "uid {uid} never served"
        );
    }
    assert_monotonic(&obs, || {
        format!("{}\n{}\n{}", a.store.logs(), b.store.logs(), c.store.logs())
    });
}
