//! Id namespaces in the store: each has a [`Layout`] and, per worker id
//! ever claimed, a record of its holder and its *time ceiling*
//! (docs/ids.md).
//!
//! A worker id is held by an AllocSvr *incarnation*, under the same
//! registration, lease and fencing as its sections — there is no second
//! ownership protocol: a holder whose incarnation is no longer the one
//! registered (replaced after its lease certainly expired, stopped,
//! retired) holds nothing, and a holder whose lease the leader saw
//! certainly expire may be reclaimed by naming it in the claim.
//!
//! Uniqueness does not rest on the lease, though: a holder issues no id
//! with a tick above the ceiling the store acknowledged, raises are fenced
//! by holder and epoch, and every new holder starts at the ceiling plus
//! one. So even a paused ex-holder that wakes up issues only ticks its
//! successor never will.

use std::collections::BTreeMap;

use seqsvr_core::ids::{IdError, Layout};
use seqsvr_core::{AllocId, Epoch, Incarnation};
use serde::{Deserialize, Serialize};

use crate::command::{Outcome, Rejection, Reply};
use crate::state::{Dirty, SetState, MAX_NAME_LEN};
pub use seqsvr_store_api::IdRefusal;

/// Most id namespaces one store group keeps.
pub const MAX_ID_SPACES: usize = 1024;
/// Longest window a namespace may raise its ceilings ahead by (10 min).
pub const MAX_WINDOW_MS: u64 = 600_000;

/// Every id namespace of the group, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdSpaces {
    /// By name.
    pub spaces: BTreeMap<String, IdSpace>,
}

/// One id namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdSpace {
    /// How its ids are built.
    pub layout: Layout,
    /// How far ahead of the clock a holder raises its ceiling, in ms.
    pub window_ms: u64,
    /// Per worker id ever claimed.
    pub workers: BTreeMap<u64, WorkerRecord>,
}

/// One worker id's durable record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// The time ceiling, in ticks: no id of this worker id has a later
    /// tick.
    pub ceiling: u64,
    /// Grows with every claim: the holder's fencing token.
    pub epoch: Epoch,
    /// The holder and its incarnation, if any.
    pub holder: Option<(AllocId, Incarnation)>,
    /// The first tick of the current holding (the ceiling before the claim
    /// plus one).
    pub floor: u64,
}

/// What a claim hands its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerGrant {
    /// The worker id.
    pub worker: u64,
    /// The holding's fencing token: every raise and release carries it.
    pub epoch: Epoch,
    /// The first tick it may issue (whatever its clock says).
    pub floor: u64,
    /// The durable ceiling.
    pub ceiling: u64,
}

fn refuse(namespace: &str, kind: IdRefusal, reason: String) -> Rejection {
    Rejection::Ids {
        namespace: namespace.into(),
        kind,
        reason,
    }
}

impl WorkerRecord {
    /// The grant of the current holding.
    pub fn grant(&self, worker: u64) -> WorkerGrant {
        WorkerGrant {
            worker,
            epoch: self.epoch,
            floor: self.floor,
            ceiling: self.ceiling,
        }
    }
}

impl IdSpace {
    /// The worker ids a claim by `alloc`'s `incarnation` may take, lowest
    /// first: never claimed, released, or held by an incarnation that is
    /// no longer the registered one; and those in `reclaim` (whose
    /// holder's lease the leader saw certainly expire) if the holder is
    /// still the one named.
    fn free_worker(
        &self,
        live: impl Fn(&AllocId, Incarnation) -> bool,
        reclaim: &[(u64, Epoch)],
    ) -> Option<u64> {
        let free = |w: u64| match self.workers.get(&w) {
            None => true,
            Some(r) => match &r.holder {
                None => true,
                Some((a, i)) => !live(a, *i) || reclaim.contains(&(w, r.epoch)),
            },
        };
        (0..self.layout.workers()).find(|&w| free(w))
    }
}

impl SetState {
    /// Creates namespace `name` (idempotent with the same layout and
    /// window; refused with another).
    pub(crate) fn create_id_space(
        &mut self,
        name: &str,
        layout: &Layout,
        window_ms: u64,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        check_ns(name)?;
        layout
            .validate()
            .map_err(|e| Rejection::Invalid(e.to_string()))?;
        if window_ms == 0 || window_ms > MAX_WINDOW_MS {
            return Err(Rejection::Invalid(format!(
                "window must be within 1..={MAX_WINDOW_MS} ms"
            )));
        }
        if let Some(have) = self.ids.spaces.get(name) {
            if have.layout == *layout && have.window_ms == window_ms {
                return Ok(Reply::IdSpace { created: false });
            }
            return Err(refuse(
                name,
                IdRefusal::Mismatch,
                format!(
                    "exists with {:?} and a {} ms window",
                    have.layout, have.window_ms
                ),
            ));
        }
        if self.ids.spaces.len() >= MAX_ID_SPACES {
            return Err(Rejection::Invalid(format!(
                "at most {MAX_ID_SPACES} id namespaces"
            )));
        }
        self.ids.spaces.insert(
            name.into(),
            IdSpace {
                layout: *layout,
                window_ms,
                workers: BTreeMap::new(),
            },
        );
        dirty.push(Dirty::IdSpace(name.into()));
        Ok(Reply::IdSpace { created: true })
    }

