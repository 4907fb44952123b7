//! A replica's gauges, one metric per meaning, read when scraped
//! (`render.rs`). Durations are in seconds.

use prometheus::{Gauge, IntGauge, Registry};

/// Every gauge of a replica.
pub(super) struct Gauges {
    pub term: IntGauge,
    pub is_leader: IntGauge,
    pub last_log_index: IntGauge,
    pub last_applied: IntGauge,
    pub commit_lag: IntGauge,
    pub voters: IntGauge,
    pub learners: IntGauge,
    pub joint: IntGauge,
    pub max_member_lag: IntGauge,
    pub sections: IntGauge,
    pub serving_sections: IntGauge,
    pub owned_sections: IntGauge,
    pub unserved_sections: IntGauge,
    pub allocs: IntGauge,
    pub route_version: IntGauge,
    pub lease_seconds: Gauge,
    pub lease_margin_seconds: Gauge,
}

impl Gauges {
    pub(super) fn register(r: &Registry) -> prometheus::Result<Self> {
        let int = |name: &str, help: &str| -> prometheus::Result<IntGauge> {
            let g = IntGauge::new(name, help)?;
            r.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let float = |name: &str, help: &str| -> prometheus::Result<Gauge> {
            let g = Gauge::new(name, help)?;
            r.register(Box::new(g.clone()))?;
            Ok(g)
        };
        Ok(Self {
            term: int("seqsvr_raft_term", "this replica's Raft term")?,
            is_leader: int("seqsvr_raft_is_leader", "1 while this replica is the leader")?,
            last_log_index: int("seqsvr_raft_last_log_index", "index of this replica's last log entry")?,
            last_applied: int("seqsvr_raft_last_applied", "index of the last entry applied to the state machine")?,
            commit_lag: int("seqsvr_raft_commit_lag", "log entries this replica holds but has not applied")?,
            voters: int("seqsvr_raft_voters", "voters in the membership in force")?,
            learners: int("seqsvr_raft_learners", "learners in the membership in force (above 0 for long: an add cut short)")?,
            joint: int("seqsvr_raft_joint", "1 while a membership change is half done (two configurations in force)")?,
            max_member_lag: int("seqsvr_raft_max_member_lag", "leader only: log entries the furthest member is behind")?,
            sections: int("seqsvr_store_sections", "sections of this set's span (served or not)")?,
            serving_sections: int("seqsvr_store_serving_sections", "sections this set serves (its span less those absent or moved to another set)")?,
            owned_sections: int("seqsvr_store_owned_sections", "sections routed to an AllocSvr")?,
            unserved_sections: int("seqsvr_store_unserved_sections", "sections this set serves that no live AllocSvr holds: unowned, or (on the leader) owned by an AllocSvr whose lease has certainly expired")?,
            allocs: int("seqsvr_store_allocs", "AllocSvrs on the set's list")?,
            route_version: int("seqsvr_store_route_version", "the route table's version")?,
            lease_seconds: float("seqsvr_store_lease_seconds", "the lease the store grants AllocSvrs")?,
            lease_margin_seconds: float("seqsvr_store_lease_margin_seconds", "the margin the store waits past a lease before moving its sections")?,
        })
    }
}
