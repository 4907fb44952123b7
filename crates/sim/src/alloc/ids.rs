//! Time-ordered ids on a simulated AllocSvr (`crates/alloc/src/ids/`,
//! docs/ids.md): per namespace one holding, claimed on the namespace's
//! first call; its ceiling raised ahead by the raiser; ids issued by the
//! shipped rules (`seqsvr_alloc::ids::rules`: the generator a claim
//! starts, an issue, a raise's answer, the typed refusals) on the
//! process's *wall* clock; every worker id released on a planned stop.
//!
//! Modelled here, as `IdWorkers` and `Front::next_ids` time them: a call is
//! admitted (`ownership::admit`: lease and fence) when it arrives and
//! issued a few microseconds later (a pause may fall in between); one claim
//! per namespace at a time, the calls that need it waiting; the raiser
//! looks at the ceiling every quarter window (or at once when an issue
//! wants a raise), backs off after a failure, and a call that finds the
//! ceiling reached waits at most `wait` for the raise; a raise refused
//! because the worker id is no longer ours ends the holding, and the next
//! call claims again.
//!
//! The wall clock: `WALL_START_MS` plus the process's own (drifting)
//! clock plus an offset that faults move (a skew at start, steps while
//! running, a set-back across a restart). It survives a crash: it is the
//! machine's.

use std::collections::BTreeMap;
use std::time::Duration;

use seqsvr_alloc::error::CallError;
use seqsvr_alloc::ids::rules::{self, RaiseSettled};
use seqsvr_alloc::ownership::{admit, NotAdmitted};
use seqsvr_core::ids::{Generator, IdError};
use seqsvr_core::Epoch;
use seqsvr_store_api::ids::Claimed;
use seqsvr_store_api::IdRefusal;
use seqsvr_store_core::command::{Rejection, Reply};

use crate::check::ID_EXCLUSIVE;
use crate::env::{trace, Env};
use crate::ids::{IdEv, IdMsg, IdPurpose, IdRefused, IdReq, IdTimer, IdWork, WALL_START_MS};
use crate::model::{ATimer, Ev, Msg, Slot, StoreFail, StoreOk, StoreReq, StoreResp};
use crate::net::{Node, Time, MS, US};

use super::{nanos, reader, Allocs, Purpose};

/// One worker id held for one namespace.
#[derive(Debug)]
pub(crate) struct Holding {
    /// The worker id.
    pub worker: u64,
    /// The holding's epoch.
    epoch: Epoch,
    /// The window, in ticks.
    window: u64,
    /// The shipped generator.
    gen: Generator,
    /// A raise is in flight.
    raising: bool,
    /// The raiser's timer generation.
    timer: u64,
    /// The raiser's interval (local clock).
    every: Duration,
    /// The raiser's back-off (local clock).
    backoff: Duration,
    /// The lease-lapse count the store last confirmed it ours at.
    confirmed: u64,
}

/// A planned stop under way: releases still unanswered.
#[derive(Debug)]
struct Stop {
    pending: usize,
    down: Time,
}

/// A process's id state.
#[derive(Debug, Default)]
pub(crate) struct IdProc {
    /// The wall clock's offset, ms (the machine's: kept across a crash).
    pub offset_ms: i64,
    /// Holdings by namespace.
    pub held: BTreeMap<usize, Holding>,
    /// Claims in flight by namespace, with the calls waiting for them.
    claiming: BTreeMap<usize, Vec<IdWork>>,
    /// Calls waiting for a raise, by id.
    raise_wait: BTreeMap<u64, IdWork>,
    /// A planned stop under way.
    stopping: Option<Stop>,
}

impl IdProc {
    /// What survives a kill -9: the machine's clock.
    pub(crate) fn after_crash(&self) -> Self {
        IdProc {
            offset_ms: self.offset_ms,
            ..IdProc::default()
        }
    }
}

/// A generator's refusal as the client sees it (the shipped mapping).
fn refused_of(e: CallError) -> IdRefused {
    match e {
        CallError::ClockBehind { behind_ms, .. } => IdRefused::ClockBehind(behind_ms),
        CallError::IdCeiling { .. } => IdRefused::Ceiling,
        _ => IdRefused::Other,
    }
}

