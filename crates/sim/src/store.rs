//! The store: replicas that run the Raft model of [`crate::raft`] around
//! the *real* state machine ([`SetState::apply`]) and the *real* arbiter
//! ([`Arbiter`]), and serve the store API.
//!
//! The store API follows `crates/store/src/service.rs`: any replica takes
//! any call and forwards it once to the leader it knows (or waits up to
//! 3 s to learn one); renewals and route reads first pass a *barrier*
//! (confirm leadership with a quorum after the request arrived, then wait
//! until everything in the log at that point is applied); a renewal is
//! granted only if `arbiter.granted(alloc, term_before_barrier, now)`.
//! The arbiter runs as `node.rs` runs it: every `tick_ms`, `observe`
//! (leading in this term or not), `plan` on this replica's applied state,
//! then propose the moves one by one, the loop waiting for each commit.
//! Every replica's clock is exact (drift is modelled on the AllocSvrs,
//! relative to the store).

use std::collections::{BTreeMap, BTreeSet};

use seqsvr_core::{AllocId, SectionId};
use seqsvr_store::arbiter::Arbiter;
use seqsvr_store::state::SetState;
use seqsvr_store::types::{Command, Rejection, Reply};

use crate::net::{Node, Time, MS, SEC};
use crate::raft::{Ack, Append, EntryRef, HEARTBEAT};
use crate::world::{alloc_index, trace, Ev, Msg, World};

/// Granularity of a replica's timers.
const TICK: Time = 20 * MS;
/// How long a call waits at a replica for a leader to be known.
const LEADER_WAIT: Time = 3 * SEC;
/// How long a barrier waits for a quorum before failing.
const BARRIER_WAIT: Time = SEC;

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
    Append(Append),
    /// Its answer.
    Ack(Ack),
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
    pub term: u64,
    /// Log length when it started: everything up to it must be applied.
    pub need: usize,
    /// Followers that acknowledged this barrier's probe in `term`.
    pub acks: BTreeSet<usize>,
    /// Quorum reached.
    pub confirmed: bool,
    /// Fails with "no leader" after this.
    pub deadline: Time,
    /// The request.
    pub pending: Pending,
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
    pub next_heartbeat: Time,
    /// Next arbiter tick.
    pub next_arbiter: Time,
    /// The arbiter is proposing moves (its loop awaits each commit).
    pub arbiter_busy: Vec<Command>,
    /// Leader: each follower's log length as acknowledged in this term.
    pub matched: Vec<usize>,
    /// Leader: writes waiting for their commit, by entry id.
    pub waiters: BTreeMap<u64, Waiter>,
    /// Leader: renewals and reads waiting for their barrier, by id.
    pub barriers: BTreeMap<u64, Barrier>,
    /// Calls waiting to learn a leader, with their deadline.
    pub parked: Vec<(Time, Pending)>,
    /// Renewals past their barrier waiting for the arbiter's moves to be
    /// applied (unless the `renew_during_moves` knob restores the old race), with their term.
    pub renew_wait: Vec<(u64, Pending)>,
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
            renew_wait: Vec::new(),
        }
    }

    /// Length of its Raft log.
    pub(crate) fn len(&self) -> usize {
        self.base + self.tail.len()
    }
}

impl World {
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

    pub(crate) fn arbiter_propose(&mut self, r: usize) {
        let rep = &mut self.replicas[r];
        if !rep.leading {
            rep.arbiter_busy.clear();
            return;
        }
        let Some(cmd) = rep.arbiter_busy.first().cloned() else {
            return self.release_renewals(r);
        };
        let id = self.append(r, Some(cmd));
        self.replicas[r].waiters.insert(id, Waiter::Arbiter);
        self.replicate(r, None);
    }

    /// Renewals held back while the arbiter moved sections go on, now
    /// that the moves are applied (unless `renew_during_moves`), or fail if this
    /// replica no longer leads.
    pub(crate) fn release_renewals(&mut self, r: usize) {
        let waiting = std::mem::take(&mut self.replicas[r].renew_wait);
        for (term, p) in waiting {
            if self.replicas[r].leading {
                self.finish_read(r, term, p);
            } else {
                self.not_leader(r, p);
            }
        }
    }

    /// `route()` after the local attempt said "not the leader".
    pub(crate) fn not_leader(&mut self, r: usize, p: Pending) {
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
                if self.net.reaches(Node::Replica(r), Node::Replica(l)) {
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

    pub(crate) fn unpark(&mut self, r: usize) {
        let parked = std::mem::take(&mut self.replicas[r].parked);
        for (_, p) in parked {
            self.park_or_forward(r, p);
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
            StoreMsg::Append(m) => self.on_append(r, m),
            StoreMsg::Ack(m) => {
                debug_assert_eq!(from, Node::Replica(m.from));
                self.on_ack(r, m);
            }
        }
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

    pub(crate) fn finish_barriers(&mut self, l: usize) {
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
        let hold = !self.cfg.knobs.renew_during_moves && !self.replicas[l].arbiter_busy.is_empty();
        if hold && matches!(p.req, StoreReq::Renew { .. }) {
            // The proposed fix: a renewal neither records its grant nor
            // reads its sections while planned moves are being applied.
            self.replicas[l].renew_wait.push((term, p));
            return;
        }
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
    pub(crate) fn store_reply(&mut self, r: usize, p: &Pending, resp: StoreResp) {
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
        rep.renew_wait.clear();
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
}
