//! The arbiter: on the store leader, it notices AllocSvrs that stopped
//! renewing their lease and routes their sections to live ones, and takes
//! fenced AllocSvrs off the list once their lease is over and their
//! sections have moved ([`Arbiter::retirements`]).
//!
//! Leases (docs/architecture/promises.md). An AllocSvr renews every `renew` interval; the leader
//! grants a renewal only after confirming its leadership with a quorum
//! (the store's `service/peer.rs`; the grant itself is
//! [`crate::decision::renewal`]), and the arbiter records *when it granted* it, on the
//! leader's monotonic clock. The AllocSvr counts its lease from when it
//! *sent* the renewal, so its view always ends first. A section is moved
//! away from its owner only once `lease + margin` has passed since the last
//! renewal this leader granted to it — `margin` absorbs clock-rate drift
//! between the two machines (a drift of up to `margin / lease` is safe). A
//! new leader has no renewal history, so it waits a full `lease + margin`
//! after taking office before moving anything — under the longer of the
//! lease terms in force and the terms they replaced, since the terms are
//! replicated state and a lease runs under the terms it was granted with. Together with epochs this
//! gives promise 3: when a section's new owner starts, the old owner's
//! lease has certainly ended, and any raise it still sends is refused.
//!
//! This module is pure: time comes in as arguments. The lock that keeps
//! renewals out from between a plan and its moves is the driver's (the
//! store's `arbiter.rs`; the simulation's own queue).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use seqsvr_core::mover::Holder;
use seqsvr_core::section::runs_by;
use seqsvr_core::{AllocId, Epoch, Incarnation, LeaseTerms, Place, SectionId};
use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::state::{LeaseState, SetState};

mod explain;
mod rebalance;
pub use explain::{MoveNote, Runs, Why};
pub use rebalance::{Batch, RebalanceConfig};

/// The arbiter's own timing. Lease terms are not here: they are
/// replicated state ([`crate::state::LeaseState`]), so every leader judges
/// a lease by the terms it was granted under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArbiterConfig {
    /// How often the arbiter looks for expired leases, in ms.
    pub tick_ms: u64,
}

impl Default for ArbiterConfig {
    fn default() -> Self {
        Self { tick_ms: 100 }
    }
}

/// The leadership the arbiter acts under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Office {
    /// The term.
    term: u64,
    /// When this replica noticed it leads in this term.
    since: Instant,
}

/// A renewal this leader granted.
#[derive(Debug, Clone, Copy)]
struct Granted {
    /// When.
    at: Instant,
    /// The lease it granted.
    lease: Duration,
    /// Lease plus margin of the terms it was granted under.
    expiry: Duration,
}

#[derive(Debug, Default)]
struct Inner {
    /// Set while this replica leads.
    office: Option<Office>,
    /// Last renewal granted per AllocSvr, in the current office only.
    grants: HashMap<AllocId, Granted>,
    /// When this office last changed the lease terms.
    lease_changed: Option<Instant>,
    /// When this office last planned a rebalance (`rebalance.rs`).
    rebalanced: Option<Instant>,
}

impl Inner {
    /// Whether `id`'s lease has certainly expired as this leader sees it at
    /// `now`: `lease + margin` (under the terms it was granted with) since
    /// the last grant of this office, and this office's first `wait` over;
    /// at once for an id whose process recorded its stop (no process holds
    /// a lease under it); never out of office.
    fn expired(&self, state: &SetState, id: &AllocId, wait: Duration, now: Instant) -> bool {
        let Some(o) = self.office else {
            return false;
        };
        if state.allocs.get(id).is_some_and(|a| a.incarnation == 0) {
            return true;
        }
        match self.grants.get(id) {
            Some(l) => now >= l.at + l.expiry && now >= o.since + wait,
            None => now >= o.since + wait,
        }
    }
}

/// Lease bookkeeping and section moves of one store replica.
#[derive(Debug)]
pub struct Arbiter {
    /// Timing.
    pub config: ArbiterConfig,
    /// Office and grants.
    inner: Mutex<Inner>,
}

