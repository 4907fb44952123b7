//! A process's life: start-up (registration, a twin's retries, the first
//! route read), crash, restart as a new incarnation, pause and resume, and
//! fencing when the store says this incarnation was replaced.

use std::time::Duration;

use seqsvr_alloc::control::{Control, Event};
use seqsvr_alloc::{AllocConfig, Allocator};
use seqsvr_store_core::command::Rejection;

use crate::env::{trace, Env};
use crate::model::{ATimer, Ev, Slot, StoreFail, StoreOk, StoreReq, StoreResp};
use crate::net::{Time, MS, US};

use super::{reader, AllocProc, Allocs, Purpose};

impl Allocs {
    /// Starts (or restarts) the process: registration first.
    pub(super) fn start(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &self.procs[p];
        let req = StoreReq::Register {
            alloc: proc_.id.clone(),
            slot: p,
            incarnation: proc_.incarnation,
        };
        let t = reader(env.cfg.renew_every);
        self.call(env, p, req, Purpose::Register, t);
    }

    pub(super) fn read_start_routes(&mut self, env: &mut Env, p: Slot) {
        let t = reader(env.cfg.renew_every);
        self.call(env, p, StoreReq::Routes, Purpose::StartRoutes, t);
    }

    pub(super) fn registered(&mut self, env: &mut Env, p: Slot, resp: StoreResp) {
        let retry = match resp {
            Ok(_) => return self.read_start_routes(env, p),
            Err(StoreFail::Rejected(Rejection::Twin { live, .. })) => {
                trace!(
                    env,
                    "p{p} ({}) is a twin of live incarnation {live:x}: not serving, retrying",
                    self.procs[p].id
                );
                env.cfg.renew_every.max(500 * MS)
            }
            Err(e) if e.retryable() => {
                trace!(env, "p{p} store not ready ({e:?}), retrying registration");
                500 * MS
            }
            Err(e) => {
                // `node.rs` gives up (the process exits): never expected.
                let what = format!("p{p}: registration refused for good: {e:?}");
                env.monitor.violate(env.now, 0, what);
                500 * MS
            }
        };
        let d = self.procs[p].real(retry);
        self.after(env, p, d, ATimer::RegisterRetry);
    }

    /// Start-up read the routes: build the allocator and renew once.
    pub(super) fn started_routes(&mut self, env: &mut Env, p: Slot, resp: StoreResp) {
        let Ok(StoreOk::Routes(view)) = resp else {
            let d = self.procs[p].real(500 * MS);
            return self.after(env, p, d, ATimer::RoutesRetry);
        };
        let cfg = AllocConfig {
            raise_ahead_fraction: env.cfg.raise_ahead_fraction,
            adaptive: None,
            ..AllocConfig::default()
        };
        let proc_ = &mut self.procs[p];
        let spec = env.cfg.spec(proc_.set).clone();
        let alloc =
            Allocator::with_incarnation(spec, &cfg, proc_.incarnation).expect("a valid spec");
        proc_.alloc = Some(alloc);
        proc_.control = Control::new(Duration::from_nanos(env.cfg.renew_every));
        proc_.routes = view;
        trace!(
            env,
            "p{p} ({}) registered as {:x}",
            proc_.id,
            proc_.incarnation
        );
        self.control(env, p, Event::RenewNow);
    }

    /// kill -9: memory is gone.
    pub(crate) fn crash(&mut self, p: Slot) {
        let proc_ = &self.procs[p];
        if !proc_.up {
            return;
        }
        let fresh = AllocProc::new(
            proc_.set,
            proc_.id.clone(),
            proc_.twin,
            proc_.rate,
            proc_.base,
        );
        let life = proc_.life + 1;
        let ids = proc_.ids.after_crash();
        self.procs[p] = AllocProc { life, ids, ..fresh };
    }

    /// Starts a process that is down, as a new incarnation.
    pub(crate) fn restart(&mut self, env: &mut Env, p: Slot) {
        if self.procs[p].up {
            return;
        }
        let incarnation = loop {
            let i = env.rng.next_u64();
            if i != 0 {
                break i;
            }
        };
        let proc_ = &mut self.procs[p];
        proc_.up = true;
        proc_.incarnation = incarnation;
        trace!(env, "p{p} ({}) starts as {incarnation:x}", proc_.id);
        self.start(env, p);
    }

    /// SIGSTOP for `d` (a no-op if already stopped or down).
    pub(crate) fn pause(&mut self, env: &mut Env, p: Slot, d: Time) {
        let proc_ = &mut self.procs[p];
        if !proc_.up || proc_.paused {
            return;
        }
        proc_.paused = true;
        trace!(env, "p{p} paused for {} ms", d / MS);
        self.after(env, p, d, ATimer::Resume);
    }

    /// SIGCONT: what queued up is handled now, by several threads at once
    /// in the real process, so in an arbitrary interleaving.
    pub(super) fn resume(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &mut self.procs[p];
        proc_.paused = false;
        trace!(env, "p{p} resumes");
        let inbox = std::mem::take(&mut proc_.inbox);
        let life = proc_.life;
        for input in inbox {
            let d = env.rng.range(0, 50 * US);
            env.after(d, Ev::Resumed { p, life, input });
        }
    }

    /// The store says this incarnation was replaced or fenced
    /// (`Shared::fence`): everything is dropped, nothing served again.
    pub(super) fn fence(&mut self, env: &mut Env, p: Slot, why: &str) {
        let proc_ = &mut self.procs[p];
        if proc_.fenced {
            return;
        }
        proc_.fenced = true;
        env.stats.fenced += 1;
        let served = proc_
            .alloc
            .as_ref()
            .map(|a| a.served_sections())
            .unwrap_or_default();
        trace!(
            env,
            "p{p} ({}) fenced ({why}): dropping {served:?}",
            proc_.id
        );
        self.drop_sections(env, p, &served, "fenced");
    }
}
