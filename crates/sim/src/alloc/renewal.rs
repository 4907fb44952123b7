//! The simulation's executor of the AllocSvr's control loop
//! ([`Control`](seqsvr_alloc::control::Control), the node's
//! `node/renewal.rs` and `node/routes.rs`): events go to the shipped
//! machine at the process's clock reading, and its effects are performed
//! here in the simulated world — store calls through the modelled client,
//! drops and the lease on the real allocator and lease, timers on virtual
//! time. What is the simulation's own is only *when* (delays, pauses) and
//! the knobs, which perturb effects, never re-implement a rule.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use seqsvr_alloc::control::{Effect, Event, Renewal, RouteFacts, Timer};
use seqsvr_alloc::ownership::{claim_pieces, fences, served_epochs, take_over_known};
use seqsvr_core::{Epoch, SectionId};
use seqsvr_store_core::command::Reply;

use crate::env::{trace, Env};
use crate::model::{ATimer, RouteView, Slot, StoreOk, StoreReq, StoreResp};
use crate::net::US;

use super::{nanos, reader, renewer, Allocs, Purpose};

impl Allocs {
    /// Feeds `event` to process `p`'s control loop at its clock's reading
    /// now, and performs the effects.
    pub(super) fn control(&mut self, env: &mut Env, p: Slot, event: Event) {
        let proc_ = &mut self.procs[p];
        let now = proc_.clock(env.now);
        let effects = proc_.control.on(now, event);
        self.perform(env, p, effects.into(), None);
    }

    /// Performs `effects` in order (`view`: the route table just read, for
    /// [`Effect::PublishRoutes`]). The effects after a lease extension
    /// run a moment later: the claims are store calls of their own, and a
    /// pause may fall in between (`pause_on_renewal`).
    pub(super) fn perform(
        &mut self,
        env: &mut Env,
        p: Slot,
        mut effects: VecDeque<Effect>,
        mut view: Option<RouteView>,
    ) {
        while let Some(effect) = effects.pop_front() {
            match effect {
                Effect::Renew { known_version } => self.send_renewal(env, p, known_version),
                Effect::Drop { sections, lapsed } => {
                    let why = if lapsed {
                        "renewal after a lapse"
                    } else {
                        "renewal"
                    };
                    self.drop_sections(env, p, &sections, why);
                }
                Effect::DropIfEpoch { sections } => self.drop_if_epoch(env, p, &sections),
                Effect::ExtendLease { sent, lease, .. } => {
                    let proc_ = &mut self.procs[p];
                    proc_.lease.granted(sent, lease);
                    trace!(env, "p{p} renewed: then {effects:?}");
                    if let Some(d) = proc_.pause_on_renewal.take() {
                        self.pause(env, p, d);
                    }
                    let d = env.rng.range(2 * US, 20 * US);
                    let rest = effects.drain(..).collect();
                    return self.after(env, p, d, ATimer::Effects(rest));
                }
                Effect::Draining(_) => {}
                Effect::Claim { pieces } => {
                    self.procs[p].claims = pieces.into();
                    self.next_claim(env, p);
                }
                Effect::ReadRoutes => self.refresh_routes(env, p, false),
                Effect::PublishRoutes => {
                    if let Some(v) = view.take() {
                        self.procs[p].routes = v;
                    }
                }
                // `renew_now.notify_one()`: wakes the waiting renewal loop,
                // or is kept for when the running cycle ends.
                Effect::WakeRenewal => self.control(env, p, Event::RenewNow),
                Effect::Fence => self.fence(env, p, "the store said so"),
                Effect::ListForgotten { .. } => trace!(
                    env,
                    "p{p} renewal says the list is unchanged, but none is held"
                ),
                Effect::CycleEnded { next, first } => self.cycle_ended(env, p, next, first),
                Effect::Register => self.register(env, p),
                Effect::ReadStartRoutes => self.read_start_routes(env, p),
                Effect::SetTimer { timer, at } => self.set_timer(env, p, timer, at),
                Effect::GiveUp => trace!(env, "p{p} start-up gives up"),
                Effect::RaiseRound => self.raise_round(env, p),
                Effect::Requeue { sections } => {
                    if let Some(alloc) = &self.procs[p].alloc {
                        alloc.requeue_raises(&sections);
                    }
                }
                e @ (Effect::ApplyRaise { .. }
                | Effect::DropRaised { .. }
                | Effect::RaiseFailed { .. }) => self.settled_raise(env, p, e),
                // Performed by the move or adopt that asked (`handoff.rs`).
                e @ (Effect::Handoff { .. }
                | Effect::Adopt { .. }
                | Effect::ReadBack { .. }
                | Effect::LeftDropped { .. }
                | Effect::AdoptDenied(_)
                | Effect::ReadAdopt { .. }
                | Effect::Install { .. }
                | Effect::AdoptRefused(_)
                | Effect::AdoptNotAdmitted) => trace!(env, "p{p} {e:?} left to its caller"),
            }
        }
    }

