//! The store API on the leader: the arbiter's lock (a fair queue), what a
//! call becomes (`decide`: registration, operator assign, lease change),
//! renewals (`grant_renewal`) — each decided by the store's own
//! `seqsvr_store_core::decision` — the arbiter loop, committed entries
//! answered, and what a deposed leader fails.

use seqsvr_store_core::command::{Command, Outcome, Rejection, Reply};
use seqsvr_store_core::decision::{self, RenewalRefused};

use crate::env::{trace, Env};
use crate::model::{
    admin_addr, client_addr, peer_addr, Renewal, StoreFail, StoreOk, StoreReq, StoreResp,
};

use super::{Store, Waiter, Want};

impl Store {
    /// Takes the arbiter's lock for `w`, or queues it. Renewals with the
    /// `renew_during_moves` knob do not wait for it.
    pub(super) fn want(&mut self, env: &mut Env, r: usize, w: Want) {
        let rep = &mut self.reps[r];
        let bypass = matches!(w, Want::Renew(..)) && env.cfg.knobs.renew_during_moves;
        if bypass || (!rep.locked && rep.lock_queue.is_empty()) {
            return self.run_locked(env, r, w);
        }
        if matches!(w, Want::Arbiter) && rep.lock_queue.iter().any(|w| matches!(w, Want::Arbiter)) {
            return;
        }
        rep.lock_queue.push_back(w);
    }

    /// Releases the arbiter's lock and lets the next waiters run.
    pub(super) fn unlock(&mut self, env: &mut Env, r: usize) {
        self.reps[r].locked = false;
        while !self.reps[r].locked {
            let Some(w) = self.reps[r].lock_queue.pop_front() else {
                return;
            };
            self.run_locked(env, r, w);
        }
    }

    /// Runs `w` holding the lock; it stays held while a write is in flight.
    pub(super) fn run_locked(&mut self, env: &mut Env, r: usize, w: Want) {
        if !self.raft.nodes[r].leading {
            match w {
                Want::Renew(_, p) | Want::Write(p) => return self.not_leader(env, r, p),
                Want::Arbiter => {}
            }
        }
        match w {
            Want::Renew(term, p) => {
                let resp = self.grant_renewal(env, r, term, &p.req);
                self.reply(env, r, &p, resp);
            }
            Want::Write(p) => match self.decide(env, r, &p.req) {
                Ok(cmd) => {
                    self.reps[r].locked = true;
                    self.propose(env, r, cmd, Waiter::Locked(p));
                }
                Err(e) => self.reply(env, r, &p, Err(e)),
            },
            Want::Arbiter => self.arbiter_tick(env, r),
        }
    }

    /// The checks a registration, operator assign or lease change makes
    /// under the lock, and the command it then writes.
    pub(super) fn decide(
        &mut self,
        env: &mut Env,
        r: usize,
        req: &StoreReq,
    ) -> Result<Command, StoreFail> {
        let now = env.store_instant();
        let judged = self.judged(env, r);
        let st = &self.raft.nodes[r].state;
        let arbiter = &self.reps[r].arbiter;
        match req {
            StoreReq::Register {
                alloc,
                slot,
                incarnation,
            } => {
                let view = arbiter.view(&judged, now);
                let replaces = match decision::replaced(st, &view, alloc, *incarnation) {
                    // `admit_twins`: the live incarnation is replaced anyway.
                    Err(Rejection::Twin { live, .. }) if env.cfg.knobs.admit_twins => live,
                    Err(e) => {
                        if matches!(e, Rejection::Twin { .. }) {
                            env.stats.twins_refused += 1;
                        }
                        return Err(StoreFail::Rejected(e));
                    }
                    Ok(replaces) => replaces,
                };
                Ok(Command::RegisterAlloc {
                    alloc: alloc.clone(),
                    addr: client_addr(*slot),
                    peer_addr: peer_addr(*slot),
                    admin_addr: admin_addr(*slot),
                    incarnation: *incarnation,
                    replaces,
                })
            }
            StoreReq::Assign {
                alloc,
                first,
                expected,
            } => {
                let view = arbiter.view(&judged, now);
                decision::check_assign(st, &view, alloc, *first, expected.len())
                    .map_err(StoreFail::Rejected)?;
                Ok(Command::Assign {
                    alloc: alloc.clone(),
                    first: *first,
                    expected: expected.clone(),
                })
            }
            StoreReq::SetLease(terms) => {
                arbiter
                    .lease_change_allowed(&st.lease, now)
                    .map_err(|_| StoreFail::NoLeader)?;
                Ok(Command::SetLease(*terms))
            }
            // `freeze` takes the lock only so that no renewal records a
            // grant or reads its sections half way through.
            StoreReq::Freeze { first, count, call } => Ok(Command::Freeze {
                first: *first,
                count: *count,
                call: *call,
            }),
            StoreReq::Ids(claim) => Ok(self.decide_claim(env, r, claim)),
            other => unreachable!("{other:?} is not decided under the lock"),
        }
    }

