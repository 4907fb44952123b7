//! The simulated deployment and its event loop: one priority queue of
//! timestamped events, processed in order, single-threaded. Every random
//! choice comes from one seeded [`Rng`], so a seed replays exactly.
//!
//! The behaviour of each kind of node lives in its own module as further
//! `impl World` blocks: [`crate::store`] (replicas), [`crate::alloc`]
//! (AllocSvrs), [`crate::client`] (clients), [`crate::faults`] (faults).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use seqsvr_core::checker::check;
use seqsvr_store::arbiter::Arbiter;
use seqsvr_store::state::SetState;
use seqsvr_store::types::Command;

use crate::alloc::{ATimer, AllocNode};
use crate::check::{Monitor, Violation};
use crate::client::{CTimer, Client, ClientMsg};
use crate::config::SimConfig;
use crate::faults::FaultState;
use crate::net::{fmt_time, Net, Node, Time, MS};
use crate::raft::{Entry, EntryRef};
use crate::rng::Rng;
use crate::store::{RTimer, Replica, StoreMsg};

/// A message in flight.
#[derive(Debug)]
pub(crate) enum Msg {
    /// Store API and Raft traffic.
    Store(StoreMsg),
    /// Client ↔ AllocSvr traffic.
    Client(ClientMsg),
}

/// Something that happens at a virtual time.
#[derive(Debug)]
pub(crate) enum Ev {
    /// A message arrives (if its link is still up and its target alive).
    Deliver {
        /// Sender.
        from: Node,
        /// Receiver.
        to: Node,
        /// The message.
        msg: Msg,
    },
    /// A store replica's timer (ignored if the replica restarted since).
    Replica {
        /// Which replica.
        r: usize,
        /// The incarnation that set it.
        inc: u32,
        /// What it is for.
        t: RTimer,
    },
    /// An input an AllocSvr queued while paused, handled after it resumed.
    Resumed {
        /// Which AllocSvr.
        a: usize,
        /// The incarnation that queued it.
        inc: u32,
        /// The input.
        input: AllocInput,
    },
    /// An AllocSvr's timer or deferred work (ignored after a crash).
    Alloc {
        /// Which AllocSvr.
        a: usize,
        /// The incarnation that set it.
        inc: u32,
        /// What it is for.
        t: ATimer,
    },
    /// A client's timer.
    Client {
        /// Which client.
        c: usize,
        /// What it is for.
        t: CTimer,
    },
    /// The `i`-th fault of the schedule.
    Fault(usize),
}

/// An event with its time; ordered so the heap pops the earliest first,
/// ties broken by scheduling order (deterministic).
struct Scheduled {
    at: Time,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// Counters of one run, for the report.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Events processed.
    pub events: u64,
    /// Client calls that returned numbers.
    pub calls_ok: u64,
    /// Client calls that failed or timed out (after retries).
    pub calls_failed: u64,
    /// Numbers handed out by allocators (seen by clients or not).
    pub handed_out: u64,
    /// `LEASE_EXPIRED` answers.
    pub lease_expired: u64,
    /// Elections won.
    pub leaders_elected: u64,
    /// Committed log entries.
    pub committed: u64,
    /// Committed take-overs (sections).
    pub takeovers: u64,
    /// Committed raises.
    pub raises: u64,
    /// Committed section moves by an arbiter (`Assign`).
    pub assigns: u64,
    /// Renewals granted.
    pub renewals: u64,
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// Every broken invariant, in the order found (the checker's last).
    pub violations: Vec<Violation>,
    /// Counters.
    pub stats: Stats,
    /// Largest skip seen at a single failover (one take-over), in steps.
    pub max_single_skip_steps: f64,
    /// Largest skip seen after any number of take-overs, in steps.
    pub max_skip_steps: f64,
    /// Numbers clients received (what the per-uid checker looked at).
    pub observations: usize,
    /// The largest AllocSvr clock drift, as a fraction of the bound.
    pub drift_of_bound: f64,
    /// The configuration and fault schedule, printable.
    pub describe: String,
}

impl std::fmt::Display for RunReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.describe)?;
        writeln!(
            f,
            "  {} numbers checked, {} violation(s); {:?}",
            self.observations,
            self.violations.len(),
            self.stats
        )?;
        for v in self.violations.iter().take(10) {
            writeln!(f, "  {v}")?;
        }
        if self.violations.len() > 10 {
            writeln!(f, "  ... and {} more", self.violations.len() - 10)?;
        }
        Ok(())
    }
}

