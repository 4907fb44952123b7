//! Clients: each issues one call at a time (`next` of one uid, or a batch
//! of uids of one section), to the AllocSvr its cached route table names,
//! and records every number it receives as an [`Observation`] with the
//! virtual times the successful attempt was sent and answered.
//!
//! Like the real client it retries: `NOT_OWNER` with the table the error
//! carries (or elsewhere), `LEASE_EXPIRED` at another AllocSvr, an
//! exhausted section at the same one, a timeout elsewhere; and it refreshes
//! its routes (a linearizable read: the committed table) when a reply
//! carries a newer route version, after a timeout, and every few seconds.
//! Caches therefore disagree, and some calls reach AllocSvrs that no longer
//! own their section, which is what the lease has to make harmless.

use seqsvr_core::checker::Observation;
use seqsvr_core::{AllocId, SectionId};
use seqsvr_store::state::SetState;

use crate::net::{Node, Time, MS, SEC};
use crate::world::{trace, Ev, Msg, World};

/// Which attempt of which call a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpRef {
    /// The client.
    pub client: usize,
    /// The call.
    pub op: u64,
    /// The attempt.
    pub attempt: u32,
}

/// Why an AllocSvr handed out nothing (the retryable errors of the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `NOT_OWNER`.
    NotOwner(SectionId),
    /// `LEASE_EXPIRED`.
    LeaseExpired,
    /// `CEILING_EXHAUSTED` after waiting.
    Exhausted(SectionId),
    /// Not serving yet (connection refused).
    Unavailable,
}

/// Client ↔ AllocSvr traffic.
#[derive(Debug)]
pub(crate) enum ClientMsg {
    /// `Next` (one uid) or `NextBatch`.
    Req {
        /// The attempt.
        op: OpRef,
        /// The uids.
        uids: Vec<u64>,
    },
    /// The answer.
    Resp {
        /// The attempt.
        op: OpRef,
        /// One number per uid, or why not.
        result: Result<Vec<u64>, Refusal>,
        /// The AllocSvr's route table, with `NOT_OWNER`/`LEASE_EXPIRED`.
        routes: Option<(Vec<Option<AllocId>>, u64)>,
        /// The AllocSvr's route version (every reply carries it).
        version: u64,
    },
}

/// A client's timers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CTimer {
    /// Start the next call.
    Issue,
    /// An attempt got no answer in time.
    Timeout {
        /// The call.
        op: u64,
        /// The attempt.
        attempt: u32,
    },
    /// Retry the current call (after a short back-off).
    Retry(u64),
    /// Re-read the route table.
    Refresh,
}

/// One call in progress.
#[derive(Debug, Clone)]
struct Op {
    /// Its id.
    id: u64,
    /// Its uids (all in one section).
    uids: Vec<u64>,
    /// Attempts made, minus one.
    attempt: u32,
    /// Where the current attempt went.
    target: usize,
    /// When the current attempt was sent.
    sent: Time,
}

/// One client.
#[derive(Debug)]
pub(crate) struct Client {
    /// Cached route table: owner per section.
    routes: Vec<Option<AllocId>>,
    /// Its version.
    version: u64,
    /// The call in progress.
    op: Option<Op>,
}

/// Attempts per call before giving up.
const ATTEMPTS: u32 = 6;
/// How long an attempt may take.
const ATTEMPT_TIMEOUT: Time = 1500 * MS;

impl Client {
    /// A client that read the routes of `state`.
    pub(crate) fn new(state: &SetState) -> Self {
        let mut c = Client {
            routes: Vec::new(),
            version: 0,
            op: None,
        };
        c.read_routes(state);
        c
    }

    fn read_routes(&mut self, state: &SetState) {
        self.routes = state.sections.iter().map(|s| s.owner.clone()).collect();
        self.version = state.route_version;
    }

    fn owner(&self, s: SectionId) -> Option<usize> {
        World::owner_in(&self.routes, s)
    }
}

impl World {
    pub(crate) fn client_timer(&mut self, c: usize, t: CTimer) {
        match t {
            CTimer::Issue => self.issue(c),
            CTimer::Timeout { op, attempt } => {
                let current = self.clients[c]
                    .op
                    .as_ref()
                    .is_some_and(|o| o.id == op && o.attempt == attempt);
                if current {
                    let state = &self.truth;
                    self.clients[c].read_routes(state);
                    let other = self.other_alloc(c);
                    self.retry(c, Some(other), 0);
                }
            }
            CTimer::Retry(op) => {
                if self.clients[c].op.as_ref().is_some_and(|o| o.id == op) {
                    self.attempt(c);
                }
            }
            CTimer::Refresh => {
                let state = &self.truth;
                self.clients[c].read_routes(state);
                let d = self.rng.range(SEC, 4 * SEC);
                self.after(
                    d,
                    Ev::Client {
                        c,
                        t: CTimer::Refresh,
                    },
                );
            }
        }
    }

