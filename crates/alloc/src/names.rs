//! [`NameTable`]: the named counters an AllocSvr holds, one counter per
//! name (`docs/counters.md`), at most a configured number of them.
//!
//! A name is routed by its position (`seqsvr_core::name_key`), so it has a
//! section, an owner, a lease, an epoch and a ceiling like any uid. What a
//! position's cell is for a uid, an entry of this table is for a name: the
//! last number handed out for it here. A name's `cur_seq` is
//! `max(entry, section base)`, the base being the take-over's skip-ahead
//! value, exactly as a uid's is `max(cell, base)`.
//!
//! # Forgetting a name, and why it never repeats
//! The table holds at most `max_names` entries. When it is full, a CLOCK
//! hand picks an entry not used since its last pass and forgets it; before
//! the entry goes, its value is folded into its section's **forgotten
//! floor** (`fetch_max`, under the shard's lock). A name not held starts
//! at `max(floor, base)`. Every number ever handed out for a name `x` is
//! at or below that start:
//!
//! - handed out by another owner, or by this process under an earlier
//!   epoch: at most the ceiling of that epoch, which is at most the current
//!   grant's previous ceiling, the base (the store begins every epoch at
//!   its current ceiling, which never decreases: promise 1 across owners,
//!   `docs/architecture/promises.md`);
//! - handed out here under the current epoch: `x`'s entry held it, and the
//!   entry only grows; if the entry was forgotten, the floor took its value
//!   first, and the floor only grows.
//!
//! So a name first seen, or forgotten and seen again, skips ahead (never
//! back, never a repeat) to at most the highest number the section handed
//! out, which is below its ceiling: no store write is needed to recreate
//! it. A name and its entry live in one shard, so a recreation takes that
//! shard's lock after the eviction that set the floor released it.
//!
//! The numbers a recreated name jumps over (`floor − base` at its
//! creation, an upper bound of what it skipped) are counted, as are names
//! created and forgotten.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, RwLock};

use hashbrown::HashTable;
use seqsvr_core::{CounterDecl, SectionId, SetSpec, NAME_KEYS};

/// Names held by one AllocSvr unless configured otherwise: about 75 MB of
/// short names (`docs/benchmarks.md`, Named counters).
pub const DEFAULT_MAX_NAMES: usize = 1_000_000;

/// Shards of a large table: a call locks one shard, so distinct names
/// rarely wait on each other.
const SHARDS: usize = 64;

/// Below this many names a table has one shard, so its bound is exact
/// (a sharded bound is the largest multiple of the shard count below it).
const SHARDED_FROM: usize = 4096;

/// One name held.
#[derive(Debug)]
struct Entry {
    /// The name's bytes.
    name: Box<[u8]>,
    /// The last number handed out for it here (the caller maxes it with
    /// the section's base).
    value: u64,
    /// Its position's section, whose floor takes `value` when forgotten.
    section: SectionId,
    /// Used since the CLOCK hand last passed it.
    referenced: bool,
}

/// A share of the names, under one lock.
#[derive(Debug, Default)]
struct Shard {
    /// Name → index in `entries`.
    index: HashTable<u32>,
    /// The names held, in no order; a forgotten one's slot takes the new.
    entries: Vec<Entry>,
    /// The CLOCK hand: the next entry to look at when one must go.
    hand: usize,
}

/// Counters, for metrics (monotonic).
#[derive(Debug, Default)]
struct Counters {
    created: AtomicU64,
    forgotten: AtomicU64,
    skipped: AtomicU64,
    limit_errors: AtomicU64,
}

/// A snapshot of a name table's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NameStats {
    /// Names held now.
    pub held: u64,
    /// Names created: first seen, or seen again after being forgotten.
    pub created: u64,
    /// Names forgotten to stay within the bound.
    pub forgotten: u64,
    /// Numbers skipped by names created above their section's base
    /// because names of the section were forgotten (an upper bound).
    pub skipped: u64,
    /// Calls refused by a declared counter's limits (its maximum).
    pub limit_errors: u64,
}

/// One name held, as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldName {
    /// The name's bytes.
    pub name: Vec<u8>,
    /// The last number handed out for it here (before the section's base
    /// is applied).
    pub value: u64,
    /// Its position's section.
    pub section: SectionId,
}

