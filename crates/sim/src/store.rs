//! The store: replicas running a small model of Raft around the *real*
//! state machine ([`SetState::apply`]) and the *real* arbiter
//! ([`Arbiter`]).
//!
//! What the model keeps from Raft, because safety depends on it:
//! - terms and votes, one leader per term, the up-to-date check on votes;
//! - a write is committed only once a majority of replicas hold it (acks
//!   travel as messages, so partitions and delays matter), and only
//!   entries of the leader's own term are committed directly;
//! - a new leader appends a blank entry; entries a deposed leader had
//!   replicated to the new leader commit later ("a timed-out write may
//!   still land");
//! - a leader that is cut off keeps believing it leads until it hears of a
//!   higher term: it keeps answering what it can.
//!
//! The store API follows `crates/store/src/service.rs`: any replica takes
//! any call and forwards it once to the leader it knows (or waits up to
//! 3 s to learn one); renewals and route reads first pass a *barrier*
//! (confirm leadership with a quorum after the request arrived, then wait
//! until everything in the log at that point is applied); a renewal is
//! granted only if `arbiter.granted(alloc, term_before_barrier, now)`.
//!
//! Simplified: elections are instantaneous (vote requests are not
//! messages); a replica's Raft log is the committed log's prefix it holds
//! plus a short uncommitted tail; every replica's clock is exact (drift is
//! modelled on the AllocSvrs, relative to the store).

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use seqsvr_core::{AllocId, SectionId};
use seqsvr_store::arbiter::Arbiter;
use seqsvr_store::state::SetState;
use seqsvr_store::types::{Command, Outcome, Rejection, Reply};

use crate::net::{Node, Time, MS, SEC};
use crate::world::{alloc_index, trace, Ev, Msg, World};

/// Leader heartbeat interval (the store's default).
const HEARTBEAT: Time = 100 * MS;
/// Granularity of a replica's timers.
const TICK: Time = 20 * MS;
/// How long a call waits at a replica for a leader to be known.
const LEADER_WAIT: Time = 3 * SEC;
/// How long a barrier waits for a quorum before failing.
const BARRIER_WAIT: Time = 1 * SEC;

/// One Raft log entry.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Unique id (identity across replicas).
    pub id: u64,
    /// The term of the leader that appended it.
    pub term: u64,
    /// The command; `None` for a new leader's blank entry.
    pub cmd: Option<Command>,
}

/// Entries are shared between the logs that hold them.
pub(crate) type EntryRef = Rc<Entry>;

/// A store API request.
#[derive(Debug, Clone)]
pub(crate) enum StoreReq {
    /// `RegisterAlloc` (a write).
    Register {
        /// The AllocSvr.
        alloc: AllocId,
    },
    /// A lease renewal (barrier, then grant).
    Renew {
        /// The AllocSvr.
        alloc: AllocId,
    },
    /// A linearizable read of the route table.
    Routes,
    /// `TakeOver` (a write).
    TakeOver {
        /// The AllocSvr.
        alloc: AllocId,
        /// First section.
        first: SectionId,
        /// Number of sections.
        count: u32,
    },
    /// `Raise` (a write).
    Raise {
        /// The section.
        section: SectionId,
        /// The caller's epoch.
        epoch: u64,
        /// The new ceiling.
        to: u64,
    },
}

/// A successful store answer.
#[derive(Debug, Clone)]
pub(crate) enum StoreOk {
    /// A committed write's reply.
    Written(Reply),
    /// A granted renewal.
    Renewed {
        /// Lease length.
        lease_ms: u64,
        /// The sections routed to the caller.
        sections: Vec<SectionId>,
        /// Route version.
        route_version: u64,
    },
    /// The route table.
    Routes {
        /// Owner per section.
        owners: Vec<Option<AllocId>>,
        /// Route version.
        version: u64,
    },
}

/// A failed store answer (the store client's view).
#[derive(Debug, Clone)]
pub(crate) enum StoreFail {
    /// The replica is not the leader (forwarded call, or lost leadership).
    NoLeader,
    /// The state machine refused the command.
    Rejected(Rejection),
    /// No answer in time.
    Timeout,
}

impl StoreFail {
    /// As `seqsvr_store::Error::is_retryable`.
    pub(crate) fn retryable(&self) -> bool {
        matches!(
            self,
            StoreFail::NoLeader
                | StoreFail::Timeout
                | StoreFail::Rejected(Rejection::NotConfigured)
        )
    }
}

