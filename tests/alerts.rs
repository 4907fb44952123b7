//! The shipped alert rules and the metrics they read, checked by
//! Prometheus' own tool (`promtool`, Debian's `prometheus` package, which
//! `.ci/run` installs):
//!
//! - `alert_rules_pass_promtool`: `promtool check rules` over
//!   `deploy/prometheus-alerts.yml`, and `promtool test rules` over
//!   `deploy/prometheus-alerts.test.yml` — every rule quiet in the healthy
//!   states (fresh starts, sections moved to another set, a set whose span
//!   is wider than what it serves, one failover) and firing on its fault.
//! - `live_scrapes_follow_the_conventions`: a real store replica and a
//!   real AllocSvr, scraped once the AllocSvr serves: `promtool check
//!   metrics` is clean on both, every series carries `set` and its node
//!   label, `seqsvr_build_info` and the process metrics are there, the
//!   metrics the rules read exist, and a fresh AllocSvr counts no lease
//!   lapse and the store no unserved section.
//!
//! Without promtool a test prints why and passes — unless `CI` is set,
//! where it fails (the pattern of tests/deploy/main.rs).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use seqsvr_core::SetSpec;
use seqsvr_store::node::InitialAlloc;
use seqsvr_testkit::{self as kit, Bins};
use seqsvr_testkit::{free_port, Proc, StoreCluster, StoreOptions};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        let v = v.trim();
        !v.is_empty() && !v.eq_ignore_ascii_case("false") && v != "0"
    })
}

/// Whether promtool can run here; without it, skip (say why) or, in CI,
/// fail.
fn promtool_here(test: &str) -> bool {
    let found = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return true;
    }
    let why = "promtool is not installed (Debian package `prometheus`; .ci/run installs it)";
    assert!(!is_ci(), "{test} cannot run in CI: {why}");
    let _ = writeln!(std::io::stderr(), "{test} SKIPPED: {why}");
    false
}

/// Runs promtool with `args` (and `stdin`), panicking with its output
/// unless it succeeds.
fn promtool(args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn alert_rules_pass_promtool() {
    if !promtool_here("alert_rules_pass_promtool") {
        return;
    }
    let deploy = repo_root().join("deploy");
    let rules = deploy.join("prometheus-alerts.yml");
    let tests = deploy.join("prometheus-alerts.test.yml");
    promtool(&["check", "rules", rules.to_str().unwrap()], None);
    let out = promtool(&["test", "rules", tests.to_str().unwrap()], None);
    assert!(out.contains("SUCCESS"), "{out}");
    // Every rule has a case that expects it to fire.
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    let tests_text = std::fs::read_to_string(&tests).unwrap();
    for name in rules_text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests_text.contains(&format!(
                "alertname: {name}\n    exp_alerts:\n    - exp_labels"
            )),
            "no case where {name} fires"
        );
    }
}

/// One scrape of `addr`'s `GET /metrics`, the body only.
fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("metrics listener");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// The value of the first series named exactly `name` (any labels).
fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn start_alloc(store: &StoreCluster, id: &str, metrics: &str) -> Proc {
    let addr = format!("127.0.0.1:{}", free_port());
    kit::start_alloc_with(store, id, &addr, &store.peer_addrs, |cfg| {
        cfg.metrics_addr = Some(metrics.to_string());
    })
}

/// Every series of `text` carries `set` and `node_label`.
fn every_series_labelled(text: &str, node_label: &str, who: &str) {
    let mut n = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        n += 1;
        assert!(line.contains("set=\""), "{who}: no set label: {line}");
        assert!(
            line.contains(&format!("{node_label}=\"")),
            "{who}: no {node_label} label: {line}"
        );
    }
    assert!(n > 50, "{who}: only {n} series");
}

#[test]
fn live_scrapes_follow_the_conventions() {
    if !promtool_here("live_scrapes_follow_the_conventions") {
        return;
    }
    let set = SetSpec::new(0, 0..400_000);
    let initial = InitialAlloc::even_split(["alloc-1".to_string()], set.section_count());
    let opts = StoreOptions {
        metrics: true,
        ..Default::default()
    };
    let store = StoreCluster::start_opts(BINS, 1, set, initial, opts);
    let alloc_metrics = format!("127.0.0.1:{}", free_port());
    let _alloc = start_alloc(&store, "alloc-1", &alloc_metrics);
    let store_metrics = store.metrics_addrs[0].clone();
    let start = Instant::now();
    let (s, a) = loop {
        let (s, a) = (
            scrape_or_empty(&store_metrics),
            scrape_or_empty(&alloc_metrics),
        );
        if value(&a, "seqsvr_alloc_sections_served") == Some(4.0)
            && value(&s, "seqsvr_store_owned_sections") == Some(4.0)
        {
            break (s, a);
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the AllocSvr serves nothing after 30 s\n{}",
            store.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for (text, who) in [(&s, "store"), (&a, "alloc")] {
        let out = promtool(&["check", "metrics"], Some(text));
        assert!(
            out.trim().is_empty(),
            "{who}: promtool check metrics:\n{out}"
        );
        assert!(text.contains("seqsvr_build_info{"), "{who}: no build info");
        assert!(
            text.contains("process_resident_memory_bytes{"),
            "{who}: no process metrics"
        );
        assert!(!text.contains("field=\""), "{who}: a field label");
        assert!(
            !text.contains("_ms{") && !text.contains("_ms "),
            "{who}: milliseconds"
        );
    }
    every_series_labelled(&s, "store_node", "store");
    every_series_labelled(&a, "alloc", "alloc");
    assert!(
        s.contains("set=\"0\"") && a.contains("set=\"0\""),
        "the set's id"
    );
    // What the alert rules read, and counters that count only real events.
    assert_eq!(
        value(&a, "seqsvr_alloc_lease_lapses_total"),
        Some(0.0),
        "a fresh AllocSvr lapsed:\n{a}"
    );
    assert_eq!(
        value(&s, "seqsvr_store_unserved_sections"),
        Some(0.0),
        "{s}"
    );
    assert_eq!(
        value(&s, "seqsvr_store_arbiter_moves_total"),
        Some(0.0),
        "{s}"
    );
    assert_eq!(value(&s, "seqsvr_raft_is_leader"), Some(1.0), "{s}");
    assert!(
        value(&a, "seqsvr_alloc_lease_left_seconds").is_some_and(|l| l > 0.0),
        "{a}"
    );
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus-alerts.yml")).unwrap();
    for name in metric_names(&rules) {
        let base = name.trim_end_matches("_bucket");
        assert!(
            s.contains(base) || a.contains(base),
            "the rules read {name}, which neither scrape has"
        );
    }
}

fn scrape_or_empty(addr: &str) -> String {
    if std::net::TcpStream::connect(addr).is_err() {
        return String::new();
    }
    scrape(addr)
}

/// The `seqsvr_*` metric names an expression text mentions.
fn metric_names(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("seqsvr_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_string();
        if !out.contains(&name) {
            out.push(name);
        }
        rest = &tail[end..];
    }
    out
}