impl RunReport {
    /// Whether every invariant held.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The whole simulated deployment.
pub struct World {
    /// Parameters of the run.
    pub(crate) cfg: SimConfig,
    /// Current virtual time.
    pub(crate) now: Time,
    /// The real `Instant` that virtual time 0 maps to (for the real
    /// components' clock arguments; only differences matter to them).
    pub(crate) base: Instant,
    /// Events to come.
    queue: BinaryHeap<Scheduled>,
    /// Tie-breaker and id source for events.
    seq: u64,
    /// Source of fresh ids (entries, calls, barriers).
    next_id: u64,
    /// The one random stream.
    pub(crate) rng: Rng,
    /// Links and delays.
    pub(crate) net: Net,
    /// The committed Raft log: every replica's log agrees with a prefix.
    pub(crate) log: Vec<EntryRef>,
    /// The committed state: `log` applied in order (for the checks).
    pub(crate) truth: SetState,
    /// Store replicas.
    pub(crate) replicas: Vec<Replica>,
    /// AllocSvrs.
    pub(crate) allocs: Vec<AllocNode>,
    /// Clients.
    pub(crate) clients: Vec<Client>,
    /// Invariant checks.
    pub(crate) monitor: Monitor,
    /// Faults applied so far (what to heal or restart).
    pub(crate) faults: FaultState,
    /// Counters.
    pub(crate) stats: Stats,
}

/// Prints a trace line when the run is verbose (formats nothing otherwise).
macro_rules! trace {
    ($w:expr, $($arg:tt)*) => {
        if $w.cfg.verbose {
            $w.trace_line(format_args!($($arg)*));
        }
    };
}
pub(crate) use trace;

impl World {
    /// Builds the deployment of `cfg` at time 0: the store bootstrapped
    /// with the set, the AllocSvrs registered and the sections spread over
    /// them (as a fresh cluster's config does), replica 0 leading term 1.
    pub fn new(cfg: SimConfig) -> Self {
        let mut rng = Rng::new(cfg.seed);
        let mut net = Net::default();
        net.delays = cfg.delays.clone();
        let base = Instant::now();
        let mut w = World {
            now: 0,
            base,
            queue: BinaryHeap::new(),
            seq: 0,
            next_id: 1,
            rng: rng.fork(),
            net,
            log: Vec::new(),
            truth: SetState::default(),
            replicas: Vec::new(),
            allocs: Vec::new(),
            clients: Vec::new(),
            monitor: Monitor::new(&cfg.spec),
            faults: FaultState::default(),
            stats: Stats::default(),
            cfg,
        };
        w.bootstrap();
        w
    }

    fn bootstrap(&mut self) {
        let spec = self.cfg.spec.clone();
        let mut cmds = vec![Command::ConfigureSet(spec.clone())];
        for a in 0..self.cfg.allocs {
            cmds.push(Command::RegisterAlloc {
                alloc: alloc_name(a),
                addr: format!("{}:1", alloc_name(a)),
            });
        }
        for s in 0..spec.section_count() {
            cmds.push(Command::Assign {
                alloc: alloc_name(s as usize % self.cfg.allocs),
                first: s,
                count: 1,
            });
        }
        for cmd in cmds {
            let e = std::rc::Rc::new(Entry {
                id: self.fresh_id(),
                term: 1,
                cmd: Some(cmd),
            });
            self.commit_effect(&e);
            self.log.push(e);
        }
        for r in 0..self.cfg.replicas {
            let mut rep = Replica::new(Arbiter::new(self.cfg.lease.clone()));
            rep.term = 1;
            rep.base = self.log.len();
            rep.commit = self.log.len();
            rep.state = self.truth.clone();
            rep.applied = self.log.len();
            rep.leader = Some(0);
            rep.election_at = self.election_timeout();
            self.replicas.push(rep);
            let phase = self.rng.range(0, 20 * MS);
            self.schedule(
                phase,
                Ev::Replica {
                    r,
                    inc: 0,
                    t: RTimer::Tick,
                },
            );
        }
        self.become_leader(0);
        for a in 0..self.cfg.allocs {
            let node = AllocNode::new(alloc_name(a), self.cfg.alloc_rate(a), self.base);
            self.allocs.push(node);
            self.alloc_start(a);
        }
        for c in 0..self.cfg.clients {
            self.clients.push(Client::new(&self.truth));
            let t = self.rng.range(500 * MS, 1500 * MS);
            self.schedule(
                t,
                Ev::Client {
                    c,
                    t: CTimer::Issue,
                },
            );
            let t = self.rng.range(1000 * MS, 3000 * MS);
            self.schedule(
                t,
                Ev::Client {
                    c,
                    t: CTimer::Refresh,
                },
            );
        }
        let times: Vec<Time> = self.cfg.faults.iter().map(|(t, _)| *t).collect();
        for (i, t) in times.into_iter().enumerate() {
            self.schedule(t, Ev::Fault(i));
        }
    }