/// What the arbiter knows of one AllocSvr's lease (for status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// Time since the last renewal granted by this leader, if any.
    pub since_grant: Option<Duration>,
    /// Whether its sections may be moved away now.
    pub expired: bool,
}

impl Arbiter {
    /// A new arbiter, not in office.
    pub fn new(config: ArbiterConfig) -> Self {
        Self {
            config,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the arbiter whether this replica leads (`Some(term)`) as of
    /// `now`. A new term, or losing office, forgets every grant.
    pub fn observe(&self, leading: Option<u64>, now: Instant) {
        let mut g = self.lock();
        match (g.office, leading) {
            (Some(o), Some(t)) if o.term == t => {}
            (_, Some(term)) => {
                g.office = Some(Office { term, since: now });
                g.grants.clear();
                g.lease_changed = None;
                g.rebalanced = None;
            }
            (_, None) => {
                g.office = None;
                g.grants.clear();
                g.lease_changed = None;
                g.rebalanced = None;
            }
        }
    }

    /// Records a renewal granted to `alloc` at `now`, confirmed in `term`.
    /// Ignored unless this replica still leads in that term.
    pub fn granted(&self, alloc: &str, term: u64, now: Instant, terms: LeaseTerms) -> bool {
        let mut g = self.lock();
        if g.office.map(|o| o.term) != Some(term) {
            return false;
        }
        let mut granted = Granted {
            at: now,
            lease: Duration::from_millis(terms.lease_ms),
            expiry: Duration::from_millis(terms.expiry_ms()),
        };
        // An AllocSvr never shortens its lease: one granted earlier under
        // longer terms may still run after this one would end, so the
        // record keeps the later of the two ends (found by the seeded
        // simulation after a change to shorter terms).
        if let Some(old) = g.grants.get(alloc) {
            granted.lease = (old.at + old.lease).max(now + granted.lease) - now;
            granted.expiry = (old.at + old.expiry).max(now + granted.expiry) - now;
        }
        g.grants.insert(alloc.to_string(), granted);
        true
    }

    /// Whether the lease terms may change now: only a leader in office for
    /// a full wait, and not again before every lease granted under the
    /// terms replaced last could have run out. Otherwise a shorter lease
    /// could let the arbiter move a section whose owner still holds a
    /// longer one.
    pub fn lease_change_allowed(&self, lease: &LeaseState, now: Instant) -> Result<(), String> {
        let g = self.lock();
        let Some(office) = g.office else {
            return Err("not in office yet".into());
        };
        let wait = Duration::from_millis(lease.office_wait_ms());
        if now < office.since + wait {
            return Err(format!(
                "a new leader waits {wait:?} before changing lease terms"
            ));
        }
        if let Some(t) = g.lease_changed {
            if now < t + wait {
                return Err(format!("the lease terms changed less than {wait:?} ago"));
            }
        }
        Ok(())
    }

    /// Records that this office changed the lease terms at `now`.
    pub fn lease_changed(&self, now: Instant) {
        self.lock().lease_changed = Some(now);
    }

    /// The lease view of every registered AllocSvr.
    pub fn view(&self, state: &SetState, now: Instant) -> BTreeMap<AllocId, LeaseView> {
        let g = self.lock();
        let wait = Duration::from_millis(state.lease.office_wait_ms());
        state
            .allocs
            .keys()
            .map(|id| {
                let last = g.grants.get(id).copied();
                let view = LeaseView {
                    since_grant: last.map(|l| now.saturating_duration_since(l.at)),
                    expired: g.expired(state, id, wait, now),
                };
                (id.clone(), view)
            })
            .collect()
    }

    /// The AllocSvr incarnations that may still hold sections this set
    /// froze, as this leader sees them at `now` (a freeze's reply names
    /// them, docs/architecture/sets.md): every registered one whose lease
    /// it does not see certainly expired — fenced ones included, since
    /// fenced is not expired — and none out of office (all are named). An
    /// id whose process recorded its stop holds nothing. Called under the
    /// lock renewals take, right after the freeze applied: a renewal
    /// granted later extends no lease over a frozen section (it lists no
    /// section this set does not serve, and a take-over of one is refused).
    pub fn holders(&self, state: &SetState, now: Instant) -> Vec<Holder> {
        let g = self.lock();
        let wait = Duration::from_millis(state.lease.office_wait_ms());
        (state.allocs.iter())
            .filter(|(id, a)| a.incarnation != 0 && !g.expired(state, id, wait, now))
            .map(|(id, a)| Holder {
                id: id.clone(),
                incarnation: a.incarnation,
                admin_addr: a.admin_addr.clone(),
                fenced: a.fenced,
            })
            .collect()
    }

    /// The AllocSvrs to retire now (`Command::RetireAlloc`, each
    /// conditional on the incarnation it was decided on): those fenced by
    /// an operator whose lease this leader sees certainly expired and that
    /// own no section this set serves. Fenced is not expired — a fenced
    /// process serves until its lease runs out — so nothing is retired
    /// before [`plan`](Self::plan) could move its sections; it moves them
    /// once the lease is over, and the retirement comes on a later tick,
    /// when they are gone. Gone from the list, the AllocSvr is waited for
    /// by nothing (a move's release, a rebalance), and its process, if it
    /// still runs, is refused (`NOT_REGISTERED`). An id whose process
    /// recorded a planned stop (incarnation 0) stays, fenced or not: its
    /// next process comes back under it. Promise 3: retiring takes nothing
    /// from anyone who may still serve.
    pub fn retirements(&self, state: &SetState, now: Instant) -> Vec<Command> {
        let g = self.lock();
        let wait = Duration::from_millis(state.lease.office_wait_ms());
        let mut gone: BTreeMap<&AllocId, Incarnation> = state
            .allocs
            .iter()
            .filter(|(id, a)| a.fenced && a.incarnation != 0 && g.expired(state, id, wait, now))
            .map(|(id, a)| (id, a.incarnation))
            .collect();
        if gone.is_empty() {
            return Vec::new();
        }
        for (s, r) in state.sections.iter().enumerate() {
            if let Some(owner) = &r.owner {
                if gone.contains_key(owner)
                    && state.placement.place_of(s as SectionId) == Place::Serving
                {
                    gone.remove(owner);
                }
            }
        }
        gone.into_iter()
            .map(|(alloc, incarnation)| Command::RetireAlloc {
                alloc: alloc.clone(),
                incarnation,
            })
            .collect()
    }

    /// The moves to make now: every section that is unowned or whose owner's
    /// lease has certainly expired goes to a live, non-draining AllocSvr,
    /// the least loaded first. Nothing moves while not in office or when no
    /// AllocSvr is live. During a new office's first `lease + margin` only
    /// the sections of AllocSvrs whose process recorded its stop
    /// (`Command::StopAlloc`: no live incarnation) move: any other owner
    /// may hold a lease from an earlier office, and unowned sections wait
    /// for the initial routes of a new group (bootstrap). So a set stopped
    /// the planned way and started again without one of its AllocSvrs
    /// serves that one's sections at once.
    pub fn plan(&self, state: &SetState, now: Instant) -> Vec<Command> {
        let g = self.lock();
        let Some(office) = g.office else {
            return Vec::new();
        };
        let wait = Duration::from_millis(state.lease.office_wait_ms());
        let settled = now >= office.since + wait;
        let stopped = |id: &AllocId| state.allocs.get(id).is_some_and(|a| a.incarnation == 0);
        let expired = |id: &AllocId| {
            stopped(id) || (settled && g.grants.get(id).is_none_or(|l| now >= l.at + l.expiry))
        };
        let live =
            |id: &AllocId| !stopped(id) && g.grants.get(id).is_some_and(|l| now < l.at + l.lease);
        let mut load: BTreeMap<&AllocId, usize> = state
            .allocs
            .iter()
            .filter(|(id, a)| !a.draining && live(id))
            .map(|(id, _)| (id, 0))
            .collect();
        if load.is_empty() {
            return Vec::new();
        }
        let mut movable = Vec::new();
        // Every section is looked at on every tick; consecutive ones mostly
        // share an owner, whose lease is then judged once per run rather
        // than hashed once per section (10^5 sections at a 100 ms tick).
        let mut run: Option<(&AllocId, bool)> = None;
        for (s, r) in state.sections.iter().enumerate() {
            // Sections this set does not serve (absent, moved away) get no
            // owner here (docs/architecture/sets.md).
            if state.placement.place_of(s as SectionId) != Place::Serving {
                continue;
            }
            let held = r.owner.as_ref().filter(|o| match run {
                Some((prev, gone)) if prev == *o => !gone,
                _ => {
                    let gone = expired(o);
                    run = Some((*o, gone));
                    !gone
                }
            });
            match held {
                Some(o) => {
                    if let Some(n) = load.get_mut(o) {
                        *n += 1;
                    }
                }
                // Unowned: only once the office settled.
                None if r.owner.is_none() && !settled => {}
                None => movable.push((s as SectionId, r.epoch)),
            }
        }
        // How many each target gets: one section at a time to the least
        // loaded, targets in the order they were first chosen.
        let mut shares: Vec<(&AllocId, usize)> = Vec::new();
        for _ in 0..movable.len() {
            let (target, n) = load
                .iter_mut()
                .min_by_key(|(id, n)| (**n, **id))
                .expect("not empty");
            *n += 1;
            match shares.iter_mut().find(|(id, _)| **id == **target) {
                Some((_, k)) => *k += 1,
                None => shares.push((*target, 1)),
            }
        }
        // Each target's share is one block of consecutive movable sections.
        // Dealt one section at a time, two equally loaded targets would
        // alternate: 10^4 sections would become 10^4 runs of one — as many
        // `Assign`s written one after another under the lock renewals wait
        // on, as many take-overs, and owners' section lists of as many
        // runs (docs/benchmarks.md, Scale).
        let mut movable = movable.into_iter();
        let mut moves: Vec<(SectionId, Epoch, AllocId)> = Vec::new();
        for (target, k) in shares {
            for (s, epoch) in movable.by_ref().take(k) {
                moves.push((s, epoch, target.clone()));
            }
        }
        runs(moves)
    }
}

/// Groups consecutive sections going to the same AllocSvr into `Assign`s,
/// each conditional on the epochs the plan was made on.
fn runs(moves: Vec<(SectionId, Epoch, AllocId)>) -> Vec<Command> {
    let max = crate::command::MAX_SECTIONS_PER_CALL as usize;
    runs_by(&moves, |m| m.0, |a, b| a.2 == b.2)
        .into_iter()
        .flat_map(|run| run.chunks(max))
        .map(|run| Command::Assign {
            alloc: run[0].2.clone(),
            first: run[0].0,
            expected: run.iter().map(|m| m.1).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{AllocRecord, SectionRecord};

    fn state(owners: &[Option<&str>], allocs: &[(&str, bool)]) -> SetState {
        SetState {
            set: Some(seqsvr_core::SetSpec::new(
                0,
                0..owners.len() as u64 * 100_000,
            )),
            sections: owners
                .iter()
                .map(|o| SectionRecord {
                    owner: o.map(String::from),
                    ..Default::default()
                })
                .collect(),
            allocs: allocs
                .iter()
                .map(|(id, draining)| {
                    let rec = AllocRecord {
                        addr: format!("{id}:1"),
                        draining: *draining,
                        incarnation: 1,
                        ..Default::default()
                    };
                    (id.to_string(), rec)
                })
                .collect(),
            route_version: 1,
            lease: Default::default(),
            ..Default::default()
        }
    }

    const T: LeaseTerms = LeaseTerms {
        lease_ms: 5000,
        margin_ms: 1000,
    };

    fn arbiter() -> Arbiter {
        Arbiter::new(ArbiterConfig { tick_ms: 100 })
    }

    fn assign(alloc: &str, first: u32, count: u32) -> Command {
        Command::Assign {
            alloc: alloc.into(),
            first,
            expected: vec![0; count as usize],
        }
    }

    #[test]
    fn a_new_leader_waits_a_full_lease_plus_margin() {
        let t0 = Instant::now();
        let a = arbiter();
        let st = state(&[Some("a"), Some("b")], &[("a", false), ("b", false)]);
        a.observe(Some(3), t0);
        // b renews; a never does under this leader.
        for ms in (0..=7000).step_by(500) {
            a.granted("b", 3, t0 + Duration::from_millis(ms), T);
        }
        assert!(a.plan(&st, t0 + Duration::from_millis(5999)).is_empty());
        assert_eq!(
            a.plan(&st, t0 + Duration::from_millis(6000)),
            vec![assign("b", 0, 1)]
        );
    }

    #[test]
    fn a_freeze_names_everyone_not_certainly_expired_fenced_included() {
        let t0 = Instant::now();
        let a = arbiter();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut st = state(
            &[Some("a"), Some("b")],
            &[("a", false), ("b", false), ("c", false), ("d", false)],
        );
        let names = |a: &Arbiter, st: &SetState, ms| {
            (a.holders(st, at(ms)).into_iter())
                .map(|h| {
                    format!(
                        "{}@{}{}",
                        h.id,
                        h.incarnation,
                        if h.fenced { "!" } else { "" }
                    )
                })
                .collect::<Vec<_>>()
        };
        // Out of office: nobody is certainly expired.
        assert_eq!(names(&a, &st, 0), ["a@1", "b@1", "c@1", "d@1"]);
        a.observe(Some(2), t0);
        // In a new office's first lease + margin, the same.
        assert_eq!(names(&a, &st, 100), ["a@1", "b@1", "c@1", "d@1"]);
        // a keeps renewing; b is fenced (its renewals are refused, its
        // last grant still runs); c stopped the planned way; d never
        // renewed in this office.
        a.granted("b", 2, at(5000), T);
        st.allocs.get_mut("b").unwrap().fenced = true;
        st.allocs.get_mut("c").unwrap().incarnation = 0;
        for ms in (0..=12_000).step_by(1000) {
            a.granted("a", 2, at(ms), T);
        }
        assert_eq!(
            names(&a, &st, 7000),
            ["a@1", "b@1!"],
            "fenced is not expired"
        );
        assert_eq!(names(&a, &st, 10_999), ["a@1", "b@1!"]);
        assert_eq!(names(&a, &st, 11_000), ["a@1"]);
    }

    #[test]
    fn a_new_leader_routes_a_stopped_ids_sections_at_once() {
        let t0 = Instant::now();
        let a = arbiter();
        // Section 0 is unowned, 1 is a's (stopped: no live incarnation),
        // 2 is c's (live in an earlier office, perhaps), 3 is b's.
        let mut st = state(
            &[None, Some("a"), Some("c"), Some("b")],
            &[("a", false), ("b", false), ("c", false)],
        );
        st.allocs.get_mut("a").unwrap().incarnation = 0;
        a.observe(Some(3), t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        a.granted("b", 3, at(100), T);
        // Long before the office's wait ends, b gets the stopped id's
        // section; c's waits, and so does the unowned one (a new group's
        // initial routes come first).
        assert_eq!(a.plan(&st, at(200)), vec![assign("b", 1, 1)]);
        a.granted("a", 3, at(300), T);
        assert_eq!(
            a.plan(&st, at(400)),
            vec![assign("b", 1, 1)],
            "a stopped id is not live, whatever grant it had"
        );
        let v = a.view(&st, at(400));
        assert!(v["a"].expired && !v["b"].expired && !v["c"].expired);
        // Once the wait is over, the rest moves too.
        a.granted("b", 3, at(5900), T);
        assert_eq!(a.plan(&st, at(6000)), vec![assign("b", 0, 3)]);
    }

    #[test]
    fn moves_only_after_lease_plus_margin_since_the_last_grant() {
        let t0 = Instant::now();
        let a = arbiter();
        let st = state(
            &[Some("a"), Some("a"), Some("b")],
            &[("a", false), ("b", false), ("c", false)],
        );
        a.observe(Some(1), t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        for ms in (0..=20_000).step_by(1000) {
            a.granted("b", 1, at(ms), T);
            a.granted("c", 1, at(ms), T);
        }
        a.granted("a", 1, at(7000), T);
        assert!(a.plan(&st, at(12_999)).is_empty());
        // Spread evenly: c had none, b had one.
        assert_eq!(
            a.plan(&st, at(13_000)),
            vec![assign("c", 0, 1), assign("b", 1, 1)]
        );
    }

    #[test]
    fn an_expired_owners_sections_move_in_blocks_not_one_by_one() {
        let t0 = Instant::now();
        let a = arbiter();
        let mut owners = vec![Some("b"); 4];
        owners.extend([Some("c"); 4]);
        owners.extend([Some("a"); 6]);
        let st = state(&owners, &[("a", false), ("b", false), ("c", false)]);
        a.observe(Some(1), t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        a.granted("b", 1, at(9000), T);
        a.granted("c", 1, at(9000), T);
        // b and c are equally loaded: a's six sections are split evenly,
        // three consecutive ones each, not dealt alternately.
        assert_eq!(
            a.plan(&st, at(9500)),
            vec![assign("b", 8, 3), assign("c", 11, 3)]
        );
    }

    #[test]
    fn sections_absent_or_moved_away_get_no_owner() {
        let t0 = Instant::now();
        let a = arbiter();
        let mut st = state(&[None, None, None, None], &[("b", false)]);
        st.placement.set(1..2, seqsvr_core::Place::Moved { to: 1 });
        st.placement.set(3..4, seqsvr_core::Place::Absent);
        a.observe(Some(1), t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        a.granted("b", 1, at(9000), T);
        assert_eq!(
            a.plan(&st, at(9500)),
            vec![assign("b", 0, 1), assign("b", 2, 1)]
        );
    }

    #[test]
    fn draining_dead_and_unknown_allocs_get_nothing() {
        let t0 = Instant::now();
        let a = arbiter();
        let st = state(
            &[None, None, Some("gone")],
            &[("a", true), ("b", false), ("c", false)],
        );
        a.observe(Some(1), t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        a.granted("a", 1, at(9000), T);
        a.granted("b", 1, at(9000), T);
        // c's last grant is older than one lease: not live.
        a.granted("c", 1, at(1000), T);
        assert_eq!(a.plan(&st, at(9500)), vec![assign("b", 0, 3)]);
        // Nobody live: nothing moves.
        assert!(a.plan(&st, at(20_000)).is_empty());
    }

    #[test]
    fn losing_office_or_a_new_term_forgets_grants() {
        let t0 = Instant::now();
        let a = arbiter();
        let st = state(&[Some("a")], &[("a", false), ("b", false)]);
        let at = |ms| t0 + Duration::from_millis(ms);
        a.observe(Some(1), t0);
        a.granted("b", 1, at(6000), T);
        a.observe(None, at(6001));
        assert!(a.plan(&st, at(6002)).is_empty());
        assert!(
            !a.granted("b", 1, at(6003), T),
            "a grant from an old term is ignored"
        );
        a.observe(Some(2), at(7000));
        a.granted("b", 2, at(12_500), T);
        assert!(a.plan(&st, at(12_999)).is_empty());
        assert_eq!(a.plan(&st, at(13_000)), vec![assign("b", 0, 1)]);
        let v = a.view(&st, at(13_000));
        assert!(v["a"].expired && !v["b"].expired);
    }

    fn retire(alloc: &str, incarnation: Incarnation) -> Command {
        Command::RetireAlloc {
            alloc: alloc.into(),
            incarnation,
        }
    }

    #[test]
    fn a_fenced_alloc_is_retired_once_its_lease_is_over_and_its_sections_moved() {
        let t0 = Instant::now();
        let a = arbiter();
        let mut st = state(&[Some("f"), Some("b")], &[("f", false), ("b", false)]);
        st.allocs.get_mut("f").unwrap().fenced = true;
        let at = |ms| t0 + Duration::from_millis(ms);
        assert!(a.retirements(&st, at(0)).is_empty(), "not in office");
        a.observe(Some(1), t0);
        for ms in (0..=20_000).step_by(500) {
            a.granted("b", 1, at(ms), T);
        }
        // f was granted a renewal at 7 s, then fenced: its renewals are
        // refused from then on, but that lease runs to 12 s on its clock.
        a.granted("f", 1, at(7000), T);
        assert!(
            a.retirements(&st, at(12_999)).is_empty(),
            "fenced is not expired"
        );
        assert!(a.plan(&st, at(12_999)).is_empty());
        // Expired: its section moves first; it is not retired while it
        // owns it.
        assert_eq!(a.plan(&st, at(13_000)), vec![assign("b", 0, 1)]);
        assert!(a.retirements(&st, at(13_000)).is_empty(), "owns section 0");
        st.sections[0].owner = Some("b".into());
        assert_eq!(a.retirements(&st, at(13_100)), vec![retire("f", 1)]);
        assert!(a.plan(&st, at(13_100)).is_empty());
    }

    #[test]
    fn only_fenced_expired_allocs_that_own_nothing_served_are_retired() {
        let t0 = Instant::now();
        let a = arbiter();
        // Section 0 is f's but moved to set 1; 1 is g's; 2 is b's.
        let mut st = state(
            &[Some("f"), Some("g"), Some("b"), None],
            &[
                ("b", false),
                ("dead", false),
                ("f", false),
                ("g", false),
                ("s", false),
                ("live", false),
            ],
        );
        st.placement.set(0..1, seqsvr_core::Place::Moved { to: 1 });
        for id in ["f", "g", "s", "live"] {
            st.allocs.get_mut(id).unwrap().fenced = true;
        }
        // s's process recorded its planned stop: its id comes back.
        st.allocs.get_mut("s").unwrap().incarnation = 0;
        st.allocs.get_mut("f").unwrap().incarnation = 7;
        a.observe(Some(1), t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        // A new office: no one is certainly expired before its first
        // lease + margin, whatever it was before.
        assert!(a.retirements(&st, at(5999)).is_empty());
        // "live" was granted a renewal before it was fenced.
        a.granted("live", 1, at(5000), T);
        // dead is expired but not fenced (an operator retires it, or it
        // comes back); g owns a section this set serves; s stopped; live's
        // lease may still run. Only f goes (its section is not served
        // here), under the incarnation it was decided on.
        assert_eq!(a.retirements(&st, at(6000)), vec![retire("f", 7)]);
        // Once live's lease is over too.
        assert_eq!(
            a.retirements(&st, at(11_000)),
            vec![retire("f", 7), retire("live", 1)]
        );
        a.observe(None, at(11_001));
        assert!(a.retirements(&st, at(11_002)).is_empty(), "out of office");
    }

    #[test]
    fn a_shorter_grant_does_not_cut_a_longer_one_short() {
        let t0 = Instant::now();
        let a = arbiter();
        let st = state(&[Some("a")], &[("a", false), ("b", false)]);
        let at = |ms| t0 + Duration::from_millis(ms);
        a.observe(Some(1), t0);
        let long = LeaseTerms {
            lease_ms: 10_000,
            margin_ms: 1000,
        };
        a.granted("a", 1, at(7000), long);
        // Terms shortened to 5 s + 1 s; a renews once more, then stops.
        a.granted("a", 1, at(8000), T);
        for ms in (7000..=30_000).step_by(500) {
            a.granted("b", 1, at(ms), T);
        }
        // Its lease from 7 s runs to 17 s on its clock: nothing moves
        // before 18 s (17 s + margin), though the last grant + 6 s is 14 s.
        assert!(a.plan(&st, at(17_999)).is_empty());
        assert_eq!(a.plan(&st, at(18_000)), vec![assign("b", 0, 1)]);
    }
}
