//! The deployment, end to end: the container image, the compose cluster
//! and drills with real faults between containers, and the Kubernetes
//! manifests.
//!
//! - `deploy_configs_parse_and_agree`: every config under `deploy/` (the
//!   compose files and the Kubernetes ConfigMaps) is accepted by the real
//!   config parsers, and the store and AllocSvr configs name each other.
//! - `k8s_manifests_validate_offline`: `deploy/k8s/validate.sh` (schemas,
//!   offline; it installs its validator on first use).
//! - `compose_cluster_keeps_numbers_going_up_through_container_faults`:
//!   builds the image (`deploy/docker/build.sh`: one release build), starts
//!   the compose cluster under a project name of its own, waits for every
//!   container's health check (`seqctl health --ready`) and probes each
//!   published client plane the same way, scrapes a replica's and an
//!   AllocSvr's metrics, runs drills
//!   (`deploy/compose/drills.sh`: docker kill, pause past the lease,
//!   network cuts, a twin, rolling restart, rolling upgrade) and judges
//!   every report with the drill's own judgement (`seqsvr::drill::judge`:
//!   numbers, every fault applied, 0 regressions, 0 repeats, each section
//!   jump within one step, each fault's outage within lease + margin +
//!   renewal (+ slack); a figure missing or `null` fails), then restarts
//!   the whole stack and checks numbers still go up. It removes the
//!   containers, networks, volumes and images it created, also when it
//!   fails.
//!
//! Skip or fail (`deploy_support::decide`): without a usable Docker and
//! compose (the container suite) or python3 (the Kubernetes validation) a
//! test prints why and passes — unless `CI` is set, where it fails with
//! the reason. `SEQSVR_SKIP_DEPLOY=1` skips both on purpose, also in CI.
//!
//! The figures (image size, time from `compose up` to the first number,
//! each drill's calls, failures, longest unavailability and section jump
//! per fault) are written to stderr as they come, past the test harness's
//! capture, so they appear in every run's log.
//!
//! `SEQSVR_DEPLOY_DRILLS` picks drills (comma-separated names; default:
//! all).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use seqsvr_alloc::node::AllocNodeConfig;
use seqsvr_store::StoreConfig;

use seqsvr::drill::{judge, Action, Bounds, FaultReport, Report};
use seqsvr_testkit::deploy::{
    decide_here, docker_missing, ok, pid_alive, quietly, run, validator_missing, Decision,
};
use seqsvr_testkit::Bins;

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Drills run by default: every one `drills.sh` knows (kill, pause past
/// the lease, a cut AllocSvr, a store leader cut from its peers, a twin, a
/// rolling restart, a rolling upgrade): about 3.5 minutes.
const DEFAULT_DRILLS: &[&str] = &[
    "kill-alloc",
    "pause-alloc",
    "cut-alloc",
    "cut-store-leader",
    "twin-alloc",
    "rolling-restart",
    "rolling-upgrade",
];

/// Prints past the test harness's output capture.
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr(), "deploy: {}", format!($($t)*));
    }};
}

mod compose;
use compose::*;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

// ---------------------------------------------------------------------
// Configs
// ---------------------------------------------------------------------

/// The `name.toml: |` entries of the ConfigMaps in a manifest.
fn configmap_tomls(yaml: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_end();
        let Some(name) = t
            .strip_prefix("  ")
            .and_then(|k| k.strip_suffix(": |"))
            .filter(|k| k.ends_with(".toml") && !k.starts_with(' '))
        else {
            continue;
        };
        let mut body = String::new();
        while let Some(next) = lines.peek() {
            if next.trim().is_empty() {
                body.push('\n');
            } else if let Some(rest) = next.strip_prefix("    ") {
                body.push_str(rest);
                body.push('\n');
            } else {
                break;
            }
            lines.next();
        }
        out.push((name.to_string(), body));
    }
    out
}

