//! Routing a call (`service/mod.rs`): expired waits, forwarding to the
//! leader or parking until one is known, the leader's handling of a call
//! (proposal, or a read behind a barrier), and barriers confirming
//! leadership with a quorum.

use std::collections::BTreeSet;

use seqsvr_core::SectionId;
use seqsvr_store_api::SectionInfo;
use seqsvr_store_core::command::{Command, Rejection};
use seqsvr_store_core::state::SetState;

use crate::env::Env;
use crate::model::{
    AllocEntry, Msg, Pending, RouteView, StoreFail, StoreMsg, StoreOk, StoreReq, StoreResp,
};

use super::{Barrier, Store, Waiter, Want, BARRIER_WAIT, FORWARD_TIMEOUT, LEADER_WAIT};

impl Store {
    pub(super) fn expire_waits(&mut self, env: &mut Env, r: usize) {
        let now = env.now;
        let rep = &mut self.reps[r];
        let (gone, kept): (Vec<_>, Vec<_>) = rep.parked.drain(..).partition(|(d, _)| *d <= now);
        rep.parked = kept;
        let late: Vec<u64> = (rep.barriers.iter())
            .filter(|(_, b)| b.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        let late: Vec<Barrier> = late
            .iter()
            .filter_map(|id| rep.barriers.remove(id))
            .collect();
        let unanswered: Vec<u64> = (rep.forwards.iter())
            .filter(|(_, (d, _))| *d <= now)
            .map(|(id, _)| *id)
            .collect();
        let unanswered: Vec<Pending> = (unanswered.iter())
            .filter_map(|id| rep.forwards.remove(id).map(|(_, p)| p))
            .collect();
        for (_, p) in gone {
            self.reply(env, r, &p, Err(StoreFail::NoLeader));
        }
        for b in late {
            self.reply(env, r, &b.pending, Err(StoreFail::NoLeader));
        }
        for p in unanswered {
            self.reply(env, r, &p, Err(StoreFail::NoLeader));
        }
    }

    /// A request reaches replica `r`.
    pub(super) fn request(&mut self, env: &mut Env, r: usize, p: Pending) {
        if let StoreReq::Status = p.req {
            let resp = Ok(self.status(r));
            return self.reply(env, r, &p, resp);
        }
        let read = matches!(
            p.req,
            StoreReq::Routes | StoreReq::Read { .. } | StoreReq::Sections { .. }
        );
        if read && env.cfg.knobs.reads_without_barrier {
            return self.read_now(env, r, p);
        }
        if self.raft.nodes[r].leading {
            self.lead(env, r, p);
        } else if p.forwarded || p.req.admin() {
            self.reply(env, r, &p, Err(StoreFail::NoLeader));
        } else {
            self.park_or_forward(env, r, p);
        }
    }

    /// `route()` after the local attempt said "not the leader".
    pub(super) fn not_leader(&mut self, env: &mut Env, r: usize, p: Pending) {
        if p.forwarded || p.req.admin() {
            self.reply(env, r, &p, Err(StoreFail::NoLeader));
        } else {
            self.park_or_forward(env, r, p);
        }
    }

    pub(super) fn park_or_forward(&mut self, env: &mut Env, r: usize, p: Pending) {
        match self.raft.nodes[r].leader {
            Some(l) if l == r && self.raft.nodes[r].leading => self.lead(env, r, p),
            Some(l) if l != r => {
                let fid = env.fresh_id();
                let fwd = Pending {
                    forwarded: true,
                    via: Some((r, fid)),
                    ..p.clone()
                };
                self.reps[r]
                    .forwards
                    .insert(fid, (env.now + FORWARD_TIMEOUT, p));
                env.send(
                    self.raft.node(r),
                    self.raft.node(l),
                    Msg::Store(StoreMsg::Req(fwd)),
                );
            }
            _ => {
                let until = env.now + LEADER_WAIT;
                self.reps[r].parked.push((until, p));
            }
        }
    }

    pub(super) fn unpark(&mut self, env: &mut Env, r: usize) {
        let parked = std::mem::take(&mut self.reps[r].parked);
        for (_, p) in parked {
            self.park_or_forward(env, r, p);
        }
    }

    /// Handles a call at a replica that believes it leads.
    pub(super) fn lead(&mut self, env: &mut Env, r: usize, p: Pending) {
        let cmd = match &p.req {
            StoreReq::Renew { .. } if env.cfg.knobs.unsafe_renewals => {
                let term = self.raft.nodes[r].term;
                return self.want(env, r, Want::Renew(term, p));
            }
            StoreReq::Routes | StoreReq::Read { .. } | StoreReq::Sections { .. }
                if env.cfg.knobs.reads_without_barrier =>
            {
                return self.read_now(env, r, p);
            }
            StoreReq::Renew { .. }
            | StoreReq::Routes
            | StoreReq::Read { .. }
            | StoreReq::Sections { .. } => return self.start_barrier(env, r, p),
            StoreReq::Register { .. }
            | StoreReq::Assign { .. }
            | StoreReq::SetLease(_)
            | StoreReq::Freeze { .. } => return self.want(env, r, Want::Write(p)),
            // A claim is decided under the arbiter's lock (which holdings
            // it may reclaim); a raise or release is written as it is.
            StoreReq::Ids(req) => match req.command() {
                Some(cmd) => cmd,
                None => return self.want(env, r, Want::Write(p)),
            },
            StoreReq::Status => unreachable!("answered by any replica"),
            StoreReq::Counters(c) => match c.command() {
                Some(cmd) => cmd,
                None => return self.start_barrier(env, r, p),
            },
            direct => direct_command(direct),
        };
        if env.cfg.knobs.ack_before_commit && matches!(cmd, Command::Raise { .. }) {
            // Answered from the leader's applied state with the raise on
            // top, before any other replica holds it.
            let mut state = self.raft.nodes[r].state.clone();
            let outcome = crate::perturb::apply(&mut state, &cmd, &env.cfg.knobs);
            let resp = self.answer(r, &p.req, outcome, env.store_instant());
            self.reply(env, r, &p, resp);
            return self.propose(env, r, cmd, Waiter::Answered);
        }
        self.propose(env, r, cmd, Waiter::Call(p));
    }

    pub(super) fn propose(&mut self, env: &mut Env, r: usize, cmd: Command, w: Waiter) {
        let id = self.raft.append(env, r, Some(cmd));
        self.reps[r].waiters.insert(id, w);
        self.raft.replicate(env, r, None);
    }

    pub(super) fn start_barrier(&mut self, env: &mut Env, r: usize, p: Pending) {
        let id = env.fresh_id();
        let single = self.raft.majority() == 1;
        let node = &self.raft.nodes[r];
        let b = Barrier {
            term: node.term,
            need: node.len(),
            acks: BTreeSet::new(),
            confirmed: single,
            deadline: env.now + BARRIER_WAIT,
            pending: p,
        };
        self.reps[r].barriers.insert(id, b);
        self.raft.replicate(env, r, Some(id));
    }

    pub(super) fn finish_barriers(&mut self, env: &mut Env, l: usize) {
        let applied = self.raft.nodes[l].applied;
        let done: Vec<u64> = (self.reps[l].barriers.iter())
            .filter(|(_, b)| b.confirmed && applied >= b.need)
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            let Some(b) = self.reps[l].barriers.remove(&id) else {
                continue;
            };
            match &b.pending.req {
                StoreReq::Renew { .. } => self.want(env, l, Want::Renew(b.term, b.pending)),
                _ => self.read_now(env, l, b.pending),
            }
        }
    }

