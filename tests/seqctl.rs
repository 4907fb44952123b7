//! The operator's command lines against real processes: `seqctl health`
//! on store replicas and AllocSvrs (alive, ready, paused, cut off, dead),
//! `seqctl drill` judging its own evidence (no cluster, a fault that
//! cannot happen, too few calls, no numbers: each a non-zero exit with
//! the reason), output into a closed pipe, and `SEQSVR_CONFIG` standing
//! for `--config`.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use seqsvr_core::SetSpec;
use seqsvr_testkit::SetCluster;
use seqsvr_testkit::{self as kit, Bins};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

fn seqctl_bin() -> &'static str {
    BINS.seqctl
}

/// `seqctl health <addr> [flags]`: exit code and the line printed.
fn health(addr: &str, flags: &[&str]) -> (i32, String) {
    let out = Command::new(seqctl_bin())
        .arg("health")
        .arg(addr)
        .args(flags)
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let err = String::from_utf8_lossy(&out.stderr);
    println!(
        "health {addr} {flags:?}: {:?} {line} {err}",
        out.status.code()
    );
    (out.status.code().unwrap_or(-1), line)
}

/// Polls `health` until its exit code is `want` (or fails after `within`).
fn health_until(addr: &str, flags: &[&str], want: i32, within: Duration) -> String {
    let start = Instant::now();
    loop {
        let (code, line) = health(addr, flags);
        if code == want {
            return line;
        }
        assert!(
            start.elapsed() < within,
            "{addr} {flags:?}: exit {code}, not {want}, after {within:?}: {line}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn health_tells_alive_ready_and_unreachable_apart() {
    let mut cluster = SetCluster::start(BINS, SetSpec::new(0, 0..1_000_000), 2);
    let store = cluster.store.client_addrs.clone();
    let alloc = cluster.alloc_addrs.clone();
    // Ready: every replica knows a leader and has its set; every AllocSvr
    // holds a lease.
    for a in &store {
        let line = health_until(a, &["--ready"], 0, Duration::from_secs(30));
        assert!(
            line.starts_with("store ") && line.contains("ready —"),
            "{line}"
        );
    }
    for a in &alloc {
        let line = health_until(a, &["--ready"], 0, Duration::from_secs(30));
        assert!(line.starts_with("alloc alloc-"), "{line}");
        assert!(line.contains("ms left"), "{line}");
    }

    // Two replicas paused: the third loses its leader and the AllocSvrs
    // their leases. Alive all (exit 0) but not ready (exit 1); the paused
    // ones do not answer (exit 2).
    let rt = tokio::runtime::Runtime::new().unwrap();
    let leader = rt.block_on(cluster.store.wait_ready(Duration::from_secs(10)));
    let other = (leader + 1) % 3;
    let left = (leader + 2) % 3;
    for i in [leader, other] {
        kit::signal(cluster.store.procs[i].pid().unwrap(), libc::SIGSTOP);
    }
    let line = health_until(&store[left], &["--ready"], 1, Duration::from_secs(10));
    assert!(line.contains("not ready: no leader known"), "{line}");
    assert_eq!(health(&store[left], &[]).0, 0);
    let line = health_until(&alloc[0], &["--ready"], 1, Duration::from_secs(10));
    assert!(line.contains("not ready: no valid lease"), "{line}");
    assert_eq!(health(&alloc[0], &[]).0, 0);
    let started = Instant::now();
    let (code, line) = health(&store[leader], &["--timeout", "500ms"]);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("no answer within 500ms"), "{line}");
    assert!(started.elapsed() < Duration::from_secs(3));
    for i in [leader, other] {
        kit::signal(cluster.store.procs[i].pid().unwrap(), libc::SIGCONT);
    }
    health_until(&store[left], &["--ready"], 0, Duration::from_secs(15));
    health_until(&alloc[0], &["--ready"], 0, Duration::from_secs(15));

    // A dead process, and a bad address.
    cluster.allocs[1].kill9();
    let (code, line) = health(&alloc[1], &[]);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("unreachable"), "{line}");
    let (code, _) = health("ftp://nowhere:1", &[]);
    assert_eq!(code, 2);
}