/// Checks one cluster's configs: each parses, and stores and AllocSvrs
/// agree (AllocSvrs dial the members, initial routes name real AllocSvrs,
/// ids are unique).
fn check_cluster(what: &str, stores: &[(String, String)], allocs: &[(String, String)]) {
    assert_eq!(stores.len(), 3, "{what}: three store replicas");
    assert_eq!(allocs.len(), 3, "{what}: three AllocSvrs");
    let stores: Vec<StoreConfig> = stores
        .iter()
        .map(|(name, text)| {
            StoreConfig::from_toml(text).unwrap_or_else(|e| panic!("{what} {name}: {e}"))
        })
        .collect();
    let allocs: Vec<AllocNodeConfig> = allocs
        .iter()
        .map(|(name, text)| {
            AllocNodeConfig::from_toml(text).unwrap_or_else(|e| panic!("{what} {name}: {e}"))
        })
        .collect();
    let ids: BTreeSet<u64> = stores.iter().map(|s| s.id).collect();
    assert_eq!(ids.len(), 3, "{what}: store ids are unique");
    let members: Vec<String> = stores[0].members.iter().map(|m| m.addr.clone()).collect();
    let routed: BTreeSet<String> = stores[0].allocs.iter().map(|a| a.id.to_string()).collect();
    for s in &stores {
        let m: Vec<String> = s.members.iter().map(|m| m.addr.clone()).collect();
        assert_eq!(m, members, "{what}: replica {} has other members", s.id);
        let r: BTreeSet<String> = s.allocs.iter().map(|a| a.id.to_string()).collect();
        assert_eq!(r, routed, "{what}: replica {} routes to others", s.id);
        assert!(s.tls.is_some(), "{what}: replica {} runs TLS", s.id);
    }
    let alloc_ids: BTreeSet<String> = allocs.iter().map(|a| a.id.to_string()).collect();
    assert_eq!(alloc_ids.len(), 3, "{what}: AllocSvr ids are unique");
    assert_eq!(
        alloc_ids, routed,
        "{what}: initial routes name the AllocSvrs"
    );
    let port = |a: &str| a.rsplit_once(':').map(|(_, p)| p.to_string());
    for a in &allocs {
        assert!(a.tls.is_some(), "{what}: {} runs TLS", a.id);
        // AllocSvrs dial the members' peer planes (maybe by another name
        // on another network, but on the same port).
        assert_eq!(a.store.len(), 3, "{what}: {} knows every replica", a.id);
        for (dial, member) in a.store.iter().zip(&members) {
            assert_eq!(port(dial), port(member), "{what}: {} dials {dial}", a.id);
        }
    }
}

#[test]
fn deploy_configs_parse_and_agree() {
    let root = repo_root();
    let dir = root.join("deploy/compose/config");
    let read = |prefix: &str| -> Vec<(String, String)> {
        (1..=3)
            .map(|i| {
                let name = format!("{prefix}-{i}.toml");
                let text = std::fs::read_to_string(dir.join(&name)).expect(&name);
                (name, text)
            })
            .collect()
    };
    check_cluster("compose", &read("store"), &read("alloc"));

    let k8s = |file: &str| {
        let text = std::fs::read_to_string(root.join("deploy/k8s").join(file)).expect(file);
        configmap_tomls(&text)
    };
    check_cluster("k8s", &k8s("store.yaml"), &k8s("alloc.yaml"));
}

