//! The door over TCP with a real client (the `redis` crate, RESP2 and
//! RESP3) and with raw bytes: handshakes, counters, transactions, errors
//! as Redis words them, coalesced pipelines, and adversarial input that
//! must leave every other connection served.

mod common;

use std::time::Duration;

use common::*;
use redis::AsyncCommands;
use seqsvr_resp::{Credentials, DoorConfig};

const T: Duration = Duration::from_secs(5);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test]
async fn counters_over_both_protocols() {
    let (addr, _, _) = door(DoorConfig::default()).await;
    for resp3 in [false, true] {
        let mut c = client(addr, resp3).await;
        let key = if resp3 { "seq:000000000042" } else { "42" };
        let a: i64 = c.incr(key, 1).await.unwrap();
        let b: i64 = redis::cmd("INCR")
            .arg("seq:42")
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(b > a);
        let v: i64 = c.incr(key, 10).await.unwrap();
        assert_eq!(v, b + 10, "INCRBY 10 reserves (b, b+10]");
        let now: i64 = c.incr(key, 0).await.unwrap();
        assert_eq!(now, v, "INCRBY 0 answers the current value");
        let g: String = c.get("seq:42").await.unwrap();
        assert_eq!(g, v.to_string());
        let m: Vec<String> = c.mget(&["42", "seq:7"]).await.unwrap();
        assert_eq!(m, vec![v.to_string(), "0".to_string()]);
        let batch: Vec<i64> = redis::cmd("SEQ.BATCH")
            .arg(&["5", "5", "6"])
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(batch[1] > batch[0] && batch[2] >= 1);
    }
}

#[tokio::test]
async fn errors_say_why_and_change_nothing() {
    let (addr, backend, _) = door(DoorConfig::default()).await;
    let mut c = client(addr, false).await;
    let err = |r: redis::RedisResult<redis::Value>| r.unwrap_err().to_string();
    let e = err(redis::cmd("DECR").arg("seq:1").query_async(&mut c).await);
    assert!(
        e.contains("DECR is refused") && e.contains("never go down"),
        "{e}"
    );
    let e = err(redis::cmd("SET")
        .arg("seq:1")
        .arg(5)
        .query_async(&mut c)
        .await);
    assert!(e.contains("never set"), "{e}");
    let e = err(redis::cmd("EXPIRE")
        .arg("seq:1")
        .arg(5)
        .query_async(&mut c)
        .await);
    assert!(e.contains("never expire"), "{e}");
    let e = err(redis::cmd("INCR")
        .arg(vec![b'k'; 257])
        .query_async(&mut c)
        .await);
    assert!(
        e.contains(
            "a decimal uid (42) or seq:<uid> (seq:42), or a name: a name is 1..=256 bytes, not 257"
        ),
        "{e}"
    );
    let e = err(redis::cmd("INCRBY")
        .arg("1")
        .arg(-1)
        .query_async(&mut c)
        .await);
    assert!(e.contains("never go down"), "{e}");
    let e = err(redis::cmd("INCRBY")
        .arg("1")
        .arg(1001)
        .query_async(&mut c)
        .await);
    assert!(e.contains("at most 1000"), "{e}");
    let e = err(redis::cmd("INCRBY")
        .arg("1")
        .arg("x")
        .query_async(&mut c)
        .await);
    assert!(e.contains("not an integer"), "{e}");
    let e = err(redis::cmd("FOO").arg("a").query_async(&mut c).await);
    assert!(
        e.contains("unknown command 'FOO', with args beginning with: 'a'"),
        "{e}"
    );
    let e = err(redis::cmd("INCR").query_async(&mut c).await);
    assert!(
        e.contains("wrong number of arguments for 'incr' command"),
        "{e}"
    );
    let e = err(redis::cmd("INCR").arg(LIMIT).query_async(&mut c).await);
    assert!(e.contains("OUT_OF_RANGE"), "{e}");
    let e = err(redis::cmd("INCR").arg(NOT_OWNED).query_async(&mut c).await);
    assert!(e.contains("TryAgain") && e.contains("NOT_OWNER"), "{e}");
    assert!(
        backend.cur.lock().unwrap().is_empty(),
        "a refused command changed a counter"
    );
}

