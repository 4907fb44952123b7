//! Table tests for the pure lookup: directory, placement, moves.

use std::collections::BTreeMap;

use seqsvr_core::directory::{DirRange, DirSet};
use seqsvr_core::{Placement, SetSpec};
use seqsvr_proto as pb;

use super::*;

/// Sections of 100 uids.
fn spec(set: SetId, uids: std::ops::Range<u64>) -> SetSpec {
    SetSpec {
        section_size: 100,
        ..SetSpec::new(set, uids)
    }
}

/// Set `set`'s table over `uids` at `version`: runs `(first, count,
/// addr)`, non-serving runs `(first, end, place)`.
fn table(
    set: SetId,
    uids: std::ops::Range<u64>,
    version: u64,
    runs: &[(u32, u32, &str)],
    places: &[(u32, u32, Place)],
) -> RouteTable {
    let mut placement = Placement::default();
    for &(first, end, place) in places {
        assert!(placement.set(first..end, place));
    }
    RouteTable {
        version,
        set: spec(set, uids),
        entries: runs
            .iter()
            .map(|&(first, count, addr)| RouteEntry {
                first,
                count,
                alloc: addr.into(),
                addr: addr.into(),
            })
            .collect(),
        placement,
        directory: None,
    }
}

/// A directory at `version` over sets `(id, span)` with `ranges`
/// `(begin, end, set)`.
fn dir(
    version: u64,
    sets: &[(SetId, std::ops::Range<u64>)],
    ranges: &[(u64, u64, SetId)],
) -> Directory {
    Directory {
        version,
        move_id: 0,
        sets: sets
            .iter()
            .map(|(id, uids)| {
                let s = DirSet {
                    spec: spec(*id, uids.clone()),
                    stores: vec![format!("store-{id}")],
                    admin: vec![format!("admin-{id}")],
                };
                (*id, s)
            })
            .collect::<BTreeMap<_, _>>(),
        ranges: ranges
            .iter()
            .map(|&(begin, end, set)| DirRange { begin, end, set })
            .collect(),
        moving: None,
    }
}

/// A cache holding `tables`, the first carrying `d` if given.
fn cache(d: Option<Directory>, tables: Vec<RouteTable>) -> RouteCache {
    let mut c = RouteCache::default();
    let mut d = d;
    for mut t in tables {
        t.directory = d.take();
        c.install(t);
    }
    assert!(d.is_none(), "a directory needs a table to ride on");
    c
}

fn owner(set: SetId, version: u64, addr: &str) -> Lookup {
    Lookup::Owner(Target {
        set_id: set,
        version,
        addr: addr.into(),
    })
}

const MOVED_TO_1: Place = Place::Moved { to: 1 };

/// Set 0 (home, uids 0..1000) and set 1 (span 0..2000, overlapping set
/// 0's: it may receive set 0's ranges), as a move of uids 500..1000
/// from set 0 to set 1 sees them at each step.
#[test]
fn lookup_table() {
    // Directory before the flip: 0..1000 → set 0, 1000..2000 → set 1.
    let before = || {
        Some(dir(
            3,
            &[(0, 0..1000), (1, 0..2000)],
            &[(0, 1000, 0), (1000, 2000, 1)],
        ))
    };
    // After the flip: 500..2000 → set 1.
    let after = || {
        Some(dir(
            4,
            &[(0, 0..1000), (1, 0..2000)],
            &[(0, 500, 0), (500, 2000, 1)],
        ))
    };
    let home_serving = || table(0, 0..1000, 7, &[(0, 10, "a0")], &[]);
    let home_frozen = || table(0, 0..1000, 8, &[(0, 5, "a0")], &[(5, 10, MOVED_TO_1)]);
    // Set 1 before the install: only 1000..2000 (sections 10..20) served.
    let dest_absent = || table(1, 0..2000, 2, &[(10, 10, "b1")], &[(0, 10, Place::Absent)]);
    let dest_installed = || table(1, 0..2000, 3, &[(5, 15, "b1")], &[(0, 5, Place::Absent)]);
    let dest_unowned = || table(1, 0..2000, 3, &[(10, 10, "b1")], &[(0, 5, Place::Absent)]);
    #[rustfmt::skip]
    let cases: Vec<(&str, RouteCache, u64, Lookup)> = vec![
        ("no directory: the span holds it",
            cache(None, vec![home_serving()]), 700, owner(0, 7, "a0")),
        ("no directory, outside every span",
            cache(None, vec![home_serving()]), 1000, Lookup::NoSet),
        ("directory picks set 0",
            cache(before(), vec![home_serving(), dest_absent()]), 700, owner(0, 7, "a0")),
        ("directory picks set 1",
            cache(before(), vec![home_serving(), dest_absent()]), 1500, owner(1, 2, "b1")),
        ("set 1 not cached",
            cache(before(), vec![home_serving()]), 1500, Lookup::Held(Hold::Missing(1))),
        ("frozen, destination not installed",
            cache(before(), vec![home_frozen(), dest_absent()]), 700,
            Lookup::Held(Hold::NotServed(1))),
        ("frozen, destination table not cached",
            cache(before(), vec![home_frozen()]), 700, Lookup::Held(Hold::Missing(1))),
        ("frozen, destination installed: the directory has not flipped yet",
            cache(before(), vec![home_frozen(), dest_installed()]), 700, owner(1, 3, "b1")),
        ("frozen, installed, no owner yet",
            cache(before(), vec![home_frozen(), dest_unowned()]), 700,
            Lookup::Held(Hold::Unowned(1))),
        ("frozen section's neighbour stays home",
            cache(before(), vec![home_frozen(), dest_installed()]), 499, owner(0, 8, "a0")),
        ("flipped: straight to set 1",
            cache(after(), vec![home_frozen(), dest_installed()]), 700, owner(1, 3, "b1")),
        ("flipped, set 1's table older than the install",
            cache(after(), vec![home_frozen(), dest_absent()]), 700,
            Lookup::Held(Hold::NotServed(1))),
        ("flipped, set 0's stale table is not asked",
            cache(after(), vec![home_serving(), dest_installed()]), 700, owner(1, 3, "b1")),
        ("in a span, in no directory range",
            cache(Some(dir(5, &[(0, 0..1000)], &[(0, 600, 0)])), vec![home_serving()]), 700,
            Lookup::NoSet),
        ("past every range",
            cache(after(), vec![home_serving()]), u64::MAX, Lookup::NoSet),
        ("no directory, overlapping spans: moved is followed",
            cache(None, vec![home_frozen(), dest_installed()]), 700, owner(1, 3, "b1")),
        ("no directory, overlapping spans: absent is skipped",
            cache(None, vec![dest_installed(), home_serving()]), 300, owner(0, 7, "a0")),
        ("no directory, absent everywhere",
            cache(None, vec![dest_absent()]), 300, Lookup::Held(Hold::NotServed(1))),
        ("moves that loop end in a refresh",
            cache(before(), vec![
                home_frozen(),
                table(1, 0..2000, 9, &[], &[(0, 10, Place::Moved { to: 0 })]),
            ]), 700, Lookup::Held(Hold::NotServed(1))),
    ];
    for (name, c, uid, want) in cases {
        assert_eq!(c.lookup(uid), want, "{name}");
    }
}

