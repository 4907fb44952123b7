//! An AllocSvr's link to the store: the store client's call loop
//! (`crates/store/src/client.rs`) and the raiser's rounds
//! (`crates/alloc/src/raiser.rs`), as state machines on virtual time.
//!
//! A call tries one replica at a time, starting with the one that last
//! answered, each attempt bounded by `min(time left, 5 s)`; a retryable
//! failure (no leader, timeout) moves on to the next replica, with a
//! back-off (20 ms doubling to 500 ms) after every full round of replicas,
//! until the call's deadline (10 s, or 1 s for renewals and route reads).
//! An answer to an abandoned attempt is ignored.
//!
//! The raiser takes every queued raise request, sends them all, waits for
//! every answer, then settles them exactly as `Raiser::settle` does
//! (`NotAbove` at or above the target counts as landed; `StaleEpoch` drops
//! the section if still served under that epoch; anything else is retried
//! after a back-off of 10 ms doubling to 1 s).

use std::time::Instant;

use seqsvr_alloc::{Grant, RaiseRequest};
use seqsvr_store::types::{Rejection, Reply};

use crate::alloc::ATimer;
use crate::net::{Node, Time, MS, SEC};
use crate::store::{CallRef, Pending, StoreFail, StoreMsg, StoreOk, StoreReq, StoreResp};
use crate::world::{trace, Msg, World};

/// What a store call is for (what to do with its answer).
#[derive(Debug, Clone)]
pub(crate) enum Purpose {
    /// Start-up registration.
    Register,
    /// A route read (start-up's, or the route loop's).
    Routes,
    /// A renewal sent at this instant of the AllocSvr's clock.
    Renew {
        /// The send time (the lease counts from it).
        sent: Instant,
    },
    /// A take-over.
    TakeOver,
    /// A raise.
    Raise(RaiseRequest),
}

/// A store call in progress.
#[derive(Debug)]
pub(crate) struct Call {
    /// The request.
    req: StoreReq,
    /// What it is for.
    purpose: Purpose,
    /// Gives up at this (real) time.
    deadline: Time,
    /// Attempts made so far, minus one.
    attempt: u32,
    /// The replica of the current attempt.
    replica: usize,
    /// Back-off before the next round of replicas (local clock).
    backoff: Time,
}

/// A raiser round: raises sent together, settled together.
#[derive(Debug)]
pub(crate) struct Round {
    /// Answers still to come.
    outstanding: usize,
    /// Answers so far.
    answers: Vec<(RaiseRequest, StoreResp)>,
}

/// Default deadline of a store call.
const DEADLINE: Time = 10 * SEC;
/// Longest single attempt.
const ATTEMPT: Time = 5 * SEC;

impl World {
    /// Starts a store call (deadline on the AllocSvr's clock; default 10 s).
    pub(crate) fn start_call(
        &mut self,
        a: usize,
        req: StoreReq,
        purpose: Purpose,
        deadline: Option<Time>,
    ) {
        let id = self.fresh_id();
        let node = &mut self.allocs[a];
        let deadline = self.now + node.real(deadline.unwrap_or(DEADLINE));
        let call = Call {
            req,
            purpose,
            deadline,
            attempt: 0,
            replica: node.preferred,
            backoff: 20 * MS,
        };
        node.calls.insert(id, call);
        self.call_attempt(a, id);
    }

    /// Sends the current attempt of a call.
    pub(crate) fn call_attempt(&mut self, a: usize, id: u64) {
        let n = self.replicas.len();
        let node = &mut self.allocs[a];
        let inc = node.inc;
        let preferred = node.preferred;
        let max_attempt = node.real(ATTEMPT);
        let Some(call) = node.calls.get_mut(&id) else {
            return;
        };
        call.replica = (preferred + call.attempt as usize) % n;
        let left = call.deadline.saturating_sub(self.now);
        let timeout = left.min(max_attempt);
        let p = Pending {
            call: CallRef {
                alloc: a,
                inc,
                call: id,
                attempt: call.attempt,
            },
            req: call.req.clone(),
            forwarded: false,
            via: None,
        };
        let (to, attempt) = (call.replica, call.attempt);
        self.send(
            Node::Alloc(a),
            Node::Replica(to),
            Msg::Store(StoreMsg::Req(p)),
        );
        self.alloc_after(a, timeout, ATimer::CallTimeout { call: id, attempt });
    }

    pub(crate) fn call_timeout(&mut self, a: usize, id: u64, attempt: u32) {
        let current = self.allocs[a]
            .calls
            .get(&id)
            .is_some_and(|c| c.attempt == attempt);
        if current {
            self.call_failed(a, id, StoreFail::Timeout);
        }
    }

    pub(crate) fn on_store_resp(&mut self, a: usize, call: CallRef, resp: StoreResp) {
        let node = &mut self.allocs[a];
        let current = call.inc == node.inc
            && node
                .calls
                .get(&call.call)
                .is_some_and(|c| c.attempt == call.attempt);
        if !current {
            return;
        }
        match resp {
            Ok(ok) => {
                let c = node.calls.get(&call.call).expect("current");
                node.preferred = c.replica;
                self.call_done(a, call.call, Ok(ok));
            }
            Err(e) if e.retryable() => self.call_failed(a, call.call, e),
            Err(e) => self.call_done(a, call.call, Err(e)),
        }
    }