#[tokio::test]
async fn a_pipeline_is_answered_in_order_and_its_incrs_are_one_batch() {
    let (addr, backend, _) = door(DoorConfig::default()).await;
    let mut c = client(addr, false).await;
    let mut p = redis::pipe();
    for i in 0..100u64 {
        p.cmd("INCR").arg(100 + i % 10);
    }
    p.cmd("INCR")
        .arg(NOT_OWNED)
        .cmd("GET")
        .arg(103)
        .ignore_errors();
    let got: Vec<redis::Value> = p.query_async(&mut c).await.unwrap();
    for (i, v) in got[..100].iter().enumerate() {
        assert_eq!(
            *v,
            redis::Value::Int((i / 10 + 1) as i64),
            "reply {i} out of order"
        );
    }
    assert!(
        matches!(&got[100], redis::Value::ServerError(e) if e.code() == "TRYAGAIN"),
        "{:?}",
        got[100]
    );
    assert_eq!(got[101], redis::Value::BulkString(b"10".to_vec()));
    let batches = backend.batches.lock().unwrap().clone();
    assert!(
        batches.contains(&101),
        "the 101 INCRs were not one batch: {batches:?}"
    );
}

/// A pipeline's consecutive `INCR`s of one name are one reservation of
/// as many numbers, answered in request order; a run ends at any other
/// command (another name, a uid); a refused reservation is asked again one
/// `INCR` at a time, each answered on its own.
#[tokio::test]
async fn a_pipelines_incrs_of_one_name_are_one_reservation() {
    let (addr, backend, _) = door(DoorConfig::default()).await;
    let mut c = client(addr, false).await;
    let mut p = redis::pipe();
    for _ in 0..20 {
        p.cmd("INCR").arg("name:hot");
    }
    p.cmd("INCR").arg("name:other");
    p.cmd("INCR").arg(7);
    for _ in 0..3 {
        p.cmd("INCR").arg("name:hot");
    }
    for _ in 0..4 {
        p.cmd("INCR").arg(NAME_ONE_AT_A_TIME);
    }
    let got: Vec<i64> = p.query_async(&mut c).await.unwrap();
    let want: Vec<i64> = (1..=20).chain([1, 1]).chain(21..=23).chain(1..=4).collect();
    assert_eq!(got, want);
    let calls = backend.name_calls.lock().unwrap().clone();
    let hot = |n| (b"name:hot".to_vec(), n);
    let slow = |n| (NAME_ONE_AT_A_TIME.to_vec(), n);
    assert_eq!(
        calls,
        vec![
            hot(20),
            (b"name:other".to_vec(), 1),
            hot(3),
            slow(4),
            slow(1),
            slow(1),
            slow(1),
            slow(1)
        ]
    );
}

/// A pipeline's consecutive `SEQ.ID`s of one namespace are one call for
/// all their ids, handed out in request order (each command the next of
/// them, as if it had run alone); a run ends at any other command or
/// namespace; a refused call is asked again one command at a time.
#[tokio::test]
async fn a_pipelines_seq_ids_of_one_namespace_are_one_call() {
    let (addr, backend, _) = door(DoorConfig::default()).await;
    let mut c = client(addr, false).await;
    let mut p = redis::pipe();
    for _ in 0..5 {
        p.cmd("SEQ.ID").arg("a");
    }
    p.cmd("SEQ.ID").arg("a").arg(3);
    p.cmd("SEQ.ID").arg("b");
    p.cmd("INCR").arg(7);
    p.cmd("SEQ.ID").arg("a").arg(2);
    p.cmd("SEQ.ID").arg("a");
    for _ in 0..3 {
        p.cmd("SEQ.ID").arg(NS_ONE_AT_A_TIME);
    }
    let got: Vec<redis::Value> = p.query_async(&mut c).await.unwrap();
    let int = redis::Value::Int;
    let arr = |v: &[i64]| redis::Value::Array(v.iter().map(|&i| int(i)).collect());
    let mut want: Vec<redis::Value> = (1..=5).map(int).collect();
    want.extend([arr(&[6, 7, 8]), int(1), int(1), arr(&[9, 10]), int(11)]);
    want.extend((1..=3).map(int));
    assert_eq!(got, want);
    let calls = backend.id_calls.lock().unwrap().clone();
    let call = |ns: &str, n| (ns.to_string(), n);
    assert_eq!(
        calls,
        vec![
            call("a", 8),
            call("b", 1),
            call("a", 3),
            call(NS_ONE_AT_A_TIME, 3),
            call(NS_ONE_AT_A_TIME, 1),
            call(NS_ONE_AT_A_TIME, 1),
            call(NS_ONE_AT_A_TIME, 1),
        ]
    );
}