/// A page of the names held ([`NameTable::page`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamePage {
    /// The names, in table order (no order a caller may rely on).
    pub names: Vec<HeldName>,
    /// Where the next page starts (`None`: this was the last).
    pub next: Option<u64>,
}

/// The names held by one allocator (module docs).
#[derive(Debug)]
pub(crate) struct NameTable {
    /// The names, by hash.
    shards: Box<[Mutex<Shard>]>,
    /// Most names one shard holds.
    per_shard: usize,
    /// Seeded per process: entries are found by hash, and a caller must not
    /// be able to choose names that all collide.
    hasher: std::collections::hash_map::RandomState,
    /// Per section of the set in the name range, from `first_section`:
    /// the highest value a forgotten name of it had. Only grows.
    floors: Box<[AtomicU64]>,
    /// The set's first section with name positions.
    first_section: SectionId,
    /// Per section with name positions: the declared counters (and
    /// tombstones) of its names, as its store held them when this
    /// process installed the section, and as written here since
    /// (`docs/counters.md`, Declared counters).
    decls: Box<[SectionDecls]>,
    /// Serialises this process's counter writes, so that the order they
    /// reach memory is the order the store applied them.
    pub(crate) writes: tokio::sync::Mutex<()>,
    counters: Counters,
}

/// The declarations of one section's names.
#[derive(Debug, Default)]
struct SectionDecls {
    /// Whether `by_name` holds any: a call for a name of a section
    /// without declarations reads this one flag, no lock.
    any: AtomicBool,
    /// By name.
    by_name: RwLock<HashMap<Box<[u8]>, CounterDecl>>,
}

impl NameTable {
    /// A table for the name positions of `spec`, holding at most
    /// `max_names` (at least one) names.
    pub(crate) fn new(spec: &SetSpec, max_names: usize) -> Self {
        let max_names = max_names.max(1);
        let shards = if max_names < SHARDED_FROM { 1 } else { SHARDS };
        let (first_section, sections) = name_sections(spec);
        Self {
            shards: (0..shards).map(|_| Mutex::default()).collect(),
            per_shard: max_names / shards,
            hasher: Default::default(),
            floors: (0..sections).map(|_| AtomicU64::new(0)).collect(),
            first_section,
            decls: (0..sections).map(|_| SectionDecls::default()).collect(),
            writes: tokio::sync::Mutex::new(()),
            counters: Counters::default(),
        }
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        // High bits pick the shard; the table uses the low ones.
        let i = ((hash >> 40) as usize) % self.shards.len();
        // A shard is consistent between statements (every change is one
        // assignment or a push), so a panic elsewhere leaves it usable.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn floor(&self, section: SectionId) -> &AtomicU64 {
        &self.floors[(section - self.first_section) as usize]
    }

    /// Hands out a number of `name` (its position in `section`): `take`
    /// gets the name's last number here (if not held: its section's floor,
    /// or `at_least` if higher) and returns
    /// the number handed out with the section's base, or why not. On
    /// success the name holds the new number (created if it was not held,
    /// forgetting another if the table is full); on a refusal nothing
    /// changes.
    pub(crate) fn take<E>(
        &self,
        name: &[u8],
        section: SectionId,
        at_least: u64,
        take: impl FnOnce(u64) -> Result<(u64, u64), E>,
    ) -> Result<u64, E> {
        let hash = self.hasher.hash_one(name);
        let mut guard = self.shard(hash);
        let shard = &mut *guard;
        let found = shard
            .index
            .find(hash, |&i| *shard.entries[i as usize].name == *name)
            .copied();
        if let Some(i) = found {
            let e = &mut shard.entries[i as usize];
            let (v, _) = take(e.value)?;
            e.value = v;
            e.referenced = true;
            return Ok(v);
        }
        let floor = self.floor(section).load(Relaxed);
        let (v, base) = take(floor.max(at_least))?;
        self.counters.created.fetch_add(1, Relaxed);
        let skipped = floor.saturating_sub(base.max(at_least));
        if skipped > 0 {
            self.counters.skipped.fetch_add(skipped, Relaxed);
        }
        let entry = Entry {
            name: name.into(),
            value: v,
            section,
            referenced: false,
        };
        self.insert(shard, hash, entry);
        Ok(v)
    }

