//! The AllocSvr's control loop as one state machine: [`Control`] steps on
//! [`Event`]s (timers, the store's answers) at a time passed in, and
//! returns the [`Effect`]s to perform, in order. No I/O, no clock of its
//! own, no randomness: the node (`node/`, `handoff.rs`) performs the
//! effects with real store calls and timers, and the seeded simulation
//! (`crates/sim`) performs the same effects in its simulated world, so the
//! order of steps it checks is the one that runs
//! (`docs/architecture/alloc.md`, Control; `docs/architecture/simulation.md`).
//!
//! What it holds is what the loops used to hold apart: the section list of
//! the last renewal that carried one, the lease's end as granted (counted
//! from the send time, never shortened), how many granted renewals found
//! the lease lapsed, the sections being handed off (releasing marks), the
//! fence, and the renewal cycle (in flight, when the next one is due,
//! whether one was asked for meanwhile). Its decisions are the pure
//! functions of [`ownership`](crate::ownership).
//!
//! One renewal cycle, as [`renewal`] orders it:
//! 1. [`Event::Tick`] (the interval passed) or [`Event::RenewNow`]:
//!    [`Effect::Renew`], the lease counted from `now`;
//! 2. [`Event::Renewed`]: [`Effect::Drop`] of what is no longer ours (all
//!    of it after a lapse) *before* [`Effect::ExtendLease`] (promises 1
//!    and 3; bugs 1 and 2 of the simulation), then [`Effect::Claim`];
//! 3. [`Event::TakenOver`] per claim, [`Event::ClaimsDone`] after the
//!    last: [`Effect::ReadRoutes`] if the renewal names a newer route
//!    table, else the cycle ends ([`Effect::CycleEnded`], naming when the
//!    next one is due: at once if asked for meanwhile).
//!
//! A store answer saying this incarnation was replaced or fenced gives
//! [`Effect::Fence`]: everything dropped, no renewal again (promise 3).
//!
//! # Layout
//! - this file: [`Control`], [`Event`], [`Effect`], [`Control::on`];
//! - `renewal`: the renewal cycle and its claims;
//! - `routes`: a route read (the route loop's or the renewal's);
//! - `handoff`: the releasing marks of planned moves and their end.

mod handoff;
mod renewal;
mod routes;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use seqsvr_core::{Epoch, SectionId};

use crate::ownership::Released;

/// What a granted renewal says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The lease granted, counted from when the renewal was sent.
    pub lease: Duration,
    /// The section list and its version, or `None` when the store says
    /// the list is unchanged since the version the renewal named.
    pub list: Option<(u64, Vec<SectionId>)>,
    /// The route table's version at the store.
    pub route_version: u64,
    /// Whether the store says this AllocSvr is being drained.
    pub draining: bool,
}

/// What a route read found, with what was served around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteFacts {
    /// The sections served *before* the read, with their epochs
    /// ([`served_epochs`](crate::ownership::served_epochs)).
    pub before: Vec<(SectionId, Epoch)>,
    /// The sections the table routes to this AllocSvr.
    pub routed_here: Vec<SectionId>,
    /// The sections served now.
    pub served: Vec<SectionId>,
    /// The table's version.
    pub version: u64,
    /// The version of the table held (published) now.
    pub held: u64,
}

/// What happens to the control loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The renewal interval named by the last [`Effect::CycleEnded`]
    /// passed.
    Tick,
    /// A renewal is asked for now: a section routed here is not served,
    /// a failed handoff left a section to claim again, or an operator
    /// asked (`AllocAdmin.Refresh`).
    RenewNow,
    /// The renewal in flight was granted; `served`: the sections served
    /// now (read under the lock that orders changes to them).
    Renewed {
        /// What the store granted.
        grant: Renewal,
        /// The sections served now.
        served: Vec<SectionId>,
    },
    /// The renewal in flight failed; `fenced`: the store said this
    /// incarnation was replaced or fenced ([`fences`](crate::ownership::fences)).
    RenewFailed {
        /// Replaced or fenced.
        fenced: bool,
    },
    /// One take-over of the renewal's claims was answered; `fenced` as
    /// for [`Event::RenewFailed`].
    TakenOver {
        /// Replaced or fenced.
        fenced: bool,
    },
    /// Every take-over of [`Effect::Claim`] was answered; `held_routes`:
    /// the version of the route table held now.
    ClaimsDone {
        /// The version of the route table held now.
        held_routes: u64,
    },
    /// A route read came back (`None`: it failed); `renewal`: the
    /// renewal's own read ([`Effect::ReadRoutes`]), else the route loop's.
    RoutesRead {
        /// What it found.
        read: Option<RouteFacts>,
        /// The renewal's read.
        renewal: bool,
    },
    /// A handoff of `section` ended: handed off (`handed_off`), or it
    /// failed or its outcome is unknown (read back, left dropped).
    HandoffSettled {
        /// The section.
        section: SectionId,
        /// The store moved it.
        handed_off: bool,
    },
}

