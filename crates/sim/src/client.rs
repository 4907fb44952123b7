//! Clients: each issues one call at a time (`next` of one uid, a batch of
//! uids of one section, or `Current` of one uid) for uids of every set, to
//! the set the directory it last read names and the AllocSvr process that
//! set's cached route table names, and records every number it receives as
//! an [`Observation`] with the virtual times the successful attempt was
//! sent and answered, and its position in the call (`Current` answers
//! too, as reads).
//!
//! Like the real client it retries: `NOT_OWNER` with the table the error
//! carries (or elsewhere), `LEASE_EXPIRED` and `STALE_INCARNATION` at
//! another AllocSvr, an exhausted section at the same one, a timeout
//! elsewhere; and it refreshes its routes (a linearizable read: the
//! committed table) when a reply carries a newer route version, after a
//! timeout, and every few seconds. Across sets (a simple model of a
//! directory-aware client): `MOVED` sends the call to the set it names,
//! `NOT_SERVED` and `OUT_OF_RANGE` re-read the directory (the home group's,
//! committed) and retry where it points, after a short back-off; a route
//! table carrying a newer directory copy replaces the directory. Caches
//! therefore disagree, and some calls reach AllocSvrs, or sets, that no
//! longer serve their section, which is what the lease and the move
//! protocol have to make harmless.

use seqsvr_core::checker::Observation;
use seqsvr_core::directory::HOME_SET;
use seqsvr_core::{Directory, SectionId};

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
    /// The set the current attempt went to.
    set: usize,
    /// The process the current attempt went to.
    target: Slot,
    /// When the current attempt was sent.
    sent: Time,
}

