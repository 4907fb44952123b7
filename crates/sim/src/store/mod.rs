//! A store group (one per set): replicas that run the Raft model of
//! [`crate::raft`] around the *real* state machine ([`SetState::apply`])
//! and the *real* arbiter ([`Arbiter`]), and serve the store API as
//! `crates/store/src/service/` does.
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
//! - Renewal (`service/peer.rs`, `renew`), registration (`register`) and
//!   operator assign (`service/admin.rs`): the store's own decisions
//!   (`seqsvr_store_core::decision`: `renewal`, `replaced`,
//!   `check_assign`), made under the lock on this replica's applied state;
//!   lease change: only when `Arbiter::lease_change_allowed`.
//! - The arbiter loop (`node/mod.rs`, `arbitrate`): every `tick_ms`, under the
//!   lock, `observe`, `plan` on this replica's applied state, then propose
//!   the moves one by one, stopping at the first refused.
//! - The sets service (`service/sets.rs`): `Freeze` written under the
//!   arbiter's lock, its answer carrying the leader's lease + margin;
//!   `Install` and directory changes and copies written like any command;
//!   all answered by the leader only. `Status` is answered by whichever
//!   replica it reaches, from its own applied state, listing the AllocSvrs
//!   only if it believes it leads (a deposed leader does).
//!
//! A replica may be paused (SIGSTOP): what reaches it meanwhile is handled
//! on resume, in a random order. Every replica's clock is exact (drift is
//! modelled on the AllocSvrs, relative to the store).
//!
//! # Layout
//! - this file: the replica state, the dispatch of messages and timers,
//!   Raft's output applied, the bootstrap log;
//! - `route`: forwarding, parking, barriers;
//! - `decision`: the arbiter's lock, the calls' decisions, renewals, the
//!   arbiter loop, answers;
//! - `life`: crash, restart, pause, resume.

mod decision;
mod life;
mod route;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;
use std::rc::Rc;

use seqsvr_core::directory::{DirSet, HOME_SET};
use seqsvr_core::{DirChange, Incarnation, LeaseTerms, SectionId};
use seqsvr_store_core::arbiter::Arbiter;
use seqsvr_store_core::command::Command;
use seqsvr_store_core::state::SetState;