    /// The name's last number here, or (not held) its section's floor or
    /// `at_least` if higher; the caller maxes it with the section's base.
    pub(crate) fn held(&self, name: &[u8], section: SectionId, at_least: u64) -> u64 {
        self.lookup(name, section, at_least).0
    }

    /// [`held`](Self::held), and whether the name is held. Reads only: a
    /// name not held is not created.
    pub(crate) fn lookup(&self, name: &[u8], section: SectionId, at_least: u64) -> (u64, bool) {
        let hash = self.hasher.hash_one(name);
        let shard = self.shard(hash);
        match shard
            .index
            .find(hash, |&i| *shard.entries[i as usize].name == *name)
        {
            Some(&i) => (shard.entries[i as usize].value, true),
            None => (self.floor(section).load(Relaxed).max(at_least), false),
        }
    }

    /// Up to `limit` names held whose bytes start with `prefix`, from
    /// `cursor` on (0: the start), looking at no more than `budget`
    /// entries; and the cursor of the next page (`None`: the end).
    /// `None` for a cursor no page gave. Reads only.
    ///
    /// A cursor is a shard and a slot in it. Names created or forgotten
    /// between pages may be missed or listed twice (as Redis `SCAN`); a
    /// name held throughout is listed at least once.
    pub(crate) fn page(
        &self,
        cursor: u64,
        limit: usize,
        prefix: &[u8],
        budget: usize,
    ) -> Option<NamePage> {
        let (mut shard, mut slot) = ((cursor >> 32) as usize, (cursor & 0xffff_ffff) as usize);
        if shard >= self.shards.len() {
            return None;
        }
        let mut page = NamePage::default();
        let mut looked = 0;
        while shard < self.shards.len() {
            let s = self.shards[shard].lock().unwrap_or_else(|e| e.into_inner());
            while slot < s.entries.len() {
                if page.names.len() >= limit || looked >= budget {
                    page.next = Some(((shard as u64) << 32) | slot as u64);
                    return Some(page);
                }
                let e = &s.entries[slot];
                if e.name.starts_with(prefix) {
                    page.names.push(HeldName {
                        name: e.name.to_vec(),
                        value: e.value,
                        section: e.section,
                    });
                }
                looked += 1;
                slot += 1;
            }
            shard += 1;
            slot = 0;
        }
        Some(page)
    }

    fn decls_of(&self, section: SectionId) -> Option<&SectionDecls> {
        self.decls
            .get(section.checked_sub(self.first_section)? as usize)
    }

    /// Whether `section` holds name positions.
    pub(crate) fn has_names(&self, section: SectionId) -> bool {
        self.decls_of(section).is_some()
    }

    /// `name`'s declaration, if it has one (declared, deleted or only a
    /// floor). One atomic load for a name of a section without any.
    #[inline]
    pub(crate) fn decl(&self, name: &[u8], section: SectionId) -> Option<CounterDecl> {
        let d = self.decls_of(section)?;
        // Acquire/Release: a call that sees the flag sees the map's entry.
        if !d.any.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let map = d.by_name.read().unwrap_or_else(|e| e.into_inner());
        map.get(name).copied()
    }

    /// Replaces `section`'s declarations with `decls` (the store's, read
    /// before the section is served under a new grant).
    pub(crate) fn load_decls(&self, section: SectionId, decls: Vec<(Vec<u8>, CounterDecl)>) {
        let Some(d) = self.decls_of(section) else {
            return;
        };
        let mut map = d.by_name.write().unwrap_or_else(|e| e.into_inner());
        *map = decls.into_iter().map(|(n, x)| (n.into(), x)).collect();
        d.any
            .store(!map.is_empty(), std::sync::atomic::Ordering::Release);
    }