    /// [`Effect::SetTimer`]: delivers [`Event::Due`] when process `p`'s
    /// clock reads `at`.
    fn set_timer(&mut self, env: &mut Env, p: Slot, timer: Timer, at: Instant) {
        let proc_ = &self.procs[p];
        let left = at.saturating_duration_since(proc_.clock(env.now));
        let d = proc_.real(nanos(left));
        self.after(env, p, d, ATimer::Due(timer, at));
    }

    /// The knobs that restore the renewal's old orders, as perturbations of
    /// a granted renewal's effects: `keep_sections_after_lapse` (bug 2)
    /// neither drops nor claims again what is served and listed after a
    /// lapse — a section both dropped and claimed; `lease_before_drop`
    /// (bug 1) extends the lease before the drops, which then come a
    /// moment later with the claims.
    fn perturb(env: &Env, mut effects: Vec<Effect>) -> Vec<Effect> {
        let knobs = &env.cfg.knobs;
        if knobs.keep_sections_after_lapse {
            let claimed: Vec<SectionId> = (effects.iter())
                .flat_map(|e| match e {
                    Effect::Claim { pieces } => pieces.clone(),
                    _ => Vec::new(),
                })
                .flat_map(|(first, count)| first..first + count)
                .collect();
            let mut dropped = Vec::new();
            for e in &mut effects {
                if let Effect::Drop { sections, .. } = e {
                    dropped = std::mem::take(sections);
                    sections.extend(dropped.iter().filter(|s| !claimed.contains(s)));
                }
            }
            for e in &mut effects {
                if let Effect::Claim { pieces } = e {
                    let keep: Vec<SectionId> = (claimed.iter().copied())
                        .filter(|s| !dropped.contains(s))
                        .collect();
                    *pieces = claim_pieces(&keep);
                }
            }
        }
        if knobs.lease_before_drop {
            if let Some(i) = effects
                .iter()
                .position(|e| matches!(e, Effect::Drop { .. }))
            {
                let drop = effects.remove(i);
                let lease = (effects.iter())
                    .position(|e| matches!(e, Effect::ExtendLease { .. }))
                    .expect("a lease extension with the drops");
                effects.insert(lease + 1, drop);
            }
        }
        effects
    }

    /// Stops serving `sections` (those still served) and wakes their
    /// waiting requests.
    pub(super) fn drop_sections(
        &mut self,
        env: &mut Env,
        p: Slot,
        sections: &[SectionId],
        why: &str,
    ) {
        let Some(alloc) = self.procs[p].alloc.as_ref() else {
            return;
        };
        let dropped: Vec<SectionId> = (sections.iter())
            .copied()
            .filter(|&s| alloc.drop_section(s))
            .collect();
        if !dropped.is_empty() {
            trace!(env, "p{p} {why}: dropped {dropped:?}");
        }
        for s in dropped {
            self.wake(env, p, s);
        }
    }

    /// Stops serving each section still at the epoch given (a route
    /// read's drops) and wakes its waiting requests.
    fn drop_if_epoch(&mut self, env: &mut Env, p: Slot, sections: &[(SectionId, Epoch)]) {
        let alloc = self.procs[p].allocator();
        let dropped: Vec<SectionId> = (sections.iter())
            .filter(|&&(s, epoch)| alloc.drop_section_if_epoch(s, epoch))
            .map(|&(s, _)| s)
            .collect();
        if !dropped.is_empty() {
            trace!(
                env,
                "p{p} route read: {dropped:?} routed elsewhere, dropped"
            );
        }
        for s in dropped {
            self.wake(env, p, s);
        }
    }

    /// [`Effect::Renew`]: the renewal call; the next interval ends
    /// `renew_every` (on this process's clock) from now.
    fn send_renewal(&mut self, env: &mut Env, p: Slot, known_version: u64) {
        let proc_ = &mut self.procs[p];
        proc_.renew_gen += 1;
        proc_.renew_next = env.now + proc_.real(env.cfg.renew_every);
        let req = StoreReq::Renew {
            alloc: proc_.id.clone(),
            incarnation: proc_.incarnation,
            known_version,
        };
        let t = renewer(env.cfg.renew_every);
        self.call(env, p, req, Purpose::Renew, t);
    }

    /// A renewal came back: [`Event::Renewed`] or [`Event::RenewFailed`].
    pub(super) fn renewed(&mut self, env: &mut Env, p: Slot, resp: StoreResp) {
        let ren = match resp {
            Ok(StoreOk::Renewed(ren)) => ren,
            Err(e) if fences(&e.to_api()) => {
                trace!(env, "p{p} renewal refused: {}", e.to_api());
                return self.control(env, p, Event::RenewFailed { fenced: true });
            }
            other => {
                trace!(env, "p{p} renewal failed: {other:?}");
                return self.control(env, p, Event::RenewFailed { fenced: false });
            }
        };
        let proc_ = &mut self.procs[p];
        let grant = Renewal {
            lease: Duration::from_millis(ren.lease_ms),
            list: (!ren.unchanged).then(|| (ren.sections_version, ren.sections.clone())),
            route_version: ren.route_version,
            draining: false,
        };
        let served = proc_.allocator().served_sections();
        let now = proc_.clock(env.now);
        let effects = proc_.control.on(now, Event::Renewed { grant, served });
        let effects = Self::perturb(env, effects);
        self.perform(env, p, effects.into(), None);
    }

