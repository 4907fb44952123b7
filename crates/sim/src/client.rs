//! Clients: each issues one call at a time (`next` of one uid, a batch of
//! uids of one section, or `Current` of one uid), to the AllocSvr process
//! its cached route table names, and records every number it receives as
//! an [`Observation`] with the virtual times the successful attempt was
//! sent and answered (`Current` answers separately, for their own check).
//!
//! Like the real client it retries: `NOT_OWNER` with the table the error
//! carries (or elsewhere), `LEASE_EXPIRED` and `STALE_INCARNATION` at
//! another AllocSvr, an exhausted section at the same one, a timeout
//! elsewhere; and it refreshes its routes (a linearizable read: the
//! committed table) when a reply carries a newer route version, after a
//! timeout, and every few seconds. Caches therefore disagree, and some
//! calls reach AllocSvrs that no longer own their section, which is what
//! the lease has to make harmless.

use seqsvr_core::checker::Observation;
use seqsvr_core::SectionId;

use crate::env::{trace, Env};
use crate::model::{Ask, CTimer, ClientMsg, Ev, Msg, OpRef, Refusal, RouteView, Slot};
use crate::net::{fmt_time, Node, Time, MS, SEC};

/// One call in progress.
#[derive(Debug, Clone)]
struct Op {
    /// Its id.
    id: u64,
    /// What it asks (all uids in one section).
    ask: Ask,
    /// Attempts made, minus one.
    attempt: u32,
    /// Where the current attempt went.
    target: Slot,
    /// When the current attempt was sent.
    sent: Time,
}

/// One client.
#[derive(Debug)]
struct Client {
    /// Cached route table.
    routes: RouteView,
    /// The call in progress.
    op: Option<Op>,
}

/// Attempts per call before giving up.
const ATTEMPTS: u32 = 6;
/// How long an attempt may take.
const ATTEMPT_TIMEOUT: Time = 1500 * MS;

/// Every client.
#[derive(Debug)]
pub(crate) struct Clients {
    list: Vec<Client>,
}

impl Clients {
    /// The clients of `env.cfg`, having read the committed routes, their
    /// first calls and route refreshes scheduled.
    pub(crate) fn new(env: &mut Env) -> Self {
        let mut list = Vec::new();
        for c in 0..env.cfg.clients {
            list.push(Client {
                routes: RouteView::of(&env.truth),
                op: None,
            });
            let t = env.rng.range(500 * MS, 1500 * MS);
            env.schedule(
                t,
                Ev::Client {
                    c,
                    t: CTimer::Issue,
                },
            );
            let t = env.rng.range(1000 * MS, 3000 * MS);
            env.schedule(
                t,
                Ev::Client {
                    c,
                    t: CTimer::Refresh,
                },
            );
        }
        Self { list }
    }

    /// A client's timer.
    pub(crate) fn timer(&mut self, env: &mut Env, c: usize, t: CTimer) {
        match t {
            CTimer::Issue => self.issue(env, c),
            CTimer::Timeout { op, attempt } => {
                let current = self.list[c]
                    .op
                    .as_ref()
                    .is_some_and(|o| o.id == op && o.attempt == attempt);
                if current {
                    self.list[c].routes = RouteView::of(&env.truth);
                    let other = self.other_alloc(env, c);
                    self.retry(env, c, Some(other), 0);
                }
            }
            CTimer::Retry(op) => {
                if self.list[c].op.as_ref().is_some_and(|o| o.id == op) {
                    self.attempt(env, c);
                }
            }
            CTimer::Refresh => {
                self.list[c].routes = RouteView::of(&env.truth);
                let d = env.rng.range(SEC, 4 * SEC);
                env.after(
                    d,
                    Ev::Client {
                        c,
                        t: CTimer::Refresh,
                    },
                );
            }
        }
    }

    fn issue(&mut self, env: &mut Env, c: usize) {
        let spec = &env.cfg.spec;
        let s = env.rng.below(spec.section_count() as u64) as SectionId;
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
        let ask = if env.rng.chance(0.1) {
            Ask::Current(pick(&mut env.rng))
        } else {
            let count = if env.rng.chance(0.75) {
                1
            } else {
                env.rng.range(2, 6)
            };
            Ask::Next((0..count).map(|_| pick(&mut env.rng)).collect())
        };
        let target = match self.list[c].routes.slot(s) {
            Some(a) => a,
            None => env.rng.pick(env.cfg.allocs),
        };
        let id = env.fresh_id();
        self.list[c].op = Some(Op {
            id,
            ask,
            attempt: 0,
            target,
            sent: 0,
        });
        self.attempt(env, c);
    }

