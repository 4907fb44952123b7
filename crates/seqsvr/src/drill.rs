//! `seqctl drill`: a failover drill against any cluster.
//!
//! It drives a workload of `next` / `next_batch` calls, runs fault actions
//! at chosen times (kill -9, SIGSTOP, SIGCONT of a `seqsvr dev` process by
//! name, or any shell command the operator gives, e.g. `docker kill
//! alloc-2`), and reports what clients saw: regressions and repeats per uid
//! (must be 0 — promise 1), how long each section was unavailable, how long
//! recovery took after each fault, and how many numbers were skipped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use seqsvr_client::{ClientOptions, SeqClient};
use seqsvr_core::checker::{check, Observation};
use seqsvr_core::SetSpec;
use seqsvr_store::client::StoreClient;
use serde::Serialize;

/// `seqctl drill` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct DrillArgs {
    /// Uids to drive, `first..end` (default: 10,000 uids spread evenly over
    /// the whole set, so every section sees traffic).
    #[arg(long)]
    pub uids: Option<String>,
    /// Calls per second over all callers (0: closed loop, as fast as possible).
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// Concurrent callers.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// How long to drive the workload (e.g. `30s`, `1500ms`).
    #[arg(long, default_value = "30s")]
    pub duration: String,
    /// A fault: `AT:ACTION:TARGET`, e.g. `5s:kill:alloc-1`, `5s:stop:alloc-2`,
    /// `12s:cont:alloc-2`, `5s:kill:store-leader`, `5s:isolate:store-leader`,
    /// `9s:heal:store-1`, `5s:exec:docker kill alloc-2`. kill/stop/cont act on
    /// `seqsvr dev` processes (pid files in --dev-dir); isolate/heal cut a dev
    /// store replica off from its peers and back.
    #[arg(long = "fault")]
    pub faults: Vec<String>,
    /// Where `seqsvr dev` keeps its pid files.
    #[arg(long, default_value = crate::defaults::DEV_DIR)]
    pub dev_dir: PathBuf,
    /// Per-call deadline of the drill's client, in ms.
    #[arg(long, default_value_t = 1000)]
    pub deadline_ms: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Action {
    /// SIGKILL a dev process (by name, or `store-leader`).
    Kill(String),
    /// SIGSTOP a dev process.
    Stop(String),
    /// SIGCONT a dev process.
    Cont(String),
    /// Cut a dev store replica off from its peers (clients still reach it).
    Isolate(String),
    /// Undo `Isolate`.
    Heal(String),
    /// Run a shell command.
    Exec(String),
}

