//! The route table as the client and peer planes serve it, built once per
//! change and shared.
//!
//! Building the table is a walk over every section (owners into runs,
//! addresses looked up); every `GetRoutes` used to make that walk under
//! the state machine's read lock, which `apply` needs for writing. The
//! table changes only with the route version (owners, addresses,
//! placement) or the directory's version (a directory change does not
//! bump route versions), so it is built once per pair and handed out as
//! an `Arc`; a call only copies the finished table into its reply. The
//! pair is enough as a key, across snapshot installs too: every replica
//! reaches the same state at the same versions (Raft), and every change
//! of what the table shows bumps one of them, as clients already rely on
//! (a client replaces a table only by a newer version).

use std::sync::{Arc, Mutex};

use seqsvr_proto::{self as pb};

use crate::state::SetState;

/// The last route table built, keyed by its route and directory versions.
#[derive(Debug, Clone, Default)]
pub(crate) struct RouteSnapshot(Arc<Mutex<Option<Arc<pb::RouteTable>>>>);

impl RouteSnapshot {
    /// The route table of `state` (`None`: not configured yet), built
    /// only if the last one built is of other versions. Called under the
    /// state machine's read lock, so no apply runs meanwhile; callers
    /// that arrive while it is built wait for that one build.
    pub(crate) fn of(&self, state: &SetState) -> Option<Arc<pb::RouteTable>> {
        state.set.as_ref()?;
        let directory = state.directory.as_ref().map_or(0, |d| d.version);
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let current = slot.as_ref().filter(|t| {
            t.version == state.route_version
                && t.directory.as_ref().map_or(0, |d| d.version) == directory
        });
        if let Some(t) = current {
            return Some(t.clone());
        }
        let t = Arc::new(pb::RouteTable::from(&state.route_table()?));
        *slot = Some(t.clone());
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use seqsvr_core::SetSpec;

    use super::*;
    use crate::types::Command;

    #[test]
    fn one_build_per_route_version() {
        let mut s = SetState::default();
        let snap = RouteSnapshot::default();
        assert!(snap.of(&s).is_none());
        let spec = SetSpec {
            set_id: 0,
            uid_begin: 0,
            uid_end: 1000,
            section_size: 100,
            step: 10,
        };
        s.apply(&Command::ConfigureSet(spec), &mut Vec::new())
            .unwrap();
        let a = snap.of(&s).unwrap();
        let b = snap.of(&s).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "built again at the same version");
        s.route_version += 1;
        let c = snap.of(&s).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.version, s.route_version);
        assert_eq!(*c, pb::RouteTable::from(&s.route_table().unwrap()));
    }
}
