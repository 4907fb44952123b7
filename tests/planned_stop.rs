//! Planned stops and start-up, with real processes
//! (`docs/operations.md`, Stopping an AllocSvr; Start-up).
//!
//! - SIGTERM of one AllocSvr under a client workload: it hands its
//!   sections to the live peer with planned handoffs before it exits, so
//!   no uid waits out a lease; the per-uid checker sees no regression and
//!   no repeat (promise 1), and the longest time any uid went without an
//!   answer is printed (and bounded by the lease, generously: a stop that
//!   only closes its listeners costs lease + margin).
//! - Start-up: a restarted AllocSvr that waits out its previous
//!   incarnation's lease answers `Routes` at once with the typed
//!   `NOT_SERVING_YET` (the reason, when to retry), never by timing out;
//!   and its log says what it waits for, not that a twin is live.
//! - The last AllocSvr's stop: recorded in the store, so its next process
//!   (also after a restart of the whole store group) serves at once.
//! - `seqsvr alloc drain --self` (the Kubernetes preStop hook): the same
//!   planned stop, asked over the admin plane from beside the process.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use seqsvr::checker::Observation;
use seqsvr_client::SeqClient;
use seqsvr_core::rng::Rng;
use seqsvr_core::SetSpec;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb, detail_of, ErrorKind};
use seqsvr_testkit::{self as kit, attack, Bins};
use seqsvr_testkit::{assert_monotonic, test_lease, SetCluster, Workload};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// 8 sections of 500 uids.
fn set() -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: 4000,
        section_size: 500,
        step: 200,
    }
}

/// `callers` tasks calling `next` (every 5th call `current`) on 64 uids
/// spread over every section.
fn start_workload(c: &SeqClient, callers: u64) -> Workload {
    let mut w = Workload::new();
    w.tasks = (0..callers)
        .map(|k| {
            let (c, r) = (c.clone(), w.recorder());
            tokio::spawn(async move {
                let mut rng = Rng::new(0x9e3779b97f4a7c15u64 ^ (k + 1));
                let mut i = 0u64;
                while !r.stopped() {
                    let x = rng.next_u64();
                    let uid = (x % 64) * 61 % 4000;
                    i += 1;
                    if i.is_multiple_of(5) {
                        r.current(&c, uid).await;
                    } else {
                        r.next(&c, uid).await;
                    }
                }
            })
        })
        .collect();
    w
}

