//! The arbiter's rebalance as the leader runs it (docs/operations.md,
//! Automatic rebalancing): the pure plan
//! ([`seqsvr_store_core::arbiter::Arbiter::rebalance`]) says which live
//! AllocSvr hands which sections to which; this asks each giver, over its
//! admin plane, for those planned handoffs (`AllocAdmin.Handoff`, what
//! `seqctl alloc rebalance` asks too). The giver checks every move with the
//! store, stops serving a section before the store's conditional handoff
//! writes the new owner, and tells the taker, which starts at once: never
//! two owners, no lease to wait out (promise 3, docs/architecture/failover.md,
//! Planned moves).
//!
//! One batch at a time, on a task of its own: the arbiter loop (and the
//! lock renewals wait on) is never held by a call to an AllocSvr, and the
//! next plan is made only once the previous batch's handoffs have
//! answered, on the routes they changed. One log line and one metric
//! update per giver and batch.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use seqsvr_core::section::Runs;
use seqsvr_core::SectionId;
use seqsvr_proto::alloc_admin_client::AllocAdminClient;
use seqsvr_proto::{self as pb};

use crate::arbiter::Batch;
use crate::service::StoreApi;

/// How long one giver's handoffs may take before the batch is given up
/// (a giver that does not answer keeps its sections; the next batch
/// plans again).
pub const BATCH_TIMEOUT: Duration = Duration::from_secs(15);

/// Plans a rebalance at `now` and, if there is one, starts its handoffs —
/// unless the previous batch is still under way. Called by the arbiter
/// loop on every tick.
pub(super) fn start(api: &StoreApi, now: Instant) {
    if !api.arbiter.rebalance.enabled || api.arbiter.rebalancing.load(Ordering::Acquire) {
        return;
    }
    let batches = {
        let a = api.sm.read();
        api.arbiter.rebalance(&a.state, &api.arbiter.rebalance, now)
    };
    if batches.is_empty() {
        return;
    }
    api.arbiter.rebalancing.store(true, Ordering::Release);
    let api = api.clone();
    tokio::spawn(async move {
        for b in batches {
            hand_off(&api, b).await;
        }
        api.arbiter.rebalancing.store(false, Ordering::Release);
    });
}

/// Asks `b.from` for its handoffs; logs and counts what came of them.
async fn hand_off(api: &StoreApi, b: Batch) {
    let takers = b
        .takers()
        .iter()
        .map(|(to, n)| format!("{to} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sections: Vec<SectionId> = b.moves.iter().map(|(s, _)| *s).collect();
    let asked = sections.len();
    let req = pb::AllocHandoffRequest {
        moves: (b.moves.iter())
            .map(|(s, to)| pb::Move {
                section: *s,
                to_alloc: to.clone(),
            })
            .collect(),
    };
    let call = async {
        let ch = (api.alloc_connect)(&b.admin_addr)?;
        let reply = AllocAdminClient::new(ch)
            .handoff(req)
            .await
            .map_err(|st| format!("{}: {}", st.code(), st.message()))?;
        Ok::<_, String>(reply.into_inner().results)
    };
    let results = match tokio::time::timeout(BATCH_TIMEOUT, call).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            api.metrics.rebalanced(0, asked);
            tracing::warn!(
                from = %b.from,
                to = %takers,
                sections = %Runs(&sections),
                count = asked,
                "arbiter: rebalance: {} did not take the handoffs ({e}); its sections stay, \
                 the next batch plans again",
                b.from
            );
            return;
        }
        Err(_) => {
            api.metrics.rebalanced(0, asked);
            tracing::warn!(
                from = %b.from,
                count = asked,
                "arbiter: rebalance: {} did not answer within {BATCH_TIMEOUT:?}",
                b.from
            );
            return;
        }
    };
    let moved = results.iter().filter(|r| r.ok).count();
    let failed = asked - moved.min(asked);
    let max_us = (results.iter().filter(|r| r.ok))
        .map(|r| r.unavailable_us)
        .max()
        .unwrap_or(0);
    let first_error =
        (results.iter().find(|r| !r.ok)).map(|r| format!("section {}: {}", r.section, r.error));
    api.metrics.rebalanced(moved, failed);
    tracing::info!(
        from = %b.from,
        to = %takers,
        sections = %Runs(&sections),
        moved,
        failed,
        max_unavailable_ms = max_us as f64 / 1000.0,
        error = %first_error.unwrap_or_default(),
        "arbiter: rebalancing: {} handed {moved} of {asked} sections to {takers} (live \
         AllocSvrs evened out after a recovery)",
        b.from
    );
}