    /// Answers a route or section read at replica `r` from its applied
    /// state (past the barrier, or at once with `reads_without_barrier`).
    pub(super) fn read_now(&mut self, env: &mut Env, r: usize, p: Pending) {
        let st = &self.raft.nodes[r].state;
        let resp = match &p.req {
            StoreReq::Routes => Ok(StoreOk::Routes(RouteView::of(st))),
            StoreReq::Read { section } => read_section(st, *section),
            StoreReq::Sections { first, count } => (*first..first.saturating_add(*count))
                .map(|s| match read_section(st, s) {
                    Ok(StoreOk::Section(info)) => Ok(info),
                    Err(e) => Err(e),
                    Ok(other) => unreachable!("{other:?}"),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(StoreOk::Sections),
            StoreReq::Counters(c) => {
                let (counters, more) = c.read(st);
                Ok(StoreOk::Counters(counters, more))
            }
            other => unreachable!("{other:?} is not a read"),
        };
        self.reply(env, r, &p, resp);
    }
}

impl Store {
    /// `Status` at replica `r` (`status_now`): whether it believes it
    /// leads, and if so the AllocSvrs its applied state registers.
    fn status(&self, r: usize) -> StoreOk {
        let node = &self.raft.nodes[r];
        let allocs = if node.leading {
            (node.state.allocs.iter())
                .map(|(id, rec)| AllocEntry {
                    id: id.clone(),
                    admin_addr: rec.admin_addr.clone(),
                    fenced: rec.fenced,
                })
                .collect()
        } else {
            Vec::new()
        };
        StoreOk::Status {
            leading: node.leading,
            allocs,
        }
    }
}

/// The command a write the store makes as asked (no barrier, no
/// decision of the arbiter's) is written as.
fn direct_command(req: &StoreReq) -> Command {
    match req {
        StoreReq::Install {
            first,
            floors,
            call,
        } => Command::Install {
            first: *first,
            floors: floors.clone(),
            call: *call,
        },
        StoreReq::Fence { alloc, incarnation } => Command::FenceAlloc {
            alloc: alloc.clone(),
            incarnation: *incarnation,
        },
        StoreReq::ChangeDirectory(c) => Command::Directory(c.clone()),
        StoreReq::CopyDirectory(d) => Command::CopyDirectory(d.clone()),
        StoreReq::TakeOver {
            alloc,
            incarnation,
            first,
            known,
        } => Command::TakeOver {
            alloc: alloc.clone(),
            incarnation: *incarnation,
            first: *first,
            known: known.clone(),
        },
        StoreReq::Raise {
            alloc,
            incarnation,
            section,
            epoch,
            to,
        } => Command::Raise {
            alloc: alloc.clone(),
            incarnation: *incarnation,
            section: *section,
            epoch: *epoch,
            to: *to,
        },
        StoreReq::Handoff {
            from,
            incarnation,
            to,
            section,
            epoch,
        } => Command::Handoff {
            from: from.clone(),
            incarnation: *incarnation,
            to: to.clone(),
            section: *section,
            epoch: *epoch,
        },
        other => unreachable!("{other:?} is not written as asked"),
    }
}

/// A section's record as `ReadSections` reports it.
fn read_section(st: &SetState, section: SectionId) -> StoreResp {
    let Some(rec) = st.sections.get(section as usize) else {
        return Err(StoreFail::Rejected(Rejection::UnknownSection {
            section,
            count: st.sections.len() as u32,
        }));
    };
    Ok(StoreOk::Section(SectionInfo {
        section,
        record: rec.clone(),
    }))
}
