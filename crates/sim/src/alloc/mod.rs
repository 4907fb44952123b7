//! AllocSvr processes: the *real* [`Allocator`], [`Lease`] and every
//! decision of the AllocSvr's loops ([`seqsvr_alloc::ownership`]), driven
//! the way `crates/alloc/src/{node/,service.rs,handoff.rs,raiser.rs}` drive
//! them. What is modelled here is only when things happen (timers, store
//! calls, pauses); what each step decides is the shipped function's.
//!
//! - Start-up (`node/`): a fresh incarnation registers (a twin is
//!   refused and retries every `max(renew, 500 ms)`), reads the routes,
//!   builds the allocator, renews once (claiming what the grant lists),
//!   then serves.
//! - Renewal (`renew_once`): every `renew_every` on the process's *own*
//!   clock, the lease counted from the send time on that clock. A granted
//!   renewal's list is taken in by [`listed_sections`] and reconciled by
//!   [`reconcile`] (served, listed, releasing, lapsed): its drops happen
//!   *before* the lease is extended, its claims ([`claim_pieces`], each
//!   `TakeOver` naming [`take_over_known`]) after. A renewal or take-over
//!   refused because this incarnation was replaced or fenced ([`fences`])
//!   fences the process: it drops everything and never serves again.
//! - Route loop (`refresh_routes`): every `route_poll`, a linearizable
//!   route read compared with [`served_epochs`] taken before it;
//!   [`after_route_read`] says what to drop (if still at the epoch it had),
//!   whether to renew early and whether to keep the table.
//! - Service (`service.rs`): a request is admitted ([`admit`]: lease and
//!   fence) *when it starts*; its compare-and-swap (or `Current` read)
//!   happens a few microseconds later, so a pause can fall in between. An
//!   exhausted section makes the request wait (up to `wait`) for the raise.
//! - Raiser (`raiser.rs`): rounds of raises, each answer mapped as the
//!   store client maps it (`StoreErr::from`) and settled by
//!   [`settle_raise`], failed ones sent again after the [`Backoff`].
//! - Handoff (`handoff.rs`, releasing side): per move, the checks and the
//!   release ([`release_section`]: stop serving, mark releasing), the
//!   store's conditional `Handoff`, then tell the new owner (`Adopt`); if
//!   the handoff failed or its outcome is unknown, read the section back
//!   ([`decide_after_handoff`]), leave it dropped either way (never served
//!   again at the released epoch: a late copy of the handoff could still
//!   move it, bug 5), unmark it and ask for an early renewal, whose
//!   take-over claims it at a new epoch.
//! - Adopt (`handoff.rs`, receiving side), as the control loop decides
//!   it: its checks ([`adopt_pending`]), a linearizable read of the
//!   section, [`decide_adopt`], and an install only if the lease held all
//!   along since before the read ([`may_act_on_read`]).
//! - Range moves (`service.rs`, admin plane): `Release` stops serving the
//!   sections frozen for another set ([`release_moved`], under what the
//!   ownership lock orders), `Refresh` renews at once; a call for a
//!   section this set does not serve is answered `MOVED` or `NOT_SERVED`
//!   by the placement of the route table last read (`Shared::status`).
//!
//! Each process belongs to one set: it registers, renews and claims in its
//! set's store group, with an allocator over its set's span.
//!
//! Clock drift: process `p`'s monotonic clock reads `rate · t` at virtual
//! time `t`; every duration it measures (lease, timers, deadlines) is on
//! that clock. A crash loses everything in memory; a restart is a new
//! incarnation. A pause (SIGSTOP) freezes the process: what arrives
//! meanwhile is queued and handled on resume, in a random interleaving (the
//! real process has several threads).
//!
//! # Layout
//! - this file: the process state ([`AllocProc`]), what a store call is
//!   for ([`Purpose`]), and the dispatch of events and timers;
//! - `life`: start-up, crash, restart, pause, fencing;
//! - `service`: requests and the raiser;
//! - `renewal`: the renewal cycle and the route loop;
//! - `handoff`: moves (releasing side) and adopts (receiving side).
//!
//! [`listed_sections`]: seqsvr_alloc::ownership::listed_sections
//! [`reconcile`]: seqsvr_alloc::ownership::reconcile
//! [`claim_pieces`]: seqsvr_alloc::ownership::claim_pieces
//! [`take_over_known`]: seqsvr_alloc::ownership::take_over_known
//! [`fences`]: seqsvr_alloc::ownership::fences
//! [`served_epochs`]: seqsvr_alloc::ownership::served_epochs
//! [`after_route_read`]: seqsvr_alloc::ownership::after_route_read
//! [`admit`]: seqsvr_alloc::ownership::admit
//! [`settle_raise`]: seqsvr_alloc::ownership::settle_raise
//! [`Backoff`]: seqsvr_alloc::ownership::Backoff
//! [`release_section`]: seqsvr_alloc::ownership::release_section
//! [`decide_after_handoff`]: seqsvr_alloc::ownership::decide_after_handoff
//! [`adopt_pending`]: seqsvr_alloc::ownership::adopt_pending
//! [`decide_adopt`]: seqsvr_alloc::ownership::decide_adopt
//! [`may_act_on_read`]: seqsvr_alloc::ownership::may_act_on_read
//! [`release_moved`]: seqsvr_alloc::ownership::release_moved