    /// Puts `name`'s declaration in force here (after the store applied
    /// it): every call that starts after this returns serves by it.
    pub(crate) fn set_decl(&self, name: &[u8], section: SectionId, decl: CounterDecl) {
        let Some(d) = self.decls_of(section) else {
            return;
        };
        let mut map = d.by_name.write().unwrap_or_else(|e| e.into_inner());
        map.insert(name.into(), decl);
        d.any.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The name's last number handed out here, if it is held.
    pub(crate) fn held_exact(&self, name: &[u8]) -> Option<u64> {
        let hash = self.hasher.hash_one(name);
        let shard = self.shard(hash);
        let i = *shard
            .index
            .find(hash, |&i| *shard.entries[i as usize].name == *name)?;
        Some(shard.entries[i as usize].value)
    }

    /// Adds `entry` (not held), forgetting one first if the shard is full.
    fn insert(&self, shard: &mut Shard, hash: u64, entry: Entry) {
        let hasher = &self.hasher;
        let slot = if shard.entries.len() < self.per_shard {
            shard.entries.push(entry);
            shard.entries.len() - 1
        } else {
            let victim = clock_victim(shard);
            let old = std::mem::replace(&mut shard.entries[victim], entry);
            // The floor takes the forgotten value before the shard's lock
            // is released: a recreation of it starts at or above it.
            self.floor(old.section).fetch_max(old.value, Relaxed);
            self.counters.forgotten.fetch_add(1, Relaxed);
            let old_hash = hasher.hash_one(&*old.name);
            if let Ok(o) = shard.index.find_entry(old_hash, |&i| i as usize == victim) {
                o.remove();
            }
            victim
        };
        let entries = &shard.entries;
        shard.index.insert_unique(hash, slot as u32, |&i| {
            hasher.hash_one(&*entries[i as usize].name)
        });
    }

    /// Counts a call refused by a declared counter's limits.
    pub(crate) fn limit_refused(&self) {
        self.counters.limit_errors.fetch_add(1, Relaxed);
    }

    /// The counters and the names held now.
    pub(crate) fn stats(&self) -> NameStats {
        let held = (self.shards.iter())
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).entries.len() as u64)
            .sum();
        NameStats {
            held,
            created: self.counters.created.load(Relaxed),
            forgotten: self.counters.forgotten.load(Relaxed),
            skipped: self.counters.skipped.load(Relaxed),
            limit_errors: self.counters.limit_errors.load(Relaxed),
        }
    }
}

/// The entry a full shard forgets: CLOCK (second chance): the hand clears
/// the mark of each used entry it passes and stops at the first unused.
fn clock_victim(shard: &mut Shard) -> usize {
    let len = shard.entries.len();
    loop {
        let i = shard.hand % len;
        shard.hand = (i + 1) % len;
        let e = &mut shard.entries[i];
        if !e.referenced {
            return i;
        }
        e.referenced = false;
    }
}

