//! AllocSvrs: the *real* [`Allocator`] and [`Lease`], driven the way
//! `crates/alloc/src/{node,service,raiser}.rs` drive them.
//!
//! - Start-up (`node.rs`): register with the store and read the routes
//!   (retrying every 500 ms), build a fresh allocator, renew once (claiming
//!   the sections the grant lists), then serve.
//! - Renewal loop: every `renew_every` on the AllocSvr's *own* clock; the
//!   lease is counted from the send time on that clock; a granted renewal
//!   drops every section it does not list, *then* extends the lease, then
//!   takes over (one `TakeOver` write per run, awaited in turn) the listed
//!   ones not served yet — "served" meaning installed, whatever the epoch.
//! - Route loop: every `route_poll`, a linearizable route read; sections
//!   routed elsewhere are dropped, a section newly routed here triggers an
//!   early renewal.
//! - Service (`service.rs`): a request checks the lease *when it starts*;
//!   the compare-and-swap happens a few microseconds later, so a pause can
//!   fall in between. An exhausted section makes the request wait (up to
//!   `wait`) for the raise, without checking the lease again.
//! - Raiser: rounds of raises; see [`crate::link`].
//!
//! Clock drift: AllocSvr `a`'s monotonic clock reads `rate · t` at virtual
//! time `t`; every duration it measures (lease, timers, deadlines) is on
//! that clock. A crash loses everything in memory; a pause (SIGSTOP)
//! freezes the process: what arrives meanwhile is queued and handled on
//! resume, in a random interleaving (the real process has several threads).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use seqsvr_alloc::lease::Lease;
use seqsvr_alloc::{AllocConfig, AllocError, Allocator};
use seqsvr_core::{AllocId, SectionId};

use crate::client::{ClientMsg, OpRef, Refusal};
use crate::link::{Call, Purpose, Round};
use crate::net::{Node, Time, MS, US};
use crate::store::{StoreMsg, StoreOk, StoreReq, StoreResp};
use crate::world::{alloc_index, trace, AllocInput, Ev, Msg, World};

/// An AllocSvr's timers and deferred work.
#[derive(Debug)]
pub(crate) enum ATimer {
    /// Time to renew (the generation guards against stale timers).
    Renew(u64),
    /// A store call's attempt ran out of time.
    CallTimeout {
        /// The call.
        call: u64,
        /// The attempt.
        attempt: u32,
    },
    /// A store call's back-off ended.
    CallResend(u64),
    /// Failed raises go back in the queue.
    RaiseRetry,
    /// The compare-and-swap of an admitted request.
    Serve(Work),
    /// A request waiting on an exhausted section gives up.
    WaitDeadline(u64),
    /// Time to re-read the route table (the generation guards against
    /// stale timers).
    RoutePoll(u64),
    /// Start-up retries registration.
    RegisterRetry,
    /// The pause (SIGSTOP) ends.
    Resume,
    /// The second half of handling a granted renewal: take over the listed
    /// sections not served (and, with `lease_before_drop`, drop the
    /// others only now).
    Reconcile {
        /// The sections the renewal listed.
        sections: Vec<SectionId>,
        /// The route version it carried.
        route_version: u64,
    },
}

/// An admitted request: the uids, and the numbers handed out so far.
#[derive(Debug)]
pub(crate) struct Work {
    /// The client's call.
    pub op: OpRef,
    /// Its uids (one for `next`).
    pub uids: Vec<u64>,
    /// Numbers handed out so far (a batch stopped by an exhausted section).
    pub out: Vec<u64>,
    /// Give up waiting at this time (set when it first has to wait).
    pub deadline: Option<Time>,
}

