//! One address for every uid, end to end (real processes): callers in no
//! particular language point at ONE AllocSvr of set 0 — its gRPC port, its
//! Redis-protocol door and its HTTP API — and ask for numbers of uids of
//! both sets (the door's own sections, the other AllocSvr of set 0's, and
//! set 1's), while ranges move from set 0 to set 1 and back. Every number
//! any door handed out is checked per uid by the monotonicity checker
//! (promise 1), every uid of both sets must have been served through each
//! door, and every refusal must be a typed, retryable one — never
//! `NOT_OWNER` for a wrong node (`docs/architecture/forwarding.md`).
//!
//! Shown to fail with forwarding off (`[forward] enabled = false`, what
//! [`run`] takes): the door answers only its own sections and refuses the
//! rest `NOT_OWNER`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seqsvr_core::checker::{Kind, Observation};
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb, detail_of};
use seqsvr_testkit::sets::{seqctl, two_sets_forwarding};
use seqsvr_testkit::{self as kit, Bins};
use seqsvr_testkit::{assert_monotonic, Workload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Uids `[0, 4000)`: set 0 serves `[0, 2000)`, set 1 `[2000, 4000)`.
const UIDS: u64 = 4000;
/// Section size of both sets.
const SECTION: u64 = 100;

/// The three doors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Door {
    Grpc,
    Resp,
    Http,
}

/// A call's failure: its kind (as every door names it) and whether it
/// said to retry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Refusal {
    kind: String,
    retryable: bool,
}

impl Refusal {
    /// A failure that is not an answer of the door (a broken connection).
    fn transport(e: impl std::fmt::Display) -> Refusal {
        Refusal {
            kind: format!("transport: {e}"),
            retryable: false,
        }
    }
}

/// What the callers received besides numbers.
#[derive(Default)]
struct Seen {
    /// Numbers per door, per uid section (to check every section was
    /// served through every door).
    sections: BTreeMap<Door, BTreeSet<u64>>,
    /// Refusals per door and kind.
    refusals: BTreeMap<(Door, Refusal), u64>,
}

/// One caller's connection to one door.
enum Conn {
    Grpc(AllocClient<tonic::transport::Channel>),
    Resp(redis::aio::MultiplexedConnection),
    Http(String),
}

impl Conn {
    async fn open(door: Door, addr: &str) -> Conn {
        match door {
            Door::Grpc => Conn::Grpc(
                AllocClient::connect(format!("http://{addr}"))
                    .await
                    .unwrap(),
            ),
            Door::Resp => {
                let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
                Conn::Resp(client.get_multiplexed_async_connection().await.unwrap())
            }
            Door::Http => Conn::Http(addr.to_string()),
        }
    }

    /// `next` (`current` if `read`) of `uid`.
    async fn call(&mut self, uid: u64, read: bool) -> Result<u64, Refusal> {
        match self {
            Conn::Grpc(c) => {
                let r = if read {
                    let req = pb::CurrentRequest {
                        uid,
                        ..Default::default()
                    };
                    c.current(req).await.map(|r| r.into_inner().seq)
                } else {
                    let req = pb::NextRequest {
                        uid,
                        count: 0,
                        ..Default::default()
                    };
                    c.next(req).await.map(|r| r.into_inner().seq)
                };
                r.map_err(|s| match detail_of(&s) {
                    Some(d) => Refusal {
                        kind: pb::ErrorKind::try_from(d.kind)
                            .map_or("?".into(), |k| k.as_str_name().to_string()),
                        retryable: d.retryable,
                    },
                    None => Refusal::transport(s.code()),
                })
            }
            Conn::Resp(c) => {
                let key = format!("seq:{uid}");
                let name = if read { "GET" } else { "INCR" };
                let r: redis::RedisResult<redis::Value> =
                    redis::cmd(name).arg(&key).query_async(c).await;
                match r {
                    // INCR answers an integer, GET a bulk string.
                    Ok(redis::Value::Int(v)) => u64::try_from(v).map_err(Refusal::transport),
                    Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b)
                        .parse()
                        .map_err(Refusal::transport),
                    Ok(other) => Err(Refusal::transport(format!("{other:?}"))),
                    Err(e) if e.is_io_error() => Err(Refusal::transport(e)),
                    Err(e) => Err(resp_refusal(&e.to_string())),
                }
            }
            Conn::Http(addr) => {
                let op = if read { "current" } else { "next" };
                http_get(addr, &format!("/v1/{op}/{uid}")).await
            }
        }
    }
}

/// A Redis error line's kind: the first word naming an error kind
/// (`TRYAGAIN OWNER_UNAVAILABLE …`); retryable if `TRYAGAIN`.
fn resp_refusal(text: &str) -> Refusal {
    let kind = text
        .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .find(|w| pb::ErrorKind::from_str_name(w).is_some())
        .unwrap_or(text);
    Refusal {
        kind: kind.to_string(),
        retryable: text.contains("TRYAGAIN") || text.contains("TryAgain"),
    }
}

