//! The Raft model of the store: terms, votes, log replication and
//! commit, as messages on the simulated network. It knows nothing of the
//! store API: what the API layer must act on (a commit a caller waits for,
//! a leader stepping down, a barrier's probe acknowledged) comes out as
//! [`RaftOut`]s.
//!
//! What the model keeps from Raft, because safety depends on it:
//! - terms and votes, one leader per term, the up-to-date check on votes;
//! - a write is committed only once a majority of replicas hold it (acks
//!   travel as messages, so partitions and delays matter), and only
//!   entries of the leader's own term are committed directly;
//! - a new leader appends a blank entry (as openraft does); entries a
//!   deposed leader had replicated to the new leader commit with it ("a
//!   timed-out write may still land");
//! - a leader that is cut off or paused keeps believing it leads until it
//!   hears of a higher term.
//!
//! Simplified: elections are instantaneous (vote requests are not
//! messages, a vote needs both directions of the link up and the voter
//! running); a replica's log is the prefix of the committed log it holds
//! plus a short uncommitted tail, and AppendEntries carries the leader's
//! whole tail (so it never needs a retry on a log mismatch). Each
//! committed entry is applied with the real `SetState::apply` on every
//! replica and on the committed state the checks read; at the end, every
//! caught-up replica must equal it.

use std::rc::Rc;

use seqsvr_store_core::command::{Command, Outcome, Rejection, Reply};
use seqsvr_store_core::state::SetState;

use crate::env::{trace, Env};
use crate::model::{Ack, Append, Entry, EntryRef, Msg, StoreMsg};
use crate::net::{Node, Time, MS};
use crate::perturb::apply;

/// Leader heartbeat interval (the store's default).
pub(crate) const HEARTBEAT: Time = 100 * MS;

/// What the API layer must act on.
#[derive(Debug)]
pub(crate) enum RaftOut {
    /// An entry the leader `leader` appended is committed (and applied
    /// there); `outcome` is its command's.
    Committed {
        /// The leader.
        leader: usize,
        /// The entry.
        id: u64,
        /// Its command's outcome (`None`: a blank entry).
        outcome: Option<Outcome>,
    },
    /// A replica stopped leading.
    SteppedDown(usize),
    /// A replica learned who leads (it may have been waiting to forward).
    KnowsLeader(usize),
    /// A follower acknowledged a barrier's probe in `term`.
    Probe {
        /// The leader.
        leader: usize,
        /// The barrier.
        id: u64,
        /// The follower.
        from: usize,
        /// The term acknowledged.
        term: u64,
    },
    /// A replica applied more entries.
    Applied(usize),
}

/// One replica's consensus state.
#[derive(Debug)]
pub(crate) struct RaftNode {
    /// Running (not crashed).
    pub up: bool,
    /// Stopped (SIGSTOP): takes no part in anything until resumed.
    pub paused: bool,
    /// Life (bumped by a crash; timers of earlier lives are ignored).
    pub life: u32,
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
    /// Start an election if no leader was heard from by then.
    pub election_at: Time,
    /// Next heartbeat (leader).
    pub next_heartbeat: Time,
    /// Leader: each follower's log length as acknowledged in this term.
    pub matched: Vec<usize>,
}

impl RaftNode {
    fn new() -> Self {
        Self {
            up: true,
            paused: false,
            life: 0,
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
            election_at: 0,
            next_heartbeat: 0,
            matched: Vec::new(),
        }
    }

    /// Length of its Raft log.
    pub(crate) fn len(&self) -> usize {
        self.base + self.tail.len()
    }

    /// Running and not paused: takes part in elections and replication.
    pub(crate) fn active(&self) -> bool {
        self.up && !self.paused
    }
}

/// One store group's replicas and its committed log.
#[derive(Debug)]
pub(crate) struct Raft {
    /// The group's set.
    pub set: usize,
    /// The replicas' numbers across sets start here (`Node::Replica`).
    pub first: usize,
    /// The replicas.
    pub nodes: Vec<RaftNode>,
    /// The committed Raft log: every replica's log agrees with a prefix.
    pub log: Vec<EntryRef>,
    /// The store's knobs (`perturb`).
    knobs: crate::knobs::Knobs,
}

