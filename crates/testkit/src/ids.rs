//! Time-ordered ids drawn from the real binaries (docs/ids.md): callers
//! recording every call, libfaketime to shift an AllocSvr's clock, and
//! the wait for an AllocSvr to issue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seqsvr_core::ids::Layout;

use crate::cluster::SetCluster;

/// libfaketime, where Debian's `faketime` package puts it (`None`: not
/// installed, with the reason printed). Under `CI` a missing library
/// fails the test.
///
/// The AllocSvr is started as `env LD_PRELOAD=… FAKETIME=… seqsvr`, not
/// under the `faketime` program: that one forks, so a SIGKILL to the
/// child the test holds would leave the server running.
pub fn libfaketime() -> Option<String> {
    let mut dirs = vec!["/usr/lib/faketime".to_string()];
    if let Ok(rd) = std::fs::read_dir("/usr/lib") {
        for e in rd.flatten() {
            dirs.push(format!("{}/faketime", e.path().display()));
        }
    }
    dirs.push("/usr/local/lib/faketime".into());
    let found = dirs.iter().find_map(|d| {
        ["libfaketimeMT.so.1", "libfaketime.so.1"]
            .iter()
            .map(|f| format!("{d}/{f}"))
            .find(|p| std::path::Path::new(p).exists())
    });
    if found.is_none() {
        let why = "libfaketime is not installed (Debian package `faketime`)";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
    }
    found
}

/// `env LD_PRELOAD=<lib> FAKETIME=<shift>` (empty `shift`: the real
/// clock, no wrapper).
pub fn under(lib: &str, shift: &str) -> Vec<String> {
    if shift.is_empty() {
        Vec::new()
    } else {
        vec![
            "env".into(),
            format!("LD_PRELOAD={lib}"),
            format!("FAKETIME={shift}"),
        ]
    }
}

/// Whether process `pid` is gone (or a zombie).
pub fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Set 0 as 4 sections of 1000 uids, step 500: what the id drills
/// serve.
pub fn set() -> seqsvr_core::SetSpec {
    seqsvr_core::SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: 4000,
        section_size: 1000,
        step: 500,
    }
}

/// Creates namespace `ns` with `layout` and a window of `window_ms` at
/// `cl`'s store, trying again until it is created (at most 30 s).
pub async fn create_namespace(cl: &SetCluster, ns: &str, layout: &Layout, window_ms: u64) {
    cl.store.wait_ready(Duration::from_secs(30)).await;
    let admin = cl.store.admin();
    let start = Instant::now();
    while let Err(e) = admin.create_id_space(ns, layout, window_ms).await {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "namespace not created: {e}\n{}",
            cl.store.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One call's ids, with when it was asked for and when it was answered.
pub struct Call {
    pub asked: Instant,
    pub answered: Instant,
    pub ids: Vec<u64>,
}

/// What one caller received, in the order of its calls.
pub type Calls = Arc<Mutex<Vec<Call>>>;

/// Every caller of a drill over ids: two through the `SeqClient` and one
/// straight at each AllocSvr of `addrs`, drawing `batch` ids of `ns` a
/// call until `stop`.
pub struct Callers {
    /// Everything every caller received (the checker's input).
    pub all: Vec<Calls>,
    /// The direct callers, one per AllocSvr, in `addrs`' order.
    pub direct: Vec<Calls>,
    /// Their tasks.
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts [`Callers`].
pub fn start_callers(
    client: &seqsvr_client::SeqClient,
    addrs: &[String],
    ns: &'static str,
    batch: u32,
    stop: &Arc<AtomicBool>,
) -> Callers {
    let mut c = Callers {
        all: Vec::new(),
        direct: Vec::new(),
        tasks: Vec::new(),
    };
    for _ in 0..2 {
        let (calls, h) = draw_client(client.clone(), ns, batch, stop.clone());
        c.all.push(calls);
        c.tasks.push(h);
    }
    for addr in addrs {
        let (calls, h) = draw_direct(addr.clone(), ns, batch, stop.clone());
        c.direct.push(calls.clone());
        c.all.push(calls);
        c.tasks.push(h);
    }
    c
}

/// Draws ids of `ns`, `batch` a call, until `stop` through the
/// `SeqClient`.
pub fn draw_client(
    c: seqsvr_client::SeqClient,
    ns: &'static str,
    batch: u32,
    stop: Arc<AtomicBool>,
) -> (Calls, tokio::task::JoinHandle<()>) {
    let calls: Calls = Default::default();
    let out = calls.clone();
    let h = tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let asked = Instant::now();
            if let Ok(ids) = c.next_ids(ns, batch).await {
                out.lock().unwrap().push(Call {
                    asked,
                    answered: Instant::now(),
                    ids,
                });
            } else {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    (calls, h)
}

/// Draws ids of `ns`, `batch` a call, until `stop` from the AllocSvr at
/// `addr` alone (gRPC `Alloc.NextId`), connecting again after each
/// failure.
pub fn draw_direct(
    addr: String,
    ns: &'static str,
    batch: u32,
    stop: Arc<AtomicBool>,
) -> (Calls, tokio::task::JoinHandle<()>) {
    let calls: Calls = Default::default();
    let out = calls.clone();
    let h = tokio::spawn(async move {
        let mut conn = None;
        while !stop.load(Ordering::Relaxed) {
            if conn.is_none() {
                conn = seqsvr_proto::alloc_client::AllocClient::connect(format!("http://{addr}"))
                    .await
                    .ok();
            }
            let asked = Instant::now();
            let r = match conn.as_mut() {
                Some(c) => tokio::time::timeout(
                    Duration::from_secs(2),
                    c.next_id(seqsvr_proto::NextIdRequest {
                        namespace: ns.into(),
                        count: batch,
                    }),
                )
                .await
                .ok()
                .and_then(|r| r.ok()),
                None => None,
            };
            match r {
                Some(r) => out.lock().unwrap().push(Call {
                    asked,
                    answered: Instant::now(),
                    ids: r.into_inner().ids,
                }),
                None => {
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
    (calls, h)
}

/// Prints how many ids the checker checked (`checked`) and how many each
/// caller drew; fails unless every caller drew some.
pub fn assert_every_caller_drew(callers: &[Calls], checked: usize) {
    let per: Vec<usize> = callers
        .iter()
        .map(|c| c.lock().unwrap().iter().map(|c| c.ids.len()).sum())
        .collect();
    eprintln!("{checked} ids checked (per caller: {per:?})");
    assert!(per.iter().all(|&k| k > 0), "a caller got no id: {per:?}");
}

/// The worker id of the latest id `calls` hold, and that id's tick in
/// Unix ms.
pub fn latest(calls: &Calls, layout: &Layout) -> Option<(u64, u64)> {
    let calls = calls.lock().unwrap();
    let id = *calls.last()?.ids.last()?;
    let d = layout.decode(id).unwrap();
    Some((d.worker, d.unix_ms))
}

/// Waits until `calls` has ids answered after `since`; returns the worker
/// id that issued them.
pub async fn wait_issuing(calls: &Calls, since: Instant, layout: &Layout, cl: &SetCluster) -> u64 {
    let start = Instant::now();
    loop {
        {
            let c = calls.lock().unwrap();
            if let Some(call) = c.iter().rev().find(|c| c.asked > since) {
                return layout.decode(call.ids[0]).unwrap().worker;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the restarted AllocSvr issued no id within 30 s\n{}",
            cl.store.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
