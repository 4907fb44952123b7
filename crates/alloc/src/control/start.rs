//! Start-up (`docs/architecture/alloc.md`, Runtime; `node/registration.rs`):
//! register the incarnation — tried again while another incarnation holds
//! the id (a twin: promise 3, nothing is served until the store admits
//! this one) or the store cannot answer — then read the route table the
//! allocator is built from, then the first renewal cycle.

use std::time::{Duration, Instant};

use seqsvr_core::{AllocId, Incarnation};

use super::{Control, Effect, Timer};

/// How long start-up waits before trying a registration or a route read
/// again after the store could not answer.
pub const RETRY_START: Duration = Duration::from_millis(500);
/// A twin's registration is tried again every renewal interval, at least
/// this often…
pub const TWIN_RETRY_MIN: Duration = Duration::from_millis(100);
/// …and at most this rarely: the previous incarnation's lease may end
/// soon, and every interval waited is an interval not served.
pub const TWIN_RETRY_MAX: Duration = Duration::from_millis(500);

/// The store's answer to a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterAnswer {
    /// Registered: this incarnation holds the id.
    Ok,
    /// Another incarnation holds the id and its lease may still run.
    Twin,
    /// The store could not answer (no leader, unreachable): try again.
    Unavailable,
    /// Refused for good (a configuration the store does not accept).
    Refused,
}

impl Control {
    /// The process starts: register.
    pub(super) fn start(&mut self, alloc: AllocId, incarnation: Incarnation) -> Vec<Effect> {
        self.me = Some((alloc, incarnation));
        vec![Effect::Register]
    }

    /// The registration was answered: read the routes once registered,
    /// else try again later (a twin every renewal interval within
    /// [`TWIN_RETRY_MIN`]..=[`TWIN_RETRY_MAX`], an unavailable store after
    /// [`RETRY_START`]), or give up on a refusal for good.
    pub(super) fn registered(&mut self, now: Instant, answer: RegisterAnswer) -> Vec<Effect> {
        let wait = match answer {
            RegisterAnswer::Ok => return vec![Effect::ReadStartRoutes],
            RegisterAnswer::Refused => return vec![Effect::GiveUp],
            RegisterAnswer::Twin => self.renew_every.clamp(TWIN_RETRY_MIN, TWIN_RETRY_MAX),
            RegisterAnswer::Unavailable => RETRY_START,
        };
        vec![self.set_timer(Timer::Register, now + wait)]
    }

    /// Start-up's route read came back: with a table (the allocator is
    /// built) the first renewal cycle starts; else the read is tried again.
    pub(super) fn start_routes_read(&mut self, now: Instant, ok: bool) -> Vec<Effect> {
        if ok {
            self.start_renewal(now, true)
        } else {
            vec![self.set_timer(Timer::StartRoutes, now + RETRY_START)]
        }
    }

    /// A timer is due: what it was set for.
    pub(super) fn due(&mut self, now: Instant, timer: Timer, at: Instant) -> Vec<Effect> {
        if !self.take_due(timer, at) {
            return Vec::new();
        }
        match timer {
            Timer::Register => vec![Effect::Register],
            Timer::StartRoutes => vec![Effect::ReadStartRoutes],
            Timer::Raises => self.raises_due(now),
        }
    }
}
