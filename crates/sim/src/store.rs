//! The store: replicas that run the Raft model of [`crate::raft`] around
//! the *real* state machine ([`SetState::apply`]) and the *real* arbiter
//! ([`Arbiter`]), and serve the store API as `crates/store/src/service/`
//! does.
//!
//! - Routing (`service/mod.rs`, `route`): any replica takes a peer-plane
//!   call; a follower forwards it once to the leader it knows (answering
//!   NO_LEADER if the leader has not answered within 2 s) or parks it up
//!   to 3 s until it learns one. Admin calls are not forwarded.
//! - Reads (`barrier`): renewals, route reads and section reads first
//!   confirm leadership with a quorum *after* the request arrived, then
//!   wait until everything in the log at that point is applied.
//! - The arbiter's lock (`Arbiter::moves`): held by the arbiter loop from
//!   `plan` until its moves are applied, by a registration, an operator
//!   assign and a lease change from their check until their write is
//!   applied, and taken by a renewal to record its grant and read its
//!   sections. Waiters queue in order (a fair async mutex).
//! - Renewal (`service/peer.rs`, `renew`): the registered, unfenced
//!   incarnation only (`SetState::check_incarnation`), granted only if
//!   `Arbiter::granted(alloc, term_before_barrier, now, terms)` agrees,
//!   under the lease terms in force.
//! - Registration (`register`): a different registered incarnation is
//!   replaced only if the arbiter's view says its lease has certainly
//!   expired; otherwise `Twin`.
//! - Operator assign (`service/admin.rs`): only away from owners whose
//!   lease has certainly expired, conditional on the epochs read; lease
//!   change: only when `Arbiter::lease_change_allowed`.
//! - The arbiter loop (`node.rs`, `arbitrate`): every `tick_ms`, under the
//!   lock, `observe`, `plan` on this replica's applied state, then propose
//!   the moves one by one, stopping at the first refused.
//!
//! A replica may be paused (SIGSTOP): what reaches it meanwhile is handled
//! on resume, in a random order. Every replica's clock is exact (drift is
//! modelled on the AllocSvrs, relative to the store).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use seqsvr_core::{AllocId, Incarnation, LeaseTerms, SectionId};
use seqsvr_store::arbiter::Arbiter;
use seqsvr_store::state::SetState;
use seqsvr_store::types::{Command, Outcome, Rejection, Reply};
use seqsvr_store_api::SectionInfo;

use crate::env::{trace, Env};
use crate::model::{
    admin_addr, client_addr, peer_addr, Ev, Msg, Pending, RTimer, Renewal, ReplicaInput, RouteView,
    StoreFail, StoreMsg, StoreOk, StoreReq, StoreResp,
};
use crate::net::{Node, Time, MS, SEC, US};
use crate::raft::{Raft, RaftOut};

/// Longest wait between two ticks of a replica (its timers are checked
/// at each; a tick is also scheduled for the next heartbeat or election).
const TICK: Time = 100 * MS;
/// How long a call waits at a replica for a leader to be known.
const LEADER_WAIT: Time = 3 * SEC;
/// How long a forwarded call may take at the leader.
const FORWARD_TIMEOUT: Time = 2 * SEC;
/// How long a barrier waits for a quorum before failing.
const BARRIER_WAIT: Time = SEC;

/// A renewal or read waiting for its barrier.
#[derive(Debug)]
struct Barrier {
    /// The term read before the barrier (as `service/peer.rs` does).
    term: u64,
    /// Log length when it started: everything up to it must be applied.
    need: usize,
    /// Followers that acknowledged this barrier's probe in `term`.
    acks: BTreeSet<usize>,
    /// Quorum reached.
    confirmed: bool,
    /// Fails with "no leader" after this.
    deadline: Time,
    /// The request.
    pending: Pending,
}

/// Whose commit a leader waits for.
#[derive(Debug)]
enum Waiter {
    /// A caller's write.
    Call(Pending),
    /// A caller's write made under the arbiter's lock (registration,
    /// operator assign, lease change): the lock is released on commit.
    Locked(Pending),
    /// The arbiter's move.
    Arbiter,
}

/// Who wants the arbiter's lock.
#[derive(Debug)]
enum Want {
    /// A renewal past its barrier, with the term read before it.
    Renew(u64, Pending),
    /// A registration, operator assign or lease change.
    Write(Pending),
    /// The arbiter loop's tick.
    Arbiter,
}

