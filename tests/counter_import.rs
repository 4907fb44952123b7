//! `seqctl counter import` end to end (`docs/counters.md`, Moving over):
//! a live `redis-server` of this test's own (on a free port, no
//! persistence) read with `SCAN` + `MGET` into floors, applied to the
//! in-memory sink twice (the second run changes nothing); and the
//! `seqctl` binary printing a Leaf dump's plan with `--dry-run` and
//! refusing, with the reason, to set floors it cannot set.
//!
//! Without `redis-server` the Redis test prints why and passes, unless
//! `CI` is set, where it fails (`.ci/run` installs it).

use std::io::Write;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use seqsvr::ctl::import::{self, MemSink};
use seqsvr_resp::keys::KeyMap;
use seqsvr_testkit::Bins;

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        let v = v.trim();
        !v.is_empty() && !v.eq_ignore_ascii_case("false") && v != "0"
    })
}

/// A `redis-server` of the test's own, stopped when dropped.
struct RedisServer {
    child: Child,
    url: String,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `redis-server` on a free port; `None` (said why) when it is not
/// installed and `CI` is not set.
fn redis_server(test: &str) -> Option<RedisServer> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let spawned = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let why = format!("redis-server cannot be started ({e}); apt-get install redis-server");
            assert!(
                !is_ci(),
                "{test} cannot run in CI: {why} (.ci/run installs it)"
            );
            let _ = writeln!(std::io::stderr(), "{test} SKIPPED: {why}");
            return None;
        }
    };
    let server = RedisServer {
        child,
        url: format!("redis://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "redis-server did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(server)
}

#[tokio::test]
async fn a_live_redis_scanned_into_floors_twice() {
    let Some(server) = redis_server("a_live_redis_scanned_into_floors_twice") else {
        return;
    };
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    // 2,500 counters (several SCAN batches), and keys that must be refused.
    let mut pipe = redis::pipe();
    for i in 0..2500u64 {
        pipe.cmd("SET")
            .arg(format!("order:{i}"))
            .arg(i * 3 + 1)
            .ignore();
    }
    pipe.cmd("SET").arg("order:views").arg("12.5").ignore();
    pipe.cmd("SET").arg("order:neg").arg("-4").ignore();
    pipe.cmd("HSET")
        .arg("order:hash")
        .arg("f")
        .arg("1")
        .ignore();
    pipe.cmd("SET").arg("seq:42").arg("9").ignore();
    pipe.cmd("SET").arg("other:1").arg("5").ignore();
    let () = pipe.query_async(&mut con).await.unwrap();
    let incr: u64 = redis::cmd("INCRBY")
        .arg("order:7")
        .arg(1000)
        .query_async(&mut con)
        .await
        .unwrap();

    let keys = KeyMap::default();
    let plan = import::redis::plan(&server.url, "order:*", &keys)
        .await
        .unwrap();
    assert_eq!(plan.floors.len(), 2500);
    let floor = |name: &str| {
        let f = plan.floors.iter().find(|f| f.name == name.as_bytes());
        f.map(|f| f.floor)
    };
    assert_eq!(floor("order:0"), Some(1));
    assert_eq!(floor("order:7"), Some(incr));
    assert_eq!(floor("order:2499"), Some(7498));
    assert_eq!(floor("other:1"), None, "outside --match");
    let mut refused: Vec<(String, String)> = plan
        .refused
        .iter()
        .map(|r| (String::from_utf8_lossy(&r.name).into(), r.reason.clone()))
        .collect();
    refused.sort();
    assert_eq!(
        refused,
        [
            (
                "order:hash".to_string(),
                "holds no string value (a hash, list, set, or expired)".to_string()
            ),
            ("order:neg".into(), "value \"-4\" is negative".into()),
            (
                "order:views".into(),
                "value \"12.5\" is not an integer".into()
            ),
        ]
    );
    // The door's uid keys are refused when matched.
    let uids = import::redis::plan(&server.url, "seq:*", &keys)
        .await
        .unwrap();
    assert_eq!(uids.floors.len(), 0);
    assert_eq!(
        uids.refused[0].reason,
        "the Redis door reads this key as uid 42, not a name"
    );

    let sink = MemSink::default();
    let first = import::apply(&plan, &sink).await.unwrap();
    assert_eq!(
        (first.imported, first.already_above, first.refused.len()),
        (2500, 0, 3)
    );
    // Redis moved on meanwhile; importing again raises only that one.
    let _: u64 = redis::cmd("INCR")
        .arg("order:9")
        .query_async(&mut con)
        .await
        .unwrap();
    let again = import::redis::plan(&server.url, "order:*", &keys)
        .await
        .unwrap();
    let second = import::apply(&again, &sink).await.unwrap();
    assert_eq!((second.imported, second.already_above), (1, 2499));
    assert_eq!(sink.counters.lock().unwrap()[&b"order:9".to_vec()], 29);

    // A Redis that is not there: a clear error.
    let gone = format!("redis://127.0.0.1:{}", free_port());
    let e = import::redis::plan(&gone, "*", &keys).await.unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("redis {gone}: connecting")),
        "{e}"
    );
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn seqctl(args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new(BINS.seqctl)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // seqctl may exit before reading its input (a refusal): a broken
    // pipe here is its answer, read below.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn seqctl_prints_a_leaf_plan_and_needs_a_cluster_to_set_floors() {
    let dump =
        "INSERT INTO `leaf_alloc` VALUES ('leaf-segment-test',1,2000,'t','2019-08-29 10:37:08'),\
                ('order',120001,2000,'o',NULL),('bad',NULL,1,'',NULL);\n";
    let (ok, out, err) = seqctl(&["counter", "import", "leaf", "-", "--dry-run"], dump);
    assert!(ok, "{err}");
    let want = "would set 2 floors; 1 refused\n";
    assert!(out.starts_with(want), "{out}");
    assert!(out.contains("order") && out.contains("120001"), "{out}");
    assert!(
        out.contains("bad") && out.contains("max_id is NULL"),
        "{out}"
    );

    let tsv = "biz_type\tbegin_id\tmax_id\tstep\tdelta\tremainder\ntest\t1\t300001\t100000\t1\t0\n";
    let (ok, out, err) = seqctl(
        &["counter", "import", "--dry-run", "--json", "tinyid", "-"],
        tsv,
    );
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["floors"][0]["name"], "test");
    assert_eq!(v["floors"][0]["floor"], 300001);

    // Setting floors needs the cluster: none listens here.
    let (ok, _, _) = seqctl(&["counter", "import", "leaf", "-"], dump);
    assert!(!ok);
    // A dump that is not one: the line at fault.
    let (ok, _, err) = seqctl(
        &[
            "counter",
            "import",
            "leaf",
            "-",
            "--dry-run",
            "--format",
            "sql",
        ],
        "INSERT INTO leaf_alloc VALUES ('a',1",
    );
    assert!(!ok);
    assert!(err.contains("-: line 1: a row is not closed"), "{err}");
}