/// One AllocSvr process.
#[derive(Debug)]
pub(crate) struct AllocNode {
    /// Its id in the store.
    pub id: AllocId,
    /// Its clock's rate relative to real time.
    pub rate: f64,
    /// Its clock's zero.
    pub base: Instant,
    /// Running (not crashed).
    pub up: bool,
    /// Incarnation: bumped by a crash; older timers and answers are ignored.
    pub inc: u32,
    /// Stopped (SIGSTOP): inputs are queued in `inbox`.
    pub paused: bool,
    /// Pause for this long right after admitting the next request.
    pub pause_on_admit: Option<Time>,
    /// Pause for this long right after the lease is next extended.
    pub pause_on_renewal: Option<Time>,
    /// Inputs that arrived while paused.
    pub inbox: Vec<AllocInput>,
    /// The gRPC server is up (after the first renewal).
    pub serving: bool,
    /// The real allocator (built at start-up).
    pub alloc: Option<Allocator>,
    /// The real lease.
    pub lease: Lease,
    /// Store calls in progress, by id.
    pub calls: BTreeMap<u64, Call>,
    /// Replica tried first (the last that answered).
    pub preferred: usize,
    /// A renewal cycle (renewal + take-overs) is running.
    pub renewing: bool,
    /// When the next cycle is due (real time).
    pub renew_next: Time,
    /// Renew as soon as the current cycle ends (a section was routed here).
    pub renew_early: bool,
    /// Guards renewal timers.
    pub renew_gen: u64,
    /// Take-overs left in this cycle.
    pub takeovers: Vec<(SectionId, u32)>,
    /// A route read is running.
    pub polling: bool,
    /// Guards route-poll timers.
    pub poll_gen: u64,
    /// The raiser's round in progress.
    pub round: Option<Round>,
    /// Sections whose raise failed, to requeue after the back-off.
    pub retry: Vec<SectionId>,
    /// The raiser's back-off (local clock).
    pub backoff: Time,
    /// Requests waiting on exhausted sections, by id, with the section.
    pub waiting: BTreeMap<u64, (SectionId, Work)>,
    /// The route table as last read (owners, version), sent with errors.
    pub routes: (Vec<Option<AllocId>>, u64),
}

impl AllocNode {
    /// A process not started yet.
    pub(crate) fn new(id: AllocId, rate: f64, base: Instant) -> Self {
        Self {
            id,
            rate,
            base,
            up: true,
            inc: 0,
            paused: false,
            pause_on_admit: None,
            pause_on_renewal: None,
            inbox: Vec::new(),
            serving: false,
            alloc: None,
            lease: Lease::new(base),
            calls: BTreeMap::new(),
            preferred: 0,
            renewing: false,
            renew_next: 0,
            renew_early: false,
            renew_gen: 0,
            takeovers: Vec::new(),
            polling: false,
            poll_gen: 0,
            round: None,
            retry: Vec::new(),
            backoff: 10 * MS,
            waiting: BTreeMap::new(),
            routes: (Vec::new(), 0),
        }
    }

    /// Its clock's reading at virtual time `now`.
    pub(crate) fn clock(&self, now: Time) -> Instant {
        self.base + Duration::from_nanos((now as f64 * self.rate) as u64)
    }

    /// The real time a duration measured on its clock takes.
    pub(crate) fn real(&self, d: Time) -> Time {
        (d as f64 / self.rate).ceil() as Time
    }

    /// Whether its lease holds at virtual time `now` (by its own clock).
    pub(crate) fn lease_valid(&self, now: Time) -> bool {
        self.lease.valid_at(self.clock(now))
    }

    /// Whether it currently serves `s`: running, lease valid by its own
    /// clock, section installed (what promise 3 is about).
    pub(crate) fn serves(&self, s: SectionId, now: Time) -> bool {
        self.up
            && self.lease_valid(now)
            && self
                .alloc
                .as_ref()
                .is_some_and(|a| a.section_state(s).is_some())
    }
}

impl World {
    /// Schedules an AllocSvr timer `d` after now (real time).
    pub(crate) fn alloc_after(&mut self, a: usize, d: Time, t: ATimer) {
        let inc = self.allocs[a].inc;
        self.after(d, Ev::Alloc { a, inc, t });
    }