/// One store replica's API layer (its consensus state is in [`Raft`]).
#[derive(Debug)]
struct Replica {
    /// The real arbiter (volatile: a restart starts a fresh one).
    arbiter: Arbiter,
    /// The arbiter's lock is held.
    locked: bool,
    /// Waiting for the lock, in order.
    lock_queue: VecDeque<Want>,
    /// The arbiter's moves still to propose (the first is in flight).
    moves: Vec<Command>,
    /// Next arbiter tick.
    next_arbiter: Time,
    /// Leader: writes waiting for their commit, by entry id.
    waiters: BTreeMap<u64, Waiter>,
    /// Leader: renewals and reads waiting for their barrier, by id.
    barriers: BTreeMap<u64, Barrier>,
    /// Calls waiting to learn a leader, with their deadline.
    parked: Vec<(Time, Pending)>,
    /// Calls forwarded to the leader, answered NO_LEADER at their deadline.
    forwards: BTreeMap<u64, (Time, Pending)>,
    /// What arrived while paused.
    inbox: Vec<ReplicaInput>,
    /// The lease terms of the applied state last seen.
    terms: LeaseTerms,
    /// The current chain of ticks.
    tick_gen: u64,
}

impl Replica {
    fn new(env: &Env, terms: LeaseTerms) -> Self {
        Self {
            arbiter: Arbiter::new(env.cfg.arbiter.clone()),
            locked: false,
            lock_queue: VecDeque::new(),
            moves: Vec::new(),
            next_arbiter: 0,
            waiters: BTreeMap::new(),
            barriers: BTreeMap::new(),
            parked: Vec::new(),
            forwards: BTreeMap::new(),
            inbox: Vec::new(),
            terms,
            tick_gen: 0,
        }
    }
}

/// The store group: consensus plus each replica's API layer.
#[derive(Debug)]
pub(crate) struct Store {
    /// Raft: terms, logs, states.
    pub raft: Raft,
    /// The API layer per replica.
    reps: Vec<Replica>,
}

impl Store {
    /// The store of `env.cfg`, bootstrapped with `log` (committed and
    /// applied to `env.truth` already), replica 0 leading term 1.
    pub(crate) fn new(env: &mut Env, log: Vec<crate::model::EntryRef>) -> Self {
        let n = env.cfg.replicas;
        let raft = Raft::new(env, n, log);
        let terms = env.truth.lease.terms;
        let reps = (0..n).map(|_| Replica::new(env, terms)).collect();
        let mut store = Store { raft, reps };
        for r in 0..n {
            let phase = env.rng.range(0, TICK);
            env.after(
                phase,
                Ev::Replica {
                    r,
                    life: 0,
                    t: RTimer::Tick(0),
                },
            );
        }
        let mut out = Vec::new();
        store.raft.become_leader(env, 0, &mut out);
        store.process(env, out);
        store
    }

    /// Number of replicas.
    pub(crate) fn len(&self) -> usize {
        self.reps.len()
    }

    /// A replica's timer.
    pub(crate) fn timer(&mut self, env: &mut Env, r: usize, life: u32, t: RTimer) {
        let node = &self.raft.nodes[r];
        if !node.up || node.life != life {
            return;
        }
        match t {
            RTimer::Resume => self.resume(env, r),
            RTimer::Tick(_) if node.paused => {}
            RTimer::Tick(gen) if gen == self.reps[r].tick_gen => self.tick(env, r),
            RTimer::Tick(_) => {}
        }
    }

    /// A message reaches replica `r`.
    pub(crate) fn deliver(&mut self, env: &mut Env, r: usize, from: Node, m: StoreMsg) {
        let node = &self.raft.nodes[r];
        if !node.up {
            return;
        }
        if node.paused {
            self.reps[r].inbox.push(ReplicaInput::Msg(from, m));
            return;
        }
        self.handle(env, r, from, m);
    }

    /// An input queued while paused, handled after the resume.
    pub(crate) fn resumed(&mut self, env: &mut Env, r: usize, life: u32, input: ReplicaInput) {
        let node = &self.raft.nodes[r];
        if !node.up || node.life != life {
            return;
        }
        if node.paused {
            self.reps[r].inbox.push(input);
            return;
        }
        let ReplicaInput::Msg(from, m) = input;
        self.handle(env, r, from, m);
    }

