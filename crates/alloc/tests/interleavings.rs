//! Property test: random interleavings of `next`, `next_batch`, background
//! raises, store faults and restarts, against an in-memory store with the
//! real store's semantics. Checks, for every uid and section:
//!
//! - promise 1: every number returned for a uid is above every earlier one,
//!   across restarts (skip ahead);
//! - promise 2: nothing is returned above the store's ceiling for the section;
//! - promise 4: after a restart, the first number of any uid of a section is
//!   at most `step + 1` above the section's *base*: the highest number handed
//!   out in it before, or, if that is lower, the skip-ahead value of the
//!   previous take-over (a section with no traffic still moves one step per
//!   take-over; a *single* restart skips at most one step).

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use seqsvr_alloc::mem::{Fault, MemCeilingStore};
use seqsvr_alloc::{AllocConfig, AllocError, Allocator, Grant, Raiser, RaiserConfig};
use seqsvr_core::{SectionId, SetSpec, Uid};

const UID_BEGIN: Uid = 1_000;
const SECTION_SIZE: u64 = 5;
const SECTIONS: u32 = 4;
const STEP: u64 = 6;

fn spec() -> SetSpec {
    SetSpec {
        set_id: 3,
        uid_begin: UID_BEGIN,
        uid_end: UID_BEGIN + SECTION_SIZE * SECTIONS as u64,
        section_size: SECTION_SIZE,
        step: STEP,
    }
}

/// One step of a run.
#[derive(Debug, Clone)]
enum Op {
    /// `next(uid)`.
    Next(Uid),
    /// `next_batch(uids)`.
    Batch(Vec<Uid>),
    /// One round of the background raiser; failed raises go back in the
    /// queue at once (as if the back-off had passed).
    Raise,
    /// Drop the allocator and build a fresh one that takes over every
    /// section from the store.
    Restart,
    /// Change the store's injected fault.
    SetFault(Fault),
}

fn uid() -> impl Strategy<Value = Uid> {
    // Mostly a few hot uids (so sections exhaust), sometimes any uid.
    prop_oneof![
        3 => prop::sample::select(vec![UID_BEGIN, UID_BEGIN + 6, UID_BEGIN + 19]),
        2 => UID_BEGIN..UID_BEGIN + SECTION_SIZE * SECTIONS as u64,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => uid().prop_map(Op::Next),
        4 => prop::collection::vec(uid(), 1..10).prop_map(Op::Batch),
        4 => Just(Op::Raise),
        1 => Just(Op::Restart),
        1 => prop_oneof![Just(Fault::None), Just(Fault::Unavailable), Just(Fault::LoseReplies)]
            .prop_map(Op::SetFault),
    ]
}

/// What the test has seen, and the node under test.
struct World {
    /// The fake store: the ceilings every check is made against.
    store: Arc<MemCeilingStore>,
    /// The node under test (its allocator and raiser).
    raiser: Raiser<MemCeilingStore>,
    /// Drives the raiser's async calls, one at a time.
    rt: tokio::runtime::Runtime,
    /// The raise-ahead fraction of this run.
    fraction: f64,
    /// Last number returned per uid.
    last: HashMap<Uid, u64>,
    /// Highest number returned per section, over the whole run.
    high: Vec<u64>,
    /// Skip-ahead value of each section's latest take-over.
    prev_ceiling: Vec<u64>,
    /// Per section, the base of the gap check for uids not yet served since
    /// the latest restart; per uid, whether that check is still due.
    gap_base: Vec<u64>,
    /// See `gap_base`.
    gap_due: HashMap<Uid, bool>,
}

