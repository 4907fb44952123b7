//! A route read, the route loop's or the renewal's: drop what the table
//! routes elsewhere, publish the table, renew early when a section routed
//! here is not served ([`after_route_read`]).

use std::time::Instant;

use crate::ownership::after_route_read;

use super::{Control, Cycle, Effect, RouteFacts};

impl Control {
    /// A route read came back (`read`, `None` if it failed). The table is
    /// published before the drops, so that a call refused for a dropped
    /// section names the table that routes it elsewhere; a section the
    /// table routes elsewhere may already be someone else's (promise 3),
    /// and is dropped only if still at the epoch it had before the read
    /// (one taken over meanwhile is newer than the table may know). The
    /// renewal's own read ends its cycle.
    pub(super) fn routes_read(
        &mut self,
        now: Instant,
        read: Option<RouteFacts>,
        renewal: bool,
    ) -> Vec<Effect> {
        let mut out = Vec::new();
        if let Some(f) = read {
            let r = after_route_read(
                &f.before,
                &f.routed_here,
                &f.served,
                self.fenced,
                f.version,
                f.held,
            );
            if r.publish {
                out.push(Effect::PublishRoutes);
            }
            if !r.drop.is_empty() {
                out.push(Effect::DropIfEpoch { sections: r.drop });
            }
            if r.renew_now {
                out.push(Effect::WakeRenewal);
            }
        }
        if renewal && self.cycle == Some(Cycle::ReadingRoutes) {
            out.extend(self.end_cycle(now));
        }
        out
    }
}
