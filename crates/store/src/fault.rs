//! Fault hooks for tests and drills, compiled in only with the cargo
//! feature `fault-hooks` (off by default: a release build has none).
//!
//! One hook: the **partition switch**. A replica whose data directory holds
//! a file named [`ISOLATE_FILE`] drops every Raft RPC to and from its peers
//! and forwards nothing, while clients and AllocSvrs still reach it — the
//! gray failure the drill's `isolate:` fault and the end-to-end tests
//! inject (see `docs/architecture/failover.md`). The replica acknowledges
//! by writing into the (empty) file once the switch is on; removing the
//! file heals it.
//!
//! Without the feature, [`Isolation::is_on`] is the constant `false`, the
//! checks behind it compile away, and no file is ever looked at: the
//! production binary cannot be cut off by a stray file.

#[cfg(feature = "fault-hooks")]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "fault-hooks")]
use std::sync::Arc;

/// Whether this build has the fault hooks (`fault-hooks` feature).
pub const FAULT_HOOKS: bool = cfg!(feature = "fault-hooks");

/// The file whose presence in a replica's data directory cuts it off from
/// its peers.
#[cfg(feature = "fault-hooks")]
pub const ISOLATE_FILE: &str = "ISOLATE";

/// What a replica writes into [`ISOLATE_FILE`] once it is cut off.
#[cfg(feature = "fault-hooks")]
pub const ISOLATE_ACK: &[u8] = b"isolated\n";

/// [`ISOLATE_FILE`], if this build has the hook (for tools that drive it
/// without naming the feature themselves).
pub fn isolate_file() -> Option<&'static str> {
    #[cfg(feature = "fault-hooks")]
    return Some(ISOLATE_FILE);
    #[cfg(not(feature = "fault-hooks"))]
    None
}

/// The partition switch, shared by the Raft transport (both directions)
/// and the forwarding of calls to the leader.
#[derive(Clone, Debug, Default)]
pub struct Isolation {
    #[cfg(feature = "fault-hooks")]
    on: Arc<AtomicBool>,
}

impl Isolation {
    /// Whether this replica is cut off from its peers right now (never,
    /// without the feature).
    #[inline(always)]
    pub fn is_on(&self) -> bool {
        #[cfg(feature = "fault-hooks")]
        return self.on.load(Ordering::Relaxed);
        #[cfg(not(feature = "fault-hooks"))]
        false
    }

    /// Follows the file `path` for as long as the replica runs: present,
    /// the switch is on (and an empty file gets [`ISOLATE_ACK`]); absent,
    /// off.
    #[cfg(feature = "fault-hooks")]
    pub async fn watch(self, path: std::path::PathBuf) {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
        loop {
            tick.tick().await;
            let meta = std::fs::metadata(&path).ok();
            let now = meta.is_some();
            if self.on.swap(now, Ordering::Relaxed) != now {
                tracing::warn!(
                    isolated = now,
                    "partition fault {}",
                    if now { "on" } else { "healed" }
                );
            }
            // Acknowledged after the switch is on, so whoever waits for it
            // knows the cut is in force.
            if meta.is_some_and(|m| m.len() == 0) {
                if let Err(e) = std::fs::write(&path, ISOLATE_ACK) {
                    tracing::warn!("acknowledging {}: {e}", path.display());
                }
            }
        }
    }
}

#[cfg(all(test, feature = "fault-hooks"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_file_switches_isolation_and_is_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ISOLATE_FILE);
        let iso = Isolation::default();
        let watcher = tokio::spawn(iso.clone().watch(path.clone()));
        let settle = || tokio::time::sleep(std::time::Duration::from_millis(200));
        settle().await;
        assert!(!iso.is_on());
        std::fs::write(&path, b"").unwrap();
        settle().await;
        assert!(iso.is_on());
        assert_eq!(std::fs::read(&path).unwrap(), ISOLATE_ACK);
        std::fs::remove_file(&path).unwrap();
        settle().await;
        assert!(!iso.is_on());
        watcher.abort();
    }
}

#[cfg(all(test, not(feature = "fault-hooks")))]
mod tests {
    use super::*;

    #[test]
    fn without_the_feature_there_is_no_switch() {
        const { assert!(!FAULT_HOOKS) };
        assert_eq!(isolate_file(), None);
        assert!(!Isolation::default().is_on());
        assert_eq!(std::mem::size_of::<Isolation>(), 0);
    }
}