#[tokio::test]
async fn multi_exec_runs_in_order_and_execabort_after_a_bad_command() {
    let (addr, _, _) = door(DoorConfig::default()).await;
    let mut c = client(addr, false).await;
    let (a, b, g): (i64, i64, String) = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("seq:9")
        .cmd("INCRBY")
        .arg("seq:9")
        .arg(5)
        .cmd("GET")
        .arg("9")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((a, b, g.as_str()), (1, 6, "6"));
    let raw_reply = raw(
        addr,
        b"MULTI\r\nINCR 1\r\nDECR 1\r\nEXEC\r\nEXEC\r\nDISCARD\r\nQUIT\r\n",
        T,
    )
    .await;
    assert_eq!(
        text(&raw_reply),
        "+OK\r\n+QUEUED\r\n-ERR DECR is refused: sequence numbers only go up, one at a time or by INCRBY; numbers never go down (see the seqsvr client docs)\r\n\
         -EXECABORT Transaction discarded because of previous errors.\r\n-ERR EXEC without MULTI\r\n-ERR DISCARD without MULTI\r\n+OK\r\n"
    );
}

#[tokio::test]
async fn handshakes_as_clients_send_them() {
    let (addr, _, _) = door(DoorConfig::default()).await;
    let got = raw(
        addr,
        b"PING\r\nHELLO 3 SETNAME app\r\nCLIENT GETNAME\r\nCLIENT SETINFO LIB-NAME x\r\nCLIENT ID\r\n\
          SELECT 0\r\nSELECT 1\r\nHELLO 4\r\nCONFIG GET save\r\nECHO hi\r\nPING there\r\nRESET\r\nCLIENT GETNAME\r\nQUIT\r\n",
        T,
    )
    .await;
    let t = text(&got);
    let want_hello = "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.0\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:";
    assert!(t.starts_with(&format!("+PONG\r\n{want_hello}")), "{t}");
    for part in [
        "$3\r\napp\r\n+OK\r\n:",
        "+OK\r\n-ERR DB index is out of range\r\n-NOPROTO unsupported protocol version\r\n%1\r\n$4\r\nsave\r\n$0\r\n\r\n$2\r\nhi\r\n$5\r\nthere\r\n+RESET\r\n$-1\r\n+OK\r\n",
    ] {
        assert!(t.contains(part), "{part:?} not in {t:?}");
    }
    let info = text(
        &raw(
            addr,
            b"INFO\r\nINFO persistence\r\nCOMMAND COUNT\r\nQUIT\r\n",
            T,
        )
        .await,
    );
    assert!(
        info.contains("redis_version:7.2.0\r\n") && info.contains("loading:0\r\n"),
        "{info}"
    );
}

/// A door that spins between rounds answers as one that sleeps, and
/// sleeps once its clients stop (`spin_us`).
#[tokio::test(flavor = "current_thread")]
async fn a_spinning_door_answers_in_order_and_sleeps_when_idle() {
    let cfg = DoorConfig {
        spin: Duration::from_millis(5),
        ..DoorConfig::default()
    };
    let (addr, backend, ctx) = door(cfg).await;
    let mut c = client(addr, false).await;
    for want in 1..=200i64 {
        let v: i64 = c.incr("seq:7", 1).await.unwrap();
        assert_eq!(v, want);
    }
    let mut pipe = redis::pipe();
    for _ in 0..16 {
        pipe.incr("seq:7", 1);
    }
    let vs: Vec<i64> = pipe.query_async(&mut c).await.unwrap();
    assert_eq!(vs, (201..=216).collect::<Vec<_>>());
    assert_eq!(backend.cur.lock().unwrap().get(&7), Some(&216));
    eventually("slept while idle", || ctx.activity.parked()).await;
    let parks = ctx.activity.parks();
    let v: i64 = c.incr("seq:7", 1).await.unwrap();
    assert_eq!(v, 217);
    // Woken by that round, it spins, then sleeps again.
    eventually("a round woke the sleeping spinner", || {
        ctx.activity.parks() > parks
    })
    .await;
}

