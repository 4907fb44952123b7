//! The renewal cycle (`docs/architecture/failover.md`, Leases): renew,
//! drop what is no longer ours *before* extending the lease, claim what is
//! newly ours, read the routes if the renewal names a newer table, then
//! wait for the next interval (or less, when asked).

use std::time::Instant;

use crate::ownership::{claim_pieces, listed_sections, reconcile};

use super::{Control, Cycle, Effect, Renewal};

impl Control {
    /// A renewal is due (`Tick`) or asked for (`asked`): sends one unless a
    /// cycle runs (then, if asked, the next is due at once) or the process
    /// was fenced. The lease will count from `now`.
    pub(super) fn start_renewal(&mut self, now: Instant, asked: bool) -> Vec<Effect> {
        if self.fenced {
            return Vec::new();
        }
        if self.cycle.is_some() {
            self.early |= asked;
            return Vec::new();
        }
        self.early = false;
        self.due = Some(now + self.renew_every);
        let known_version = self.listed.0;
        self.cycle = Some(Cycle::Renewing {
            sent: now,
            known_version,
        });
        vec![Effect::Renew { known_version }]
    }

    /// A granted renewal: takes in its list ([`listed_sections`]), then
    /// [`reconcile`]s it with what is served: the drops come *before* the
    /// lease is extended — a request admitted by the new lease must not
    /// find a section that moved away while the lease had lapsed — and
    /// after a lapse every served section is dropped and every listed one
    /// claimed again (promises 1 and 3; the simulation's bugs 1 and 2).
    /// Sections being handed off are neither dropped nor claimed.
    pub(super) fn renewed(
        &mut self,
        now: Instant,
        grant: Renewal,
        served: &[seqsvr_core::SectionId],
    ) -> Vec<Effect> {
        let Some(Cycle::Renewing {
            sent,
            known_version,
        }) = self.cycle
        else {
            return Vec::new(); // no renewal in flight: a stray answer
        };
        if self.fenced {
            return self.end_cycle(now);
        }
        let Some(listed) = listed_sections(&mut self.listed, known_version, grant.list) else {
            let mut out = vec![Effect::ListForgotten { known_version }];
            out.extend(self.end_cycle(now));
            return out;
        };
        // No valid lease: everything served is dropped and everything
        // listed claimed again. A lapse is only a lease that was held and
        // ran out; the first grant of a process finds none to lapse (the
        // counter behind `seqsvr_alloc_lease_lapses_total` counts real
        // lapses only). The safety count `lapses` still moves on both: a
        // store read taken while no lease was held is not acted on.
        let expired = !self.lease_valid(now);
        let lapsed = expired && self.lease_until.is_some();
        let releasing: Vec<_> = self.releasing.keys().copied().collect();
        let r = reconcile(served, &listed, &releasing, expired);
        if expired {
            self.lapses += 1;
        }
        let until = sent + grant.lease;
        self.lease_until = Some(self.lease_until.map_or(until, |u| u.max(until)));
        self.cycle = Some(Cycle::Claiming {
            route_version: grant.route_version,
        });
        vec![
            Effect::Drop {
                sections: r.drop,
                lapsed,
            },
            Effect::ExtendLease {
                sent,
                lease: grant.lease,
                lapsed,
            },
            Effect::Draining(grant.draining),
            Effect::Claim {
                pieces: claim_pieces(&r.claim),
            },
        ]
    }

    /// The renewal failed: the cycle ends; if the store said this
    /// incarnation was replaced or fenced, it is fenced first.
    pub(super) fn renew_failed(&mut self, now: Instant, fenced: bool) -> Vec<Effect> {
        if !matches!(self.cycle, Some(Cycle::Renewing { .. })) {
            return Vec::new();
        }
        let mut out = if fenced { self.fence() } else { Vec::new() };
        out.extend(self.end_cycle(now));
        out
    }

    /// One claim answered: only a fencing answer changes anything.
    pub(super) fn taken_over(&mut self, fenced: bool) -> Vec<Effect> {
        if fenced {
            self.fence()
        } else {
            Vec::new()
        }
    }

    /// Every claim answered: read the routes if the renewal named a table
    /// newer than the one held, else end the cycle.
    pub(super) fn claims_done(&mut self, now: Instant, held_routes: u64) -> Vec<Effect> {
        let Some(Cycle::Claiming { route_version }) = self.cycle else {
            return Vec::new();
        };
        if !self.fenced && route_version > held_routes {
            self.cycle = Some(Cycle::ReadingRoutes);
            return vec![Effect::ReadRoutes];
        }
        self.end_cycle(now)
    }

    /// Ends the running cycle: the next renewal is due at the end of this
    /// one's interval, at once if one was asked for meanwhile or this was
    /// start-up's, never once fenced.
    pub(super) fn end_cycle(&mut self, now: Instant) -> Vec<Effect> {
        self.cycle = None;
        let first = !std::mem::replace(&mut self.started, true);
        let next = if self.fenced {
            None
        } else if std::mem::take(&mut self.early) || first {
            Some(now)
        } else {
            Some(self.due.map_or(now, |d| d.max(now)))
        };
        vec![Effect::CycleEnded { next, first }]
    }
}
