//! The checker over every id issued in a run (docs/ids.md, "What is
//! guaranteed"), and the id counters.
//!
//! While running, at each issue:
//! - **ceiling** ([`ID_CEILING`](crate::check::ID_CEILING)): no id carries a tick above its worker
//!   id's ceiling as *committed* in the store at that instant (a holder
//!   issues only under a ceiling the store acknowledged);
//! - a `CLOCK_BEHIND` refusal is given only with the clock really behind
//!   the last tick issued (a sanity check: it is typed and immediate by
//!   construction, never a wait).
//!
//! And when an AllocSvr admits an id call (`alloc/ids.rs`), **exclusive**
//! ([`ID_EXCLUSIVE`](crate::check::ID_EXCLUSIVE)): no other process holds the same worker id with its
//! lease valid, running and not fenced.
//!
//! At the end, over every id issued (received by a client or not):
//! - **unique** ([`ID_UNIQUE`](crate::check::ID_UNIQUE)): no id of a namespace twice;
//! - **ordered** ([`ID_ORDER`](crate::check::ID_ORDER)): within one holding (worker id and epoch)
//!   decoded time and sequence strictly increase in the order issued, and
//!   every id of a holding lies below every id of the worker id's next
//!   holding (a successor starts above its predecessor's ceiling).

use std::collections::{BTreeMap, HashMap};

use seqsvr_core::ids::Layout;
use seqsvr_core::Epoch;
use seqsvr_store_core::command::{Command, Outcome, Reply};

use crate::check::{Violation, ID_CEILING, ID_ORDER, ID_UNIQUE};
use crate::net::{fmt_time, Time};

/// Counters of the id traffic of a run.
#[derive(Debug, Clone, Default)]
pub struct IdStats {
    /// Ids issued by AllocSvrs.
    pub issued: u64,
    /// Ids clients received.
    pub received: u64,
    /// Id calls answered with ids.
    pub calls_ok: u64,
    /// Id calls given up after retries.
    pub calls_failed: u64,
    /// Ids issued at a tick ahead of the clock (borrowed).
    pub borrowed: u64,
    /// Issues that found the clock behind the last tick.
    pub clock_back: u64,
    /// `CLOCK_BEHIND` refusals.
    pub clock_behind: u64,
    /// `ID_CEILING_REACHED` refusals (after the wait for a raise).
    pub ceiling_reached: u64,
    /// Claims refused because every worker id was held.
    pub exhausted: u64,
    /// Claims committed, and those that took a worker id whose holder was
    /// still named (reclaimed after a lapsed lease).
    pub claims: u64,
    /// See `claims`.
    pub reclaims: u64,
    /// Raises committed.
    pub raises: u64,
    /// Holdings ended because the store said they were no longer ours.
    pub lost: u64,
    /// Releases committed (planned stops).
    pub releases: u64,
    /// Other refusals clients saw (lease, fence, unavailable, store down).
    pub other_refusals: u64,
}

/// Counts what an id command committed did.
pub(crate) fn record(stats: &mut IdStats, cmd: &Command, out: &Outcome) {
    match (cmd, out) {
        (Command::ClaimWorker { reclaim, .. }, Ok(Reply::WorkerClaimed(g))) => {
            stats.claims += 1;
            let took = |(w, e): &(u64, Epoch)| *w == g.worker && e + 1 == g.epoch;
            stats.reclaims += reclaim.iter().any(took) as u64;
        }
        (Command::RaiseWorker { .. }, Ok(_)) => stats.raises += 1,
        (Command::ReleaseWorker { .. }, Ok(_)) => stats.releases += 1,
        _ => {}
    }
}

/// One id issued.
#[derive(Debug, Clone, Copy)]
struct Issued {
    id: u64,
    slot: usize,
    worker: u64,
    epoch: Epoch,
    at: Time,
}

/// The id checker's records.
#[derive(Debug, Default)]
pub(crate) struct IdMonitor {
    /// Per namespace, its layout.
    layouts: Vec<Layout>,
    /// Per namespace, every id issued, in order.
    issued: Vec<Vec<Issued>>,
    /// Per namespace, when a client last received an id.
    pub last_received: Vec<Time>,
    /// Counters.
    pub stats: IdStats,
}

impl IdMonitor {
    /// A checker for namespaces of `layouts`.
    pub(crate) fn new(layouts: Vec<Layout>) -> Self {
        let n = layouts.len();
        Self {
            layouts,
            issued: vec![Vec::new(); n],
            last_received: vec![0; n],
            stats: IdStats::default(),
        }
    }

