//! Serving (`service.rs`): admitting a request (lease and fence checked
//! when it starts), the allocation a few microseconds later, waits on
//! exhausted sections, answers and refusals (`Shared::status`); the admin
//! plane's `Release` and `Refresh` of a range move; and the raiser's rounds
//! (`raiser.rs`), settled together.

use seqsvr_alloc::control::{Effect, Event};
use seqsvr_alloc::ownership::{admit, release_moved, settle_raise, NotAdmitted, RaiseOutcome};
use seqsvr_alloc::{AllocError, RaiseRequest, StoreErr};
use seqsvr_core::{Place, SectionId};
use seqsvr_store_core::command::{Rejection, Reply};

use crate::env::{trace, Env};
use crate::model::{
    ATimer, AdminMsg, Ask, ClientMsg, Msg, OpRef, Refusal, Slot, StoreFail, StoreOk, StoreReq,
    StoreResp, Work,
};
use crate::net::{Node, US};

use super::{reader, Allocs, Purpose, Round};

impl Allocs {
    /// A client request arrives: admitted now ([`admit`], as
    /// `Shared::admitted`), the numbers taken a little later (`service.rs`).
    ///
    /// The knobs `skip_lease_check` (every call) and
    /// `current_without_lease` (`Current` only) tell [`admit`] the lease is
    /// valid whatever it is.
    pub(super) fn admit(&mut self, env: &mut Env, p: Slot, op: OpRef, ask: Ask) {
        let proc_ = &self.procs[p];
        if !proc_.started {
            return self.refuse(env, p, op, Refusal::Unavailable);
        }
        let knobs = &env.cfg.knobs;
        let unchecked = knobs.skip_lease_check
            || (knobs.current_without_lease && matches!(ask, Ask::Current(_)));
        let stale_read = self.stale_read(env, p, &ask);
        let proc_ = &self.procs[p];
        match admit(unchecked || proc_.lease_valid(env.now), proc_.fenced) {
            Ok(()) => env.stats.stale_reads_admitted += stale_read as u64,
            Err(NotAdmitted::Fenced) => return self.refuse(env, p, op, Refusal::Fenced),
            Err(NotAdmitted::LeaseExpired) => {
                env.stats.lease_expired += 1;
                env.stats.stale_reads_refused += stale_read as u64;
                return self.refuse(env, p, op, Refusal::LeaseExpired);
            }
        }
        let spec = env.cfg.spec(proc_.set);
        let mut sections: Vec<SectionId> = ask
            .uids()
            .iter()
            .filter_map(|u| spec.section_of(*u))
            .collect();
        sections.dedup();
        for s in sections {
            self.check_exclusive(env, p, s);
        }
        if let Some(d) = self.procs[p].pause_on_admit.take() {
            self.pause(env, p, d);
        }
        let d = env.rng.range(2 * US, 40 * US);
        let work = Work {
            op,
            ask,
            out: Vec::new(),
            deadline: None,
        };
        self.after(env, p, d, ATimer::Serve(work));
    }

    /// Whether `ask` is the hazard of the fencing work's bug 5: a `Current`
    /// read at a process whose lease has lapsed (not fenced) that still
    /// serves the uid's section from memory at an epoch its store has
    /// moved past (or no longer serves there): answered, it would come from
    /// an old owner's memory.
    fn stale_read(&self, env: &Env, p: Slot, ask: &Ask) -> bool {
        let Ask::Current(uid) = ask else {
            return false;
        };
        let proc_ = &self.procs[p];
        let Some(alloc) = proc_.alloc.as_ref() else {
            return false;
        };
        if proc_.fenced || proc_.lease_valid(env.now) {
            return false;
        }
        let Some(s) = env.cfg.spec(proc_.set).section_of(*uid) else {
            return false;
        };
        let rec = &env.truth[proc_.set].sections[s as usize];
        alloc.is_serving(s) && rec.epoch != alloc.known_epoch(s)
    }