impl Raft {
    /// `n` replicas of `set` whose logs and states hold `log` (committed,
    /// applied to `env.truth[set]` already), replica 0 leading term 1.
    pub(crate) fn new(env: &mut Env, set: usize, n: usize, log: Vec<EntryRef>) -> Self {
        let mut raft = Raft {
            set,
            first: env.cfg.layout().replica(set, 0),
            nodes: Vec::new(),
            log,
            knobs: env.cfg.knobs.clone(),
        };
        for _ in 0..n {
            let mut node = RaftNode::new();
            node.term = 1;
            node.base = raft.log.len();
            node.commit = raft.log.len();
            node.applied = raft.log.len();
            node.state = env.truth[set].clone();
            node.leader = Some(0);
            node.election_at = env.election_timeout();
            raft.nodes.push(node);
        }
        raft
    }

    /// Replica `i` of this group on the network.
    pub(crate) fn node(&self, i: usize) -> Node {
        Node::Replica(self.first + i)
    }

    pub(crate) fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    pub(crate) fn entry_of(&self, r: usize, i: usize) -> &EntryRef {
        let rep = &self.nodes[r];
        if i < rep.base {
            &self.log[i]
        } else {
            &rep.tail[i - rep.base]
        }
    }

    pub(crate) fn last_term(&self, r: usize) -> u64 {
        match self.nodes[r].len() {
            0 => 0,
            n => self.entry_of(r, n - 1).term,
        }
    }

    /// Moves tail entries that are now committed into the shared prefix.
    fn normalize(&mut self, r: usize) {
        let rep = &mut self.nodes[r];
        let k = rep
            .tail
            .iter()
            .zip(&self.log[rep.base.min(self.log.len())..])
            .take_while(|(a, b)| a.id == b.id)
            .count();
        rep.tail.drain(..k);
        rep.base += k;
    }

    /// A replica's timer: heartbeats (leader) or an election (follower).
    pub(crate) fn tick(&mut self, env: &mut Env, r: usize, out: &mut Vec<RaftOut>) {
        let now = env.now;
        if self.nodes[r].leading {
            if now >= self.nodes[r].next_heartbeat {
                self.nodes[r].next_heartbeat = now + HEARTBEAT;
                self.replicate(env, r, None);
            }
        } else if now >= self.nodes[r].election_at {
            self.start_election(env, r, out);
        }
    }

    fn start_election(&mut self, env: &mut Env, c: usize, out: &mut Vec<RaftOut>) {
        let term = self.nodes[c].term + 1;
        self.adopt_term(env, c, term, out);
        self.nodes[c].voted = Some(c);
        self.nodes[c].election_at = env.election_timeout();
        let (my_term, my_len) = (self.last_term(c), self.nodes[c].len());
        let mut votes = 1;
        for v in 0..self.nodes.len() {
            if v == c || !self.nodes[v].active() || !env.net.connected(self.node(c), self.node(v)) {
                continue;
            }
            if self.nodes[v].term < term {
                self.adopt_term(env, v, term, out);
            }
            let up_to_date = (my_term, my_len) >= (self.last_term(v), self.nodes[v].len());
            if self.nodes[v].term == term && self.nodes[v].voted.is_none() && up_to_date {
                self.nodes[v].voted = Some(c);
                self.nodes[v].election_at = env.election_timeout();
                votes += 1;
            }
        }
        trace!(env, "{} runs for term {term}: {votes} votes", self.node(c));
        if votes >= self.majority() {
            self.become_leader(env, c, out);
        }
    }

    pub(crate) fn become_leader(&mut self, env: &mut Env, c: usize, out: &mut Vec<RaftOut>) {
        env.stats.leaders_elected += 1;
        let n = self.nodes.len();
        let rep = &mut self.nodes[c];
        rep.leading = true;
        rep.leader = Some(c);
        rep.tail_from = (rep.term, c);
        rep.matched = vec![0; n];
        rep.next_heartbeat = env.now + HEARTBEAT;
        trace!(env, "{} leads term {}", self.node(c), self.nodes[c].term);
        self.append(env, c, None);
        self.replicate(env, c, None);
        out.push(RaftOut::KnowsLeader(c));
    }