    fn handle(&mut self, env: &mut Env, r: usize, from: Node, m: StoreMsg) {
        let mut out = Vec::new();
        match m {
            StoreMsg::Req(p) => return self.request(env, r, p),
            StoreMsg::Resp { call, resp, relay } => {
                let fid = relay.expect("answers reach replicas only to be relayed");
                if let Some((_, p)) = self.reps[r].forwards.remove(&fid) {
                    let m = StoreMsg::Resp {
                        call,
                        resp,
                        relay: None,
                    };
                    env.send(Node::Replica(r), p.call.node, Msg::Store(m));
                }
            }
            StoreMsg::Append(m) => self.raft.on_append(env, r, m, &mut out),
            StoreMsg::Ack(m) => {
                debug_assert_eq!(from, Node::Replica(m.from));
                self.raft.on_ack(env, r, m, &mut out);
            }
        }
        self.process(env, out);
    }

    fn tick(&mut self, env: &mut Env, r: usize) {
        let now = env.now;
        self.expire_waits(env, r);
        let mut out = Vec::new();
        self.raft.tick(env, r, &mut out);
        self.process(env, out);
        if now >= self.reps[r].next_arbiter {
            self.reps[r].next_arbiter = now + env.cfg.arbiter.tick_ms * MS;
            self.want(env, r, Want::Arbiter);
        }
        self.next_tick(env, r);
    }

    /// Schedules the next tick: the next heartbeat, election, arbiter tick
    /// or wait deadline, at most [`TICK`] away.
    fn next_tick(&mut self, env: &mut Env, r: usize) {
        let node = &self.raft.nodes[r];
        let rep = &self.reps[r];
        let due = if node.leading {
            node.next_heartbeat
        } else {
            node.election_at
        };
        let waits = (rep.parked.iter().map(|(d, _)| *d))
            .chain(rep.barriers.values().map(|b| b.deadline))
            .chain(rep.forwards.values().map(|(d, _)| *d));
        let at = waits
            .chain([due, rep.next_arbiter, env.now + TICK])
            .min()
            .unwrap_or(env.now + TICK)
            .max(env.now + US);
        let (life, gen) = (node.life, rep.tick_gen);
        env.schedule(
            at,
            Ev::Replica {
                r,
                life,
                t: RTimer::Tick(gen),
            },
        );
    }

    /// Acts on what Raft reported.
    fn process(&mut self, env: &mut Env, out: Vec<RaftOut>) {
        for o in out {
            match o {
                RaftOut::Committed {
                    leader,
                    id,
                    outcome,
                } => self.committed(env, leader, id, outcome),
                RaftOut::SteppedDown(r) => self.stepped_down(env, r),
                RaftOut::KnowsLeader(r) => self.unpark(env, r),
                RaftOut::Probe {
                    leader,
                    id,
                    from,
                    term,
                } => {
                    let majority = self.raft.majority();
                    if let Some(b) = self.reps[leader].barriers.get_mut(&id) {
                        if b.term == term {
                            b.acks.insert(from);
                            b.confirmed |= b.acks.len() + 1 >= majority;
                        }
                    }
                    self.finish_barriers(env, leader);
                }
                RaftOut::Applied(r) => {
                    self.terms_changed(env, r);
                    if self.raft.nodes[r].leading {
                        self.finish_barriers(env, r);
                    }
                }
            }
        }
    }

    /// The `lease_by_current_terms` knob: when the applied lease terms
    /// change, every grant of this office is judged by the new ones.
    fn terms_changed(&mut self, env: &mut Env, r: usize) {
        let terms = self.raft.nodes[r].state.lease.terms;
        let rep = &mut self.reps[r];
        if terms == rep.terms {
            return;
        }
        rep.terms = terms;
        let node = &self.raft.nodes[r];
        if env.cfg.knobs.lease_by_current_terms && node.leading {
            // Grants made under the old terms count for no more than the
            // new terms: as if this office began now, waiting (see
            // `judged`) only the new terms' lease + margin.
            let now = env.store_instant();
            rep.arbiter.observe(None, now);
            rep.arbiter.observe(Some(node.term), now);
        }
    }