    /// Promise 3: when `p` admits a request for `s` that it serves, no
    /// other process may serve `s` at this instant.
    pub(super) fn check_exclusive(&self, env: &mut Env, p: Slot, s: SectionId) {
        if !self.procs[p]
            .alloc
            .as_ref()
            .is_some_and(|x| x.is_serving(s))
        {
            return;
        }
        for (q, other) in self.procs.iter().enumerate() {
            if q != p && other.serves(s, env.now) {
                let what = format!(
                    "p{p} ({}) admits a request for section {s} while p{q} ({}) also serves it (lease valid, section installed)",
                    self.procs[p].id, other.id
                );
                env.monitor.violate(env.now, 3, what);
            }
        }
    }

    /// The compare-and-swap part of a request (and its retries after a
    /// raise landed), or the read of `Current`.
    pub(super) fn serve(&mut self, env: &mut Env, p: Slot, mut work: Work) {
        let Some(alloc) = self.procs[p].alloc.as_ref() else {
            return;
        };
        let uids = match &work.ask {
            Ask::Current(uid) => {
                let result = match alloc.current(*uid) {
                    Ok(v) => Ok(vec![v]),
                    Err(AllocError::NotOwner { section }) => Err(Refusal::NotOwner(section)),
                    Err(AllocError::OutOfRange { .. }) => Err(Refusal::OutOfRange),
                    Err(e) => panic!("model bug: unexpected allocator error {e}"),
                };
                return match result {
                    Ok(v) => self.answer(env, p, work.op, v),
                    Err(why) => self.refuse(env, p, work.op, why),
                };
            }
            Ask::Next(uids) => uids.clone(),
        };
        let done = work.out.len();
        let res = alloc.next_batch(&uids[done..], &mut work.out);
        let new: Vec<(u64, u64)> = uids[done..]
            .iter()
            .zip(&work.out[done..])
            .map(|(u, v)| (*u, *v))
            .collect();
        for (uid, v) in new {
            self.handed_out(env, p, uid, v);
        }
        match res {
            Ok(()) => {
                let out = std::mem::take(&mut work.out);
                self.answer(env, p, work.op, out);
            }
            Err(AllocError::Exhausted { section }) => {
                let id = env.fresh_id();
                let left = match work.deadline {
                    None => {
                        let d = self.procs[p].real(env.cfg.wait);
                        work.deadline = Some(env.now + d);
                        d
                    }
                    Some(t) => t.saturating_sub(env.now),
                };
                self.after(env, p, left, ATimer::WaitDeadline(id));
                self.procs[p].waiting.insert(id, (section, work));
            }
            Err(AllocError::NotOwner { section }) => {
                self.refuse(env, p, work.op, Refusal::NotOwner(section))
            }
            Err(AllocError::OutOfRange { .. }) => self.refuse(env, p, work.op, Refusal::OutOfRange),
            Err(e) => panic!("model bug: unexpected allocator error {e}"),
        }
        self.raiser_kick(env, p);
    }

    pub(super) fn answer(&mut self, env: &mut Env, p: Slot, op: OpRef, out: Vec<u64>) {
        let m = ClientMsg::Resp {
            op,
            result: Ok(out),
            routes: None,
            version: self.procs[p].routes.version,
        };
        env.send(Node::Alloc(p), Node::Client(op.client), Msg::Client(m));
    }

