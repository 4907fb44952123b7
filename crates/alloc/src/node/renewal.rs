//! The renewal loop: the node's executor of the control loop's renewal
//! cycle ([`Control`](crate::control::Control)). It waits for the
//! interval the last cycle named (or an early request, `renew_now`), then
//! performs the cycle's effects in order — the renewal call, the drops and
//! the lease under the ownership lock, the take-overs, the route read —
//! feeding each answer back, until the cycle ends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seqsvr_core::SectionId;
use seqsvr_proto::{self as pb};

use crate::control::{Effect, Event, Renewal};
use crate::error::{AllocError, StoreErr};
use crate::ownership::fences;
use crate::shared::Shared;

use super::effects::step;
use super::routes::refresh_routes;
use super::Ctx;

/// Runs renewal cycles, the first due at `next`, until the process is
/// fenced (`None`).
pub(super) async fn renew_loop(ctx: Arc<Ctx>, mut next: Option<Instant>) {
    while let Some(at) = next {
        let asked = tokio::time::timeout_at(at.into(), ctx.shared.renew_now.notified()).await;
        let event = if asked.is_ok() {
            Event::RenewNow
        } else {
            Event::Tick
        };
        next = run_cycle(&ctx, event).await;
        // Free the cells of sections lost earlier whose last callers have
        // finished, even if nothing is being served to do it.
        ctx.shared.alloc.reclaim();
    }
}

/// Runs the renewal cycle `event` starts until it ends ([`run_effects`]).
pub(super) async fn run_cycle(ctx: &Ctx, event: Event) -> Option<Instant> {
    run_effects(ctx, step(&ctx.shared, |_| event, None)).await
}

/// Performs a renewal cycle's effects in turn, feeding the answers back,
/// until the cycle ends. Returns when the next one is due (`None`:
/// fenced, never).
pub(super) async fn run_effects(ctx: &Ctx, effects: Vec<Effect>) -> Option<Instant> {
    let mut todo: VecDeque<Effect> = effects.into();
    while let Some(effect) = todo.pop_front() {
        let more = match effect {
            Effect::Renew { known_version } => renew(ctx, known_version).await,
            Effect::Claim { pieces } => claim(ctx, pieces).await,
            Effect::ReadRoutes => refresh_routes(ctx, true).await,
            Effect::CycleEnded { next, .. } => return next,
            Effect::ListForgotten { known_version } => {
                // Not a grant we can act on; the next renewal asks for the list.
                tracing::warn!(
                    known_version,
                    "renewal says the list is unchanged, but none is held"
                );
                Vec::new()
            }
            other => unreachable!("performed by `step`: {other:?}"),
        };
        todo.extend(more);
    }
    // Nothing started (a cycle already running, never here: one loop runs
    // them; or fenced): try again at the next interval, unless fenced.
    let fenced = ctx.shared.ownership().fenced();
    (!fenced).then(|| Instant::now() + ctx.renew_every)
}

/// [`Effect::Renew`]: one renewal call; its answer goes to the control
/// loop.
async fn renew(ctx: &Ctx, known_version: u64) -> Vec<Effect> {
    let shared = &ctx.shared;
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
        Err(e) => {
            shared.metrics.renewal(false);
            let fenced = fences(&e);
            if fenced {
                tracing::error!("lease renewal refused: {e}");
            } else {
                tracing::warn!(
                    lease_left_ms = shared.lease_left_ms(),
                    "lease renewal failed: {e}"
                );
            }
            return step(shared, |_| Event::RenewFailed { fenced }, None);
        }
    };
    let count = shared.alloc.spec().section_count();
    let list = (!reply.sections_unchanged)
        .then(|| (reply.sections_version, expand(&reply.sections, count)));
    let grant = Renewal {
        lease: Duration::from_millis(reply.lease_ms),
        list,
        route_version: reply.route_version,
        draining: reply.draining,
    };
    let event = |s: &Shared| Event::Renewed {
        grant,
        served: s.alloc.served_sections(),
    };
    step(shared, event, None)
}

/// [`Effect::Claim`]: the take-overs, sent together (the store commits
/// them together); each answer, then their end, goes to the control loop.
async fn claim(ctx: &Ctx, pieces: Vec<(SectionId, u32)>) -> Vec<Effect> {
    let shared = &ctx.shared;
    let calls = pieces.into_iter().map(|(first, count)| async move {
        (first, count, ctx.raiser.take_over(first, count).await)
    });
    let mut out = Vec::new();
    for (first, count, result) in futures::future::join_all(calls).await {
        let fenced = match result {
            Ok(g) => {
                shared.metrics.sections_started("took_over", g.len());
                let epoch = g.first().map(|g| g.epoch);
                tracing::info!(first, count, epoch, "took over sections");
                false
            }
            Err(AllocError::Store(StoreErr::Fenced)) => {
                tracing::error!(
                    first,
                    count,
                    "a take-over found this incarnation replaced or fenced"
                );
                true
            }
            Err(e) => {
                tracing::warn!(first, count, "take-over failed, will retry: {e}");
                false
            }
        };
        out.extend(step(shared, |_| Event::TakenOver { fenced }, None));
    }
    let done = |s: &Shared| Event::ClaimsDone {
        held_routes: s.version(),
    };
    out.extend(step(shared, done, None));
    out
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