    /// The state the arbiter judges by: with `lease_by_current_terms`, a
    /// new office waits only the current terms.
    fn judged(&self, env: &Env, r: usize) -> std::borrow::Cow<'_, SetState> {
        let st = &self.raft.nodes[r].state;
        if env.cfg.knobs.lease_by_current_terms && st.lease.replaced_expiry_ms != 0 {
            let mut st = st.clone();
            st.lease.replaced_expiry_ms = 0;
            std::borrow::Cow::Owned(st)
        } else {
            std::borrow::Cow::Borrowed(st)
        }
    }

    fn expire_waits(&mut self, env: &mut Env, r: usize) {
        let now = env.now;
        let rep = &mut self.reps[r];
        let (gone, kept): (Vec<_>, Vec<_>) = rep.parked.drain(..).partition(|(d, _)| *d <= now);
        rep.parked = kept;
        let late: Vec<u64> = (rep.barriers.iter())
            .filter(|(_, b)| b.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        let late: Vec<Barrier> = late
            .iter()
            .filter_map(|id| rep.barriers.remove(id))
            .collect();
        let unanswered: Vec<u64> = (rep.forwards.iter())
            .filter(|(_, (d, _))| *d <= now)
            .map(|(id, _)| *id)
            .collect();
        let unanswered: Vec<Pending> = (unanswered.iter())
            .filter_map(|id| rep.forwards.remove(id).map(|(_, p)| p))
            .collect();
        for (_, p) in gone {
            reply(env, r, &p, Err(StoreFail::NoLeader));
        }
        for b in late {
            reply(env, r, &b.pending, Err(StoreFail::NoLeader));
        }
        for p in unanswered {
            reply(env, r, &p, Err(StoreFail::NoLeader));
        }
    }

    /// A request reaches replica `r`.
    fn request(&mut self, env: &mut Env, r: usize, p: Pending) {
        if self.raft.nodes[r].leading {
            self.lead(env, r, p);
        } else if p.forwarded || p.req.admin() {
            reply(env, r, &p, Err(StoreFail::NoLeader));
        } else {
            self.park_or_forward(env, r, p);
        }
    }

    /// `route()` after the local attempt said "not the leader".
    fn not_leader(&mut self, env: &mut Env, r: usize, p: Pending) {
        if p.forwarded || p.req.admin() {
            reply(env, r, &p, Err(StoreFail::NoLeader));
        } else {
            self.park_or_forward(env, r, p);
        }
    }

    fn park_or_forward(&mut self, env: &mut Env, r: usize, p: Pending) {
        match self.raft.nodes[r].leader {
            Some(l) if l == r && self.raft.nodes[r].leading => self.lead(env, r, p),
            Some(l) if l != r => {
                let fid = env.fresh_id();
                let fwd = Pending {
                    forwarded: true,
                    via: Some((r, fid)),
                    ..p.clone()
                };
                self.reps[r]
                    .forwards
                    .insert(fid, (env.now + FORWARD_TIMEOUT, p));
                env.send(
                    Node::Replica(r),
                    Node::Replica(l),
                    Msg::Store(StoreMsg::Req(fwd)),
                );
            }
            _ => {
                let until = env.now + LEADER_WAIT;
                self.reps[r].parked.push((until, p));
            }
        }
    }

    fn unpark(&mut self, env: &mut Env, r: usize) {
        let parked = std::mem::take(&mut self.reps[r].parked);
        for (_, p) in parked {
            self.park_or_forward(env, r, p);
        }
    }

    /// Handles a call at a replica that believes it leads.
    fn lead(&mut self, env: &mut Env, r: usize, p: Pending) {
        let cmd = match &p.req {
            StoreReq::Renew { .. } if env.cfg.knobs.unsafe_renewals => {
                let term = self.raft.nodes[r].term;
                return self.want(env, r, Want::Renew(term, p));
            }
            StoreReq::Renew { .. } | StoreReq::Routes | StoreReq::Read { .. } => {
                return self.start_barrier(env, r, p)
            }
            StoreReq::Register { .. } | StoreReq::Assign { .. } | StoreReq::SetLease(_) => {
                return self.want(env, r, Want::Write(p))
            }
            StoreReq::TakeOver {
                alloc,
                incarnation,
                first,
                known,
            } => Command::TakeOver {
                alloc: alloc.clone(),
                incarnation: *incarnation,
                first: *first,
                known: known.clone(),
            },
            StoreReq::Raise {
                alloc,
                incarnation,
                section,
                epoch,
                to,
            } => Command::Raise {
                alloc: alloc.clone(),
                incarnation: *incarnation,
                section: *section,
                epoch: *epoch,
                to: *to,
            },
            StoreReq::Handoff {
                from,
                incarnation,
                to,
                section,
                epoch,
            } => Command::Handoff {
                from: from.clone(),
                incarnation: *incarnation,
                to: to.clone(),
                section: *section,
                epoch: *epoch,
            },
        };
        self.propose(env, r, cmd, Waiter::Call(p));
    }

    fn propose(&mut self, env: &mut Env, r: usize, cmd: Command, w: Waiter) {
        let id = self.raft.append(env, r, Some(cmd));
        self.reps[r].waiters.insert(id, w);
        self.raft.replicate(env, r, None);
    }

    fn start_barrier(&mut self, env: &mut Env, r: usize, p: Pending) {
        let id = env.fresh_id();
        let single = self.raft.majority() == 1;
        let node = &self.raft.nodes[r];
        let b = Barrier {
            term: node.term,
            need: node.len(),
            acks: BTreeSet::new(),
            confirmed: single,
            deadline: env.now + BARRIER_WAIT,
            pending: p,
        };
        self.reps[r].barriers.insert(id, b);
        self.raft.replicate(env, r, Some(id));
    }

    fn finish_barriers(&mut self, env: &mut Env, l: usize) {
        let applied = self.raft.nodes[l].applied;
        let done: Vec<u64> = (self.reps[l].barriers.iter())
            .filter(|(_, b)| b.confirmed && applied >= b.need)
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            let Some(b) = self.reps[l].barriers.remove(&id) else {
                continue;
            };
            match &b.pending.req {
                StoreReq::Renew { .. } => self.want(env, l, Want::Renew(b.term, b.pending)),
                StoreReq::Routes => {
                    let resp = Ok(StoreOk::Routes(RouteView::of(&self.raft.nodes[l].state)));
                    reply(env, l, &b.pending, resp);
                }
                StoreReq::Read { section } => {
                    let resp = read_section(&self.raft.nodes[l].state, *section);
                    reply(env, l, &b.pending, resp);
                }
                other => unreachable!("{other:?} has no barrier"),
            }
        }
    }

    /// Takes the arbiter's lock for `w`, or queues it. Renewals with the
    /// `renew_during_moves` knob do not wait for it.
    fn want(&mut self, env: &mut Env, r: usize, w: Want) {
        let rep = &mut self.reps[r];
        let bypass = matches!(w, Want::Renew(..)) && env.cfg.knobs.renew_during_moves;
        if bypass || (!rep.locked && rep.lock_queue.is_empty()) {
            return self.run_locked(env, r, w);
        }
        if matches!(w, Want::Arbiter) && rep.lock_queue.iter().any(|w| matches!(w, Want::Arbiter)) {
            return;
        }
        rep.lock_queue.push_back(w);
    }

    /// Releases the arbiter's lock and lets the next waiters run.
    fn unlock(&mut self, env: &mut Env, r: usize) {
        self.reps[r].locked = false;
        while !self.reps[r].locked {
            let Some(w) = self.reps[r].lock_queue.pop_front() else {
                return;
            };
            self.run_locked(env, r, w);
        }
    }

    /// Runs `w` holding the lock; it stays held while a write is in flight.
    fn run_locked(&mut self, env: &mut Env, r: usize, w: Want) {
        if !self.raft.nodes[r].leading {
            match w {
                Want::Renew(_, p) | Want::Write(p) => return self.not_leader(env, r, p),
                Want::Arbiter => {}
            }
        }
        match w {
            Want::Renew(term, p) => {
                let resp = self.grant_renewal(env, r, term, &p.req);
                reply(env, r, &p, resp);
            }
            Want::Write(p) => match self.decide(env, r, &p.req) {
                Ok(cmd) => {
                    self.reps[r].locked = true;
                    self.propose(env, r, cmd, Waiter::Locked(p));
                }
                Err(e) => reply(env, r, &p, Err(e)),
            },
            Want::Arbiter => self.arbiter_tick(env, r),
        }
    }

    /// The checks a registration, operator assign or lease change makes
    /// under the lock, and the command it then writes.
    fn decide(&mut self, env: &mut Env, r: usize, req: &StoreReq) -> Result<Command, StoreFail> {
        let now = env.store_instant();
        let judged = self.judged(env, r);
        let st = &self.raft.nodes[r].state;
        let arbiter = &self.reps[r].arbiter;
        match req {
            StoreReq::Register {
                alloc,
                slot,
                incarnation,
            } => {
                let replaces = match st.allocs.get(alloc) {
                    Some(rec) if rec.incarnation != *incarnation => {
                        let view = arbiter.view(&judged, now);
                        let expired = view.get(alloc).is_some_and(|v| v.expired);
                        if !expired && !env.cfg.knobs.admit_twins {
                            env.stats.twins_refused += 1;
                            return Err(StoreFail::Rejected(Rejection::Twin {
                                alloc: alloc.clone(),
                                live: rec.incarnation,
                                addr: rec.addr.clone(),
                            }));
                        }
                        rec.incarnation
                    }
                    _ => 0,
                };
                Ok(Command::RegisterAlloc {
                    alloc: alloc.clone(),
                    addr: client_addr(*slot),
                    peer_addr: peer_addr(*slot),
                    admin_addr: admin_addr(*slot),
                    incarnation: *incarnation,
                    replaces,
                })
            }
            StoreReq::Assign {
                alloc,
                first,
                expected,
            } => {
                let view = arbiter.view(&judged, now);
                let range = *first as usize..*first as usize + expected.len();
                for (i, rec) in st
                    .sections
                    .iter()
                    .enumerate()
                    .take(range.end)
                    .skip(range.start)
                {
                    if let Some(owner) = &rec.owner {
                        if owner != alloc && !view.get(owner).is_some_and(|v| v.expired) {
                            return Err(StoreFail::Rejected(Rejection::OwnedElsewhere {
                                section: i as SectionId,
                                owner: owner.clone(),
                            }));
                        }
                    }
                }
                Ok(Command::Assign {
                    alloc: alloc.clone(),
                    first: *first,
                    expected: expected.clone(),
                })
            }
            StoreReq::SetLease(terms) => {
                arbiter
                    .lease_change_allowed(&st.lease, now)
                    .map_err(|_| StoreFail::NoLeader)?;
                Ok(Command::SetLease(*terms))
            }
            other => unreachable!("{other:?} is not decided under the lock"),
        }
    }

    /// A renewal past its barrier, under the lock (`service/peer.rs`).
    fn grant_renewal(&mut self, env: &mut Env, l: usize, term: u64, req: &StoreReq) -> StoreResp {
        let StoreReq::Renew {
            alloc,
            incarnation,
            known_version,
        } = req
        else {
            unreachable!("a renewal");
        };
        let now = env.store_instant();
        let st = &self.raft.nodes[l].state;
        let rec = match registered(st, alloc, *incarnation, env.cfg.knobs.admit_twins) {
            Ok(rec) => rec,
            Err(e) => return Err(StoreFail::Rejected(e)),
        };
        let terms = st.lease.terms;
        let rep = &mut self.reps[l];
        if !rep.arbiter.granted(alloc, term, now, terms) {
            return Err(StoreFail::NoLeader);
        }
        let unchanged = *known_version != 0 && *known_version == rec.sections_version;
        let sections = if unchanged {
            Vec::new()
        } else {
            (st.sections.iter().enumerate())
                .filter(|(_, s)| s.owner.as_ref() == Some(alloc))
                .map(|(i, _)| i as SectionId)
                .collect()
        };
        env.stats.renewals += 1;
        trace!(
            env,
            "r{l} grants {alloc} ({incarnation:x}) a lease (term {term}), sections {sections:?}{}",
            if unchanged { " (unchanged)" } else { "" }
        );
        Ok(StoreOk::Renewed(Renewal {
            lease_ms: terms.lease_ms,
            sections,
            unchanged,
            sections_version: rec.sections_version,
            route_version: st.route_version,
        }))
    }

    /// The arbiter loop's tick, holding the lock (`node.rs`, `arbitrate`).
    fn arbiter_tick(&mut self, env: &mut Env, r: usize) {
        let now = env.store_instant();
        let node = &self.raft.nodes[r];
        let leading = node.leading.then_some(node.term);
        self.reps[r].arbiter.observe(leading, now);
        let moves = self.reps[r].arbiter.plan(&self.judged(env, r), now);
        if moves.is_empty() {
            return;
        }
        trace!(env, "r{r} arbiter plans {moves:?}");
        self.reps[r].locked = true;
        self.reps[r].moves = moves;
        self.next_move(env, r);
    }

    /// Proposes the arbiter's next move, or ends its tick.
    fn next_move(&mut self, env: &mut Env, r: usize) {
        let rep = &mut self.reps[r];
        if rep.moves.is_empty() || !self.raft.nodes[r].leading {
            rep.moves.clear();
            return self.unlock(env, r);
        }
        let cmd = rep.moves.remove(0);
        self.propose(env, r, cmd, Waiter::Arbiter);
    }

    fn committed(&mut self, env: &mut Env, l: usize, id: u64, outcome: Option<Outcome>) {
        let Some(w) = self.reps[l].waiters.remove(&id) else {
            return;
        };
        let outcome = outcome.expect("a waited-for entry has a command");
        match w {
            Waiter::Call(p) => {
                let resp = self.answer(l, &p.req, outcome);
                reply(env, l, &p, resp);
            }
            Waiter::Locked(p) => {
                if let (StoreReq::SetLease(_), Ok(_)) = (&p.req, &outcome) {
                    self.reps[l].arbiter.lease_changed(env.store_instant());
                }
                let resp = self.answer(l, &p.req, outcome);
                reply(env, l, &p, resp);
                self.unlock(env, l);
            }
            Waiter::Arbiter => {
                if outcome.is_err() {
                    trace!(env, "r{l} arbiter move refused: {outcome:?}");
                    self.reps[l].moves.clear();
                }
                self.next_move(env, l);
            }
        }
    }

    /// The answer to a committed write.
    fn answer(&self, l: usize, req: &StoreReq, outcome: Outcome) -> StoreResp {
        match (req, outcome) {
            (StoreReq::Handoff { to, .. }, Ok(Reply::HandedOff { grant, .. })) => {
                let st = &self.raft.nodes[l].state;
                let to_addr = st.allocs.get(to).map(|a| a.peer_addr.clone());
                Ok(StoreOk::HandedOff {
                    grant,
                    to_addr: to_addr.unwrap_or_default(),
                })
            }
            (_, Ok(reply)) => Ok(StoreOk::Written(reply)),
            (_, Err(rej)) => Err(StoreFail::Rejected(rej)),
        }
    }

    fn stepped_down(&mut self, env: &mut Env, r: usize) {
        let rep = &mut self.reps[r];
        rep.moves.clear();
        rep.locked = false;
        let waiters = std::mem::take(&mut rep.waiters);
        let barriers = std::mem::take(&mut rep.barriers);
        let queued = std::mem::take(&mut rep.lock_queue);
        let up = self.raft.nodes[r].up;
        if !up {
            return;
        }
        for w in waiters.into_values() {
            if let Waiter::Call(p) | Waiter::Locked(p) = w {
                self.not_leader(env, r, p);
            }
        }
        for b in barriers.into_values() {
            self.not_leader(env, r, b.pending);
        }
        for w in queued {
            if let Want::Renew(_, p) | Want::Write(p) = w {
                self.not_leader(env, r, p);
            }
        }
    }

    /// kill -9 of a replica: the API layer's state is volatile.
    pub(crate) fn crash(&mut self, env: &mut Env, r: usize) {
        if !self.raft.nodes[r].up {
            return;
        }
        let mut out = Vec::new();
        self.raft.crash(r, &mut out);
        self.process(env, out);
        let terms = self.raft.nodes[r].state.lease.terms;
        self.reps[r] = Replica::new(env, terms);
    }

    /// Restarts a crashed replica as a follower.
    pub(crate) fn restart(&mut self, env: &mut Env, r: usize) {
        if self.raft.nodes[r].up {
            return;
        }
        let t = env.election_timeout();
        let node = &mut self.raft.nodes[r];
        node.up = true;
        node.election_at = t;
        self.reps[r].tick_gen += 1;
        self.next_tick(env, r);
    }

    /// SIGSTOP of replica `r` for `d`.
    pub(crate) fn pause(&mut self, env: &mut Env, r: usize, d: Time) {
        let node = &mut self.raft.nodes[r];
        if !node.up || node.paused {
            return;
        }
        node.paused = true;
        let life = node.life;
        trace!(env, "r{r} paused for {} ms", d / MS);
        env.after(
            d,
            Ev::Replica {
                r,
                life,
                t: RTimer::Resume,
            },
        );
    }

    /// SIGCONT: what queued up is handled in a random interleaving; the
    /// timers run again (an election or heartbeat is due at once).
    fn resume(&mut self, env: &mut Env, r: usize) {
        let node = &mut self.raft.nodes[r];
        if !node.paused {
            return;
        }
        node.paused = false;
        let life = node.life;
        trace!(env, "r{r} resumes");
        for input in std::mem::take(&mut self.reps[r].inbox) {
            let d = env.rng.range(0, 200 * US);
            env.after(d, Ev::ReplicaResumed { r, life, input });
        }
        self.reps[r].tick_gen += 1;
        let gen = self.reps[r].tick_gen;
        env.after(
            0,
            Ev::Replica {
                r,
                life,
                t: RTimer::Tick(gen),
            },
        );
    }

    /// The replica leading with a reachable majority, if any.
    pub(crate) fn effective_leader(&self, env: &Env) -> Option<usize> {
        self.raft.effective_leader(env)
    }

    /// The replica that believes it leads (running, maybe cut off).
    pub(crate) fn believed_leader(&self) -> Option<usize> {
        (0..self.len()).find(|&r| self.raft.nodes[r].active() && self.raft.nodes[r].leading)
    }

    /// End-of-run check: every replica that applied the whole log holds
    /// the committed state.
    pub(crate) fn diverged(&self, truth: &SetState) -> Vec<usize> {
        (0..self.len())
            .filter(|&r| {
                let n = &self.raft.nodes[r];
                n.applied == self.raft.log.len() && n.state != *truth
            })
            .collect()
    }
}