#[test]
fn newest_directory_wins_whatever_the_table() {
    let d = |v| Some(dir(v, &[(0, 0..1000)], &[(0, 1000, 0)]));
    let mut c = RouteCache::default();
    let with = |version, directory| RouteTable {
        directory,
        ..table(0, 0..1000, version, &[(0, 10, "a")], &[])
    };
    // Version 0 is no directory.
    assert_eq!(
        c.install(with(5, d(0))),
        Installed {
            table: true,
            directory: false
        }
    );
    assert!(c.directory().is_none());
    assert!(c.install(with(5, d(3))).directory);
    assert!(!c.install(with(6, d(2))).directory);
    assert_eq!(c.directory_version(), 3);
    // An old table still brings a newer directory.
    assert_eq!(
        c.install(with(4, d(9))),
        Installed {
            table: false,
            directory: true
        }
    );
    assert_eq!((c.version(0), c.directory_version()), (Some(6), 9));
    assert_eq!(c.stores(0), ["store-0".to_string()]);
    assert!(c.stores(1).is_empty());
    assert!(c.tables().iter().all(|t| t.directory.is_none()));
    let addrs: Vec<&str> = c.addrs().collect();
    assert_eq!(addrs, ["a", "store-0"]);
}

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

fn pb_to_core(
    set_id: u32,
    uids: std::ops::Range<u64>,
    version: u64,
    runs: &[(u32, u32, &str)],
) -> RouteTable {
    RouteTable::try_from(&pb_table(set_id, uids, version, runs)).unwrap()
}

fn addr_of(c: &RouteCache, uid: u64) -> Option<String> {
    match c.lookup(uid) {
        Lookup::Owner(t) => Some(t.addr),
        _ => None,
    }
}

#[test]
fn looks_up_across_sets_without_a_directory() {
    let mut c = RouteCache::default();
    assert!(c.install(pb_to_core(2, 100..200, 1, &[(0, 10, "b")])).table);
    assert!(
        c.install(pb_to_core(1, 0..100, 1, &[(0, 5, "a1"), (6, 4, "a2")]))
            .table
    );
    assert_eq!(addr_of(&c, 0).as_deref(), Some("a1"));
    assert_eq!(c.lookup(55), Lookup::Held(Hold::Unowned(1)));
    assert_eq!(addr_of(&c, 99).as_deref(), Some("a2"));
    assert_eq!(addr_of(&c, 100).as_deref(), Some("b"));
    assert_eq!(c.lookup(200), Lookup::NoSet);
    assert_eq!(c.lookup(150), owner(2, 1, "b"));
}

#[test]
fn newest_version_wins() {
    let mut c = RouteCache::default();
    assert!(c.install(pb_to_core(1, 0..100, 5, &[(0, 10, "old")])).table);
    assert!(
        !c.install(pb_to_core(1, 0..100, 4, &[(0, 10, "older")]))
            .table
    );
    assert!(
        !c.install(pb_to_core(1, 0..100, 5, &[(0, 10, "same")]))
            .table
    );
    assert_eq!(addr_of(&c, 1).as_deref(), Some("old"));
    assert!(c.install(pb_to_core(1, 0..100, 6, &[(0, 10, "new")])).table);
    assert_eq!(addr_of(&c, 1).as_deref(), Some("new"));
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