/// A failed claim as the client sees it.
fn claim_refused(f: &StoreFail) -> IdRefused {
    match f {
        StoreFail::Rejected(Rejection::Ids {
            kind: IdRefusal::WorkersExhausted,
            ..
        }) => IdRefused::Exhausted,
        StoreFail::Rejected(Rejection::StaleIncarnation { .. }) => IdRefused::Fenced,
        StoreFail::NoLeader | StoreFail::Timeout => IdRefused::StoreDown,
        StoreFail::Rejected(_) => IdRefused::Other,
    }
}

impl Allocs {
    /// Process `p`'s wall clock at virtual time `now`, Unix ms.
    pub(crate) fn wall_ms(&self, p: Slot, now: Time) -> u64 {
        let proc_ = &self.procs[p];
        let local_ms = (now as f64 * proc_.rate / 1e6) as i64;
        (WALL_START_MS as i64 + local_ms + proc_.ids.offset_ms).max(0) as u64
    }

    fn id_reply(&self, env: &mut Env, p: Slot, w: &IdWork, result: Result<Vec<u64>, IdRefused>) {
        let m = IdMsg::Resp { op: w.op, result };
        env.send(Node::Alloc(p), w.from, Msg::Id(m));
    }

    /// An id call arrives: admitted now (`Front::next_ids`: lease and
    /// fence, `ownership::admit`), issued a moment later.
    pub(super) fn id_call(&mut self, env: &mut Env, p: Slot, work: IdWork) {
        let proc_ = &self.procs[p];
        if !proc_.started || proc_.set != 0 || proc_.ids.stopping.is_some() {
            return self.id_reply(env, p, &work, Err(IdRefused::Unavailable));
        }
        let valid = env.cfg.knobs.skip_lease_check || proc_.lease_valid(env.now);
        match admit(valid, proc_.fenced) {
            Ok(()) => {}
            Err(NotAdmitted::Fenced) => {
                return self.id_reply(env, p, &work, Err(IdRefused::Fenced))
            }
            Err(NotAdmitted::LeaseExpired) => {
                return self.id_reply(env, p, &work, Err(IdRefused::LeaseExpired))
            }
        }
        self.id_check_exclusive(env, p, work.ns);
        if let Some(d) = self.procs[p].pause_on_admit.take() {
            self.pause(env, p, d);
        }
        let d = env.rng.range(2 * US, 40 * US);
        self.after(env, p, d, ATimer::Ids(IdTimer::Serve(work)));
    }

    /// The holding of `ns` process `p` may issue from: held, confirmed
    /// ours since the last lease lapse (unless `id_issue_after_lapse`).
    fn issuing(&self, env: &Env, p: Slot, ns: usize) -> Option<&Holding> {
        let proc_ = &self.procs[p];
        let h = proc_.ids.held.get(&ns)?;
        let lapses = proc_.control.lapses();
        (env.cfg.knobs.id_issue_after_lapse || rules::confirmed(h.confirmed, lapses)).then_some(h)
    }

    /// When `p` admits an id call of `ns` while it may issue from a worker
    /// id, no other process may issue from it with its lease valid
    /// (running or paused, not fenced): one holder per worker id
    /// (docs/ids.md).
    fn id_check_exclusive(&self, env: &mut Env, p: Slot, ns: usize) {
        let Some(h) = self.issuing(env, p, ns) else {
            return;
        };
        for (q, o) in self.procs.iter().enumerate() {
            let same = self
                .issuing(env, q, ns)
                .is_some_and(|x| x.worker == h.worker);
            if q != p && same && o.up && !o.fenced && o.lease_valid(env.now) {
                let what = format!(
                    "p{p} ({}) admits an id call of namespace #{ns} holding worker {} (epoch {}) while p{q} ({}) holds it too (epoch {}, lease valid)",
                    self.procs[p].id, h.worker, h.epoch, o.id, o.ids.held[&ns].epoch
                );
                env.monitor.violate(env.now, ID_EXCLUSIVE, what);
            }
        }
    }

