//! Declared counters on the allocator (`docs/counters.md`, Declared
//! counters): a name is served above its floor, in its class (≡ offset
//! mod increment), never past its maximum, by its owner — and by the next
//! owner, which reads the declarations of a section before serving it
//! (`raiser::load_counters`). These tests try to break that with
//! take-overs between two AllocSvrs, floors set while a name is held, and
//! batches that would cross the maximum.

use std::sync::Arc;

use seqsvr_alloc::mem::MemCeilingStore;
use seqsvr_alloc::{AllocConfig, AllocError, Allocator, Raiser, RaiserConfig};
use seqsvr_core::{name_key, CounterDecl, CounterRules, SetSpec, NAME_KEYS};

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

/// A name whose position the test set serves, and its section.
fn a_name(i: usize) -> (String, u32) {
    let end = spec().uid_end;
    let n = (0u64..)
        .map(|i| format!("ticket:{i}"))
        .filter(|n| name_key(n.as_bytes()).unwrap() < end)
        .nth(i)
        .unwrap();
    let s = spec().section_of(name_key(n.as_bytes()).unwrap()).unwrap();
    (n, s)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn declared(floor: u64, max: Option<u64>, increment: u64, offset: u64) -> CounterDecl {
    CounterDecl {
        floor,
        rules: Some(CounterRules {
            max,
            increment,
            offset,
        }),
    }
}

/// Raise rounds a call may wait for: one step each, and any call here
/// needs at most a few.
const MAX_ROUNDS: usize = 100;

/// Two AllocSvrs over one store; `to` takes every section over.
struct Two {
    store: Arc<MemCeilingStore>,
    allocs: [Arc<Allocator>; 2],
}

impl Two {
    fn new() -> Self {
        let mk = || Arc::new(Allocator::new(spec(), &AllocConfig::default()).unwrap());
        Self {
            store: Arc::new(MemCeilingStore::new(spec())),
            allocs: [mk(), mk()],
        }
    }

    fn take_over(&self, rt: &tokio::runtime::Runtime, to: usize) {
        for s in 0..spec().section_count() {
            self.allocs[1 - to].drop_section(s);
        }
        let r = Raiser::new(
            self.allocs[to].clone(),
            self.store.clone(),
            RaiserConfig::default(),
        );
        rt.block_on(r.take_over(0, spec().section_count())).unwrap();
    }

    /// `n` numbers of `name` from `at`, raising as a waiting caller would.
    /// A section still exhausted after [`MAX_ROUNDS`] raise rounds is a
    /// defect: the error is returned rather than waited on for ever.
    fn next(
        &self,
        rt: &tokio::runtime::Runtime,
        at: usize,
        name: &str,
        n: u64,
    ) -> Result<u64, AllocError> {
        let a = &self.allocs[at];
        for _ in 0..MAX_ROUNDS {
            match a.next_name_n(name.as_bytes(), n) {
                Err(AllocError::Exhausted { .. }) => {
                    let r = Raiser::new(a.clone(), self.store.clone(), RaiserConfig::default());
                    rt.block_on(r.run_once());
                }
                other => return other,
            }
        }
        a.next_name_n(name.as_bytes(), n)
    }
}

#[test]
fn a_new_owner_serves_by_the_declaration_it_loads() {
    let rt = rt();
    let two = Two::new();
    let (name, section) = a_name(0);
    // Written to the store before the take-over, as an owner's write is.
    two.store
        .declare(name.as_bytes(), section, declared(1000, None, 2, 1));
    two.take_over(&rt, 0);
    let mut last = 0;
    for owner in [0, 1, 0, 1] {
        if owner != 0 || last != 0 {
            two.take_over(&rt, owner);
        }
        for _ in 0..30 {
            let v = two.next(&rt, owner, &name, 1).unwrap();
            assert!(v > last && v > 1000, "{v} after {last}");
            assert_eq!(v % 2, 1, "{v} is not odd");
            last = v;
        }
        // A batch: n numbers of the class, the last returned.
        let v = two.next(&rt, owner, &name, 5).unwrap();
        assert!(v >= last + 10 && v % 2 == 1, "{v} after {last}");
        last = v;
    }
    // An undeclared name of the same section keeps the defaults.
    let (other, _) = a_name(1);
    let a = two.next(&rt, 1, &other, 1).unwrap();
    assert_eq!(two.next(&rt, 1, &other, 1).unwrap(), a + 1);
}

#[test]
fn a_floor_put_in_force_holds_for_every_later_call() {
    let rt = rt();
    let two = Two::new();
    let (name, section) = a_name(0);
    two.take_over(&rt, 0);
    let a = &two.allocs[0];
    assert_eq!(two.next(&rt, 0, &name, 1).unwrap(), 1);
    // Held at 1; the owner puts a floor of 5,000 in force.
    let floor = CounterDecl {
        floor: 5_000,
        rules: None,
    };
    two.store.declare(name.as_bytes(), section, floor);
    a.set_counter_decl(name.as_bytes(), section, floor);
    assert!(a.current_name(name.as_bytes()).unwrap() >= 5_000);
    assert_eq!(two.next(&rt, 0, &name, 1).unwrap(), 5_001);
    // Still after a take-over by the other AllocSvr.
    two.take_over(&rt, 1);
    assert!(two.next(&rt, 1, &name, 1).unwrap() > 5_001);
}

#[test]
fn a_batch_that_would_pass_the_maximum_is_refused_whole() {
    let rt = rt();
    let two = Two::new();
    let (name, section) = a_name(0);
    two.store
        .declare(name.as_bytes(), section, declared(0, Some(10), 1, 0));
    two.take_over(&rt, 0);
    assert_eq!(two.next(&rt, 0, &name, 8).unwrap(), 8);
    let refused = two.next(&rt, 0, &name, 3).unwrap_err();
    assert!(
        matches!(refused, AllocError::CounterMaxReached { max: 10, .. }),
        "{refused:?}"
    );
    // Nothing was handed out: the rest is still there.
    assert_eq!(two.next(&rt, 0, &name, 2).unwrap(), 10);
    assert!(two.next(&rt, 0, &name, 1).is_err());
    assert_eq!(two.allocs[0].stats().names.limit_errors, 2);
}

/// A floor far above the ceiling (an import's) is served from memory by
/// the name's first call: the owner asks the raise above it as it puts the
/// floor in force (`Allocator::want_room_above`, which the admin plane's
/// write waits for), not when the first call finds the section exhausted.
#[test]
fn a_far_floor_is_served_at_once() {
    let rt = rt();
    let two = Two::new();
    let (name, section) = a_name(0);
    two.take_over(&rt, 0);
    let a = &two.allocs[0];
    assert_eq!(two.next(&rt, 0, &name, 1).unwrap(), 1);
    // The owner's write: the store lifts the ceiling to the floor (far
    // above it: 100 steps), then the floor is put in force here.
    let floor = CounterDecl {
        floor: 5_000,
        rules: None,
    };
    two.store.declare(name.as_bytes(), section, floor);
    a.set_counter_decl(name.as_bytes(), section, floor);
    assert!(!a.want_room_above(section, floor.floor), "no room yet");
    // The raiser runs the raise it asked (the node's raiser task does so
    // at once; the write waits for it).
    let r = Raiser::new(a.clone(), two.store.clone(), RaiserConfig::default());
    rt.block_on(r.run_once());
    assert!(a.want_room_above(section, floor.floor));
    // The first call: served from memory, no raise, no wait.
    let raises = two.store.raises();
    assert_eq!(a.next_name(name.as_bytes()).unwrap(), 5_001);
    assert_eq!(two.store.raises(), raises);
    // The raise was at most one step above the floor (promise 4).
    let ceiling = two.store.section(section).max_seq;
    assert!(
        ceiling > 5_000 && ceiling <= 5_000 + spec().step,
        "{ceiling}"
    );
}
