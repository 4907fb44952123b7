//! A server paused (stopped, as by SIGSTOP) while its callers' deadlines
//! pass, then resumed: the pause costs the calls it held and nothing more,
//! and a flood of resets is still cut off (docs/architecture/security.md,
//! "Resets after a pause").
//!
//! The server runs on a runtime of its own with one thread, and a pause
//! blocks that thread: its accept loop, connections and timers all stop,
//! as a stopped process's do, while the kernel keeps taking the callers'
//! bytes. On resume the server reads the whole backlog at once: the calls
//! opened during the pause and the resets their callers sent when their
//! deadlines passed, before it has taken up any of those calls.

use crate::common::*;
use seqsvr_net::server::{listener, Connections};
use seqsvr_net::{Limits, Plane};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// A client-plane server (the health service alone, served as the
/// AllocSvr's client plane is, without a router) on a thread and runtime
/// of its own.
struct Pausable {
    addr: SocketAddr,
    conns: Connections,
    rt: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A pause under way; dropping it resumes the server.
struct Paused(mpsc::Sender<()>);

impl Pausable {
    fn start(limits: Limits) -> Pausable {
        let (tx, rx) = mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let l = listener(tcp, Plane::Client, &limits, None, false).unwrap();
                tx.send((
                    l.local_addr(),
                    l.connections(),
                    tokio::runtime::Handle::current(),
                ))
                .unwrap();
                let server = l.server();
                l.serve_one(server, health(), async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            });
        });
        let (addr, conns, rt) = rx.recv().unwrap();
        Pausable {
            addr,
            conns,
            rt,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Stops the server's only thread until the returned guard is dropped.
    fn pause(&self) -> Paused {
        let (resume, wait) = mpsc::channel::<()>();
        let (frozen, is_frozen) = mpsc::channel::<()>();
        self.rt.spawn(async move {
            frozen.send(()).unwrap();
            // Blocks the runtime's one thread: nothing of the server runs.
            let _ = wait.recv();
        });
        is_frozen.recv().unwrap();
        Paused(resume)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

impl Drop for Pausable {
    fn drop(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        let _ = self.thread.take().unwrap().join();
    }
}

/// How one call ended.
#[derive(Debug)]
enum Ended {
    Ok,
    /// Its caller gave up at its deadline (and reset the stream).
    Deadline,
    /// Anything else: the server or the connection failed it.
    Failed(tonic::Status),
}

/// `callers` tasks calling the health service on one connection in a
/// closed loop, each call given up after `deadline` (as `SeqClient`
/// gives up an attempt), until `stop`.
fn callers(
    ch: &Channel,
    callers: usize,
    deadline: Duration,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Ended>>> {
    (0..callers)
        .map(|_| {
            let (ch, stop) = (ch.clone(), stop.clone());
            tokio::spawn(async move {
                let mut ended = Vec::new();
                let mut c = HealthClient::new(ch);
                while !stop.load(Ordering::Relaxed) {
                    let req = HealthCheckRequest {
                        service: String::new(),
                    };
                    ended.push(match tokio::time::timeout(deadline, c.check(req)).await {
                        Ok(Ok(_)) => Ended::Ok,
                        Err(_) => Ended::Deadline,
                        Ok(Err(st)) => Ended::Failed(st),
                    });
                }
                ended
            })
        })
        .collect()
}

/// 64 callers on one connection (a busy client's share of the 1024
/// streams a client-plane connection allows), each call given up after
/// 500 ms (`SeqClient`'s attempt timeout), and the server paused for 2 s:
/// about 250 calls are opened and reset during the pause. Those calls are
/// lost to their deadlines; no other call may fail, and the client keeps
/// its connection.
///
/// Shown to fail: with HTTP/2's default of 20 reset streams awaiting
/// accept (no `max_pending_resets` set), the resumed server read the
/// backlog and answered GOAWAY `ENHANCE_YOUR_CALM` "too_many_resets": 192
/// calls were lost to their deadlines and all 64 calls in flight on the
/// connection failed with the GOAWAY, and the client had to reconnect.
/// With the bound: 223 lost to their deadlines, none failed otherwise,
/// one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_server_keeps_its_callers() {
    const CALLERS: usize = 64;
    const DEADLINE: Duration = Duration::from_millis(500);
    const PAUSE: Duration = Duration::from_secs(2);
    let s = Pausable::start(quick(Plane::Client));
    let ch = channel(s.addr, None);
    check(&ch, "").await.expect("served before the pause");
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = callers(&ch, CALLERS, DEADLINE, &stop);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let paused = s.pause();
    let at = Instant::now();
    tokio::time::sleep(PAUSE).await;
    drop(paused);
    let pause = at.elapsed();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut ended = Vec::new();
    for t in tasks {
        ended.extend(t.await.unwrap());
    }
    let ok = ended.iter().filter(|e| matches!(e, Ended::Ok)).count();
    let deadline = ended
        .iter()
        .filter(|e| matches!(e, Ended::Deadline))
        .count();
    let failed: Vec<&tonic::Status> = ended
        .iter()
        .filter_map(|e| match e {
            Ended::Failed(st) => Some(st),
            _ => None,
        })
        .collect();
    println!(
        "{CALLERS} callers, deadline {DEADLINE:?}, paused {pause:?}: {ok} calls answered, \
         {deadline} lost to their deadlines (held by the pause), {} failed otherwise; \
         connections accepted: {}",
        failed.len(),
        s.conns.accepted()
    );
    if let Some(st) = failed.first() {
        println!("first failure: {st:?}");
    }
    assert!(deadline > 0, "the pause held no call: nothing was tested");
    assert!(
        failed.is_empty(),
        "{} calls not held by the pause failed; first: {:?}",
        failed.len(),
        failed[0]
    );
    assert_eq!(s.conns.accepted(), 1, "the client lost its connection");
    check(&ch, "").await.expect("served after the pause");
}

/// A rapid-reset flood is still cut off: 4000 calls opened and reset
/// at once, more than a connection's bound of resets awaiting accept
/// (1024 on the client plane), arrive together (sent while the server is
/// paused, so none is taken up before the last arrives); the server closes
/// the connection with GOAWAY `ENHANCE_YOUR_CALM`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_resets_beyond_the_bound_is_still_cut_off() {
    let s = Pausable::start(quick(Plane::Client));
    let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let goaway = Arc::new(Mutex::new(None));
    let conn = tokio::spawn({
        let goaway = goaway.clone();
        async move {
            if let Err(e) = conn.await {
                *goaway.lock().unwrap() = e.reason();
            }
        }
    });
    let request = || {
        http::Request::post(format!("http://{}/grpc.health.v1.Health/Check", s.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap()
    };
    // One call answered first, so the connection is up and the server's
    // settings are known.
    let mut c = client.clone().ready().await.unwrap();
    let (resp, mut body) = c.send_request(request(), false).unwrap();
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    assert!(resp.await.unwrap().status().is_success());
    let paused = s.pause();
    for _ in 0..4000 {
        let mut c = client.clone().ready().await.unwrap();
        let (_resp, mut body) = c.send_request(request(), false).unwrap();
        body.send_reset(h2::Reason::CANCEL);
    }
    // Let the client write it all.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(paused);
    let _ = tokio::time::timeout(Duration::from_secs(10), conn).await;
    let reason = *goaway.lock().unwrap();
    println!("after 4000 resets at once: connection ended with {reason:?}");
    assert_eq!(reason, Some(h2::Reason::ENHANCE_YOUR_CALM));
}