/// A fault at a time after the drill starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    /// When, after the start.
    #[serde(serialize_with = "ser_ms")]
    pub at: Duration,
    /// What.
    pub action: Action,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// Parses `1500ms`, `5s`, `2m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        _ => bail!("bad duration unit in {s:?} (use ms, s or m)"),
    };
    if !(0.0..1e7).contains(&secs) {
        bail!("duration {s:?} out of range");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses `AT:ACTION:TARGET`.
pub fn parse_fault(s: &str) -> anyhow::Result<Fault> {
    let mut it = s.splitn(3, ':');
    let (Some(at), Some(action), Some(target)) = (it.next(), it.next(), it.next()) else {
        bail!("fault {s:?} is not AT:ACTION:TARGET");
    };
    let target = target.trim().to_string();
    if target.is_empty() {
        bail!("fault {s:?} has no target");
    }
    let action = match action {
        "kill" => Action::Kill(target),
        "stop" => Action::Stop(target),
        "cont" => Action::Cont(target),
        "exec" => Action::Exec(target),
        "isolate" => Action::Isolate(target),
        "heal" => Action::Heal(target),
        a => bail!("unknown fault action {a:?} (kill, stop, cont, isolate, heal, exec)"),
    };
    Ok(Fault {
        at: parse_duration(at)?,
        action,
    })
}

/// Everything a drill needs.
#[derive(Debug, Clone)]
pub struct DrillConfig {
    /// AllocSvr seeds.
    pub allocs: Vec<String>,
    /// Store replicas (for the set spec and `store-leader`).
    pub store: Vec<String>,
    /// Uids driven (`None`: 10,000 uids spread evenly over the set).
    pub uids: Option<std::ops::Range<u64>>,
    /// Calls per second overall (0: closed loop).
    pub rate: u64,
    /// Concurrent callers.
    pub concurrency: usize,
    /// Workload duration.
    pub duration: Duration,
    /// Faults, in any order.
    pub faults: Vec<Fault>,
    /// Where dev pid files are.
    pub dev_dir: PathBuf,
    /// Client per-call deadline.
    pub deadline: Duration,
}

impl DrillArgs {
    /// Validates the flags into a config.
    pub fn into_config(&self, store: &[String], allocs: &[String]) -> anyhow::Result<DrillConfig> {
        let uids = match &self.uids {
            None => None,
            Some(r) => {
                let (a, b) = r.split_once("..").context("--uids is first..end")?;
                let (a, b): (u64, u64) = (a.trim().parse()?, b.trim().parse()?);
                if b <= a {
                    bail!("--uids {r} is empty");
                }
                Some(a..b)
            }
        };
        if self.concurrency == 0 || self.concurrency > 10_000 {
            bail!("--concurrency must be 1..=10000");
        }
        Ok(DrillConfig {
            allocs: allocs.to_vec(),
            store: store.to_vec(),
            uids,
            rate: self.rate,
            concurrency: self.concurrency,
            duration: parse_duration(&self.duration)?,
            faults: self
                .faults
                .iter()
                .map(|f| parse_fault(f))
                .collect::<anyhow::Result<_>>()?,
            dev_dir: self.dev_dir.clone(),
            deadline: Duration::from_millis(self.deadline_ms.max(1)),
        })
    }
}

/// A fault as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct FaultReport {
    /// The fault.
    pub fault: Fault,
    /// What it did (or why it failed).
    pub outcome: String,
    /// The longest time, from the fault on, that any section went without
    /// a successful call while calls for it failed (before the next fault),
    /// in ms.
    pub recovery_ms: f64,
    /// Across the fault, the largest jump of a section's numbers (see
    /// `section_skip`); compare with the step.
    pub section_skip_max: u64,
}

/// The drill's findings.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Calls made.
    pub requests: u64,
    /// Calls that failed (after the client's retries).
    pub failed: u64,
    /// Numbers received.
    pub numbers: usize,
    /// Distinct uids that received numbers.
    pub uids: usize,
    /// Later calls that got a smaller number (must be 0).
    pub regressions: usize,
    /// Two calls that got the same number (must be 0).
    pub repeats: usize,
    /// The first violations, human-readable.
    pub examples: Vec<String>,
    /// Per section: longest stretch without a successful call, in ms — max.
    pub unavailable_max_ms: f64,
    /// … and 99th percentile over sections.
    pub unavailable_p99_ms: f64,
    /// The worst sections: (section, uid range, ms).
    pub worst_sections: Vec<(u32, String, f64)>,
    /// Faults and recovery.
    pub faults: Vec<FaultReport>,
    /// Numbers never received between a uid's first and last number.
    pub skipped: u64,
    /// The largest such gap for one uid.
    pub skipped_max_per_uid: u64,
    /// The set's step (for reading the skips).
    pub step: u64,
}

impl Report {
    /// Whether promise 1 held.
    pub fn ok(&self) -> bool {
        self.regressions == 0 && self.repeats == 0
    }