    /// An admitted call: issue from the holding, or claim one first.
    fn id_serve(&mut self, env: &mut Env, p: Slot, work: IdWork) {
        let wall = self.wall_ms(p, env.now);
        let proc_ = &mut self.procs[p];
        if proc_.ids.stopping.is_some() {
            return self.id_reply(env, p, &work, Err(IdRefused::Unavailable));
        }
        let ns = work.ns;
        let Some(h) = proc_.ids.held.get_mut(&ns) else {
            let first = !proc_.ids.claiming.contains_key(&ns);
            proc_.ids.claiming.entry(ns).or_default().push(work);
            if first {
                self.id_claim(env, p, ns);
            }
            return;
        };
        let lapses = proc_.control.lapses();
        if !env.cfg.knobs.id_issue_after_lapse && !rules::confirmed(h.confirmed, lapses) {
            // Not confirmed ours since the lease lapsed: a raise must
            // confirm it first (the call waits for it once, bounded).
            if work.waited {
                return self.id_reply(env, p, &work, Err(IdRefused::WorkerLost));
            }
            return self.id_wait_raise(env, p, work);
        }
        let issued = rules::issue(&mut h.gen, h.window, wall, work.n as usize);
        let (b, a) = (issued.before, issued.after);
        env.ids.stats.borrowed += a.borrowed - b.borrowed;
        env.ids.stats.clock_back += a.clock_back - b.clock_back;
        let (worker, epoch, last) = (h.worker, h.epoch, h.gen.last_tick());
        let layout = *h.gen.layout();
        if issued.wants_raise {
            self.id_kick(env, p, ns);
        }
        match issued.result {
            Ok(ids) => {
                let ceiling = self.committed_ceiling(env, ns, worker);
                if let Some(v) = env
                    .ids
                    .on_issue(env.now, p, ns, worker, epoch, &ids, ceiling)
                {
                    env.monitor.violations.push(v);
                }
                self.id_reply(env, p, &work, Ok(ids));
            }
            Err(IdError::CeilingReached { .. }) if !work.waited => self.id_wait_raise(env, p, work),
            Err(e) => {
                if matches!(e, IdError::ClockBehind { .. }) && layout.tick_of(wall) >= last {
                    let what = format!("p{p} refused CLOCK_BEHIND with its clock at the last tick");
                    env.monitor.violate(env.now, 0, what);
                }
                let name = &env.cfg.ids.as_ref().expect("ids").spaces[ns].name;
                let why = refused_of(rules::refusal(name, layout.unit_ms, e));
                self.id_reply(env, p, &work, Err(why));
            }
        }
    }

    /// Wakes the raiser and parks `work` until the raise is answered, or
    /// `wait` has passed.
    fn id_wait_raise(&mut self, env: &mut Env, p: Slot, mut work: IdWork) {
        work.waited = true;
        self.id_kick(env, p, work.ns);
        let id = env.fresh_id();
        self.procs[p].ids.raise_wait.insert(id, work);
        let d = self.procs[p].real(env.cfg.wait);
        self.after(env, p, d, ATimer::Ids(IdTimer::WaitDeadline(id)));
    }

    /// Worker `worker`'s ceiling in namespace `ns` as committed now.
    fn committed_ceiling(&self, env: &Env, ns: usize, worker: u64) -> u64 {
        let name = &env.cfg.ids.as_ref().expect("ids").spaces[ns].name;
        (env.truth[0].ids.spaces.get(name))
            .and_then(|s| s.workers.get(&worker))
            .map_or(0, |r| r.ceiling)
    }

    fn id_claim(&mut self, env: &mut Env, p: Slot, ns: usize) {
        let wall = self.wall_ms(p, env.now);
        let proc_ = &self.procs[p];
        let req = StoreReq::Ids(IdReq::Claim {
            ns: env.cfg.ids.as_ref().expect("ids").spaces[ns].name.clone(),
            alloc: proc_.id.clone(),
            incarnation: proc_.incarnation,
            now_ms: wall,
        });
        let t = reader(env.cfg.renew_every);
        let lapses = proc_.control.lapses();
        self.call(env, p, req, Purpose::Ids(IdPurpose::Claim(ns, lapses)), t);
    }