/// What the executor does, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Send a renewal naming the list version held; its answer is
    /// [`Event::Renewed`] or [`Event::RenewFailed`].
    Renew {
        /// The list version held (0: none).
        known_version: u64,
    },
    /// Stop serving these sections (those still served).
    Drop {
        /// The sections, in order.
        sections: Vec<SectionId>,
        /// A lease held before had lapsed (every served section is
        /// dropped); false on a process's first grant.
        lapsed: bool,
    },
    /// Stop serving these sections if each is still at the epoch given.
    DropIfEpoch {
        /// The sections and epochs.
        sections: Vec<(SectionId, Epoch)>,
    },
    /// Extend the lease: valid until `sent + lease` (never shortened).
    ExtendLease {
        /// When the renewal was sent.
        sent: Instant,
        /// The lease granted.
        lease: Duration,
        /// A lease held before had lapsed before this grant (counted in
        /// `seqsvr_alloc_lease_lapses_total`); a process's first grant
        /// finds no lease and is no lapse.
        lapsed: bool,
    },
    /// Report draining (or not) as the store says.
    Draining(bool),
    /// Claim these sections with take-overs, one per piece
    /// ([`claim_pieces`](crate::ownership::claim_pieces)), each naming
    /// [`take_over_known`](crate::ownership::take_over_known); answer with
    /// [`Event::TakenOver`] per piece, then [`Event::ClaimsDone`].
    Claim {
        /// `(first, count)` per take-over.
        pieces: Vec<(SectionId, u32)>,
    },
    /// Read the route table (the renewal's read); answer with
    /// [`Event::RoutesRead`] (`renewal: true`).
    ReadRoutes,
    /// Publish the table just read.
    PublishRoutes,
    /// Ask for a renewal: deliver [`Event::RenewNow`] (at once if the
    /// loop waits, else when the running cycle has ended).
    WakeRenewal,
    /// The store says this incarnation was replaced or fenced: drop every
    /// section and never serve again.
    Fence,
    /// The renewal said "unchanged" of a list not held: not a grant to act
    /// on (the next renewal asks for the whole list).
    ListForgotten {
        /// The version the renewal named.
        known_version: u64,
    },
    /// The renewal cycle ended; `next`: when the next is due (`None`:
    /// fenced, no more renewals); `first`: the first cycle (start-up's).
    CycleEnded {
        /// When to deliver [`Event::Tick`].
        next: Option<Instant>,
        /// Start-up's cycle.
        first: bool,
    },
}

/// The renewal in flight, and where its cycle stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cycle {
    /// The renewal was sent at `sent`, naming `known_version`.
    Renewing {
        /// The send time (the lease counts from it).
        sent: Instant,
        /// The list version named.
        known_version: u64,
    },
    /// Its take-overs are out; `route_version`: the renewal's.
    Claiming {
        /// The route table version the renewal named.
        route_version: u64,
    },
    /// Its route read is out.
    ReadingRoutes,
}

/// The AllocSvr's control loop (module docs).
#[derive(Debug, Clone)]
pub struct Control {
    /// The renewal interval.
    renew_every: Duration,
    /// The lease's end as granted so far (`None`: never granted).
    lease_until: Option<Instant>,
    /// The section list of the last renewal that carried one, and its
    /// version (0: none).
    listed: (u64, Vec<SectionId>),
    /// How many granted renewals found no valid lease (a lapse, or the
    /// process's first grant). A decision based
    /// on a store read may be acted on only if this did not change since
    /// before the read ([`may_act_on_read`](crate::ownership::may_act_on_read)).
    lapses: u64,
    /// Sections being handed off: stopped here, the store's handoff (or
    /// its read-back) in flight. Renewals neither claim nor drop them.
    releasing: BTreeMap<SectionId, Released>,
    /// The store said this incarnation was replaced or fenced.
    fenced: bool,
    /// The renewal cycle running, if any.
    cycle: Option<Cycle>,
    /// When the running cycle's renewal interval ends.
    due: Option<Instant>,
    /// A renewal was asked for while a cycle ran: the next is due at once.
    early: bool,
    /// The first cycle (start-up's) has ended.
    started: bool,
}

impl Control {
    /// A control loop renewing every `renew_every`, with no lease, no
    /// list and nothing released.
    pub fn new(renew_every: Duration) -> Self {
        Self {
            renew_every,
            lease_until: None,
            listed: (0, Vec::new()),
            lapses: 0,
            releasing: BTreeMap::new(),
            fenced: false,
            cycle: None,
            due: None,
            early: false,
            started: false,
        }
    }

    /// Steps on `event` at `now` (this process's monotonic clock); returns
    /// the effects to perform, in order.
    pub fn on(&mut self, now: Instant, event: Event) -> Vec<Effect> {
        match event {
            Event::Tick => self.start_renewal(now, false),
            Event::RenewNow => self.start_renewal(now, true),
            Event::Renewed { grant, served } => self.renewed(now, grant, &served),
            Event::RenewFailed { fenced } => self.renew_failed(now, fenced),
            Event::TakenOver { fenced } => self.taken_over(fenced),
            Event::ClaimsDone { held_routes } => self.claims_done(now, held_routes),
            Event::RoutesRead { read, renewal } => self.routes_read(now, read, renewal),
            Event::HandoffSettled {
                section,
                handed_off,
            } => self.handoff_settled(section, handed_off),
        }
    }

    /// Whether the lease holds at `now`, as granted so far.
    pub fn lease_valid(&self, now: Instant) -> bool {
        self.lease_until.is_some_and(|until| now < until)
    }

    /// How many granted renewals found no valid lease (the first grant
    /// included: a safety count, not the lapse metric).
    pub fn lapses(&self) -> u64 {
        self.lapses
    }

    /// Whether the store said this incarnation was replaced or fenced.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// Whether a renewal cycle is running.
    pub fn renewing(&self) -> bool {
        self.cycle.is_some()
    }

    /// The section list held and its version.
    pub fn listed(&self) -> &(u64, Vec<SectionId>) {
        &self.listed
    }

    /// Marks the store's verdict that this incarnation was replaced or
    /// fenced; returns [`Effect::Fence`] the first time.
    fn fence(&mut self) -> Vec<Effect> {
        if std::mem::replace(&mut self.fenced, true) {
            Vec::new()
        } else {
            vec![Effect::Fence]
        }
    }
}

impl Default for Control {
    /// Renewing every second (the node's default `renew_ms`).
    fn default() -> Self {
        Self::new(Duration::from_millis(1000))
    }
}
