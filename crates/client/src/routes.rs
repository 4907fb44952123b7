//! The client's cache of route tables: one per set, newest version wins.
//!
//! Pure data: the client fills it from AllocSvrs' `Routes` RPC and from the
//! tables attached to `NOT_OWNER` / `OUT_OF_RANGE` errors, and looks uids up
//! in it on every call.

use seqsvr_core::{RouteEntry, RouteTable, Uid};

/// Where to send a call for one uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The uid's set.
    pub set_id: u32,
    /// The cached route version of that set (a reply carrying a newer one
    /// makes the client fetch the new table).
    pub version: u64,
    /// The owning AllocSvr's address.
    pub addr: String,
}

/// What the cache says about a uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The uid's section is owned; call here.
    Owner(Target),
    /// The uid is in a known set but its section has no owner.
    Unowned,
    /// The uid is in no known set.
    NoSet,
}

/// [`Lookup`] borrowed from the cache.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Located<'a> {
    /// The uid's set's table and the run that owns its section.
    Owner(&'a RouteTable, &'a RouteEntry),
    /// The uid is in a known set but its section has no owner.
    Unowned,
    /// The uid is in no known set.
    NoSet,
}

/// Route tables by set, each the newest one seen.
#[derive(Debug, Default)]
pub(crate) struct RouteCache {
    /// One table per set, sorted by the set's first uid. Few sets exist, so
    /// a linear scan beats anything cleverer.
    tables: Vec<RouteTable>,
}

impl RouteCache {
    /// Installs `t` if its set is new or its version is newer than the
    /// cached one; returns whether it did.
    pub(crate) fn install(&mut self, t: RouteTable) -> bool {
        match self
            .tables
            .iter_mut()
            .find(|c| c.set.set_id == t.set.set_id)
        {
            Some(c) if c.version >= t.version => return false,
            Some(c) => *c = t,
            None => self.tables.push(t),
        }
        self.tables.sort_by_key(|c| c.set.uid_begin);
        true
    }

    /// The cached route version of set `set_id`.
    pub(crate) fn version(&self, set_id: u32) -> Option<u64> {
        self.table(set_id).map(|t| t.version)
    }

    /// The cached table of set `set_id`.
    pub(crate) fn table(&self, set_id: u32) -> Option<&RouteTable> {
        self.tables.iter().find(|t| t.set.set_id == set_id)
    }

    /// Where `uid` goes.
    pub(crate) fn lookup(&self, uid: Uid) -> Lookup {
        match self.locate(uid) {
            Located::Owner(t, e) => Lookup::Owner(Target {
                set_id: t.set.set_id,
                version: t.version,
                addr: e.addr.clone(),
            }),
            Located::Unowned => Lookup::Unowned,
            Located::NoSet => Lookup::NoSet,
        }
    }

    /// Where `uid` goes, borrowed (no allocation: batches look up every uid).
    pub(crate) fn locate(&self, uid: Uid) -> Located<'_> {
        let Some(t) = self.tables.iter().find(|t| t.set.contains(uid)) else {
            return Located::NoSet;
        };
        match t.entry_for_uid(uid) {
            Some(e) => Located::Owner(t, e),
            None => Located::Unowned,
        }
    }

    /// Every AllocSvr address in any cached table (may repeat).
    pub(crate) fn addrs(&self) -> impl Iterator<Item = &str> {
        self.tables
            .iter()
            .flat_map(|t| t.entries.iter().map(|e| e.addr.as_str()))
    }

    /// A copy of every cached table, by first uid.
    pub(crate) fn tables(&self) -> Vec<RouteTable> {
        self.tables.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seqsvr_proto as pb;

    fn pb_table(
        set_id: u32,
        uids: std::ops::Range<u64>,
        version: u64,
        runs: &[(u32, u32, &str)],
    ) -> pb::RouteTable {
        pb::RouteTable {
            version,
            set: Some(pb::SetSpec {
                set_id,
                uid_begin: uids.start,
                uid_end: uids.end,
                section_size: 10,
                step: 100,
            }),
            entries: runs
                .iter()
                .map(|&(first, count, addr)| pb::RouteEntry {
                    first_section: first,
                    count,
                    alloc_id: addr.to_string(),
                    addr: addr.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn table(
        set_id: u32,
        uids: std::ops::Range<u64>,
        version: u64,
        runs: &[(u32, u32, &str)],
    ) -> RouteTable {
        RouteTable::try_from(&pb_table(set_id, uids, version, runs)).unwrap()
    }

    fn owner(c: &RouteCache, uid: u64) -> Option<String> {
        match c.lookup(uid) {
            Lookup::Owner(t) => Some(t.addr),
            _ => None,
        }
    }

    #[test]
    fn looks_up_across_sets() {
        let mut c = RouteCache::default();
        assert!(c.install(table(2, 100..200, 1, &[(0, 10, "b")])));
        assert!(c.install(table(1, 0..100, 1, &[(0, 5, "a1"), (6, 4, "a2")])));
        assert_eq!(owner(&c, 0).as_deref(), Some("a1"));
        assert_eq!(c.lookup(55), Lookup::Unowned);
        assert_eq!(owner(&c, 99).as_deref(), Some("a2"));
        assert_eq!(owner(&c, 100).as_deref(), Some("b"));
        assert_eq!(c.lookup(200), Lookup::NoSet);
        let Lookup::Owner(t) = c.lookup(150) else {
            panic!()
        };
        assert_eq!((t.set_id, t.version), (2, 1));
    }

    #[test]
    fn newest_version_wins() {
        let mut c = RouteCache::default();
        assert!(c.install(table(1, 0..100, 5, &[(0, 10, "old")])));
        assert!(!c.install(table(1, 0..100, 4, &[(0, 10, "older")])));
        assert!(!c.install(table(1, 0..100, 5, &[(0, 10, "same")])));
        assert_eq!(owner(&c, 1).as_deref(), Some("old"));
        assert!(c.install(table(1, 0..100, 6, &[(0, 10, "new")])));
        assert_eq!(owner(&c, 1).as_deref(), Some("new"));
        assert_eq!(c.version(1), Some(6));
        assert_eq!(c.version(2), None);
    }

    #[test]
    fn rejects_untrustworthy_tables() {
        let bad = [
            pb::RouteTable::default(),
            pb_table(1, 0..100, 1, &[(0, 0, "a")]),
            pb_table(1, 0..100, 1, &[(0, 5, "a"), (4, 2, "b")]),
            pb_table(1, 0..100, 1, &[(5, 5, "a"), (0, 2, "b")]),
            pb_table(1, 0..100, 1, &[(8, 3, "a")]),
            pb_table(1, 0..100, 1, &[(0, 1, "")]),
            pb_table(1, 100..100, 1, &[]),
        ];
        for t in bad {
            assert!(RouteTable::try_from(&t).is_err(), "{t:?}");
        }
    }
}