#[tokio::test]
async fn auth_as_redis_words_it() {
    let cfg = DoorConfig {
        auth: Some(Credentials {
            user: Some("app".into()),
            password: "s3cret".into(),
        }),
        ..DoorConfig::default()
    };
    let (addr, backend, _) = door(cfg).await;
    let t = text(&raw(
        addr,
        b"INCR 1\r\nHELLO 3\r\nAUTH app nope\r\nAUTH s3cret\r\nPING\r\nAUTH app s3cret\r\nINCR 1\r\nQUIT\r\n",
        T,
    )
    .await);
    assert_eq!(
        t,
        "-NOAUTH Authentication required.\r\n\
         -NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n\
         -NOAUTH Authentication required.\r\n+OK\r\n:1\r\n+OK\r\n"
    );
    assert_eq!(backend.cur.lock().unwrap().get(&1), Some(&1));
    let mut c = redis::Client::open(format!("redis://app:s3cret@{addr}/?protocol=resp3"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let v: i64 = c.incr("seq:1", 1).await.unwrap();
    assert_eq!(v, 2);
}

/// Bad input closes its own connection exactly where Redis does, and
/// the door goes on serving everyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adversarial_input_leaves_other_connections_served() {
    let (addr, _, _) = door(DoorConfig::default()).await;
    let mut other = client(addr, false).await;
    let nesting = b"*1\r\n".repeat(10_000);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"*x\r\n".to_vec(),
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*99999999999\r\n".to_vec(),
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\n$99999999999\r\n".to_vec(),
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (nesting, "-ERR Protocol error: expected '$', got '*'\r\n"),
        (
            vec![b'x'; 70_000],
            "-ERR Protocol error: too big inline request\r\n",
        ),
        (
            b"PING \"unbalanced\r\n".to_vec(),
            "-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
        (
            b"PING\r\n*1\r\n$4\r\nPING\r\n\x00\xff garbage\r\n*2\r\n@".to_vec(),
            "+PONG\r\n+PONG\r\n-ERR unknown command",
        ),
    ];
    for (input, want) in cases {
        let got = text(&raw(addr, &input, T).await);
        assert!(got.starts_with(want), "{want:?}: got {got:?}");
        let v: i64 = other.incr("seq:5", 1).await.unwrap();
        assert!(v > 0);
    }
    // Half-open: a request never finished, a connection never read from.
    let mut halves = Vec::new();
    for _ in 0..50 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut s, b"*2\r\n$4\r\nINCR\r\n$100\r\nseq")
            .await
            .unwrap();
        halves.push(s);
    }
    let v: i64 = other.incr("seq:5", 1).await.unwrap();
    assert!(v > 0);
    drop(halves);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_pipelined_commands_are_answered_in_order() {
    let (addr, _, _) = door(DoorConfig::default()).await;
    let mut req = Vec::new();
    for _ in 0..10_000 {
        req.extend_from_slice(b"*2\r\n$4\r\nINCR\r\n$6\r\nseq:77\r\n");
    }
    req.extend_from_slice(b"QUIT\r\n");
    let got = text(&raw(addr, &req, Duration::from_secs(30)).await);
    let lines: Vec<&str> = got.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 10_001);
    for (i, l) in lines[..10_000].iter().enumerate() {
        assert_eq!(*l, format!(":{}", i + 1));
    }
}

#[tokio::test]
async fn a_query_buffer_past_its_limit_closes_the_connection() {
    let cfg = DoorConfig {
        max_query_buffer: 4096,
        ..DoorConfig::default()
    };
    let (addr, _, _) = door(cfg).await;
    let mut big = b"*2\r\n$4\r\nECHO\r\n$60000\r\n".to_vec();
    big.extend(vec![b'a'; 20_000]);
    let got = raw(addr, &big, T).await;
    assert!(got.is_empty(), "{}", text(&got));
}
