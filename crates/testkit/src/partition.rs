//! The store's partition fault, as the end-to-end tests drive it.

use std::path::Path;
use std::time::{Duration, Instant};

/// Cuts the store replica whose data dir is `data_dir` off from its peers
/// (the partition fault, `seqsvr_store::fault`) and returns once the
/// replica acknowledges it in force: a step that needs the partition must
/// not race its start (a sleep was not enough on a fast build: a learner
/// caught up in 4 ms, before the cut took effect). Panics after 30 s.
pub async fn isolate(data_dir: &Path) {
    use seqsvr_store::fault::{ISOLATE_ACK, ISOLATE_FILE};
    let file = data_dir.join(ISOLATE_FILE);
    std::fs::write(&file, b"").unwrap();
    let started = Instant::now();
    while std::fs::read(&file).map_or(true, |b| b != ISOLATE_ACK) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} never acknowledged the partition: is the seqsvr binary under test built \
             with the store's fault hooks? (`strings <it> | grep 'partition fault'`; a \
             `cargo test --workspace --release` run was seen to leave a build without them \
             at the test's path)",
            data_dir.display(),
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "{} acknowledged the partition after {:?}",
        data_dir.display(),
        started.elapsed()
    );
}