/// The registered record of `alloc` if `incarnation` may renew (with
/// `admit_twins`, any incarnation may).
fn registered<'a>(
    st: &'a SetState,
    alloc: &AllocId,
    incarnation: Incarnation,
    admit_twins: bool,
) -> Result<&'a seqsvr_store::state::AllocRecord, Rejection> {
    if admit_twins {
        return st.allocs.get(alloc).ok_or(Rejection::NotRegistered {
            alloc: alloc.clone(),
        });
    }
    st.check_incarnation(alloc, incarnation)
}

/// A section's record as `ReadSections` reports it.
fn read_section(st: &SetState, section: SectionId) -> StoreResp {
    let Some(rec) = st.sections.get(section as usize) else {
        return Err(StoreFail::Rejected(Rejection::UnknownSection {
            section,
            count: st.sections.len() as u32,
        }));
    };
    Ok(StoreOk::Section(SectionInfo {
        section,
        max_seq: rec.max_seq,
        epoch: rec.epoch,
        owner: rec.owner.clone(),
        incarnation: rec.incarnation,
        start: rec.start,
    }))
}

/// Answers a call, through the forwarding replica if there was one.
fn reply(env: &mut Env, r: usize, p: &Pending, resp: StoreResp) {
    let (to, relay) = match p.via {
        Some((v, fid)) => (Node::Replica(v), Some(fid)),
        None => (p.call.node, None),
    };
    let m = StoreMsg::Resp {
        call: p.call,
        resp,
        relay,
    };
    env.send(Node::Replica(r), to, Msg::Store(m));
}

