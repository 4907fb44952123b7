//! The Redis-protocol door of a whole AllocSvr (in process, against the
//! fake store): real clients — the `redis` crate (RESP2 and RESP3),
//! `redis-cli` (`-2` and `-3`), `redis-benchmark`, redis-py (RESP2,
//! RESP3, `pipeline()` with its `MULTI … EXEC`) — get the numbers the
//! client plane would give (promise 1 across doors), typed errors
//! (promise 5) and the metrics.
//!
//! `redis-cli`, `redis-benchmark` and python3 with redis-py are found on
//! `PATH`; where one is missing its test prints why and passes — unless
//! `CI` is set, where it fails (`.ci/run` installs them).

use std::process::Command;
use std::time::Duration;

use redis::AsyncCommands;
use seqsvr_alloc::node::{AllocNode, RespSection};

use seqsvr_testkit::node::*;

/// An AllocSvr serving every section of the fake store, with its door
/// configured by `door`.
async fn with_door(door: RespSection) -> (FakeStore, AllocNode, String) {
    with_door_lease(door, 30_000).await
}

async fn with_door_lease(door: RespSection, lease_ms: u64) -> (FakeStore, AllocNode, String) {
    let store = FakeStore::new("a1", lease_ms);
    let addr = store.clone().serve().await;
    let (mut cfg, mut l) = node_config("a1", &addr, 50).await;
    open_door(&mut cfg, &mut l, door).await;
    let node = start_with(cfg, l).await;
    let at = node.resp_local_addr.expect("the door is on").to_string();
    (store, node, at)
}

