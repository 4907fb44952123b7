//! Rendering: a replica's Raft, membership, state and disk read into the
//! gauges at each scrape (kept apart from the counters that the proposer
//! and the state machine update, which need none of these).

use std::time::Instant;

use seqsvr_core::Place;

use super::StoreMetrics;
use crate::arbiter::Arbiter;
use crate::disk::Disk;
use crate::membership::view::{replication, View};
use crate::state_machine::StateMachine;
use crate::types::{NodeId, Raft};

impl StoreMetrics {
    /// Reads replica `id`'s state into the gauges and renders everything.
    pub fn render(
        &self,
        id: NodeId,
        raft: &Raft,
        sm: &StateMachine,
        disk: &Disk,
        arbiter: &Arbiter,
    ) -> String {
        let g = &self.gauges;
        let m = raft.metrics().borrow().clone();
        let last_log = m.last_log_index.unwrap_or(0);
        let applied = m.last_applied.map(|l| l.index).unwrap_or(0);
        let members = View::from_metrics(&m);
        let max_lag = replication(&m).iter().map(|r| r.lag).max().unwrap_or(0);
        g.term.set(m.current_term as i64);
        g.is_leader.set(i64::from(m.current_leader == Some(id)));
        g.last_log_index.set(last_log as i64);
        g.last_applied.set(applied as i64);
        g.commit_lag.set(last_log.saturating_sub(applied) as i64);
        g.voters.set(members.voters.len() as i64);
        g.learners.set(members.learners.len() as i64);
        g.joint.set(i64::from(members.joint));
        g.max_member_lag.set(max_lag as i64);
        {
            let a = sm.read();
            let st = &a.state;
            // Kept as commands apply: no scan under the applies' lock.
            let owned = st.owned.total() as i64;
            let not_serving: i64 = (st.placement.runs.iter())
                .filter(|r| r.place != Place::Serving)
                .map(|r| i64::from(r.end.saturating_sub(r.first)))
                .sum();
            let len = st.sections.len() as i64;
            let serving = (len - not_serving).max(0);
            // Only sections this set serves have owners (a freeze or an
            // install clears them): the rest of the serving ones are
            // unowned. On the leader, add those of AllocSvrs whose lease
            // has certainly expired (its view; a follower has none).
            let expired: i64 = (arbiter.view(st, Instant::now()).iter())
                .filter(|(_, v)| v.expired)
                .map(|(id, _)| i64::from(st.owned.count(id)))
                .sum();
            g.sections.set(len);
            g.serving_sections.set(serving);
            g.owned_sections.set(owned);
            g.unserved_sections.set((serving - owned).max(0) + expired);
            g.allocs.set(st.allocs.len() as i64);
            g.route_version.set(st.route_version as i64);
            g.lease_seconds.set(st.lease.terms.lease_ms as f64 / 1000.0);
            g.lease_margin_seconds
                .set(st.lease.terms.margin_ms as f64 / 1000.0);
        }
        let f = disk.fsyncs();
        self.fsyncs.inc_by(f.saturating_sub(self.fsyncs.get()));
        for (c, t) in [
            (&self.sync_seconds, disk.sync_time()),
            (&self.apply_seconds, sm.apply_time()),
        ] {
            c.inc_by((t.as_secs_f64() - c.get()).max(0.0));
        }
        seqsvr_net::exposition::render(&self.registry, &[])
    }
}