    /// Prints the report (text or JSON).
    pub fn print(&self, json: bool) {
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(self).expect("report serialises")
            );
            return;
        }
        println!(
            "requests     {} ({} failed), {} numbers for {} uids",
            self.requests, self.failed, self.numbers, self.uids
        );
        let verdict = if self.ok() { "OK" } else { "BROKEN" };
        println!(
            "regressions  {}   repeats {}   => {verdict}",
            self.regressions, self.repeats
        );
        for e in &self.examples {
            println!("  {e}");
        }
        println!(
            "unavailable  per section (gaps with failed calls): max {:.0} ms, p99 {:.0} ms",
            self.unavailable_max_ms, self.unavailable_p99_ms
        );
        for (s, range, ms) in &self.worst_sections {
            println!("  section {s:>5} (uids {range}): {ms:.0} ms");
        }
        for f in &self.faults {
            println!(
                "fault at {:>7.1} s  {:?}: {}\n    longest outage after it {:.0} ms; largest section jump across it {} (step {})",
                f.fault.at.as_secs_f64(),
                f.fault.action,
                f.outcome,
                f.recovery_ms,
                f.section_skip_max,
                self.step
            );
        }
        println!(
            "skipped      {} numbers (largest gap for one uid: {})",
            self.skipped, self.skipped_max_per_uid
        );
    }
}

/// Runs a drill.
pub async fn run(cfg: DrillConfig) -> anyhow::Result<Report> {
    let store = StoreClient::new(&cfg.store)?;
    let set = store.routes().await.context("reading the route table")?.set;
    // (first uid, count, stride): every `stride`-th uid from `first`.
    let uids = match &cfg.uids {
        Some(r) => (r.start, r.end - r.start, 1),
        None => {
            let n = (set.uid_end - set.uid_begin).min(10_000);
            (set.uid_begin, n, (set.uid_end - set.uid_begin) / n)
        }
    };
    let opts = ClientOptions {
        deadline: cfg.deadline,
        ..Default::default()
    };
    let client = SeqClient::connect(&cfg.allocs, opts).await?;
    let obs: Arc<Mutex<Vec<Observation>>> = Default::default();
    let failures: Arc<Mutex<Vec<(u64, Instant)>>> = Default::default();
    let counts = Arc::new((
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    ));
    let t0 = Instant::now();
    let end = t0 + cfg.duration;
    let workers: Vec<_> = (0..cfg.concurrency)
        .map(|k| {
            let w = Worker {
                client: client.clone(),
                uids,
                obs: obs.clone(),
                counts: counts.clone(),
                section_size: set.section_size,
                failures: failures.clone(),
                pace: (cfg.rate > 0)
                    .then(|| Duration::from_secs_f64(cfg.concurrency as f64 / cfg.rate as f64)),
            };
            tokio::spawn(w.run(k as u64, end))
        })
        .collect();
    let faults = run_faults(&cfg, &store, t0).await;
    for w in workers {
        w.await?;
    }
    let obs = std::mem::take(&mut *obs.lock().unwrap_or_else(|e| e.into_inner()));
    let (requests, failed) = (
        counts.0.load(std::sync::atomic::Ordering::Relaxed),
        counts.1.load(std::sync::atomic::Ordering::Relaxed),
    );
    let failures = std::mem::take(&mut *failures.lock().unwrap_or_else(|e| e.into_inner()));
    let calls = Calls {
        requests,
        failed,
        failures,
    };
    Ok(analyse(&set, &obs, faults, calls, t0, Instant::now()))
}

struct Worker {
    client: SeqClient,
    /// (first uid, how many, stride).
    uids: (u64, u64, u64),
    obs: Arc<Mutex<Vec<Observation>>>,
    counts: Arc<(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64)>,
    pace: Option<Duration>,
    /// Uids per section (batches stay within one).
    section_size: u64,
    /// Failed calls: (a uid of the call, when it started).
    failures: Arc<Mutex<Vec<(u64, Instant)>>>,
}

