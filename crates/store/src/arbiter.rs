//! The arbiter as a replica runs it: the pure
//! [`seqsvr_store_core::arbiter::Arbiter`] (leases, section moves,
//! retirements; docs/architecture/failover.md) and the lock that orders
//! its moves against renewals.

use std::ops::Deref;

pub use seqsvr_store_core::arbiter::{ArbiterConfig, Batch, LeaseView, RebalanceConfig};

/// The pure arbiter of this replica, and the lock its moves hold.
#[derive(Debug)]
pub struct Arbiter {
    /// Office, grants, plans (pure; time comes in as arguments).
    core: seqsvr_store_core::arbiter::Arbiter,
    /// Held by the arbiter loop from `plan` until its moves are applied,
    /// and by a renewal while it records its grant and reads its sections.
    /// Without it a renewal granted between a plan and the commit of its
    /// `Assign` would lease the owner the very sections being moved away
    /// (promise 3; found by the seeded simulation, seeds 697 and 1358).
    pub moves: tokio::sync::Mutex<()>,
    /// Evening out sections after a recovery (`node/rebalance.rs`).
    pub rebalance: RebalanceConfig,
    /// Set while a rebalance batch's handoffs are under way: the next plan
    /// waits for them (it reads the routes they change).
    pub rebalancing: std::sync::atomic::AtomicBool,
}

impl Arbiter {
    /// A new arbiter, not in office.
    pub fn new(config: ArbiterConfig, rebalance: RebalanceConfig) -> Self {
        Self {
            core: seqsvr_store_core::arbiter::Arbiter::new(config),
            moves: tokio::sync::Mutex::new(()),
            rebalance,
            rebalancing: Default::default(),
        }
    }
}

impl Deref for Arbiter {
    type Target = seqsvr_store_core::arbiter::Arbiter;

    fn deref(&self) -> &Self::Target {
        &self.core
    }
}
