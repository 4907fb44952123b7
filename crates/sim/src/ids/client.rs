//! Id clients: each issues one `NextId` call at a time (one id, or up to
//! 64 of a namespace), to any process of the home set — any AllocSvr
//! serves any namespace — and, like the Rust client, tries another
//! process on a retryable refusal or a timeout, a few times, then gives
//! up. `CLOCK_BEHIND` is retried elsewhere at once (the refusal says how
//! long this process's clock needs). What they receive is counted; the
//! checker looks at every id issued.

use crate::env::{trace, Env};
use crate::model::{Ev, Msg, Slot};
use crate::net::{Node, Time, MS};

use super::{IdCTimer, IdEv, IdMsg, IdOp, IdRefused};

/// Attempts per call before giving up.
const ATTEMPTS: u32 = 6;
/// How long an attempt waits for its answer.
const ATTEMPT_TIMEOUT: Time = 500 * MS;

/// One call in progress.
#[derive(Debug, Clone, Copy)]
struct Op {
    id: u64,
    ns: usize,
    n: u32,
    attempt: u32,
    target: Slot,
}

/// The id clients; client `c` is `Node::Client(first + c)`.
#[derive(Debug, Default)]
pub(crate) struct IdClients {
    /// The node number of the first.
    first: usize,
    /// The call in progress, per client.
    ops: Vec<Option<Op>>,
}

impl IdClients {
    /// `n` id clients numbered from `first`, their first calls scheduled.
    pub(crate) fn new(env: &mut Env, first: usize, n: usize) -> Self {
        for c in 0..n {
            let d = env.rng.range(500 * MS, 1500 * MS);
            env.after(d, Ev::Ids(IdEv::Client(c, IdCTimer::Issue)));
        }
        Self {
            first,
            ops: vec![None; n],
        }
    }

    /// Whether `node` is one of these clients (and which).
    pub(crate) fn of(&self, node: usize) -> Option<usize> {
        node.checked_sub(self.first).filter(|c| *c < self.ops.len())
    }

    pub(crate) fn timer(&mut self, env: &mut Env, c: usize, t: IdCTimer) {
        match t {
            IdCTimer::Issue => {
                let Some(spaces) = env.cfg.ids.as_ref().map(|i| i.spaces.len()) else {
                    return;
                };
                let ns = env.rng.pick(spaces);
                let n = if env.rng.chance(0.7) {
                    1
                } else {
                    env.rng.range(2, 65) as u32
                };
                let op = Op {
                    id: env.fresh_id(),
                    ns,
                    n,
                    attempt: 0,
                    target: self.any(env),
                };
                self.ops[c] = Some(op);
                self.attempt(env, c);
            }
            IdCTimer::Timeout(id, attempt) => {
                if self.ops[c].is_some_and(|o| o.id == id && o.attempt == attempt) {
                    self.retry(env, c, 0);
                }
            }
            IdCTimer::Retry(id) => {
                if self.ops[c].is_some_and(|o| o.id == id) {
                    self.attempt(env, c);
                }
            }
        }
    }

    /// Any process of the home set (first processes and twins).
    fn any(&self, env: &mut Env) -> Slot {
        let slots = env.cfg.layout().slots_of(0);
        slots.start + env.rng.pick(slots.len())
    }

    fn attempt(&mut self, env: &mut Env, c: usize) {
        let Some(op) = self.ops[c] else { return };
        let req = IdMsg::Req {
            op: IdOp {
                client: self.first + c,
                op: op.id,
                attempt: op.attempt,
            },
            ns: op.ns,
            n: op.n,
        };
        let me = Node::Client(self.first + c);
        env.send(me, Node::Alloc(op.target), Msg::Id(req));
        let t = IdCTimer::Timeout(op.id, op.attempt);
        env.after(ATTEMPT_TIMEOUT, Ev::Ids(IdEv::Client(c, t)));
    }

    /// Tries another process after `delay`, or gives up.
    fn retry(&mut self, env: &mut Env, c: usize, delay: Time) {
        let Some(mut op) = self.ops[c] else { return };
        if op.attempt + 1 >= ATTEMPTS {
            env.ids.stats.calls_failed += 1;
            return self.next_call(env, c);
        }
        op.attempt += 1;
        op.target = self.any(env);
        self.ops[c] = Some(op);
        env.after(delay, Ev::Ids(IdEv::Client(c, IdCTimer::Retry(op.id))));
    }

    fn next_call(&mut self, env: &mut Env, c: usize) {
        self.ops[c] = None;
        let d = env.rng.range(2 * MS, 20 * MS);
        env.after(d, Ev::Ids(IdEv::Client(c, IdCTimer::Issue)));
    }

    /// An answer arrives at client node `node`.
    pub(crate) fn msg(&mut self, env: &mut Env, node: usize, m: IdMsg) {
        let IdMsg::Resp { op: r, result } = m else {
            panic!("model bug: an id request reached client {node}");
        };
        let Some(c) = self.of(node) else { return };
        let Some(op) = self.ops[c].filter(|o| o.id == r.op && o.attempt == r.attempt) else {
            return;
        };
        match result {
            Ok(ids) => {
                let s = &mut env.ids.stats;
                s.calls_ok += 1;
                s.received += ids.len() as u64;
                env.ids.last_received[op.ns] = env.now;
                self.next_call(env, c);
            }
            Err(why) => {
                let s = &mut env.ids.stats;
                match why {
                    IdRefused::ClockBehind(_) => s.clock_behind += 1,
                    IdRefused::Ceiling => s.ceiling_reached += 1,
                    IdRefused::Exhausted => s.exhausted += 1,
                    _ => s.other_refusals += 1,
                }
                trace!(env, "id client {c}: p{} refused: {why:?}", op.target);
                let d = env.rng.range(MS, 10 * MS);
                self.retry(env, c, d);
            }
        }
    }
}