    /// `alloc`'s `incarnation` claims a worker id of `ns` at its clock's
    /// tick `now`. One it holds already is returned as it is (a retried
    /// claim whose reply was lost); otherwise the lowest free one gets a
    /// new epoch, floor = ceiling + 1 and ceiling = max(floor, now) +
    /// window, in this one write.
    pub(crate) fn claim_worker(
        &mut self,
        ns: &str,
        alloc: &AllocId,
        incarnation: Incarnation,
        now: u64,
        reclaim: &[(u64, Epoch)],
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        self.check_incarnation(alloc, incarnation)?;
        let allocs = &self.allocs;
        let live = |a: &AllocId, i: Incarnation| {
            allocs.get(a).is_some_and(|r| r.incarnation == i && i != 0)
        };
        let space = self.ids.spaces.get_mut(ns).ok_or_else(|| unknown(ns))?;
        let me = Some((alloc.clone(), incarnation));
        if let Some((&w, r)) = space.workers.iter().find(|(_, r)| r.holder == me) {
            return Ok(Reply::WorkerClaimed(r.grant(w)));
        }
        let layout = space.layout;
        let Some(w) = space.free_worker(live, reclaim) else {
            return Err(refuse(
                ns,
                IdRefusal::WorkersExhausted,
                format!("all {} worker ids are held", layout.workers()),
            ));
        };
        let window = layout.ticks_in(space.window_ms);
        let floor = space.workers.get(&w).map_or(0, |r| r.ceiling) + 1;
        if floor > layout.max_tick() {
            return Err(time_exhausted(ns, &layout));
        }
        let r = space.workers.entry(w).or_default();
        r.epoch += 1;
        r.holder = me;
        r.floor = floor;
        r.ceiling = floor.max(now).saturating_add(window).min(layout.max_tick());
        dirty.push(Dirty::IdSpace(ns.into()));
        Ok(Reply::WorkerClaimed(r.grant(w)))
    }

    /// Raises worker `worker`'s ceiling to `to`, if `alloc`'s
    /// `incarnation` holds it at `epoch`. A `to` at or below the ceiling
    /// changes nothing and answers the ceiling (a late or repeated raise).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn raise_worker(
        &mut self,
        ns: &str,
        worker: u64,
        alloc: &AllocId,
        incarnation: Incarnation,
        epoch: Epoch,
        to: u64,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        self.check_incarnation(alloc, incarnation)?;
        let (layout, r) = self.held(ns, worker, alloc, incarnation, epoch)?;
        if to > layout.max_tick() {
            return Err(time_exhausted(ns, &layout));
        }
        if to > r.ceiling {
            r.ceiling = to;
            dirty.push(Dirty::IdSpace(ns.into()));
        }
        Ok(Reply::WorkerRaised { ceiling: r.ceiling })
    }

    /// Releases worker `worker` (a holder's clean stop): no holder, the
    /// ceiling stays, so the next holder starts above it.
    pub(crate) fn release_worker(
        &mut self,
        ns: &str,
        worker: u64,
        alloc: &AllocId,
        incarnation: Incarnation,
        epoch: Epoch,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let (_, r) = self.held(ns, worker, alloc, incarnation, epoch)?;
        r.holder = None;
        dirty.push(Dirty::IdSpace(ns.into()));
        Ok(Reply::WorkerReleased)
    }

    /// The record of `worker` in `ns` if `alloc`'s `incarnation` holds it
    /// at `epoch` (fencing: a ghost's raise or release is refused).
    fn held(
        &mut self,
        ns: &str,
        worker: u64,
        alloc: &AllocId,
        incarnation: Incarnation,
        epoch: Epoch,
    ) -> Result<(Layout, &mut WorkerRecord), Rejection> {
        let space = self.ids.spaces.get_mut(ns).ok_or_else(|| unknown(ns))?;
        let layout = space.layout;
        match space.workers.get_mut(&worker) {
            Some(r)
                if r.epoch == epoch && r.holder.as_ref() == Some(&(alloc.clone(), incarnation)) =>
            {
                Ok((layout, r))
            }
            r => Err(refuse(
                ns,
                IdRefusal::NotHolder,
                format!(
                    "worker {worker} is held by {:?} at epoch {}",
                    r.as_ref().and_then(|r| r.holder.clone()),
                    r.map_or(0, |r| r.epoch)
                ),
            )),
        }
    }
}

fn unknown(ns: &str) -> Rejection {
    refuse(
        ns,
        IdRefusal::UnknownNamespace,
        "no such id namespace".into(),
    )
}

fn time_exhausted(ns: &str, layout: &Layout) -> Rejection {
    let e = IdError::TimeExhausted {
        end_ms: layout.end_ms().unwrap_or(u64::MAX),
    };
    refuse(ns, IdRefusal::TimeExhausted, e.to_string())
}

fn check_ns(name: &str) -> Result<(), Rejection> {
    if name.is_empty()
        || name.len() > MAX_NAME_LEN
        || name.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(Rejection::Invalid(format!(
            "an id namespace is 1..={MAX_NAME_LEN} printable characters without spaces"
        )));
    }
    Ok(())
}
