//! Promise 2 at the disk: every raise acknowledged is on the disk of a
//! majority of the replicas when the power is cut, not merely in their page
//! cache (which survives `kill -9`, so killing processes cannot show it).
//!
//! A child process runs a three-replica group on a disk that keeps only
//! what was fsynced (`lazy_disk`: LazyFS's model), with slow fsyncs; raisers
//! raise until enough raises are acknowledged, then the power is cut on all
//! three replicas at once. This process then opens each replica's database
//! from what reached the disk and reads every raise its log holds, and
//! restarts the group from those disks and reads the ceilings back.
//!
//! The test fails if `Disk::sync` skips its `fsync` (sled's flush ends in
//! `sync_file_range`, which is not durable) or if the log store
//! acknowledges an append before its sync returns. A second test cuts the
//! power right after `save_vote` returns and right after a snapshot is
//! built, on the log store and state machine alone: both must be on the
//! disk.

#![cfg(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu"))]

mod lazy_disk;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader, RaftSnapshotBuilder};
use seqsvr_core::{SectionId, SetSpec};
use seqsvr_store::disk::Disk;
use seqsvr_store::log_store::LogStore;
use seqsvr_store::node::{Member, StoreConfig, StoreListeners};
use seqsvr_store::state::SetState;
use seqsvr_store::state_machine::StateMachine;
use seqsvr_store::types::{Command, Entry, LogId, Request, Vote};
use seqsvr_store::{Rejection, StoreNode};
use seqsvr_store_api::client::plaintext;
use seqsvr_store_api::{AllocAddrs, Error, PeerClient, ReadClient};
use tokio::net::TcpListener;

/// Names the child's task and where it works.
const CHILD: &str = "SEQSVR_LAZY_DISK_CHILD";
const CHILD_DIR: &str = "SEQSVR_LAZY_DISK_DIR";
/// Concurrent raisers, one section each.
const RAISERS: u32 = 4;
/// Acknowledged raises before the power is cut.
const ACKS: usize = 60;
/// How much longer every fsync takes: an acknowledgement sent before its
/// fsync returned comes this much too early, and is caught at the cut.
const SLOW_FSYNC: Duration = Duration::from_millis(40);

/// Runs the child task `mode` in `dir` and waits for it (at most 3 min).
fn run_child(mode: &str, dir: &Path) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .env(CHILD_DIR, dir)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                dir.join("done").exists(),
                "the child ({mode}) ended without reporting: {status}"
            );
            return;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the child ({mode}) hung");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The child's side of every test here (does nothing unless asked).
#[test]
fn child() {
    let (Some(mode), Some(dir)) = (std::env::var_os(CHILD), std::env::var_os(CHILD_DIR)) else {
        return;
    };
    let dir = Path::new(&dir);
    match mode.to_str().unwrap() {
        "files-cut" => write_files(dir, true),
        "files-kill" => write_files(dir, false),
        "storage" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(vote_and_snapshot_then_cut(dir)),
        "group" => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(raise_then_cut(dir)),
        m => panic!("unknown child task {m}"),
    }
}

/// Writes a synced and an unsynced line, then cuts the power (or dies, as
/// under `kill -9`).
fn write_files(dir: &Path, cut: bool) {
    use std::io::Write;
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    lazy_disk::track(&data);
    let mut a = std::fs::File::create(data.join("a")).unwrap();
    a.write_all(b"synced\n").unwrap();
    a.sync_all().unwrap();
    a.write_all(b"lost\n").unwrap();
    let mut b = std::fs::File::create(data.join("b")).unwrap();
    b.write_all(b"never synced\n").unwrap();
    if cut {
        let d = lazy_disk::power_cut();
        assert_eq!((d.files, d.writes), (2, 2), "{d:?}");
    }
    std::fs::write(dir.join("done"), b"").unwrap();
    unsafe { libc::_exit(0) }
}

#[test]
fn the_lazy_disk_keeps_only_what_was_fsynced() {
    let dir = tempfile::tempdir().unwrap();
    run_child("files-cut", dir.path());
    let read = |f: &str| std::fs::read_to_string(dir.path().join("data").join(f)).unwrap();
    assert_eq!(read("a"), "synced\n");
    assert_eq!(read("b"), "");
    // Killing the process loses nothing: the page cache keeps it.
    let dir = tempfile::tempdir().unwrap();
    run_child("files-kill", dir.path());
    let read = |f: &str| std::fs::read_to_string(dir.path().join("data").join(f)).unwrap();
    assert_eq!(read("a"), "synced\nlost\n");
    assert_eq!(read("b"), "never synced\n");
}