mod handoff;
pub(crate) mod ids;
mod life;
mod renewal;
mod service;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use seqsvr_alloc::control::{Control, Event};
use seqsvr_alloc::lease::Lease;
use seqsvr_alloc::{Allocator, RaiseRequest};
use seqsvr_core::{AllocId, Epoch, Incarnation, SectionId};

use crate::env::Env;
use crate::faults::AdoptFate;
use crate::link::{Caller, Done, StoreClient, Timing};
use crate::model::{
    alloc_name, ATimer, AdminMsg, AllocInput, ClientMsg, Ev, LinkTimer, Msg, PeerMsg, Refusal,
    RouteView, Slot, StoreMsg, StoreReq, StoreResp, Work,
};
use crate::net::{Node, Time, SEC};

/// What a store call of a process is for.
#[derive(Debug)]
pub(crate) enum Purpose {
    /// Start-up registration.
    Register,
    /// Start-up's route read.
    StartRoutes,
    /// A renewal (the control loop knows when it was sent and what list
    /// it named).
    Renew,
    /// A renewal's claim of a run of sections.
    Claim,
    /// A raise.
    Raise(RaiseRequest),
    /// A route read: the sections served before it, with their epochs;
    /// `looped`: the route loop's (else the renewal's).
    Poll {
        /// Served before the read.
        before: Vec<(SectionId, Epoch)>,
        /// The route loop's read.
        looped: bool,
    },
    /// A move's store handoff, for handoff job `job`.
    Handoff {
        /// The job.
        job: u64,
    },
    /// The read-back after a failed handoff.
    Check {
        /// The job.
        job: u64,
    },
    /// An adopt's store read.
    AdoptRead {
        /// The adopt being checked.
        job: u64,
    },
    /// A worker-id call (`ids.rs`).
    Ids(crate::ids::IdPurpose),
}

/// A raiser round: raises sent together, settled together.
#[derive(Debug)]
struct Round {
    /// Raises sent.
    sent: usize,
    /// Answers still to come.
    outstanding: usize,
    /// Answers so far.
    answers: Vec<(RaiseRequest, StoreResp)>,
}

/// The move in progress (`handoff::move_section`).
#[derive(Debug)]
struct Move {
    /// The section.
    section: SectionId,
    /// The new owner.
    to: AllocId,
    /// The adopt whose answer it waits for, once handed off.
    adopt: Option<u64>,
}

/// One `AllocAdmin.Handoff` call: its moves, made one after the other on
/// a task of their own (`service.rs`), so two calls run side by side.
#[derive(Debug)]
struct Job {
    /// Moves still to make, in order.
    moves: VecDeque<(SectionId, AllocId)>,
    /// What the network does to their adopts.
    fate: AdoptFate,
    /// The move in progress.
    moving: Option<Move>,
}

/// An adopt being checked with the store.
#[derive(Debug)]
struct AdoptJob {
    /// The adopt.
    id: u64,
    /// Who sent it.
    from: Node,
    /// The section.
    section: SectionId,
    /// The epoch it names.
    epoch: Epoch,
    /// The lapse count before the read.
    lapses_before: u64,
}

