//! The client's cache of route tables and of the set directory.
//!
//! Pure data: the client fills it from route tables (AllocSvrs' `Routes`,
//! stores' `GetRoutes`, the tables attached to errors) and looks uids up
//! in it on every call.
//!
//! A uid is looked up in three steps:
//! 1. its set: the directory's range holding it when a directory is known
//!    (the newest one any table carried); without one — a single-set
//!    cluster, or servers older than sets — the first cached set whose span
//!    holds it, preferring one that does not call the section absent;
//! 2. that set's cached table (none: the caller fetches it from the set's
//!    stores, which the directory lists);
//! 3. the section's place in that table: served (its owner, or none yet),
//!    moved to set `to` (a move under way: the source froze the section,
//!    the destination may already serve it and the directory flips last —
//!    so look again in `to`'s table), or absent (this table predates the
//!    section's install: refresh it).

use seqsvr_core::{Directory, Place, RouteEntry, RouteTable, SetId, Uid};

/// Most `Moved` links followed for one uid: a move is followed by at most
/// one more before the directory flips, so more means tables that
/// disagree (a stale one, or a cycle) — refresh rather than wander.
const MAX_HOPS: usize = 4;

/// Where to send a call for one uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The set whose table routed it.
    pub set_id: SetId,
    /// The cached route version of that set (a reply carrying a newer one
    /// makes the client fetch the new table).
    pub version: u64,
    /// The owning AllocSvr's address.
    pub addr: String,
}

impl Target {
    /// The target for a run of `t`.
    pub(crate) fn new(t: &RouteTable, e: &RouteEntry) -> Self {
        Self {
            set_id: t.set.set_id,
            version: t.version,
            addr: e.addr.clone(),
        }
    }
}

/// Why a uid cannot be sent anywhere right now; each names the set to
/// refresh or fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The set serves the section but no AllocSvr owns it yet.
    Unowned(SetId),
    /// The section is not served by this set (yet): frozen on its way to
    /// another set that has not installed it, or absent from a table older
    /// than its install.
    NotServed(SetId),
    /// The set's table is not cached.
    Missing(SetId),
}

impl Hold {
    /// The set concerned.
    pub(crate) fn set(self) -> SetId {
        match self {
            Hold::Unowned(s) | Hold::NotServed(s) | Hold::Missing(s) => s,
        }
    }
}

/// What the cache says about a uid, borrowed (no allocation: batches look
/// up every uid).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Located<'a> {
    /// The serving set's table and the run that owns the uid's section.
    Owner(&'a RouteTable, &'a RouteEntry),
    /// Known, but not sendable now.
    Held(Hold),
    /// No set serves the uid: in no directory range, or (without a
    /// directory) in no cached set's span.
    NoSet,
}

/// [`Located`], owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Call here.
    Owner(Target),
    /// Known, but not sendable now.
    Held(Hold),
    /// No set serves the uid.
    NoSet,
}

/// What [`RouteCache::install`] took from a table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Installed {
    /// The table replaced its set's (new set, or newer version).
    pub table: bool,
    /// Its directory replaced the cached one (newer version).
    pub directory: bool,
}

/// Route tables by set, each the newest seen, and the newest directory.
#[derive(Debug, Default)]
pub(crate) struct RouteCache {
    /// One table per set, sorted by the set's first uid, each without its
    /// directory (kept once, below). Few sets exist, so a linear scan
    /// beats anything cleverer.
    tables: Vec<RouteTable>,
    /// The newest directory any table carried.
    directory: Option<Directory>,
}

impl RouteCache {
    /// Keeps `t`'s directory if it is newer than the cached one, and `t`
    /// if its set is new or its version newer than the cached table's.
    /// Directory and table are judged apart: a directory change does not
    /// bump route versions, and an old table may carry a newer copy.
    pub(crate) fn install(&mut self, mut t: RouteTable) -> Installed {
        let mut done = Installed::default();
        if let Some(d) = t.directory.take() {
            // Version 0 is no directory at all (nothing was ever applied).
            if d.version > self.directory_version() {
                self.directory = Some(d);
                done.directory = true;
            }
        }
        match self
            .tables
            .iter_mut()
            .find(|c| c.set.set_id == t.set.set_id)
        {
            Some(c) if c.version >= t.version => return done,
            Some(c) => *c = t,
            None => self.tables.push(t),
        }
        self.tables.sort_by_key(|c| c.set.uid_begin);
        done.table = true;
        done
    }

