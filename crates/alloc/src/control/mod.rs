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
//! - `handoff`: the releasing marks of planned moves and their end, and
//!   adopts (their checks before the store read, and the install after).

mod handoff;
mod raise;
mod renewal;
mod routes;
mod start;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use seqsvr_core::{AllocId, Epoch, Grant, Incarnation, SectionId};
use seqsvr_store_api::SectionInfo;

use crate::error::{AdoptRefusal, CallError, StoreErr};
use crate::ownership::{AdoptNamed, AfterHandoff, Backoff, Released};

pub use raise::RaiseState;
pub use start::{RegisterAnswer, RETRY_START, TWIN_RETRY_MAX, TWIN_RETRY_MIN};

/// A timer the control loop sets ([`Effect::SetTimer`]); the executor
/// delivers [`Event::Due`] with it when its time comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// Registration is tried again.
    Register,
    /// Start-up's route read is tried again.
    StartRoutes,
    /// Raises that failed are sent again (the raiser's back-off).
    Raises,
}

/// One section of an adopt, as the store's read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptCheck {
    /// The store's linearizable record of the section.
    pub info: SectionInfo,
    /// The epoch the adopt names.
    pub named: Epoch,
    /// The newest epoch installed here (0: never).
    pub installed: Epoch,
}

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
    /// The process starts as `incarnation` of AllocSvr `alloc`: register.
    Start {
        /// The AllocSvr id.
        alloc: AllocId,
        /// This process start's incarnation.
        incarnation: Incarnation,
    },
    /// The store answered the registration.
    Registered(RegisterAnswer),
    /// Start-up's route read came back (`ok`: with a usable table, and
    /// the allocator is built from it).
    StartRoutesRead {
        /// It succeeded.
        ok: bool,
    },
    /// A timer set by [`Effect::SetTimer`] for `at` is due (one replaced
    /// by a later setting is ignored).
    Due {
        /// The timer.
        timer: Timer,
        /// When it was set for.
        at: Instant,
    },
    /// The allocator queued raises (the hot path flagged sections short
    /// of headroom).
    RaisesQueued,
    /// The store answered one raise of the round.
    RaiseAnswered {
        /// The section.
        section: SectionId,
        /// The epoch the raise named.
        epoch: Epoch,
        /// The ceiling asked for.
        to: u64,
        /// The store's answer.
        answer: Result<u64, StoreErr>,
    },
    /// Every raise of the round was answered and settled; `sent`: how many
    /// it sent (0: there was nothing queued).
    RaiseRoundDone {
        /// Raises sent in the round.
        sent: usize,
    },
    /// The store answered a move's `Handoff`: `Ok` with the new epoch and
    /// the new owner's peer address, `Err` when it failed or its outcome
    /// is unknown.
    HandoffAnswered {
        /// The section.
        section: SectionId,
        /// The new epoch and the new owner's peer address, or why not.
        answer: Result<(Epoch, String), String>,
    },
    /// The read-back of a section whose handoff failed (`None`: the read
    /// failed or did not return it).
    HandoffChecked {
        /// The section.
        section: SectionId,
        /// The store's record.
        read: Option<SectionInfo>,
    },
    /// An adopt arrived (`AllocPeer.Adopt`) naming these sections, with
    /// what is installed here of each ([`AdoptNamed::of`]).
    AdoptAsked {
        /// The sections and epochs named, in the request's order.
        named: Vec<AdoptNamed>,
    },
    /// An adopt's store read ([`Effect::ReadAdopt`]) came back;
    /// `lapses_before`: the count the effect named.
    AdoptRead {
        /// Per section named and not installed yet.
        checks: Vec<AdoptCheck>,
        /// The lapse count before the read.
        lapses_before: u64,
    },
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
}