/// `seqctl --store STORE --alloc SEEDS drill FLAGS`, its dev dir an empty
/// one: exit code, standard output, standard error.
fn drill(store: &str, seeds: &str, flags: &[&str]) -> (Option<i32>, String, String) {
    let dev = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = Command::new(seqctl_bin())
        .args(["--store", store, "--alloc", seeds, "--dev-dir"])
        .arg(dev.path())
        .arg("drill")
        .args(flags)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    println!(
        "drill {flags:?}: {:?} after {:?}\n{stdout}{stderr}",
        out.status.code(),
        started.elapsed()
    );
    (out.status.code(), stdout, stderr)
}

#[test]
fn a_drill_without_evidence_fails_and_says_why() {
    // Against nothing: no store to read the set from.
    let nowhere = format!("127.0.0.1:{}", kit::free_port());
    let (code, _, err) = drill(&nowhere, &nowhere, &["--duration", "1s"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("seqctl: error: reading the route table"),
        "{err}"
    );

    let mut cluster = SetCluster::start(BINS, SetSpec::new(0, 0..1_000_000), 2);
    let store = cluster.store.client_addrs.join(",");
    let seeds = cluster.alloc_addrs.join(",");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = cluster.client().await;
        cluster.wait_serving(&c).await;
    });
    let short = ["--duration", "1500ms", "--uids", "0..2000", "--rate", "400"];
    let with = |more: &[&'static str]| [&short[..], more].concat();

    // A drill that shows what it should passes.
    let (code, out, err) = drill(&store, &seeds, &with(&["--fault", "500ms:exec:true"]));
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("verdict      PASSED"), "{out}");

    // A fault that cannot happen (no such process), and one whose command
    // fails: the drill did not test what it was asked to.
    let (code, out, err) = drill(
        &store,
        &seeds,
        &with(&[
            "--fault",
            "300ms:kill:alloc-9",
            "--fault",
            "600ms:exec:echo no such container >&2; exit 1",
        ]),
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("verdict      FAILED"), "{out}");
    for why in [
        "fault at 0.3 s Kill(\"alloc-9\") did not happen: FAILED: reading ",
        "alloc-9.pid: No such file or directory",
        "did not happen: FAILED: `echo no such container >&2; exit 1` exited with exit status: 1: no such container",
    ] {
        assert!(err.contains(why), "{why:?} not in {err}");
    }

    // Fewer calls than stated.
    let (code, _, err) = drill(&store, &seeds, &with(&["--min-calls", "1000000"]));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("calls made, fewer than the minimum of 1000000"),
        "{err}"
    );

    // A fault after the end is refused before anything runs.
    let (code, _, err) = drill(&store, &seeds, &with(&["--fault", "5s:exec:true"]));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is not before the drill's end (1.5s)"),
        "{err}"
    );

    // No AllocSvr left: every call fails (the store seeds the client).
    for a in &mut cluster.allocs {
        a.kill9();
    }
    let (code, out, err) = drill(&store, &store, &with(&["--deadline-ms", "200"]));
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("no numbers: "), "{err}");
    assert!(err.contains("nothing was tested"), "{err}");
}

