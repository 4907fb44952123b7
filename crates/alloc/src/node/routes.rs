//! The route loop: re-reads the route table every `route_poll_ms`,
//! publishes it, drops sections routed away and asks for an early renewal
//! when a section was routed here.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use seqsvr_core::SectionId;
use seqsvr_proto::{self as pb};

use crate::ownership::{after_route_read, served_epochs};

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

/// One route read, as [`after_route_read`] decides: drops what the table
/// routes elsewhere, asks for an early renewal when a section routed here
/// is not served, publishes the table.
pub(super) async fn refresh_routes(ctx: &Ctx) {
    let shared = &ctx.shared;
    let alloc = &shared.alloc;
    // What was served *before* the read, with its epoch (see
    // `after_route_read` for why).
    let before = served_epochs(alloc);
    let t = match ctx.reader.routes().await {
        Ok(t) => t,
        Err(e) => return tracing::debug!("route refresh failed: {e}"),
    };
    let here: Vec<SectionId> = (0..t.set.section_count())
        .filter(|&s| t.entry_for_section(s).is_some_and(|e| e.alloc == shared.id))
        .collect();
    let read = after_route_read(
        &before,
        &here,
        &alloc.served_sections(),
        shared.is_fenced(),
        t.version,
        shared.route_version.load(Ordering::Acquire),
    );
    for (s, epoch) in read.drop {
        // Promise 3: the table says someone else owns it now.
        if alloc.drop_section_if_epoch(s, epoch) {
            tracing::info!(section = s, epoch, "section routed elsewhere: dropped");
        }
    }
    if read.renew_now {
        ctx.shared.renew_now.notify_one();
    }
    if read.publish {
        shared.set_routes(pb::RouteTable::from(&t));
    }
}