async fn conn(at: &str, resp3: bool) -> redis::aio::MultiplexedConnection {
    let p = if resp3 { "/?protocol=resp3" } else { "" };
    redis::Client::open(format!("redis://{at}{p}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Whether `program` runs (`args` as its version check); if not, the
/// test passes with a printed reason, or fails under `CI`.
fn have(program: &str, args: &[&str]) -> bool {
    let ok = Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let why = format!("{program} {} does not run here", args.join(" "));
        assert!(
            std::env::var_os("CI").is_none(),
            "{why} (CI must have it: .ci/run installs it)"
        );
        println!("SKIPPED: {why}");
    }
    ok
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_crate_gets_the_client_planes_numbers() {
    let (_store, node, at) = with_door(RespSection::on("127.0.0.1:0")).await;
    let mut grpc = client(&node).await;
    for resp3 in [false, true] {
        let mut c = conn(&at, resp3).await;
        let a: u64 = c.incr("seq:5", 1).await.unwrap();
        let b = next(&mut grpc, 5).await.unwrap();
        assert_eq!(b, a + 1, "one uid, two doors, one sequence");
        let v: u64 = c.incr("5", 10).await.unwrap();
        assert_eq!(v, b + 10, "INCRBY 10 reserves (b, b + 10]");
        assert_eq!(next(&mut grpc, 5).await.unwrap(), v + 1);
        let g: String = c.get("seq:0005").await.unwrap();
        assert_eq!(g, (v + 1).to_string());
        assert_eq!(
            current(&mut grpc, 5).await.unwrap(),
            v + 1,
            "GET changed nothing"
        );
        let batch: Vec<u64> = redis::cmd("SEQ.BATCH")
            .arg(&["7", "7", "39"])
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(batch[1] > batch[0]);
    }
    let mut c = conn(&at, false).await;
    let e = c
        .incr::<_, _, u64>("seq:40", 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("OUT_OF_RANGE"), "{e}");
    let e = c
        .incr::<_, _, u64>("seq:1", 101)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("at most 100"), "the cap is the step here: {e}");
    let e = redis::cmd("DECR")
        .arg("seq:1")
        .query_async::<u64>(&mut c)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("never go down"), "{e}");
    let m = node.shared.render_metrics();
    for want in [
        "seqsvr_resp_commands_total{alloc=\"a1\",command=\"incrby\",set=\"0\"}",
        "seqsvr_resp_errors_total{alloc=\"a1\",kind=\"out_of_range\",set=\"0\"} 1",
        "seqsvr_resp_errors_total{alloc=\"a1\",kind=\"refused\",set=\"0\"} 1",
        "seqsvr_resp_connections{alloc=\"a1\",set=\"0\"}",
    ] {
        assert!(m.contains(want), "{want} not in\n{m}");
    }
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_is_a_retryable_error_through_the_door() {
    let (store, node, at) = with_door_lease(RespSection::on("127.0.0.1:0"), 300).await;
    let mut c = conn(&at, true).await;
    let _: u64 = c.incr("seq:1", 1).await.unwrap();
    store.st().renew_down = true;
    let mut lapsed = String::new();
    for _ in 0..500 {
        match c.incr::<_, _, u64>("seq:1", 1).await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => {
                lapsed = e.to_string();
                break;
            }
        }
    }
    assert!(
        // TRYAGAIN, which the redis crate names TryAgain.
        lapsed.contains("TryAgain") && lapsed.contains("LEASE_EXPIRED"),
        "{lapsed:?}"
    );
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_with_user_and_password() {
    let mut door = RespSection::on("127.0.0.1:0");
    door.user = Some("app".into());
    door.password = Some("s3cret".into());
    let (_store, node, at) = with_door(door).await;
    let mut c = conn(&at, false).await;
    let e = c
        .incr::<_, _, u64>("seq:1", 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("NOAUTH"), "{e}");
    let mut ok = redis::Client::open(format!("redis://app:s3cret@{at}/?protocol=resp3"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let v: u64 = ok.incr("seq:1", 1).await.unwrap();
    assert!(v > 0);
    let bad = redis::Client::open(format!("redis://app:nope@{at}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await;
    let bad = bad.unwrap_err().to_string();
    // WRONGPASS, which the redis crate reports as AuthenticationFailed.
    assert!(bad.contains("AuthenticationFailed"), "{bad}");
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_in_resp2_and_resp3() {
    if !have("redis-cli", &["--version"]) {
        return;
    }
    let (_store, node, at) = with_door(RespSection::on("127.0.0.1:0")).await;
    let port = at.rsplit_once(':').unwrap().1.to_string();
    let cli = |args: &[&str]| {
        let mut all = vec!["-h", "127.0.0.1", "-p", &port];
        all.extend_from_slice(args);
        run("redis-cli", &all)
    };
    let a: u64 = cli(&["INCR", "seq:3"]).trim().parse().unwrap();
    let b: u64 = cli(&["-3", "INCR", "seq:3"]).trim().parse().unwrap();
    assert!(b > a);
    assert_eq!(cli(&["-3", "GET", "3"]).trim(), b.to_string());
    let hello = cli(&["-3", "HELLO", "3"]);
    assert!(hello.contains("proto") && hello.contains('3'), "{hello}");
    assert_eq!(cli(&["PING"]).trim(), "PONG");
    let refused = cli(&["DECR", "seq:3"]);
    assert!(refused.contains("never go down"), "{refused}");
    let info = cli(&["INFO", "server"]);
    assert!(info.contains("redis_version:"), "{info}");
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_benchmark_incr_and_ping() {
    if !have("redis-benchmark", &["--version"]) {
        return;
    }
    // redis-benchmark's INCR key is `counter:__rand_int__`: this door maps
    // the `counter:` family to uids too.
    let mut door = RespSection::on("127.0.0.1:0");
    door.key_prefixes = vec!["seq:".into(), "counter:".into()];
    let (_store, node, at) = with_door(door).await;
    let port = at.rsplit_once(':').unwrap().1.to_string();
    let before = node.shared.metrics.numbers.get();
    for extra in [&["-P", "16"][..], &[][..]] {
        let mut args = vec![
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "incr,ping",
            "-n",
            "2000",
            "-r",
            "40",
            "-q",
            "-c",
            "4",
        ];
        args.extend_from_slice(extra);
        let out = run("redis-benchmark", &args);
        assert!(out.contains("INCR") && out.contains("PING_INLINE"), "{out}");
    }
    let args = [
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-n",
        "2000",
        "-r",
        "40",
        "-q",
        "-P",
        "16",
        "INCR",
        "seq:__rand_int__",
    ];
    run("redis-benchmark", &args);
    let handed = node.shared.metrics.numbers.get() - before;
    assert_eq!(handed, 6000, "every INCR got a number");
    let m = node.shared.render_metrics();
    assert!(!m.contains("seqsvr_resp_errors_total"), "errors:\n{m}");
    node.shutdown();
}

const PY: &str = r#"
import sys, redis
port = int(sys.argv[1])
for proto in (2, 3):
    r = redis.Redis(host="127.0.0.1", port=port, protocol=proto)
    a = r.incr("seq:9")
    b = r.incrby("seq:9", 5)
    assert b == a + 5, (a, b)
    assert int(r.get("9")) == b
    p = r.pipeline()  # MULTI ... EXEC by default
    p.incr("seq:9"); p.incr("seq:9"); p.get("seq:9")
    x, y, g = p.execute()
    assert b < x < y and int(g) == y, (b, x, y, g)
    q = r.pipeline(transaction=False)
    for _ in range(100):
        q.incr("seq:10")
    got = q.execute()
    assert got == sorted(got) and len(set(got)) == 100
    try:
        r.decr("seq:9")
        raise SystemExit("DECR was served")
    except redis.ResponseError as e:
        assert "never go down" in str(e), e
    print("ok", proto, y)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_in_resp2_and_resp3_with_its_pipelines() {
    if !have("python3", &["-c", "import redis"]) {
        return;
    }
    let (_store, node, at) = with_door(RespSection::on("127.0.0.1:0")).await;
    let port = at.rsplit_once(':').unwrap().1.to_string();
    let out = tokio::task::spawn_blocking(move || run("python3", &["-c", PY, &port]))
        .await
        .unwrap();
    assert!(out.contains("ok 2") && out.contains("ok 3"), "{out}");
    node.shutdown();
}

/// A pipeline's `INCR`s go to the allocator as one batch, but each is
/// answered as if sent alone: a uid refused in the middle gets its own
/// error, and the uids before and after it their numbers — the batch's
/// numbers before the refusal are neither lost nor blamed on the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_incr_in_a_pipeline_is_its_own_error_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_store, node, at) = with_door(RespSection::on("127.0.0.1:0")).await;
    let mut grpc = client(&node).await;
    let b5 = current(&mut grpc, 5).await.unwrap();
    let b6 = current(&mut grpc, 6).await.unwrap();
    let mut s = tokio::net::TcpStream::connect(&at).await.unwrap();
    let mut req = Vec::new();
    for key in ["seq:5", "seq:40", "seq:6", "seq:5"] {
        req.extend(format!("*2\r\n$4\r\nINCR\r\n${}\r\n{key}\r\n", key.len()).into_bytes());
    }
    s.write_all(&req).await.unwrap();
    let mut got = Vec::new();
    while got.iter().filter(|&&b| b == b'\n').count() < 4 {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk))
            .await
            .expect("the replies in time")
            .unwrap();
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8(got).unwrap();
    let lines: Vec<&str> = text.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[0], format!(":{}", b5 + 1), "{text}");
    assert!(lines[1].contains("OUT_OF_RANGE"), "{text}");
    assert_eq!(lines[2], format!(":{}", b6 + 1), "{text}");
    assert_eq!(lines[3], format!(":{}", b5 + 2), "{text}");
    node.shutdown();
}
