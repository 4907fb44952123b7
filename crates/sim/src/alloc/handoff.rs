//! Handoffs (`handoff.rs`): the releasing side's moves (mark releasing,
//! the store's conditional `Handoff`, the adopt, the read-back after a
//! failure) and the receiving side's adopts (read, decide, install).

use seqsvr_alloc::control::{AdoptCheck, Effect, Event};
use seqsvr_alloc::handoff::{
    ADOPT_CONNECT, ADOPT_READ_DEADLINE, ADOPT_TIMEOUT, CHECK_DEADLINE, HANDOFF_DEADLINE,
    STORE_ATTEMPT,
};
use seqsvr_alloc::ownership::{AdoptNamed, AdoptRefusal, AfterHandoff, Target};

use crate::env::{trace, Env};
use crate::faults::AdoptFate;
use crate::link::Timing;
use crate::model::{slot_of_addr, ATimer, Msg, PeerMsg, Slot, StoreOk, StoreReq, StoreResp};
use crate::net::Node;

use super::{nanos, AdoptJob, Allocs, Move, Purpose};

impl Allocs {
    /// Starts job `job`'s next move (`handoff::move_section`), releasing
    /// its section first; ends the job when none is left.
    pub(super) fn next_move(&mut self, env: &mut Env, p: Slot, job: u64) {
        loop {
            let proc_ = &mut self.procs[p];
            let Some(j) = proc_.jobs.get_mut(&job) else {
                return;
            };
            let Some((section, to)) = j.moves.pop_front() else {
                proc_.jobs.remove(&job);
                return;
            };
            let Some(alloc) = proc_.alloc.as_ref() else {
                continue;
            };
            // `release`: the checks, then the drop and the releasing mark.
            // The target check (the node's read of the store leader's
            // list) is not modelled: the moves name AllocSvrs of the set,
            // and a handoff the store refuses anyway is step 5's case.
            let released = match proc_.control.release(alloc, section, &to, &Target::Ready) {
                Ok((released, _handoff)) => released,
                Err(e) => {
                    trace!(
                        env,
                        "p{p} handoff of section {section} to {to} refused: {e}"
                    );
                    continue;
                }
            };
            let j = proc_.jobs.get_mut(&job).expect("the job");
            j.moving = Some(Move {
                section,
                to: to.clone(),
                adopt: None,
            });
            trace!(
                env,
                "p{p} releases section {section} at epoch {} for {to}",
                released.epoch
            );
            let req = StoreReq::Handoff {
                from: proc_.id.clone(),
                incarnation: proc_.incarnation,
                to,
                section,
                epoch: released.epoch,
            };
            self.wake(env, p, section);
            let t = Timing {
                deadline: nanos(HANDOFF_DEADLINE),
                attempt: nanos(STORE_ATTEMPT),
                hedge: true,
            };
            return self.call(env, p, req, Purpose::Handoff { job }, t);
        }
    }

    /// The store answered a move's handoff: [`Event::HandoffAnswered`];
    /// the control loop says to tell the new owner or to read it back.
    pub(super) fn handed_off(&mut self, env: &mut Env, p: Slot, job: u64, resp: StoreResp) {
        let proc_ = &mut self.procs[p];
        let now = proc_.clock(env.now);
        let Some(j) = proc_.jobs.get_mut(&job) else {
            return;
        };
        let fate = j.fate;
        let m = j.moving.as_mut().expect("a move");
        let answer = match &resp {
            Ok(StoreOk::HandedOff { grant, to_addr }) => Ok((grant.epoch, to_addr.clone())),
            other => Err(format!("{other:?}")),
        };
        let section = m.section;
        trace!(
            env,
            "p{p} handoff of section {section} to {}: {resp:?}",
            m.to
        );
        let next = proc_
            .control
            .on(now, Event::HandoffAnswered { section, answer });
        for effect in next {
            match effect {
                Effect::Adopt { epoch, addr, .. } => {
                    let Ok(StoreOk::HandedOff { grant, .. }) = &resp else {
                        unreachable!("an adopt follows a handoff that moved the section");
                    };
                    debug_assert_eq!(grant.epoch, epoch);
                    self.send_adopt(env, p, job, fate, *grant, &addr);
                }
                Effect::ReadBack { section } => {
                    // Failed or unknown: read it back (`settle`).
                    let req = StoreReq::Read { section };
                    let purpose = Purpose::Check { job };
                    let t = Timing {
                        deadline: nanos(CHECK_DEADLINE),
                        attempt: nanos(STORE_ATTEMPT),
                        hedge: true,
                    };
                    self.call(env, p, req, purpose, t);
                }
                other => trace!(env, "p{p} after a handoff: {other:?}"),
            }
        }
    }

