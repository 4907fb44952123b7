//! The id part of the world loop: id clients' events, the id faults
//! applied, restarts after a planned stop or a kill, and the id checks at
//! the end.

use super::World;
use crate::env::trace;
use crate::ids::{IdEv, IdFault};
use crate::net::fmt_time;

impl World {
    /// An id event.
    pub(super) fn id_event(&mut self, ev: IdEv) {
        let env = &mut self.env;
        match ev {
            IdEv::Client(c, t) => self.id_clients.timer(env, c, t),
            IdEv::Restart(p) => self.allocs.restart(env, p),
            IdEv::Fault(i) => self.apply_id_fault(i),
        }
    }

    fn apply_id_fault(&mut self, i: usize) {
        let env = &mut self.env;
        let Some(fault) = env.cfg.ids.as_ref().map(|ids| ids.faults[i].1.clone()) else {
            return;
        };
        trace!(env, "ID FAULT #{i}: {fault}");
        match fault {
            IdFault::ClockStep { a, by_ms } => self.allocs.procs[a].ids.offset_ms += by_ms,
            IdFault::RestartSetBack { a, back_ms, down } => {
                if !self.allocs.procs[a].up {
                    return;
                }
                self.allocs.crash(a);
                self.allocs.procs[a].ids.offset_ms -= back_ms;
                env.after(down, crate::model::Ev::Ids(IdEv::Restart(a)));
            }
            IdFault::PausePastLease { a, dur } => self.allocs.pause(env, a, dur),
            IdFault::PlannedStop { a, down, stall } => {
                self.allocs.planned_stop(env, a, down, stall)
            }
        }
    }

    /// End-of-run id checks: the checker over every id issued, and every
    /// namespace served again after the final heal (the model did not
    /// wedge).
    pub(super) fn id_checks(&mut self) {
        let env = &mut self.env;
        let Some(ids) = env.cfg.ids.as_ref() else {
            return;
        };
        let found = env.ids.finish();
        let since = env.cfg.duration.saturating_sub(env.cfg.liveness_window);
        for (ns, s) in ids.spaces.iter().enumerate() {
            if env.ids.last_received[ns] < since {
                let what = format!(
                    "namespace {} served no id in the last {} after every fault healed",
                    s.name,
                    fmt_time(env.cfg.liveness_window)
                );
                env.monitor.violate(env.now, 0, what);
            }
        }
        env.monitor.violations.extend(found);
    }
}