/// The bootstrap log of a fresh cluster: the set, the lease terms, every
/// AllocSvr's first process registered, and the sections spread over them.
pub(crate) fn bootstrap_log(
    env: &mut Env,
    incarnations: &[Incarnation],
) -> Vec<crate::model::EntryRef> {
    let spec = env.cfg.spec.clone();
    let mut cmds = vec![Command::ConfigureSet(spec.clone())];
    if env.cfg.lease != LeaseTerms::default() {
        cmds.push(Command::SetLease(env.cfg.lease));
    }
    for (a, inc) in incarnations.iter().enumerate() {
        cmds.push(Command::RegisterAlloc {
            alloc: crate::model::alloc_name(a),
            addr: client_addr(a),
            peer_addr: peer_addr(a),
            admin_addr: admin_addr(a),
            incarnation: *inc,
            replaces: 0,
        });
    }
    for s in 0..spec.section_count() {
        cmds.push(Command::Assign {
            alloc: crate::model::alloc_name(s as usize % incarnations.len()),
            first: s,
            expected: vec![0],
        });
    }
    let mut log = Vec::new();
    for cmd in cmds {
        let id = env.fresh_id();
        let out = env.truth.apply(&cmd, &mut Vec::new());
        assert!(out.is_ok(), "bootstrap command {cmd:?} refused: {out:?}");
        env.stats.committed += 1;
        log.push(Rc::new(crate::model::Entry {
            id,
            term: 1,
            cmd: Some(cmd),
        }));
    }
    log
}
