//! Disaster recovery with the real binaries (docs/operations.md, Backup
//! and disaster recovery): a replica lost with its disk, a majority lost,
//! everything lost but a backup. Each drives numbers before the loss and
//! after the recovery, and the per-uid checker looks at every answer the
//! clients received across both (promise 1: 0 repeats, 0 regressions).
//! The restore is refused without a margin, and a margin too small is
//! shown to repeat numbers: the check can fail. Time-ordered ids come
//! back too, above every id the lost group issued, borrowed ticks and
//! worker ids first claimed after the backup included.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use seqsvr_client::SeqClient;
use seqsvr_core::checker::Observation;
use seqsvr_core::ids::Layout;
use seqsvr_testkit::ids::{create_namespace, draw_direct, Calls};
use seqsvr_testkit::Bins;
use seqsvr_testkit::{
    assert_monotonic, small_set, start_spread_workload, Proc, SetCluster, Workload, SMALL_STEP,
};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Runs a workload for `d`; returns what it received and its failures.
async fn drive(c: &SeqClient, d: Duration) -> (Vec<Observation>, u64) {
    let w = start_spread_workload(c, 4);
    tokio::time::sleep(d).await;
    w.finish().await
}

/// `seqctl <args…>` against the cluster's store; returns (ok, stdout,
/// stderr).
fn seqctl(s: &SetCluster, args: &[&str]) -> (bool, String, String) {
    let r = s.seqctl(args);
    (r.ok(), r.out, r.err)
}

fn config_of(s: &SetCluster, id: usize) -> PathBuf {
    s.store.dir.path().join(format!("store-{id}.toml"))
}

fn data_of(s: &SetCluster, id: usize) -> PathBuf {
    s.store.dir.path().join(format!("store-{id}"))
}

/// kill -9 of every process of the set, every store disk lost.
fn lose_everything(s: &mut SetCluster) {
    for p in s.allocs.iter_mut().chain(s.store.procs.iter_mut()) {
        p.kill9();
    }
    for id in 1..=3 {
        let _ = std::fs::remove_dir_all(data_of(s, id));
    }
}

