//! AllocSvr processes: the *real* [`Allocator`], [`Lease`] and ownership
//! decisions ([`seqsvr_alloc::ownership`]), driven the way
//! `crates/alloc/src/{node,service,handoff,raiser}.rs` drive them.
//!
//! - Start-up (`node.rs`): a fresh incarnation registers (a twin is
//!   refused and retries every `max(renew, 500 ms)`), reads the routes,
//!   builds the allocator, renews once (claiming what the grant lists),
//!   then serves.
//! - Renewal (`renew_once`): every `renew_every` on the process's *own*
//!   clock, the lease counted from the send time on that clock. A granted
//!   renewal is reconciled by [`reconcile`] (served, listed, releasing,
//!   lapsed): its drops happen *before* the lease is extended, its claims
//!   (one `TakeOver` per run, naming [`Allocator::known_epoch`]) after. A
//!   renewal or take-over refused because this incarnation was replaced or
//!   fenced fences the process: it drops everything and never serves again.
//! - Route loop (`refresh_routes`): every `route_poll`, a linearizable
//!   route read; sections served before the read and routed elsewhere are
//!   dropped (if still at the epoch they had), a section newly routed
//!   here asks for an early renewal.
//! - Service (`service.rs`): a request checks the lease (and the fence)
//!   *when it starts*; its compare-and-swap (or `Current` read) happens a
//!   few microseconds later, so a pause can fall in between. An exhausted
//!   section makes the request wait (up to `wait`) for the raise.
//! - Raiser (`raiser.rs`): rounds of raises, settled together as
//!   `Raiser::settle` does.
//! - Handoff (`handoff.rs`, releasing side): per move, mark the section
//!   releasing and stop serving it, the store's conditional `Handoff`, then
//!   tell the new owner (`Adopt`); if the handoff failed or its outcome is
//!   unknown, read the section back ([`decide_after_handoff`]), leave it
//!   dropped either way (never served again at the released epoch: a late
//!   copy of the handoff could still move it, bug 5), unmark it and ask
//!   for an early renewal, whose take-over claims it at a new epoch.
//! - Adopt (`handoff.rs`, receiving side): a linearizable read of the
//!   section, [`decide_adopt`], and an install only if the lease held all
//!   along since before the read.
//!
//! Clock drift: process `p`'s monotonic clock reads `rate · t` at virtual
//! time `t`; every duration it measures (lease, timers, deadlines) is on
//! that clock. A crash loses everything in memory; a restart is a new
//! incarnation. A pause (SIGSTOP) freezes the process: what arrives
//! meanwhile is queued and handled on resume, in a random interleaving (the
//! real process has several threads).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use seqsvr_alloc::handoff::{
    Released, ADOPT_CONNECT, ADOPT_READ_DEADLINE, ADOPT_TIMEOUT, CHECK_DEADLINE, HANDOFF_DEADLINE,
    STORE_ATTEMPT,
};
use seqsvr_alloc::lease::Lease;
use seqsvr_alloc::ownership::{
    decide_adopt, decide_after_handoff, reconcile, AdoptRefusal, Adoption, AfterHandoff,
};
use seqsvr_alloc::{AllocConfig, AllocError, Allocator, RaiseRequest};
use seqsvr_core::{AllocId, Epoch, Incarnation, SectionId};
use seqsvr_store::types::{Rejection, Reply};

use crate::env::{trace, Env};
use crate::faults::AdoptFate;
use crate::link::{Caller, Done, StoreClient, Timing};
use crate::model::{
    alloc_name, slot_of_addr, ATimer, AdminMsg, AllocInput, Ask, ClientMsg, Ev, LinkTimer, Msg,
    OpRef, PeerMsg, Refusal, RouteView, Slot, StoreFail, StoreMsg, StoreOk, StoreReq, StoreResp,
    Work,
};
use crate::net::{Node, Time, MS, SEC, US};

/// What a store call of a process is for.
#[derive(Debug)]
pub(crate) enum Purpose {
    /// Start-up registration.
    Register,
    /// Start-up's route read.
    StartRoutes,
    /// A renewal sent at this instant of the process's clock, knowing the
    /// section list of `known_version`.
    Renew {
        /// The send time (the lease counts from it).
        sent: Instant,
        /// The list version sent.
        known_version: u64,
    },
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
}