/// The vote the child saves last.
fn the_vote() -> Vote {
    Vote::new_committed(4, 2)
}

/// In the child: on the lazy disk, one replica saves a vote, another
/// applies a few entries and builds a snapshot; then the power goes off.
/// Each sync has to be the one the write did itself: nothing else is
/// written to either database after it.
async fn vote_and_snapshot_then_cut(dir: &Path) {
    let data = dir.join("data");
    std::fs::create_dir_all(data.join("vote")).unwrap();
    std::fs::create_dir_all(data.join("snapshot")).unwrap();
    lazy_disk::track(&data);

    let disk = Disk::open(&data.join("vote")).unwrap();
    let mut log = LogStore::open(&disk).unwrap();
    log.save_vote(&Vote::new(3, 1)).await.unwrap();
    log.save_vote(&the_vote()).await.unwrap();

    let disk = Disk::open(&data.join("snapshot")).unwrap();
    let mut sm = StateMachine::open(&disk).unwrap();
    let spec = SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: 1000,
        section_size: 100,
        step: 100,
    };
    let commands = vec![
        vec![Command::ConfigureSet(spec)],
        vec![Command::RegisterAlloc {
            alloc: "a".into(),
            addr: "127.0.0.1:1".into(),
            peer_addr: "127.0.0.1:2".into(),
            admin_addr: "127.0.0.1:3".into(),
            incarnation: 1,
            replaces: 0,
        }],
        vec![Command::TakeOver {
            alloc: "a".into(),
            incarnation: 1,
            first: 0,
            known: vec![0; 10],
        }],
    ];
    for (i, c) in commands.into_iter().enumerate() {
        let e = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), i as u64 + 1),
            payload: EntryPayload::Normal(Request { commands: c }),
        };
        let out = sm.apply([e]).await.unwrap();
        assert!(out[0].outcomes.iter().all(|o| o.is_ok()), "{out:?}");
    }
    let snap = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let d = lazy_disk::power_cut();
    std::fs::write(dir.join("snapshot_id"), &snap.meta.snapshot_id).unwrap();
    std::fs::write(dir.join("done"), format!("{d:?}")).unwrap();
    unsafe { libc::_exit(0) }
}

/// A vote `save_vote` returned from, and a snapshot `build_snapshot`
/// returned, are on the disk when the power is cut right after.
#[tokio::test]
async fn a_saved_vote_and_a_built_snapshot_survive_a_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    run_child("storage", dir.path());
    let dropped = std::fs::read_to_string(dir.path().join("done")).unwrap();
    let data = dir.path().join("data");

    let disk = Disk::open(&data.join("vote")).unwrap();
    let mut log = LogStore::open(&disk).unwrap();
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(the_vote()),
        "the vote saved last (power cut: {dropped})"
    );

    let disk = Disk::open(&data.join("snapshot")).unwrap();
    let mut sm = StateMachine::open(&disk).unwrap();
    let snap = sm.get_current_snapshot().await.unwrap();
    let snap = snap.unwrap_or_else(|| panic!("no snapshot after the power cut: {dropped}"));
    let id = std::fs::read_to_string(dir.path().join("snapshot_id")).unwrap();
    assert_eq!(snap.meta.snapshot_id, id);
    assert_eq!(snap.meta.last_log_id.map(|l| l.index), Some(3));
    let state: SetState =
        seqsvr_store::state_machine::decode_snapshot(snap.snapshot.get_ref()).unwrap();
    assert_eq!(state.sections.len(), 10);
    assert!(state
        .sections
        .iter()
        .all(|r| r.owner.as_deref() == Some("a")));
    // The records the snapshot's sync made durable.
    assert_eq!(sm.read().state, state);
}

async fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

fn addr(l: &TcpListener) -> String {
    l.local_addr().unwrap().to_string()
}

/// Acknowledged raises: (section, ceiling).
type Acked = Vec<(SectionId, u64)>;

