//! Performing the control loop's effects on this process's memory:
//! [`step`] feeds an event to [`Control`](crate::control::Control) under
//! the ownership lock and performs the drops, the lease, draining,
//! fencing, publishing and early renewal requests there; the renewal and
//! route loops perform the store calls.

use std::sync::atomic::Ordering;
use std::time::Instant;

use seqsvr_core::section::Runs;
use seqsvr_core::{RouteTable, SectionId};

use crate::control::{Effect, Event, Stepper};
use crate::shared::Shared;

/// The raiser's access to the control loop: each event stepped under the
/// ownership lock, the effects on memory performed there ([`step`]).
impl Stepper for Shared {
    fn step(&self, _now: Instant, event: Event) -> Vec<Effect> {
        step(self, |_| event, None)
    }
}

/// Feeds the event `event` builds to the control loop and performs the
/// effects on this process's memory, in order, under the ownership lock
/// (so an adopt installing a section either sees a lapse counted here or
/// is seen by the drops, promise 3): drops, the lease, draining, fencing,
/// publishing `table` (the one just read), and early renewal requests.
/// The event is built under the lock too, so what it says of the served
/// sections holds while the effects run. Returns the effects that call
/// the store or end the cycle, in order.
pub(super) fn step(
    shared: &Shared,
    event: impl FnOnce(&Shared) -> Event,
    mut table: Option<RouteTable>,
) -> Vec<Effect> {
    let mut own = shared.ownership();
    let effects = own.on(Instant::now(), event(shared));
    let mut rest = Vec::new();
    for effect in effects {
        match effect {
            Effect::Drop { sections, lapsed } => {
                let dropped: Vec<SectionId> = (sections.into_iter())
                    .filter(|&s| shared.alloc.drop_section(s))
                    .collect();
                if !dropped.is_empty() {
                    let why = if lapsed {
                        "the lease had lapsed"
                    } else {
                        "no longer ours"
                    };
                    tracing::info!(
                        count = dropped.len(),
                        sections = %Runs(&dropped),
                        lapsed,
                        "dropped {} sections ({}): {why}",
                        dropped.len(),
                        Runs(&dropped)
                    );
                }
            }
            Effect::DropIfEpoch { sections } => {
                let dropped: Vec<SectionId> = (sections.into_iter())
                    .filter(|&(s, epoch)| shared.alloc.drop_section_if_epoch(s, epoch))
                    .map(|(s, _)| s)
                    .collect();
                if !dropped.is_empty() {
                    tracing::info!(
                        count = dropped.len(),
                        sections = %Runs(&dropped),
                        "dropped {} sections ({}): routed elsewhere",
                        dropped.len(),
                        Runs(&dropped)
                    );
                }
            }
            Effect::ExtendLease {
                sent,
                lease,
                lapsed,
            } => {
                if lapsed {
                    shared.metrics.lapses.inc();
                }
                shared.lease.granted(sent, lease);
            }
            Effect::Draining(d) => shared.draining.store(d, Ordering::Relaxed),
            Effect::Fence => shared.fence(&mut own, &"the store said so"),
            Effect::PublishRoutes => {
                if let Some(t) = table.take() {
                    shared.set_routes(t);
                }
            }
            Effect::WakeRenewal => shared.renew_now.notify_one(),
            other => rest.push(other),
        }
    }
    rest
}