/// One client.
#[derive(Debug)]
struct Client {
    /// The directory last read.
    dir: Directory,
    /// Cached route table, per set.
    routes: Vec<RouteView>,
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

/// The home group's committed directory (a linearizable read of it).
fn read_directory(env: &Env) -> Directory {
    env.truth[HOME_SET as usize]
        .directory
        .clone()
        .unwrap_or_default()
}

impl Clients {
    /// The clients of `env.cfg`, having read the directory and every set's
    /// committed routes, their first calls and route refreshes scheduled.
    pub(crate) fn new(env: &mut Env) -> Self {
        let mut list = Vec::new();
        for c in 0..env.cfg.clients {
            list.push(Client {
                dir: read_directory(env),
                routes: env.truth.iter().map(RouteView::of).collect(),
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

    /// Re-reads the directory and every set's routes.
    fn refresh(&mut self, env: &Env, c: usize) {
        let cl = &mut self.list[c];
        cl.dir = read_directory(env);
        cl.routes = env.truth.iter().map(RouteView::of).collect();
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
                    self.refresh(env, c);
                    self.reroute(c);
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
                self.refresh(env, c);
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
        let grid = env.cfg.grid();
        let s = env.rng.below(grid.section_count() as u64) as SectionId;
        let uids = grid.uids_of(s);
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
        let cl = &self.list[c];
        let set = cl.dir.set_of(uids.start).map_or(0, |s| s as usize);
        let target = match cl.routes[set].slot(s) {
            Some(a) => a,
            None => Self::any_first(env, set),
        };
        let id = env.fresh_id();
        self.list[c].op = Some(Op {
            id,
            ask,
            attempt: 0,
            set,
            target,
            sent: 0,
        });
        self.attempt(env, c);
    }

    /// A first process of `set`, at random.
    fn any_first(env: &mut Env, set: usize) -> Slot {
        let i = env.rng.pick(env.cfg.allocs);
        env.cfg.layout().first_slot(set, i)
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

    /// Points the current call at the set the directory names for it.
    fn reroute(&mut self, c: usize) {
        let cl = &mut self.list[c];
        let Some(op) = cl.op.as_mut() else {
            return;
        };
        let uid = op.ask.uids()[0];
        if let Some(s) = cl.dir.set_of(uid) {
            op.set = s as usize;
        }
    }

    /// Some AllocSvr process of the current call's set other than the
    /// current attempt's target: one of the registered addresses, or a
    /// first process.
    fn other_alloc(&mut self, env: &mut Env, c: usize) -> Slot {
        let (set, cur) = self.list[c]
            .op
            .as_ref()
            .map_or((0, 0), |o| (o.set, o.target));
        let l = env.cfg.layout();
        let mut known: Vec<Slot> = (env.truth[set].allocs.values())
            .filter_map(|a| crate::model::slot_of_addr(&a.addr))
            .chain((0..l.allocs).map(|i| l.first_slot(set, i)))
            .filter(|&s| s != cur)
            .collect();
        known.sort_unstable();
        known.dedup();
        if known.is_empty() {
            return cur;
        }
        known[env.rng.pick(known.len())]
    }

    /// The process the cached routes of the call's set name for `s`, if
    /// not the current target; else another.
    fn routed_or_other(&mut self, env: &mut Env, c: usize, s: SectionId) -> Slot {
        let cl = &self.list[c];
        let op = cl.op.as_ref().expect("a call");
        match cl.routes[op.set].slot(s) {
            Some(o) if o != op.target => o,
            _ => self.other_alloc(env, c),
        }
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
            if view.directory_version() > cl.dir.version {
                cl.dir = view.directory.clone().unwrap_or_default();
            }
            if view.version > cl.routes[cur.set].version {
                cl.routes[cur.set] = view;
            }
        }
        let s = env
            .cfg
            .grid()
            .section_of(cur.ask.uids()[0])
            .expect("in the grid");
        match result {
            Ok(seqs) => self.served(env, c, &cur, &seqs, version),
            Err(refusal) => self.refused(env, c, &cur, s, refusal),
        }
    }

    /// Call `cur` was answered with `seqs`: what was handed out is
    /// observed, the routes refreshed if the answer names a newer version,
    /// and the next call made.
    fn served(&mut self, env: &mut Env, c: usize, cur: &Op, seqs: &[u64], version: u64) {
        let now = env.now;
        match &cur.ask {
            Ask::Next(uids) => {
                // In request order, each with its position: a
                // uid asked twice must get increasing numbers.
                let got = Observation::batch(uids, seqs, cur.sent, now);
                env.monitor.observations.extend(got);
                env.stats.calls_ok += 1;
            }
            Ask::Current(uid) => {
                let got = Observation::current(*uid, seqs[0], cur.sent, now);
                env.monitor.observations.push(got);
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
        if version > self.list[c].routes[cur.set].version {
            self.list[c].routes[cur.set] = RouteView::of(&env.truth[cur.set]);
        }
        self.next_call(env, c);
    }

    /// Call `cur` (for section `s` of the grid) was refused: retried, at
    /// the owner the routes name or another process, after a delay that
    /// depends on why.
    fn refused(&mut self, env: &mut Env, c: usize, cur: &Op, s: SectionId, refusal: Refusal) {
        match refusal {
            Refusal::NotOwner(s) => {
                let to = self.routed_or_other(env, c, s);
                self.retry(env, c, Some(to), 0);
            }
            Refusal::LeaseExpired | Refusal::Fenced => {
                let to = self.routed_or_other(env, c, s);
                self.retry(env, c, Some(to), 5 * MS);
            }
            Refusal::Exhausted(_) => self.retry(env, c, None, 10 * MS),
            Refusal::Unavailable => {
                let to = self.other_alloc(env, c);
                self.retry(env, c, Some(to), 10 * MS);
            }
            Refusal::Moved(s, to) => {
                env.stats.moved_answers += 1;
                let set = to as usize;
                if set < env.truth.len() {
                    self.list[c].routes[set] = RouteView::of(&env.truth[set]);
                    self.list[c].op.as_mut().expect("a call").set = set;
                }
                let to = self.routed_or_other(env, c, s);
                self.retry(env, c, Some(to), 0);
            }
            Refusal::NotServed(_) | Refusal::OutOfRange => {
                env.stats.moved_answers += 1;
                self.refresh(env, c);
                self.reroute(c);
                let to = self.routed_or_other(env, c, s);
                let delay = (20 * MS) << cur.attempt.min(4);
                self.retry(env, c, Some(to), delay);
            }
        }
    }
}