    /// Everything that reaches AllocSvr `a`.
    pub(crate) fn alloc_event(&mut self, a: usize, inc: Option<u32>, input: AllocInput) {
        let node = &mut self.allocs[a];
        if !node.up || inc.is_some_and(|i| i != node.inc) {
            return;
        }
        if let AllocInput::Timer(ATimer::Resume) = input {
            return self.resume(a);
        }
        if node.paused {
            node.inbox.push(input);
            return;
        }
        match input {
            AllocInput::Msg(Msg::Client(ClientMsg::Req { op, uids })) => self.admit(a, op, uids),
            AllocInput::Msg(Msg::Client(m)) => panic!("model bug: {m:?} at an alloc"),
            AllocInput::Msg(Msg::Store(StoreMsg::Resp { call, resp, .. })) => {
                self.on_store_resp(a, call, resp)
            }
            AllocInput::Msg(Msg::Store(m)) => panic!("model bug: {m:?} at an alloc"),
            AllocInput::Timer(t) => self.alloc_timer(a, t),
        }
    }

    fn alloc_timer(&mut self, a: usize, t: ATimer) {
        match t {
            ATimer::Renew(gen) if gen == self.allocs[a].renew_gen => self.renew_start(a),
            ATimer::Renew(_) => {}
            ATimer::CallTimeout { call, attempt } => self.call_timeout(a, call, attempt),
            ATimer::CallResend(call) => self.call_attempt(a, call),
            ATimer::RaiseRetry => {
                let node = &mut self.allocs[a];
                if let Some(alloc) = &node.alloc {
                    alloc.requeue_raises(&node.retry);
                }
                node.retry.clear();
                self.raiser_kick(a);
            }
            ATimer::Serve(work) => self.serve(a, work),
            ATimer::WaitDeadline(id) => {
                if let Some((s, work)) = self.allocs[a].waiting.remove(&id) {
                    self.refuse(a, work.op, Refusal::Exhausted(s));
                }
            }
            ATimer::RoutePoll(gen) if gen == self.allocs[a].poll_gen => self.route_poll(a),
            ATimer::RoutePoll(_) => {}
            ATimer::RegisterRetry => self.alloc_start(a),
            ATimer::Resume => unreachable!("handled before"),
            ATimer::Reconcile {
                sections,
                route_version,
            } => self.reconcile(a, sections, route_version),
        }
    }

    /// Starts (or restarts) the process: registration first.
    pub(crate) fn alloc_start(&mut self, a: usize) {
        let alloc = self.allocs[a].id.clone();
        self.start_call(a, StoreReq::Register { alloc }, Purpose::Register, None);
    }

    /// Start-up read the routes: build the allocator and renew once.
    pub(crate) fn alloc_started(&mut self, a: usize, owners: Vec<Option<AllocId>>, version: u64) {
        let cfg = AllocConfig {
            raise_ahead_fraction: self.cfg.raise_ahead_fraction,
        };
        let alloc = Allocator::new(self.cfg.spec.clone(), &cfg).expect("valid spec");
        let node = &mut self.allocs[a];
        node.alloc = Some(alloc);
        node.routes = (owners, version);
        let inc = node.inc;
        trace!(self, "a{a} started (incarnation {inc})");
        self.renew_start(a);
    }

    /// kill -9: memory is gone.
    pub(crate) fn crash_alloc(&mut self, a: usize) {
        let node = &self.allocs[a];
        if !node.up {
            return;
        }
        let fresh = AllocNode::new(node.id.clone(), node.rate, node.base);
        let inc = node.inc + 1;
        self.allocs[a] = AllocNode {
            up: false,
            inc,
            ..fresh
        };
    }

    /// Restarts a crashed process.
    pub(crate) fn restart_alloc(&mut self, a: usize) {
        if self.allocs[a].up {
            return;
        }
        self.allocs[a].up = true;
        self.alloc_start(a);
    }

    /// SIGSTOP for `d` (a no-op if already stopped or down).
    pub(crate) fn pause_alloc(&mut self, a: usize, d: Time) {
        let node = &mut self.allocs[a];
        if !node.up || node.paused {
            return;
        }
        node.paused = true;
        trace!(self, "a{a} paused for {} ms", d / MS);
        self.alloc_after(a, d, ATimer::Resume);
    }