/// Binds `addr` again (a restarted replica keeps its peer address: the
/// membership in its log names it).
async fn rebind(addr: &str) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) if Instant::now() < deadline => {
                eprintln!("bind {addr}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot bind {addr} again: {e}"),
        }
    }
}

/// Starts a three-replica group in `dir/store-{1,2,3}` (plaintext, on
/// loopback), on the peer addresses `again` if given (a restart); returns
/// the nodes, their peer-plane and their client-plane addresses.
async fn start_group(
    dir: &Path,
    again: Option<&[String]>,
) -> (Vec<StoreNode>, Vec<String>, Vec<String>) {
    let mut listeners = Vec::new();
    for i in 0..3 {
        listeners.push(StoreListeners {
            peer: match again {
                Some(a) => rebind(&a[i]).await,
                None => bind().await,
            },
            client: bind().await,
            admin: bind().await,
            metrics: None,
        });
    }
    let members: Vec<Member> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| Member {
            id: i as u64 + 1,
            addr: addr(&l.peer),
        })
        .collect();
    let peer = members.iter().map(|m| m.addr.clone()).collect();
    let client = listeners.iter().map(|l| addr(&l.client)).collect();
    let mut nodes = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let text = format!(
            r#"
id = {id}
data_dir = "{data}"
client_addr = "{client}"
admin_addr = "{admin}"
members = []
[set]
set_id = 0
uid_begin = 0
uid_end = 1000
section_size = 100
step = 100
[raft]
heartbeat_ms = 50
election_min_ms = 300
election_max_ms = 600
[lease]
lease_ms = 60000
margin_ms = 6000
"#,
            data = dir.join(format!("store-{id}")).display(),
            client = addr(&l.client),
            admin = addr(&l.admin),
        );
        let mut cfg: StoreConfig = toml::from_str(&text).unwrap();
        cfg.members = members.clone();
        nodes.push(StoreNode::start(cfg, l).await.unwrap());
    }
    (nodes, peer, client)
}

