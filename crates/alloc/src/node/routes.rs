//! The route loop: re-reads the route table every `route_poll_ms`; the
//! control loop decides what each read changes (publish it, drop sections
//! routed away, renew early when a section was routed here), and
//! [`step`](super::effects::step) performs it.

use std::sync::Arc;
use std::time::Duration;

use seqsvr_core::SectionId;

use crate::control::{Effect, Event, RouteFacts};
use crate::ownership::served_epochs;
use crate::shared::Shared;

use super::effects::step;
use super::Ctx;

/// Re-reads the route table every `poll`.
pub(super) async fn route_loop(ctx: Arc<Ctx>, poll: Duration) {
    let mut tick = tokio::time::interval(poll);
    loop {
        tick.tick().await;
        refresh_routes(&ctx, false).await;
    }
}

/// One route read (`renewal`: the renewal cycle's own), compared with what
/// was served *before* it ([`served_epochs`]; see
/// [`after_route_read`](crate::ownership::after_route_read) for why).
/// Returns the effects left for the renewal cycle (its end).
pub(super) async fn refresh_routes(ctx: &Ctx, renewal: bool) -> Vec<Effect> {
    let shared = &ctx.shared;
    let before = served_epochs(&shared.alloc);
    let read = match ctx.reader.routes().await {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::debug!("route refresh failed: {e}");
            None
        }
    };
    let here = read.as_ref().map(|t| {
        (0..t.set.section_count())
            .filter(|&x| t.entry_for_section(x).is_some_and(|e| e.alloc == shared.id))
            .collect::<Vec<SectionId>>()
    });
    let version = read.as_ref().map(|t| t.version);
    let event = |s: &Shared| Event::RoutesRead {
        read: here.zip(version).map(|(routed_here, version)| RouteFacts {
            before,
            routed_here,
            served: s.alloc.served_sections(),
            version,
            held: s.version(),
        }),
        renewal,
    };
    step(shared, event, read)
}