/// The longest time any uid went without a successful answer within
/// `[from, until]` (each uid's gaps between answers, and from `from` to
/// its first and from its last to `until`), and that uid.
fn longest_unavailability(obs: &[Observation], from: Instant, until: Instant) -> (Duration, u64) {
    let mut ends: HashMap<u64, Vec<Instant>> = HashMap::new();
    for o in obs.iter().filter(|o| o.end >= from && o.end <= until) {
        ends.entry(o.uid).or_default().push(o.end);
    }
    let mut worst = (Duration::ZERO, 0);
    for (uid, mut e) in ends {
        e.sort();
        e.push(until);
        let mut prev = from;
        for t in e {
            if t - prev > worst.0 {
                worst = (t - prev, uid);
            }
            prev = t;
        }
    }
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_the_sections_over_under_load() {
    let mut cluster = SetCluster::start(BINS, set(), 2);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let w = start_workload(&c, 8);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let from = Instant::now();
    let stopped =
        tokio::task::block_in_place(|| cluster.allocs[0].terminate(Duration::from_secs(20)));
    let (status, took) = stopped.expect("alloc-1 did not exit within 20 s of SIGTERM");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let until = Instant::now();
    let (obs, errors) = w.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    let (gap, uid) = longest_unavailability(&obs, from - Duration::from_millis(500), until);
    // For comparison: the longest gap of any uid in the 1.5 s before the
    // stop (64 uids shared by 8 callers: a uid is not asked every moment).
    let (before, _) = longest_unavailability(&obs, from - Duration::from_millis(1500), from);
    let lease = Duration::from_millis(test_lease().lease_ms);
    println!(
        "SIGTERM of alloc-1 (4 of 8 sections) under load: exited {status} after {:.1} ms; \
         longest unavailability of any uid {:.1} ms (uid {uid}; {:.1} ms in the 1.5 s \
         before); {errors} failed calls",
        took.as_secs_f64() * 1000.0,
        gap.as_secs_f64() * 1000.0,
        before.as_secs_f64() * 1000.0
    );
    assert!(
        gap < lease,
        "a uid went {gap:?} without an answer: as long as a lease ({lease:?}) runs out\n{}",
        cluster.store.logs()
    );
    let log = std::fs::read_to_string(cluster.store.dir.path().join("alloc-1.log")).unwrap();
    assert!(
        log.contains("every section handed to a live peer"),
        "alloc-1 did not hand its sections over:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starting_alloc_answers_routes_at_once_with_the_reason() {
    let mut cluster = SetCluster::start(BINS, set(), 2);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    // kill -9 and start again at once: the store still holds the previous
    // incarnation's lease, which the new process waits out.
    cluster.allocs[0].kill9();
    cluster.allocs[0].restart();
    let addr = cluster.alloc_addrs[0].clone();
    let ch = seqsvr_net::client::endpoint(&addr, None, Duration::from_secs(1))
        .unwrap()
        .timeout(Duration::from_secs(3))
        .connect_lazy();
    let mut alloc = AllocClient::new(ch);
    let started = Instant::now();
    let mut answer = None;
    // The listener may take a moment to be bound by the new process.
    while started.elapsed() < Duration::from_secs(2) {
        let t = Instant::now();
        match alloc.routes(pb::GetRoutesRequest {}).await {
            Err(st) if detail_of(&st).is_some() => {
                answer = Some((st, t.elapsed()));
                break;
            }
            Err(st)
                if st.code() == tonic::Code::Unavailable
                    && t.elapsed() < Duration::from_millis(200) =>
            {
                // Not listening yet (connection refused).
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!(
                "Routes during start-up: {:?} after {:?}, not a typed NOT_SERVING_YET",
                other.map(|r| r.into_inner().version),
                t.elapsed()
            ),
        }
    }
    let (st, took) = answer.expect("no typed answer within 2 s of the restart");
    let d = detail_of(&st).unwrap();
    println!(
        "Routes during start-up answered in {:.2} ms: {:?} {:?}: {} (retry in {} ms)",
        took.as_secs_f64() * 1000.0,
        st.code(),
        ErrorKind::try_from(d.kind),
        d.reason,
        d.retry_after_ms
    );
    // seqctl says why: `health --ready` is not ready with the reason, the
    // liveness form (no --ready) alive.
    let health = |flags: &[&str]| {
        let out = std::process::Command::new(BINS.seqctl)
            .arg("health")
            .arg(&addr)
            .args(flags)
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        println!("seqctl health {flags:?}: {:?} {line}", out.status.code());
        (out.status.code(), line)
    };
    let (ready_code, ready_line) = health(&["--ready"]);
    let (live_code, live_line) = health(&[]);
    assert_eq!(ErrorKind::try_from(d.kind), Ok(ErrorKind::NotServingYet));
    assert!(d.retryable && d.retry_after_ms > 0, "{d:?}");
    assert!(
        took < Duration::from_millis(500),
        "a start-up answer took {took:?}"
    );
    assert_eq!(ready_code, Some(1), "{ready_line}");
    assert!(
        ready_line.contains("not serving yet: waiting out the previous incarnation's lease"),
        "{ready_line}"
    );
    assert_eq!(live_code, Some(0), "{live_line}");
    // The client library retries it after the given delay: a client
    // seeded with the starting AllocSvr alone connects once it serves.
    let opts = seqsvr_client::ClientOptions {
        deadline: Duration::from_secs(10),
        ..Default::default()
    };
    let t = Instant::now();
    let c1 = SeqClient::connect(std::slice::from_ref(&addr), opts)
        .await
        .expect("a client seeded with the restarted AllocSvr alone");
    let first = c1.next(0).await.expect("a number once it serves");
    println!(
        "restart after kill -9 -> first number via it alone: {:.2} s after the restart ({first})",
        (t.elapsed() + took).as_secs_f64()
    );
    cluster.allocs[0].kill9();
    let log = std::fs::read_to_string(cluster.store.dir.path().join("alloc-1.log")).unwrap();
    assert!(
        log.contains("waiting out its lease"),
        "the restarted AllocSvr did not say what it waits for:\n{log}"
    );
    assert!(
        !log.contains("another process with this AllocSvr id is live"),
        "the restarted AllocSvr still claims a live twin:\n{log}"
    );
}

/// Waits until every section answers a `next` through `c`; returns how
/// long that took.
async fn time_to_serve_all(c: &SeqClient, cluster: &SetCluster, within: Duration) -> Duration {
    let t = Instant::now();
    let spec = set();
    for s in 0..spec.section_count() {
        let uid = spec.uids_of(s).start;
        while c.next(uid).await.is_err() {
            assert!(
                t.elapsed() < within,
                "section {s} not served within {within:?}\n{}",
                cluster.store.logs()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    t.elapsed()
}

/// The last AllocSvr of a set stops the planned way: no peer to hand its
/// sections to, so it records its stop in the store, which fences
/// whatever that process might still send and leaves the id with no live
/// incarnation. Nothing waits out its lease:
/// 1. alloc-1 stops (hands everything to alloc-2), alloc-2 stops (the
///    last: records); the store group is stopped too, and it starts again
///    with alloc-1 only, as after a host's reboot: the new leader moves the
///    stopped alloc-2's sections to alloc-1 during its first lease + margin;
/// 2. alloc-1 stops (the last: records) and starts again alone: its next
///    process registers at once and claims its sections back.
///
/// The per-uid checker runs over all of it (promise 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_alloc_records_its_stop_and_starts_again_at_once() {
    let mut cluster = SetCluster::start(BINS, set(), 2);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let w = start_workload(&c, 4);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let lease = Duration::from_millis(test_lease().lease_ms + test_lease().margin_ms);
    let term = |cluster: &mut SetCluster, i: usize| {
        tokio::task::block_in_place(|| cluster.allocs[i].terminate(Duration::from_secs(20)))
            .unwrap_or_else(|| panic!("alloc-{} did not exit within 20 s of SIGTERM", i + 1));
    };

    // 1. The whole set stops; all but alloc-2 start again at once.
    term(&mut cluster, 0);
    term(&mut cluster, 1);
    tokio::task::block_in_place(|| {
        for p in cluster.store.procs.iter_mut() {
            p.terminate(Duration::from_secs(10))
                .expect("a store replica did not exit on SIGTERM");
        }
    });
    let t = Instant::now();
    for p in cluster.store.procs.iter_mut() {
        p.restart();
    }
    cluster.allocs[0].restart();
    time_to_serve_all(&c, &cluster, Duration::from_secs(30)).await;
    let whole = t.elapsed();

    // 2. alloc-1, now the last, stops and starts again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    term(&mut cluster, 0);
    let t = Instant::now();
    cluster.allocs[0].restart();
    time_to_serve_all(&c, &cluster, Duration::from_secs(30)).await;
    let alone = t.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (obs, errors) = w.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    println!(
        "the whole set stopped with SIGTERM, started again without alloc-2: every section \
         served {:.0} ms after the restart; the last AllocSvr stopped and started again: \
         {:.0} ms (lease + margin: {} ms); {} answers checked, {errors} failed calls",
        whole.as_secs_f64() * 1000.0,
        alone.as_secs_f64() * 1000.0,
        lease.as_millis(),
        obs.len()
    );
    let read = |name: &str| {
        std::fs::read_to_string(cluster.store.dir.path().join(format!("{name}.log"))).unwrap()
    };
    let (log1, log2) = (read("alloc-1"), read("alloc-2"));
    assert_eq!(
        (
            log1.matches("stop: recorded in the store").count(),
            log2.matches("stop: recorded in the store").count()
        ),
        (2, 1),
        "a stop was not recorded:\n{log1}\n{log2}"
    );
    assert!(
        !log1.contains("waiting out its lease"),
        "a restart waited out a lease its predecessor had released:\n{log1}"
    );
    // Generous (timings are printed, not judged): a restart that waits
    // out a lease takes at least lease + margin.
    assert!(
        alone < lease && whole < lease,
        "a restart took as long as a lease runs out ({whole:?}, {alone:?})\n{}",
        cluster.store.logs()
    );
}

/// Whether process `pid` has exited (gone, or a zombie not reaped yet).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// `seqsvr alloc drain --self` (a Kubernetes preStop hook) under load: the
/// AllocSvr of the config stops the planned way, as on SIGTERM — its
/// sections handed to the live peer, its stop recorded — and the command
/// returns once the process has exited. Asked again, with nothing
/// running, it fails and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_self_stops_the_allocsvr_the_planned_way_under_load() {
    let cluster = SetCluster::start(BINS, set(), 2);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let w = start_workload(&c, 8);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let pid = cluster.allocs[0].pid().expect("alloc-1 runs");
    let config = cluster.store.dir.path().join("alloc-1.toml");
    let drain = || {
        let mut cmd = std::process::Command::new(BINS.seqsvr);
        cmd.args(["alloc", "drain", "--self", "--wait-secs", "20", "--config"])
            .arg(&config)
            .env_remove("SEQSVR_CONFIG");
        tokio::task::block_in_place(|| cmd.output().unwrap())
    };
    let from = Instant::now();
    let out = drain();
    let took = from.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "drain --self failed: {stdout}{stderr}\n{}",
        cluster.store.logs()
    );
    assert!(stdout.contains("stopped after"), "{stdout}");
    assert!(exited(pid), "alloc-1 still runs after the drain returned");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let until = Instant::now();
    let (obs, errors) = w.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    let (gap, uid) = longest_unavailability(&obs, from - Duration::from_millis(500), until);
    println!(
        "drain --self of alloc-1 under load: returned after {:.1} ms; longest \
         unavailability of any uid {:.1} ms (uid {uid}); {errors} failed calls\n{stdout}",
        took.as_secs_f64() * 1000.0,
        gap.as_secs_f64() * 1000.0
    );
    let lease = Duration::from_millis(test_lease().lease_ms);
    assert!(gap < lease, "a uid went {gap:?} without an answer");
    let log = std::fs::read_to_string(cluster.store.dir.path().join("alloc-1.log")).unwrap();
    assert!(log.contains("drain asked over the admin plane"), "{log}");
    assert!(
        log.contains("every section handed to a live peer"),
        "alloc-1 did not hand its sections over:\n{log}"
    );
    // Every section is alloc-2's now.
    let routes = cluster.store.read().routes().await.unwrap();
    assert!(
        routes.entries.iter().all(|e| e.alloc == "alloc-2"),
        "{routes:?}"
    );
    // Nothing runs there any more: a clear failure, not a hang.
    let again = drain();
    let stderr = String::from_utf8_lossy(&again.stderr).to_string();
    assert!(!again.status.success());
    assert!(stderr.contains("did not take the drain"), "{stderr}");
}

/// `seqsvr alloc drain --self` with TLS on every plane, as in a pod: it
/// presents the AllocSvr's own certificate from the config, which the
/// admin plane takes for a drain (and for nothing an operator's is
/// needed for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_self_over_tls_with_the_allocsvrs_own_certificate() {
    let cluster = attack::Cluster::start(
        BINS,
        attack::Options {
            tls: true,
            ..Default::default()
        },
    )
    .await;
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let pid = cluster.allocs[0].proc.pid().expect("alloc-1 runs");
    let config = cluster.dir.path().join("alloc-1.toml");
    let out = tokio::task::block_in_place(|| {
        std::process::Command::new(BINS.seqsvr)
            .args(["alloc", "drain", "--self", "--wait-secs", "20", "--config"])
            .arg(&config)
            .env_remove("SEQSVR_CONFIG")
            .output()
            .unwrap()
    });
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{}", cluster.logs());
    assert!(text.contains("stopped after"), "{text}");
    assert!(exited(pid), "alloc-1 still runs");
    // Its peer serves everything.
    cluster.wait_serving(&c).await;
    let routes = cluster.read().routes().await.unwrap();
    assert!(
        routes.entries.iter().all(|e| e.alloc == "alloc-2"),
        "{routes:?}"
    );
    // Another AllocSvr's certificate may not stop it.
    let admin = cluster.allocs[1].admin.clone();
    let tls = cluster.identity("alloc-1");
    let ch = attack::channel(&admin, Some(&tls), Duration::from_secs(2));
    let refused = seqsvr_proto::alloc_admin_client::AllocAdminClient::new(ch)
        .drain(pb::AllocDrainRequest {})
        .await
        .expect_err("alloc-1's certificate drained alloc-2");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(cluster.allocs[1].proc.pid().is_some_and(|p| !exited(p)));
}

/// The Kubernetes AllocSvr pods give a stop the time its handoffs may
/// take (`STOP_HANDOFF_BOUND`) and more: the kubelet's SIGKILL at the end
/// of the grace period must not cut a handoff short.
#[test]
fn k8s_grace_period_covers_the_stop_bound() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let yaml = std::fs::read_to_string(root.join("deploy/k8s/alloc.yaml")).unwrap();
    let grace: u64 = yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds:"))
        .expect("alloc.yaml sets terminationGracePeriodSeconds")
        .trim()
        .parse()
        .unwrap();
    let bound = seqsvr_alloc::node::STOP_HANDOFF_BOUND + seqsvr_alloc::node::STOP_RECORD_BOUND;
    // The handoffs' bound and the record's, then the rest of the stop
    // (closing the listeners, the process's exit) with 5 s to spare.
    let needed = bound + Duration::from_secs(5);
    println!("alloc pods: grace {grace} s; stop handoff bound {bound:?}");
    assert!(
        Duration::from_secs(grace) > needed,
        "terminationGracePeriodSeconds {grace} does not exceed the stop's bound {bound:?} + 5 s"
    );
}

/// `seqsvr dev`, Ctrl-C, `seqsvr dev` again (the README's "running it
/// again resumes"): prints the time from the second start to the first
/// `seqctl status` answer and to the first number, the figure
/// `docs/benchmarks.md` quotes. A figure, not a judged bound, and ignored
/// by default: the dev cluster binds fixed ports, so it runs alone, on a
/// machine where nothing else holds them:
/// `cargo test -p seqsvr --test planned_stop -- --ignored --nocapture`.
#[test]
#[ignore = "binds the dev cluster's fixed ports; run it alone"]
fn dev_cluster_ctrl_c_and_run_again() {
    for (a, what) in seqsvr::defaults::dev_ports(&seqsvr::defaults::dev_sets(1)) {
        assert!(
            std::net::TcpListener::bind(a.as_str()).is_ok(),
            "{a} ({what}) is taken: another dev cluster (or something else) holds the dev ports"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let start = || {
        std::process::Command::new(BINS.seqsvr)
            .arg("dev")
            .arg("--dir")
            .arg(dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let ctl = |args: &[&str]| {
        std::process::Command::new(BINS.seqctl)
            .arg("--dev-dir")
            .arg(dir.path())
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let until = |what: &str, args: &[&str], t: Instant| {
        while !ctl(args) {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{what}: nothing within 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        t.elapsed()
    };
    let ctrl_c = |mut child: std::process::Child| {
        kit::signal(child.id(), libc::SIGINT);
        let t = Instant::now();
        let status = child.wait().unwrap();
        (status, t.elapsed())
    };
    let t = Instant::now();
    let first = start();
    let cold = until("first start", &["next", "42"], t);
    std::thread::sleep(Duration::from_millis(500));
    let (status, stop) = ctrl_c(first);
    assert!(status.success(), "seqsvr dev exited {status} on Ctrl-C");
    let t = Instant::now();
    let again = start();
    let status_at = until("status after the restart", &["status"], t);
    let number_at = until("a number after the restart", &["next", "42"], t);
    let (status, _) = ctrl_c(again);
    println!(
        "seqsvr dev: first number {:.0} ms after a fresh start; Ctrl-C took {:.0} ms; \
         run again: status answers after {:.0} ms, first number after {:.0} ms \
         ({:.0} ms after status)",
        cold.as_secs_f64() * 1000.0,
        stop.as_secs_f64() * 1000.0,
        status_at.as_secs_f64() * 1000.0,
        number_at.as_secs_f64() * 1000.0,
        (number_at.saturating_sub(status_at)).as_secs_f64() * 1000.0
    );
    assert!(status.success(), "seqsvr dev exited {status} on Ctrl-C");
}