impl World {
    fn new(fraction: f64) -> Self {
        let store = Arc::new(MemCeilingStore::new(spec()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (raiser, grants) = Self::boot(&store, &rt, fraction);
        let mut w = Self {
            store,
            raiser,
            rt,
            fraction,
            last: HashMap::new(),
            high: vec![0; SECTIONS as usize],
            prev_ceiling: vec![0; SECTIONS as usize],
            gap_base: vec![0; SECTIONS as usize],
            gap_due: HashMap::new(),
        };
        w.record_take_over(&grants);
        w
    }

    /// A fresh allocator serving every section (a restart).
    fn boot(
        store: &Arc<MemCeilingStore>,
        rt: &tokio::runtime::Runtime,
        fraction: f64,
    ) -> (Raiser<MemCeilingStore>, Vec<Grant>) {
        let cfg = AllocConfig {
            raise_ahead_fraction: fraction,
            adaptive: None,
            ..AllocConfig::default()
        };
        let alloc = Arc::new(Allocator::new(spec(), &cfg).unwrap());
        let raiser = Raiser::new(alloc, store.clone(), RaiserConfig::default());
        store.set_fault(Fault::None);
        let grants = rt.block_on(raiser.take_over(0, SECTIONS)).unwrap();
        (raiser, grants)
    }

    fn alloc(&self) -> &Allocator {
        self.raiser.allocator()
    }

    fn section_of(uid: Uid) -> SectionId {
        spec().section_of(uid).unwrap()
    }

    /// Remembers the skip-ahead values: for a section with no traffic the
    /// base of the next restart's gap check is this take-over's.
    fn record_take_over(&mut self, grants: &[Grant]) {
        for g in grants {
            self.prev_ceiling[g.section as usize] = g.prev_ceiling;
        }
    }

    fn restart(&mut self) {
        for s in 0..SECTIONS as usize {
            self.gap_base[s] = self.high[s].max(self.prev_ceiling[s]);
        }
        let uids = spec().uid_begin..spec().uid_end;
        self.gap_due = uids.map(|u| (u, true)).collect();
        // The old node is never used again (as if its lease ran out).
        let (raiser, grants) = Self::boot(&self.store, &self.rt, self.fraction);
        self.raiser = raiser;
        self.record_take_over(&grants);
    }

    fn check(&mut self, uid: Uid, v: u64) -> Result<(), TestCaseError> {
        let s = Self::section_of(uid);
        let last = self.last.insert(uid, v).unwrap_or(0);
        prop_assert!(v > last, "uid {uid}: {v} after {last} (promise 1)");
        let ceiling = self.store.section(s).max_seq;
        prop_assert!(
            v <= ceiling,
            "uid {uid}: {v} above store ceiling {ceiling} (promise 2)"
        );
        if self.gap_due.insert(uid, false).unwrap_or(false) {
            let base = self.gap_base[s as usize];
            prop_assert!(
                v - base <= STEP + 1,
                "uid {uid}: first {v} after restart, base {base} (promise 4)"
            );
        }
        let high = &mut self.high[s as usize];
        *high = (*high).max(v);
        Ok(())
    }

    fn expect_ok_or_exhausted(r: &Result<(), AllocError>) -> Result<(), TestCaseError> {
        match r {
            Ok(()) | Err(AllocError::Exhausted { .. }) => Ok(()),
            Err(e) => Err(TestCaseError::fail(format!("unexpected error {e}"))),
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Next(uid) => {
                let r = self.alloc().next(*uid);
                Self::expect_ok_or_exhausted(&r.clone().map(|_| ()))?;
                if let Ok(v) = r {
                    self.check(*uid, v)?;
                }
            }
            Op::Batch(uids) => {
                let mut out = Vec::new();
                let r = self.alloc().next_batch(uids, &mut out);
                Self::expect_ok_or_exhausted(&r)?;
                prop_assert!(out.len() <= uids.len());
                prop_assert!(r.is_err() || out.len() == uids.len());
                for (uid, v) in uids.iter().zip(out) {
                    self.check(*uid, v)?;
                }
            }
            Op::Raise => {
                let report = self.rt.block_on(self.raiser.run_once());
                prop_assert_eq!(report.dropped, 0, "nobody else takes sections here");
                self.alloc().requeue_raises(&report.retry);
            }
            Op::Restart => self.restart(),
            Op::SetFault(f) => self.store.set_fault(*f),
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn promises_hold_under_random_interleavings(
        fraction in prop_oneof![Just(0.0), Just(0.25), Just(0.9)],
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut w = World::new(fraction);
        for op in &ops {
            w.apply(op)?;
        }
        // Sanity: the run exercised something.
        let served = w.last.len();
        prop_assert!(served > 0 || !ops.iter().any(|o| matches!(o, Op::Next(_) | Op::Batch(_))));
    }
}