#[test]
fn k8s_manifests_validate_offline() {
    match decide_here(validator_missing) {
        Decision::Run => {}
        Decision::Skip(why) => {
            say!("k8s validation SKIPPED: {why}");
            return;
        }
        Decision::Fail(why) => panic!("k8s validation cannot run: {why}"),
    }
    let out = run(
        &mut Command::new(repo_root().join("deploy/k8s/validate.sh")),
        Duration::from_secs(900),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "validate.sh failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    say!("k8s: {}", text.trim());
}

/// One drill's report, as `seqctl drill --json` wrote it: every figure
/// must be there and be a number (JSON `null`, what a `NaN` becomes, is
/// refused like a missing field).
fn read_report(name: &str, path: &Path) -> Result<Report, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("drill {name}: no report at {}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("drill {name}: unreadable report ({e}):\n{text}"))
}

/// A fault as the figures show it: when, and `fault.sh ARGS` rather than
/// the full command.
fn fault_name(f: &FaultReport) -> String {
    let what = match &f.fault.action {
        Action::Exec(cmd) => cmd
            .rsplit_once("fault.sh ")
            .map_or(cmd.as_str(), |(_, args)| args)
            .to_string(),
        other => format!("{other:?}"),
    };
    format!("{:>4.1}s {what}", f.fault.at.as_secs_f64())
}

/// Concurrent callers of every drill (`drills.sh`'s default).
const DRILL_CONCURRENCY: u64 = 16;

/// What each container drill must show: numbers, every fault applied, 0
/// regressions and repeats, each fault's outage within `max_outage`, each
/// section jump within one step (promise 4). (The minimum of calls,
/// half of what a drill's rate plans, is stated per drill by `drills.sh`;
/// the drill fails itself, and so `drills.sh`, below it.)
fn drill_bounds(max_outage: Duration) -> Bounds {
    Bounds {
        min_calls: 1,
        max_outage: Some(max_outage),
        max_section_jump: None,
        concurrency: DRILL_CONCURRENCY,
    }
}

/// Slack on top of lease + margin + renewal for an outage after a fault.
const OUTAGE_SLACK_MS: u64 = 2000;

/// lease + margin (the compose replicas' `[lease]`) + renewal interval (the
/// AllocSvrs' `renew_ms`), in ms.
fn outage_bound_ms(root: &Path) -> u64 {
    let dir = root.join("deploy/compose/config");
    let store = std::fs::read_to_string(dir.join("store-1.toml")).unwrap();
    let store = StoreConfig::from_toml(&store).unwrap();
    let alloc = std::fs::read_to_string(dir.join("alloc-1.toml")).unwrap();
    let alloc = AllocNodeConfig::from_toml(&alloc).unwrap();
    store.lease.lease_ms + store.lease.margin_ms + alloc.renew_ms
}

fn drills_to_run() -> Vec<String> {
    match std::env::var("SEQSVR_DEPLOY_DRILLS") {
        Ok(v) if v == "all" => DEFAULT_DRILLS.iter().map(|s| s.to_string()).collect(),
        Ok(v) if !v.trim().is_empty() => v.split(',').map(|s| s.trim().to_string()).collect(),
        _ => DEFAULT_DRILLS.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn compose_cluster_keeps_numbers_going_up_through_container_faults() {
    match decide_here(docker_missing) {
        Decision::Run => {}
        Decision::Skip(why) => {
            say!("container suite SKIPPED: {why}");
            return;
        }
        Decision::Fail(why) => panic!("the container suite cannot run: {why}"),
    }
    let t_suite = Instant::now();
    let root = repo_root();
    remove_stale_runs();

    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let run_id = format!("{}-{}", std::process::id(), secs % 100_000);
    let tag = format!("deploy-{run_id}");
    // seqctl on the host: the build that goes into the image
    // (deploy/docker/build.sh's `image` profile, target/image).
    let target = Path::new(BINS.seqctl)
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf();
    let cluster = Cluster {
        root: root.clone(),
        project: format!("{PROJECT_PREFIX}{run_id}"),
        image: format!("seqsvr:{tag}"),
        next_image: format!("seqsvr:{tag}-next"),
        prefix: free_prefix(),
        work: tempfile::tempdir().unwrap(),
        seqctl: target.join("image/seqctl"),
    };
    say!(
        "project {}, image {}, host ports {}xxx",
        cluster.project,
        cluster.image,
        cluster.prefix
    );

    // 1. The image: one release build, packaged FROM scratch.
    let t = Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = ok(
        Command::new(root.join("deploy/docker/build.sh"))
            .arg(&tag)
            .env("CARGO", cargo),
        Duration::from_secs(60 * 60),
    );
    let built = out
        .lines()
        .find(|l| l.starts_with("built "))
        .unwrap_or_else(|| panic!("build.sh printed no size:\n{out}"))
        .to_string();
    say!(
        "{built} (build and package: {:.0} s)",
        t.elapsed().as_secs_f64()
    );
    assert!(
        cluster.seqctl.is_file(),
        "build.sh built no {} for the host",
        cluster.seqctl.display()
    );
    ok(
        Command::new("docker").args(["tag", &cluster.image, &cluster.next_image]),
        Duration::from_secs(60),
    );

    // 2. Up: time from `compose up` to the first number.
    let first_ms = cluster.up();
    say!("compose up to first number: {first_ms} ms");

    // 2b. Health: every container's own check (`seqctl health --ready`
    //     against its client plane, under TLS) turns healthy, and the same
    //     probe from the host through the published ports says ready.
    let t = Instant::now();
    for svc in SERVICES {
        loop {
            let h = cluster.docker_health(svc);
            if h == "healthy" {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(90),
                "{svc}'s health check says {h:?} after {:?}",
                t.elapsed()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    say!(
        "health checks: all six containers healthy {:.1} s after the first number",
        t.elapsed().as_secs_f64()
    );
    for offset in [111, 112, 113, 201, 202, 203] {
        let (code, line) = cluster.health(offset);
        assert_eq!(code, Some(0), "health of port {offset}: {line}");
        say!("  {line}");
    }

    // 3. Metrics: a replica's scrape has the store's metrics, and its
    //    counters move (Raft heartbeats and renewals are calls).
    let port = cluster.host_port(131);
    let a = scrape(port);
    for name in [
        "seqsvr_calls_total{",
        "seqsvr_call_seconds_bucket{",
        "seqsvr_store_commands_total{",
        "seqsvr_store_command_seconds_bucket{",
        "seqsvr_store_fsyncs_total",
        "seqsvr_store_renewals_total",
        "seqsvr_raft_term{",
        "seqsvr_store_unserved_sections{",
    ] {
        assert!(a.contains(name), "no {name} in the scrape of store-1");
    }
    cluster.seqctl(&["next-batch", "1", "2", "3"]);
    std::thread::sleep(Duration::from_secs(2));
    let b = scrape(port);
    let (ca, cb) = (
        sum_of(&a, "seqsvr_calls_total"),
        sum_of(&b, "seqsvr_calls_total"),
    );
    assert!(cb > ca, "seqsvr_calls_total did not move: {ca} -> {cb}");
    // An AllocSvr's scrape: numbers handed out move with calls.
    let alloc_port = cluster.host_port(231);
    let a = scrape(alloc_port);
    for name in [
        "seqsvr_alloc_numbers_total",
        "seqsvr_alloc_renewals_total",
        "seqsvr_alloc_lease_left_seconds{",
        "seqsvr_calls_total{",
    ] {
        assert!(a.contains(name), "no {name} in the scrape of alloc-1");
    }
    let uids: Vec<String> = (0..34).map(|s| (s * 100_000 + 7).to_string()).collect();
    let uids: Vec<&str> = uids.iter().map(String::as_str).collect();
    cluster.seqctl(&[&["next-batch"][..], &uids].concat());
    let b = scrape(alloc_port);
    let (na, nb) = (
        sum_of(&a, "seqsvr_alloc_numbers_total"),
        sum_of(&b, "seqsvr_alloc_numbers_total"),
    );
    assert!(
        nb > na,
        "seqsvr_alloc_numbers_total did not move: {na} -> {nb}"
    );
    say!(
        "metrics: store-1 served {} calls in 2 s; alloc-1 handed out {} numbers",
        cb - ca,
        nb - na
    );

    // 4. Drills, each with real faults between containers. A fault may
    //    cost a section at most lease + margin + one renewal interval
    //    (plus slack for a loaded machine: the take-over call, the
    //    client's retry pause).
    let bound = Duration::from_millis(outage_bound_ms(&root) + OUTAGE_SLACK_MS);
    let drills = drills_to_run();
    let reports = cluster.work.path().join("reports");
    let t = Instant::now();
    let out = run(
        cluster
            .script("deploy/compose/drills.sh")
            .args(&drills)
            .env("SEQSVR_DRILL_OUT", &reports)
            .env("SEQSVR_DRILL_CONCURRENCY", DRILL_CONCURRENCY.to_string())
            .env(
                "SEQSVR_DRILL_MAX_OUTAGE",
                format!("{}ms", bound.as_millis()),
            ),
        Duration::from_secs(30 * 60),
    );
    let drills_ok = out.status.success();
    say!(
        "drills ({}) took {:.0} s; each fault's outage bound {} ms",
        drills.join(", "),
        t.elapsed().as_secs_f64(),
        bound.as_millis()
    );
    let mut broken = Vec::new();
    let mut figures = Vec::new();
    for d in &drills {
        let f = match read_report(d, &reports.join(format!("{d}.json"))) {
            Ok(f) => f,
            Err(why) => {
                broken.push(why);
                continue;
            }
        };
        say!(
            "drill {d:<17} calls {:>6}  failed {:>4}  longest unavailability {:>6.0} ms  regressions {}  repeats {}",
            f.requests,
            f.failed,
            f.unavailable_max_ms,
            f.regressions,
            f.repeats
        );
        for fault in &f.faults {
            say!(
                "    {:<36} outage after it {:>6.0} ms  section jump {}{}",
                fault_name(fault),
                fault.recovery_ms,
                fault.section_skip_max,
                if fault.applied { "" } else { "  NOT APPLIED" }
            );
        }
        // The drill's own verdict (`seqctl drill` judged the same report
        // with the same bounds and exited non-zero if it failed).
        broken.extend(
            judge(&f, &drill_bounds(bound))
                .iter()
                .map(|b| format!("{d}: {b}")),
        );
        figures.push((d.clone(), f));
    }
    if !drills_ok && broken.is_empty() {
        broken.push(format!(
            "drills.sh failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    assert!(broken.is_empty(), "drills:\n{}", broken.join("\n"));

    // 5. The whole stack restarted (containers removed, volumes kept):
    //    every uid's numbers still go up.
    let uids = ["42", "3400000", "6700000", "9999999"];
    let before: Vec<u64> = numbers(&cluster.seqctl(&[&["next-batch"][..], &uids].concat()));
    ok(
        &mut cluster.script("deploy/compose/down.sh"),
        Duration::from_secs(300),
    );
    let again_ms = cluster.up();
    let after: Vec<u64> = numbers(&cluster.seqctl(&[&["next-batch"][..], &uids].concat()));
    say!("whole stack restarted: first number after {again_ms} ms; {before:?} -> {after:?}");
    for ((u, b), a) in uids.iter().zip(&before).zip(&after) {
        assert!(a > b, "uid {u}: {a} after the restart, {b} before");
    }

    let summary: BTreeMap<&str, (u64, u64)> = figures
        .iter()
        .map(|(name, f)| (name.as_str(), (f.requests, f.failed)))
        .collect();
    say!(
        "suite done in {:.0} s: {} drills, 0 regressions, 0 repeats ({summary:?})",
        t_suite.elapsed().as_secs_f64(),
        figures.len()
    );
}

#[test]
fn drill_reports_are_read_strictly_and_judged() {
    let dir = tempfile::tempdir().unwrap();
    let report = serde_json::json!({
        "requests": 16000, "failed": 53, "numbers": 17900, "uids": 10000,
        "regressions": 0, "repeats": 0, "examples": [],
        "unavailable_max_ms": 4580.0, "unavailable_p99_ms": 4500.0,
        "worst_sections": [[3, "300000..400000", 4580.0]],
        "faults": [{
            "fault": {"at": 2000.0, "action": {"Exec": "/x/deploy/compose/fault.sh kill alloc-1"}},
            "outcome": "`/x/deploy/compose/fault.sh kill alloc-1` exited with exit status: 0",
            "applied": true, "recovery_ms": 4580.0, "section_skip_max": 9999
        }],
        "skipped": 999900, "skipped_max_per_uid": 9999, "step": 10000,
        "breaches": []
    });
    let bounds = drill_bounds(Duration::from_millis(6500));
    let read = |v: &serde_json::Value| {
        let path = dir.path().join("r.json");
        std::fs::write(&path, v.to_string()).unwrap();
        read_report("d", &path)
    };
    let r = read(&report).unwrap();
    assert_eq!(fault_name(&r.faults[0]), " 2.0s kill alloc-1");
    assert_eq!(judge(&r, &bounds), vec![]);
    // A figure that is missing, or not a number (`NaN` is written as
    // `null`), makes the report unreadable: it passes no bound.
    let mut missing = report.clone();
    missing["faults"][0]
        .as_object_mut()
        .unwrap()
        .remove("recovery_ms");
    let e = read(&missing).unwrap_err();
    assert!(e.contains("missing field `recovery_ms`"), "{e}");
    let mut null = report.clone();
    null["faults"][0]["recovery_ms"] = serde_json::Value::Null;
    let e = read(&null).unwrap_err();
    assert!(e.contains("invalid type: null, expected f64"), "{e}");
    // What the drill reports is judged: a fault over the bound, one that
    // did not happen, no numbers.
    let mut bad = report.clone();
    bad["faults"][0]["recovery_ms"] = 6501.0.into();
    bad["faults"][0]["applied"] = false.into();
    bad["numbers"] = 0.into();
    let why: Vec<String> = judge(&read(&bad).unwrap(), &bounds)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(why.len(), 3, "{why:?}");
    assert!(why[0].starts_with("no numbers"), "{why:?}");
    assert!(why[1].contains("did not happen"), "{why:?}");
    assert!(why[2].contains("6501 ms after it"), "{why:?}");
}

fn numbers(out: &str) -> Vec<u64> {
    out.lines()
        .map(|l| l.trim().parse().expect("a number per line"))
        .collect()
}