/// Retries `f` until it succeeds (the group is electing and configuring
/// its set meanwhile).
async fn until_ok<T, F, Fut>(what: &str, f: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = seqsvr_store_api::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                eprintln!("{what}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// In the child: a group on the lazy disk, raisers raising until [`ACKS`]
/// raises are acknowledged, then a power cut; writes the acknowledged
/// ceilings (`section value` lines) to `dir/acked` and exits. The
/// replicas live in `dir/data`, the only directory on the lazy disk.
async fn raise_then_cut(dir: &Path) {
    let data = dir.join("data");
    for id in 1..=3 {
        std::fs::create_dir_all(data.join(format!("store-{id}"))).unwrap();
    }
    lazy_disk::track(&data);
    lazy_disk::slow_fsync(SLOW_FSYNC);
    let (_nodes, peer_addrs, _) = start_group(&data, None).await;
    std::fs::write(dir.join("peers"), peer_addrs.join("\n")).unwrap();
    let peer = PeerClient::new(&peer_addrs, &plaintext()).unwrap();
    let addrs = AllocAddrs {
        client: "127.0.0.1:1".into(),
        peer: "127.0.0.1:2".into(),
        admin: "127.0.0.1:3".into(),
    };
    until_ok("register", || peer.register_alloc("a", 1, &addrs)).await;
    let (grants, _) = until_ok("take over", || {
        peer.take_over("a", 1, 0, vec![0; RAISERS as usize])
    })
    .await;
    // Acknowledged (section, ceiling); whoever takes the lock after the
    // cut finds `None`.
    let acked: Arc<Mutex<Option<Acked>>> = Arc::new(Mutex::new(Some(Vec::new())));
    let (cut_tx, mut cut_rx) = tokio::sync::mpsc::channel::<(Acked, String)>(1);
    for g in grants {
        let (peer, acked, cut_tx) = (peer.clone(), acked.clone(), cut_tx.clone());
        tokio::spawn(async move {
            let mut ceiling = g.max_seq;
            loop {
                let to = ceiling + 7;
                let got = match peer.raise("a", 1, g.section, g.epoch, to).await {
                    Ok(m) => m,
                    // A hedged repeat of this raise, after the raise itself.
                    Err(Error::Rejected(Rejection::NotAbove { current, .. })) if current >= to => {
                        to
                    }
                    Err(e) => panic!("raise section {} to {to}: {e}", g.section),
                };
                assert!(got >= to);
                ceiling = got;
                let mut guard = acked.lock().unwrap();
                let Some(list) = guard.as_mut() else {
                    return; // after the cut
                };
                list.push((g.section, to));
                if list.len() == ACKS {
                    // The power goes off right after this acknowledgement,
                    // on every replica at once.
                    let d = lazy_disk::power_cut();
                    let list = guard.take().unwrap();
                    let _ = cut_tx.try_send((list, format!("{d:?}")));
                    return;
                }
            }
        });
    }
    let (list, dropped) = cut_rx.recv().await.unwrap();
    let text: String = list.iter().map(|(s, v)| format!("{s} {v}\n")).collect();
    std::fs::write(dir.join("acked"), text).unwrap();
    std::fs::write(dir.join("done"), dropped).unwrap();
    unsafe { libc::_exit(0) }
}

/// The highest ceiling of `section` on a replica's disk: the highest raise
/// in its log, or its state machine's record if higher.
async fn durable_ceiling(dir: &Path, section: SectionId) -> u64 {
    let disk = Disk::open(dir).unwrap();
    let mut log = LogStore::open(&disk).unwrap();
    let entries = log.try_get_log_entries(0..).await.unwrap();
    let in_log = entries
        .iter()
        .filter_map(|e| match &e.payload {
            EntryPayload::Normal(r) => Some(&r.commands),
            _ => None,
        })
        .flatten()
        .filter_map(|c| match c {
            Command::Raise { section: s, to, .. } if *s == section => Some(*to),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let sm = StateMachine::open(&disk).unwrap();
    let applied = sm
        .read()
        .state
        .sections
        .get(section as usize)
        .map_or(0, |r| r.max_seq);
    in_log.max(applied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_raise_is_on_a_majority_of_disks_after_a_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    run_child("group", dir.path());
    let dropped = std::fs::read_to_string(dir.path().join("done")).unwrap();
    let acked: Vec<(SectionId, u64)> = std::fs::read_to_string(dir.path().join("acked"))
        .unwrap()
        .lines()
        .map(|l| {
            let (s, v) = l.split_once(' ').unwrap();
            (s.parse().unwrap(), v.parse().unwrap())
        })
        .collect();
    assert_eq!(acked.len(), ACKS);
    let mut lost = Vec::new();
    let mut report = Vec::new();
    for section in 0..RAISERS {
        let mut on_disk = Vec::new();
        for id in 1..=3 {
            on_disk
                .push(durable_ceiling(&dir.path().join(format!("data/store-{id}")), section).await);
        }
        // What a majority (two of three) holds at least.
        let mut sorted = on_disk.clone();
        sorted.sort_unstable();
        let majority = sorted[1];
        let mine: Vec<u64> = acked
            .iter()
            .filter(|(s, _)| *s == section)
            .map(|(_, v)| *v)
            .collect();
        let top = mine.iter().copied().max().unwrap_or(0);
        lost.extend(
            mine.iter()
                .filter(|v| **v > majority)
                .map(|v| (section, *v)),
        );
        report.push(format!(
            "section {section}: {} acknowledged, up to {top}; on the replicas' disks {on_disk:?}",
            mine.len()
        ));
    }
    let report = report.join("\n");
    eprintln!("{report}\npower cut: {dropped}");
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged raises are not on a majority of disks after the power cut \
         (first: {:?})\n{report}\npower cut: {dropped}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(8)]
    );

    // The group restarted from those disks serves every acknowledged
    // ceiling.
    let peers: Vec<String> = std::fs::read_to_string(dir.path().join("peers"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let (nodes, _, client) = start_group(&dir.path().join("data"), Some(&peers)).await;
    let read = ReadClient::new(&client, &plaintext()).unwrap();
    let sections = until_ok("read sections", || read.read_sections(0, RAISERS)).await;
    for (section, info) in sections.iter().enumerate() {
        let top = acked
            .iter()
            .filter(|(s, _)| *s as usize == section)
            .map(|(_, v)| *v)
            .max()
            .unwrap_or(0);
        assert!(
            info.record.max_seq >= top,
            "after the restart section {section} reads {}, below the acknowledged {top}",
            info.record.max_seq
        );
    }
    for n in nodes {
        n.shutdown().await;
    }
}
