//! A process's life: start-up (registration, a twin's retries, the first
//! route read), crash, restart as a new incarnation, pause and resume, and
//! fencing when the store says this incarnation was replaced.

use std::time::Duration;

use seqsvr_alloc::control::{Control, Event, RegisterAnswer};
use seqsvr_alloc::{AllocConfig, Allocator};
use seqsvr_store_core::command::Rejection;

use crate::env::{trace, Env};
use crate::model::{ATimer, Ev, Slot, StoreFail, StoreOk, StoreReq, StoreResp};
use crate::net::{Time, MS, US};

use super::{reader, AllocProc, Allocs, Purpose};

impl Allocs {
    /// Starts (or restarts) the process: its control loop orders
    /// start-up (`control/start.rs`), registration first.
    pub(super) fn start(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &mut self.procs[p];
        proc_.control = Control::new(Duration::from_nanos(env.cfg.renew_every));
        let start = Event::Start {
            alloc: proc_.id.clone(),
            incarnation: proc_.incarnation,
        };
        self.control(env, p, start);
    }

    /// [`Effect::Register`](seqsvr_alloc::control::Effect::Register).
    pub(super) fn register(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &self.procs[p];
        let req = StoreReq::Register {
            alloc: proc_.id.clone(),
            slot: p,
            incarnation: proc_.incarnation,
        };
        let t = reader(env.cfg.renew_every);
        self.call(env, p, req, Purpose::Register, t);
    }

    /// [`Effect::ReadStartRoutes`](seqsvr_alloc::control::Effect::ReadStartRoutes).
    pub(super) fn read_start_routes(&mut self, env: &mut Env, p: Slot) {
        let t = reader(env.cfg.renew_every);
        self.call(env, p, StoreReq::Routes, Purpose::StartRoutes, t);
    }

    /// The registration came back: [`Event::Registered`].
    pub(super) fn registered(&mut self, env: &mut Env, p: Slot, resp: StoreResp) {
        let answer = match resp {
            Ok(_) => RegisterAnswer::Ok,
            Err(StoreFail::Rejected(Rejection::Twin { live, .. })) => {
                trace!(
                    env,
                    "p{p} ({}) is a twin of live incarnation {live:x}: not serving, retrying",
                    self.procs[p].id
                );
                RegisterAnswer::Twin
            }
            Err(e) if e.retryable() => {
                trace!(env, "p{p} store not ready ({e:?}), retrying registration");
                RegisterAnswer::Unavailable
            }
            Err(e) => {
                // `node/` gives up (the process exits): never expected.
                let what = format!("p{p}: registration refused for good: {e:?}");
                env.monitor.violate(env.now, 0, what);
                RegisterAnswer::Refused
            }
        };
        self.control(env, p, Event::Registered(answer));
    }

    /// Start-up's route read came back: the allocator is built from it,
    /// then [`Event::StartRoutesRead`] (the first renewal).
    pub(super) fn started_routes(&mut self, env: &mut Env, p: Slot, resp: StoreResp) {
        let Ok(StoreOk::Routes(view)) = resp else {
            return self.control(env, p, Event::StartRoutesRead { ok: false });
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
        proc_.routes = view;
        trace!(
            env,
            "p{p} ({}) registered as {:x}",
            proc_.id,
            proc_.incarnation
        );
        self.control(env, p, Event::StartRoutesRead { ok: true });
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
