//! The operator (`seqctl`): admin calls to the store through the admin
//! client (`AdminClient`: a 10 s deadline, 3 s per replica, not hedged;
//! a follower answers NO_LEADER and the next replica is asked). What the
//! operator asks AllocSvrs (handoffs) and what it forges (adopts) the world
//! loop sends as plain messages.

use crate::env::{trace, Env};
use crate::link::{Caller, StoreClient, Timing};
use crate::model::{Ev, LinkTimer, Msg, StoreMsg, StoreReq};
use crate::net::{Node, SEC};

/// The operator's store calls.
#[derive(Debug, Default)]
pub(crate) struct Operator {
    link: StoreClient<StoreReq>,
}

fn caller(wrap: &dyn Fn(LinkTimer) -> Ev) -> Caller<'_> {
    Caller {
        node: Node::Operator,
        life: 0,
        rate: 1.0,
        wrap,
    }
}

const ADMIN: Timing = Timing {
    deadline: 10 * SEC,
    attempt: 3 * SEC,
    hedge: false,
};

impl Operator {
    /// Sends an admin call to the store.
    pub(crate) fn call(&mut self, env: &mut Env, req: StoreReq) {
        let wrap = Ev::Operator;
        let done = self
            .link
            .start(env, &caller(&wrap), req.clone(), req, ADMIN);
        if let Some((req, resp)) = done {
            trace!(env, "operator: {req:?} -> {resp:?}");
        }
    }

    /// A timer of the admin client.
    pub(crate) fn timer(&mut self, env: &mut Env, t: LinkTimer) {
        let wrap = Ev::Operator;
        if let Some((req, resp)) = self.link.on_timer(env, &caller(&wrap), t) {
            trace!(env, "operator: {req:?} -> {resp:?}");
        }
    }

    /// A message for the operator: store answers (adopt answers to forged
    /// adopts are only traced).
    pub(crate) fn msg(&mut self, env: &mut Env, m: Msg) {
        match m {
            Msg::Store(StoreMsg::Resp { call, resp, .. }) => {
                let wrap = Ev::Operator;
                if let Some((req, resp)) = self.link.on_resp(env, &caller(&wrap), call, resp) {
                    trace!(env, "operator: {req:?} -> {resp:?}");
                }
            }
            other => trace!(env, "operator got {other:?}"),
        }
    }
}
