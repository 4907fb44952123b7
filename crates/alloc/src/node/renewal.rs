//! The renewal loop: every `renew_ms` (or sooner when asked), drop what
//! is no longer ours ([`reconcile`]), extend the lease from the send time,
//! then claim what is newly ours with a take-over.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seqsvr_core::SectionId;
use seqsvr_proto::{self as pb};

use crate::error::{AllocError, StoreErr};
use crate::ownership::{claim_pieces, fences, listed_sections, reconcile};

use super::routes::refresh_routes;
use super::Ctx;

/// Renews the lease every `renew_every` (or sooner when asked), until the
/// process is fenced.
pub(super) async fn renew_loop(ctx: Arc<Ctx>) {
    loop {
        let next = Instant::now() + ctx.renew_every;
        renew_once(&ctx).await;
        // Free the cells of sections lost earlier whose last callers have
        // finished, even if nothing is being served to do it.
        ctx.shared.alloc.reclaim();
        if ctx.shared.is_fenced() {
            return;
        }
        let _ = tokio::time::timeout_at(next.into(), ctx.shared.renew_now.notified()).await;
    }
}

/// One renewal: drop what is no longer ours, extend the lease from the
/// send time, then claim what is newly ours.
pub(super) async fn renew_once(ctx: &Ctx) {
    let shared = &ctx.shared;
    if shared.is_fenced() {
        return;
    }
    let known_version = ctx.listed.lock().unwrap_or_else(|e| e.into_inner()).0;
    let sent = Instant::now();
    let renewal = ctx
        .renewer
        .renew_since(&shared.id, shared.incarnation(), known_version);
    let reply = match renewal.await {
        Ok(r) => {
            shared.metrics.renewal(true);
            shared.metrics.renewed(sent.elapsed());
            r
        }
        Err(e) if fences(&e) => {
            shared.metrics.renewal(false);
            return shared.fence(&e);
        }
        Err(e) => {
            shared.metrics.renewal(false);
            tracing::warn!(
                lease_left_ms = shared.lease_left_ms(),
                "lease renewal failed: {e}"
            );
            return;
        }
    };
    let alloc = &shared.alloc;
    let list = (!reply.sections_unchanged).then(|| {
        let count = alloc.spec().section_count();
        (reply.sections_version, expand(&reply.sections, count))
    });
    let listed = {
        let mut cache = ctx.listed.lock().unwrap_or_else(|e| e.into_inner());
        listed_sections(&mut cache, known_version, list)
    };
    let Some(listed) = listed else {
        // Not a grant we can act on; the next renewal asks for the list.
        tracing::warn!(
            known_version,
            "renewal says the list is unchanged, but none is held"
        );
        return;
    };
    let claim = {
        // Under the ownership lock: an adopt installing a section either
        // sees the lapse counted here or is seen by the drops below
        // (promise 3); a handoff settling one unmarks it under it too.
        let mut own = shared.ownership();
        if shared.is_fenced() {
            return;
        }
        // Drop what is no longer ours *before* extending the lease: a
        // request admitted by the new lease must not find a section moved
        // away while our lease had lapsed; and if it had lapsed, drop
        // everything (promises 1 and 3, see `ownership::reconcile`).
        let lapsed = !shared.lease.valid_at(Instant::now());
        let releasing: Vec<SectionId> = own.releasing.keys().copied().collect();
        let r = reconcile(&alloc.served_sections(), &listed, &releasing, lapsed);
        if lapsed {
            own.lapses += 1;
            shared.metrics.lapses.inc();
        }
        for &s in &r.drop {
            if alloc.drop_section(s) {
                tracing::info!(section = s, lapsed, "section no longer ours: dropped");
            }
        }
        shared
            .lease
            .granted(sent, Duration::from_millis(reply.lease_ms));
        r.claim
    };
    shared.draining.store(reply.draining, Ordering::Relaxed);
    // Claims go out at once, in pieces the store accepts (`claim_pieces`).
    let pieces =
        claim_pieces(&claim)
            .into_iter()
            .map(|(first, count)| async move {
                (first, count, ctx.raiser.take_over(first, count).await)
            });
    for (first, count, result) in futures::future::join_all(pieces).await {
        match result {
            Ok(g) => {
                shared.metrics.sections_started("took_over", g.len());
                tracing::info!(
                    first,
                    count,
                    epoch = g.first().map(|g| g.epoch),
                    "took over sections"
                )
            }
            Err(AllocError::Store(StoreErr::Fenced)) => {
                return shared.fence(&"a take-over found this incarnation replaced or fenced");
            }
            Err(e) => tracing::warn!(first, count, "take-over failed, will retry: {e}"),
        }
    }
    if reply.route_version > shared.route_version.load(Ordering::Acquire) {
        refresh_routes(ctx).await;
    }
}

/// The sections of `runs`, in order; sections outside the set (of
/// `count` sections) are left out, with a warning.
pub(super) fn expand(runs: &[pb::SectionRun], count: u32) -> Vec<SectionId> {
    let mut listed = Vec::new();
    for run in runs {
        let end = run.first_section.saturating_add(run.count);
        if end > count {
            tracing::warn!(
                first = run.first_section,
                count = run.count,
                "renewal lists sections outside the set; ignored"
            );
        }
        listed.extend(run.first_section..end.min(count));
    }
    listed
}