    /// Process `slot` issued `ids` of namespace `ns` from worker id
    /// `worker` held at `epoch`; `ceiling` is the worker id's committed
    /// ceiling now. Returns what broke.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_issue(
        &mut self,
        now: Time,
        slot: usize,
        ns: usize,
        worker: u64,
        epoch: Epoch,
        ids: &[u64],
        ceiling: u64,
    ) -> Option<Violation> {
        self.stats.issued += ids.len() as u64;
        let mut found = None;
        for &id in ids {
            self.issued[ns].push(Issued {
                id,
                slot,
                worker,
                epoch,
                at: now,
            });
            let tick = self.layouts[ns].decode(id).map_or(u64::MAX, |d| d.tick);
            if tick > ceiling && found.is_none() {
                found = Some(Violation {
                    at: now,
                    promise: ID_CEILING,
                    what: format!(
                        "p{slot} issued {id} of namespace #{ns} (worker {worker}, epoch {epoch}) at tick {tick}, above the committed ceiling {ceiling}"
                    ),
                });
            }
        }
        found
    }

    /// End of run: uniqueness, order within holdings, holdings in order.
    pub(crate) fn finish(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        for (ns, issued) in self.issued.iter().enumerate() {
            out.extend(self.unique(ns, issued));
            out.extend(self.ordered(ns, issued));
        }
        out.sort_by_key(|v| v.at);
        out
    }

    fn unique(&self, ns: usize, issued: &[Issued]) -> Vec<Violation> {
        let mut seen: HashMap<u64, Issued> = HashMap::with_capacity(issued.len());
        let mut out = Vec::new();
        for i in issued {
            if let Some(e) = seen.insert(i.id, *i) {
                out.push(Violation {
                    at: i.at,
                    promise: ID_UNIQUE,
                    what: format!(
                        "id {} of namespace #{ns} issued twice: by p{} (worker {}, epoch {}) at {} and by p{} (epoch {}) at {}",
                        i.id,
                        e.slot,
                        e.worker,
                        e.epoch,
                        fmt_time(e.at),
                        i.slot,
                        i.epoch,
                        fmt_time(i.at)
                    ),
                });
            }
        }
        out
    }

    fn ordered(&self, ns: usize, issued: &[Issued]) -> Vec<Violation> {
        let layout = &self.layouts[ns];
        let key = |id: u64| layout.decode(id).map_or((0, 0), |d| (d.tick, d.seq));
        let mut out = Vec::new();
        // Per worker id, per epoch: (lowest, highest, last) ids.
        let mut holdings: BTreeMap<(u64, Epoch), (Issued, Issued, Issued)> = BTreeMap::new();
        for i in issued {
            let h = match holdings.entry((i.worker, i.epoch)) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert((*i, *i, *i));
                    continue;
                }
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            };
            if key(i.id) <= key(h.2.id) {
                out.push(Violation {
                    at: i.at,
                    promise: ID_ORDER,
                    what: format!(
                        "worker {} (epoch {}) of namespace #{ns} issued {} {:?} after {} {:?} (p{} then p{})",
                        i.worker,
                        i.epoch,
                        i.id,
                        key(i.id),
                        h.2.id,
                        key(h.2.id),
                        h.2.slot,
                        i.slot
                    ),
                });
            }
            if i.id < h.0.id {
                h.0 = *i;
            }
            if i.id > h.1.id {
                h.1 = *i;
            }
            h.2 = *i;
        }
        let list: Vec<_> = holdings.into_iter().collect();
        for pair in list.windows(2) {
            let ((w0, e0), (_, hi0, _)) = &pair[0];
            let ((w1, e1), (lo1, _, _)) = &pair[1];
            if w0 == w1 && hi0.id >= lo1.id {
                out.push(Violation {
                    at: lo1.at.max(hi0.at),
                    promise: ID_ORDER,
                    what: format!(
                        "worker {w0} of namespace #{ns}: epoch {e0} issued {} (p{} at {}), not below {} of the next holding, epoch {e1} (p{} at {})",
                        hi0.id,
                        hi0.slot,
                        fmt_time(hi0.at),
                        lo1.id,
                        lo1.slot,
                        fmt_time(lo1.at)
                    ),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            time_bits: 41,
            worker_bits: 2,
            seq_bits: 6,
            epoch_ms: 0,
            unit_ms: 1,
            js_safe: false,
            order: seqsvr_core::ids::Order::TimeWorkerSeq,
        }
    }

    /// The checker catches what it is for: a repeat, a step back within a
    /// holding, a successor below its predecessor, a tick above the
    /// ceiling.
    #[test]
    fn the_checks_catch_each_fault() {
        let l = layout();
        let id = |tick, worker, seq| l.encode(tick, worker, seq).unwrap();
        let mut m = IdMonitor::new(vec![l]);
        assert!(m.on_issue(1, 0, 0, 1, 1, &[id(10, 1, 0)], 20).is_none());
        assert!(m.on_issue(2, 0, 0, 1, 1, &[id(10, 1, 1)], 20).is_none());
        assert!(m.finish().is_empty(), "{:?}", m.finish());
        let v = m.on_issue(3, 0, 0, 1, 1, &[id(21, 1, 0)], 20).unwrap();
        assert_eq!(v.promise, ID_CEILING);
        m.on_issue(4, 0, 0, 1, 1, &[id(9, 1, 0)], 30);
        m.on_issue(5, 1, 0, 1, 2, &[id(15, 1, 0)], 30);
        m.on_issue(6, 1, 0, 1, 2, &[id(15, 1, 0)], 30);
        let found: Vec<u8> = m.finish().iter().map(|v| v.promise).collect();
        assert!(found.contains(&ID_UNIQUE), "{found:?}");
        assert_eq!(
            found.iter().filter(|p| **p == ID_ORDER).count(),
            3,
            "{found:?}"
        );
    }
}
