//! The Raft model of the store: terms, votes, log replication and
//! commit, as messages on the simulated network.
//!
//! What the model keeps from Raft, because safety depends on it:
//! - terms and votes, one leader per term, the up-to-date check on votes;
//! - a write is committed only once a majority of replicas hold it (acks
//!   travel as messages, so partitions and delays matter), and only
//!   entries of the leader's own term are committed directly;
//! - a new leader appends a blank entry (as openraft does); entries a
//!   deposed leader had replicated to the new leader commit with it ("a
//!   timed-out write may still land");
//! - a leader that is cut off keeps believing it leads until it hears of a
//!   higher term.
//!
//! Simplified: elections are instantaneous (vote requests are not
//! messages, a vote needs both directions of the link up); a replica's log
//! is the prefix of the committed log it holds plus a short uncommitted
//! tail, and AppendEntries carries the leader's whole tail (so it never
//! needs a retry on a log mismatch). Each committed entry is applied with
//! the real `SetState::apply` on every replica and on the committed state
//! the checks read; at the end, every caught-up replica must equal it.

use std::rc::Rc;

use seqsvr_store::types::{Command, Outcome, Reply};

use crate::net::{Node, Time, MS};
use crate::store::{StoreFail, StoreMsg, StoreOk, Waiter};
use crate::world::{trace, Msg, World};

/// Leader heartbeat interval (the store's default).
pub(crate) const HEARTBEAT: Time = 100 * MS;

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

/// AppendEntries: the leader's log (its committed prefix length and its
/// tail), its commit index; also the heartbeat and a barrier's probe.
#[derive(Debug)]
pub(crate) struct Append {
    /// Leader's term.
    pub term: u64,
    /// Leader.
    pub leader: usize,
    /// The committed prefix length the leader's log starts with.
    pub base: usize,
    /// The rest of the leader's log.
    pub tail: Vec<EntryRef>,
    /// Leader's commit index.
    pub commit: usize,
    /// The barrier this probe is for, if any.
    pub probe: Option<u64>,
}

/// The answer to an [`Append`].
#[derive(Debug)]
pub(crate) struct Ack {
    /// The follower's term.
    pub term: u64,
    /// The follower.
    pub from: usize,
    /// Accepted (same term).
    pub ok: bool,
    /// The follower's log length.
    pub len: usize,
    /// The barrier probed, if any.
    pub probe: Option<u64>,
}

impl World {
    pub(crate) fn majority(&self) -> usize {
        self.replicas.len() / 2 + 1
    }

    pub(crate) fn entry_of(&self, r: usize, i: usize) -> &EntryRef {
        let rep = &self.replicas[r];
        if i < rep.base {
            &self.log[i]
        } else {
            &rep.tail[i - rep.base]
        }
    }

    pub(crate) fn last_term(&self, r: usize) -> u64 {
        match self.replicas[r].len() {
            0 => 0,
            n => self.entry_of(r, n - 1).term,
        }
    }

    /// Moves tail entries that are now committed into the shared prefix.
    pub(crate) fn normalize(&mut self, r: usize) {
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

    pub(crate) fn start_election(&mut self, c: usize) {
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
    pub(crate) fn adopt_term(&mut self, r: usize, term: u64) {
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
            let held = std::mem::take(&mut rep.renew_wait);
            trace!(self, "r{r} steps down (term {term})");
            for (_, p) in held {
                self.not_leader(r, p);
            }
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

    /// Appends to the leader's log; returns the entry id.
    pub(crate) fn append(&mut self, r: usize, cmd: Option<Command>) -> u64 {
        let id = self.fresh_id();
        let term = self.replicas[r].term;
        self.replicas[r].tail.push(Rc::new(Entry { id, term, cmd }));
        id
    }

    /// Sends AppendEntries (the leader's whole uncommitted tail) to every
    /// follower; `probe` marks a barrier's quorum check.
    pub(crate) fn replicate(&mut self, l: usize, probe: Option<u64>) {
        for f in 0..self.replicas.len() {
            if f == l || !self.net.reaches(Node::Replica(l), Node::Replica(f)) {
                continue;
            }
            let rep = &self.replicas[l];
            let msg = StoreMsg::Append(Append {
                term: rep.term,
                leader: l,
                base: rep.base,
                tail: rep.tail.clone(),
                commit: rep.commit,
                probe,
            });
            self.send(Node::Replica(l), Node::Replica(f), Msg::Store(msg));
        }
    }

    /// A follower receives AppendEntries.
    pub(crate) fn on_append(&mut self, f: usize, m: Append) {
        let Append {
            term,
            leader,
            base,
            tail,
            commit,
            probe,
        } = m;
        let me = Node::Replica(f);
        if term < self.replicas[f].term {
            let ack = StoreMsg::Ack(Ack {
                term: self.replicas[f].term,
                from: f,
                ok: false,
                len: 0,
                probe,
            });
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
        let ack = StoreMsg::Ack(Ack {
            term,
            from: f,
            ok: true,
            len: self.replicas[f].len(),
            probe,
        });
        self.send(me, Node::Replica(leader), Msg::Store(ack));
    }

    pub(crate) fn apply_committed(&mut self, r: usize) {
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

    /// The leader receives an acknowledgement.
    pub(crate) fn on_ack(&mut self, l: usize, m: Ack) {
        let Ack {
            term,
            from: f,
            ok,
            len,
            probe,
        } = m;
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

    pub(crate) fn advance_commit(&mut self, l: usize) {
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
