//! openraft's storage conformance suite, run on the sled log store and state
//! machine (each test gets a fresh database in a temporary directory).

use openraft::testing::{StoreBuilder, Suite};
use seqsvr_store::disk::Disk;
use seqsvr_store::log_store::LogStore;
use seqsvr_store::state_machine::StateMachine;
use seqsvr_store::types::{StorageError, TypeConfig};

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for SledBuilder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = Disk::open(dir.path()).expect("open disk");
        let log = LogStore::open(&disk).expect("open log");
        let sm = StateMachine::open(&disk)?;
        Ok((dir, log, sm))
    }
}

#[test]
fn sled_store_passes_openraft_suite() {
    if let Err(e) = Suite::test_all(SledBuilder) {
        panic!("storage suite failed: {e}");
    }
}