    /// The cached route version of set `set_id`.
    pub(crate) fn version(&self, set_id: SetId) -> Option<u64> {
        self.table(set_id).map(|t| t.version)
    }

    /// The cached table of set `set_id`.
    pub(crate) fn table(&self, set_id: SetId) -> Option<&RouteTable> {
        self.tables.iter().find(|t| t.set.set_id == set_id)
    }

    /// The cached directory, if any table carried one.
    pub(crate) fn directory(&self) -> Option<&Directory> {
        self.directory.as_ref()
    }

    /// The cached directory's version (0: none).
    pub(crate) fn directory_version(&self) -> u64 {
        self.directory.as_ref().map_or(0, |d| d.version)
    }

    /// The client-plane addresses of set `set_id`'s stores, as the
    /// directory lists them (empty: unknown).
    pub(crate) fn stores(&self, set_id: SetId) -> &[String] {
        self.directory
            .as_ref()
            .and_then(|d| d.sets.get(&set_id))
            .map_or(&[], |s| s.stores.as_slice())
    }

    /// Where `uid` goes, owned.
    pub(crate) fn lookup(&self, uid: Uid) -> Lookup {
        match self.locate(uid) {
            Located::Owner(t, e) => Lookup::Owner(Target::new(t, e)),
            Located::Held(h) => Lookup::Held(h),
            Located::NoSet => Lookup::NoSet,
        }
    }

    /// Where `uid` goes (see the module docs).
    pub(crate) fn locate(&self, uid: Uid) -> Located<'_> {
        let set = match &self.directory {
            Some(d) => d.set_of(uid),
            None => self.scan(uid),
        };
        match set {
            Some(set) => self.follow(uid, set),
            None => Located::NoSet,
        }
    }

    /// Without a directory: the first cached set whose span holds `uid`
    /// and does not call its section absent, else the first holding it.
    fn scan(&self, uid: Uid) -> Option<SetId> {
        let mut first = None;
        for t in self.tables.iter().filter(|t| t.set.contains(uid)) {
            first.get_or_insert(t.set.set_id);
            let absent = t
                .set
                .section_of(uid)
                .is_none_or(|s| t.placement.place_of(s) == Place::Absent);
            if !absent {
                return Some(t.set.set_id);
            }
        }
        first
    }

    /// Looks `uid` up from set `set`'s table, following `Moved` links.
    fn follow(&self, uid: Uid, mut set: SetId) -> Located<'_> {
        for _ in 0..=MAX_HOPS {
            let Some(t) = self.table(set) else {
                return Located::Held(Hold::Missing(set));
            };
            // Outside the table's span: the table and the directory
            // disagree; a fresh table is the only remedy.
            let Some(s) = t.set.section_of(uid) else {
                return Located::Held(Hold::NotServed(set));
            };
            match t.placement.place_of(s) {
                Place::Serving => {
                    return match t.entry_for_section(s) {
                        Some(e) => Located::Owner(t, e),
                        None => Located::Held(Hold::Unowned(set)),
                    }
                }
                Place::Absent => return Located::Held(Hold::NotServed(set)),
                Place::Moved { to } => set = to,
            }
        }
        Located::Held(Hold::NotServed(set))
    }

    /// Every AllocSvr address in any cached table, then every store
    /// address in the directory (may repeat).
    pub(crate) fn addrs(&self) -> impl Iterator<Item = &str> {
        let allocs = self.allocs();
        let stores = self
            .directory
            .iter()
            .flat_map(|d| d.sets.values().flat_map(|s| s.stores.iter()));
        allocs.chain(stores.map(String::as_str))
    }

    /// Every AllocSvr address in any cached table (may repeat).
    pub(crate) fn allocs(&self) -> impl Iterator<Item = &str> {
        self.tables
            .iter()
            .flat_map(|t| t.entries.iter().map(|e| e.addr.as_str()))
    }

    /// A copy of every cached table, by first uid (without directory).
    pub(crate) fn tables(&self) -> Vec<RouteTable> {
        self.tables.clone()
    }
}

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
