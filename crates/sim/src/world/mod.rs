//! The simulated deployment and its event loop: one priority queue of
//! timestamped events ([`Env`]), processed in order, single-threaded. Every
//! random choice comes from one seeded stream, so a seed replays exactly.
//!
//! The world owns the components — a store group per set ([`Store`]), the
//! AllocSvr processes of every set ([`Allocs`]), the clients ([`Clients`]),
//! the operator ([`Operator`]) and its range movers ([`Movers`]) — hands
//! each event to the one it is for, applies the fault schedule (`apply`),
//! and at the end runs the final checks.

mod apply;
mod ids;

use seqsvr_core::checker::{self, check, Observation};
use seqsvr_core::{Incarnation, SectionId};

use crate::alloc::Allocs;
use crate::check::Violation;
use crate::client::Clients;
use crate::config::SimConfig;
use crate::env::{Env, Stats};
use crate::model::{AllocInput, Ev, Msg};
use crate::mover::Movers;
use crate::net::{fmt_time, Node, Time};
use crate::operator::Operator;
use crate::store::{bootstrap_logs, Store};

/// What a run found.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// Every broken invariant, in the order found (the checkers' last).
    pub violations: Vec<Violation>,
    /// Counters.
    pub stats: Stats,
    /// Largest skip seen at a single failover (one take-over), in steps.
    pub max_single_skip_steps: f64,
    /// Largest skip seen after any number of take-overs, in steps.
    pub max_skip_steps: f64,
    /// Largest skip seen at the first number after a range move, in steps.
    pub max_move_skip_steps: f64,
    /// Numbers clients received (what the per-uid checker looked at).
    pub observations: usize,
    /// The largest AllocSvr clock drift, as a fraction of the bound.
    pub drift_of_bound: f64,
    /// The configuration and fault schedule, printable.
    pub describe: String,
    /// Counters of the id traffic (zero unless ids were simulated).
    pub ids: crate::ids::check::IdStats,
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
        if self.ids.issued > 0 {
            writeln!(f, "  ids: {:?}", self.ids)?;
        }
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

/// Links cut and replicas crashed by applied faults, so they can be undone.
#[derive(Debug, Default)]
struct FaultState {
    /// Links cut, by fault index.
    cuts: std::collections::BTreeMap<usize, Vec<(Node, Node)>>,
    /// Replica crashed, by fault index.
    crashed: std::collections::BTreeMap<usize, usize>,
    /// The section a round trip handed off, from whom, by fault index.
    round_trips: std::collections::BTreeMap<usize, (SectionId, usize)>,
}

/// The whole simulated deployment.
pub struct World {
    env: Env,
    stores: Vec<Store>,
    allocs: Allocs,
    clients: Clients,
    operator: Operator,
    movers: Movers,
    faults: FaultState,
    id_clients: crate::ids::client::IdClients,
}

impl World {
    /// Builds the deployment of `cfg` at time 0: each set's store group
    /// bootstrapped (set 0 serving its span, every other set added for the
    /// rest of its span, as `seqctl set add` does), every AllocSvr's first
    /// process registered and the sections spread over them (as a fresh
    /// cluster's config does), replica 0 leading term 1 in each; the
    /// processes start.
    pub fn new(cfg: SimConfig) -> Self {
        cfg.check();
        let mut env = Env::new(cfg);
        let incarnations: Vec<Vec<Incarnation>> = (0..env.cfg.sets.len())
            .map(|_| {
                (0..env.cfg.allocs)
                    .map(|_| env.rng.next_u64() | 1)
                    .collect()
            })
            .collect();
        let logs = bootstrap_logs(&mut env, &incarnations);
        let stores = (logs.into_iter().enumerate())
            .map(|(set, log)| Store::new(&mut env, set, log))
            .collect();
        let allocs = Allocs::new(&mut env, &incarnations);
        let clients = Clients::new(&mut env);
        let times: Vec<_> = env.cfg.faults.iter().map(|(t, _)| *t).collect();
        for (i, t) in times.into_iter().enumerate() {
            env.schedule(t, Ev::Fault(i));
        }
        let (first, n) = (
            env.cfg.clients,
            env.cfg.ids.as_ref().map_or(0, |i| i.clients),
        );
        let id_clients = crate::ids::client::IdClients::new(&mut env, first, n);
        let times: Vec<_> = (env.cfg.ids.iter().flat_map(|i| &i.faults))
            .map(|(t, _)| *t)
            .collect();
        for (i, t) in times.into_iter().enumerate() {
            env.schedule(t, Ev::Ids(crate::ids::IdEv::Fault(i)));
        }
        World {
            env,
            stores,
            allocs,
            clients,
            operator: Operator::default(),
            movers: Movers::default(),
            faults: FaultState::default(),
            id_clients,
        }
    }

    /// Runs to the configured end and checks everything.
    pub fn run(mut self) -> RunReport {
        let end = self.env.cfg.duration;
        // Violations looked at so far (`stop_at_first`: a sanity check of
        // the model does not stop the run, a broken promise does).
        let mut seen = 0;
        while let Some(ev) = self.env.pop(end) {
            self.env.stats.events += 1;
            self.dispatch(ev);
            let found = &self.env.monitor.violations;
            if self.env.cfg.stop_at_first && found.len() > seen {
                if found[seen..].iter().any(|v| v.promise != 0) {
                    break;
                }
                seen = found.len();
            }
        }
        self.finish()
    }