impl Worker {
    async fn run(self, seed: u64, end: Instant) {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (seed.wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1);
        let (first, count, stride) = self.uids;
        let mut next_at = Instant::now();
        let mut i = 0u64;
        while Instant::now() < end {
            if let Some(p) = self.pace {
                next_at += p;
                tokio::time::sleep_until(next_at.into()).await;
            }
            let mut pick = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                first + (x % count) * stride
            };
            i += 1;
            let start = Instant::now();
            self.counts
                .0
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let result = if i.is_multiple_of(8) {
                // A group fan-out within one section, so a failure is
                // attributed to the right section.
                let base = pick();
                let lo = base - (base - first) % self.section_size.max(1);
                let batch: Vec<u64> = (0..8u64)
                    .map(|k| (base + k * stride).min(lo + self.section_size - 1))
                    .collect();
                self.client
                    .next_batch(&batch)
                    .await
                    .map(|s| batch.iter().copied().zip(s).collect::<Vec<_>>())
                    .map_err(|_| batch[0])
            } else {
                let uid = pick();
                self.client
                    .next(uid)
                    .await
                    .map(|s| vec![(uid, s)])
                    .map_err(|_| uid)
            };
            let end_t = Instant::now();
            match result {
                Ok(pairs) => {
                    let mut o = self.obs.lock().unwrap_or_else(|e| e.into_inner());
                    o.extend(pairs.into_iter().map(|(uid, seq)| Observation {
                        uid,
                        seq,
                        start,
                        end: end_t,
                    }));
                }
                Err(uid) => {
                    self.counts
                        .1
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((uid, start));
                }
            }
        }
    }
}

/// Runs the faults at their times; returns what happened and when.
async fn run_faults(
    cfg: &DrillConfig,
    store: &StoreClient,
    t0: Instant,
) -> Vec<(Fault, Instant, String)> {
    let mut faults = cfg.faults.clone();
    faults.sort_by_key(|f| f.at);
    let mut done = Vec::new();
    for f in faults {
        tokio::time::sleep_until((t0 + f.at).into()).await;
        let at = Instant::now();
        let outcome = match act(&f.action, cfg, store).await {
            Ok(s) => s,
            Err(e) => format!("FAILED: {e:#}"),
        };
        done.push((f, at, outcome));
    }
    let end = t0 + cfg.duration;
    tokio::time::sleep_until(end.into()).await;
    done
}

async fn act(action: &Action, cfg: &DrillConfig, store: &StoreClient) -> anyhow::Result<String> {
    let (name, sig) = match action {
        Action::Isolate(n) | Action::Heal(n) => {
            let name = resolve(n, store).await?;
            let path = cfg
                .dev_dir
                .join(&name)
                .join(seqsvr_store::node::ISOLATE_FILE);
            if matches!(action, Action::Isolate(_)) {
                std::fs::write(&path, b"")
                    .with_context(|| format!("writing {}", path.display()))?;
                return Ok(format!("{name} cut off from its peers"));
            }
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            return Ok(format!("{name} healed"));
        }
        Action::Kill(n) => (n, libc::SIGKILL),
        Action::Stop(n) => (n, libc::SIGSTOP),
        Action::Cont(n) => (n, libc::SIGCONT),
        Action::Exec(cmd) => {
            let out = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .output()
                .await?;
            return Ok(format!("`{cmd}` exited with {}", out.status));
        }
    };
    let name = resolve(name, store).await?;
    let path = cfg.dev_dir.join(format!("{name}.pid"));
    let pid: i32 = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .parse()?;
    // SAFETY: kill(2) has no memory effects; the pid is the dev cluster's child.
    if unsafe { libc::kill(pid, sig) } != 0 {
        bail!("kill({pid}): {}", std::io::Error::last_os_error());
    }
    Ok(format!("signal {sig} sent to {name} (pid {pid})"))
}

/// `store-leader` → `store-<id>`; other names as they are.
async fn resolve(name: &str, store: &StoreClient) -> anyhow::Result<String> {
    if name != "store-leader" {
        return Ok(name.to_string());
    }
    let l = store
        .leader_status()
        .await
        .context("no store leader to find")?;
    Ok(format!("store-{}", l.node_id))
}