/// A store answer.
pub(crate) type StoreResp = Result<StoreOk, StoreFail>;

/// Which attempt of which call of which AllocSvr incarnation a message
/// belongs to (late answers to abandoned attempts are ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallRef {
    /// The AllocSvr.
    pub alloc: usize,
    /// Its incarnation.
    pub inc: u32,
    /// The call.
    pub call: u64,
    /// The attempt within the call.
    pub attempt: u32,
}

/// A store request being handled: who asked and how to answer.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The caller.
    pub call: CallRef,
    /// The request.
    pub req: StoreReq,
    /// Forwarded by another replica (never forwarded again).
    pub forwarded: bool,
    /// The replica that forwarded it (answers go back through it).
    pub via: Option<usize>,
}

/// Store traffic.
#[derive(Debug)]
pub(crate) enum StoreMsg {
    /// A request (from an AllocSvr, or forwarded).
    Req(Pending),
    /// An answer; `relay`: to be passed on by the receiving replica.
    Resp {
        /// The call answered.
        call: CallRef,
        /// The answer.
        resp: StoreResp,
        /// The receiver is the forwarding replica, not the caller.
        relay: bool,
    },
    /// Raft AppendEntries (also the heartbeat and the barrier's probe).
    Append {
        /// Leader's term.
        term: u64,
        /// Leader.
        leader: usize,
        /// The committed prefix length the leader's log starts with.
        base: usize,
        /// The rest of the leader's log.
        tail: Vec<EntryRef>,
        /// Leader's commit index.
        commit: usize,
        /// The barrier this probe is for, if any.
        probe: Option<u64>,
    },
    /// Its answer.
    Ack {
        /// The follower's term.
        term: u64,
        /// The follower.
        from: usize,
        /// Accepted (same term).
        ok: bool,
        /// The follower's log length.
        len: usize,
        /// The barrier probed, if any.
        probe: Option<u64>,
    },
}

/// A replica's timers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RTimer {
    /// Heartbeats, election timeout, arbiter tick, expiries.
    Tick,
}

/// A renewal or read waiting for its barrier.
#[derive(Debug)]
pub(crate) struct Barrier {
    /// The term read before the barrier (as `service.rs` does).
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
pub(crate) enum Waiter {
    /// A caller's write.
    Call(Pending),
    /// The arbiter's move.
    Arbiter,
}

/// One store replica.
#[derive(Debug)]
pub(crate) struct Replica {
    /// Running (not crashed).
    pub up: bool,
    /// Incarnation (timers of earlier ones are ignored).
    pub inc: u32,
    /// Current term (durable).
    pub term: u64,
    /// Vote in the current term (durable).
    pub voted: Option<usize>,
    /// Believes it is the leader of `term`.
    pub leading: bool,
    /// The leader of `term` it knows of.
    pub leader: Option<usize>,
    /// Its log starts with the committed log's first `base` entries...
    pub base: usize,
    /// ...followed by these (durable).
    pub tail: Vec<EntryRef>,
    /// The (term, leader) whose AppendEntries last set the tail.
    pub tail_from: (u64, usize),
    /// Known commit index.
    pub commit: usize,
    /// Its copy of the state machine (the real one).
    pub state: SetState,
    /// Entries applied to `state`.
    pub applied: usize,
    /// The real arbiter (volatile: a restart starts a fresh one).
    pub arbiter: Arbiter,
    /// Start an election if no leader was heard from by then.
    pub election_at: Time,
    /// Next heartbeat (leader).
    next_heartbeat: Time,
    /// Next arbiter tick.
    next_arbiter: Time,
    /// The arbiter is proposing moves (its loop awaits each commit).
    arbiter_busy: Vec<Command>,
    /// Leader: each follower's log length as acknowledged in this term.
    matched: Vec<usize>,
    /// Leader: writes waiting for their commit, by entry id.
    waiters: BTreeMap<u64, Waiter>,
    /// Leader: renewals and reads waiting for their barrier, by id.
    barriers: BTreeMap<u64, Barrier>,
    /// Calls waiting to learn a leader, with their deadline.
    parked: Vec<(Time, Pending)>,
}

impl Replica {
    /// A replica with an empty log.
    pub(crate) fn new(arbiter: Arbiter) -> Self {
        Self {
            up: true,
            inc: 0,
            term: 0,
            voted: None,
            leading: false,
            leader: None,
            base: 0,
            tail: Vec::new(),
            tail_from: (0, 0),
            commit: 0,
            state: SetState::default(),
            applied: 0,
            arbiter,
            election_at: 0,
            next_heartbeat: 0,
            next_arbiter: 0,
            arbiter_busy: Vec::new(),
            matched: Vec::new(),
            waiters: BTreeMap::new(),
            barriers: BTreeMap::new(),
            parked: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.base + self.tail.len()
    }
}

impl World {
    fn majority(&self) -> usize {
        self.replicas.len() / 2 + 1
    }