    /// Moves `r` to a higher `term`, stepping down if it led.
    fn adopt_term(&mut self, env: &mut Env, r: usize, term: u64, out: &mut Vec<RaftOut>) {
        let me = self.node(r);
        let rep = &mut self.nodes[r];
        debug_assert!(term > rep.term);
        rep.term = term;
        rep.voted = None;
        rep.leader = None;
        if rep.leading {
            rep.leading = false;
            trace!(env, "{me} steps down (term {term})");
            out.push(RaftOut::SteppedDown(r));
        }
    }

    /// Appends to the leader's log; returns the entry id.
    pub(crate) fn append(&mut self, env: &mut Env, r: usize, cmd: Option<Command>) -> u64 {
        let id = env.fresh_id();
        let term = self.nodes[r].term;
        self.nodes[r].tail.push(Rc::new(Entry { id, term, cmd }));
        id
    }

    /// Sends AppendEntries (the leader's whole uncommitted tail) to every
    /// follower; `probe` marks a barrier's quorum check.
    pub(crate) fn replicate(&mut self, env: &mut Env, l: usize, probe: Option<u64>) {
        for f in 0..self.nodes.len() {
            if f == l || !env.net.reaches(self.node(l), self.node(f)) {
                continue;
            }
            let rep = &self.nodes[l];
            let msg = StoreMsg::Append(Append {
                term: rep.term,
                leader: l,
                base: rep.base,
                tail: rep.tail.clone(),
                commit: rep.commit,
                probe,
            });
            env.send(self.node(l), self.node(f), Msg::Store(msg));
        }
    }

    /// A follower receives AppendEntries.
    pub(crate) fn on_append(&mut self, env: &mut Env, f: usize, m: Append, out: &mut Vec<RaftOut>) {
        let Append {
            term,
            leader,
            base,
            tail,
            commit,
            probe,
        } = m;
        let me = self.node(f);
        if term < self.nodes[f].term {
            let ack = StoreMsg::Ack(Ack {
                term: self.nodes[f].term,
                from: f,
                ok: false,
                len: 0,
                probe,
            });
            return env.send(me, self.node(leader), Msg::Store(ack));
        }
        if term > self.nodes[f].term {
            self.adopt_term(env, f, term, out);
        }
        assert!(
            !self.nodes[f].leading,
            "model bug: two leaders in term {term}"
        );
        let timeout = env.election_timeout();
        let rep = &mut self.nodes[f];
        let learned = rep.leader != Some(leader);
        rep.leader = Some(leader);
        rep.election_at = timeout;
        let stale = rep.tail_from == (term, leader) && rep.len() >= base + tail.len();
        if !stale {
            rep.base = base;
            rep.tail = tail;
            rep.tail_from = (term, leader);
            self.normalize(f);
        }
        let rep = &mut self.nodes[f];
        assert!(
            rep.commit <= rep.len(),
            "model bug: log shorter than commit"
        );
        rep.commit = rep.commit.max(commit.min(rep.len()));
        self.apply_committed(f, out);
        if learned {
            out.push(RaftOut::KnowsLeader(f));
        }
        let ack = StoreMsg::Ack(Ack {
            term,
            from: f,
            ok: true,
            len: self.nodes[f].len(),
            probe,
        });
        env.send(me, self.node(leader), Msg::Store(ack));
    }

    /// Applies what replica `r` knows to be committed.
    fn apply_committed(&mut self, r: usize, out: &mut Vec<RaftOut>) {
        let before = self.nodes[r].applied;
        while self.nodes[r].applied < self.nodes[r].commit {
            let i = self.nodes[r].applied;
            let e = self.log[i].clone();
            assert_eq!(
                self.entry_of(r, i).id,
                e.id,
                "model bug: r{r} diverges at {i}"
            );
            let rep = &mut self.nodes[r];
            if let Some(cmd) = &e.cmd {
                // Outcomes only matter on the leader that answers the
                // caller; replicas apply the same commands alike.
                let _ = apply(&mut rep.state, cmd, &self.knobs);
            }
            rep.applied += 1;
        }
        if self.nodes[r].applied > before {
            out.push(RaftOut::Applied(r));
        }
    }

