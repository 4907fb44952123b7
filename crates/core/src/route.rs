//! The route table: which AllocSvr serves which sections of a set.
//!
//! The store owns the authoritative table (per section: owner and epoch);
//! this is the compact, versioned view handed to clients and AllocSvrs:
//! consecutive sections with the same owner collapse into one entry. The
//! version grows every time any section changes hands, so a client can tell
//! whether its cached copy is stale by comparing one number.

use serde::{Deserialize, Serialize};

use crate::directory::{Directory, Placement};
use crate::section::{SectionId, SetSpec, Uid};

/// An AllocSvr's stable name (e.g. `alloc-1`).
pub type AllocId = String;

/// A fencing token: grows every time a section changes hands (or its owner
/// restarts). The store rejects ceiling raises that carry an older one.
pub type Epoch = u64;

/// A run of consecutive sections served by one AllocSvr.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteEntry {
    /// First section of the run.
    pub first: SectionId,
    /// Number of sections in the run (≥ 1).
    pub count: u32,
    /// The owner's name.
    pub alloc: AllocId,
    /// The owner's client-facing address (`host:port`).
    pub addr: String,
}

impl RouteEntry {
    /// Whether section `s` is in this run.
    pub fn covers(&self, s: SectionId) -> bool {
        s >= self.first && s - self.first < self.count
    }
}

/// A versioned route table for one set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteTable {
    /// Grows whenever any section changes owner.
    pub version: u64,
    /// The set this table routes.
    pub set: SetSpec,
    /// Runs of owned sections, sorted by `first`, non-overlapping. Sections
    /// in no run have no owner yet.
    pub entries: Vec<RouteEntry>,
    /// The sections of the span this set does not serve (absent, or moved
    /// to another set): a client looks those up in the directory.
    pub placement: Placement,
    /// The directory as the set's store holds it (the home set's own, or
    /// a copy), if any.
    pub directory: Option<Directory>,
}

impl RouteTable {
    /// Builds the compact table from per-section owners given in section
    /// order (`None`: unowned) and a way to find an owner's address.
    pub fn from_owners<'a>(
        version: u64,
        set: SetSpec,
        owners: impl IntoIterator<Item = Option<&'a AllocId>>,
        addr_of: impl Fn(&AllocId) -> String,
    ) -> Self {
        let mut entries: Vec<RouteEntry> = Vec::new();
        for (s, owner) in owners.into_iter().enumerate() {
            let s = s as SectionId;
            let Some(owner) = owner else { continue };
            match entries.last_mut() {
                Some(e) if e.alloc == *owner && e.first + e.count == s => e.count += 1,
                _ => entries.push(RouteEntry {
                    first: s,
                    count: 1,
                    alloc: owner.clone(),
                    addr: addr_of(owner),
                }),
            }
        }
        Self {
            version,
            set,
            entries,
            placement: Placement::default(),
            directory: None,
        }
    }

    /// The entry serving section `s`, if any.
    pub fn entry_for_section(&self, s: SectionId) -> Option<&RouteEntry> {
        let i = self.entries.partition_point(|e| e.first + e.count <= s);
        self.entries.get(i).filter(|e| e.covers(s))
    }

    /// The entry serving `uid`, if the uid is in the set and its section is owned.
    pub fn entry_for_uid(&self, uid: Uid) -> Option<&RouteEntry> {
        self.entry_for_section(self.set.section_of(uid)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapses_runs_and_looks_up() {
        let set = SetSpec {
            section_size: 10,
            ..SetSpec::new(0, 0..60)
        };
        let a = "a".to_string();
        let b = "b".to_string();
        let owners = [Some(&a), Some(&a), None, Some(&b), Some(&b), Some(&a)];
        let t = RouteTable::from_owners(7, set, owners, |id| format!("{id}:1"));
        let runs: Vec<_> = t
            .entries
            .iter()
            .map(|e| (e.first, e.count, e.alloc.as_str()))
            .collect();
        assert_eq!(runs, vec![(0, 2, "a"), (3, 2, "b"), (5, 1, "a")]);
        assert_eq!(t.entry_for_uid(15).unwrap().alloc, "a");
        assert!(t.entry_for_uid(25).is_none());
        assert_eq!(t.entry_for_uid(49).unwrap().addr, "b:1");
        assert_eq!(t.entry_for_uid(59).unwrap().first, 5);
        assert!(t.entry_for_uid(60).is_none());
    }
}