/// What the workers did, besides the numbers.
struct Calls {
    requests: u64,
    failed: u64,
    /// (a uid of the failed call, when it started).
    failures: Vec<(u64, Instant)>,
}

fn analyse(
    set: &SetSpec,
    obs: &[Observation],
    faults: Vec<(Fault, Instant, String)>,
    calls: Calls,
    t0: Instant,
    t1: Instant,
) -> Report {
    let r = check(obs);
    let examples = r
        .regressions
        .iter()
        .chain(&r.repeats)
        .take(5)
        .map(|v| {
            format!(
                "uid {}: got {} after {} had been returned",
                v.uid, v.later.seq, v.earlier.seq
            )
        })
        .collect();
    // Per section: successes (sorted) and failed call starts.
    let mut ends: HashMap<u32, Vec<Instant>> = HashMap::new();
    for o in obs {
        if let Some(s) = set.section_of(o.uid) {
            ends.entry(s).or_default().push(o.end);
        }
    }
    for e in ends.values_mut() {
        e.sort();
    }
    let mut fails: HashMap<u32, Vec<Instant>> = HashMap::new();
    for (uid, at) in &calls.failures {
        if let Some(s) = set.section_of(*uid) {
            fails.entry(s).or_default().push(*at);
        }
    }
    // A section is unavailable over a gap between two successes only if a
    // call for it failed in that gap (a quiet gap is just no traffic).
    let outage = |s: u32, from: Instant, until: Instant| -> Duration {
        let e = ends.get(&s).map(Vec::as_slice).unwrap_or(&[]);
        fails
            .get(&s)
            .into_iter()
            .flatten()
            .filter(|f| **f >= from && **f < until)
            .map(|f| {
                let i = e.partition_point(|t| t <= f);
                let before = if i == 0 { t0 } else { e[i - 1] };
                let after = e.get(i).copied().unwrap_or(t1);
                after - before
            })
            .max()
            .unwrap_or_default()
    };
    let mut gaps: Vec<(u32, f64)> = (0..set.section_count())
        .map(|s| (s, outage(s, t0, t1).as_secs_f64() * 1000.0))
        .filter(|g| g.1 > 0.0)
        .collect();
    gaps.sort_by(|a, b| b.1.total_cmp(&a.1));
    let p99 = gaps
        .get(set.section_count() as usize / 100)
        .map_or(0.0, |g| g.1);
    let worst = gaps
        .iter()
        .take(5)
        .map(|(s, ms)| {
            let u = set.uids_of(*s);
            (*s, format!("{}..{}", u.start, u.end), *ms)
        })
        .collect();
    let times: Vec<Instant> = faults.iter().map(|f| f.1).collect();
    let faults = faults
        .into_iter()
        .enumerate()
        .map(|(i, (fault, at, outcome))| {
            let until = times.get(i + 1).copied().unwrap_or(t1);
            let worst = (0..set.section_count())
                .map(|s| outage(s, at, until))
                .max()
                .unwrap_or_default();
            FaultReport {
                section_skip_max: section_skip(set, obs, at, until),
                fault,
                outcome,
                recovery_ms: worst.as_secs_f64() * 1000.0,
            }
        })
        .collect();
    let (skipped, skipped_max) = skipped_numbers(obs);
    Report {
        requests: calls.requests,
        failed: calls.failed,
        numbers: r.observations,
        uids: r.uids,
        regressions: r.regressions.len(),
        repeats: r.repeats.len(),
        examples,
        unavailable_max_ms: gaps.first().map_or(0.0, |g| g.1),
        unavailable_p99_ms: p99,
        worst_sections: worst,
        faults,
        skipped,
        skipped_max_per_uid: skipped_max,
        step: set.step,
    }
}