    /// The leader receives an acknowledgement.
    pub(crate) fn on_ack(&mut self, env: &mut Env, l: usize, m: Ack, out: &mut Vec<RaftOut>) {
        let Ack {
            term,
            from: f,
            ok,
            len,
            probe,
        } = m;
        if term > self.nodes[l].term {
            return self.adopt_term(env, l, term, out);
        }
        let rep = &mut self.nodes[l];
        if !rep.leading || term != rep.term || !ok {
            return;
        }
        rep.matched[f] = rep.matched[f].max(len);
        if let Some(id) = probe {
            out.push(RaftOut::Probe {
                leader: l,
                id,
                from: f,
                term,
            });
        }
        self.advance_commit(env, l, out);
    }

    fn advance_commit(&mut self, env: &mut Env, l: usize, out: &mut Vec<RaftOut>) {
        let rep = &self.nodes[l];
        let mut lens: Vec<usize> = (0..self.nodes.len())
            .map(|i| if i == l { rep.len() } else { rep.matched[i] })
            .collect();
        lens.sort_unstable_by(|a, b| b.cmp(a));
        let idx = lens[self.majority() - 1];
        if idx <= self.log.len() || self.entry_of(l, idx - 1).term != rep.term {
            if idx > rep.commit && idx <= self.log.len() {
                self.nodes[l].commit = idx;
                self.apply_committed(l, out);
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
        let mut done = Vec::new();
        for i in self.log.len()..idx {
            let e = self.entry_of(l, i).clone();
            let outcome = self.commit_effect(env, &e);
            self.log.push(e.clone());
            done.push((e.id, outcome));
        }
        self.nodes[l].commit = idx;
        for r in 0..self.nodes.len() {
            self.normalize(r);
        }
        self.apply_committed(l, out);
        for (id, outcome) in done {
            out.push(RaftOut::Committed {
                leader: l,
                id,
                outcome,
            });
        }
    }

    /// Applies a newly committed entry to the committed state and tells the
    /// monitor; returns the command's outcome.
    fn commit_effect(&mut self, env: &mut Env, e: &Entry) -> Option<Outcome> {
        env.stats.committed += 1;
        let cmd = e.cmd.as_ref()?;
        let set = self.set;
        let before = env.truth[set].placement.clone();
        let claimed = match cmd {
            Command::TakeOver { first, known, .. } => (env.truth[set].sections.iter())
                .skip(*first as usize)
                .take(known.len())
                .map(|r| (r.owner.clone(), r.incarnation, r.epoch))
                .collect(),
            _ => Vec::new(),
        };
        let out = apply(&mut env.truth[set], cmd, &self.knobs);
        trace!(env, "commit s{set}#{} {cmd:?} -> {out:?}", self.log.len());
        record(env, set, cmd, &out, &before);
        if let (
            Command::TakeOver {
                alloc, incarnation, ..
            },
            Ok(Reply::TakenOver { grants, .. }),
        ) = (cmd, &out)
        {
            let now = env.now;
            env.monitor
                .on_claim(now, set, alloc, *incarnation, &claimed, grants);
        }
        Some(out)
    }

    /// The replica that currently leads with a reachable majority, if any.
    pub(crate) fn effective_leader(&self, env: &Env) -> Option<usize> {
        (0..self.nodes.len()).find(|&r| {
            let rep = &self.nodes[r];
            rep.active()
                && rep.leading
                && (0..self.nodes.len())
                    .filter(|&f| {
                        f == r
                            || (self.nodes[f].active()
                                && self.nodes[f].term == rep.term
                                && env.net.connected(self.node(r), self.node(f)))
                    })
                    .count()
                    >= self.majority()
        })
    }

    /// kill -9: volatile state is lost; term, vote, log and applied state
    /// machine are durable (fsynced).
    pub(crate) fn crash(&mut self, r: usize, out: &mut Vec<RaftOut>) {
        let rep = &mut self.nodes[r];
        rep.up = false;
        rep.paused = false;
        rep.life += 1;
        if rep.leading {
            out.push(RaftOut::SteppedDown(r));
        }
        rep.leading = false;
        rep.leader = None;
        rep.commit = rep.applied;
        rep.matched.clear();
    }
}

/// Tells the monitor and the counters what a command committed in `set`
/// did; `before` is the set's placement before it.
pub(crate) fn record(
    env: &mut Env,
    set: usize,
    cmd: &Command,
    out: &Outcome,
    before: &seqsvr_core::Placement,
) {
    match (cmd, out) {
        (Command::TakeOver { .. }, Ok(Reply::TakenOver { grants, .. })) => {
            for g in grants {
                if env.monitor.on_takeover(env.now, set, g) {
                    env.stats.takeovers += 1;
                }
            }
        }
        (Command::Handoff { .. }, Ok(Reply::HandedOff { grant, .. })) => {
            env.stats.handoffs += 1;
            env.monitor.on_takeover(env.now, set, grant);
        }
        (Command::Handoff { .. }, Err(Rejection::StaleEpoch { .. })) => {
            env.stats.handoffs_stale += 1;
        }
        (Command::Freeze { .. }, Ok(Reply::Frozen { newly, .. })) => {
            env.stats.frozen += *newly as u64;
        }
        (Command::Install { call, .. }, out) if call.move_id < before.last_move => {
            // Sent by a mover older than a move this group applied since.
            env.stats.stale_installs += 1;
            env.stats.stale_installs_refused += out.is_err() as u64;
            record_install(env, set, cmd, out, before);
        }
        (Command::Install { .. }, _) => record_install(env, set, cmd, out, before),
        (Command::CopyCounters { call, .. }, Err(_)) if call.move_id < before.last_move => {
            env.stats.stale_copies_refused += 1;
        }
        (
            Command::Directory(seqsvr_core::DirChange::BeginMove(_)),
            Ok(Reply::Directory { changed: true, .. }),
        ) => {
            env.stats.moves_begun += 1;
        }
        (
            Command::Directory(seqsvr_core::DirChange::FinishMove(_)),
            Ok(Reply::Directory { changed: true, .. }),
        ) => {
            env.stats.moves_finished += 1;
        }
        (Command::Raise { section, .. }, Ok(Reply::Raised { max_seq })) => {
            env.stats.raises += 1;
            env.monitor.on_raise(env.now, *section, *max_seq);
        }
        (Command::Assign { .. }, Ok(_)) => env.stats.assigns += 1,
        (Command::Assign { .. }, Err(Rejection::StaleEpoch { .. })) => env.stats.assigns_stale += 1,
        (Command::SetLease(_), Ok(_)) => env.stats.lease_changes += 1,
        (Command::RegisterAlloc { replaces, .. }, Ok(_)) if *replaces != 0 => {
            env.stats.replaced += 1
        }
        _ => crate::ids::check::record(&mut env.ids.stats, cmd, out),
    }
}

/// An `Install` committed in `set`: each section it newly installed is
/// one more take-over for the monitor.
fn record_install(
    env: &mut Env,
    set: usize,
    cmd: &Command,
    out: &Outcome,
    before: &seqsvr_core::Placement,
) {
    let (Command::Install { first, floors, .. }, Ok(Reply::Installed { .. })) = (cmd, out) else {
        return;
    };
    let serving = seqsvr_core::Place::Serving;
    for s in *first..*first + floors.len() as u32 {
        if before.place_of(s) != serving {
            env.stats.installed += 1;
            let r = &env.truth[set].sections[s as usize];
            let (ceiling, epoch) = (r.max_seq, r.epoch);
            env.monitor.on_install(env.now, set, s, ceiling, epoch);
        }
    }
}