    /// A fresh id (entries, calls, barriers, operations).
    pub(crate) fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Schedules `ev` at absolute time `at` (never in the past).
    pub(crate) fn schedule(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        let at = at.max(self.now);
        self.queue.push(Scheduled {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// Schedules `ev` after `d`.
    pub(crate) fn after(&mut self, d: Time, ev: Ev) {
        self.schedule(self.now + d, ev);
    }

    /// Sends `msg` from `from` to `to`: dropped if the link is cut now,
    /// else delivered after a random delay (and dropped then if cut).
    pub(crate) fn send(&mut self, from: Node, to: Node, msg: Msg) {
        if !self.net.reaches(from, to) {
            return;
        }
        let d = self.net.delay(&mut self.rng, self.now);
        self.after(d, Ev::Deliver { from, to, msg });
    }

    /// The real-component clock reading of the store replicas (exact).
    pub(crate) fn store_instant(&self) -> Instant {
        self.base + Duration::from_nanos(self.now)
    }

    /// A Raft election timeout (400–800 ms, as the store's defaults).
    pub(crate) fn election_timeout(&mut self) -> Time {
        self.now + self.rng.range(400 * MS, 800 * MS)
    }

    pub(crate) fn trace_line(&self, args: std::fmt::Arguments<'_>) {
        println!("{:>12} {}", fmt_time(self.now), args);
    }

    /// Runs to the configured end and checks everything.
    pub fn run(mut self) -> RunReport {
        let end = self.cfg.duration;
        while let Some(s) = self.queue.pop() {
            if s.at > end {
                break;
            }
            self.now = s.at;
            self.stats.events += 1;
            self.dispatch(s.ev);
            if self.cfg.stop_at_first && !self.monitor.violations.is_empty() {
                break;
            }
        }
        self.finish()
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver { from, to, msg } => {
                if !self.net.reaches(from, to) {
                    return;
                }
                match (to, msg) {
                    (Node::Replica(r), Msg::Store(m)) => self.replica_msg(r, from, m),
                    (Node::Alloc(a), msg) => self.alloc_event(a, None, AllocInput::Msg(msg)),
                    (Node::Client(c), Msg::Client(m)) => self.client_msg(c, m),
                    (to, msg) => panic!("model bug: {msg:?} delivered to {to}"),
                }
            }
            Ev::Replica { r, inc, t } => {
                if self.replicas[r].up && self.replicas[r].inc == inc {
                    self.replica_timer(r, t);
                }
            }
            Ev::Alloc { a, inc, t } => self.alloc_event(a, Some(inc), AllocInput::Timer(t)),
            Ev::Resumed { a, inc, input } => self.alloc_event(a, Some(inc), input),
            Ev::Client { c, t } => self.client_timer(c, t),
            Ev::Fault(i) => self.apply_fault(i),
        }
    }

    fn finish(mut self) -> RunReport {
        self.final_checks();
        let report = check(&self.monitor.observations);
        let mut violations = std::mem::take(&mut self.monitor.violations);
        let mut found: Vec<_> = report
            .regressions
            .iter()
            .map(|v| ("regression", v))
            .chain(report.repeats.iter().map(|v| ("repeat", v)))
            .collect();
        found.sort_by_key(|(_, v)| (v.later.end, v.uid, v.later.seq));
        for (what, v) in found {
            violations.push(Violation {
                at: v.later.end,
                promise: 1,
                what: format!(
                    "{what} for uid {}: got {} in a call [{}, {}] after {} in a call [{}, {}]",
                    v.uid,
                    v.later.seq,
                    fmt_time(v.later.start),
                    fmt_time(v.later.end),
                    v.earlier.seq,
                    fmt_time(v.earlier.start),
                    fmt_time(v.earlier.end)
                ),
            });
        }
        RunReport {
            seed: self.cfg.seed,
            violations,
            stats: self.stats.clone(),
            max_single_skip_steps: self.monitor.max_skip_steps().0,
            max_skip_steps: self.monitor.max_skip_steps().1,
            observations: self.monitor.observations.len(),
            drift_of_bound: self.cfg.drift_of_bound(),
            describe: self.cfg.describe(),
        }
    }

    /// End-of-run checks: every replica that caught up holds the committed
    /// state (the real state machine is deterministic), and after the final
    /// heal every section served again (the model did not wedge).
    fn final_checks(&mut self) {
        for (i, r) in self.replicas.iter().enumerate() {
            if r.applied == self.log.len() && r.state != self.truth {
                self.monitor.violations.push(Violation {
                    at: self.now,
                    promise: 0,
                    what: format!("replica r{i} applied the whole log but its state differs"),
                });
            }
        }
        let since = self.cfg.duration.saturating_sub(self.cfg.liveness_window);
        for s in 0..self.cfg.spec.section_count() {
            if self.monitor.last_served(s) < since {
                let what = format!(
                    "section {s} served nothing in the last {} after every fault healed",
                    fmt_time(self.cfg.liveness_window)
                );
                self.monitor.violations.push(Violation {
                    at: self.now,
                    promise: 0,
                    what,
                });
            }
        }
    }
}

/// What reaches an AllocSvr: a message or one of its own timers.
#[derive(Debug)]
pub(crate) enum AllocInput {
    /// A message.
    Msg(Msg),
    /// A timer or deferred piece of work.
    Timer(ATimer),
}

/// The id of AllocSvr `a` in the store.
pub(crate) fn alloc_name(a: usize) -> String {
    format!("a{a}")
}

/// The index of the AllocSvr called `name`.
pub(crate) fn alloc_index(name: &str) -> Option<usize> {
    name.strip_prefix('a')?.parse().ok()
}
