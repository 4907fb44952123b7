//! Named counters (`docs/counters.md`): a name is served at its position
//! in the range reserved for names, under its section's ceiling, with a
//! counter of its own in the owner's name table. These tests try to break
//! per-name strict monotonicity (promise 1 of
//! `docs/architecture/promises.md`) with take-overs between AllocSvrs,
//! names forgotten to stay within the bound and seen again, names that
//! share a position, reservations (`next(name, n)`) mixed with single
//! numbers, and concurrent reservations; every number a caller received
//! goes through the per-key checker.

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use seqsvr_alloc::mem::MemCeilingStore;
use seqsvr_alloc::{AllocConfig, Allocator, Raiser, RaiserConfig};
use seqsvr_core::checker::{check, Observation};
use seqsvr_core::{name_key, SetSpec, NAME_KEYS};

/// A set serving the first 64 positions of the name range, in 4 sections.
fn spec() -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: NAME_KEYS.start,
        uid_end: NAME_KEYS.start + 64,
        section_size: 16,
        step: 50,
    }
}

/// `count` names whose positions the test set serves (found by trying
/// `name:0`, `name:1` …; the mapping is fixed, so so are they).
fn names(count: usize) -> Vec<String> {
    let end = spec().uid_end;
    (0u64..)
        .map(|i| format!("name:{i}"))
        .filter(|n| name_key(n.as_bytes()).unwrap() < end)
        .take(count)
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Two AllocSvrs over one store, one serving the set at a time.
struct Pair {
    store: Arc<MemCeilingStore>,
    allocs: [Arc<Allocator>; 2],
    owner: usize,
}

impl Pair {
    fn new(rt: &tokio::runtime::Runtime) -> Self {
        Self::holding(rt, AllocConfig::default().max_names)
    }

    /// Two AllocSvrs that hold at most `max_names` names each.
    fn holding(rt: &tokio::runtime::Runtime, max_names: usize) -> Self {
        let store = Arc::new(MemCeilingStore::new(spec()));
        let cfg = AllocConfig {
            max_names,
            ..AllocConfig::default()
        };
        let mk = || Arc::new(Allocator::new(spec(), &cfg).unwrap());
        let p = Pair {
            store,
            allocs: [mk(), mk()],
            owner: 0,
        };
        p.take_over(rt, 0);
        p
    }

    fn take_over(&self, rt: &tokio::runtime::Runtime, to: usize) {
        let raiser = Raiser::new(
            self.allocs[to].clone(),
            self.store.clone(),
            RaiserConfig::default(),
        );
        rt.block_on(raiser.take_over(0, spec().section_count()))
            .unwrap();
    }

    /// Moves every section to the other AllocSvr: the old owner stops
    /// (its lease is gone), the new one takes over at the store.
    fn fail_over(&mut self, rt: &tokio::runtime::Runtime) {
        for s in 0..spec().section_count() {
            self.allocs[self.owner].drop_section(s);
        }
        self.owner = 1 - self.owner;
        self.take_over(rt, self.owner);
    }

    /// `n` numbers of `name` from the owner, raising as a caller would
    /// wait for it; the last returned.
    fn next(&self, rt: &tokio::runtime::Runtime, name: &str, n: u64) -> u64 {
        let a = &self.allocs[self.owner];
        loop {
            match a.next_name_n(name.as_bytes(), n) {
                Ok(v) => return v,
                Err(seqsvr_alloc::AllocError::Exhausted { .. }) => {
                    let raiser =
                        Raiser::new(a.clone(), self.store.clone(), RaiserConfig::default());
                    rt.block_on(raiser.run_once());
                }
                Err(e) => panic!("{name}: {e}"),
            }
        }
    }
}

/// Two names of the test set that share a position, found by trying
/// `twin:0`, `twin:1` … (the mapping is fixed, so so are they).
fn twins() -> (String, String) {
    let end = spec().uid_end;
    let mut seen: HashMap<u64, String> = HashMap::new();
    for i in 0u64.. {
        let n = format!("twin:{i}");
        let k = name_key(n.as_bytes()).unwrap();
        if k >= end {
            continue;
        }
        if let Some(other) = seen.insert(k, n.clone()) {
            return (other, n);
        }
    }
    unreachable!()
}

#[derive(Debug, Clone)]
enum Op {
    Next(usize, u64),
    Current(usize),
    FailOver,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..8, 1u64..=20).prop_map(|(n, c)| Op::Next(n, c)),
        2 => (0usize..8).prop_map(Op::Current),
        1 => Just(Op::FailOver),
    ]
}