    /// Wakes requests waiting on `s` (its ceiling or ownership changed).
    pub(super) fn wake(&mut self, env: &mut Env, p: Slot, s: SectionId) {
        let ids: Vec<u64> = (self.procs[p].waiting.iter())
            .filter(|(_, (ws, _))| *ws == s)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some((_, work)) = self.procs[p].waiting.remove(&id) {
                self.serve(env, p, work);
            }
        }
    }

    pub(super) fn handed_out(&mut self, env: &mut Env, p: Slot, uid: u64, v: u64) {
        env.stats.handed_out += 1;
        let set = self.procs[p].set;
        let s = env.cfg.spec(set).section_of(uid).expect("uid in set");
        let epoch = (self.procs[p].alloc.as_ref())
            .and_then(|x| x.section_state(s))
            .map_or(0, |st| st.epoch);
        let ceiling = env.truth[set].sections[s as usize].max_seq;
        env.monitor
            .on_handout(env.now, p, set, s, epoch, v, ceiling);
    }

    /// Answers a client with an error (and the route table, for the errors
    /// that carry one). A section this process does not serve is answered
    /// by where its last route table's placement says it stands
    /// (`Shared::status`): moved to another set, not served by this set,
    /// or (served here) owned by another AllocSvr.
    pub(super) fn refuse(&mut self, env: &mut Env, p: Slot, op: OpRef, why: Refusal) {
        let proc_ = &self.procs[p];
        let why = match why {
            Refusal::NotOwner(s) => match proc_.routes.placement.place_of(s) {
                Place::Moved { to } => Refusal::Moved(s, to),
                Place::Absent => Refusal::NotServed(s),
                Place::Serving => why,
            },
            why => why,
        };
        trace!(env, "p{p} refuses c{}'s call: {why:?}", op.client);
        let routes = match why {
            Refusal::NotOwner(_)
            | Refusal::LeaseExpired
            | Refusal::Fenced
            | Refusal::Moved(..)
            | Refusal::NotServed(_)
            | Refusal::OutOfRange => Some(proc_.routes.clone()),
            Refusal::Exhausted(_) | Refusal::Unavailable => None,
        };
        let m = ClientMsg::Resp {
            op,
            result: Err(why),
            routes,
            version: proc_.routes.version,
        };
        env.send(Node::Alloc(p), Node::Client(op.client), Msg::Client(m));
    }

    /// `AllocAdmin.Release` of sections `first..first+count`, frozen in
    /// the store for a move ([`release_moved`], as `Shared::release`):
    /// answered once they stop being served. Like the real admin plane it
    /// answers only once the process serves (after its first renewal), and
    /// whether or not it was fenced.
    pub(super) fn release(
        &mut self,
        env: &mut Env,
        p: Slot,
        from: crate::net::Node,
        id: u64,
        first: SectionId,
        epochs: &[u64],
    ) {
        let count = epochs.len() as u32;
        let proc_ = &self.procs[p];
        let result = match proc_.alloc.as_ref().filter(|_| proc_.started) {
            None => Err("unavailable: not serving yet".to_string()),
            Some(alloc)
                if count == 0
                    || first as u64 + count as u64 > alloc.spec().section_count() as u64 =>
            {
                Err(format!("unknown sections {first}+{count}"))
            }
            Some(alloc) => {
                let sections = (first..).zip(epochs.iter().copied());
                let released = if env.cfg.knobs.release_without_floor {
                    // Bug 7's old release: a plain drop, no floor.
                    (sections.map(|(s, _)| s))
                        .filter(|&s| alloc.drop_section(s))
                        .collect()
                } else {
                    release_moved(alloc, sections)
                };
                trace!(env, "p{p} releases {released:?} for a move");
                env.stats.released += released.len() as u64;
                for &s in &released {
                    self.wake(env, p, s);
                }
                Ok(self.confirmed(p))
            }
        };
        let m = Msg::Admin(AdminMsg::Answer { id, result });
        env.send(crate::net::Node::Alloc(p), from, m);
    }

    /// Who answers an admin call: this process's id and incarnation.
    fn confirmed(&self, p: Slot) -> seqsvr_core::mover::Confirmed {
        seqsvr_core::mover::Confirmed {
            alloc: self.procs[p].id.clone(),
            incarnation: self.procs[p].incarnation,
        }
    }

    /// `AllocAdmin.Refresh`: renew at once (`renew_now.notify_one()`).
    pub(super) fn refresh(&mut self, env: &mut Env, p: Slot, from: crate::net::Node, id: u64) {
        let proc_ = &mut self.procs[p];
        let result = if !proc_.started {
            Err("unavailable: not serving yet".to_string())
        } else {
            self.control(env, p, Event::RenewNow);
            Ok(self.confirmed(p))
        };
        let m = Msg::Admin(AdminMsg::Answer { id, result });
        env.send(crate::net::Node::Alloc(p), from, m);
    }

    /// Raises may have been queued: the control loop decides whether a
    /// round starts (`raiser.rs`).
    pub(super) fn raiser_kick(&mut self, env: &mut Env, p: Slot) {
        if self.procs[p].alloc.is_some() {
            self.control(env, p, Event::RaisesQueued);
        }
    }

    /// [`Effect::RaiseRound`]: sends the queued raises together; with none,
    /// the round is over at once.
    pub(super) fn raise_round(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &mut self.procs[p];
        let reqs = match proc_.alloc.as_ref() {
            Some(alloc) => alloc.take_raise_requests(),
            None => Vec::new(),
        };
        if reqs.is_empty() {
            return self.control(env, p, Event::RaiseRoundDone { sent: 0 });
        }
        proc_.round = Some(Round {
            sent: reqs.len(),
            outstanding: reqs.len(),
            answers: Vec::new(),
        });
        for mut r in reqs {
            let proc_ = &self.procs[p];
            if env.cfg.knobs.raise_unbounded {
                // Two steps above the highest number handed out.
                r.to += env.cfg.spec(proc_.set).step;
            }
            let req = StoreReq::Raise {
                alloc: proc_.id.clone(),
                incarnation: proc_.incarnation,
                section: r.section,
                epoch: r.epoch,
                to: r.to,
            };
            let t = reader(env.cfg.renew_every);
            self.call(env, p, req, Purpose::Raise(r), t);
        }
    }

    pub(super) fn raise_answered(
        &mut self,
        env: &mut Env,
        p: Slot,
        r: RaiseRequest,
        resp: StoreResp,
    ) {
        let proc_ = &mut self.procs[p];
        let round = proc_.round.as_mut().expect("a round is running");
        round.answers.push((r, resp));
        round.outstanding -= 1;
        if round.outstanding > 0 {
            return;
        }
        // Settle the whole round before another may start (the raiser's
        // loop only takes new requests after `run_once` returns).
        let answers = std::mem::take(&mut round.answers);
        let sent = round.sent;
        for (r, resp) in answers {
            let answer = self.store_answer(env, p, &r, &resp);
            let answered = Event::RaiseAnswered {
                section: r.section,
                epoch: r.epoch,
                to: r.to,
                answer,
            };
            self.control(env, p, answered);
        }
        self.procs[p].round = None;
        self.control(env, p, Event::RaiseRoundDone { sent });
    }

    /// The store's answer to a raise, mapped as the store client maps it
    /// (`StoreErr::from`), with the model's own checks of it.
    fn store_answer(
        &mut self,
        env: &mut Env,
        p: Slot,
        r: &RaiseRequest,
        resp: &StoreResp,
    ) -> Result<u64, StoreErr> {
        let answer = match resp {
            Ok(StoreOk::Written(Reply::Raised { max_seq })) => Ok(*max_seq),
            Ok(other) => {
                let what = format!("p{p}: raise {r:?} answered {other:?}");
                env.monitor.violate(env.now, 0, what);
                return Err(StoreErr::Unavailable("not an answer to a raise".into()));
            }
            Err(e) => Err(StoreErr::from(e.to_api())),
        };
        if let RaiseOutcome::Retry { .. } = settle_raise(r.to, &answer) {
            // A section frozen for a move is retried until a route read
            // or renewal drops it.
            let frozen = matches!(resp, Err(StoreFail::Rejected(Rejection::NotServing { .. })));
            env.stats.raises_not_served += frozen as u64;
            // Sanity of the model: only a lost reply or no leader (or a
            // frozen section) is expected here, never a refusal.
            if !frozen && resp.as_ref().is_err_and(|e| !e.retryable()) {
                let what = format!("p{p}: raise {r:?} refused: {resp:?}");
                env.monitor.violate(env.now, 0, what);
            }
        }
        answer
    }

    /// A raise's answer as the control loop settled it
    /// ([`Effect::ApplyRaise`], [`Effect::DropRaised`],
    /// [`Effect::RaiseFailed`]), on the real allocator.
    pub(super) fn settled_raise(&mut self, env: &mut Env, p: Slot, effect: Effect) {
        let alloc = self.procs[p].allocator();
        match effect {
            Effect::ApplyRaise {
                section,
                epoch,
                landed,
            } if alloc.apply_raise(section, epoch, landed) => self.wake(env, p, section),
            Effect::DropRaised { section, epoch }
                if alloc.drop_section_if_epoch(section, epoch) =>
            {
                trace!(
                    env,
                    "p{p} raise of {section} at epoch {epoch} refused for good: section dropped"
                );
                self.wake(env, p, section);
            }
            _ => {}
        }
    }
}
