//! Rendering: a replica's Raft, membership, state and disk read into the
//! gauges at each scrape (kept apart from the counters that the proposer
//! and the state machine update, which need none of these).

use super::StoreMetrics;
use crate::disk::Disk;
use crate::membership::view::{replication, View};
use crate::state_machine::StateMachine;
use crate::types::{NodeId, Raft};

impl StoreMetrics {
    /// Reads replica `id`'s state into the gauges and renders everything.
    pub fn render(&self, id: NodeId, raft: &Raft, sm: &StateMachine, disk: &Disk) -> String {
        let m = raft.metrics().borrow().clone();
        let last_log = m.last_log_index.unwrap_or(0);
        let applied = m.last_applied.map(|l| l.index).unwrap_or(0);
        let members = View::from_metrics(&m);
        let max_lag = replication(&m).iter().map(|r| r.lag).max().unwrap_or(0);
        for (f, v) in [
            ("term", m.current_term as i64),
            ("is_leader", i64::from(m.current_leader == Some(id))),
            ("last_log_index", last_log as i64),
            ("last_applied", applied as i64),
            ("commit_lag", last_log.saturating_sub(applied) as i64),
            ("voters", members.voters.len() as i64),
            ("learners", members.learners.len() as i64),
            ("joint", i64::from(members.joint)),
            ("max_member_lag", max_lag as i64),
        ] {
            self.raft.with_label_values(&[f]).set(v);
        }
        {
            let a = sm.read();
            // Kept as commands apply: no scan under the applies' lock.
            let owned = a.state.owned.total();
            for (f, v) in [
                ("sections", a.state.sections.len() as i64),
                ("owned_sections", owned as i64),
                ("allocs", a.state.allocs.len() as i64),
                ("route_version", a.state.route_version as i64),
                ("lease_ms", a.state.lease.terms.lease_ms as i64),
                ("margin_ms", a.state.lease.terms.margin_ms as i64),
            ] {
                self.state.with_label_values(&[f]).set(v);
            }
        }
        let f = disk.fsyncs();
        self.fsyncs.inc_by(f.saturating_sub(self.fsyncs.get()));
        for (what, t) in [("sync", disk.sync_time()), ("apply", sm.apply_time())] {
            let c = self.seconds.with_label_values(&[what]);
            c.inc_by((t.as_secs_f64() - c.get()).max(0.0));
        }
        prometheus::TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# metrics encoding failed: {e}\n"))
    }
}