    /// A worker-id claim under the lock (`service/ids.rs`): which holdings
    /// it may reclaim (`decision::worker_claim`: those whose holder's lease
    /// the arbiter sees certainly expired), and the tick of the claimant's
    /// clock. The `id_reclaim_early` knob names every holding.
    fn decide_claim(&self, env: &Env, r: usize, claim: &crate::ids::IdReq) -> Command {
        let crate::ids::IdReq::Claim {
            ns,
            alloc,
            incarnation,
            now_ms,
        } = claim
        else {
            unreachable!("a raise or release is not decided under the lock");
        };
        let st = &self.raft.nodes[r].state;
        let view = self.reps[r]
            .arbiter
            .view(&self.judged(env, r), env.store_instant());
        let (now, mut reclaim) = decision::worker_claim(st, &view, ns, *now_ms);
        if env.cfg.knobs.id_reclaim_early {
            let held = st.ids.spaces.get(ns).into_iter().flat_map(|s| &s.workers);
            reclaim = (held.filter(|(_, r)| r.holder.is_some()))
                .map(|(&w, r)| (w, r.epoch))
                .collect();
        }
        Command::ClaimWorker {
            ns: ns.clone(),
            alloc: alloc.clone(),
            incarnation: *incarnation,
            now,
            reclaim,
        }
    }

    /// A renewal past its barrier, under the lock (`service/peer.rs`).
    pub(super) fn grant_renewal(
        &mut self,
        env: &mut Env,
        l: usize,
        term: u64,
        req: &StoreReq,
    ) -> StoreResp {
        let StoreReq::Renew {
            alloc,
            incarnation,
            known_version,
        } = req
        else {
            unreachable!("a renewal");
        };
        let now = env.store_instant();
        let st = &self.raft.nodes[l].state;
        // `admit_twins`: any incarnation renews as the registered one.
        let renewing = match st.allocs.get(alloc) {
            Some(rec) if env.cfg.knobs.admit_twins => rec.incarnation,
            _ => *incarnation,
        };
        let arbiter = &self.reps[l].arbiter;
        let g = decision::renewal(st, arbiter, alloc, renewing, term, now, *known_version)
            .map_err(|e| match e {
                RenewalRefused::Rejected(e) => StoreFail::Rejected(e),
                RenewalRefused::LeadershipChanged => StoreFail::NoLeader,
            })?;
        let unchanged = g.unchanged;
        let sections = if unchanged {
            Vec::new()
        } else {
            st.owned_by(alloc).collect()
        };
        env.stats.renewals += 1;
        trace!(
            env,
            "{} grants {alloc} ({incarnation:x}) a lease (term {term}), sections {sections:?}{}",
            self.raft.node(l),
            if unchanged { " (unchanged)" } else { "" }
        );
        Ok(StoreOk::Renewed(Renewal {
            lease_ms: g.terms.lease_ms,
            sections,
            unchanged,
            sections_version: g.record.sections_version,
            route_version: st.route_version,
        }))
    }

    /// The arbiter loop's tick, holding the lock (`node/mod.rs`, `arbitrate`).
    pub(super) fn arbiter_tick(&mut self, env: &mut Env, r: usize) {
        let now = env.store_instant();
        let node = &self.raft.nodes[r];
        let leading = node.leading.then_some(node.term);
        self.reps[r].arbiter.observe(leading, now);
        let moves = self.reps[r].arbiter.plan(&self.judged(env, r), now);
        if moves.is_empty() {
            return;
        }
        trace!(env, "{} arbiter plans {moves:?}", self.raft.node(r));
        self.reps[r].locked = true;
        self.reps[r].moves = moves;
        self.next_move(env, r);
    }