    /// SIGCONT: what queued up is handled now, by several threads at
    /// once in the real process, so in an arbitrary interleaving: each
    /// input gets a small random delay.
    fn resume(&mut self, a: usize) {
        self.allocs[a].paused = false;
        trace!(self, "a{a} resumes");
        let inbox = std::mem::take(&mut self.allocs[a].inbox);
        let inc = self.allocs[a].inc;
        for input in inbox {
            let d = self.rng.range(0, 50 * US);
            self.after(d, Ev::Resumed { a, inc, input });
        }
    }

    /// A client request arrives: the lease is checked now, the numbers are
    /// taken a little later (`service.rs`).
    fn admit(&mut self, a: usize, op: OpRef, uids: Vec<u64>) {
        let node = &self.allocs[a];
        if !node.serving {
            return self.refuse(a, op, Refusal::Unavailable);
        }
        if !self.cfg.knobs.skip_lease_check && !node.lease_valid(self.now) {
            self.stats.lease_expired += 1;
            return self.refuse(a, op, Refusal::LeaseExpired);
        }
        let spec = &self.cfg.spec;
        let mut sections: Vec<SectionId> =
            uids.iter().filter_map(|u| spec.section_of(*u)).collect();
        sections.dedup();
        for s in sections {
            self.check_exclusive(a, s);
        }
        if let Some(d) = self.allocs[a].pause_on_admit.take() {
            self.pause_alloc(a, d);
        }
        let d = self.rng.range(2 * US, 40 * US);
        let work = Work {
            op,
            uids,
            out: Vec::new(),
            deadline: None,
        };
        self.alloc_after(a, d, ATimer::Serve(work));
    }

    /// Promise 3: when `a` admits a request for `s` that it serves, no
    /// other AllocSvr may serve `s` at this instant.
    fn check_exclusive(&mut self, a: usize, s: SectionId) {
        let me = &self.allocs[a];
        let mine = me
            .alloc
            .as_ref()
            .is_some_and(|x| x.section_state(s).is_some());
        if !mine {
            return;
        }
        for b in 0..self.allocs.len() {
            if b != a && self.allocs[b].serves(s, self.now) {
                let what = format!(
                    "a{a} admits a request for section {s} while a{b} also serves it (lease valid, section installed)"
                );
                self.monitor.violate(self.now, 3, what);
            }
        }
    }

    /// The compare-and-swap part of a request (and its retries after a
    /// raise landed).
    fn serve(&mut self, a: usize, mut work: Work) {
        let node = &self.allocs[a];
        let Some(alloc) = node.alloc.as_ref() else {
            return;
        };
        let done = work.out.len();
        let res = alloc.next_batch(&work.uids[done..], &mut work.out);
        let new: Vec<(u64, u64)> = work.uids[done..]
            .iter()
            .zip(&work.out[done..])
            .map(|(u, v)| (*u, *v))
            .collect();
        for (uid, v) in new {
            self.handed_out(a, uid, v);
        }
        match res {
            Ok(()) => {
                let m = ClientMsg::Resp {
                    op: work.op,
                    result: Ok(std::mem::take(&mut work.out)),
                    routes: None,
                    version: self.allocs[a].routes.1,
                };
                self.send(Node::Alloc(a), Node::Client(work.op.client), Msg::Client(m));
            }
            Err(AllocError::Exhausted { section }) => {
                let id = self.fresh_id();
                if work.deadline.is_none() {
                    let d = self.allocs[a].real(self.cfg.wait);
                    work.deadline = Some(self.now + d);
                    self.alloc_after(a, d, ATimer::WaitDeadline(id));
                } else {
                    let left = work.deadline.unwrap_or(self.now).saturating_sub(self.now);
                    self.alloc_after(a, left, ATimer::WaitDeadline(id));
                }
                self.allocs[a].waiting.insert(id, (section, work));
            }
            Err(AllocError::NotOwner { section }) => {
                self.refuse(a, work.op, Refusal::NotOwner(section))
            }
            Err(e) => panic!("model bug: unexpected allocator error {e}"),
        }
        self.raiser_kick(a);
    }