/// Per section, how far the numbers jumped across a fault: the smallest
/// number handed out after it (before the next fault) minus the largest
/// handed out before it; the largest over sections. A section that moved
/// restarts every uid at its old ceiling, so this bounds what the move
/// skipped (promise 4: at most about one step).
fn section_skip(set: &SetSpec, obs: &[Observation], at: Instant, until: Instant) -> u64 {
    let mut before: HashMap<u32, u64> = HashMap::new();
    let mut after: HashMap<u32, u64> = HashMap::new();
    for o in obs {
        let Some(s) = set.section_of(o.uid) else {
            continue;
        };
        if o.end < at {
            let b = before.entry(s).or_default();
            *b = (*b).max(o.seq);
        } else if o.start > at && o.end < until {
            let a = after.entry(s).or_insert(u64::MAX);
            *a = (*a).min(o.seq);
        }
    }
    after
        .iter()
        .filter_map(|(s, a)| before.get(s).map(|b| a.saturating_sub(*b)))
        .max()
        .unwrap_or(0)
}

/// Numbers between each uid's first and last received number that nobody
/// in this drill received (skip-ahead after failovers, lost replies, and
/// numbers other clients took).
fn skipped_numbers(obs: &[Observation]) -> (u64, u64) {
    let mut per: HashMap<u64, (u64, u64, u64)> = HashMap::new();
    for o in obs {
        let e = per.entry(o.uid).or_insert((u64::MAX, 0, 0));
        e.0 = e.0.min(o.seq);
        e.1 = e.1.max(o.seq);
        e.2 += 1;
    }
    per.values().fold((0, 0), |(sum, max), (lo, hi, n)| {
        let gap = (hi - lo + 1).saturating_sub(*n);
        (sum + gap, max.max(gap))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_faults_and_durations() {
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        for bad in ["", "s", "5h", "-1s", "x"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let f = parse_fault("5s:exec:docker kill alloc-2").unwrap();
        assert_eq!(f.at, Duration::from_secs(5));
        assert_eq!(f.action, Action::Exec("docker kill alloc-2".into()));
        assert_eq!(
            parse_fault("200ms:stop:alloc-1").unwrap().action,
            Action::Stop("alloc-1".into())
        );
        for bad in ["5s:kill", "5s:explode:x", "soon:kill:x", "5s:kill: "] {
            assert!(parse_fault(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn outages_need_a_failed_call_and_skips_compare_sections() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let set = SetSpec {
            section_size: 10,
            ..SetSpec::new(0, 0..20)
        };
        let o = |uid, seq, at| Observation {
            uid,
            seq,
            start: ms(at),
            end: ms(at),
        };
        // Section 0: quiet 10..500 (no failure), then a failure at 600 inside 550..900.
        // Section 1: one uid jumps from 5 to 105 across a fault at 300.
        let obs = [
            o(1, 1, 10),
            o(1, 2, 500),
            o(2, 1, 550),
            o(2, 2, 900),
            o(11, 5, 100),
            o(12, 105, 400),
        ];
        let calls = Calls {
            requests: 7,
            failed: 1,
            failures: vec![(3, ms(600))],
        };
        let fault = Fault {
            at: Duration::from_millis(300),
            action: Action::Kill("x".into()),
        };
        let r = analyse(
            &set,
            &obs,
            vec![(fault, ms(300), "ok".into())],
            calls,
            t0,
            ms(1000),
        );
        assert_eq!(r.unavailable_max_ms, 350.0);
        assert_eq!(r.worst_sections.len(), 1);
        assert_eq!(r.faults[0].recovery_ms, 350.0);
        assert_eq!(r.faults[0].section_skip_max, 100);
        assert!(r.ok());
    }

    #[test]
    fn skipped_counts_holes_per_uid() {
        let t = Instant::now();
        let o = |uid, seq| Observation {
            uid,
            seq,
            start: t,
            end: t,
        };
        assert_eq!(
            skipped_numbers(&[o(1, 1), o(1, 2), o(1, 10), o(2, 5)]),
            (7, 7)
        );
    }
}
