//! Evening out sections after a recovery (docs/operations.md, Automatic
//! rebalancing): when a crashed AllocSvr comes back, the arbiter has given
//! its sections to the others, and it would stay empty until an operator
//! ran `seqctl alloc rebalance`. While this replica leads, the arbiter
//! plans, at most once per `interval_ms` and at most
//! `sections_per_interval` sections at a time, which live AllocSvr hands
//! which sections to which; the driver (the store's `node/rebalance.rs`)
//! asks each giver to hand them off over its admin plane — the planned
//! handoff `seqctl alloc handoff`/`rebalance` use, so the giver stops
//! serving a section before the store hands it over and its taker starts
//! (promise 3; no lease waits, no outage beyond one section's move).
//!
//! The plan never competes with failover or a drain: it is empty while
//! any section this set serves has no owner, an owner that is not live or
//! has not claimed it yet, or an owner that is draining, fenced or stopped ([`Arbiter::plan`] and
//! the operator move those), and during a new office's first
//! `lease + margin` (liveness is only known from this office's grants).
//!
//! Pure: time comes in as an argument.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use seqsvr_core::{AllocId, Place, SectionId};
use serde::{Deserialize, Serialize};

use super::Arbiter;
use crate::state::SetState;

/// The arbiter's rebalancing (the `[rebalance]` table of a store replica's
/// config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RebalanceConfig {
    /// Whether the arbiter evens out sections by itself. Off, sections stay
    /// where failover put them until `seqctl alloc rebalance`.
    pub enabled: bool,
    /// At most this many sections move per interval.
    pub sections_per_interval: u32,
    /// How often a batch may start, in ms (and how long a returning
    /// AllocSvr has been live, at least, before it gets sections).
    pub interval_ms: u64,
}

impl Default for RebalanceConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            sections_per_interval: 64,
            interval_ms: 1000,
        }
    }
}

impl RebalanceConfig {
    /// Checks the bounds: a positive rate, and a batch one handoff call
    /// carries.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval_ms == 0 {
            return Err("interval_ms must be positive".into());
        }
        let max = crate::command::MAX_SECTIONS_PER_CALL;
        if self.sections_per_interval == 0 || self.sections_per_interval > max {
            return Err(format!("sections_per_interval must be in 1..={max}"));
        }
        Ok(())
    }
}

/// One giver's part of a rebalance: the sections it is asked to hand off,
/// each with its taker, in section order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The AllocSvr handing sections off.
    pub from: AllocId,
    /// Its admin-plane address, where the handoff is asked for.
    pub admin_addr: String,
    /// `(section, taker)`.
    pub moves: Vec<(SectionId, AllocId)>,
}

impl Batch {
    /// The takers and how many sections each gets, for the log.
    pub fn takers(&self) -> BTreeMap<&AllocId, usize> {
        let mut out = BTreeMap::new();
        for (_, to) in &self.moves {
            *out.entry(to).or_default() += 1;
        }
        out
    }
}

impl Arbiter {
    /// The handoffs to ask for now (module docs): empty unless `cfg` is
    /// enabled, this replica has led for a full `lease + margin`, the last
    /// non-empty plan is `interval_ms` old, every served section is held
    /// by a live AllocSvr that may take sections, and the most and least
    /// loaded of those differ by more than one. Otherwise the most loaded
    /// give their last sections (so runs stay long) to the least loaded,
    /// until every one is within one of an even share or
    /// `sections_per_interval` sections are planned.
    pub fn rebalance(&self, state: &SetState, cfg: &RebalanceConfig, now: Instant) -> Vec<Batch> {
        if !cfg.enabled {
            return Vec::new();
        }
        let mut g = self.lock();
        let Some(office) = g.office else {
            return Vec::new();
        };
        let wait = Duration::from_millis(state.lease.office_wait_ms());
        let interval = Duration::from_millis(cfg.interval_ms);
        if now < office.since + wait || g.rebalanced.is_some_and(|t| now < t + interval) {
            return Vec::new();
        }
        let grants = &g.grants;
        let live = |id: &AllocId| grants.get(id).is_some_and(|l| now < l.at + l.lease);
        let Some(held) = held_by_live(state, live) else {
            return Vec::new();
        };
        let batches = deal(state, &held, cfg.sections_per_interval as usize);
        if !batches.is_empty() {
            g.rebalanced = Some(now);
        }
        batches
    }
}