    fn dispatch(&mut self, ev: Ev) {
        let env = &mut self.env;
        match ev {
            Ev::Deliver { from, to, msg } => {
                if !env.net.reaches(from, to) {
                    return;
                }
                match (to, msg) {
                    (Node::Replica(r), Msg::Store(m)) => {
                        let l = env.cfg.layout();
                        let (set, i) = (l.set_of_replica(r), r % l.replicas);
                        self.stores[set].deliver(env, i, from, m)
                    }
                    (Node::Alloc(p), msg) => {
                        self.allocs.event(env, p, None, AllocInput::Msg(from, msg))
                    }
                    (Node::Client(c), Msg::Client(m)) => self.clients.msg(env, c, m),
                    (Node::Client(c), Msg::Id(m)) => self.id_clients.msg(env, c, m),
                    (Node::Operator, m) => self.operator.msg(env, from, m),
                    (Node::Mover, m) => self.movers.msg(env, from, m),
                    (to, msg) => panic!("model bug: {msg:?} delivered to {to}"),
                }
            }
            Ev::Replica { set, r, life, t } => self.stores[set].timer(env, r, life, t),
            Ev::ReplicaResumed {
                set,
                r,
                life,
                input,
            } => self.stores[set].resumed(env, r, life, input),
            Ev::Alloc { p, life, t } => self.allocs.event(env, p, Some(life), AllocInput::Timer(t)),
            Ev::Resumed { p, life, input } => self.allocs.event(env, p, Some(life), input),
            Ev::Client { c, t } => self.clients.timer(env, c, t),
            Ev::Operator(set, t) => self.operator.timer(env, set, t),
            Ev::Mover { run, t } => self.movers.timer(env, run, t),
            Ev::Fault(i) => self.apply_fault(i),
            Ev::Ids(ev) => self.id_event(ev),
        }
    }

    fn finish(mut self) -> RunReport {
        self.final_checks();
        self.id_checks();
        let env = &mut self.env;
        let report = check(&env.monitor.observations);
        let mut violations = std::mem::take(&mut env.monitor.violations);
        violations.extend(promise_1(&report));
        let (single, all, moved) = env.monitor.max_skip_steps();
        RunReport {
            seed: env.cfg.seed,
            violations,
            stats: env.stats.clone(),
            max_single_skip_steps: single,
            max_skip_steps: all,
            max_move_skip_steps: moved,
            observations: report.observations,
            drift_of_bound: env.cfg.drift_of_bound(),
            describe: env.cfg.describe(),
            ids: env.ids.stats.clone(),
        }
    }

    /// End-of-run checks: every replica that caught up holds its group's
    /// committed state (the real state machine is deterministic), and after
    /// the final heal every section of the grid served again, in one set
    /// or the other (the model did not wedge, and no move was left half
    /// done).
    fn final_checks(&mut self) {
        let env = &mut self.env;
        for (set, store) in self.stores.iter().enumerate() {
            for r in store.diverged(&env.truth[set]) {
                env.monitor.violations.push(Violation {
                    at: env.now,
                    promise: 0,
                    what: format!(
                        "replica r{} applied the whole log but its state differs",
                        env.cfg.layout().replica(set, r)
                    ),
                });
            }
        }
        let since = env.cfg.duration.saturating_sub(env.cfg.liveness_window);
        for s in 0..env.cfg.grid().section_count() {
            if env.monitor.last_served(s) < since {
                let what = format!(
                    "section {s} served nothing in the last {} after every fault healed",
                    fmt_time(env.cfg.liveness_window)
                );
                env.monitor.violations.push(Violation {
                    at: env.now,
                    promise: 0,
                    what,
                });
            }
        }
    }
}

/// Promise 1's violations as the per-uid checker found them, in the order
/// they happened: numbers handed out (a later call's, or a batch's later
/// copy of a uid), then `Current` answers.
fn promise_1(report: &checker::Report<Time>) -> Vec<Violation> {
    let call = |o: &Observation<Time>| format!("[{}, {}]", fmt_time(o.start), fmt_time(o.end));
    let mut found: Vec<_> = (report.regressions.iter())
        .map(|v| ("regression", v))
        .chain(report.repeats.iter().map(|v| ("repeat", v)))
        .collect();
    found.sort_by_key(|(_, v)| (v.later.end, v.uid, v.later.seq));
    let mut out: Vec<Violation> = (found.into_iter())
        .map(|(what, v)| {
            let (e, l) = (&v.earlier, &v.later);
            let what = if e.same_call(l) {
                format!(
                    "{what} for uid {}: got {} at position {} of a batch call {} after {} at position {} of the same call",
                    v.uid,
                    l.seq,
                    l.index,
                    call(l),
                    e.seq,
                    e.index
                )
            } else {
                format!(
                    "{what} for uid {}: got {} in a call {} after {} in a call {}",
                    v.uid,
                    l.seq,
                    call(l),
                    e.seq,
                    call(e)
                )
            };
            Violation {
                at: l.end,
                promise: 1,
                what,
            }
        })
        .collect();
    let mut reads: Vec<Violation> = (report.stale_reads.iter())
        .map(|v| Violation {
            at: v.later.end,
            promise: 1,
            what: format!(
                "Current of uid {} in a call {} answered {}, below {} received in a call {} before it",
                v.uid,
                call(&v.later),
                v.later.seq,
                v.earlier.seq,
                call(&v.earlier)
            ),
        })
        .chain(report.reads_ahead.iter().map(|v| Violation {
            at: v.later.end,
            promise: 1,
            what: format!(
                "uid {} got {} in a call {} sent after a Current call {} answered {}",
                v.uid,
                v.later.seq,
                call(&v.later),
                call(&v.earlier),
                v.earlier.seq
            ),
        }))
        .collect();
    reads.sort_by_key(|v| v.at);
    out.extend(reads);
    out
}
