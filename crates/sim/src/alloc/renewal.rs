//! The renewal cycle (`node/renewal.rs`, `renew_once`): renewal, reconciliation
//! (drops before the lease is extended, claims after), one take-over per
//! run; and the route loop (`refresh_routes`).

use std::time::{Duration, Instant};

use seqsvr_alloc::ownership::{
    after_route_read, claim_pieces, fences, listed_sections, reconcile, served_epochs,
    take_over_known,
};
use seqsvr_core::{Epoch, SectionId};
use seqsvr_store_core::command::Reply;

use crate::env::{trace, Env};
use crate::model::{ATimer, Slot, StoreOk, StoreReq, StoreResp};
use crate::net::US;

use super::{reader, renewer, Allocs, Purpose};

impl Allocs {
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

    /// The renewal loop's body (`renew_once`).
    pub(super) fn renew_start(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &mut self.procs[p];
        if proc_.renewing || proc_.alloc.is_none() || proc_.fenced {
            return;
        }
        proc_.renewing = true;
        proc_.renew_gen += 1;
        proc_.renew_next = env.now + proc_.real(env.cfg.renew_every);
        let sent = proc_.clock(env.now);
        let known_version = proc_.listed.0;
        let req = StoreReq::Renew {
            alloc: proc_.id.clone(),
            incarnation: proc_.incarnation,
            known_version,
        };
        let purpose = Purpose::Renew {
            sent,
            known_version,
        };
        let t = renewer(env.cfg.renew_every);
        self.call(env, p, req, purpose, t);
    }

    /// A renewal came back (`renew_once`): the list it carries
    /// ([`listed_sections`]), reconciled with [`reconcile`], drops first,
    /// then the lease, then the claims ([`claim_pieces`], a moment later:
    /// they are store calls of their own).
    ///
    /// The [`Knobs`](crate::Knobs) `lease_before_drop` and
    /// `keep_sections_after_lapse` restore the orders of bugs 1 and 2.
    pub(super) fn renewed(
        &mut self,
        env: &mut Env,
        p: Slot,
        sent: Instant,
        known: u64,
        resp: StoreResp,
    ) {
        let ren = match resp {
            Ok(StoreOk::Renewed(ren)) => ren,
            Err(e) if fences(&e.to_api()) => {
                self.fence(env, p, &e.to_api().to_string());
                return self.end_cycle(env, p);
            }
            other => {
                trace!(env, "p{p} renewal failed: {other:?}");
                return self.end_cycle(env, p);
            }
        };
        let proc_ = &mut self.procs[p];
        if proc_.fenced {
            return self.end_cycle(env, p);
        }
        let list = (!ren.unchanged).then(|| (ren.sections_version, ren.sections.clone()));
        let Some(listed) = listed_sections(&mut proc_.listed, known, list) else {
            trace!(
                env,
                "p{p} renewal says the list is unchanged, but none is held"
            );
            return self.end_cycle(env, p);
        };
        let knobs = env.cfg.knobs.clone();
        let lapsed = !proc_.lease_valid(env.now);
        let releasing: Vec<SectionId> = proc_.releasing.keys().copied().collect();
        let served = proc_.allocator().served_sections();
        let r = reconcile(
            &served,
            &listed,
            &releasing,
            lapsed && !knobs.keep_sections_after_lapse,
        );
        if lapsed {
            proc_.lapses += 1;
        }
        if !knobs.lease_before_drop {
            self.drop_sections(
                env,
                p,
                &r.drop,
                if lapsed {
                    "renewal after a lapse"
                } else {
                    "renewal"
                },
            );
        }
        let proc_ = &mut self.procs[p];
        proc_
            .lease
            .granted(sent, Duration::from_millis(ren.lease_ms));
        trace!(
            env,
            "p{p} renewed: listed {listed:?}, claiming {:?}{}",
            r.claim,
            if lapsed { " (lapsed)" } else { "" }
        );
        proc_.claims = claim_pieces(&r.claim).into();
        proc_.cycle_refresh = ren.route_version > proc_.routes.version;
        if let Some(d) = proc_.pause_on_renewal.take() {
            self.pause(env, p, d);
        }
        let d = env.rng.range(2 * US, 20 * US);
        if knobs.lease_before_drop {
            self.after(env, p, d, ATimer::DropLater(r.drop));
        } else {
            self.after(env, p, d, ATimer::Claims);
        }
    }

    /// Claims the next run of sections, or refreshes the routes, or ends
    /// the cycle.
    pub(super) fn next_claim(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &mut self.procs[p];
        if proc_.fenced {
            proc_.claims.clear();
            return self.end_cycle(env, p);
        }
        if let Some((first, count)) = proc_.claims.pop_front() {
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
            return;
        }
        if std::mem::take(&mut proc_.cycle_refresh) {
            return self.refresh_routes(env, p, false);
        }
        self.end_cycle(env, p)
    }

    pub(super) fn claimed(&mut self, env: &mut Env, p: Slot, resp: StoreResp) {
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
            Err(e) if fences(&e.to_api()) => self.fence(env, p, &e.to_api().to_string()),
            other => trace!(env, "p{p} take-over failed, will retry: {other:?}"),
        }
        self.next_claim(env, p);
    }

    /// Ends a renewal cycle; the next one is due after `renew_every`, or at
    /// once if asked for meanwhile. A fenced process renews no more.
    pub(super) fn end_cycle(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &mut self.procs[p];
        proc_.renewing = false;
        if proc_.fenced {
            return;
        }
        proc_.renew_gen += 1;
        let first = !proc_.started;
        let at = if std::mem::take(&mut proc_.renew_early) || first {
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

    /// A route read came back: [`after_route_read`] decides.
    pub(super) fn routes_read(
        &mut self,
        env: &mut Env,
        p: Slot,
        before: Vec<(SectionId, Epoch)>,
        looped: bool,
        resp: StoreResp,
    ) {
        if let Ok(StoreOk::Routes(view)) = resp {
            let proc_ = &self.procs[p];
            let alloc = proc_.allocator();
            let here: Vec<SectionId> = (0..env.cfg.spec(proc_.set).section_count())
                .filter(|&s| view.routes_to(s, &proc_.id))
                .collect();
            let read = after_route_read(
                &before,
                &here,
                &alloc.served_sections(),
                proc_.fenced,
                view.version,
                proc_.routes.version,
            );
            let dropped: Vec<SectionId> = (read.drop.into_iter())
                .filter(|&(s, epoch)| alloc.drop_section_if_epoch(s, epoch))
                .map(|(s, _)| s)
                .collect();
            let proc_ = &mut self.procs[p];
            if read.publish {
                proc_.routes = view;
            }
            if !dropped.is_empty() {
                trace!(
                    env,
                    "p{p} route read: {dropped:?} routed elsewhere, dropped"
                );
            }
            for s in dropped {
                self.wake(env, p, s);
            }
            // `renew_now.notify_one()`: wakes the waiting renewal loop, or
            // is kept for when the running renewal ends.
            if read.renew_now {
                if self.procs[p].renewing {
                    self.procs[p].renew_early = true;
                } else {
                    self.renew_start(env, p);
                }
            }
        }
        if !looped {
            return self.end_cycle(env, p);
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