/// `GET path` on a fresh connection: the number, or the JSON error.
async fn http_get(addr: &str, path: &str) -> Result<u64, Refusal> {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(Refusal::transport)?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(Refusal::transport)?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .await
        .map_err(Refusal::transport)?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    if head.starts_with("HTTP/1.1 200") {
        return body.trim().parse().map_err(Refusal::transport);
    }
    let v: serde_json::Value = serde_json::from_str(body).map_err(Refusal::transport)?;
    Err(Refusal {
        kind: v["error"]["kind"].as_str().unwrap_or("?").to_string(),
        retryable: v["error"]["retryable"].as_bool().unwrap_or(false),
    })
}

/// `callers` callers per door, each over every uid (a `current` every
/// 4th call), through the doors at `addrs` (gRPC, RESP, HTTP).
fn start(addrs: [(Door, String); 3], callers: u64, seen: &Arc<Mutex<Seen>>) -> Workload {
    let mut w = Workload::new();
    for (d, (door, addr)) in addrs.into_iter().enumerate() {
        for c in 0..callers {
            let (r, seen, addr) = (w.recorder(), seen.clone(), addr.clone());
            let obs = w.obs.clone();
            w.tasks.push(tokio::spawn(async move {
                let mut conn = Conn::open(door, &addr).await;
                let mut uid = (d as u64 * 1000 + c * 37) % UIDS;
                let mut i = 0u64;
                while !r.stopped() {
                    uid = (uid + 101) % UIDS;
                    i += 1;
                    let read = i.is_multiple_of(4);
                    let t0 = Instant::now();
                    match conn.call(uid, read).await {
                        Ok(seq) => {
                            let o = if read {
                                Observation::current(uid, seq, t0, Instant::now())
                            } else {
                                Observation::next(uid, seq, t0, Instant::now())
                            };
                            obs.lock().unwrap().push(o);
                            let mut s = seen.lock().unwrap();
                            s.sections.entry(door).or_default().insert(uid / SECTION);
                        }
                        Err(e) => {
                            *seen.lock().unwrap().refusals.entry((door, e)).or_default() += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }));
        }
    }
    w
}

/// Two sets with forwarding as `forward` says; callers through set 0's
/// first AllocSvr only, across two moves; the checks of the module doc.
async fn run(forward: bool) {
    let (a, b) = two_sets_forwarding(BINS, forward).await;
    // Every section of both sets served before the load starts.
    let c = kit::SetCluster::client_over(&[&a, &b]).await;
    a.wait_serving(&c).await;
    b.wait_serving(&c).await;
    let doors = [
        (Door::Grpc, a.alloc_addrs[0].clone()),
        (Door::Resp, a.resp_addrs[0].clone()),
        (Door::Http, a.http_addrs[0].clone()),
    ];
    println!("one address: {doors:?}");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let w = start(doors, 3, &seen);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut moved_at = Instant::now();
    for (range, to) in [("500..1200", "1"), ("800..1000", "0")] {
        let (ok, out) = seqctl(&a, &["set", "move", "--range", range, "--to", to]);
        assert!(
            ok,
            "move failed: {out}\n{}\n{}",
            a.store.logs(),
            b.store.logs()
        );
        moved_at = Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let (obs, _) = w.finish().await;
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    for ((door, r), n) in &seen.refusals {
        println!("{door:?}: {n} × {} (retryable: {})", r.kind, r.retryable);
    }
    assert_monotonic(&obs, || format!("{}\n{}", a.store.logs(), b.store.logs()));
    let all: BTreeSet<u64> = (0..UIDS / SECTION).collect();
    for door in [Door::Grpc, Door::Resp, Door::Http] {
        let served = seen.sections.get(&door).cloned().unwrap_or_default();
        let missing: Vec<_> = all.difference(&served).collect();
        assert!(
            missing.is_empty(),
            "{door:?}: no number for sections {missing:?} through one address"
        );
    }
    // The moved uids were served again after the last move, through the
    // one address.
    for uid in (500..1200).step_by(100) {
        assert!(
            obs.iter().any(|o| o.uid / SECTION == uid / SECTION
                && o.kind == Kind::Next
                && o.start > moved_at),
            "section of uid {uid} not served after the moves"
        );
    }
    let wrong: Vec<_> = seen
        .refusals
        .keys()
        .filter(|(_, r)| {
            !r.retryable || ["NOT_OWNER", "MOVED", "NOT_SERVED"].contains(&r.kind.as_str())
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "refusals a caller of one address must never get: {wrong:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_allocsvr_serves_both_sets_through_every_door_across_moves() {
    run(true).await;
}