    fn entry_of(&self, r: usize, i: usize) -> &EntryRef {
        let rep = &self.replicas[r];
        if i < rep.base {
            &self.log[i]
        } else {
            &rep.tail[i - rep.base]
        }
    }

    fn last_term(&self, r: usize) -> u64 {
        match self.replicas[r].len() {
            0 => 0,
            n => self.entry_of(r, n - 1).term,
        }
    }

    /// Moves tail entries that are now committed into the shared prefix.
    fn normalize(&mut self, r: usize) {
        let rep = &mut self.replicas[r];
        let k = rep
            .tail
            .iter()
            .zip(&self.log[rep.base.min(self.log.len())..])
            .take_while(|(a, b)| a.id == b.id)
            .count();
        rep.tail.drain(..k);
        rep.base += k;
    }

    fn replica_node(&self, r: usize) -> Node {
        Node::Replica(r)
    }

    pub(crate) fn replica_timer(&mut self, r: usize, t: RTimer) {
        let RTimer::Tick = t;
        let now = self.now;
        self.expire_waits(r);
        if self.replicas[r].leading {
            if now >= self.replicas[r].next_heartbeat {
                self.replicas[r].next_heartbeat = now + HEARTBEAT;
                self.replicate(r, None);
            }
        } else if now >= self.replicas[r].election_at {
            self.start_election(r);
        }
        if now >= self.replicas[r].next_arbiter {
            self.replicas[r].next_arbiter = now + self.cfg.lease.tick_ms * MS;
            self.arbiter_tick(r);
        }
        let inc = self.replicas[r].inc;
        self.after(
            TICK,
            Ev::Replica {
                r,
                inc,
                t: RTimer::Tick,
            },
        );
    }