/// Eight names: six of [`names`] and the two [`twins`], which share a
/// position.
fn eight() -> Vec<String> {
    let mut ns = names(6);
    let (a, b) = twins();
    ns.extend([a, b]);
    ns
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Per name, every range received lies above every earlier one, and
    /// `current` is at or above the last number received and below the
    /// next, through any interleaving of reservations, reads, take-overs
    /// and names forgotten (each AllocSvr holds `bound` of the eight).
    #[test]
    fn names_stay_strictly_ordered_across_take_overs_and_evictions(
        ops in proptest::collection::vec(op(), 1..120),
        bound in 1usize..=9,
    ) {
        let rt = runtime();
        let names = eight();
        let mut pair = Pair::holding(&rt, bound);
        let mut obs = Vec::new();
        let mut last: HashMap<usize, u64> = HashMap::new();
        let mut read: HashMap<usize, u64> = HashMap::new();
        for (t, op) in ops.iter().enumerate() {
            match *op {
                Op::FailOver => pair.fail_over(&rt),
                Op::Current(i) => {
                    let a = &pair.allocs[pair.owner];
                    let c = a.current_name(names[i].as_bytes()).unwrap();
                    prop_assert!(last.get(&i).is_none_or(|&l| c >= l), "{:?}: {c}", op);
                    read.insert(i, c);
                }
                Op::Next(i, n) => {
                    let v = pair.next(&rt, &names[i], n);
                    // Each number of the range as the checker sees it: the
                    // name (its index) is the key.
                    for (k, seq) in (v + 1 - n..=v).enumerate() {
                        let at = (100 * t + k) as u64;
                        obs.push(Observation::next(i as u64, seq, at, at));
                    }
                    prop_assert!(last.get(&i).is_none_or(|&l| v - n >= l), "{:?}", op);
                    prop_assert!(read.get(&i).is_none_or(|&c| v - n >= c), "{:?} below a read", op);
                    last.insert(i, v);
                }
            }
        }
        for a in &pair.allocs {
            prop_assert!(a.stats().names.held <= bound as u64);
        }
        let report = check(&obs);
        prop_assert!(report.ok(), "{:?}", report);
    }
}

/// Two names at one position have counters of their own: one's traffic
/// leaves no gap in the other's numbers.
#[test]
fn names_at_one_position_do_not_share_a_counter() {
    let rt = runtime();
    let pair = Pair::new(&rt);
    let (a, b) = twins();
    assert_eq!(name_key(a.as_bytes()), name_key(b.as_bytes()));
    for want in 1..=30 {
        assert_eq!(pair.next(&rt, &a, 1), want);
    }
    assert_eq!(pair.next(&rt, &b, 1), 1);
    assert_eq!(pair.next(&rt, &b, 5), 6);
    assert_eq!(pair.next(&rt, &a, 1), 31);
    let owner = &pair.allocs[pair.owner];
    assert_eq!(owner.current_name(b.as_bytes()), Ok(6));
    assert_eq!(owner.stats().names.created, 2);
}

/// A name forgotten to stay within the bound and seen again skips ahead
/// (counted) and never repeats nor goes back; a bad name is refused and
/// changes nothing.
#[test]
fn a_forgotten_name_skips_ahead_and_is_counted() {
    let rt = runtime();
    let pair = Pair::holding(&rt, 1);
    let ns = names(2);
    let (a, b) = (&ns[0], &ns[1]);
    for _ in 0..10 {
        pair.next(&rt, a, 1);
    }
    assert_eq!(pair.next(&rt, b, 1), 1); // "a" is forgotten for "b"
    let owner = &pair.allocs[pair.owner];
    let before = owner.stats().names;
    assert_eq!((before.held, before.created, before.forgotten), (1, 2, 1));
    let v = pair.next(&rt, a, 1);
    assert!(v > 10, "{a} went back to {v}");
    let after = owner.stats().names;
    assert_eq!((after.created, after.forgotten), (3, 2));
    assert!(after.skipped > before.skipped);
    let long = vec![b'n'; 257];
    for bad in [&b""[..], &long[..]] {
        assert!(matches!(
            owner.next_name(bad),
            Err(seqsvr_alloc::AllocError::InvalidName(_))
        ));
        assert!(owner.current_name(bad).is_err());
    }
    assert_eq!(owner.stats().names, after);
    assert!(matches!(
        owner.next_name_n(a.as_bytes(), 0),
        Err(seqsvr_alloc::AllocError::InvalidCount { .. })
    ));
    assert_eq!(owner.stats().names, after);
}

/// Concurrent reservations of one name (INCRBY from many callers) never
/// overlap: every number is owned by exactly one caller.
#[test]
fn concurrent_reservations_of_one_name_never_overlap() {
    let rt = runtime();
    let pair = Arc::new(Pair::new(&rt));
    let name = names(1).remove(0);
    let ranges: Vec<(u64, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let (pair, name) = (pair.clone(), name.clone());
                s.spawn(move || {
                    let rt = runtime();
                    (0..300u64)
                        .map(|i| {
                            let n = 1 + (i * 7 + t) % 13;
                            let v = pair.next(&rt, &name, n);
                            (v + 1 - n, v)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut sorted = ranges.clone();
    sorted.sort_unstable();
    for w in sorted.windows(2) {
        assert!(w[0].1 < w[1].0, "ranges {:?} and {:?} overlap", w[0], w[1]);
    }
    assert_eq!(sorted.len(), 1200);
}