/// A raiser round: raises sent together, settled together.
#[derive(Debug)]
struct Round {
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
    /// What it was released at.
    released: Released,
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
    /// Its AllocSvr id in the store.
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
    /// A renewal cycle (renewal, claims, route refresh) is running.
    renewing: bool,
    /// When the next cycle is due (real time).
    renew_next: Time,
    /// Renew as soon as the current cycle ends.
    renew_early: bool,
    /// Guards renewal timers.
    renew_gen: u64,
    /// The section list of the last renewal that carried one, and its
    /// version.
    listed: (u64, Vec<SectionId>),
    /// Claims left in this cycle.
    claims: VecDeque<(SectionId, u32)>,
    /// Refresh the routes at the end of this cycle.
    cycle_refresh: bool,
    /// The route loop's read is running.
    polling: bool,
    /// Guards route-poll timers.
    poll_gen: u64,
    /// The route loop's next tick (real time).
    poll_next: Time,
    /// The raiser's round in progress.
    round: Option<Round>,
    /// Sections whose raise failed, to requeue after the back-off.
    retry: Vec<SectionId>,
    /// The raiser's back-off (local clock).
    backoff: Time,
    /// Requests waiting on exhausted sections, by id, with the section.
    waiting: BTreeMap<u64, (SectionId, Work)>,
    /// The route table as last read, sent with errors.
    pub routes: RouteView,
    /// Sections being handed off (`service::Ownership::releasing`).
    releasing: BTreeMap<SectionId, Released>,
    /// Granted renewals that found the lease lapsed.
    lapses: u64,
    /// Handoff calls in progress, by id.
    jobs: BTreeMap<u64, Job>,
    /// Adopts being checked with the store.
    adopts: BTreeMap<u64, AdoptJob>,
}