    /// [`Effect::Adopt`]: tells the new owner at `addr` (`tell_new_owner`),
    /// as the network's `fate` for this job has it.
    fn send_adopt(
        &mut self,
        env: &mut Env,
        p: Slot,
        job: u64,
        fate: AdoptFate,
        grant: seqsvr_core::Grant,
        addr: &str,
    ) {
        let id = env.fresh_id();
        let proc_ = &mut self.procs[p];
        if let Some(m) = (proc_.jobs.get_mut(&job)).and_then(|j| j.moving.as_mut()) {
            m.adopt = Some(id);
        }
        let msg = || Msg::Peer(PeerMsg::Adopt { id, grant });
        if let Some(to) = slot_of_addr(addr) {
            let (me, them) = (Node::Alloc(p), Node::Alloc(to));
            match fate {
                AdoptFate::Normal => env.send(me, them, msg()),
                AdoptFate::Lost => {}
                AdoptFate::Delayed(d) => env.send_later(d, me, them, msg()),
                AdoptFate::Duplicated(d) => {
                    env.send(me, them, msg());
                    env.send_later(d, me, them, msg());
                }
            }
        }
        let d = self.procs[p].real(nanos(ADOPT_CONNECT + ADOPT_TIMEOUT));
        self.after(env, p, d, ATimer::AdoptTimeout(id));
    }

    /// The read-back after a failed handoff: [`Event::HandoffChecked`]
    /// (`settle`). The control loop never serves the section again at the
    /// released epoch: it stays dropped, the mark goes, and an early
    /// renewal's take-over claims it at a new epoch if it is still ours,
    /// fencing any late copy of the handoff.
    pub(super) fn checked(&mut self, env: &mut Env, p: Slot, job: u64, resp: StoreResp) {
        let proc_ = &mut self.procs[p];
        let Some(m) = proc_.jobs.get_mut(&job).and_then(|j| j.moving.take()) else {
            return;
        };
        let read = match resp {
            Ok(StoreOk::Section(info)) => Some(info),
            _ => None,
        };
        let now = proc_.clock(env.now);
        let section = m.section;
        let effects = proc_
            .control
            .on(now, Event::HandoffChecked { section, read });
        for e in &effects {
            if let Effect::LeftDropped { after, .. } = e {
                let what = match after {
                    Some(AfterHandoff::Reclaim) => {
                        env.stats.reclaimed += 1;
                        "still ours at the released epoch: left dropped for a take-over"
                    }
                    Some(AfterHandoff::LeaveDropped { .. }) => "moved on: left dropped",
                    None => "not checked: left dropped",
                };
                trace!(env, "p{p} section {section}: {what}");
            }
        }
        self.perform(env, p, effects.into(), None);
        self.wake(env, p, section);
        self.raiser_kick(env, p);
        self.next_move(env, p, job);
    }

    /// The new owner answered the adopt `id` (or did not in time): its
    /// move is over.
    pub(super) fn adopt_answered(
        &mut self,
        env: &mut Env,
        p: Slot,
        id: u64,
        result: Result<u32, String>,
    ) {
        let proc_ = &mut self.procs[p];
        let job = (proc_.jobs.iter())
            .find(|(_, j)| j.moving.as_ref().is_some_and(|m| m.adopt == Some(id)))
            .map(|(job, _)| *job);
        let Some(job) = job else {
            return;
        };
        let m = (proc_.jobs.get_mut(&job))
            .and_then(|j| j.moving.take())
            .expect("a move");
        trace!(
            env,
            "p{p} adopt of section {} by {}: {result:?}",
            m.section,
            m.to
        );
        self.next_move(env, p, job);
    }

