//! The Redis peer: our own `redis-server`, and `redis-benchmark` runs
//! against it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::report::Figures;
use crate::setup::{cpu_of, pct, rusage};
use crate::{UIDS, WARMUP};
use seqsvr_testkit::{self as kit, free_port};

/// A `redis-server` of our own, stopped on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        kit::signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends one inline command and returns the raw reply.
pub fn redis_cmd(port: u16, cmd: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(format!("{cmd}\r\n").as_bytes())?;
    let mut buf = vec![0u8; 64 * 1024];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

pub fn start_redis() -> RedisServer {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("redis.log")).unwrap();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir.path().display().to_string(),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--daemonize",
            "no",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("redis-server not found: install it (deploy/bench/alloc_vs_redis.sh does)");
    let server = RedisServer {
        child,
        port,
        _dir: dir,
    };
    let start = Instant::now();
    while !redis_cmd(port, "PING").is_ok_and(|r| r.starts_with("+PONG")) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "redis-server did not answer PING"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// One redis-benchmark run: its figures, wall time, and the CPU seconds
/// of redis-benchmark and of redis-server.
struct RedisRun {
    f: Figures,
    wall: f64,
    cpu_client: f64,
    cpu_server: f64,
}

/// Runs `redis-benchmark -t incr -r 1000000 -n n -c clients -P pipeline`
/// and parses its default (non-quiet) report: the "throughput summary",
/// the "latency summary" (p50, p99, max) and, for p999, the first line of
/// the percentile distribution at or above 99.9 %.
fn redis_bench(server: &mut RedisServer, clients: usize, pipeline: usize, n: u64) -> RedisRun {
    let cpu_server0 = cpu_of(server.child.id());
    let cpu_children0 = rusage(libc::RUSAGE_CHILDREN);
    let start = Instant::now();
    // Blocks the (current-thread) runtime: nothing of ours runs meanwhile.
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.port.to_string(),
            "-t",
            "incr",
            "-r",
            &UIDS.to_string(),
            "-n",
            &n.to_string(),
            "-c",
            &clients.to_string(),
            "-P",
            &pipeline.to_string(),
        ])
        .stdin(Stdio::null())
        .output()
        .expect("redis-benchmark not found: install redis-tools");
    let wall = start.elapsed().as_secs_f64();
    let cpu_client = rusage(libc::RUSAGE_CHILDREN) - cpu_children0;
    let cpu_server = cpu_of(server.child.id()) - cpu_server0;
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
    assert!(
        out.status.success(),
        "redis-benchmark failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("\"appendonly\": yes"),
        "redis-server is not running with appendonly: {text}"
    );
    let parse_err = || format!("cannot parse redis-benchmark output:\n{text}");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let rps: f64 = lines
        .iter()
        .find_map(|l| l.strip_prefix("throughput summary:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{}", parse_err()));
    // "avg min p50 p95 p99 max" header, then the values (ms).
    let summary: Vec<f64> = lines
        .iter()
        .position(|l| l.starts_with("avg") && l.contains("p99"))
        .and_then(|i| lines.get(i + 1))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(summary.len() >= 6, "{}", parse_err());
    // "99.902% <= 7.159 milliseconds (cumulative count 19984)"
    let p999 = lines
        .iter()
        .skip_while(|l| !l.starts_with("Latency by percentile distribution"))
        .filter_map(|l| {
            let (p, rest) = l.split_once("% <= ")?;
            let p: f64 = p.parse().ok()?;
            let ms: f64 = rest.split_whitespace().next()?.parse().ok()?;
            Some((p, ms))
        })
        .find(|&(p, _)| p >= 99.9)
        .map(|(_, ms)| ms)
        .unwrap_or(f64::NAN);
    RedisRun {
        f: Figures {
            label: String::new(),
            cpu: String::new(),
            calls_per_s: rps / pipeline as f64,
            server_us_per_call: cpu_server * 1e6 / (rps / pipeline as f64 * wall).max(1.0),
            detail: String::new(),
            seqs_per_s: rps,
            p50: summary[2] * 1000.0,
            p99: summary[4] * 1000.0,
            p999: p999 * 1000.0,
            max: summary[5] * 1000.0,
        },
        wall,
        cpu_client,
        cpu_server,
    }
}

/// A warm-up of about 1 s (sized by a short probe), then a run of about
/// `secs` (sized by the warm-up's rate): redis-benchmark has no duration
/// option.
pub fn redis_shape(
    server: &mut RedisServer,
    clients: usize,
    pipeline: usize,
    secs: u64,
) -> Figures {
    let probe = redis_bench(server, clients, pipeline, 10_000 * pipeline as u64);
    let warm = redis_bench(
        server,
        clients,
        pipeline,
        (probe.f.seqs_per_s * WARMUP.as_secs_f64()) as u64,
    );
    let n = ((warm.f.seqs_per_s * secs as f64) as u64).max(10_000);
    let mut r = redis_bench(server, clients, pipeline, n);
    r.f.label = if pipeline > 1 {
        format!("redis  INCR -c {clients} -P {pipeline}")
    } else {
        format!("redis  INCR -c {clients}")
    };
    r.f.cpu = format!(
        "redis-benchmark {:.0} redis-server {:.0}  (n={n}, {:.1} s)",
        pct(r.cpu_client, r.wall),
        pct(r.cpu_server, r.wall),
        r.wall
    );
    r.f.print();
    r.f
}