    fn attempt(&mut self, env: &mut Env, c: usize) {
        let now = env.now;
        let op = self.list[c].op.as_mut().expect("a call");
        op.sent = now;
        let m = ClientMsg::Req {
            op: OpRef {
                client: c,
                op: op.id,
                attempt: op.attempt,
            },
            ask: op.ask.clone(),
        };
        let (target, id, attempt) = (op.target, op.id, op.attempt);
        env.send(Node::Client(c), Node::Alloc(target), Msg::Client(m));
        env.after(
            ATTEMPT_TIMEOUT,
            Ev::Client {
                c,
                t: CTimer::Timeout { op: id, attempt },
            },
        );
    }

    /// Another attempt at `target` (or the same) after `delay`, or give up.
    fn retry(&mut self, env: &mut Env, c: usize, target: Option<Slot>, delay: Time) {
        let op = self.list[c].op.as_mut().expect("a call");
        if op.attempt + 1 >= ATTEMPTS {
            env.stats.calls_failed += 1;
            return self.next_call(env, c);
        }
        op.attempt += 1;
        if let Some(t) = target {
            op.target = t;
        }
        let id = op.id;
        env.after(
            delay,
            Ev::Client {
                c,
                t: CTimer::Retry(id),
            },
        );
    }

    fn next_call(&mut self, env: &mut Env, c: usize) {
        self.list[c].op = None;
        let d = env.rng.range(5 * MS, 30 * MS);
        env.after(
            d,
            Ev::Client {
                c,
                t: CTimer::Issue,
            },
        );
    }

    /// Some AllocSvr process other than the current attempt's target: one
    /// of the registered addresses, or a first process.
    fn other_alloc(&mut self, env: &mut Env, c: usize) -> Slot {
        let cur = self.list[c].op.as_ref().map_or(0, |o| o.target);
        let mut known: Vec<Slot> = (env.truth.allocs.values())
            .filter_map(|a| crate::model::slot_of_addr(&a.addr))
            .chain(0..env.cfg.allocs)
            .filter(|&s| s != cur)
            .collect();
        known.sort_unstable();
        known.dedup();
        if known.is_empty() {
            return cur;
        }
        known[env.rng.pick(known.len())]
    }

    /// The section the current call is about.
    fn section(env: &Env, op: &Op) -> SectionId {
        let uid = op.ask.uids()[0];
        env.cfg.spec.section_of(uid).expect("in set")
    }

    /// An answer arrives.
    pub(crate) fn msg(&mut self, env: &mut Env, c: usize, m: ClientMsg) {
        let ClientMsg::Resp {
            op,
            result,
            routes,
            version,
        } = m
        else {
            panic!("model bug: request delivered to a client");
        };
        let Some(cur) = self.list[c].op.clone() else {
            return;
        };
        if cur.id != op.op || cur.attempt != op.attempt {
            return;
        }
        if let Some(view) = routes {
            let cl = &mut self.list[c];
            if view.version > cl.routes.version {
                cl.routes = view;
            }
        }
        let s = Self::section(env, &cur);
        match result {
            Ok(seqs) => {
                let now = env.now;
                match &cur.ask {
                    Ask::Next(uids) => {
                        for (uid, seq) in uids.iter().zip(&seqs) {
                            env.monitor.observations.push(Observation {
                                uid: *uid,
                                seq: *seq,
                                start: cur.sent,
                                end: now,
                            });
                        }
                        env.stats.calls_ok += 1;
                    }
                    Ask::Current(uid) => {
                        env.monitor.current_reads.push(Observation {
                            uid: *uid,
                            seq: seqs[0],
                            start: cur.sent,
                            end: now,
                        });
                        env.stats.current_reads += 1;
                    }
                }
                trace!(
                    env,
                    "c{c} got {seqs:?} for {:?} from p{} (sent {})",
                    cur.ask,
                    cur.target,
                    fmt_time(cur.sent)
                );
                if version > self.list[c].routes.version {
                    self.list[c].routes = RouteView::of(&env.truth);
                }
                self.next_call(env, c);
            }
            Err(Refusal::NotOwner(s)) => {
                let to = match self.list[c].routes.slot(s) {
                    Some(o) if o != cur.target => o,
                    _ => self.other_alloc(env, c),
                };
                self.retry(env, c, Some(to), 0);
            }
            Err(Refusal::LeaseExpired | Refusal::Fenced) => {
                let to = match self.list[c].routes.slot(s) {
                    Some(o) if o != cur.target => o,
                    _ => self.other_alloc(env, c),
                };
                self.retry(env, c, Some(to), 5 * MS);
            }
            Err(Refusal::Exhausted(_)) => self.retry(env, c, None, 10 * MS),
            Err(Refusal::Unavailable) => {
                let to = self.other_alloc(env, c);
                self.retry(env, c, Some(to), 10 * MS);
            }
        }
    }
}