    /// An adopt arrives (`handoff::adopt`): [`Event::AdoptAsked`]; the
    /// control loop refuses it, answers a repeat, or asks for the store
    /// read ([`Effect::ReadAdopt`]; the declarations of names are not
    /// modelled).
    pub(super) fn adopt(
        &mut self,
        env: &mut Env,
        p: Slot,
        from: Node,
        id: u64,
        grant: seqsvr_core::Grant,
    ) {
        let proc_ = &mut self.procs[p];
        let s = grant.section;
        if !proc_.started {
            return self.adopt_reply(env, p, from, id, Err("unavailable".into()));
        }
        let named = vec![AdoptNamed::of(proc_.allocator(), s, grant.epoch)];
        let clock = proc_.clock(env.now);
        let asked = proc_.control.on(clock, Event::AdoptAsked { named });
        let lapses_before = match asked.into_iter().next() {
            Some(Effect::ReadAdopt { lapses_before, .. }) => lapses_before,
            Some(Effect::AdoptDenied(e)) => {
                return self.adopt_reply(env, p, from, id, Err(e.to_string()));
            }
            // An empty install: installed here already (a repeat).
            _ => return self.adopt_reply(env, p, from, id, Ok(0)),
        };
        let alloc = proc_.allocator();
        if env.cfg.knobs.adopt_unchecked {
            let result = alloc
                .install(&[grant])
                .map(|n| n as u32)
                .map_err(|e| e.to_string());
            trace!(
                env,
                "p{p} installs an adopt unchecked: {grant:?} -> {result:?}"
            );
            self.note_installed(env, p, &[s]);
            self.wake(env, p, s);
            return self.adopt_reply(env, p, from, id, result);
        }
        let job = env.fresh_id();
        proc_.adopts.insert(
            job,
            AdoptJob {
                id,
                from,
                section: s,
                epoch: grant.epoch,
                lapses_before,
            },
        );
        let t = Timing {
            deadline: nanos(ADOPT_READ_DEADLINE),
            attempt: nanos(ADOPT_READ_DEADLINE / 3),
            hedge: true,
        };
        self.call(
            env,
            p,
            StoreReq::Read { section: s },
            Purpose::AdoptRead { job },
            t,
        );
    }

    /// An adopt's store read came back: [`decide_adopt`], then install only
    /// if the lease held all along.
    pub(super) fn adopt_read(&mut self, env: &mut Env, p: Slot, job: u64, resp: StoreResp) {
        let now = env.now;
        let proc_ = &mut self.procs[p];
        let Some(j) = proc_.adopts.remove(&job) else {
            return;
        };
        let result = match resp {
            Ok(StoreOk::Section(info)) => {
                let check = AdoptCheck {
                    installed: proc_.allocator().known_epoch(j.section),
                    info,
                    named: j.epoch,
                };
                let read = Event::AdoptRead {
                    checks: vec![check],
                    lapses_before: j.lapses_before,
                };
                let clock = proc_.clock(now);
                match proc_.control.on(clock, read).pop() {
                    Some(Effect::Install { grants }) => (proc_.allocator().install(&grants))
                        .map(|n| n as u32)
                        .map_err(|e| e.to_string()),
                    Some(Effect::AdoptRefused(e @ AdoptRefusal::NoRoom { .. })) => {
                        let what = format!("p{p}: the store has no room for an adopt: {e}");
                        env.monitor.violate(now, 0, what);
                        Err(e.to_string())
                    }
                    Some(Effect::AdoptRefused(e)) => Err(e.to_string()),
                    // The store's answer may be stale if the lease lapsed
                    // since before the read (promise 3).
                    _ => Err("not admitted: the lease lapsed meanwhile".into()),
                }
            }
            other => Err(format!("store read failed: {other:?}")),
        };
        trace!(
            env,
            "p{p} adopt of section {} at epoch {}: {result:?}",
            j.section,
            j.epoch
        );
        self.note_installed(env, p, &[j.section]);
        if matches!(result, Ok(n) if n > 0) {
            self.wake(env, p, j.section);
        }
        self.adopt_reply(env, p, j.from, j.id, result);
    }

    pub(super) fn adopt_reply(
        &mut self,
        env: &mut Env,
        p: Slot,
        to: Node,
        id: u64,
        result: Result<u32, String>,
    ) {
        match &result {
            Ok(n) if *n > 0 => env.stats.adopted += 1,
            Ok(_) => {}
            Err(_) => env.stats.adopts_refused += 1,
        }
        let m = Msg::Peer(PeerMsg::AdoptResp { id, result });
        env.send(Node::Alloc(p), to, m);
    }
}