    fn expire_waits(&mut self, r: usize) {
        let now = self.now;
        let rep = &mut self.replicas[r];
        let (gone, kept): (Vec<_>, Vec<_>) = rep.parked.drain(..).partition(|(d, _)| *d <= now);
        rep.parked = kept;
        let late: Vec<u64> = rep
            .barriers
            .iter()
            .filter(|(_, b)| b.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        let late: Vec<Barrier> = late
            .iter()
            .filter_map(|id| rep.barriers.remove(id))
            .collect();
        for (_, p) in gone {
            self.store_reply(r, &p, Err(StoreFail::NoLeader));
        }
        for b in late {
            self.store_reply(r, &b.pending, Err(StoreFail::NoLeader));
        }
    }

    /// The arbiter loop of `node.rs`: observe leadership, plan, propose the
    /// moves one after the other (a tick waits while a move is in flight).
    fn arbiter_tick(&mut self, r: usize) {
        if !self.replicas[r].arbiter_busy.is_empty() {
            return;
        }
        let now = self.store_instant();
        let rep = &self.replicas[r];
        let leading = rep.leading.then_some(rep.term);
        rep.arbiter.observe(leading, now);
        let moves = rep.arbiter.plan(&rep.state, now);
        if moves.is_empty() {
            return;
        }
        trace!(self, "r{r} arbiter plans {moves:?}");
        self.replicas[r].arbiter_busy = moves;
        self.arbiter_propose(r);
    }

    fn arbiter_propose(&mut self, r: usize) {
        let rep = &mut self.replicas[r];
        if rep.arbiter_busy.is_empty() {
            return;
        }
        if !rep.leading {
            rep.arbiter_busy.clear();
            return;
        }
        let cmd = rep.arbiter_busy[0].clone();
        let id = self.append(r, Some(cmd));
        self.replicas[r].waiters.insert(id, Waiter::Arbiter);
        self.replicate(r, None);
    }

    fn start_election(&mut self, c: usize) {
        let term = self.replicas[c].term + 1;
        self.adopt_term(c, term);
        self.replicas[c].voted = Some(c);
        self.replicas[c].election_at = self.election_timeout();
        let (my_term, my_len) = (self.last_term(c), self.replicas[c].len());
        let mut votes = 1;
        for v in 0..self.replicas.len() {
            if v == c
                || !self.replicas[v].up
                || !self.net.connected(Node::Replica(c), Node::Replica(v))
            {
                continue;
            }
            if self.replicas[v].term < term {
                self.adopt_term(v, term);
            }
            let up_to_date = (my_term, my_len) >= (self.last_term(v), self.replicas[v].len());
            if self.replicas[v].term == term && self.replicas[v].voted.is_none() && up_to_date {
                self.replicas[v].voted = Some(c);
                self.replicas[v].election_at = self.election_timeout();
                votes += 1;
            }
        }
        trace!(self, "r{c} runs for term {term}: {votes} votes");
        if votes >= self.majority() {
            self.become_leader(c);
        }
    }

    pub(crate) fn become_leader(&mut self, c: usize) {
        self.stats.leaders_elected += 1;
        let n = self.replicas.len();
        let rep = &mut self.replicas[c];
        rep.leading = true;
        rep.leader = Some(c);
        rep.tail_from = (rep.term, c);
        rep.matched = vec![0; n];
        rep.next_heartbeat = self.now + HEARTBEAT;
        trace!(self, "r{c} leads term {}", self.replicas[c].term);
        self.append(c, None);
        self.replicate(c, None);
        self.unpark(c);
    }

    /// Moves `r` to a higher `term`, stepping down if it led.
    fn adopt_term(&mut self, r: usize, term: u64) {
        let rep = &mut self.replicas[r];
        debug_assert!(term > rep.term);
        rep.term = term;
        rep.voted = None;
        rep.leader = None;
        if rep.leading {
            rep.leading = false;
            rep.arbiter_busy.clear();
            let waiters = std::mem::take(&mut rep.waiters);
            let barriers = std::mem::take(&mut rep.barriers);
            trace!(self, "r{r} steps down (term {term})");
            for w in waiters.into_values() {
                if let Waiter::Call(p) = w {
                    self.not_leader(r, p);
                }
            }
            for b in barriers.into_values() {
                self.not_leader(r, b.pending);
            }
        }
    }

    /// `route()` after the local attempt said "not the leader".
    fn not_leader(&mut self, r: usize, p: Pending) {
        if p.forwarded {
            self.store_reply(r, &p, Err(StoreFail::NoLeader));
        } else {
            self.park_or_forward(r, p);
        }
    }

    fn park_or_forward(&mut self, r: usize, p: Pending) {
        match self.replicas[r].leader {
            Some(l) if l == r && self.replicas[r].leading => self.lead(r, p),
            Some(l) if l != r => {
                if self.net.connected(Node::Replica(r), Node::Replica(l)) {
                    let fwd = Pending {
                        forwarded: true,
                        via: Some(r),
                        ..p
                    };
                    self.send(
                        Node::Replica(r),
                        Node::Replica(l),
                        Msg::Store(StoreMsg::Req(fwd)),
                    );
                } else {
                    self.store_reply(r, &p, Err(StoreFail::NoLeader));
                }
            }
            _ => {
                let until = self.now + LEADER_WAIT;
                self.replicas[r].parked.push((until, p));
            }
        }
    }

    fn unpark(&mut self, r: usize) {
        let parked = std::mem::take(&mut self.replicas[r].parked);
        for (_, p) in parked {
            self.park_or_forward(r, p);
        }
    }

    /// Appends to the leader's log; returns the entry id.
    fn append(&mut self, r: usize, cmd: Option<Command>) -> u64 {
        let id = self.fresh_id();
        let term = self.replicas[r].term;
        self.replicas[r].tail.push(Rc::new(Entry { id, term, cmd }));
        id
    }

    /// Sends AppendEntries (the leader's whole uncommitted tail) to every
    /// follower; `probe` marks a barrier's quorum check.
    fn replicate(&mut self, l: usize, probe: Option<u64>) {
        for f in 0..self.replicas.len() {
            if f == l || !self.net.connected(Node::Replica(l), Node::Replica(f)) {
                continue;
            }
            let rep = &self.replicas[l];
            let msg = StoreMsg::Append {
                term: rep.term,
                leader: l,
                base: rep.base,
                tail: rep.tail.clone(),
                commit: rep.commit,
                probe,
            };
            self.send(Node::Replica(l), Node::Replica(f), Msg::Store(msg));
        }
    }

    pub(crate) fn replica_msg(&mut self, r: usize, from: Node, m: StoreMsg) {
        if !self.replicas[r].up {
            return;
        }
        match m {
            StoreMsg::Req(p) => {
                if self.replicas[r].leading {
                    self.lead(r, p);
                } else if p.forwarded {
                    self.store_reply(r, &p, Err(StoreFail::NoLeader));
                } else {
                    self.park_or_forward(r, p);
                }
            }
            StoreMsg::Resp { call, resp, relay } => {
                debug_assert!(relay);
                let m = StoreMsg::Resp {
                    call,
                    resp,
                    relay: false,
                };
                self.send(Node::Replica(r), Node::Alloc(call.alloc), Msg::Store(m));
            }
            StoreMsg::Append {
                term,
                leader,
                base,
                tail,
                commit,
                probe,
            } => self.on_append(r, term, leader, base, tail, commit, probe),
            StoreMsg::Ack {
                term,
                from: f,
                ok,
                len,
                probe,
            } => {
                debug_assert_eq!(from, Node::Replica(f));
                self.on_ack(r, term, f, ok, len, probe);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_append(
        &mut self,
        f: usize,
        term: u64,
        leader: usize,
        base: usize,
        tail: Vec<EntryRef>,
        commit: usize,
        probe: Option<u64>,
    ) {
        let me = self.replica_node(f);
        if term < self.replicas[f].term {
            let ack = StoreMsg::Ack {
                term: self.replicas[f].term,
                from: f,
                ok: false,
                len: 0,
                probe,
            };
            return self.send(me, Node::Replica(leader), Msg::Store(ack));
        }
        if term > self.replicas[f].term {
            self.adopt_term(f, term);
        }
        assert!(
            !self.replicas[f].leading,
            "model bug: two leaders in term {term}"
        );
        let timeout = self.election_timeout();
        let rep = &mut self.replicas[f];
        rep.leader = Some(leader);
        rep.election_at = timeout;
        let stale = rep.tail_from == (term, leader) && rep.len() >= base + tail.len();
        if !stale {
            rep.base = base;
            rep.tail = tail;
            rep.tail_from = (term, leader);
            self.normalize(f);
        }
        let rep = &mut self.replicas[f];
        assert!(
            rep.commit <= rep.len(),
            "model bug: log shorter than commit"
        );
        rep.commit = rep.commit.max(commit.min(rep.len()));
        self.apply_committed(f);
        self.unpark(f);
        let ack = StoreMsg::Ack {
            term,
            from: f,
            ok: true,
            len: self.replicas[f].len(),
            probe,
        };
        self.send(me, Node::Replica(leader), Msg::Store(ack));
    }

    fn apply_committed(&mut self, r: usize) {
        while self.replicas[r].applied < self.replicas[r].commit {
            let i = self.replicas[r].applied;
            let e = self.log[i].clone();
            assert_eq!(
                self.entry_of(r, i).id,
                e.id,
                "model bug: r{r} diverges at {i}"
            );
            let rep = &mut self.replicas[r];
            if let Some(cmd) = &e.cmd {
                // Outcomes only matter on the leader that answers the
                // caller; replicas apply the same commands alike.
                let _ = rep.state.apply(cmd, &mut Vec::new());
            }
            rep.applied += 1;
        }
    }

    fn on_ack(&mut self, l: usize, term: u64, f: usize, ok: bool, len: usize, probe: Option<u64>) {
        if term > self.replicas[l].term {
            return self.adopt_term(l, term);
        }
        let majority = self.majority();
        let rep = &mut self.replicas[l];
        if !rep.leading || term != rep.term || !ok {
            return;
        }
        rep.matched[f] = rep.matched[f].max(len);
        if let Some(b) = probe.and_then(|id| rep.barriers.get_mut(&id)) {
            if b.term == term {
                b.acks.insert(f);
                b.confirmed |= b.acks.len() + 1 >= majority;
            }
        }
        self.advance_commit(l);
        self.finish_barriers(l);
    }

    fn advance_commit(&mut self, l: usize) {
        let rep = &self.replicas[l];
        let mut lens: Vec<usize> = (0..self.replicas.len())
            .map(|i| if i == l { rep.len() } else { rep.matched[i] })
            .collect();
        lens.sort_unstable_by(|a, b| b.cmp(a));
        let idx = lens[self.majority() - 1];
        if idx <= self.log.len() || self.entry_of(l, idx - 1).term != rep.term {
            if idx > rep.commit && idx <= self.log.len() {
                self.replicas[l].commit = idx;
                self.apply_committed(l);
            }
            return;
        }
        if let Some(last) = self.log.last() {
            let n = self.log.len();
            assert_eq!(
                self.entry_of(l, n - 1).id,
                last.id,
                "model bug: leader lacks a commit"
            );
        }
        let mut replies = Vec::new();
        for i in self.log.len()..idx {
            let e = self.entry_of(l, i).clone();
            let outcome = self.commit_effect(&e);
            self.log.push(e.clone());
            if let Some(w) = self.replicas[l].waiters.remove(&e.id) {
                replies.push((w, outcome));
            }
        }
        self.replicas[l].commit = idx;
        for r in 0..self.replicas.len() {
            self.normalize(r);
        }
        self.apply_committed(l);
        for (w, outcome) in replies {
            match w {
                Waiter::Call(p) => {
                    let resp = match outcome {
                        Some(Ok(reply)) => Ok(StoreOk::Written(reply)),
                        Some(Err(rej)) => Err(StoreFail::Rejected(rej)),
                        None => unreachable!("a caller's entry has a command"),
                    };
                    self.store_reply(l, &p, resp);
                }
                Waiter::Arbiter => {
                    if !self.replicas[l].arbiter_busy.is_empty() {
                        self.replicas[l].arbiter_busy.remove(0);
                    }
                    self.arbiter_propose(l);
                }
            }
        }
    }

    /// Applies a newly committed entry to the committed state and tells the
    /// monitor; returns the command's outcome.
    pub(crate) fn commit_effect(&mut self, e: &Entry) -> Option<Outcome> {
        self.stats.committed += 1;
        let cmd = e.cmd.as_ref()?;
        let out = self.truth.apply(cmd, &mut Vec::new());
        trace!(self, "commit #{} {cmd:?} -> {out:?}", self.log.len());
        match (cmd, &out) {
            (
                Command::TakeOver { .. } | Command::Handoff { .. },
                Ok(Reply::TakenOver { grants, .. }),
            ) => {
                for g in grants {
                    self.stats.takeovers += 1;
                    self.monitor.on_takeover(self.now, g);
                }
            }
            (Command::Raise { section, .. }, Ok(Reply::Raised { max_seq })) => {
                self.stats.raises += 1;
                self.monitor.on_raise(self.now, *section, *max_seq);
            }
            (Command::Assign { .. }, Ok(_)) => self.stats.assigns += 1,
            _ => {}
        }
        Some(out)
    }

    /// Handles a call at a replica that believes it leads.
    fn lead(&mut self, r: usize, p: Pending) {
        let cmd = match &p.req {
            StoreReq::Renew { .. } if self.cfg.knobs.unsafe_renewals => {
                let term = self.replicas[r].term;
                return self.finish_read(r, term, p);
            }
            StoreReq::Renew { .. } | StoreReq::Routes => return self.start_barrier(r, p),
            StoreReq::Register { alloc } => Command::RegisterAlloc {
                alloc: alloc.clone(),
                addr: format!("{alloc}:1"),
            },
            StoreReq::TakeOver {
                alloc,
                first,
                count,
            } => Command::TakeOver {
                alloc: alloc.clone(),
                first: *first,
                count: *count,
            },
            StoreReq::Raise { section, epoch, to } => Command::Raise {
                section: *section,
                epoch: *epoch,
                to: *to,
            },
        };
        let id = self.append(r, Some(cmd));
        self.replicas[r].waiters.insert(id, Waiter::Call(p));
        self.replicate(r, None);
    }

    fn start_barrier(&mut self, r: usize, p: Pending) {
        let id = self.fresh_id();
        let single = self.majority() == 1;
        let rep = &mut self.replicas[r];
        rep.barriers.insert(
            id,
            Barrier {
                term: rep.term,
                need: rep.len(),
                acks: BTreeSet::new(),
                confirmed: single,
                deadline: self.now + BARRIER_WAIT,
                pending: p,
            },
        );
        self.replicate(r, Some(id));
    }

    fn finish_barriers(&mut self, l: usize) {
        let rep = &mut self.replicas[l];
        let done: Vec<u64> = rep
            .barriers
            .iter()
            .filter(|(_, b)| b.confirmed && rep.commit >= b.need)
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            let b = self.replicas[l].barriers.remove(&id).expect("listed");
            self.finish_read(l, b.term, b.pending);
        }
    }

    /// A renewal or route read after its barrier (`service.rs`).
    fn finish_read(&mut self, l: usize, term: u64, p: Pending) {
        let resp = match &p.req {
            StoreReq::Renew { alloc } => self.grant_renewal(l, term, alloc),
            StoreReq::Routes => {
                let st = &self.replicas[l].state;
                Ok(StoreOk::Routes {
                    owners: st.sections.iter().map(|s| s.owner.clone()).collect(),
                    version: st.route_version,
                })
            }
            other => unreachable!("{other:?} has no barrier"),
        };
        self.store_reply(l, &p, resp);
    }

    fn grant_renewal(&mut self, l: usize, term: u64, alloc: &AllocId) -> StoreResp {
        let now = self.store_instant();
        let rep = &self.replicas[l];
        if !rep.state.allocs.contains_key(alloc) {
            return Err(StoreFail::Rejected(Rejection::Invalid(format!(
                "alloc {alloc:?} is not registered"
            ))));
        }
        if !rep.arbiter.granted(alloc, term, now) {
            return Err(StoreFail::NoLeader);
        }
        let sections = (rep.state.sections.iter().enumerate())
            .filter(|(_, s)| s.owner.as_ref() == Some(alloc))
            .map(|(i, _)| i as SectionId)
            .collect::<Vec<_>>();
        let route_version = rep.state.route_version;
        self.stats.renewals += 1;
        trace!(
            self,
            "r{l} grants {alloc} a lease (term {term}), sections {sections:?}"
        );
        debug_assert!(alloc_index(alloc).is_some());
        Ok(StoreOk::Renewed {
            lease_ms: self.cfg.lease.lease_ms,
            sections,
            route_version,
        })
    }

    /// Answers a call, through the forwarding replica if there was one.
    fn store_reply(&mut self, r: usize, p: &Pending, resp: StoreResp) {
        let (to, relay) = match p.via {
            Some(v) => (Node::Replica(v), true),
            None => (Node::Alloc(p.call.alloc), false),
        };
        let m = StoreMsg::Resp {
            call: p.call,
            resp,
            relay,
        };
        self.send(Node::Replica(r), to, Msg::Store(m));
    }

    /// kill -9 of a replica: volatile state is lost; term, vote, log and
    /// applied state machine are durable (fsynced).
    pub(crate) fn crash_replica(&mut self, r: usize) {
        let lease = self.cfg.lease.clone();
        let rep = &mut self.replicas[r];
        if !rep.up {
            return;
        }
        rep.up = false;
        rep.inc += 1;
        rep.leading = false;
        rep.leader = None;
        rep.commit = rep.applied;
        rep.arbiter = Arbiter::new(lease);
        rep.arbiter_busy.clear();
        rep.waiters.clear();
        rep.barriers.clear();
        rep.parked.clear();
        rep.matched.clear();
    }

    /// Restarts a crashed replica as a follower.
    pub(crate) fn restart_replica(&mut self, r: usize) {
        if self.replicas[r].up {
            return;
        }
        let t = self.election_timeout();
        let rep = &mut self.replicas[r];
        rep.up = true;
        rep.election_at = t;
        let inc = rep.inc;
        self.after(
            TICK,
            Ev::Replica {
                r,
                inc,
                t: RTimer::Tick,
            },
        );
    }

    /// The replica that currently leads with a reachable majority, if any.
    pub(crate) fn effective_leader(&self) -> Option<usize> {
        (0..self.replicas.len()).find(|&r| {
            let rep = &self.replicas[r];
            rep.up
                && rep.leading
                && (0..self.replicas.len())
                    .filter(|&f| {
                        f == r
                            || (self.replicas[f].up
                                && self.replicas[f].term == rep.term
                                && self.net.connected(Node::Replica(r), Node::Replica(f)))
                    })
                    .count()
                    >= self.majority()
        })
    }
}