/// The first section of `spec` holding name positions, and how many do
/// (0 if the set serves none).
fn name_sections(spec: &SetSpec) -> (SectionId, usize) {
    let begin = spec.uid_begin.max(NAME_KEYS.start);
    let end = spec.uid_end.min(NAME_KEYS.end);
    match (
        spec.section_of(begin),
        end.checked_sub(1).and_then(|l| spec.section_of(l)),
    ) {
        (Some(first), Some(last)) if begin < end => (first, (last - first + 1) as usize),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SetSpec {
        SetSpec {
            set_id: 0,
            uid_begin: NAME_KEYS.start,
            uid_end: NAME_KEYS.start + 64,
            section_size: 16,
            step: 50,
        }
    }

    /// A take as a served section with base `base` and no ceiling would do.
    fn at_base(base: u64) -> impl FnOnce(u64) -> Result<(u64, u64), ()> {
        move |held| Ok((held.max(base) + 1, base))
    }

    #[test]
    fn a_forgotten_name_starts_above_everything_it_had() {
        let t = NameTable::new(&spec(), 2);
        for _ in 0..5 {
            t.take(b"a", 0, 0, at_base(0)).unwrap();
        }
        t.take(b"b", 0, 0, at_base(0)).unwrap();
        // Full: the hand spares "a" (used) once and forgets "b" for "c",
        // then forgets "a" for "d".
        t.take(b"c", 0, 0, at_base(0)).unwrap();
        assert_eq!(t.held(b"a", 0, 0), 5);
        t.take(b"d", 0, 0, at_base(0)).unwrap();
        let st = t.stats();
        assert_eq!((st.held, st.created, st.forgotten), (2, 4, 2));
        // "a" had 5: not held, it reads and starts at its section's floor.
        assert_eq!(t.held(b"a", 0, 0), 5);
        assert_eq!(t.take(b"a", 0, 0, at_base(0)), Ok(6));
        // "d" skipped 1 ("b" forgotten at 1), "a" 5.
        assert_eq!(t.stats().skipped, 6);
        // A position's own counter above the floor raises the start.
        assert_eq!(t.take(b"e", 0, 40, at_base(0)), Ok(41));
    }

    #[test]
    fn a_refused_take_changes_nothing() {
        let t = NameTable::new(&spec(), 4);
        assert_eq!(
            t.take(b"a", 1, 0, |_| Err::<(u64, u64), _>("no")),
            Err("no")
        );
        assert_eq!(t.stats(), NameStats::default());
        t.take(b"a", 1, 0, at_base(10)).unwrap();
        assert_eq!(
            t.take(b"a", 1, 0, |_| Err::<(u64, u64), _>("no")),
            Err("no")
        );
        assert_eq!(t.held(b"a", 1, 0), 11);
    }

    #[test]
    fn the_bound_holds_and_used_names_are_kept() {
        let t = NameTable::new(&spec(), 8);
        t.take(b"hot", 0, 0, at_base(0)).unwrap();
        for i in 0..1000u32 {
            t.take(b"hot", 0, 0, at_base(0)).unwrap();
            t.take(format!("cold:{i}").as_bytes(), 0, 0, at_base(0))
                .unwrap();
            assert!(t.stats().held <= 8);
        }
        // Used between every two passes of the hand: never forgotten.
        assert_eq!(t.held(b"hot", 0, 0), 1001);
        assert_eq!(t.stats().created, 1001);
    }

    #[test]
    fn floors_are_per_section() {
        let t = NameTable::new(&spec(), 1);
        for _ in 0..7 {
            t.take(b"a", 2, 0, at_base(0)).unwrap();
        }
        t.take(b"b", 3, 0, at_base(0)).unwrap(); // forgets "a" into section 2
        assert_eq!(t.held(b"x", 2, 0), 7);
        assert_eq!(t.held(b"x", 3, 0), 0);
    }

    #[test]
    fn pages_list_every_name_once_and_stop() {
        // Sharded (64 shards) and single-shard tables alike.
        for bound in [9, 10_000] {
            let t = NameTable::new(&spec(), bound);
            for i in 0..8u32 {
                t.take(format!("n:{i}").as_bytes(), 0, 0, at_base(0))
                    .unwrap();
            }
            t.take(b"other", 1, 0, at_base(0)).unwrap();
            let (mut seen, mut cursor, mut pages) = (Vec::new(), 0, 0);
            loop {
                let p = t.page(cursor, 3, b"n:", 1_000).unwrap();
                assert!(p.names.len() <= 3);
                seen.extend(p.names.into_iter().map(|h| h.name));
                pages += 1;
                match p.next {
                    Some(c) => cursor = c,
                    None => break,
                }
            }
            seen.sort();
            let want: Vec<Vec<u8>> = (0..8).map(|i| format!("n:{i}").into_bytes()).collect();
            assert_eq!(seen, want, "bound {bound}");
            assert!(pages >= 3, "bound {bound}: {pages} pages");
        }
        let t = NameTable::new(&spec(), 8);
        t.take(b"a", 2, 0, at_base(0)).unwrap();
        t.take(b"a", 2, 0, at_base(0)).unwrap();
        let all = t.page(0, 10, b"", 10).unwrap();
        assert_eq!(
            all.names,
            vec![HeldName {
                name: b"a".to_vec(),
                value: 2,
                section: 2
            }]
        );
        assert_eq!(all.next, None);
        // The budget bounds the work of a page, matches or not.
        let t = NameTable::new(&spec(), 100);
        for i in 0..50u32 {
            t.take(format!("x{i}").as_bytes(), 0, 0, at_base(0))
                .unwrap();
        }
        let p = t.page(0, 10, b"nomatch", 20).unwrap();
        assert!(p.names.is_empty());
        assert_eq!(p.next, Some(20));
        // A cursor no page gave is refused; listing changes nothing.
        assert_eq!(t.page(1 << 32, 10, b"", 10), None);
        assert_eq!(t.stats().created, 50);
        assert_eq!(t.lookup(b"x1", 0, 0), (1, true));
        assert_eq!(t.lookup(b"zz", 0, 0), (0, false));
        assert_eq!(t.stats().held, 50);
    }

    #[test]
    fn sections_with_name_positions() {
        assert_eq!(name_sections(&spec()), (0, 4));
        let uids = SetSpec::new(0, 0..1_000_000);
        assert_eq!(name_sections(&uids).1, 0);
    }
}