    /// Claims the next piece of [`Effect::Claim`], one take-over at a
    /// time, then tells the control loop they are done.
    pub(super) fn next_claim(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &mut self.procs[p];
        if proc_.fenced {
            proc_.claims.clear();
        }
        let Some((first, count)) = proc_.claims.pop_front() else {
            let held_routes = proc_.routes.version;
            return self.control(env, p, Event::ClaimsDone { held_routes });
        };
        let known = take_over_known(proc_.allocator(), first, count);
        let req = StoreReq::TakeOver {
            alloc: proc_.id.clone(),
            incarnation: proc_.incarnation,
            first,
            known,
        };
        let t = reader(env.cfg.renew_every);
        self.call(env, p, req, Purpose::Claim, t);
        if let Some(d) = self.procs[p].pause_on_claim.take() {
            self.pause(env, p, d);
        }
    }

    /// A take-over came back: installs its grants (`Raiser::take_over`),
    /// tells the control loop, claims the next piece.
    pub(super) fn claimed(&mut self, env: &mut Env, p: Slot, resp: StoreResp) {
        let mut fenced = false;
        match resp {
            Ok(StoreOk::Written(Reply::TakenOver { grants, .. })) => {
                let alloc = self.procs[p].allocator();
                match alloc.install(&grants) {
                    Ok(n) => trace!(env, "p{p} took over {grants:?} (installed {n})"),
                    Err(e) => trace!(env, "p{p} take-over not installed: {e}"),
                }
                let sections: Vec<_> = grants.iter().map(|g| g.section).collect();
                self.note_installed(env, p, &sections);
                for g in grants {
                    self.wake(env, p, g.section);
                }
                self.raiser_kick(env, p);
            }
            Err(e) if fences(&e.to_api()) => fenced = true,
            other => trace!(env, "p{p} take-over failed, will retry: {other:?}"),
        }
        self.control(env, p, Event::TakenOver { fenced });
        self.next_claim(env, p);
    }

    /// [`Effect::CycleEnded`]: the next renewal at the time named (none
    /// once fenced); after start-up's cycle the process serves and its
    /// route loop starts.
    fn cycle_ended(
        &mut self,
        env: &mut Env,
        p: Slot,
        next: Option<std::time::Instant>,
        first: bool,
    ) {
        let Some(next) = next else {
            return;
        };
        let proc_ = &mut self.procs[p];
        proc_.renew_gen += 1;
        let at = if next <= proc_.clock(env.now) {
            env.now
        } else {
            proc_.renew_next.max(env.now)
        };
        let gen = proc_.renew_gen;
        if first {
            // Serving starts after the first renewal; the loops start too
            // (the renewal loop renews at once, the route loop reads now).
            proc_.started = true;
            proc_.poll_next = env.now;
        }
        self.after(env, p, at - env.now, ATimer::Renew(gen));
        if first {
            self.route_poll(env, p);
        }
    }

    /// The route loop's body.
    pub(super) fn route_poll(&mut self, env: &mut Env, p: Slot) {
        if self.procs[p].polling || self.procs[p].alloc.is_none() {
            return;
        }
        self.procs[p].polling = true;
        self.refresh_routes(env, p, true);
    }

    /// `refresh_routes`: a route read, remembering what was served before
    /// ([`served_epochs`]).
    pub(super) fn refresh_routes(&mut self, env: &mut Env, p: Slot, looped: bool) {
        let before = served_epochs(self.procs[p].allocator());
        let t = reader(env.cfg.renew_every);
        self.call(
            env,
            p,
            StoreReq::Routes,
            Purpose::Poll { before, looped },
            t,
        );
    }

    /// A route read came back: [`Event::RoutesRead`]; the route loop's
    /// next read is due a poll interval after this one's.
    pub(super) fn routes_read(
        &mut self,
        env: &mut Env,
        p: Slot,
        before: Vec<(SectionId, Epoch)>,
        looped: bool,
        resp: StoreResp,
    ) {
        let proc_ = &mut self.procs[p];
        let view = match resp {
            Ok(StoreOk::Routes(view)) => Some(view),
            _ => None,
        };
        let read = view.as_ref().map(|view| RouteFacts {
            before,
            routed_here: (0..env.cfg.spec(proc_.set).section_count())
                .filter(|&s| view.routes_to(s, &proc_.id))
                .collect(),
            served: proc_.allocator().served_sections(),
            version: view.version,
            held: proc_.routes.version,
        });
        let now = proc_.clock(env.now);
        let renewal = !looped;
        let effects = proc_.control.on(now, Event::RoutesRead { read, renewal });
        self.perform(env, p, effects.into(), view);
        if !looped {
            return;
        }
        let proc_ = &mut self.procs[p];
        proc_.polling = false;
        proc_.poll_gen += 1;
        proc_.poll_next += proc_.real(env.cfg.route_poll);
        let at = proc_.poll_next.max(env.now);
        let gen = proc_.poll_gen;
        self.after(env, p, at - env.now, ATimer::RoutePoll(gen));
    }
}