/// One AllocSvr process.
#[derive(Debug)]
pub(crate) struct AllocProc {
    /// Its set.
    pub set: usize,
    /// Its AllocSvr id in its set's store group.
    pub id: AllocId,
    /// A twin slot: only a fault starts it.
    pub twin: bool,
    /// Its clock's rate relative to real time.
    pub rate: f64,
    /// Its clock's zero.
    pub base: Instant,
    /// Running (not crashed).
    pub up: bool,
    /// Life: bumped by a crash; older timers and answers are ignored.
    pub life: u32,
    /// This process start's incarnation.
    pub incarnation: Incarnation,
    /// Stopped (SIGSTOP): inputs are queued in `inbox`.
    pub paused: bool,
    /// Pause for this long right after admitting the next request.
    pub pause_on_admit: Option<Time>,
    /// Pause for this long right after the lease is next extended.
    pub pause_on_renewal: Option<Time>,
    /// Pause for this long right after the next take-over is sent.
    pub pause_on_claim: Option<Time>,
    /// Inputs that arrived while paused.
    inbox: Vec<AllocInput>,
    /// The servers are up (after the first renewal).
    pub started: bool,
    /// The store said this incarnation was replaced or fenced.
    pub fenced: bool,
    /// The real allocator (built at start-up).
    pub alloc: Option<Allocator>,
    /// The real lease.
    pub lease: Lease,
    /// Its store client.
    link: StoreClient<Purpose>,
    /// The shipped control loop: the section list, releasing marks,
    /// lapses, the renewal cycle.
    control: Control,
    /// When the running renewal's interval ends (real time).
    renew_next: Time,
    /// Guards renewal timers.
    renew_gen: u64,
    /// Take-overs of the control loop's claims still to send (one at a
    /// time).
    claims: VecDeque<(SectionId, u32)>,
    /// The route loop's read is running.
    polling: bool,
    /// Guards route-poll timers.
    poll_gen: u64,
    /// The route loop's next tick (real time).
    poll_next: Time,
    /// The raiser's round in progress.
    round: Option<Round>,
    /// Requests waiting on exhausted sections, by id, with the section.
    waiting: BTreeMap<u64, (SectionId, Work)>,
    /// The route table as last read, sent with errors.
    pub routes: RouteView,
    /// Handoff calls in progress, by id.
    jobs: BTreeMap<u64, Job>,
    /// Adopts being checked with the store.
    adopts: BTreeMap<u64, AdoptJob>,
    /// Time-ordered ids: the wall clock, holdings, claims, raises.
    pub ids: ids::IdProc,
}

impl AllocProc {
    /// A process of `set` not started (or down).
    fn new(set: usize, id: AllocId, twin: bool, rate: f64, base: Instant) -> Self {
        Self {
            set,
            id,
            twin,
            rate,
            base,
            up: false,
            life: 0,
            incarnation: 0,
            paused: false,
            pause_on_admit: None,
            pause_on_renewal: None,
            pause_on_claim: None,
            inbox: Vec::new(),
            started: false,
            fenced: false,
            alloc: None,
            lease: Lease::new(base),
            link: StoreClient::default(),
            control: Control::default(),
            renew_next: 0,
            renew_gen: 0,
            claims: VecDeque::new(),
            polling: false,
            poll_gen: 0,
            poll_next: 0,
            round: None,
            waiting: BTreeMap::new(),
            routes: RouteView::default(),
            jobs: BTreeMap::new(),
            adopts: BTreeMap::new(),
            ids: ids::IdProc::default(),
        }
    }

    /// Its clock's reading at virtual time `now`.
    fn clock(&self, now: Time) -> Instant {
        self.base + Duration::from_nanos((now as f64 * self.rate) as u64)
    }

    /// The real time a duration measured on its clock takes.
    fn real(&self, d: Time) -> Time {
        (d as f64 / self.rate).ceil() as Time
    }

    /// Whether its lease holds at virtual time `now` (by its own clock).
    pub(crate) fn lease_valid(&self, now: Time) -> bool {
        self.lease.valid_at(self.clock(now))
    }

    /// Whether it currently serves `s`: running, not fenced, lease valid by
    /// its own clock, section installed (what promise 3 is about).
    pub(crate) fn serves(&self, s: SectionId, now: Time) -> bool {
        self.up
            && !self.fenced
            && self.lease_valid(now)
            && self.alloc.as_ref().is_some_and(|a| a.is_serving(s))
    }

    fn allocator(&self) -> &Allocator {
        self.alloc.as_ref().expect("started")
    }
}

/// Every AllocSvr process slot.
#[derive(Debug)]
pub(crate) struct Allocs {
    /// By slot: first processes, then twins.
    pub procs: Vec<AllocProc>,
}