    /// Proposes the arbiter's next move, or ends its tick.
    pub(super) fn next_move(&mut self, env: &mut Env, r: usize) {
        let rep = &mut self.reps[r];
        if rep.moves.is_empty() || !self.raft.nodes[r].leading {
            rep.moves.clear();
            return self.unlock(env, r);
        }
        let cmd = rep.moves.remove(0);
        self.propose(env, r, cmd, Waiter::Arbiter);
    }

    pub(super) fn committed(&mut self, env: &mut Env, l: usize, id: u64, outcome: Option<Outcome>) {
        let Some(w) = self.reps[l].waiters.remove(&id) else {
            return;
        };
        let outcome = outcome.expect("a waited-for entry has a command");
        match w {
            Waiter::Call(p) => {
                let resp = self.answer(l, &p.req, outcome, env.store_instant());
                self.reply(env, l, &p, resp);
            }
            Waiter::Locked(p) => {
                if let (StoreReq::SetLease(_), Ok(_)) = (&p.req, &outcome) {
                    self.reps[l].arbiter.lease_changed(env.store_instant());
                }
                let resp = self.answer(l, &p.req, outcome, env.store_instant());
                self.reply(env, l, &p, resp);
                self.unlock(env, l);
            }
            Waiter::Answered => {}
            Waiter::Arbiter => {
                if outcome.is_err() {
                    trace!(
                        env,
                        "{} arbiter move refused: {outcome:?}",
                        self.raft.node(l)
                    );
                    self.reps[l].moves.clear();
                }
                self.next_move(env, l);
            }
        }
    }

    /// The answer to a committed write.
    pub(super) fn answer(
        &self,
        l: usize,
        req: &StoreReq,
        outcome: Outcome,
        now: std::time::Instant,
    ) -> StoreResp {
        match (req, outcome) {
            (StoreReq::Handoff { to, .. }, Ok(Reply::HandedOff { grant, .. })) => {
                let st = &self.raft.nodes[l].state;
                let to_addr = st.allocs.get(to).map(|a| a.peer_addr.clone());
                Ok(StoreOk::HandedOff {
                    grant,
                    to_addr: to_addr.unwrap_or_default(),
                })
            }
            (
                StoreReq::Freeze { .. },
                Ok(Reply::Frozen {
                    finals,
                    epochs,
                    newly,
                    ..
                }),
            ) => {
                let st = &self.raft.nodes[l].state;
                Ok(StoreOk::Frozen {
                    finals,
                    epochs,
                    newly,
                    lease_expiry_ms: st.lease.office_wait_ms(),
                    holders: self.reps[l].arbiter.holders(st, now),
                })
            }
            (StoreReq::ChangeDirectory(_), Ok(Reply::Directory { version, changed })) => {
                Ok(StoreOk::Directory {
                    version,
                    changed,
                    directory: self.raft.nodes[l].state.directory.clone(),
                })
            }
            (_, Ok(reply)) => Ok(StoreOk::Written(reply)),
            (_, Err(rej)) => Err(StoreFail::Rejected(rej)),
        }
    }

    pub(super) fn stepped_down(&mut self, env: &mut Env, r: usize) {
        let rep = &mut self.reps[r];
        rep.moves.clear();
        rep.locked = false;
        let waiters = std::mem::take(&mut rep.waiters);
        let barriers = std::mem::take(&mut rep.barriers);
        let queued = std::mem::take(&mut rep.lock_queue);
        let up = self.raft.nodes[r].up;
        if !up {
            return;
        }
        for w in waiters.into_values() {
            if let Waiter::Call(p) | Waiter::Locked(p) = w {
                self.not_leader(env, r, p);
            }
        }
        for b in barriers.into_values() {
            self.not_leader(env, r, b.pending);
        }
        for w in queued {
            if let Want::Renew(_, p) | Want::Write(p) = w {
                self.not_leader(env, r, p);
            }
        }
    }
}
