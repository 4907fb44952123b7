//! Request messages begun and never finished: what they hold is bounded
//! by the listener's `max_unfinished_bytes`, given back when their calls
//! end, and a stranger holding it full does not stop others' calls.

use crate::common::*;
use bytes::Bytes;
use seqsvr_net::{Limits, Plane};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;

/// A stranger's connection: `streams` gRPC calls, each announcing a
/// message of `announce` bytes and sending `send` bytes of it, never
/// finishing. Returns the streams (kept open) and the answers' statuses
/// as they come.
pub struct Flood {
    pub _send: Vec<h2::SendStream<Bytes>>,
    pub answers: tokio::sync::mpsc::UnboundedReceiver<String>,
    pub _conn: tokio::task::JoinHandle<()>,
}

pub async fn flood(addr: SocketAddr, streams: usize, announce: u32, send: usize) -> Flood {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let (tx, answers) = tokio::sync::mpsc::unbounded_channel();
    let mut body = Vec::with_capacity(5 + send);
    body.push(0);
    body.extend_from_slice(&announce.to_be_bytes());
    body.resize(5 + send, 7);
    let body = Bytes::from(body);
    let mut held = Vec::new();
    for _ in 0..streams {
        client = client.ready().await.unwrap();
        let req = http::Request::post(format!("http://{addr}/grpc.health.v1.Health/Check"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (res, mut s) = client.send_request(req, false).unwrap();
        s.send_data(body.clone(), false).unwrap();
        held.push(s);
        let tx = tx.clone();
        tokio::spawn(async move {
            let status = match res.await {
                Ok(r) => {
                    let h = r.headers().get("grpc-status").cloned();
                    match h {
                        Some(v) => v.to_str().unwrap_or("?").to_string(),
                        None => {
                            let mut b = r.into_body();
                            match b.trailers().await {
                                Ok(Some(t)) => t
                                    .get("grpc-status")
                                    .map(|v| v.to_str().unwrap_or("?").to_string())
                                    .unwrap_or_default(),
                                _ => "no trailers".into(),
                            }
                        }
                    }
                }
                Err(e) => format!("reset: {e}"),
            };
            let _ = tx.send(status);
        });
    }
    Flood {
        _send: held,
        answers,
        _conn: conn,
    }
}

/// A stranger opens 100 calls on one connection, each announcing a 60 000
/// byte message and sending 20 000 bytes of it, against a budget of 1 MiB:
/// 17 fit, the rest are answered `RESOURCE_EXHAUSTED` before anything of
/// them is buffered. While the budget is full a caller on a new connection
/// is served; at the request timeout the 17 are answered and the budget
/// is empty again.
#[tokio::test]
async fn unfinished_messages_hold_at_most_the_budget_and_free_it_when_they_end() {
    let budget = 1 << 20;
    let limits = Limits {
        max_unfinished_bytes: budget,
        request_timeout: Duration::from_millis(1500),
        ..quick(Plane::Client)
    };
    let s = serve(Plane::Client, &limits, None, |mut b| {
        b.add_service(health())
    })
    .await;
    let mut f = flood(s.addr, 100, 60_000, 20_000).await;

    let mut exhausted = 0;
    for _ in 0..83 {
        let st = tokio::time::timeout(Duration::from_secs(5), f.answers.recv())
            .await
            .expect("calls beyond the budget must be answered at once")
            .unwrap();
        assert_eq!(st, "8", "answer: {st}");
        exhausted += 1;
    }
    let held = s.conns.unfinished_bytes();
    println!(
        "100 unfinished calls of 60 000 bytes: {exhausted} answered RESOURCE_EXHAUSTED, \
         {held} bytes held (budget {budget})"
    );
    assert_eq!(held, 17 * 60_000);

    // The budget is full; a caller's calls (one frame each) go through.
    let ch = channel(s.addr, None);
    for _ in 0..10 {
        check(&ch, "").await.unwrap();
    }
    assert_eq!(s.conns.unfinished_bytes(), 17 * 60_000);

    // At the request timeout the 17 calls end and give their bytes back.
    for _ in 0..17 {
        let st = tokio::time::timeout(Duration::from_secs(5), f.answers.recv())
            .await
            .expect("the request timeout must answer the held calls")
            .unwrap();
        assert_eq!(st, "1", "answer: {st}");
    }
    assert!(
        eventually(Duration::from_secs(2), || s.conns.unfinished_bytes() == 0).await,
        "{} bytes still held after the calls ended",
        s.conns.unfinished_bytes()
    );
    s.stop().await;
}

/// The server of [`rss_under_a_partial_body_flood`], run in a process of
/// its own so its RSS is its own: a client-plane listener with the
/// plane's default limits (request timeout raised so nothing is given
/// back while RSS is measured; `FLOOD_BUDGET` overrides the budget). It
/// prints its address and serves until its stdin closes.
#[tokio::test]
#[ignore = "run by rss_under_a_partial_body_flood"]
async fn flood_server() {
    let Ok(budget) = std::env::var("FLOOD_BUDGET") else {
        return;
    };
    let limits = Limits {
        max_unfinished_bytes: budget.parse().unwrap(),
        request_timeout: Duration::from_secs(120),
        ..Limits::for_plane(Plane::Client)
    };
    let s = serve(Plane::Client, &limits, None, |mut b| {
        b.add_service(health())
    })
    .await;
    println!("ADDR {}", s.addr);
    tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin()
            .read_line(&mut sink)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
    })
    .await
    .unwrap();
    println!("HELD {}", s.conns.unfinished_bytes());
}

