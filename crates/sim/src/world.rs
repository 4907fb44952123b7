//! The simulated deployment and its event loop: one priority queue of
//! timestamped events ([`Env`]), processed in order, single-threaded. Every
//! random choice comes from one seeded stream, so a seed replays exactly.
//!
//! The world owns the components — the store ([`Store`]), the AllocSvr
//! processes ([`Allocs`]), the clients ([`Clients`]), the operator
//! ([`Operator`]) — hands each event to the one it is for, applies the
//! fault schedule, and at the end runs the final checks.

use seqsvr_core::checker::check;
use seqsvr_core::{Grant, Incarnation, SectionId};

use crate::alloc::Allocs;
use crate::check::Violation;
use crate::client::Clients;
use crate::config::SimConfig;
use crate::env::{trace, Env, Stats};
use crate::faults::{AdoptFate, Fault, Forgery};
use crate::model::{alloc_name, AdminMsg, AllocInput, Ev, Msg, PeerMsg, StoreReq};
use crate::net::{fmt_time, Node};
use crate::operator::Operator;
use crate::store::{bootstrap_log, Store};

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
    store: Store,
    allocs: Allocs,
    clients: Clients,
    operator: Operator,
    faults: FaultState,
}

impl World {
    /// Builds the deployment of `cfg` at time 0: the store bootstrapped
    /// with the set, the lease terms, every AllocSvr's first process
    /// registered and the sections spread over them (as a fresh cluster's
    /// config does), replica 0 leading term 1; the processes start.
    pub fn new(cfg: SimConfig) -> Self {
        let mut env = Env::new(cfg);
        let incarnations: Vec<Incarnation> = (0..env.cfg.allocs)
            .map(|_| env.rng.next_u64() | 1)
            .collect();
        let log = bootstrap_log(&mut env, &incarnations);
        let store = Store::new(&mut env, log);
        let allocs = Allocs::new(&mut env, &incarnations);
        let clients = Clients::new(&mut env);
        let times: Vec<_> = env.cfg.faults.iter().map(|(t, _)| *t).collect();
        for (i, t) in times.into_iter().enumerate() {
            env.schedule(t, Ev::Fault(i));
        }
        World {
            env,
            store,
            allocs,
            clients,
            operator: Operator::default(),
            faults: FaultState::default(),
        }
    }