use crate::env::{trace, Env};
use crate::model::{
    admin_addr, client_addr, peer_addr, Ev, Msg, Pending, RTimer, ReplicaInput, StoreMsg, StoreResp,
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
    /// A write answered before its commit (`ack_before_commit`).
    Answered,
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

/// A store group: consensus plus each replica's API layer.
#[derive(Debug)]
pub(crate) struct Store {
    /// Raft: terms, logs, states.
    pub raft: Raft,
    /// The API layer per replica.
    reps: Vec<Replica>,
}

impl Store {
    /// The store group of `set`, bootstrapped with `log` (committed and
    /// applied to `env.truth[set]` already), replica 0 leading term 1.
    pub(crate) fn new(env: &mut Env, set: usize, log: Vec<crate::model::EntryRef>) -> Self {
        let n = env.cfg.replicas;
        let raft = Raft::new(env, set, n, log);
        let terms = env.truth[set].lease.terms;
        let reps = (0..n).map(|_| Replica::new(env, terms)).collect();
        let mut store = Store { raft, reps };
        for r in 0..n {
            let phase = env.rng.range(0, TICK);
            env.after(
                phase,
                Ev::Replica {
                    set,
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

    /// Whether `node` is a replica of this group.
    fn member(&self, node: Node) -> bool {
        (0..self.len()).any(|i| self.raft.node(i) == node)
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
            StoreMsg::Req(p) if p.forwarded && !self.member(from) => {
                // `docs/architecture/security.md`, "Forwarded calls": only
                // a member of this group may forward (the shipped store
                // goes further and refuses every forwarded AllocSvr call).
                if !env.cfg.knobs.forward_from_anyone {
                    env.stats.forwards_refused += 1;
                    return trace!(
                        env,
                        "r{}: {:?} marked forwarded by {from}, not a member of set {}'s group: refused",
                        self.raft.node(r),
                        p.req,
                        self.raft.set
                    );
                }
                env.stats.forwards_taken += 1;
                return self.request(env, r, p);
            }
            StoreMsg::Req(p) => return self.request(env, r, p),
            StoreMsg::Resp { call, resp, relay } => {
                let fid = relay.expect("answers reach replicas only to be relayed");
                if let Some((_, p)) = self.reps[r].forwards.remove(&fid) {
                    let m = StoreMsg::Resp {
                        call,
                        resp,
                        relay: None,
                    };
                    env.send(self.raft.node(r), p.call.node, Msg::Store(m));
                }
            }
            StoreMsg::Append(m) => self.raft.on_append(env, r, m, &mut out),
            StoreMsg::Ack(m) => {
                debug_assert_eq!(from, self.raft.node(m.from));
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
                set: self.raft.set,
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

impl Store {
    /// Answers a call at replica `r`, through the forwarding replica if
    /// there was one.
    fn reply(&self, env: &mut Env, r: usize, p: &Pending, resp: StoreResp) {
        let (to, relay) = match p.via {
            Some((v, fid)) => (self.raft.node(v), Some(fid)),
            None => (p.call.node, None),
        };
        let m = StoreMsg::Resp {
            call: p.call,
            resp,
            relay,
        };
        env.send(self.raft.node(r), to, Msg::Store(m));
    }
}

/// The bootstrap logs of a fresh cluster, one per set. Set 0 (the home
/// set): its spec, the lease terms, its store addresses in the directory,
/// every AllocSvr's first process registered, its sections spread over
/// them; then every other set added to the directory for the range its
/// span holds beyond the sets before it (`seqctl set add`). Every other
/// set: its spec, the lease terms, the directory copy, that range
/// installed (floor 0: nobody ever served it), its AllocSvrs registered
/// and the range spread over them. `incarnations[set]` are the set's first
/// processes'.
pub(crate) fn bootstrap_logs(
    env: &mut Env,
    incarnations: &[Vec<Incarnation>],
) -> Vec<Vec<crate::model::EntryRef>> {
    let l = env.cfg.layout();
    let home = HOME_SET as usize;
    let served = served_at_start(env);
    let mut logs = vec![Vec::new(); l.sets];
    for set in 0..l.sets {
        let spec = env.cfg.spec(set).clone();
        // Set 0 serves its span and holds the directory; any other set is
        // one added to the running cluster (`added_set`): it serves what
        // its addition installs below.
        let configure = if set == 0 {
            Command::ConfigureSet(spec.clone())
        } else {
            Command::ConfigureAddedSet(spec.clone())
        };
        append(env, &mut logs, set, configure);
        if set == home {
            let spaces = env.cfg.ids.as_ref().map(|i| i.create());
            for cmd in spaces.into_iter().flatten() {
                append(env, &mut logs, set, cmd);
            }
        }
        if env.cfg.lease != LeaseTerms::default() {
            append(env, &mut logs, set, Command::SetLease(env.cfg.lease));
        }
        let range = served[set].clone();
        if set == home {
            let me = dir_entry(env, set);
            let change = DirChange::SetStores {
                set: HOME_SET,
                stores: me.stores,
                admin: me.admin,
            };
            append(env, &mut logs, set, Command::Directory(change));
        } else {
            add_set(env, &mut logs, set, range.clone());
        }
        spread(env, &mut logs, set, range, &incarnations[set]);
    }
    logs
}

/// What each set serves from the start: the home set its span, every
/// other set what its span holds beyond the sets before it.
fn served_at_start(env: &Env) -> Vec<Range<SectionId>> {
    let mut served = Vec::new();
    let mut from = env.cfg.spec(HOME_SET as usize).uid_begin;
    for set in 0..env.cfg.layout().sets {
        let spec = env.cfg.spec(set);
        let first = spec.section_of(from).expect("spans grow set by set");
        served.push(first..spec.section_count());
        from = spec.uid_end;
    }
    served
}

/// Set `set`'s entry in the directory: its spec and its replicas' store
/// and admin addresses.
fn dir_entry(env: &Env, set: usize) -> DirSet {
    let r = env.cfg.layout().replicas_of(set);
    DirSet {
        spec: env.cfg.spec(set).clone(),
        stores: r.clone().map(|r| format!("r{r}:7101")).collect(),
        admin: r.map(|r| format!("r{r}:7121")).collect(),
    }
}

/// Set `set` (not the home set) added for the sections `range` of its
/// span (`seqctl set add`): the home set's directory names it, it copies
/// the directory and installs the range at floor 0 (nobody ever served
/// it), with no move id.
fn add_set(
    env: &mut Env,
    logs: &mut [Vec<crate::model::EntryRef>],
    set: usize,
    range: Range<SectionId>,
) {
    let home = HOME_SET as usize;
    let spec = env.cfg.spec(set).clone();
    let change = DirChange::AddSet {
        set: dir_entry(env, set),
        begin: spec.uids_of(range.start).start,
        end: spec.uid_end,
    };
    append(env, logs, home, Command::Directory(change));
    let dir = env.truth[home].directory.clone().expect("the directory");
    append(env, logs, set, Command::CopyDirectory(dir));
    let floors = vec![0; range.len()];
    let first = range.start;
    let call = seqsvr_core::SetCall {
        set: spec.set_id,
        move_id: 0,
        begin: spec.uids_of(range.start).start,
        end: spec.uid_end,
        kind: seqsvr_core::SetKind::Addition,
    };
    let install = Command::Install {
        first,
        floors,
        call,
    };
    append(env, logs, set, install);
}

/// Set `set`'s AllocSvrs registered (their first processes, as
/// `incarnations`) and the sections `range` spread over them in turn.
fn spread(
    env: &mut Env,
    logs: &mut [Vec<crate::model::EntryRef>],
    set: usize,
    range: Range<SectionId>,
    incarnations: &[Incarnation],
) {
    let l = env.cfg.layout();
    for (a, inc) in incarnations.iter().enumerate() {
        let p = l.first_slot(set, a);
        let cmd = Command::RegisterAlloc {
            alloc: crate::model::alloc_name(set, a),
            addr: client_addr(p),
            peer_addr: peer_addr(p),
            admin_addr: admin_addr(p),
            incarnation: *inc,
            replaces: 0,
        };
        append(env, logs, set, cmd);
    }
    for s in range {
        let cmd = Command::Assign {
            alloc: crate::model::alloc_name(set, s as usize % incarnations.len()),
            first: s,
            expected: vec![env.truth[set].sections[s as usize].epoch],
        };
        append(env, logs, set, cmd);
    }
}

/// Applies a bootstrap command to `set`'s committed state and appends it
/// to its log.
fn append(env: &mut Env, logs: &mut [Vec<crate::model::EntryRef>], set: usize, cmd: Command) {
    let id = env.fresh_id();
    let out = env.truth[set].apply(&cmd, &mut Vec::new());
    assert!(out.is_ok(), "bootstrap command {cmd:?} refused: {out:?}");
    env.stats.committed += 1;
    logs[set].push(Rc::new(crate::model::Entry {
        id,
        term: 1,
        cmd: Some(cmd),
    }));
}