    /// Wakes requests waiting on `s` (its ceiling or ownership changed).
    pub(crate) fn wake(&mut self, a: usize, s: SectionId) {
        let ids: Vec<u64> = (self.allocs[a].waiting.iter())
            .filter(|(_, (ws, _))| *ws == s)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some((_, work)) = self.allocs[a].waiting.remove(&id) {
                self.serve(a, work);
            }
        }
    }

    fn handed_out(&mut self, a: usize, uid: u64, v: u64) {
        self.stats.handed_out += 1;
        let s = self.cfg.spec.section_of(uid).expect("uid in set");
        let epoch = (self.allocs[a].alloc.as_ref())
            .and_then(|x| x.section_state(s))
            .map(|st| st.epoch)
            .unwrap_or(0);
        let ceiling = self.truth.sections[s as usize].max_seq;
        self.monitor.on_handout(self.now, a, s, epoch, v, ceiling);
    }

    /// Answers a client with an error (and the route table, for the
    /// errors that carry one).
    fn refuse(&mut self, a: usize, op: OpRef, why: Refusal) {
        trace!(self, "a{a} refuses c{}'s call: {why:?}", op.client);
        let routes = match why {
            Refusal::NotOwner(_) | Refusal::LeaseExpired => Some(self.allocs[a].routes.clone()),
            _ => None,
        };
        let m = ClientMsg::Resp {
            op,
            result: Err(why),
            routes,
            version: self.allocs[a].routes.1,
        };
        self.send(Node::Alloc(a), Node::Client(op.client), Msg::Client(m));
    }

    /// The renewal loop's body (`renew_once`).
    pub(crate) fn renew_start(&mut self, a: usize) {
        let node = &mut self.allocs[a];
        if node.renewing || node.alloc.is_none() {
            return;
        }
        node.renewing = true;
        node.renew_gen += 1;
        node.renew_next = self.now + node.real(self.cfg.renew_every);
        let sent = node.clock(self.now);
        let deadline = self.cfg.renew_every.max(500 * MS);
        let alloc = node.id.clone();
        self.start_call(
            a,
            StoreReq::Renew { alloc },
            Purpose::Renew { sent },
            Some(deadline),
        );
    }

    /// A renewal came back (`renew_once` after the store answered): drop
    /// the sections it does not list, *then* extend the lease, then take
    /// over the listed sections not served (a moment later: the take-overs
    /// are store calls of their own).
    ///
    /// The [`Knobs`](crate::Knobs) `lease_before_drop` (the order
    /// `renew_once` had before: a window with a valid lease and moved
    /// sections) and `keep_sections_after_lapse` (the old, buggy order) change this.
    pub(crate) fn renewed(&mut self, a: usize, sent: Instant, resp: StoreResp) {
        let Ok(StoreOk::Renewed {
            lease_ms,
            sections,
            route_version,
        }) = resp
        else {
            trace!(self, "a{a} renewal failed: {resp:?}");
            return self.next_takeover(a);
        };
        let knobs = self.cfg.knobs.clone();
        if !knobs.keep_sections_after_lapse && !self.allocs[a].lease_valid(self.now) {
            // Anything installed may have moved away and back meanwhile.
            let alloc = self.allocs[a].alloc.as_ref().expect("renewing");
            let all = alloc.served_sections();
            for &s in &all {
                alloc.drop_section(s);
            }
            for s in all {
                self.wake(a, s);
            }
        }
        if !knobs.lease_before_drop {
            self.drop_unlisted(a, &sections);
        }
        let node = &mut self.allocs[a];
        node.lease
            .granted(sent, std::time::Duration::from_millis(lease_ms));
        if let Some(d) = node.pause_on_renewal.take() {
            self.pause_alloc(a, d);
        }
        let d = self.rng.range(2 * US, 20 * US);
        let t = ATimer::Reconcile {
            sections,
            route_version,
        };
        self.alloc_after(a, d, t);
    }

    /// Drops the served sections a granted renewal does not list.
    fn drop_unlisted(&mut self, a: usize, sections: &[SectionId]) {
        let alloc = self.allocs[a].alloc.as_ref().expect("renewing");
        let dropped: Vec<SectionId> = (alloc.served_sections().into_iter())
            .filter(|s| sections.binary_search(s).is_err() && alloc.drop_section(*s))
            .collect();
        if !dropped.is_empty() {
            trace!(self, "a{a} renewal: dropped {dropped:?}");
        }
        for s in dropped {
            self.wake(a, s);
        }
    }

    /// Serves exactly the sections a granted renewal listed: drops the
    /// others, then takes over the missing ones (one run at a time).
    fn reconcile(&mut self, a: usize, sections: Vec<SectionId>, route_version: u64) {
        self.drop_unlisted(a, &sections);
        let node = &mut self.allocs[a];
        let served = node.alloc.as_ref().expect("renewing").served_sections();
        let missing: Vec<SectionId> = (sections.iter())
            .filter(|s| served.binary_search(s).is_err())
            .copied()
            .collect();
        node.takeovers = runs(&missing);
        let stale = route_version > node.routes.1;
        trace!(
            self,
            "a{a} renewed: sections {sections:?}, taking over {missing:?}"
        );
        if stale {
            self.route_poll(a);
        }
        self.next_takeover(a);
    }

    /// Takes over the next run of sections, or ends the cycle.
    pub(crate) fn next_takeover(&mut self, a: usize) {
        let node = &mut self.allocs[a];
        if node.takeovers.is_empty() {
            node.renewing = false;
            node.renew_gen += 1;
            let at = if std::mem::take(&mut node.renew_early) {
                self.now
            } else {
                node.renew_next.max(self.now)
            };
            let gen = node.renew_gen;
            let first = !node.serving;
            node.serving = true;
            self.alloc_after(a, at - self.now, ATimer::Renew(gen));
            if first {
                self.route_poll(a);
            }
            return;
        }
        let (first, count) = node.takeovers.remove(0);
        let alloc = node.id.clone();
        let req = StoreReq::TakeOver {
            alloc,
            first,
            count,
        };
        self.start_call(a, req, Purpose::TakeOver, None);
    }

    /// The route loop's body (`refresh_routes`).
    pub(crate) fn route_poll(&mut self, a: usize) {
        let node = &mut self.allocs[a];
        if node.polling || node.alloc.is_none() {
            return;
        }
        node.polling = true;
        let deadline = self.cfg.renew_every.max(500 * MS);
        self.start_call(a, StoreReq::Routes, Purpose::Routes, Some(deadline));
    }

    /// A route read came back.
    pub(crate) fn routes_read(&mut self, a: usize, resp: StoreResp) {
        let node = &mut self.allocs[a];
        node.polling = false;
        let poll = node.real(self.cfg.route_poll);
        if let Ok(StoreOk::Routes { owners, version }) = resp {
            let alloc = node.alloc.as_ref().expect("polling");
            let served = alloc.served_sections();
            let mut gained = false;
            let mut dropped = Vec::new();
            for (s, owner) in owners.iter().enumerate() {
                let s = s as SectionId;
                let mine = owner.as_deref() == Some(node.id.as_str());
                let serving = served.binary_search(&s).is_ok();
                if serving && !mine && alloc.drop_section(s) {
                    dropped.push(s);
                }
                gained |= mine && !serving;
            }
            if version >= node.routes.1 {
                node.routes = (owners, version);
            }
            if gained {
                node.renew_early = true;
                if !node.renewing {
                    self.renew_start(a);
                }
            }
            for s in dropped {
                trace!(
                    self,
                    "a{a} route read: section {s} routed elsewhere, dropped"
                );
                self.wake(a, s);
            }
        }
        let node = &mut self.allocs[a];
        node.poll_gen += 1;
        let gen = node.poll_gen;
        self.alloc_after(a, poll, ATimer::RoutePoll(gen));
    }

    /// Which AllocSvr index owns `s` in this AllocSvr's route table.
    pub(crate) fn owner_in(routes: &[Option<AllocId>], s: SectionId) -> Option<usize> {
        routes.get(s as usize)?.as_deref().and_then(alloc_index)
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