fn rss_mib(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    kib / 1024.0
}

/// Connections and streams of the flood: the client plane's cap is 4096
/// connections of 1024 streams; scaled to a small test machine, 128
/// connections of 64 streams, each announcing 65 000 bytes and sending
/// 60 000 (8192 unfinished messages, 492 MB of bodies if all were held).
const FLOOD_CONNS: usize = 128;
const FLOOD_STREAMS: usize = 64;

/// RSS of a client-plane server under a partial-body flood, with the
/// default budget (128 MiB) and a small one (32 MiB): its growth stays
/// within the budget plus the open streams' own state (HTTP/2 stream,
/// task, tonic's decoder with its 8 KiB first buffer: about 10 KiB each,
/// measured with bodies of 0 bytes; 16 KiB allowed here). See
/// docs/architecture/security.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_under_a_partial_body_flood() {
    for budget in [128usize << 20, 32 << 20] {
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "unfinished::flood_server",
                "--ignored",
                "--nocapture",
            ])
            .env("FLOOD_BUDGET", budget.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid = child.id().unwrap();
        let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let addr: SocketAddr = loop {
            let mut line = String::new();
            use tokio::io::AsyncBufReadExt;
            assert!(out.read_line(&mut line).await.unwrap() > 0, "server died");
            if let Some(a) = line.trim().strip_prefix("ADDR ") {
                break a.parse().unwrap();
            }
        };
        let before = rss_mib(pid);
        let mut floods = Vec::new();
        for _ in 0..FLOOD_CONNS {
            floods.push(flood(addr, FLOOD_STREAMS, 65_000, 60_000).await);
        }
        // Every stream is either answered (refused) or held; wait until the
        // server has taken all the bytes it will take.
        let mut peak = 0f64;
        let mut refused = 0;
        let end = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::time::Instant::now() < end {
            for f in &mut floods {
                while let Ok(st) = f.answers.try_recv() {
                    assert_eq!(st, "8", "{st}");
                    refused += 1;
                }
            }
            peak = peak.max(rss_mib(pid));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let held_at_most = (FLOOD_CONNS * FLOOD_STREAMS - refused) * 65_000;
        let grown = peak - before;
        let bound = (budget >> 20) as f64 + (FLOOD_CONNS * FLOOD_STREAMS * 16) as f64 / 1024.0;
        println!(
            "budget {} MiB: {FLOOD_CONNS} connections x {FLOOD_STREAMS} streams of 60 000 of \
             65 000 bytes: {refused} refused, {:.1} MiB held; RSS {before:.1} -> {peak:.1} MiB \
             (+{grown:.1}, bound {bound:.0})",
            budget >> 20,
            held_at_most as f64 / (1 << 20) as f64
        );
        drop(floods);
        drop(child.stdin.take());
        let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        assert!(grown < bound, "RSS grew {grown:.1} MiB, over {bound:.0}");
        assert!(held_at_most <= budget);
    }
}