/// What the executor does, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Register the incarnation; answer with [`Event::Registered`].
    Register,
    /// Read the route table to build the allocator from; answer with
    /// [`Event::StartRoutesRead`].
    ReadStartRoutes,
    /// Deliver [`Event::Due`] with `timer` at `at` (a later setting of the
    /// same timer replaces it).
    SetTimer {
        /// The timer.
        timer: Timer,
        /// When.
        at: Instant,
    },
    /// The store refused the registration for good: start-up fails.
    GiveUp,
    /// Take the allocator's queued raises and send them to the store;
    /// answer with [`Event::RaiseAnswered`] per raise, then
    /// [`Event::RaiseRoundDone`].
    RaiseRound,
    /// Apply a durable ceiling (ignored if the section changed epoch).
    ApplyRaise {
        /// The section.
        section: SectionId,
        /// The raise's epoch.
        epoch: Epoch,
        /// The ceiling, durable in the store.
        landed: u64,
    },
    /// A raise was refused for good: stop serving the section if it is
    /// still at `epoch` (someone else owns it, promise 3).
    DropRaised {
        /// The section.
        section: SectionId,
        /// The raise's epoch.
        epoch: Epoch,
    },
    /// A raise failed; it is sent again after the back-off. `transient`:
    /// the store may not have answered (else it disagrees on the set:
    /// retried slowly, loudly).
    RaiseFailed {
        /// The section.
        section: SectionId,
        /// The failure may pass.
        transient: bool,
    },
    /// Queue these sections' raises again (their back-off ended).
    Requeue {
        /// The sections.
        sections: Vec<SectionId>,
    },
    /// Send the store's conditional `Handoff` of `section`, released at
    /// `epoch`, to `to`; answer with [`Event::HandoffAnswered`].
    Handoff {
        /// The section.
        section: SectionId,
        /// The new owner.
        to: AllocId,
        /// The epoch released.
        epoch: Epoch,
    },
    /// Tell the new owner at its peer address to adopt `section` at
    /// `epoch` (best effort: its next renewal claims it otherwise).
    Adopt {
        /// The section.
        section: SectionId,
        /// The new epoch.
        epoch: Epoch,
        /// The new owner's peer address.
        addr: String,
    },
    /// Read `section` back from the store (linearizable); answer with
    /// [`Event::HandoffChecked`].
    ReadBack {
        /// The section.
        section: SectionId,
    },
    /// A failed handoff's section stays dropped; `after`: what the store's
    /// record says (`None`: not read).
    LeftDropped {
        /// The section.
        section: SectionId,
        /// The store's verdict.
        after: Option<AfterHandoff>,
    },
    /// The adopt is refused before anything is read, nothing changed: it
    /// names no section or too many, one not in the set, or the process
    /// is not admitted (lease lapsed or fenced: promise 3).
    AdoptDenied(CallError),
    /// Read the declarations of these sections' names, then their store
    /// records (linearizable), and answer with [`Event::AdoptRead`] naming
    /// `lapses_before`. If either read fails nothing is installed.
    ReadAdopt {
        /// The sections and epochs named and not installed yet.
        sections: Vec<(SectionId, Epoch)>,
        /// [`Control::lapses`] before the reads.
        lapses_before: u64,
    },
    /// Install an adopt's grants (the store confirmed them and the lease
    /// held since before the read); none: every section named is
    /// installed here already at its epoch or a newer one (a repeat).
    Install {
        /// The grants.
        grants: Vec<Grant>,
    },
    /// The adopt is refused, nothing installed.
    AdoptRefused(AdoptRefusal),
    /// The adopt is refused: the lease lapsed (or the process was fenced)
    /// since before the read, so the store's answer may be stale
    /// (promise 3).
    AdoptNotAdmitted,
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
    /// This process: its AllocSvr id and incarnation (set by
    /// [`Event::Start`]).
    me: Option<(AllocId, Incarnation)>,
    /// The raiser's rounds and back-off.
    raise: RaiseState,
    /// The timers set, and when each is due.
    timers: BTreeMap<Timer, Instant>,
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
            me: None,
            raise: RaiseState::default(),
            timers: BTreeMap::new(),
        }
    }

    /// The raiser's back-off bounds (default: the raiser's defaults).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.raise = RaiseState::new(backoff);
        self
    }

    /// Steps on `event` at `now` (this process's monotonic clock); returns
    /// the effects to perform, in order.
    pub fn on(&mut self, now: Instant, event: Event) -> Vec<Effect> {
        match event {
            Event::Start { alloc, incarnation } => self.start(alloc, incarnation),
            Event::Registered(answer) => self.registered(now, answer),
            Event::StartRoutesRead { ok } => self.start_routes_read(now, ok),
            Event::Due { timer, at } => self.due(now, timer, at),
            Event::RaisesQueued => self.raises_queued(),
            Event::RaiseAnswered {
                section,
                epoch,
                to,
                answer,
            } => self.raise_answered(section, epoch, to, &answer),
            Event::RaiseRoundDone { sent } => self.raise_round_done(now, sent),
            Event::HandoffAnswered { section, answer } => self.handoff_answered(section, answer),
            Event::HandoffChecked { section, read } => self.handoff_checked(section, read),
            Event::AdoptAsked { named } => self.adopt_asked(now, &named),
            Event::AdoptRead {
                checks,
                lapses_before,
            } => self.adopt_read(now, &checks, lapses_before),
            Event::Tick => self.start_renewal(now, false),
            Event::RenewNow => self.start_renewal(now, true),
            Event::Renewed { grant, served } => self.renewed(now, grant, &served),
            Event::RenewFailed { fenced } => self.renew_failed(now, fenced),
            Event::TakenOver { fenced } => self.taken_over(fenced),
            Event::ClaimsDone { held_routes } => self.claims_done(now, held_routes),
            Event::RoutesRead { read, renewal } => self.routes_read(now, read, renewal),
        }
    }

    /// The renewal interval.
    pub fn renew_every(&self) -> Duration {
        self.renew_every
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

    /// Sets `timer` to fire at `at` (replacing an earlier setting).
    fn set_timer(&mut self, timer: Timer, at: Instant) -> Effect {
        self.timers.insert(timer, at);
        Effect::SetTimer { timer, at }
    }

    /// Whether `timer`, set for `at`, is the one set now (and clears it):
    /// a delivery of a timer replaced by a later setting is ignored.
    fn take_due(&mut self, timer: Timer, at: Instant) -> bool {
        if self.timers.get(&timer) == Some(&at) {
            self.timers.remove(&timer);
            true
        } else {
            false
        }
    }

    /// When `timer` is set for, if it is.
    pub fn timer(&self, timer: Timer) -> Option<Instant> {
        self.timers.get(&timer).copied()
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

/// Where an executor's control loop lives: steps it on an event and
/// returns the effects left for the caller to perform (an executor may
/// perform some itself, under the lock it keeps the loop in).
pub trait Stepper: Send + Sync {
    /// Steps the control loop on `event` at `now`.
    fn step(&self, now: Instant, event: Event) -> Vec<Effect>;
}

impl Stepper for std::sync::Mutex<Control> {
    fn step(&self, now: Instant, event: Event) -> Vec<Effect> {
        let mut c = self.lock().unwrap_or_else(|e| e.into_inner());
        c.on(now, event)
    }
}

impl Default for Control {
    /// Renewing every second (the node's default `renew_ms`).
    fn default() -> Self {
        Self::new(Duration::from_millis(1000))
    }
}
