//! How the id commands change a set's state (`crate::ids` holds the
//! records and docs/ids.md the rules). A part of [`crate::state`], like
//! the set commands.

use seqsvr_core::ids::{IdError, Layout};
use seqsvr_core::{AllocId, Epoch, Incarnation};

use super::{Dirty, SetState, MAX_NAME_LEN};
use crate::command::{Outcome, Rejection, Reply};
use crate::ids::{IdRefusal, IdSpace, WorkerRecord, MAX_ID_SPACES, MAX_WINDOW_MS, UNRECORDED};
use std::collections::BTreeMap;

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
        // Every registered AllocSvr may hold one worker id of the
        // namespace at once (any AllocSvr serves any namespace): fewer
        // worker ids would leave some of them refused with
        // `WorkersExhausted` from the first day (promise 5: refused at
        // creation, not at the first id).
        let holders = self.allocs.len() as u64;
        if layout.workers() < holders {
            return Err(Rejection::Invalid(format!(
                "invalid id layout: {} worker bits hold {} worker ids; the {holders} \
                 registered AllocSvrs need {} worker bits",
                layout.worker_bits,
                layout.workers(),
                64 - (holders - 1).leading_zeros().min(63)
            )));
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
        let floor = space.ceiling_of(w) + 1;
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

impl SetState {
    /// See [`crate::command::Command::RestoreIds`]. Every namespace is
    /// checked as a create checks it, and its worker records against its
    /// layout, before any lands; a name listed twice refuses the command.
    pub(crate) fn restore_ids(
        &mut self,
        spaces: &[(String, IdSpace)],
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let mut listed = std::collections::BTreeSet::new();
        for (name, space) in spaces {
            check_restored(name, space)?;
            if !listed.insert(name) {
                return Err(Rejection::Invalid(format!(
                    "id namespace {name:?} is listed twice"
                )));
            }
        }
        let fresh: Vec<_> = (spaces.iter())
            .filter(|(name, _)| !self.ids.spaces.contains_key(name))
            .collect();
        if self.ids.spaces.len() + fresh.len() > MAX_ID_SPACES {
            return Err(Rejection::Invalid(format!(
                "at most {MAX_ID_SPACES} id namespaces"
            )));
        }
        for (name, space) in &fresh {
            self.ids.spaces.insert(name.clone(), space.clone());
            dirty.push(Dirty::IdSpace(name.clone()));
        }
        Ok(Reply::Restored {
            newly: fresh.len() as u32,
            route_version: self.route_version,
        })
    }
}

/// A restored namespace as a create would check it, and its worker
/// records: ids within the layout, ceilings within its time, no holder.
fn check_restored(name: &str, space: &IdSpace) -> Result<(), Rejection> {
    check_ns(name)?;
    let layout = &space.layout;
    let invalid = |m: String| Rejection::Invalid(format!("id namespace {name:?}: {m}"));
    layout.validate().map_err(|e| invalid(e.to_string()))?;
    if space.window_ms == 0 || space.window_ms > MAX_WINDOW_MS {
        return Err(invalid(format!(
            "window must be within 1..={MAX_WINDOW_MS} ms"
        )));
    }
    for (&w, r) in &space.workers {
        if w >= layout.workers() && w != UNRECORDED {
            return Err(invalid(format!(
                "worker id {w} is outside its {} worker ids",
                layout.workers()
            )));
        }
        if r.ceiling > layout.max_tick() || r.holder.is_some() {
            return Err(invalid(format!(
                "worker id {w}: a restored record has a ceiling within the layout's time and no \
                 holder"
            )));
        }
    }
    Ok(())
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

fn refuse(namespace: &str, kind: IdRefusal, reason: String) -> Rejection {
    Rejection::Ids {
        namespace: namespace.into(),
        kind,
        reason,
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