    /// A retryable failure: next replica (after a back-off every round),
    /// unless the deadline passed.
    fn call_failed(&mut self, a: usize, id: u64, e: StoreFail) {
        let n = self.replicas.len() as u32;
        let now = self.now;
        let node = &mut self.allocs[a];
        let rate = node.rate;
        let call = node.calls.get_mut(&id).expect("current");
        if now >= call.deadline {
            return self.call_done(a, id, Err(e));
        }
        call.attempt += 1;
        if call.attempt.is_multiple_of(n) {
            let sleep = ((call.backoff as f64 / rate).ceil() as Time).min(call.deadline - now);
            call.backoff = (call.backoff * 2).min(500 * MS);
            // The sleep must not let the old attempt's timer count.
            self.alloc_after(a, sleep, ATimer::CallResend(id));
        } else {
            self.call_attempt(a, id);
        }
    }

    fn call_done(&mut self, a: usize, id: u64, resp: StoreResp) {
        let call = self.allocs[a].calls.remove(&id).expect("current");
        match call.purpose {
            Purpose::Register => match resp {
                Ok(_) => self.start_call(a, StoreReq::Routes, Purpose::Routes, None),
                Err(e) => self.register_failed(a, e),
            },
            Purpose::Routes if self.allocs[a].alloc.is_none() => match resp {
                Ok(StoreOk::Routes { owners, version }) => self.alloc_started(a, owners, version),
                Ok(other) => panic!("model bug: {other:?} for a route read"),
                Err(e) => self.register_failed(a, e),
            },
            Purpose::Routes => self.routes_read(a, resp),
            Purpose::Renew { sent } => self.renewed(a, sent, resp),
            Purpose::TakeOver => {
                match resp {
                    Ok(StoreOk::Written(Reply::TakenOver { grants, .. })) => {
                        let grants: Vec<Grant> = grants
                            .iter()
                            .map(|g| Grant {
                                section: g.section,
                                epoch: g.epoch,
                                prev_ceiling: g.prev_ceiling,
                                max_seq: g.max_seq,
                            })
                            .collect();
                        let alloc = self.allocs[a].alloc.as_ref().expect("started");
                        let n = alloc.install(&grants).expect("grants of this set");
                        trace!(self, "a{a} took over {grants:?} (installed {n})");
                        for g in grants {
                            self.wake(a, g.section);
                        }
                    }
                    other => trace!(self, "a{a} take-over failed: {other:?}"),
                }
                self.next_takeover(a);
            }
            Purpose::Raise(r) => self.raise_answered(a, r, resp),
        }
    }

    fn register_failed(&mut self, a: usize, e: StoreFail) {
        trace!(self, "a{a} store not ready ({e:?}), retrying");
        let d = self.allocs[a].real(500 * MS);
        self.alloc_after(a, d, ATimer::RegisterRetry);
    }

    /// Starts a round if none is running and raises are queued.
    pub(crate) fn raiser_kick(&mut self, a: usize) {
        let node = &mut self.allocs[a];
        if node.round.is_some() {
            return;
        }
        let Some(alloc) = node.alloc.as_ref() else {
            return;
        };
        let reqs = alloc.take_raise_requests();
        if reqs.is_empty() {
            return;
        }
        node.round = Some(Round {
            outstanding: reqs.len(),
            answers: Vec::new(),
        });
        for r in reqs {
            let req = StoreReq::Raise {
                section: r.section,
                epoch: r.epoch,
                to: r.to,
            };
            self.start_call(a, req, Purpose::Raise(r), None);
        }
    }

    fn raise_answered(&mut self, a: usize, r: RaiseRequest, resp: StoreResp) {
        let node = &mut self.allocs[a];
        let round = node.round.as_mut().expect("a round is running");
        round.answers.push((r, resp));
        round.outstanding -= 1;
        if round.outstanding > 0 {
            return;
        }
        // Settle the whole round before another may start (the raiser's
        // loop only takes new requests after `run_once` returns).
        let answers = std::mem::take(&mut round.answers);
        let mut retry = Vec::new();
        for (r, resp) in answers {
            self.settle(a, r, resp, &mut retry);
        }
        let node = &mut self.allocs[a];
        node.round = None;
        if !retry.is_empty() {
            node.retry.extend(retry);
            let d = node.real(node.backoff);
            node.backoff = (node.backoff * 2).min(SEC);
            self.alloc_after(a, d, ATimer::RaiseRetry);
        } else if node.retry.is_empty() {
            node.backoff = 10 * MS;
        }
        self.raiser_kick(a);
    }

    /// `Raiser::settle`.
    fn settle(&mut self, a: usize, r: RaiseRequest, resp: StoreResp, retry: &mut Vec<u32>) {
        let landed = match resp {
            Ok(StoreOk::Written(Reply::Raised { max_seq })) => max_seq,
            Err(StoreFail::Rejected(Rejection::NotAbove { current, .. })) if current >= r.to => {
                current
            }
            Err(StoreFail::Rejected(
                Rejection::StaleEpoch { .. } | Rejection::OwnedElsewhere { .. },
            )) => {
                let alloc = self.allocs[a].alloc.as_ref().expect("started");
                if alloc.drop_section_if_epoch(r.section, r.epoch) {
                    trace!(self, "a{a} raise {r:?}: stale epoch, section dropped");
                    self.wake(a, r.section);
                }
                return;
            }
            Err(e) if e.retryable() => return retry.push(r.section),
            other => {
                let what = format!("a{a}: raise {r:?} refused: {other:?}");
                self.monitor.violate(self.now, 0, what);
                return retry.push(r.section);
            }
        };
        let alloc = self.allocs[a].alloc.as_ref().expect("started");
        if alloc.apply_raise(r.section, r.epoch, landed) {
            self.wake(a, r.section);
        }
    }
}