/// Runs `exe args` with standard output a pipe nobody reads: its read end
/// is closed before the child starts, so the first line written fails with
/// EPIPE (the child ignores SIGPIPE, as every Rust program does).
fn into_closed_pipe(exe: &str, args: &[&str]) -> Output {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills two new descriptors, each owned exactly once
    // below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Command::new(exe)
        .args(args)
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // `seqctl status | head -1`: status prints before it learns the store
    // is down; nobody reads, so the command ends there, successfully.
    // Something listens there (connections wait in its backlog, never
    // answered), so seqctl gets past its "nothing listens" check.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let store = silent.local_addr().unwrap().to_string();
    let out = into_closed_pipe(seqctl_bin(), &["--store", &store, "status"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
    // `seqctl health … | true` and `seqsvr certs … | head -1` alike.
    let out = into_closed_pipe(seqctl_bin(), &["health", &store]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let out = into_closed_pipe(
        BINS.seqsvr,
        &[
            "certs",
            "--dir",
            &dir.path().display().to_string(),
            "--operator",
            "ops",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(dir.path().join("ops.pem").exists());
}

#[test]
fn seqsvr_config_env_stands_for_the_flag() {
    let run = |env: Option<&str>, args: &[&str]| {
        let mut c = Command::new(BINS.seqsvr);
        c.args(args).env_remove("SEQSVR_CONFIG");
        if let Some(v) = env {
            c.env("SEQSVR_CONFIG", v);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    // The file the environment names is the one read (it is not there).
    for kind in ["store", "alloc"] {
        let (code, err) = run(Some("/nonexistent/from-env.toml"), &[kind]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("/nonexistent/from-env.toml"), "{err}");
        // The flag wins over the environment.
        let (_, err) = run(
            Some("/nonexistent/from-env.toml"),
            &[kind, "--config", "/nonexistent/from-flag.toml"],
        );
        assert!(err.contains("/nonexistent/from-flag.toml"), "{err}");
        assert!(!err.contains("from-env"), "{err}");
        // Neither: a usage error.
        let (code, err) = run(None, &[kind]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("--config"), "{err}");
    }
}

/// `seqctl ARGS` with `env` set and the caller's SEQCTL_* variables
/// cleared: exit code, standard output, standard error, how long it took.
fn seqctl_env(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String, Duration) {
    let mut cmd = Command::new(seqctl_bin());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SEQCTL_")) {
        cmd.env_remove(k);
    }
    let dev = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = cmd
        .args(args)
        .envs(env.iter().copied())
        .env("SEQCTL_DEV_DIR", dev.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = started.elapsed();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    println!(
        "seqctl {args:?} {env:?}: {:?} after {took:?}\n{o}{e}",
        out.status.code()
    );
    (out.status.code(), o, e, took)
}

/// With nothing running, `status` (and every command that reads the store
/// or calls the AllocSvrs) says "nothing listens at …" within a second,
/// naming the addresses and where they came from: the dev defaults at a
/// port base, the environment, a profile.
#[test]
fn nothing_listening_is_said_within_a_second() {
    // A base whose dev store ports (base + 11 to 13) are free: ephemeral
    // ones, apart from the ports the other tests' children bind.
    let free = loop {
        let p = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if (1..=2).all(|i| std::net::TcpListener::bind(("127.0.0.1", p + i)).is_ok()) {
            break p;
        }
    };
    let base = (free - 11).to_string();
    let (code, _, err, took) = seqctl_env(&["--port-base", &base, "status"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(
        err.starts_with(&format!(
            "seqctl: error: nothing listens at 127.0.0.1:{free}, "
        )),
        "{err}"
    );
    assert!(err.contains("the dev cluster's defaults"), "{err}");
    assert!(!err.contains("leader"), "{err}");
    let addr = format!("127.0.0.1:{free}");
    let (code, _, err, took) = seqctl_env(&["sections", "1"], &[("SEQCTL_STORE", &addr)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(
        err.contains(&format!(
            "nothing listens at {addr} (the store replicas' client planes, from SEQCTL_STORE)"
        )),
        "{err}"
    );
    // From a profile; the flag beats it.
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("profiles.toml");
    std::fs::write(&profiles, format!("[far]\nalloc = [\"{addr}\"]\n")).unwrap();
    let p = profiles.to_string_lossy().into_owned();
    let env = [("SEQCTL_PROFILES", p.as_str()), ("SEQCTL_PROFILE", "far")];
    let (code, _, err, took) = seqctl_env(&["next", "42"], &env);
    assert_eq!(code, Some(1), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(
        err.contains(&format!(
            "nothing listens at {addr} (the AllocSvrs' client planes, from profile far)"
        )),
        "{err}"
    );
    let other = format!("127.0.0.1:{}", kit::free_port());
    let (_, _, err, _) = seqctl_env(&["--alloc", &other, "current", "42"], &env);
    assert!(
        err.contains(&format!(
            "nothing listens at {other} (the AllocSvrs' client planes, from --alloc)"
        )),
        "{err}"
    );
    let (code, _, err, _) = seqctl_env(&["--profile", "near", "next", "1"], &env);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no profile \"near\""), "{err}");
}

/// `seqsvr dev` with one of its ports taken exits at once, non-zero,
/// naming the port, what it was for and `--port-base`, having started
/// nothing. The taken port is an ephemeral one (above 32767), far from the
/// dev cluster's default ports (7101–7254), so a real dev cluster on this
/// machine is never disturbed.
#[test]
fn dev_with_a_taken_port_fails_fast_naming_it() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    assert!(port > 7254 + 11);
    // store-1's client plane is base + 11.
    let base = (port - 11).to_string();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = Command::new(BINS.seqsvr)
        .args(["dev", "--port-base", &base, "--dir"])
        .arg(dir.path().join("dev"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    println!("{:?} after {took:?}: {err}", out.status.code());
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(
        err.contains(&format!("port {port} (store-1's client plane) is in use")),
        "{err}"
    );
    assert!(err.contains("--port-base N"), "{err}");
    assert!(!dir.path().join("dev").exists(), "something was started");
    let out = Command::new(BINS.seqsvr)
        .args(["dev", "--port-base", "65500"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("between 1024 and 65379"));
}

/// A dev child that cannot run (store-1's data directory is a file) keeps
/// dying; `seqsvr dev` says so in the terminal, with its name, exit status
/// and the end of its log, instead of leaving the reason in a log file.
#[test]
fn dev_reports_a_child_that_keeps_dying() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("store-1"), "not a directory").unwrap();
    // A base whose whole span is free, below the ephemeral ports.
    let base = loop {
        let b = kit::free_port();
        let span = (b + 1..=b + seqsvr::defaults::DEV_PORT_SPAN)
            .all(|p| p < 32_000 && std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        if span {
            break b;
        }
    };
    let mut dev = Command::new(BINS.seqsvr)
        .args([
            "dev",
            "--restart-after",
            "1",
            "--port-base",
            &base.to_string(),
            "--dir",
        ])
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(dev.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(l) => seen.push(l),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
        if seen.iter().any(|l| l.contains("| ")) {
            std::thread::sleep(Duration::from_millis(300));
            seen.extend(rx.try_iter());
            break;
        }
    }
    kit::signal(dev.id(), libc::SIGTERM);
    let _ = dev.wait();
    let text = seen.join("\n");
    println!("{text}");
    assert!(
        text.contains("store-1 keeps dying: 3 exits within 60 s, the last exit status: 1"),
        "{text}"
    );
    assert!(text.contains("store-1.log:"), "{text}");
    assert!(text.contains("\n  | "), "no log lines shown: {text}");
}

/// Every command that prints data takes `--json`.
#[test]
fn every_command_that_prints_data_takes_json() {
    let data: [&[&str]; 10] = [
        &["next"],
        &["next-batch"],
        &["current"],
        &["status"],
        &["sections"],
        &["health"],
        &["drill"],
        &["set", "status"],
        &["store", "lease"],
        &["store", "snapshot"],
    ];
    for cmd in data {
        let out = Command::new(seqctl_bin())
            .args(cmd)
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains("--json"),
            "seqctl {cmd:?} has no --json:\n{help}"
        );
    }
}