/// `seqsvr store restore` of every replica from `backup` with `margin`
/// flags, then the AllocSvrs started again.
fn restore_all(s: &mut SetCluster, backup: &Path, margin: &[&str]) {
    for id in 1..=3 {
        let mut args: Vec<String> = ["store", "restore", "--config"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        args.push(config_of(s, id).display().to_string());
        args.push("--backup".into());
        args.push(backup.display().to_string());
        args.extend(margin.iter().map(|a| a.to_string()));
        let log = s.store.dir.path().join(format!("store-{id}.log"));
        s.store.procs[id - 1] = Proc::start(BINS, &format!("store-{id}"), args, log);
    }
    for a in &mut s.allocs {
        a.restart();
    }
}

/// A restore without a margin stops at once, naming the missing margin,
/// and starts nothing.
fn restore_without_margin_is_refused(s: &SetCluster, backup: &Path) {
    let out = std::process::Command::new(BINS.seqsvr)
        .args(["store", "restore", "--config"])
        .arg(config_of(s, 1))
        .arg("--backup")
        .arg(backup)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a restore without a margin ran");
    assert!(
        err.contains("needs a safety margin") && err.contains("--margin"),
        "{err}"
    );
    assert!(!data_of(s, 1).exists(), "a refused restore created data");
}

/// Takes a backup with `seqctl store backup`, then drives numbers on for
/// a while (the backup gets old: ceilings grow past it).
async fn backup_then_drive(s: &SetCluster, c: &SeqClient, obs: &mut Vec<Observation>) -> PathBuf {
    let file = s.store.dir.path().join("set-0.backup");
    let (ok, out, err) = seqctl(s, &["store", "backup", "--out", file.to_str().unwrap()]);
    assert!(ok, "backup failed: {out}{err}");
    assert!(out.contains("backup of set 0 at log index"), "{out}");
    let (after, _) = drive(c, Duration::from_secs(2)).await;
    obs.extend(after);
    // One hot uid: its section's ceiling grows by many steps, far past
    // the backup's (a restore with too small a margin repeats it).
    let w = Workload::new();
    let r = w.recorder();
    for _ in 0..(8 * SMALL_STEP) {
        r.next(c, 0).await;
    }
    obs.extend(w.finish().await.0);
    file
}

/// Starts a set, drives numbers, and backs it up mid-way.
async fn start_and_back_up() -> (SetCluster, Vec<Observation>, PathBuf) {
    let s = SetCluster::start(BINS, small_set(), 2);
    s.store.wait_ready(Duration::from_secs(20)).await;
    let c = s.client().await;
    s.wait_serving(&c).await;
    let (mut obs, _) = drive(&c, Duration::from_secs(2)).await;
    let file = backup_then_drive(&s, &c, &mut obs).await;
    (s, obs, file)
}

/// Serves again after a restore: waits for every section, then drives.
async fn drive_after_restore(s: &SetCluster, obs: &mut Vec<Observation>) {
    s.store.wait_ready(Duration::from_secs(30)).await;
    let c = s.client().await;
    s.wait_serving(&c).await;
    let (after, _) = drive(&c, Duration::from_secs(2)).await;
    obs.extend(after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_everything_but_a_backup_restores_above_every_number() {
    let (mut s, mut obs, backup) = start_and_back_up().await;
    lose_everything(&mut s);
    restore_without_margin_is_refused(&s, &backup);
    // A margin of one step is accepted (it is the floor), but the set
    // handed out far more than a step per uid since the backup: numbers
    // repeat. This is what the checker below would catch.
    let mut too_small = obs.clone();
    restore_all(&mut s, &backup, &["--margin", &SMALL_STEP.to_string()]);
    drive_after_restore(&s, &mut too_small).await;
    let r = seqsvr_core::checker::check(&too_small);
    println!(
        "margin of one step: {} regressions, {} repeats",
        r.regressions.len(),
        r.repeats.len()
    );
    assert!(
        !r.ok(),
        "a margin below what the set handed out went unnoticed"
    );
    // Everything lost again; the margin from the raise rate (numbers a
    // second, far above what one uid gets here) times the backup's age.
    lose_everything(&mut s);
    restore_all(&mut s, &backup, &["--raise-rate", "20000"]);
    drive_after_restore(&s, &mut obs).await;
    assert_monotonic(&obs, || s.store.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_a_majority_restores_from_the_newest_backup() {
    let (mut s, mut obs, backup) = start_and_back_up().await;
    // Replicas 1 and 2 are gone with their disks; 3 survives alone and
    // can commit nothing: leases lapse, calls fail.
    for id in 1..=2 {
        s.store.procs[id - 1].kill9();
        std::fs::remove_dir_all(data_of(&s, id)).unwrap();
    }
    let c = s.client().await;
    let start = Instant::now();
    loop {
        let (got, failed) = drive(&c, Duration::from_millis(500)).await;
        obs.extend(got.iter().cloned());
        if got.is_empty() && failed > 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "a minority kept serving\n{}",
            s.store.logs()
        );
    }
    // The runbook: stop the survivor, keep its disk aside, restore every
    // replica from the newest backup with a margin.
    s.store.procs[2].kill9();
    let aside = s.store.dir.path().join("store-3.aside");
    std::fs::rename(data_of(&s, 3), &aside).unwrap();
    lose_everything(&mut s);
    restore_all(&mut s, &backup, &["--margin", "1000000"]);
    drive_after_restore(&s, &mut obs).await;
    assert_monotonic(&obs, || s.store.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_one_replica_is_replaced_and_the_new_one_counts_in_the_majority() {
    let mut s = SetCluster::start(BINS, small_set(), 2);
    let leader = s.store.wait_ready(Duration::from_secs(20)).await;
    let c = s.client().await;
    s.wait_serving(&c).await;
    let w = start_spread_workload(&c, 4);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A follower is lost with its disk.
    let lost = (leader + 1) % 3;
    s.store.procs[lost].kill9();
    std::fs::remove_dir_all(data_of(&s, lost + 1)).unwrap();
    // Its replacement: a new id on an empty disk, added, caught up and
    // promoted; then the lost one is removed from the group.
    let peer = s.store.start_joining(4);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let old = (lost + 1).to_string();
    let new = format!("4={peer}");
    let (ok, out, err) = seqctl(&s, &["store", "replace", "--old", &old, "--new", &new]);
    assert!(ok, "replace failed: {out}{err}\n{}", s.store.logs());
    // Now another original replica dies: the new one makes the majority.
    let other = (0..3).find(|&i| i != lost && i != leader).unwrap();
    s.store.procs[other].kill9();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (mut obs, _) = w.finish().await;
    let (after, _) = drive(&c, Duration::from_secs(2)).await;
    assert!(
        after.len() > 100,
        "the group with its new replica did not serve\n{}",
        s.store.logs()
    );
    obs.extend(after);
    assert_monotonic(&obs, || s.store.logs());
}

/// The mistake the runbook warns against: a follower lost with its disk
/// is started again under its old id on an empty disk. It refuses to
/// start, naming the way out (a new id), and the group keeps serving; it
/// never joins to vote a second time in a term it already voted in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_lost_its_disk_refuses_its_old_id() {
    let mut s = SetCluster::start(BINS, small_set(), 2);
    let leader = s.store.wait_ready(Duration::from_secs(20)).await;
    let c = s.client().await;
    s.wait_serving(&c).await;
    let (mut obs, _) = drive(&c, Duration::from_secs(1)).await;
    let lost = (leader + 1) % 3;
    s.store.procs[lost].kill9();
    std::fs::remove_dir_all(data_of(&s, lost + 1)).unwrap();
    let mut again = std::process::Command::new(BINS.seqsvr)
        .args(["store", "--config"])
        .arg(config_of(&s, lost + 1))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = again.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = again.kill();
            panic!(
                "store node {} started on an empty disk under its old id\n{}",
                lost + 1,
                s.store.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut again.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("lost its disk") && err.contains("new id") && err.contains("store replace"),
        "{err}"
    );
    let (after, _) = drive(&c, Duration::from_secs(2)).await;
    assert!(
        after.len() > 100,
        "the group stopped serving\n{}",
        s.store.logs()
    );
    obs.extend(after);
    assert_monotonic(&obs, || s.store.logs());
}

/// Draws ids of `ns` from the AllocSvrs at `addrs` at once, one a call,
/// for `d`; returns what they received (each must have issued some).
async fn draw_ids(s: &SetCluster, addrs: &[String], ns: &'static str, d: Duration) -> Vec<u64> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drawn: Vec<(Calls, _)> = (addrs.iter())
        .map(|a| draw_direct(a.clone(), ns, 1, stop.clone()))
        .collect();
    tokio::time::sleep(d).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut ids = Vec::new();
    for (calls, task) in drawn {
        task.await.unwrap();
        let calls = calls.lock().unwrap();
        let got: Vec<u64> = calls.iter().flat_map(|c| c.ids.clone()).collect();
        assert!(
            !got.is_empty(),
            "an AllocSvr issued no id\n{}",
            s.store.logs()
        );
        ids.extend(got);
    }
    ids
}

/// Ids across a disaster (docs/operations.md, Backup and disaster
/// recovery): a namespace of 1 s ticks, 2 ids a tick and a 10 s window,
/// so that callers drawing fast run up to 10 ticks ahead of the clock
/// (borrowed) and raise the ceilings past the backup's. Before the backup
/// only the first AllocSvr issues; after it both do, so the second's
/// worker id has no record in the backup. Everything lost, restored at
/// once: the namespace is back, and every id issued after the restore is
/// above every id issued before it.
///
/// Without the backup's namespaces the ids after the restore are refused
/// ("no such id namespace"); with them but without the restore's margin
/// of time (the ceilings as backed up, the second worker id from 0), the
/// new holders issue ticks the lost group had already issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn id_namespaces_come_back_above_every_id_the_lost_group_issued() {
    let mut s = SetCluster::start(BINS, small_set(), 2);
    let mut layout = Layout::twitter();
    layout.seq_bits = 1;
    layout.unit_ms = 1000;
    create_namespace(&s, "t", &layout, 10_000).await;
    let c = s.client().await;
    s.wait_serving(&c).await;
    // A few ids, from the first AllocSvr alone: the backup records one
    // worker id, its ceiling about a window ahead.
    let mut first =
        seqsvr_proto::alloc_client::AllocClient::connect(format!("http://{}", s.alloc_addrs[0]))
            .await
            .unwrap();
    let mut before = Vec::new();
    for _ in 0..4 {
        let req = seqsvr_proto::NextIdRequest {
            namespace: "t".into(),
            count: 1,
        };
        before.extend(first.next_id(req).await.expect("an id").into_inner().ids);
    }
    let file = s.store.dir.path().join("set-0.backup");
    let (ok, out, err) = seqctl(&s, &["store", "backup", "--out", file.to_str().unwrap()]);
    assert!(ok && out.contains("1 id namespace"), "backup: {out}{err}");
    // The lost group goes on past the backup's ceilings.
    tokio::time::sleep(Duration::from_secs(3)).await;
    before.extend(draw_ids(&s, &s.alloc_addrs, "t", Duration::from_secs(2)).await);
    lose_everything(&mut s);
    restore_all(&mut s, &file, &["--margin", "1000000"]);
    s.store.wait_ready(Duration::from_secs(30)).await;
    let after = draw_ids(&s, &s.alloc_addrs, "t", Duration::from_secs(3)).await;
    let top = |ids: &[u64]| ids.iter().copied().max().unwrap();
    let low = |ids: &[u64]| ids.iter().copied().min().unwrap();
    let tick = |id: u64| id >> (layout.worker_bits + layout.seq_bits);
    println!(
        "{} ids before (ticks up to {}), {} after (ticks from {})",
        before.len(),
        tick(top(&before)),
        after.len(),
        tick(low(&after))
    );
    let mut all: Vec<u64> = before.iter().chain(&after).copied().collect();
    all.sort_unstable();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "{} ids issued twice", n - all.len());
    assert!(
        low(&after) > top(&before),
        "an id after the restore ({}, tick {}) is not above the last before it ({}, tick {})",
        low(&after),
        tick(low(&after)),
        top(&before),
        tick(top(&before))
    );
    // An operator sees where worker ids the backup never saw start.
    let (ok, out, err) = seqctl(&s, &["id", "show", "t"]);
    assert!(
        ok && out.contains("other worker ids start above"),
        "{out}{err}"
    );
}
