//! The route loop: re-reads the route table every `route_poll_ms`,
//! publishes it, drops sections routed away and asks for an early renewal
//! when a section was routed here.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use seqsvr_core::SectionId;
use seqsvr_proto::{self as pb};

use super::Ctx;

/// Re-reads the route table every `poll`: publishes it, drops sections
/// routed away at once, and renews early when a section was routed here.
pub(super) async fn route_loop(ctx: Arc<Ctx>, poll: Duration) {
    let mut tick = tokio::time::interval(poll);
    loop {
        tick.tick().await;
        refresh_routes(&ctx).await;
    }
}

pub(super) async fn refresh_routes(ctx: &Ctx) {
    let shared = &ctx.shared;
    let alloc = &shared.alloc;
    // What was served *before* the read, with its epoch: a section taken
    // over or adopted while the read was under way is newer than the table
    // may know, and is left alone (dropping it would cost a step, promise
    // 4; renewals remain the authority on what is ours).
    let before: Vec<(SectionId, seqsvr_core::Epoch)> = alloc
        .served_sections()
        .into_iter()
        .filter_map(|s| Some((s, alloc.section_state(s)?.epoch)))
        .collect();
    let t = match ctx.reader.routes().await {
        Ok(t) => t,
        Err(e) => return tracing::debug!("route refresh failed: {e}"),
    };
    let mine = |s: SectionId| t.entry_for_section(s).is_some_and(|e| e.alloc == shared.id);
    for &(s, epoch) in &before {
        // Promise 3: the table says someone else owns it now.
        if !mine(s) && alloc.drop_section_if_epoch(s, epoch) {
            tracing::info!(section = s, epoch, "section routed elsewhere: dropped");
        }
    }
    let gained = (0..t.set.section_count()).any(|s| mine(s) && !alloc.is_serving(s));
    if gained && !shared.is_fenced() {
        ctx.shared.renew_now.notify_one();
    }
    if t.version >= shared.route_version.load(Ordering::Acquire) {
        shared.set_routes(pb::RouteTable::from(&t));
    }
}