/// The store client's timings (`node.rs`, `handoff.rs`).
fn renewer(renew_every: Time) -> Timing {
    Timing {
        deadline: renew_every,
        attempt: renew_every / 4,
        hedge: true,
    }
}

fn reader(renew_every: Time) -> Timing {
    let slow = renew_every.max(SEC);
    Timing {
        deadline: slow,
        attempt: slow / 4,
        hedge: true,
    }
}

fn nanos(d: Duration) -> Time {
    d.as_nanos() as Time
}

impl Allocs {
    /// The processes of `env.cfg`: first processes up with
    /// `incarnations[set]` (as bootstrapped in each set's store group) and
    /// starting, twins down.
    pub(crate) fn new(env: &mut Env, incarnations: &[Vec<Incarnation>]) -> Self {
        let l = env.cfg.layout();
        let procs = (0..l.slots())
            .map(|p| {
                let set = l.set_of_slot(p);
                let id = alloc_name(set, l.index_of_slot(p));
                AllocProc::new(set, id, l.is_twin(p), env.cfg.alloc_rate(p), env.base)
            })
            .collect();
        let mut me = Allocs { procs };
        if let Some(ids) = &env.cfg.ids {
            for (p, skew) in ids.skew_ms.iter().enumerate() {
                me.procs[p].ids.offset_ms = *skew;
            }
        }
        for (set, incs) in incarnations.iter().enumerate() {
            for (i, inc) in incs.iter().enumerate() {
                let p = l.first_slot(set, i);
                me.procs[p].up = true;
                me.procs[p].incarnation = *inc;
                me.start(env, p);
            }
        }
        me
    }

    /// Schedules a timer of process `p` `d` after now (real time).
    fn after(&self, env: &mut Env, p: Slot, d: Time, t: ATimer) {
        let life = self.procs[p].life;
        env.after(d, Ev::Alloc { p, life, t });
    }

