//! Simulation-style tests of time-ordered ids: the store's real state
//! machine (`SetState`) and the AllocSvr's real generator
//! (`seqsvr_core::ids::Generator`), driven by a seeded schedule with
//! injected clocks — clocks set back while running and across restarts,
//! worker ids taken over (even on a wrong judgement that a lease lapsed,
//! while the old holder still runs), holders racing for worker ids. A
//! checker over every id issued: unique always, and within one worker
//! every holding's ids below the next holding's (docs/ids.md).

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use seqsvr_core::ids::{Generator, Layout, Order};
use seqsvr_core::SetSpec;
use seqsvr_store_core::{Command, Reply, SetState};

const NS: &str = "msg";
const BORROW: u64 = 5;
const WINDOW_MS: u64 = 50;

/// One AllocSvr process holding (or having held) a worker id.
struct Holder {
    alloc: String,
    incarnation: u64,
    /// Its clock's offset from real time, ms (set back by faults).
    skew: i64,
    /// The holding: worker id, epoch, generator.
    held: Option<(u64, u64, Generator)>,
}

struct World {
    store: SetState,
    layout: Layout,
    /// Real time, ms.
    now: u64,
    holders: Vec<Holder>,
    /// Every id issued → (worker, epoch) of the holding that issued it.
    issued: HashMap<u64, (u64, u64)>,
    next_incarnation: u64,
}

fn layout() -> Layout {
    // 2 worker bits: holders race for 4 worker ids; 3 sequence bits: the
    // sequence runs out often, so borrowing is exercised.
    Layout {
        time_bits: 40,
        worker_bits: 2,
        seq_bits: 3,
        epoch_ms: 0,
        unit_ms: 1,
        js_safe: false,
        order: Order::TimeWorkerSeq,
    }
}

impl World {
    fn new(holders: usize) -> Self {
        let mut w = World {
            store: SetState::default(),
            layout: layout(),
            now: 1_000_000_000,
            holders: Vec::new(),
            issued: HashMap::new(),
            next_incarnation: 1,
        };
        w.apply(Command::ConfigureSet(SetSpec::new(0, 0..100)))
            .unwrap();
        w.apply(Command::CreateIdSpace {
            name: NS.into(),
            layout: w.layout,
            window_ms: WINDOW_MS,
        })
        .unwrap();
        for i in 0..holders {
            let alloc = format!("a{i}");
            let inc = w.register(&alloc, 0);
            w.holders.push(Holder {
                alloc,
                incarnation: inc,
                skew: 0,
                held: None,
            });
        }
        w
    }

    fn apply(&mut self, cmd: Command) -> Result<Reply, seqsvr_store_core::Rejection> {
        self.store.apply(&cmd, &mut Vec::new())
    }

    fn register(&mut self, alloc: &str, replaces: u64) -> u64 {
        let inc = self.next_incarnation;
        self.next_incarnation += 1;
        self.apply(Command::RegisterAlloc {
            alloc: alloc.into(),
            addr: "x:1".into(),
            peer_addr: "x:2".into(),
            admin_addr: "x:3".into(),
            incarnation: inc,
            replaces,
        })
        .unwrap();
        inc
    }

    fn clock(&self, h: usize) -> u64 {
        (self.now as i64 + self.holders[h].skew) as u64
    }

    /// Holder `h` claims a worker id (if it has none), naming `reclaim`
    /// (worker, epoch) as lapsed — right or wrong.
    fn claim(&mut self, h: usize, reclaim: Vec<(u64, u64)>) {
        if self.holders[h].held.is_some() {
            return;
        }
        let now = self.layout.tick_of(self.clock(h));
        let cmd = Command::ClaimWorker {
            ns: NS.into(),
            alloc: self.holders[h].alloc.clone(),
            incarnation: self.holders[h].incarnation,
            now,
            reclaim,
        };
        if let Ok(Reply::WorkerClaimed(g)) = self.apply(cmd) {
            let gen = Generator::new(self.layout, g.worker, g.floor, g.ceiling, BORROW).unwrap();
            self.holders[h].held = Some((g.worker, g.epoch, gen));
        }
    }

    fn issue(&mut self, h: usize, n: usize) {
        let clock = self.clock(h);
        let Some((worker, epoch, gen)) = &mut self.holders[h].held else {
            return;
        };
        for _ in 0..n {
            let Ok(id) = gen.next(clock) else { break };
            let prev = self.issued.insert(id, (*worker, *epoch));
            assert!(
                prev.is_none(),
                "id {id} issued twice: {prev:?} and {:?}",
                (*worker, *epoch)
            );
        }
    }

    /// Holder `h` raises its ceiling if it wants to; the answer (if any)
    /// is all it learns.
    fn raise(&mut self, h: usize) {
        let clock = self.clock(h);
        let (alloc, inc) = (self.holders[h].alloc.clone(), self.holders[h].incarnation);
        let Some((worker, epoch, gen)) = &self.holders[h].held else {
            return;
        };
        let Some(to) = gen.wants_raise(clock, WINDOW_MS) else {
            return;
        };
        let cmd = Command::RaiseWorker {
            ns: NS.into(),
            worker: *worker,
            alloc,
            incarnation: inc,
            epoch: *epoch,
            to,
        };
        if let Ok(Reply::WorkerRaised { ceiling }) = self.apply(cmd) {
            if let Some((_, _, gen)) = &mut self.holders[h].held {
                gen.set_ceiling(ceiling);
            }
        }
    }