impl AllocProc {
    /// A process not started (or down).
    fn new(id: AllocId, twin: bool, rate: f64, base: Instant) -> Self {
        Self {
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
            inbox: Vec::new(),
            started: false,
            fenced: false,
            alloc: None,
            lease: Lease::new(base),
            link: StoreClient::default(),
            renewing: false,
            renew_next: 0,
            renew_early: false,
            renew_gen: 0,
            listed: (0, Vec::new()),
            claims: VecDeque::new(),
            cycle_refresh: false,
            polling: false,
            poll_gen: 0,
            poll_next: 0,
            round: None,
            retry: Vec::new(),
            backoff: 10 * MS,
            waiting: BTreeMap::new(),
            routes: RouteView::default(),
            releasing: BTreeMap::new(),
            lapses: 0,
            jobs: BTreeMap::new(),
            adopts: BTreeMap::new(),
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

    /// `Shared::may_serve`: a decision taken from a store read made when
    /// the lapse count was `lapses_before` may be acted on now.
    fn may_serve(&self, now: Time, lapses_before: u64) -> bool {
        !self.fenced && self.lease_valid(now) && self.lapses == lapses_before
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
    /// The processes of `env.cfg`: first processes up with `incarnations`
    /// (as bootstrapped in the store) and starting, twins down.
    pub(crate) fn new(env: &mut Env, incarnations: &[Incarnation]) -> Self {
        let n = env.cfg.allocs;
        let procs = (0..env.cfg.slots())
            .map(|p| {
                let id = alloc_name(p % n);
                AllocProc::new(id, p >= n, env.cfg.alloc_rate(p), env.base)
            })
            .collect();
        let mut me = Allocs { procs };
        for (p, inc) in incarnations.iter().enumerate() {
            me.procs[p].up = true;
            me.procs[p].incarnation = *inc;
            me.start(env, p);
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
            life,
            rate: proc_.rate,
            wrap: &wrap,
        };
        if let Some((purpose, resp)) = f(&mut proc_.link, env, &who) {
            self.call_done(env, p, purpose, resp);
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
        if !proc_.up || life.is_some_and(|l| l != proc_.life) {
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
            AllocInput::Msg(from, m) => panic!("model bug: {m:?} from {from} at an alloc"),
            AllocInput::Timer(t) => self.timer(env, p, t),
        }
    }

    fn timer(&mut self, env: &mut Env, p: Slot, t: ATimer) {
        match t {
            ATimer::Renew(gen) if gen == self.procs[p].renew_gen => self.renew_start(env, p),
            ATimer::Renew(_) => {}
            ATimer::Link(lt) => self.link(env, p, |l, env, who| l.on_timer(env, who, lt)),
            ATimer::RaiseRetry => {
                let proc_ = &mut self.procs[p];
                if let Some(alloc) = &proc_.alloc {
                    alloc.requeue_raises(&proc_.retry);
                }
                proc_.retry.clear();
                self.raiser_kick(env, p);
            }
            ATimer::Serve(work) => self.serve(env, p, work),
            ATimer::WaitDeadline(id) => {
                if let Some((s, work)) = self.procs[p].waiting.remove(&id) {
                    self.refuse(env, p, work.op, Refusal::Exhausted(s));
                }
            }
            ATimer::RoutePoll(gen) if gen == self.procs[p].poll_gen => self.route_poll(env, p),
            ATimer::RoutePoll(_) => {}
            ATimer::RegisterRetry => self.start(env, p),
            ATimer::RoutesRetry => self.read_start_routes(env, p),
            ATimer::Resume => unreachable!("handled before"),
            ATimer::DropLater(drops) => {
                self.drop_sections(env, p, &drops, "renewal (late drop)");
                self.after(env, p, 0, ATimer::Claims);
            }
            ATimer::Claims => self.next_claim(env, p),
            ATimer::AdoptTimeout(id) => {
                self.adopt_answered(env, p, id, Err("no answer in time".into()))
            }
        }
    }

    /// Starts (or restarts) the process: registration first.
    fn start(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &self.procs[p];
        let req = StoreReq::Register {
            alloc: proc_.id.clone(),
            slot: p,
            incarnation: proc_.incarnation,
        };
        let t = reader(env.cfg.renew_every);
        self.call(env, p, req, Purpose::Register, t);
    }

    fn read_start_routes(&mut self, env: &mut Env, p: Slot) {
        let t = reader(env.cfg.renew_every);
        self.call(env, p, StoreReq::Routes, Purpose::StartRoutes, t);
    }

    fn registered(&mut self, env: &mut Env, p: Slot, resp: StoreResp) {
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
    fn started_routes(&mut self, env: &mut Env, p: Slot, resp: StoreResp) {
        let Ok(StoreOk::Routes(view)) = resp else {
            let d = self.procs[p].real(500 * MS);
            return self.after(env, p, d, ATimer::RoutesRetry);
        };
        let cfg = AllocConfig {
            raise_ahead_fraction: env.cfg.raise_ahead_fraction,
        };
        let proc_ = &mut self.procs[p];
        let alloc = Allocator::with_incarnation(env.cfg.spec.clone(), &cfg, proc_.incarnation)
            .expect("a valid spec");
        proc_.alloc = Some(alloc);
        proc_.routes = view;
        trace!(
            env,
            "p{p} ({}) registered as {:x}",
            proc_.id,
            proc_.incarnation
        );
        self.renew_start(env, p);
    }

    /// kill -9: memory is gone.
    pub(crate) fn crash(&mut self, p: Slot) {
        let proc_ = &self.procs[p];
        if !proc_.up {
            return;
        }
        let fresh = AllocProc::new(proc_.id.clone(), proc_.twin, proc_.rate, proc_.base);
        let life = proc_.life + 1;
        self.procs[p] = AllocProc { life, ..fresh };
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
    fn resume(&mut self, env: &mut Env, p: Slot) {
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
    fn fence(&mut self, env: &mut Env, p: Slot, why: &str) {
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

    /// A client request arrives: the lease is checked now, the numbers are
    /// taken a little later (`service.rs`).
    fn admit(&mut self, env: &mut Env, p: Slot, op: OpRef, ask: Ask) {
        let proc_ = &self.procs[p];
        if !proc_.started {
            return self.refuse(env, p, op, Refusal::Unavailable);
        }
        if proc_.fenced {
            return self.refuse(env, p, op, Refusal::Fenced);
        }
        if !env.cfg.knobs.skip_lease_check && !proc_.lease_valid(env.now) {
            env.stats.lease_expired += 1;
            return self.refuse(env, p, op, Refusal::LeaseExpired);
        }
        let spec = &env.cfg.spec;
        let mut sections: Vec<SectionId> = ask
            .uids()
            .iter()
            .filter_map(|u| spec.section_of(*u))
            .collect();
        sections.dedup();
        for s in sections {
            self.check_exclusive(env, p, s);
        }
        if let Some(d) = self.procs[p].pause_on_admit.take() {
            self.pause(env, p, d);
        }
        let d = env.rng.range(2 * US, 40 * US);
        let work = Work {
            op,
            ask,
            out: Vec::new(),
            deadline: None,
        };
        self.after(env, p, d, ATimer::Serve(work));
    }

    /// Promise 3: when `p` admits a request for `s` that it serves, no
    /// other process may serve `s` at this instant.
    fn check_exclusive(&self, env: &mut Env, p: Slot, s: SectionId) {
        if !self.procs[p]
            .alloc
            .as_ref()
            .is_some_and(|x| x.is_serving(s))
        {
            return;
        }
        for (q, other) in self.procs.iter().enumerate() {
            if q != p && other.serves(s, env.now) {
                let what = format!(
                    "p{p} ({}) admits a request for section {s} while p{q} ({}) also serves it (lease valid, section installed)",
                    self.procs[p].id, other.id
                );
                env.monitor.violate(env.now, 3, what);
            }
        }
    }

    /// The compare-and-swap part of a request (and its retries after a
    /// raise landed), or the read of `Current`.
    fn serve(&mut self, env: &mut Env, p: Slot, mut work: Work) {
        let Some(alloc) = self.procs[p].alloc.as_ref() else {
            return;
        };
        let uids = match &work.ask {
            Ask::Current(uid) => {
                let result = match alloc.current(*uid) {
                    Ok(v) => Ok(vec![v]),
                    Err(AllocError::NotOwner { section }) => Err(Refusal::NotOwner(section)),
                    Err(e) => panic!("model bug: unexpected allocator error {e}"),
                };
                return match result {
                    Ok(v) => self.answer(env, p, work.op, v),
                    Err(why) => self.refuse(env, p, work.op, why),
                };
            }
            Ask::Next(uids) => uids.clone(),
        };
        let done = work.out.len();
        let res = alloc.next_batch(&uids[done..], &mut work.out);
        let new: Vec<(u64, u64)> = uids[done..]
            .iter()
            .zip(&work.out[done..])
            .map(|(u, v)| (*u, *v))
            .collect();
        for (uid, v) in new {
            self.handed_out(env, p, uid, v);
        }
        match res {
            Ok(()) => {
                let out = std::mem::take(&mut work.out);
                self.answer(env, p, work.op, out);
            }
            Err(AllocError::Exhausted { section }) => {
                let id = env.fresh_id();
                let left = match work.deadline {
                    None => {
                        let d = self.procs[p].real(env.cfg.wait);
                        work.deadline = Some(env.now + d);
                        d
                    }
                    Some(t) => t.saturating_sub(env.now),
                };
                self.after(env, p, left, ATimer::WaitDeadline(id));
                self.procs[p].waiting.insert(id, (section, work));
            }
            Err(AllocError::NotOwner { section }) => {
                self.refuse(env, p, work.op, Refusal::NotOwner(section))
            }
            Err(e) => panic!("model bug: unexpected allocator error {e}"),
        }
        self.raiser_kick(env, p);
    }

    fn answer(&mut self, env: &mut Env, p: Slot, op: OpRef, out: Vec<u64>) {
        let m = ClientMsg::Resp {
            op,
            result: Ok(out),
            routes: None,
            version: self.procs[p].routes.version,
        };
        env.send(Node::Alloc(p), Node::Client(op.client), Msg::Client(m));
    }

    /// Wakes requests waiting on `s` (its ceiling or ownership changed).
    fn wake(&mut self, env: &mut Env, p: Slot, s: SectionId) {
        let ids: Vec<u64> = (self.procs[p].waiting.iter())
            .filter(|(_, (ws, _))| *ws == s)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some((_, work)) = self.procs[p].waiting.remove(&id) {
                self.serve(env, p, work);
            }
        }
    }

    fn handed_out(&mut self, env: &mut Env, p: Slot, uid: u64, v: u64) {
        env.stats.handed_out += 1;
        let s = env.cfg.spec.section_of(uid).expect("uid in set");
        let epoch = (self.procs[p].alloc.as_ref())
            .and_then(|x| x.section_state(s))
            .map_or(0, |st| st.epoch);
        let ceiling = env.truth.sections[s as usize].max_seq;
        env.monitor.on_handout(env.now, p, s, epoch, v, ceiling);
    }

    /// Answers a client with an error (and the route table, for the errors
    /// that carry one).
    fn refuse(&mut self, env: &mut Env, p: Slot, op: OpRef, why: Refusal) {
        trace!(env, "p{p} refuses c{}'s call: {why:?}", op.client);
        let proc_ = &self.procs[p];
        let routes = match why {
            Refusal::NotOwner(_) | Refusal::LeaseExpired | Refusal::Fenced => {
                Some(proc_.routes.clone())
            }
            _ => None,
        };
        let m = ClientMsg::Resp {
            op,
            result: Err(why),
            routes,
            version: proc_.routes.version,
        };
        env.send(Node::Alloc(p), Node::Client(op.client), Msg::Client(m));
    }

    /// Stops serving `sections` (those still served) and wakes their
    /// waiting requests.
    fn drop_sections(&mut self, env: &mut Env, p: Slot, sections: &[SectionId], why: &str) {
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
    fn renew_start(&mut self, env: &mut Env, p: Slot) {
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

    /// A renewal came back (`renew_once`): reconcile with
    /// [`reconcile`], drops first, then the lease, then the claims (a
    /// moment later: they are store calls of their own).
    ///
    /// The [`Knobs`](crate::Knobs) `lease_before_drop` and
    /// `keep_sections_after_lapse` restore the orders of bugs 1 and 2.
    fn renewed(&mut self, env: &mut Env, p: Slot, sent: Instant, known: u64, resp: StoreResp) {
        let ren = match resp {
            Ok(StoreOk::Renewed(ren)) => ren,
            Err(StoreFail::Rejected(
                e @ (Rejection::StaleIncarnation { .. } | Rejection::NotRegistered { .. }),
            )) => {
                self.fence(env, p, &e.to_string());
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
        if !ren.unchanged {
            proc_.listed = (ren.sections_version, ren.sections.clone());
        } else if proc_.listed.0 == 0 || proc_.listed.0 != known {
            trace!(
                env,
                "p{p} renewal says the list is unchanged, but none is held"
            );
            proc_.listed = (0, Vec::new());
            return self.end_cycle(env, p);
        }
        let listed = proc_.listed.1.clone();
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
        proc_.claims = runs(&r.claim).into();
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
    fn next_claim(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &mut self.procs[p];
        if proc_.fenced {
            proc_.claims.clear();
            return self.end_cycle(env, p);
        }
        if let Some((first, count)) = proc_.claims.pop_front() {
            let alloc = proc_.allocator();
            let known = (first..first + count)
                .map(|s| alloc.known_epoch(s))
                .collect();
            let req = StoreReq::TakeOver {
                alloc: proc_.id.clone(),
                incarnation: proc_.incarnation,
                first,
                known,
            };
            let t = reader(env.cfg.renew_every);
            return self.call(env, p, req, Purpose::Claim, t);
        }
        if std::mem::take(&mut proc_.cycle_refresh) {
            return self.refresh_routes(env, p, false);
        }
        self.end_cycle(env, p)
    }

    fn claimed(&mut self, env: &mut Env, p: Slot, resp: StoreResp) {
        match resp {
            Ok(StoreOk::Written(Reply::TakenOver { grants, .. })) => {
                let alloc = self.procs[p].allocator();
                match alloc.install(&grants) {
                    Ok(n) => trace!(env, "p{p} took over {grants:?} (installed {n})"),
                    Err(e) => trace!(env, "p{p} take-over not installed: {e}"),
                }
                for g in grants {
                    self.wake(env, p, g.section);
                }
                self.raiser_kick(env, p);
            }
            Err(StoreFail::Rejected(
                e @ (Rejection::StaleIncarnation { .. } | Rejection::NotRegistered { .. }),
            )) => self.fence(env, p, &e.to_string()),
            other => trace!(env, "p{p} take-over failed, will retry: {other:?}"),
        }
        self.next_claim(env, p);
    }

    /// Ends a renewal cycle; the next one is due after `renew_every`, or at
    /// once if asked for meanwhile. A fenced process renews no more.
    fn end_cycle(&mut self, env: &mut Env, p: Slot) {
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
    fn route_poll(&mut self, env: &mut Env, p: Slot) {
        if self.procs[p].polling || self.procs[p].alloc.is_none() {
            return;
        }
        self.procs[p].polling = true;
        self.refresh_routes(env, p, true);
    }

    /// `refresh_routes`: a route read, remembering what was served before.
    fn refresh_routes(&mut self, env: &mut Env, p: Slot, looped: bool) {
        let alloc = self.procs[p].allocator();
        let before: Vec<(SectionId, Epoch)> = (alloc.served_sections().into_iter())
            .filter_map(|s| Some((s, alloc.section_state(s)?.epoch)))
            .collect();
        let t = reader(env.cfg.renew_every);
        self.call(
            env,
            p,
            StoreReq::Routes,
            Purpose::Poll { before, looped },
            t,
        );
    }

    /// A route read came back.
    fn routes_read(
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
            let mut dropped = Vec::new();
            for (s, epoch) in before {
                if !view.routes_to(s, &proc_.id) && alloc.drop_section_if_epoch(s, epoch) {
                    dropped.push(s);
                }
            }
            let n = env.cfg.spec.section_count();
            let gained = (0..n).any(|s| view.routes_to(s, &proc_.id) && !alloc.is_serving(s));
            let proc_ = &mut self.procs[p];
            if view.version >= proc_.routes.version {
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
            if gained && !self.procs[p].fenced {
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

    fn call_done(&mut self, env: &mut Env, p: Slot, purpose: Purpose, resp: StoreResp) {
        match purpose {
            Purpose::Register => self.registered(env, p, resp),
            Purpose::StartRoutes => self.started_routes(env, p, resp),
            Purpose::Renew {
                sent,
                known_version,
            } => self.renewed(env, p, sent, known_version, resp),
            Purpose::Claim => self.claimed(env, p, resp),
            Purpose::Raise(r) => self.raise_answered(env, p, r, resp),
            Purpose::Poll { before, looped } => self.routes_read(env, p, before, looped, resp),
            Purpose::Handoff { job } => self.handed_off(env, p, job, resp),
            Purpose::Check { job } => self.checked(env, p, job, resp),
            Purpose::AdoptRead { job } => self.adopt_read(env, p, job, resp),
        }
    }

    /// Starts a round if none is running and raises are queued.
    fn raiser_kick(&mut self, env: &mut Env, p: Slot) {
        let proc_ = &mut self.procs[p];
        if proc_.round.is_some() {
            return;
        }
        let Some(alloc) = proc_.alloc.as_ref() else {
            return;
        };
        let reqs = alloc.take_raise_requests();
        if reqs.is_empty() {
            return;
        }
        proc_.round = Some(Round {
            outstanding: reqs.len(),
            answers: Vec::new(),
        });
        for r in reqs {
            let proc_ = &self.procs[p];
            let req = StoreReq::Raise {
                alloc: proc_.id.clone(),
                incarnation: proc_.incarnation,
                section: r.section,
                epoch: r.epoch,
                to: r.to,
            };
            let t = reader(env.cfg.renew_every);
            self.call(env, p, req, Purpose::Raise(r), t);
        }
    }

    fn raise_answered(&mut self, env: &mut Env, p: Slot, r: RaiseRequest, resp: StoreResp) {
        let proc_ = &mut self.procs[p];
        let round = proc_.round.as_mut().expect("a round is running");
        round.answers.push((r, resp));
        round.outstanding -= 1;
        if round.outstanding > 0 {
            return;
        }
        // Settle the whole round before another may start (the raiser's
        // loop only takes new requests after `run_once` returns).
        let answers = std::mem::take(&mut round.answers);
        let mut retry = Vec::new();
        for (r, resp) in answers {
            self.settle(env, p, r, resp, &mut retry);
        }
        let proc_ = &mut self.procs[p];
        proc_.round = None;
        if !retry.is_empty() {
            proc_.retry.extend(retry);
            let d = proc_.real(proc_.backoff);
            proc_.backoff = (proc_.backoff * 2).min(SEC);
            self.after(env, p, d, ATimer::RaiseRetry);
        } else if proc_.retry.is_empty() {
            proc_.backoff = 10 * MS;
        }
        self.raiser_kick(env, p);
    }

    /// `Raiser::settle`, with the store's answers mapped as
    /// `StoreErr::from` maps them.
    fn settle(
        &mut self,
        env: &mut Env,
        p: Slot,
        r: RaiseRequest,
        resp: StoreResp,
        retry: &mut Vec<SectionId>,
    ) {
        let landed = match resp {
            Ok(StoreOk::Written(Reply::Raised { max_seq })) => max_seq,
            Err(StoreFail::Rejected(Rejection::NotAbove { current, .. })) if current >= r.to => {
                current
            }
            Err(StoreFail::Rejected(
                Rejection::StaleEpoch { .. }
                | Rejection::OwnedElsewhere { .. }
                | Rejection::StaleIncarnation { .. }
                | Rejection::NotRegistered { .. },
            )) => {
                let alloc = self.procs[p].allocator();
                if alloc.drop_section_if_epoch(r.section, r.epoch) {
                    trace!(env, "p{p} raise {r:?} refused for good: section dropped");
                    self.wake(env, p, r.section);
                }
                return;
            }
            Err(e) if e.retryable() => return retry.push(r.section),
            other => {
                let what = format!("p{p}: raise {r:?} refused: {other:?}");
                env.monitor.violate(env.now, 0, what);
                return retry.push(r.section);
            }
        };
        let alloc = self.procs[p].allocator();
        if alloc.apply_raise(r.section, r.epoch, landed) {
            self.wake(env, p, r.section);
        }
    }

    /// Starts job `job`'s next move (`handoff::move_section`), releasing
    /// its section first; ends the job when none is left.
    fn next_move(&mut self, env: &mut Env, p: Slot, job: u64) {
        loop {
            let proc_ = &mut self.procs[p];
            let Some(j) = proc_.jobs.get_mut(&job) else {
                return;
            };
            let Some((section, to)) = j.moves.pop_front() else {
                proc_.jobs.remove(&job);
                return;
            };
            let Some(alloc) = proc_.alloc.as_ref() else {
                continue;
            };
            // `release`: checks, then the releasing mark and the drop.
            if to == proc_.id || proc_.releasing.contains_key(&section) {
                trace!(env, "p{p} handoff of section {section} to {to} refused");
                continue;
            }
            let Some(state) = alloc.section_state(section) else {
                trace!(env, "p{p} handoff of section {section}: not served here");
                continue;
            };
            if !alloc.drop_section_if_epoch(section, state.epoch) {
                continue;
            }
            let released = Released {
                epoch: state.epoch,
                ceiling: state.ceiling,
            };
            proc_.releasing.insert(section, released);
            let j = proc_.jobs.get_mut(&job).expect("the job");
            j.moving = Some(Move {
                section,
                to: to.clone(),
                released,
                adopt: None,
            });
            trace!(
                env,
                "p{p} releases section {section} at epoch {} for {to}",
                released.epoch
            );
            let req = StoreReq::Handoff {
                from: proc_.id.clone(),
                incarnation: proc_.incarnation,
                to,
                section,
                epoch: released.epoch,
            };
            self.wake(env, p, section);
            let t = Timing {
                deadline: nanos(HANDOFF_DEADLINE),
                attempt: nanos(STORE_ATTEMPT),
                hedge: true,
            };
            return self.call(env, p, req, Purpose::Handoff { job }, t);
        }
    }

    /// The store answered a move's handoff.
    fn handed_off(&mut self, env: &mut Env, p: Slot, job: u64, resp: StoreResp) {
        let proc_ = &mut self.procs[p];
        let Some(j) = proc_.jobs.get_mut(&job) else {
            return;
        };
        let fate = j.fate;
        let m = j.moving.as_mut().expect("a move");
        match resp {
            Ok(StoreOk::HandedOff { grant, to_addr }) => {
                proc_.releasing.remove(&m.section);
                trace!(
                    env,
                    "p{p} handed section {} to {} ({grant:?})",
                    m.section,
                    m.to
                );
                let id = env.fresh_id();
                m.adopt = Some(id);
                let msg = || Msg::Peer(PeerMsg::Adopt { id, grant });
                if let Some(to) = slot_of_addr(&to_addr) {
                    let (me, them) = (Node::Alloc(p), Node::Alloc(to));
                    match fate {
                        AdoptFate::Normal => env.send(me, them, msg()),
                        AdoptFate::Lost => {}
                        AdoptFate::Delayed(d) => env.send_later(d, me, them, msg()),
                        AdoptFate::Duplicated(d) => {
                            env.send(me, them, msg());
                            env.send_later(d, me, them, msg());
                        }
                    }
                }
                let d = proc_.real(nanos(ADOPT_CONNECT + ADOPT_TIMEOUT));
                self.after(env, p, d, ATimer::AdoptTimeout(id));
            }
            other => {
                // Failed or unknown: read it back (`settle`).
                trace!(
                    env,
                    "p{p} handoff of section {} failed: {other:?}",
                    m.section
                );
                let req = StoreReq::Read { section: m.section };
                let purpose = Purpose::Check { job };
                let t = Timing {
                    deadline: nanos(CHECK_DEADLINE),
                    attempt: nanos(STORE_ATTEMPT),
                    hedge: true,
                };
                self.call(env, p, req, purpose, t);
            }
        }
    }

    /// The read-back after a failed handoff: [`decide_after_handoff`]
    /// (`settle`). Never serves the section again at the released epoch:
    /// leaves it dropped, unmarks it, and asks for an early renewal
    /// (`renew_now.notify_one()`), whose take-over claims it at a new epoch
    /// if it is still ours, fencing any late copy of the handoff.
    fn checked(&mut self, env: &mut Env, p: Slot, job: u64, resp: StoreResp) {
        let proc_ = &mut self.procs[p];
        let Some(m) = proc_.jobs.get_mut(&job).and_then(|j| j.moving.take()) else {
            return;
        };
        let what = match resp {
            Ok(StoreOk::Section(info)) => {
                match decide_after_handoff(&info, &proc_.id, proc_.incarnation, m.released.epoch) {
                    AfterHandoff::Reclaim => {
                        env.stats.reclaimed += 1;
                        "still ours at the released epoch: left dropped for a take-over"
                    }
                    AfterHandoff::LeaveDropped { .. } => "moved on: left dropped",
                }
            }
            _ => "not checked: left dropped",
        };
        trace!(env, "p{p} section {}: {what}", m.section);
        proc_.releasing.remove(&m.section);
        if !proc_.fenced {
            if proc_.renewing {
                proc_.renew_early = true;
            } else {
                self.renew_start(env, p);
            }
        }
        self.wake(env, p, m.section);
        self.raiser_kick(env, p);
        self.next_move(env, p, job);
    }

    /// The new owner answered the adopt `id` (or did not in time): its
    /// move is over.
    fn adopt_answered(&mut self, env: &mut Env, p: Slot, id: u64, result: Result<u32, String>) {
        let proc_ = &mut self.procs[p];
        let job = (proc_.jobs.iter())
            .find(|(_, j)| j.moving.as_ref().is_some_and(|m| m.adopt == Some(id)))
            .map(|(job, _)| *job);
        let Some(job) = job else {
            return;
        };
        let m = (proc_.jobs.get_mut(&job))
            .and_then(|j| j.moving.take())
            .expect("a move");
        trace!(
            env,
            "p{p} adopt of section {} by {}: {result:?}",
            m.section,
            m.to
        );
        self.next_move(env, p, job);
    }

    /// An adopt arrives (`handoff::adopt`).
    fn adopt(&mut self, env: &mut Env, p: Slot, from: Node, id: u64, grant: seqsvr_core::Grant) {
        let now = env.now;
        let proc_ = &mut self.procs[p];
        let s = grant.section;
        let refused = if !proc_.started {
            Some("unavailable".to_string())
        } else if !env.cfg.spec.has_section(s) {
            Some(format!("section {s} is not in this set"))
        } else if proc_.fenced || !proc_.lease_valid(now) {
            Some("not admitted".to_string())
        } else {
            None
        };
        if let Some(why) = refused {
            return self.adopt_reply(env, p, from, id, Err(why));
        }
        let alloc = proc_.allocator();
        if alloc.known_epoch(s) >= grant.epoch {
            return self.adopt_reply(env, p, from, id, Ok(0));
        }
        if env.cfg.knobs.adopt_unchecked {
            let result = alloc
                .install(&[grant])
                .map(|n| n as u32)
                .map_err(|e| e.to_string());
            trace!(
                env,
                "p{p} installs an adopt unchecked: {grant:?} -> {result:?}"
            );
            self.wake(env, p, s);
            return self.adopt_reply(env, p, from, id, result);
        }
        let job = env.fresh_id();
        proc_.adopts.insert(
            job,
            AdoptJob {
                id,
                from,
                section: s,
                epoch: grant.epoch,
                lapses_before: proc_.lapses,
            },
        );
        let t = Timing {
            deadline: nanos(ADOPT_READ_DEADLINE),
            attempt: nanos(ADOPT_READ_DEADLINE / 3),
            hedge: true,
        };
        self.call(
            env,
            p,
            StoreReq::Read { section: s },
            Purpose::AdoptRead { job },
            t,
        );
    }

    /// An adopt's store read came back: [`decide_adopt`], then install only
    /// if the lease held all along.
    fn adopt_read(&mut self, env: &mut Env, p: Slot, job: u64, resp: StoreResp) {
        let now = env.now;
        let proc_ = &mut self.procs[p];
        let Some(j) = proc_.adopts.remove(&job) else {
            return;
        };
        let result = match resp {
            Ok(StoreOk::Section(info)) => {
                let alloc = proc_.allocator();
                let installed = alloc.known_epoch(j.section);
                match decide_adopt(&info, &proc_.id, proc_.incarnation, j.epoch, installed) {
                    Err(e @ AdoptRefusal::NoRoom { .. }) => {
                        let what = format!("p{p}: the store has no room for an adopt: {e}");
                        env.monitor.violate(now, 0, what);
                        Err(e.to_string())
                    }
                    Err(e) => Err(e.to_string()),
                    // The store's answer may be stale if the lease lapsed
                    // since before the read (promise 3).
                    Ok(_) if !proc_.may_serve(now, j.lapses_before) => {
                        Err("not admitted: the lease lapsed meanwhile".into())
                    }
                    Ok(Adoption::Install(g)) => alloc
                        .install(&[g])
                        .map(|n| n as u32)
                        .map_err(|e| e.to_string()),
                    Ok(Adoption::AlreadyInstalled { .. }) => Ok(0),
                }
            }
            other => Err(format!("store read failed: {other:?}")),
        };
        trace!(
            env,
            "p{p} adopt of section {} at epoch {}: {result:?}",
            j.section,
            j.epoch
        );
        if matches!(result, Ok(n) if n > 0) {
            self.wake(env, p, j.section);
        }
        self.adopt_reply(env, p, j.from, j.id, result);
    }

    fn adopt_reply(
        &mut self,
        env: &mut Env,
        p: Slot,
        to: Node,
        id: u64,
        result: Result<u32, String>,
    ) {
        match &result {
            Ok(n) if *n > 0 => env.stats.adopted += 1,
            Ok(_) => {}
            Err(_) => env.stats.adopts_refused += 1,
        }
        let m = Msg::Peer(PeerMsg::AdoptResp { id, result });
        env.send(Node::Alloc(p), to, m);
    }
}

/// Consecutive runs `(first, count)` of sorted section ids (`node.rs`).
fn runs(sections: &[SectionId]) -> Vec<(SectionId, u32)> {
    let mut out: Vec<(SectionId, u32)> = Vec::new();
    for &s in sections {
        match out.last_mut() {
            Some((f, c)) if *f + *c == s => *c += 1,
            _ => out.push((s, 1)),
        }
    }
    out
}