    /// Runs `f` on process `p`'s store client, then acts on a call it
    /// finished.
    fn link(
        &mut self,
        env: &mut Env,
        p: Slot,
        f: impl FnOnce(&mut StoreClient<Purpose>, &mut Env, &Caller<'_>) -> Done<Purpose>,
    ) {
        let proc_ = &mut self.procs[p];
        let life = proc_.life;
        let wrap = move |t: LinkTimer| Ev::Alloc {
            p,
            life,
            t: ATimer::Link(t),
        };
        let who = Caller {
            node: Node::Alloc(p),
            first: env.cfg.layout().replica(proc_.set, 0),
            life,
            rate: proc_.rate,
            wrap: &wrap,
        };
        if let Some((purpose, resp)) = f(&mut proc_.link, env, &who) {
            self.call_done(env, p, purpose, resp);
        }
    }

    /// Tells the monitor which epochs of `sections` process `p` holds
    /// installed (after an install: promise 4's lost-reply check).
    fn note_installed(&self, env: &mut Env, p: Slot, sections: &[SectionId]) {
        let proc_ = &self.procs[p];
        let Some(alloc) = proc_.alloc.as_ref() else {
            return;
        };
        for &s in sections {
            let epoch = alloc.known_epoch(s);
            if epoch != 0 {
                env.monitor.on_installed(proc_.set, s, epoch);
            }
        }
    }

    /// Starts a store call for process `p`.
    fn call(&mut self, env: &mut Env, p: Slot, req: StoreReq, purpose: Purpose, timing: Timing) {
        self.link(env, p, |l, env, who| {
            l.start(env, who, req, purpose, timing)
        });
    }

    /// Everything that reaches process `p`.
    pub(crate) fn event(&mut self, env: &mut Env, p: Slot, life: Option<u32>, input: AllocInput) {
        let proc_ = &mut self.procs[p];
        if !proc_.up {
            if let AllocInput::Msg(from, Msg::Id(crate::ids::IdMsg::Req { op, .. })) = input {
                let result = Err(crate::ids::IdRefused::Unavailable);
                let m = crate::ids::IdMsg::Resp { op, result };
                return env.send(Node::Alloc(p), from, Msg::Id(m));
            }
            // The host refuses the connection: an operator's call fails at
            // once (a cut link, by contrast, leaves it unanswered).
            if let AllocInput::Msg(from, Msg::Admin(AdminMsg::Release { id, .. }))
            | AllocInput::Msg(from, Msg::Admin(AdminMsg::Refresh { id })) = input
            {
                let result = Err("connection refused".to_string());
                env.send(
                    Node::Alloc(p),
                    from,
                    Msg::Admin(AdminMsg::Answer { id, result }),
                );
            }
            return;
        }
        if life.is_some_and(|l| l != proc_.life) {
            return;
        }
        if let AllocInput::Timer(ATimer::Resume) = input {
            return self.resume(env, p);
        }
        if proc_.paused {
            proc_.inbox.push(input);
            return;
        }
        match input {
            AllocInput::Msg(_, Msg::Client(ClientMsg::Req { op, ask })) => {
                self.admit(env, p, op, ask)
            }
            AllocInput::Msg(_, Msg::Store(StoreMsg::Resp { call, resp, .. })) => {
                self.link(env, p, |l, env, who| l.on_resp(env, who, call, resp))
            }
            AllocInput::Msg(from, Msg::Peer(PeerMsg::Adopt { id, grant, .. })) => {
                self.adopt(env, p, from, id, grant)
            }
            AllocInput::Msg(_, Msg::Peer(PeerMsg::AdoptResp { id, result })) => {
                self.adopt_answered(env, p, id, result)
            }
            AllocInput::Msg(from, Msg::Admin(AdminMsg::Release { id, first, epochs })) => {
                self.release(env, p, from, id, first, &epochs)
            }
            AllocInput::Msg(from, Msg::Admin(AdminMsg::Refresh { id })) => {
                self.refresh(env, p, from, id)
            }
            AllocInput::Msg(_, Msg::Admin(AdminMsg::Handoff { moves, fate })) => {
                let job = env.fresh_id();
                let j = Job {
                    moves: moves.into(),
                    fate,
                    moving: None,
                };
                self.procs[p].jobs.insert(job, j);
                self.next_move(env, p, job);
            }
            AllocInput::Msg(from, Msg::Id(crate::ids::IdMsg::Req { op, ns, n })) => {
                let waited = false;
                let work = crate::ids::IdWork {
                    op,
                    from,
                    ns,
                    n,
                    waited,
                };
                self.id_call(env, p, work)
            }
            AllocInput::Msg(from, m) => panic!("model bug: {m:?} from {from} at an alloc"),
            AllocInput::Timer(t) => self.timer(env, p, t),
        }
    }

    fn timer(&mut self, env: &mut Env, p: Slot, t: ATimer) {
        match t {
            ATimer::Renew(gen) if gen == self.procs[p].renew_gen => {
                self.control(env, p, Event::Tick)
            }
            ATimer::Renew(_) => {}
            ATimer::Link(lt) => self.link(env, p, |l, env, who| l.on_timer(env, who, lt)),
            ATimer::Due(timer, at) => self.control(env, p, Event::Due { timer, at }),
            ATimer::Serve(work) => self.serve(env, p, work),
            ATimer::WaitDeadline(id) => {
                if let Some((s, work)) = self.procs[p].waiting.remove(&id) {
                    self.refuse(env, p, work.op, Refusal::Exhausted(s));
                }
            }
            ATimer::RoutePoll(gen) if gen == self.procs[p].poll_gen => self.route_poll(env, p),
            ATimer::RoutePoll(_) => {}
            ATimer::Resume => unreachable!("handled before"),
            ATimer::Effects(effects) => self.perform(env, p, effects.into(), None),
            ATimer::AdoptTimeout(id) => {
                self.adopt_answered(env, p, id, Err("no answer in time".into()))
            }
            ATimer::Ids(t) => self.id_timer(env, p, t),
        }
    }

    fn call_done(&mut self, env: &mut Env, p: Slot, purpose: Purpose, resp: StoreResp) {
        match purpose {
            Purpose::Register => self.registered(env, p, resp),
            Purpose::StartRoutes => self.started_routes(env, p, resp),
            Purpose::Renew => self.renewed(env, p, resp),
            Purpose::Claim => self.claimed(env, p, resp),
            Purpose::Raise(r) => self.raise_answered(env, p, r, resp),
            Purpose::Poll { before, looped } => self.routes_read(env, p, before, looped, resp),
            Purpose::Handoff { job } => self.handed_off(env, p, job, resp),
            Purpose::Check { job } => self.checked(env, p, job, resp),
            Purpose::AdoptRead { job } => self.adopt_read(env, p, job, resp),
            Purpose::Ids(what) => self.id_call_done(env, p, what, resp),
        }
    }
}