    fn issue(&mut self, c: usize) {
        let spec = &self.cfg.spec;
        let s = self.rng.below(spec.section_count() as u64) as SectionId;
        let uids = spec.uids_of(s);
        let n = uids.end - uids.start;
        let pick = |rng: &mut crate::rng::Rng| {
            // Two hot uids per section take most calls.
            if rng.chance(0.6) {
                uids.start + rng.below(2.min(n))
            } else {
                uids.start + rng.below(n)
            }
        };
        let count = if self.rng.chance(0.75) {
            1
        } else {
            self.rng.range(2, 6)
        };
        let uids: Vec<u64> = (0..count).map(|_| pick(&mut self.rng)).collect();
        let target = match self.clients[c].owner(s) {
            Some(a) => a,
            None => self.rng.pick(self.allocs.len()),
        };
        let id = self.fresh_id();
        self.clients[c].op = Some(Op {
            id,
            uids,
            attempt: 0,
            target,
            sent: 0,
        });
        self.attempt(c);
    }

    fn attempt(&mut self, c: usize) {
        let now = self.now;
        let op = self.clients[c].op.as_mut().expect("a call");
        op.sent = now;
        let m = ClientMsg::Req {
            op: OpRef {
                client: c,
                op: op.id,
                attempt: op.attempt,
            },
            uids: op.uids.clone(),
        };
        let (target, id, attempt) = (op.target, op.id, op.attempt);
        self.send(Node::Client(c), Node::Alloc(target), Msg::Client(m));
        self.after(
            ATTEMPT_TIMEOUT,
            Ev::Client {
                c,
                t: CTimer::Timeout { op: id, attempt },
            },
        );
    }

    /// Another attempt at `target` (or the same) after `delay`, or give up.
    fn retry(&mut self, c: usize, target: Option<usize>, delay: Time) {
        let op = self.clients[c].op.as_mut().expect("a call");
        if op.attempt + 1 >= ATTEMPTS {
            self.stats.calls_failed += 1;
            return self.next_call(c);
        }
        op.attempt += 1;
        if let Some(t) = target {
            op.target = t;
        }
        let id = op.id;
        self.after(
            delay,
            Ev::Client {
                c,
                t: CTimer::Retry(id),
            },
        );
    }

    fn next_call(&mut self, c: usize) {
        self.clients[c].op = None;
        let d = self.rng.range(5 * MS, 30 * MS);
        self.after(
            d,
            Ev::Client {
                c,
                t: CTimer::Issue,
            },
        );
    }

    /// Some AllocSvr other than the current attempt's target.
    fn other_alloc(&mut self, c: usize) -> usize {
        let n = self.allocs.len();
        let cur = self.clients[c].op.as_ref().map_or(0, |o| o.target);
        (cur + 1 + self.rng.pick(n - 1)) % n
    }

    pub(crate) fn client_msg(&mut self, c: usize, m: ClientMsg) {
        let ClientMsg::Resp {
            op,
            result,
            routes,
            version,
        } = m
        else {
            panic!("model bug: request delivered to a client");
        };
        let Some(cur) = self.clients[c].op.clone() else {
            return;
        };
        if cur.id != op.op || cur.attempt != op.attempt {
            return;
        }
        if let Some((owners, version)) = routes {
            let cl = &mut self.clients[c];
            if version > cl.version {
                cl.routes = owners;
                cl.version = version;
            }
        }
        match result {
            Ok(seqs) => {
                for (uid, seq) in cur.uids.iter().zip(&seqs) {
                    self.monitor.observations.push(Observation {
                        uid: *uid,
                        seq: *seq,
                        start: cur.sent,
                        end: self.now,
                    });
                }
                trace!(
                    self,
                    "c{c} got {seqs:?} for {:?} from a{} (sent {})",
                    cur.uids,
                    cur.target,
                    crate::net::fmt_time(cur.sent)
                );
                self.stats.calls_ok += 1;
                if version > self.clients[c].version {
                    let state = &self.truth;
                    self.clients[c].read_routes(state);
                }
                self.next_call(c);
            }
            Err(Refusal::NotOwner(s)) => {
                let to = match self.clients[c].owner(s) {
                    Some(o) if o != cur.target => o,
                    _ => self.other_alloc(c),
                };
                self.retry(c, Some(to), 0);
            }
            Err(Refusal::LeaseExpired) => {
                let s = self.cfg.spec.section_of(cur.uids[0]).expect("in set");
                let to = match self.clients[c].owner(s) {
                    Some(o) if o != cur.target => o,
                    _ => self.other_alloc(c),
                };
                self.retry(c, Some(to), 5 * MS);
            }
            Err(Refusal::Exhausted(_)) => self.retry(c, None, 10 * MS),
            Err(Refusal::Unavailable) => {
                let to = self.other_alloc(c);
                self.retry(c, Some(to), 10 * MS);
            }
        }
    }
}
