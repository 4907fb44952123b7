//! The operator (`seqctl`): admin calls to a set's store group through the
//! admin client (`AdminClient`: a 10 s deadline, 3 s per replica, not
//! hedged; a follower answers NO_LEADER and the next replica is asked).
//! What the operator asks AllocSvrs (handoffs) and what it forges (adopts)
//! the world loop sends as plain messages; range moves are the mover's
//! (`mover`).

use crate::env::{trace, Env};
use crate::link::{Caller, StoreClient, Timing};
use crate::model::{Ev, LinkTimer, Msg, StoreFail, StoreMsg, StoreOk, StoreReq, StoreResp};
use crate::net::{Node, SEC};
use seqsvr_store_core::command::Reply;

/// The operator's store calls, one admin client per set.
#[derive(Debug, Default)]
pub(crate) struct Operator {
    links: Vec<StoreClient<StoreReq>>,
}

fn caller<'a>(env: &Env, set: usize, wrap: &'a dyn Fn(LinkTimer) -> Ev) -> Caller<'a> {
    Caller {
        node: Node::Operator,
        first: env.cfg.layout().replica(set, 0),
        life: 0,
        rate: 1.0,
        wrap,
    }
}

/// The admin client's timing (`AdminClient`, `SetsClient`).
pub(crate) const ADMIN: Timing = Timing {
    deadline: 10 * SEC,
    attempt: 3 * SEC,
    hedge: false,
};

impl Operator {
    fn link(&mut self, set: usize) -> &mut StoreClient<StoreReq> {
        if self.links.len() <= set {
            self.links.resize_with(set + 1, StoreClient::default);
        }
        &mut self.links[set]
    }

    /// Sends an admin call to `set`'s store group.
    pub(crate) fn call(&mut self, env: &mut Env, set: usize, req: StoreReq) {
        let wrap = move |t| Ev::Operator(set, t);
        let who = caller(env, set, &wrap);
        let done = self.link(set).start(env, &who, req.clone(), req, ADMIN);
        if let Some((req, resp)) = done {
            answered(env, &req, &resp);
        }
    }

    /// A timer of the admin client of `set`.
    pub(crate) fn timer(&mut self, env: &mut Env, set: usize, t: LinkTimer) {
        let wrap = move |t| Ev::Operator(set, t);
        let who = caller(env, set, &wrap);
        if let Some((req, resp)) = self.link(set).on_timer(env, &who, t) {
            answered(env, &req, &resp);
        }
    }

    /// A message for the operator: store answers (adopt answers to forged
    /// adopts are only traced). An answer comes from a replica of the set
    /// its call went to.
    pub(crate) fn msg(&mut self, env: &mut Env, from: Node, m: Msg) {
        match (from, m) {
            (Node::Replica(r), Msg::Store(StoreMsg::Resp { call, resp, .. })) => {
                let set = env.cfg.layout().set_of_replica(r);
                let wrap = move |t| Ev::Operator(set, t);
                let who = caller(env, set, &wrap);
                if let Some((req, resp)) = self.link(set).on_resp(env, &who, call, resp) {
                    answered(env, &req, &resp);
                }
            }
            (_, other) => trace!(env, "operator got {other:?}"),
        }
    }
}

/// An admin call ended: traced, and a repeated addition's outcome counted.
fn answered(env: &mut Env, req: &StoreReq, resp: &StoreResp) {
    trace!(env, "operator: {req:?} -> {resp:?}");
    if let StoreReq::Install { .. } = req {
        match resp {
            Err(StoreFail::Rejected(_)) => env.stats.additions_refused += 1,
            Ok(StoreOk::Written(Reply::Installed { newly, .. })) => {
                env.stats.additions_installed += u64::from(*newly)
            }
            _ => {}
        }
    }
}
