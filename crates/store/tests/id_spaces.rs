//! Id namespaces on disk: their records survive a reopen, snapshots carry
//! them, and a snapshot written before they existed still installs
//! (docs/ids.md; a new holder's floor is only as good as the ceiling the
//! store kept).

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};
use seqsvr_core::ids::Layout;
use seqsvr_core::{LeaseTerms, SetSpec};
use seqsvr_store::disk::Disk;
use seqsvr_store::state_machine::StateMachine;
use seqsvr_store::types::{Command, Request, TypeConfig};
use seqsvr_store_core::command::Reply;

fn entry(index: u64, commands: Vec<Command>) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request { commands }),
    }
}

fn commands() -> Vec<Command> {
    vec![
        Command::ConfigureSet(SetSpec::new(0, 0..1000)),
        Command::SetLease(LeaseTerms::default()),
        Command::RegisterAlloc {
            alloc: "a".into(),
            addr: "10.0.0.1:1".into(),
            peer_addr: "10.0.0.1:2".into(),
            admin_addr: "10.0.0.1:3".into(),
            incarnation: 7,
            replaces: 0,
        },
        Command::CreateIdSpace {
            name: "msg".into(),
            layout: Layout::twitter(),
            window_ms: 3000,
        },
        Command::ClaimWorker {
            ns: "msg".into(),
            alloc: "a".into(),
            incarnation: 7,
            now: 1_000_000,
            reclaim: vec![],
        },
        Command::RaiseWorker {
            ns: "msg".into(),
            worker: 0,
            alloc: "a".into(),
            incarnation: 7,
            epoch: 1,
            to: 1_005_000,
        },
    ]
}

#[tokio::test]
async fn ceilings_survive_a_reopen_and_travel_in_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let (state, snap) = {
        let disk = Disk::open(dir.path()).unwrap();
        let mut sm = StateMachine::open(&disk).unwrap();
        let out = sm.apply(vec![entry(1, commands())]).await.unwrap();
        assert!(out[0].outcomes.iter().all(|o| o.is_ok()), "{out:?}");
        assert_eq!(
            out[0].outcomes[5],
            Ok(Reply::WorkerRaised { ceiling: 1_005_000 })
        );
        disk.sync().unwrap();
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let state = sm.read().state.clone();
        (state, snap)
    };
    let w = &state.ids.spaces["msg"].workers[&0];
    assert_eq!(w.ceiling, 1_005_000);
    // Reopened from its records.
    let disk = Disk::open(dir.path()).unwrap();
    let sm = StateMachine::open(&disk).unwrap();
    assert_eq!(sm.read().state, state);
    // A fresh replica installs the snapshot.
    let other = tempfile::tempdir().unwrap();
    let mut sm2 = StateMachine::open(&Disk::open(other.path()).unwrap()).unwrap();
    sm2.install_snapshot(&snap.meta, snap.snapshot)
        .await
        .unwrap();
    assert_eq!(sm2.read().state, state);
}

#[tokio::test]
async fn a_snapshot_from_before_id_namespaces_installs() {
    let dir = tempfile::tempdir().unwrap();
    let mut sm = StateMachine::open(&Disk::open(dir.path()).unwrap()).unwrap();
    let mut state = seqsvr_store::state::SetState::default();
    let mut dirty = Vec::new();
    for c in &commands()[..3] {
        state.apply(c, &mut dirty).unwrap();
    }
    // The state alone, as snapshots were written before.
    let old = seqsvr_core::codec::encode(&state).unwrap();
    let snap = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    sm.install_snapshot(&snap.meta, Box::new(std::io::Cursor::new(old)))
        .await
        .unwrap();
    assert_eq!(sm.read().state, state);
    assert!(sm.read().state.ids.spaces.is_empty());
}