/// The sections each live AllocSvr that may take sections holds (live,
/// and neither draining, fenced nor stopped: takers and givers alike),
/// or `None` when there are fewer than two of them or a served section is
/// not held by one (a failover, a first routing, a claim or a drain is
/// under way).
fn held_by_live(
    state: &SetState,
    live: impl Fn(&AllocId) -> bool,
) -> Option<BTreeMap<&AllocId, Vec<SectionId>>> {
    let mut held: BTreeMap<&AllocId, Vec<SectionId>> = (state.allocs.iter())
        .filter(|(id, a)| !a.draining && !a.fenced && a.incarnation != 0 && live(id))
        .map(|(id, _)| (id, Vec::new()))
        .collect();
    if held.len() < 2 {
        return None;
    }
    for (s, r) in state.sections.iter().enumerate() {
        if state.placement.place_of(s as SectionId) != Place::Serving {
            continue;
        }
        // Held means claimed by the owner's current process: a section
        // routed but not yet claimed (after an `Assign`, or of a process
        // that came back) is not served, so not handed off.
        let claimed =
            |o: &AllocId| (state.allocs.get(o)).is_some_and(|a| a.incarnation == r.incarnation);
        let list = r
            .owner
            .as_ref()
            .filter(|o| claimed(o))
            .and_then(|o| held.get_mut(o))?;
        list.push(s as SectionId);
    }
    Some(held)
}

/// The hand-offs that bring every AllocSvr in `held` within one of an
/// even share, at most `budget` sections: the most loaded give their last
/// sections (so runs stay long) to the least loaded. None when the most
/// and least loaded differ by one or less.
fn deal(state: &SetState, held: &BTreeMap<&AllocId, Vec<SectionId>>, budget: usize) -> Vec<Batch> {
    let total: usize = held.values().map(Vec::len).sum();
    let n = held.len();
    // Shares: the remainder goes to the most loaded, so no more moves
    // than needed.
    let mut order: Vec<(&AllocId, usize)> = held.iter().map(|(id, l)| (*id, l.len())).collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let share: BTreeMap<&AllocId, usize> = (order.iter().enumerate())
        .map(|(i, (id, _))| (*id, total / n + usize::from(i < total % n)))
        .collect();
    let (most, least) = (order[0].1, order[n - 1].1);
    if most <= least + 1 {
        return Vec::new();
    }
    let mut needs: Vec<(&AllocId, usize)> = (order.iter().rev())
        .filter(|(id, k)| *k < share[id])
        .map(|(id, k)| (*id, share[id] - k))
        .collect();
    let mut budget = budget;
    let mut batches = Vec::new();
    for (from, k) in &order {
        let extra = k.saturating_sub(share[from]);
        if extra == 0 || budget == 0 {
            continue;
        }
        let list = &held[from];
        let give = extra.min(budget);
        let mut moves = Vec::with_capacity(give);
        for &s in &list[list.len() - give..] {
            let Some((to, left)) = needs.iter_mut().find(|(_, left)| *left > 0) else {
                break;
            };
            *left -= 1;
            moves.push((s, (*to).clone()));
        }
        budget -= moves.len();
        if !moves.is_empty() {
            batches.push(Batch {
                from: (*from).clone(),
                admin_addr: state.allocs[*from].admin_addr.clone(),
                moves,
            });
        }
    }
    batches
}

#[cfg(test)]
mod tests;
