//! The store client (`crates/store-api/src/client.rs`, `Replicas::call`)
//! as a state machine on virtual time, used by AllocSvr processes and the
//! operator.
//!
//! A call goes to one replica, starting with the one that last answered.
//! A replica silent for the *attempt* time is not waited for: the call is
//! also sent to the next one (hedged: the first answer wins), or, without
//! hedging (the admin client), abandoned for the next one. A retryable
//! refusal moves on at once, with a back-off (20 ms doubling to 500 ms)
//! once every replica has been asked; a definite answer ends the call;
//! at the deadline it fails with the last error. An answer to an abandoned
//! attempt is ignored. Every duration is measured on the caller's clock
//! (`rate`).

use std::collections::BTreeMap;

use crate::env::Env;
use crate::model::{
    CallRef, Ev, LinkTimer, Msg, Pending, StoreFail, StoreMsg, StoreReq, StoreResp,
};
use crate::net::{Node, Time, MS};

/// The timing of a call, on the caller's clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Time the whole call may take.
    pub deadline: Time,
    /// Time one replica gets before the next is asked.
    pub attempt: Time,
    /// Keep a slow attempt running while the next replica is asked.
    pub hedge: bool,
}

/// Who calls: the node, the store group it calls, its life (answers to an
/// earlier life are ignored), its clock rate, and how its timers reach it.
pub(crate) struct Caller<'a> {
    /// The node.
    pub node: Node,
    /// The group's replica 0, numbered across sets (`Node::Replica`).
    pub first: usize,
    /// Its life.
    pub life: u32,
    /// Its clock's rate relative to real time.
    pub rate: f64,
    /// Wraps a call's timer into an event for the caller.
    pub wrap: &'a dyn Fn(LinkTimer) -> Ev,
}

impl Caller<'_> {
    /// The real time a duration on the caller's clock takes.
    fn real(&self, d: Time) -> Time {
        (d as f64 / self.rate).ceil() as Time
    }
}

/// A call in progress.
#[derive(Debug)]
struct Call<P> {
    req: StoreReq,
    purpose: P,
    timing: Timing,
    /// Gives up at this (real) time.
    deadline: Time,
    /// The replica asked first.
    first: usize,
    /// Attempts started.
    started: usize,
    /// Attempts in flight (attempt number → replica).
    inflight: BTreeMap<u32, usize>,
    /// Back-off before the next round (caller's clock).
    backoff: Time,
    /// No attempt starts before this (real time).
    wait_until: Option<Time>,
    /// The last retryable error.
    last: StoreFail,
    /// Timer generation (only the latest timer counts).
    gen: u64,
}

/// One caller's store client.
#[derive(Debug)]
pub(crate) struct StoreClient<P> {
    calls: BTreeMap<u64, Call<P>>,
    /// Replica tried first (the last that answered).
    preferred: usize,
}

impl<P> Default for StoreClient<P> {
    fn default() -> Self {
        Self {
            calls: BTreeMap::new(),
            preferred: 0,
        }
    }
}

/// A finished call: what it was for, and its answer.
pub(crate) type Done<P> = Option<(P, StoreResp)>;

impl<P: std::fmt::Debug> StoreClient<P> {
    /// Starts a call; its answer comes out of [`on_resp`](Self::on_resp)
    /// or [`on_timer`](Self::on_timer).
    pub(crate) fn start(
        &mut self,
        env: &mut Env,
        who: &Caller<'_>,
        req: StoreReq,
        purpose: P,
        timing: Timing,
    ) -> Done<P> {
        let id = env.fresh_id();
        let call = Call {
            req,
            purpose,
            timing,
            deadline: env.now + who.real(timing.deadline),
            first: self.preferred,
            started: 0,
            inflight: BTreeMap::new(),
            backoff: 20 * MS,
            wait_until: None,
            last: StoreFail::Timeout,
            gen: 0,
        };
        self.calls.insert(id, call);
        self.pump(env, who, id)
    }

    /// Starts what is due and sets the next timer; fails the call at its
    /// deadline.
    fn pump(&mut self, env: &mut Env, who: &Caller<'_>, id: u64) -> Done<P> {
        let n = env.cfg.replicas;
        let now = env.now;
        let call = self.calls.get_mut(&id)?;
        if now >= call.deadline {
            let call = self.calls.remove(&id)?;
            return Some((call.purpose, Err(call.last)));
        }
        let may_start = call.wait_until.is_none_or(|t| now >= t);
        if call.inflight.is_empty() && may_start {
            call.wait_until = None;
            launch(env, who, id, call, n);
        }
        call.gen += 1;
        let at = if call.inflight.is_empty() {
            call.wait_until.unwrap_or(call.deadline)
        } else {
            now + who.real(call.timing.attempt)
        };
        let t = LinkTimer {
            call: id,
            gen: call.gen,
        };
        env.schedule(at.min(call.deadline), (who.wrap)(t));
        None
    }

    /// A timer of this client fired.
    pub(crate) fn on_timer(&mut self, env: &mut Env, who: &Caller<'_>, t: LinkTimer) -> Done<P> {
        let n = env.cfg.replicas;
        let call = self.calls.get_mut(&t.call)?;
        if call.gen != t.gen {
            return None;
        }
        if env.now < call.deadline && !call.inflight.is_empty() {
            // The attempt time passed with no answer: ask the next replica.
            if !call.timing.hedge {
                call.inflight.clear();
            }
            if call.inflight.len() < n {
                launch(env, who, t.call, call, n);
            }
        }
        self.pump(env, who, t.call)
    }

    /// An answer arrived.
    pub(crate) fn on_resp(
        &mut self,
        env: &mut Env,
        who: &Caller<'_>,
        r: CallRef,
        resp: StoreResp,
    ) -> Done<P> {
        let n = env.cfg.replicas;
        if r.life != who.life {
            return None;
        }
        let call = self.calls.get_mut(&r.call)?;
        let replica = call.inflight.remove(&r.attempt)?;
        match resp {
            Err(e) if e.retryable() => {
                call.last = e;
                if call.inflight.is_empty() && call.started.is_multiple_of(n) {
                    call.wait_until = Some(env.now + who.real(call.backoff));
                    call.backoff = (call.backoff * 2).min(500 * MS);
                }
                self.pump(env, who, r.call)
            }
            resp => {
                if resp.is_ok() {
                    self.preferred = replica;
                }
                let call = self.calls.remove(&r.call)?;
                Some((call.purpose, resp))
            }
        }
    }
}

/// Sends the call's next attempt.
fn launch<P>(env: &mut Env, who: &Caller<'_>, id: u64, call: &mut Call<P>, n: usize) {
    let replica = (call.first + call.started) % n;
    let attempt = call.started as u32;
    call.started += 1;
    call.inflight.insert(attempt, replica);
    let p = Pending {
        call: CallRef {
            node: who.node,
            life: who.life,
            call: id,
            attempt,
        },
        req: call.req.clone(),
        forwarded: false,
        via: None,
    };
    env.send(
        who.node,
        Node::Replica(who.first + replica),
        Msg::Store(StoreMsg::Req(p)),
    );
}
