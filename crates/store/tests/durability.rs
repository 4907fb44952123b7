//! Durability at scale: a set of 10^5 sections, its snapshot and every value
//! the log may hold stay out of sled's blob files (which sled never
//! fsyncs), and a replica killed right after snapshotting (no destructors,
//! no flush: like kill -9) restarts from that snapshot intact (promise 2).

use std::time::Instant;

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};
use seqsvr_core::{LeaseTerms, SetSpec};
use seqsvr_store::disk::{Disk, MAX_VALUE};
use seqsvr_store::state::SetState;
use seqsvr_store::state_machine::StateMachine;
use seqsvr_store::types::{Command, Request, TypeConfig};

const SECTIONS: u64 = 100_000;
const CHILD: &str = "SEQSVR_DURABILITY_CHILD";

fn entry(index: u64, commands: Vec<Command>) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request { commands }),
    }
}

/// Commands that build a set of 10^5 sections, every one owned.
fn commands() -> Vec<Vec<Command>> {
    let spec = SetSpec {
        set_id: 7,
        uid_begin: 0,
        uid_end: SECTIONS * 1000,
        section_size: 1000,
        step: 10_000,
    };
    let mut out = vec![vec![
        Command::ConfigureSet(spec),
        Command::SetLease(LeaseTerms::default()),
    ]];
    let allocs = ["alloc-1", "alloc-2", "alloc-3"];
    out.push(
        allocs
            .iter()
            .enumerate()
            .map(|(i, a)| Command::RegisterAlloc {
                alloc: a.to_string(),
                addr: format!("10.0.0.{i}:7201"),
                peer_addr: format!("10.0.0.{i}:7211"),
                admin_addr: format!("10.0.0.{i}:7221"),
                incarnation: i as u64 + 1,
                replaces: 0,
            })
            .collect(),
    );
    let mut first = 0u32;
    while u64::from(first) < SECTIONS {
        let count = 1024.min(SECTIONS as u32 - first);
        let a = (first / 1024) as usize % 3;
        out.push(vec![Command::TakeOver {
            alloc: allocs[a].into(),
            incarnation: a as u64 + 1,
            first,
            known: vec![0; count as usize],
        }]);
        first += count;
    }
    out
}

async fn build(dir: &std::path::Path) -> SetState {
    let disk = Disk::open(dir).unwrap();
    let mut sm = StateMachine::open(&disk).unwrap();
    let t = Instant::now();
    for (i, cmds) in commands().into_iter().enumerate() {
        let out = sm.apply(vec![entry(i as u64 + 1, cmds)]).await.unwrap();
        assert!(out[0].outcomes.iter().all(|o| o.is_ok()), "{out:?}");
    }
    let applied = t.elapsed();
    let t = Instant::now();
    let snap = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    eprintln!(
        "{SECTIONS} sections: applied in {applied:?}, snapshot of {} bytes built and fsynced in {:?}",
        snap.snapshot.get_ref().len(),
        t.elapsed()
    );
    assert_eq!(disk.blob_files().unwrap(), 0, "sled wrote blob files");
    let state = sm.read().state.clone();
    state
}

/// In the child: build, snapshot, then die at once — no destructor, no
/// flush, as under kill -9.
#[tokio::test]
async fn child_builds_and_dies() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return;
    };
    build(std::path::Path::new(&dir)).await;
    std::process::abort();
}

#[tokio::test]
async fn a_snapshot_of_100k_sections_stays_inline_and_survives_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_builds_and_dies", "--nocapture"])
        .env(CHILD, dir.path())
        .status()
        .unwrap();
    assert!(!status.success(), "the child was meant to die");
    // Restart from what is on disk.
    let disk = Disk::open(dir.path()).unwrap();
    let mut sm = StateMachine::open(&disk).unwrap();
    let snap = sm
        .get_current_snapshot()
        .await
        .unwrap()
        .expect("a snapshot");
    let state: SetState =
        seqsvr_store::state_machine::decode_snapshot(snap.snapshot.get_ref()).unwrap();
    assert_eq!(state.sections.len() as u64, SECTIONS);
    assert!(state
        .sections
        .iter()
        .all(|r| r.owner.is_some() && r.epoch == 1));
    assert_eq!(state.sections[99_999].max_seq, 10_000);
    // The records survived too, and match the snapshot.
    assert_eq!(sm.read().state, state);
    // A fresh replica installs it without blobs either.
    let other = tempfile::tempdir().unwrap();
    let disk2 = Disk::open(other.path()).unwrap();
    let mut sm2 = StateMachine::open(&disk2).unwrap();
    let meta = snap.meta.clone();
    sm2.install_snapshot(&meta, snap.snapshot).await.unwrap();
    assert_eq!(sm2.read().state, state);
    assert_eq!(disk2.blob_files().unwrap(), 0);
}

#[test]
fn values_at_the_limit_never_become_blobs() {
    // What the log may hold at worst: consecutive entries of the largest
    // size the proposer lets through.
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    let tree = disk.tree("log").unwrap();
    for i in 0u64..400 {
        tree.insert(i.to_be_bytes(), vec![i as u8; MAX_VALUE])
            .unwrap();
    }
    disk.sync().unwrap();
    assert_eq!(disk.blob_files().unwrap(), 0);
}
