//! Named counters (`docs/counters.md`): a name is served at its position
//! in the range reserved for names, so its numbers ride on the uid
//! machinery. These tests try to break per-name strict monotonicity
//! (promise 1 of `docs/architecture/promises.md`) with take-overs between
//! AllocSvrs, reservations (`next(name, n)`) mixed with single numbers,
//! and concurrent reservations; every number a caller received goes
//! through the per-key checker.

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
        let store = Arc::new(MemCeilingStore::new(spec()));
        let mk = || Arc::new(Allocator::new(spec(), &AllocConfig::default()).unwrap());
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
        let key = name_key(name.as_bytes()).unwrap();
        loop {
            match a.next_n(key, n) {
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

#[derive(Debug, Clone)]
enum Op {
    Next(usize, u64),
    FailOver,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..6, 1u64..=20).prop_map(|(n, c)| Op::Next(n, c)),
        1 => Just(Op::FailOver),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Per name, every range received lies above every earlier one, through
    /// any interleaving of reservations and take-overs.
    #[test]
    fn names_stay_strictly_ordered_across_take_overs(ops in proptest::collection::vec(op(), 1..120)) {
        let rt = runtime();
        let names = names(6);
        let mut pair = Pair::new(&rt);
        let mut obs = Vec::new();
        let mut last: HashMap<usize, u64> = HashMap::new();
        for (t, op) in ops.iter().enumerate() {
            match *op {
                Op::FailOver => pair.fail_over(&rt),
                Op::Next(i, n) => {
                    let v = pair.next(&rt, &names[i], n);
                    // Each number of the range as the checker sees it: the
                    // name (its index) is the key.
                    for (k, seq) in (v + 1 - n..=v).enumerate() {
                        let at = (100 * t + k) as u64;
                        obs.push(Observation::next(i as u64, seq, at, at));
                    }
                    prop_assert!(last.get(&i).is_none_or(|&l| v - n >= l), "{:?}", op);
                    last.insert(i, v);
                }
            }
        }
        let report = check(&obs);
        prop_assert!(report.ok(), "{:?}", report);
    }
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

/// Names are told apart; a name and a uid-shaped key never meet.
#[test]
fn names_are_counters_of_their_own() {
    let rt = runtime();
    let pair = Pair::new(&rt);
    let ns = names(6);
    let mut positions: Vec<u64> = ns.iter().map(|n| name_key(n.as_bytes()).unwrap()).collect();
    positions.sort_unstable();
    positions.dedup();
    // Each one starts at 1 unless it shares a position (docs/counters.md).
    for n in &ns {
        let v = pair.next(&rt, n, 1);
        assert!(v >= 1);
    }
    assert!(positions.len() > 1, "the names spread over positions");
}