    /// Runs to the configured end and checks everything.
    pub fn run(mut self) -> RunReport {
        let end = self.env.cfg.duration;
        while let Some(ev) = self.env.pop(end) {
            self.env.stats.events += 1;
            self.dispatch(ev);
            if self.env.cfg.stop_at_first && !self.env.monitor.violations.is_empty() {
                break;
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
                    (Node::Replica(r), Msg::Store(m)) => self.store.deliver(env, r, from, m),
                    (Node::Alloc(p), msg) => {
                        self.allocs.event(env, p, None, AllocInput::Msg(from, msg))
                    }
                    (Node::Client(c), Msg::Client(m)) => self.clients.msg(env, c, m),
                    (Node::Operator, m) => self.operator.msg(env, m),
                    (to, msg) => panic!("model bug: {msg:?} delivered to {to}"),
                }
            }
            Ev::Replica { r, life, t } => self.store.timer(env, r, life, t),
            Ev::ReplicaResumed { r, life, input } => self.store.resumed(env, r, life, input),
            Ev::Alloc { p, life, t } => self.allocs.event(env, p, Some(life), AllocInput::Timer(t)),
            Ev::Resumed { p, life, input } => self.allocs.event(env, p, Some(life), input),
            Ev::Client { c, t } => self.clients.timer(env, c, t),
            Ev::Operator(t) => self.operator.timer(env, t),
            Ev::Fault(i) => self.apply_fault(i),
        }
    }

    /// Applies the `i`-th fault of the schedule.
    fn apply_fault(&mut self, i: usize) {
        let fault = self.env.cfg.faults[i].1.clone();
        trace!(self.env, "FAULT #{i}: {fault}");
        let env = &mut self.env;
        let replicas: Vec<usize> = (0..self.store.len()).collect();
        let firsts: Vec<usize> = (0..env.cfg.allocs).collect();
        match fault {
            Fault::IsolateReplica { r, allocs_too } => {
                let mut cuts: Vec<(Node, Node)> = (replicas.iter())
                    .filter(|&&o| o != r)
                    .map(|&o| (Node::Replica(r), Node::Replica(o)))
                    .collect();
                if allocs_too {
                    let slots = 0..env.cfg.slots();
                    cuts.extend(slots.map(|a| (Node::Replica(r), Node::Alloc(a))));
                }
                self.cut(i, cuts);
            }
            Fault::DeposeLeader { alloc } => {
                let Some(l) = self.store.effective_leader(env) else {
                    return;
                };
                let mut cuts: Vec<(Node, Node)> = (replicas.iter())
                    .filter(|&&o| o != l)
                    .map(|&o| (Node::Replica(l), Node::Replica(o)))
                    .collect();
                if let Some(a) = alloc {
                    cuts.extend(
                        (replicas.iter())
                            .filter(|&&o| o != l)
                            .map(|&o| (Node::Alloc(a), Node::Replica(o))),
                    );
                }
                self.cut(i, cuts);
            }
            Fault::CutAlloc {
                a,
                replicas,
                answers_only,
            } => {
                let links = replicas.iter().map(|&r| (Node::Replica(r), Node::Alloc(a)));
                if answers_only {
                    self.cut_directions(i, links.collect());
                } else {
                    self.cut(i, links.collect());
                }
            }
            Fault::Heal { of } => {
                for (x, y) in self.faults.cuts.remove(&of).unwrap_or_default() {
                    env.net.heal_one_way(x, y);
                }
            }
            Fault::CrashAlloc { a } => self.allocs.crash(a),
            Fault::RestartAlloc { a } => self.allocs.restart(env, a),
            Fault::PauseAlloc { a, dur } => self.allocs.pause(env, a, dur),
            Fault::PauseAfterAdmit { a, dur } => {
                let p = &mut self.allocs.procs[a];
                if p.up && !p.paused {
                    p.pause_on_admit = Some(dur);
                }
            }
            Fault::PauseInRenewal { a, dur } => {
                let p = &mut self.allocs.procs[a];
                if p.up && !p.paused {
                    p.pause_on_renewal = Some(dur);
                }
            }
            Fault::CrashLeader => {
                if let Some(l) = self.store.believed_leader() {
                    self.store.crash(env, l);
                    self.faults.crashed.insert(i, l);
                }
            }
            Fault::CrashReplica { r } => {
                self.store.crash(env, r);
                self.faults.crashed.insert(i, r);
            }
            Fault::RestartReplica { of } => {
                if let Some(r) = self.faults.crashed.remove(&of) {
                    self.store.restart(env, r);
                }
            }
            Fault::PauseReplica { leader, r, dur } => {
                let l = self.store.believed_leader();
                let target = if leader {
                    l
                } else {
                    replicas.iter().copied().filter(|&o| Some(o) != l).nth(r)
                };
                if let Some(t) = target {
                    self.store.pause(env, t, dur);
                }
            }
            Fault::SlowNetwork { dur } => env.net.slow_until = env.now + dur,
            Fault::Handoff {
                from,
                to,
                count,
                adopt,
            } => {
                let p = &self.allocs.procs[from];
                let Some(alloc) = p.alloc.as_ref().filter(|_| p.up && p.started) else {
                    return;
                };
                let mut served = alloc.served_sections();
                let mut moves = Vec::new();
                while moves.len() < count && !served.is_empty() {
                    let s = served.remove(env.rng.pick(served.len()));
                    moves.push((s, alloc_name(to)));
                }
                if moves.is_empty() {
                    return;
                }
                let m = Msg::Admin(AdminMsg::Handoff { moves, fate: adopt });
                env.send(Node::Operator, Node::Alloc(from), m);
            }
            Fault::HandoffRoundTrip {
                from,
                to,
                stall,
                window,
            } => {
                let p = &self.allocs.procs[from];
                let Some(alloc) = p.alloc.as_ref().filter(|_| p.up && p.started) else {
                    return;
                };
                let served = alloc.served_sections();
                if served.is_empty() {
                    return;
                }
                let s = served[env.rng.pick(served.len())];
                env.net.stalls.retain(|(_, until, _)| *until > env.now);
                (env.net.stalls).push((Node::Alloc(from), env.now + window, stall));
                self.faults.round_trips.insert(i, (s, from));
                let moves = vec![(s, alloc_name(to))];
                let m = Msg::Admin(AdminMsg::Handoff {
                    moves,
                    fate: AdoptFate::Normal,
                });
                env.send(Node::Operator, Node::Alloc(from), m);
            }
            Fault::HandBack { of } => {
                let Some((s, from)) = self.faults.round_trips.remove(&of) else {
                    return;
                };
                // The operator asks whichever process serves it now.
                let holder =
                    (0..env.cfg.slots()).find(|&q| self.allocs.procs[q].serves(s, env.now));
                let Some(q) = holder.filter(|&q| q != from) else {
                    return;
                };
                let moves = vec![(s, self.allocs.procs[from].id.clone())];
                let m = Msg::Admin(AdminMsg::Handoff {
                    moves,
                    fate: AdoptFate::Normal,
                });
                env.send(Node::Operator, Node::Alloc(q), m);
            }
            Fault::ForgeAdopt { to, kind } => {
                let grant = forge(env, &self.allocs.procs[to].id, kind);
                let id = env.fresh_id();
                trace!(env, "forged adopt to p{to}: {grant:?}");
                let m = Msg::Peer(PeerMsg::Adopt { id, grant });
                env.send(Node::Operator, Node::Alloc(to), m);
            }
            Fault::OperatorAssign {
                to,
                first,
                count,
                stale,
            } => {
                let range = first as usize..(first + count) as usize;
                let mut expected: Vec<u64> =
                    env.truth.sections[range].iter().map(|r| r.epoch).collect();
                if stale {
                    expected[0] = expected[0].checked_sub(1).unwrap_or(1);
                }
                let req = StoreReq::Assign {
                    alloc: alloc_name(to),
                    first,
                    expected,
                };
                self.operator.call(env, req);
            }
            Fault::StartTwin { a } => self.allocs.restart(env, env.cfg.allocs + a),
            Fault::SetLease { terms } => self.operator.call(env, StoreReq::SetLease(terms)),
            Fault::HealEverything => {
                env.net.heal_all();
                self.faults.cuts.clear();
                for r in replicas {
                    self.store.restart(env, r);
                }
                for a in firsts {
                    if self.allocs.procs[a].fenced {
                        self.allocs.crash(a);
                    }
                    self.allocs.restart(env, a);
                    self.allocs.procs[a].pause_on_admit = None;
                    self.allocs.procs[a].pause_on_renewal = None;
                    self.allocs.crash(env.cfg.allocs + a);
                }
            }
        }
    }

    /// Cuts `links` both ways, remembering them under fault `i`.
    fn cut(&mut self, i: usize, links: Vec<(Node, Node)>) {
        let both = links.iter().flat_map(|&(x, y)| [(x, y), (y, x)]).collect();
        self.cut_directions(i, both);
    }

    fn cut_directions(&mut self, i: usize, cuts: Vec<(Node, Node)>) {
        for &(x, y) in &cuts {
            self.env.net.cut_one_way(x, y);
        }
        self.faults.cuts.entry(i).or_default().extend(cuts);
    }

    fn finish(mut self) -> RunReport {
        self.final_checks();
        let env = &mut self.env;
        let report = check(&env.monitor.observations);
        let mut violations = std::mem::take(&mut env.monitor.violations);
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
        let mut reads = env.monitor.check_current_reads();
        reads.sort_by_key(|v| v.at);
        violations.extend(reads);
        let (single, all) = env.monitor.max_skip_steps();
        RunReport {
            seed: env.cfg.seed,
            violations,
            stats: env.stats.clone(),
            max_single_skip_steps: single,
            max_skip_steps: all,
            observations: env.monitor.observations.len(),
            drift_of_bound: env.cfg.drift_of_bound(),
            describe: env.cfg.describe(),
        }
    }

    /// End-of-run checks: every replica that caught up holds the committed
    /// state (the real state machine is deterministic), and after the final
    /// heal every section served again (the model did not wedge).
    fn final_checks(&mut self) {
        let env = &mut self.env;
        for r in self.store.diverged(&env.truth) {
            env.monitor.violations.push(Violation {
                at: env.now,
                promise: 0,
                what: format!("replica r{r} applied the whole log but its state differs"),
            });
        }
        let since = env.cfg.duration.saturating_sub(env.cfg.liveness_window);
        for s in 0..env.cfg.spec.section_count() {
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

/// A forged adopt's grant for AllocSvr `me`, from the committed state.
fn forge(env: &mut Env, me: &str, kind: Forgery) -> Grant {
    let step = env.cfg.spec.step;
    let n = env.truth.sections.len();
    let mine: Vec<bool> = (env.truth.sections.iter())
        .map(|r| r.owner.as_deref() == Some(me))
        .collect();
    let owned: Vec<bool> = env
        .truth
        .sections
        .iter()
        .map(|r| r.owner.is_some())
        .collect();
    let fits: Vec<usize> = (0..n)
        .filter(|&s| match kind {
            Forgery::HugeEpoch | Forgery::Replay => mine[s],
            Forgery::OtherOwners => !mine[s] && owned[s],
            Forgery::WrongSection => true,
        })
        .collect();
    let s = if fits.is_empty() {
        env.rng.pick(n)
    } else {
        fits[env.rng.pick(fits.len())]
    } as SectionId;
    let recs = &env.truth.sections;
    let r = &recs[s as usize];
    match kind {
        Forgery::HugeEpoch => Grant {
            section: s,
            epoch: 1 << 63,
            prev_ceiling: r.start,
            max_seq: r.max_seq + step,
        },
        Forgery::OtherOwners => Grant {
            section: s,
            epoch: r.epoch,
            prev_ceiling: r.start,
            max_seq: r.max_seq.max(r.start + 1),
        },
        Forgery::WrongSection => {
            let o = &recs[(s as usize + 1) % n];
            Grant {
                section: s,
                epoch: r.epoch + 1,
                prev_ceiling: o.start,
                max_seq: o.max_seq.max(o.start + 1),
            }
        }
        Forgery::Replay => {
            let prev = r.start.saturating_sub(step);
            Grant {
                section: s,
                epoch: r.epoch.saturating_sub(1),
                prev_ceiling: prev,
                max_seq: prev + step,
            }
        }
    }
}