    fn id_claimed(&mut self, env: &mut Env, p: Slot, ns: usize, lapses: u64, resp: StoreResp) {
        let waiters = self.procs[p].ids.claiming.remove(&ns).unwrap_or_default();
        let g = match resp {
            Ok(StoreOk::Written(Reply::WorkerClaimed(g))) => g,
            Err(f) => {
                let why = claim_refused(&f);
                return waiters
                    .iter()
                    .for_each(|w| self.id_reply(env, p, w, Err(why)));
            }
            Ok(other) => panic!("model bug: a claim answered {other:?}"),
        };
        let space = env.cfg.ids.as_ref().expect("ids").spaces[ns].clone();
        if self.procs[p].ids.stopping.is_some() {
            // Stopping: released at once (`release_all` waits for a claim
            // in flight, then releases what it got).
            self.id_release(env, p, ns, g.worker, g.epoch);
            return (waiters.iter())
                .for_each(|w| self.id_reply(env, p, w, Err(IdRefused::Unavailable)));
        }
        let mut grant = g;
        if env.cfg.knobs.id_floor_at_clock {
            grant.floor = space.layout.tick_of(self.wall_ms(p, env.now)).max(1);
        }
        let claimed = Claimed {
            grant,
            layout: space.layout,
            window_ms: space.window_ms,
        };
        let (gen, window) = rules::start(&claimed).expect("a valid claim");
        trace!(
            env,
            "p{p} holds worker {} of {} at epoch {} (floor {}, ceiling {})",
            g.worker,
            space.name,
            g.epoch,
            g.floor,
            g.ceiling
        );
        let every = rules::raise_interval(window, space.layout.unit_ms);
        let h = Holding {
            worker: g.worker,
            epoch: g.epoch,
            window,
            gen,
            raising: false,
            timer: 0,
            every,
            backoff: rules::RAISE_BACKOFF_MIN,
            confirmed: lapses,
        };
        self.procs[p].ids.held.insert(ns, h);
        self.id_kick(env, p, ns);
        for w in waiters {
            self.id_serve(env, p, w);
        }
    }

    /// Wakes the raiser of `ns` at once (unless a raise is in flight).
    fn id_kick(&mut self, env: &mut Env, p: Slot, ns: usize) {
        let Some(h) = self.procs[p].ids.held.get_mut(&ns) else {
            return;
        };
        if !h.raising {
            h.timer += 1;
            let t = IdTimer::Raise(ns, h.timer);
            self.after(env, p, 0, ATimer::Ids(t));
        }
    }

    /// The raiser of `ns` looks at the ceiling: raise to `max(clock,
    /// last) + window` if it is less than half a window ahead, else look
    /// again after the interval.
    fn id_raise_tick(&mut self, env: &mut Env, p: Slot, ns: usize, gen: u64) {
        let wall = self.wall_ms(p, env.now);
        let proc_ = &mut self.procs[p];
        let Some(h) = proc_.ids.held.get_mut(&ns) else {
            return;
        };
        if h.timer != gen || h.raising {
            return;
        }
        let lapses = proc_.control.lapses();
        let confirmed = env.cfg.knobs.id_issue_after_lapse || rules::confirmed(h.confirmed, lapses);
        let Some(to) = rules::raise_target(&h.gen, wall, h.window, confirmed) else {
            let every = nanos(h.every);
            let d = proc_.real(every);
            return self.after(env, p, d, ATimer::Ids(IdTimer::Raise(ns, gen)));
        };
        h.raising = true;
        if env.cfg.knobs.id_above_ceiling {
            h.gen.set_ceiling(to);
        }
        let req = StoreReq::Ids(IdReq::Raise {
            ns: env.cfg.ids.as_ref().expect("ids").spaces[ns].name.clone(),
            worker: h.worker,
            alloc: proc_.id.clone(),
            incarnation: proc_.incarnation,
            epoch: h.epoch,
            to,
        });
        let purpose = Purpose::Ids(IdPurpose::Raise(ns, h.epoch, lapses));
        self.call(env, p, req, purpose, reader(env.cfg.renew_every));
    }