    /// Holder `h`'s process dies (kill -9: nothing released) and its id
    /// comes back as a new incarnation with its clock moved by `jump`.
    fn restart(&mut self, h: usize, jump: i64) {
        let (alloc, old) = (self.holders[h].alloc.clone(), self.holders[h].incarnation);
        self.holders[h].incarnation = self.register(&alloc, old);
        self.holders[h].held = None;
        self.holders[h].skew += jump;
    }

    /// Within one worker, every holding's ids lie below the next one's.
    fn check_order(&self) {
        let mut spans: BTreeMap<(u64, u64), (u64, u64)> = BTreeMap::new();
        for (&id, &key) in &self.issued {
            let s = spans.entry(key).or_insert((id, id));
            s.0 = s.0.min(id);
            s.1 = s.1.max(id);
        }
        let mut prev: Option<((u64, u64), (u64, u64))> = None;
        for (&key, &span) in &spans {
            if let Some((pk, ps)) = prev {
                if pk.0 == key.0 {
                    assert!(
                        ps.1 < span.0,
                        "worker {}: holding {pk:?} {ps:?} overlaps {key:?} {span:?}",
                        key.0
                    );
                }
            }
            prev = Some((key, span));
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    Tick(u64),
    Issue(usize, usize),
    Raise(usize),
    Claim(usize),
    /// A holder claims, naming the holder of `worker` as lapsed.
    Reclaim(usize, u64),
    ClockBack(usize, i64),
    Restart(usize, i64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u64..30).prop_map(Step::Tick),
        6 => (0usize..5, 1usize..40).prop_map(|(h, n)| Step::Issue(h, n)),
        3 => (0usize..5).prop_map(Step::Raise),
        2 => (0usize..5).prop_map(Step::Claim),
        1 => (0usize..5, 0u64..4).prop_map(|(h, w)| Step::Reclaim(h, w)),
        1 => (0usize..5, 1i64..2000).prop_map(|(h, b)| Step::ClockBack(h, b)),
        1 => (0usize..5, -3_600_000i64..1000).prop_map(|(h, j)| Step::Restart(h, j)),
    ]
}

fn run(steps: &[Step]) -> World {
    let mut w = World::new(5);
    for s in steps {
        match *s {
            Step::Tick(ms) => w.now += ms,
            Step::Issue(h, n) => w.issue(h, n),
            Step::Raise(h) => w.raise(h),
            Step::Claim(h) => w.claim(h, vec![]),
            Step::Reclaim(h, worker) => {
                let epoch = w.store.ids.spaces[NS]
                    .workers
                    .get(&worker)
                    .map_or(0, |r| r.epoch);
                w.claim(h, vec![(worker, epoch)]);
            }
            Step::ClockBack(h, back) => w.holders[h].skew -= back,
            Step::Restart(h, jump) => w.restart(h, jump),
        }
    }
    w.check_order();
    w
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    /// Any schedule: unique always, ordered within each worker.
    #[test]
    fn ids_stay_unique_and_ordered(steps in prop::collection::vec(step(), 1..400)) {
        run(&steps);
    }
}

/// The scenario the field keeps hitting: a holder restarts with its clock
/// set back an hour, right after issuing near its ceiling; its next ids
/// are above all its earlier ones.
#[test]
fn restart_with_the_clock_set_back() {
    let mut steps = vec![Step::Claim(0)];
    for _ in 0..20 {
        steps.extend([Step::Issue(0, 30), Step::Raise(0), Step::Tick(7)]);
    }
    steps.push(Step::Restart(0, -3_600_000));
    steps.push(Step::Claim(0));
    steps.extend([Step::Issue(0, 30), Step::Raise(0), Step::Issue(0, 30)]);
    let w = run(&steps);
    assert!(w.issued.len() > 200, "issued {}", w.issued.len());
}

/// A worker id taken over while its old holder still runs (a wrong or
/// late judgement that its lease lapsed): the old holder issues only up to
/// its ceiling, which it can no longer raise; the new one starts above it.
#[test]
fn take_over_while_the_old_holder_runs() {
    let mut steps = vec![Step::Claim(0), Step::Issue(0, 10), Step::Reclaim(1, 0)];
    for _ in 0..40 {
        steps.extend([
            Step::Issue(0, 20),
            Step::Raise(0),
            Step::Issue(1, 20),
            Step::Raise(1),
            Step::Tick(3),
        ]);
    }
    let w = run(&steps);
    let held: Vec<_> = w
        .holders
        .iter()
        .map(|h| h.held.as_ref().map(|x| (x.0, x.1)))
        .collect();
    assert_eq!(held[0], Some((0, 1)));
    assert_eq!(held[1], Some((0, 2)));
}