    fn id_raised(&mut self, env: &mut Env, p: Slot, what: (usize, Epoch, u64), resp: StoreResp) {
        let (ns, epoch, sent) = what;
        let proc_ = &mut self.procs[p];
        let lapses = proc_.control.lapses();
        let Some(h) = proc_.ids.held.get_mut(&ns).filter(|h| h.epoch == epoch) else {
            return;
        };
        h.raising = false;
        let api = resp.as_ref().err().map(StoreFail::to_api);
        let answer = match (&resp, &api) {
            (Ok(StoreOk::Written(Reply::WorkerRaised { ceiling })), _) => Ok(*ceiling),
            (Ok(other), _) => panic!("model bug: a raise answered {other:?}"),
            (Err(_), e) => Err(e.as_ref().expect("an error")),
        };
        match rules::settle_raise(answer) {
            RaiseSettled::Raised(c) => {
                h.gen.set_ceiling(c);
                if let Some(at) = rules::confirms(sent, lapses) {
                    h.confirmed = at;
                }
                h.backoff = rules::RAISE_BACKOFF_MIN;
                h.timer += 1;
                let t = IdTimer::Raise(ns, h.timer);
                self.after(env, p, 0, ATimer::Ids(t));
            }
            RaiseSettled::Lost => {
                trace!(env, "p{p} lost worker {} of namespace #{ns}", h.worker);
                env.ids.stats.lost += 1;
                proc_.ids.held.remove(&ns);
            }
            RaiseSettled::Retry => {
                h.timer += 1;
                let (t, d) = (IdTimer::Raise(ns, h.timer), nanos(h.backoff));
                h.backoff = rules::next_backoff(h.backoff, h.every);
                let d = proc_.real(d);
                self.after(env, p, d, ATimer::Ids(t));
            }
        }
        // The calls waiting for the raise try again (`raised` notified).
        let waiting: Vec<u64> = (self.procs[p].ids.raise_wait.iter())
            .filter(|(_, w)| w.ns == ns)
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            if let Some(w) = self.procs[p].ids.raise_wait.remove(&id) {
                self.id_serve(env, p, w);
            }
        }
    }

    /// A planned stop (`IdWorkers::release_all`, then the process exits):
    /// nothing more is issued; every worker id is released; the process
    /// starts again `down` after the last release is answered.
    pub(crate) fn planned_stop(&mut self, env: &mut Env, p: Slot, down: Time, stall: Option<Time>) {
        let proc_ = &mut self.procs[p];
        if !proc_.up || proc_.paused || !proc_.started || proc_.ids.stopping.is_some() {
            return;
        }
        if let Some(s) = stall {
            env.net.stalls.push((Node::Alloc(p), env.now + 300 * MS, s));
        }
        proc_.ids.stopping = Some(Stop { pending: 0, down });
        let held = std::mem::take(&mut proc_.ids.held);
        let waiting = std::mem::take(&mut proc_.ids.raise_wait);
        for w in waiting.values() {
            self.id_reply(env, p, w, Err(IdRefused::Unavailable));
        }
        for (ns, h) in held {
            self.id_release(env, p, ns, h.worker, h.epoch);
        }
        self.stop_if_released(env, p);
    }

    fn id_release(&mut self, env: &mut Env, p: Slot, ns: usize, worker: u64, epoch: Epoch) {
        let proc_ = &mut self.procs[p];
        if let Some(s) = proc_.ids.stopping.as_mut() {
            s.pending += 1;
        }
        let req = StoreReq::Ids(IdReq::Release {
            ns: env.cfg.ids.as_ref().expect("ids").spaces[ns].name.clone(),
            worker,
            alloc: proc_.id.clone(),
            incarnation: proc_.incarnation,
            epoch,
        });
        let purpose = Purpose::Ids(IdPurpose::Release);
        self.call(env, p, req, purpose, reader(env.cfg.renew_every));
    }

    fn stop_if_released(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &self.procs[p];
        let Some(s) = proc_.ids.stopping.as_ref() else {
            return;
        };
        if s.pending > 0 || !proc_.ids.claiming.is_empty() {
            return;
        }
        let down = s.down;
        trace!(env, "p{p} stopped (worker ids released)");
        self.crash(p);
        env.after(down, Ev::Ids(IdEv::Restart(p)));
    }

    /// An id timer of process `p`.
    pub(super) fn id_timer(&mut self, env: &mut Env, p: Slot, t: IdTimer) {
        match t {
            IdTimer::Serve(w) => self.id_serve(env, p, w),
            IdTimer::Raise(ns, gen) => self.id_raise_tick(env, p, ns, gen),
            IdTimer::WaitDeadline(id) => {
                if let Some(w) = self.procs[p].ids.raise_wait.remove(&id) {
                    self.id_serve(env, p, w);
                }
            }
        }
    }

    /// An id store call of process `p` finished.
    pub(super) fn id_call_done(&mut self, env: &mut Env, p: Slot, what: IdPurpose, r: StoreResp) {
        match what {
            IdPurpose::Claim(ns, lapses) => {
                self.id_claimed(env, p, ns, lapses, r);
                self.stop_if_released(env, p);
            }
            IdPurpose::Raise(ns, epoch, sent) => self.id_raised(env, p, (ns, epoch, sent), r),
            IdPurpose::Release => {
                if let Some(s) = self.procs[p].ids.stopping.as_mut() {
                    s.pending = s.pending.saturating_sub(1);
                }
                self.stop_if_released(env, p);
            }
        }
    }
}
