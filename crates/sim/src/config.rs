//! The parameters of one run, all derived from its seed (and the knobs
//! a test sets), so that a seed alone replays the run.

use seqsvr_core::{LeaseTerms, SetSpec};
use seqsvr_store::arbiter::ArbiterConfig;

use crate::faults::{self, Fault, Shape};
use crate::knobs::Knobs;
use crate::net::{fmt_time, Delays, Time, MS, SEC};
use crate::rng::Rng;

/// Everything that shapes one run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The seed (every random choice derives from it).
    pub seed: u64,
    /// Virtual time simulated.
    pub duration: Time,
    /// Store replicas.
    pub replicas: usize,
    /// AllocSvr ids; each has a first process (slot `i`) and a twin slot
    /// (`allocs + i`) that only a fault starts.
    pub allocs: usize,
    /// Clients.
    pub clients: usize,
    /// The set served.
    pub spec: SetSpec,
    /// The lease terms the store starts with (replicated state; the
    /// operator may change them).
    pub lease: LeaseTerms,
    /// The arbiter's timing.
    pub arbiter: ArbiterConfig,
    /// How often AllocSvrs renew (their local clock).
    pub renew_every: Time,
    /// How often AllocSvrs re-read the route table (their local clock).
    pub route_poll: Time,
    /// How long a call may wait for an exhausted section's raise.
    pub wait: Time,
    /// The allocator's raise-ahead fraction.
    pub raise_ahead_fraction: f64,
    /// Per AllocSvr, relative clock drift `δ = store_rate / alloc_rate - 1`
    /// (positive: the AllocSvr's clock is slow, the dangerous direction).
    pub drift: Vec<f64>,
    /// Message delays.
    pub delays: Delays,
    /// The fault schedule: what happens when.
    pub faults: Vec<(Time, Fault)>,
    /// Protocol weakenings (all off normally).
    pub knobs: Knobs,
    /// Print every event.
    pub verbose: bool,
    /// Stop at the first violation found while running.
    pub stop_at_first: bool,
    /// No new fault starts in this final stretch; everything is healed at
    /// its start.
    pub quiet_tail: Time,
    /// Every section must have served a number within this final window.
    pub liveness_window: Time,
}

impl SimConfig {
    /// The configuration of `seed` with `knobs`.
    pub fn for_seed(seed: u64, knobs: Knobs) -> Self {
        let mut rng = Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x00C0_FFEE);
        let allocs = 2 + rng.pick(2);
        let lease = LeaseTerms::default();
        let bound = lease.margin_ms as f64 / lease.lease_ms as f64;
        // Most seeds drift up to 10 % either way; one in four sits just
        // inside the documented bound, slow (the direction that matters).
        let near = rng.chance(0.25);
        let drift = (0..allocs)
            .map(|_| match knobs.drift_times_bound {
                Some(k) => k * bound,
                None if near => bound * (0.9 + 0.099 * rng.unit()),
                None => 0.2 * rng.unit() - 0.1,
            })
            .collect();
        // Small steps exercise raises and exhaustion; large ones give an
        // ex-owner room to hand out many numbers if fencing fails.
        let step = match rng.below(5) {
            0 | 1 => 8,
            2 | 3 => 64,
            _ => 1000,
        };
        let duration = 60 * SEC;
        let quiet_tail = 20 * SEC;
        let mut cfg = SimConfig {
            seed,
            duration,
            replicas: 3,
            allocs,
            clients: 3,
            spec: SetSpec {
                set_id: 0,
                uid_begin: 1000,
                uid_end: 1048,
                section_size: 8,
                step,
            },
            lease,
            arbiter: ArbiterConfig::default(),
            renew_every: 1000 * MS,
            route_poll: 250 * MS,
            wait: 1000 * MS,
            raise_ahead_fraction: 0.25,
            drift,
            delays: Delays::default(),
            faults: Vec::new(),
            knobs,
            verbose: false,
            stop_at_first: false,
            quiet_tail,
            liveness_window: 6 * SEC,
        };
        let shape = Shape {
            allocs,
            replicas: cfg.replicas,
            sections: cfg.spec.section_count(),
            quiet: duration - quiet_tail,
            terms: lease,
            pause_in_renewal: cfg.knobs.pause_in_renewal,
        };
        cfg.faults = faults::generate(&mut rng, &shape);
        cfg
    }

    /// AllocSvr process slots (first processes and twins).
    pub fn slots(&self) -> usize {
        2 * self.allocs
    }

    /// The documented drift bound, `margin / lease`.
    pub fn drift_bound(&self) -> f64 {
        self.lease.margin_ms as f64 / self.lease.lease_ms as f64
    }

    /// The largest AllocSvr drift, as a fraction of the bound.
    pub fn drift_of_bound(&self) -> f64 {
        let worst = self.drift.iter().fold(0.0f64, |m, d| m.max(d.abs()));
        worst / self.drift_bound()
    }

    /// The clock rate of AllocSvr process slot `p` relative to real (=
    /// store) time (a twin runs on its own machine: the same drift draw is
    /// used for it, so the bound holds).
    pub fn alloc_rate(&self, p: usize) -> f64 {
        1.0 / (1.0 + self.drift[p % self.allocs])
    }

    /// The configuration and schedule, for failure reports.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "seed {}: {} replicas, {} allocs, {} clients, {} simulated; step {}; lease {} ms, margin {} ms; knobs [{}]\n",
            self.seed,
            self.replicas,
            self.allocs,
            self.clients,
            fmt_time(self.duration),
            self.spec.step,
            self.lease.lease_ms,
            self.lease.margin_ms,
            self.knobs.to_arg()
        );
        for (a, d) in self.drift.iter().enumerate() {
            s += &format!(
                "  a{a}: clock drift δ = {:+.2}% (bound {:.0}%)\n",
                d * 100.0,
                100.0 * self.lease.margin_ms as f64 / self.lease.lease_ms as f64
            );
        }
        s += "  fault schedule:\n";
        for (t, f) in &self.faults {
            s += &format!("    {:>12} {f}\n", fmt_time(*t));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_replay() {
        let k = Knobs::parse("unsafe_renewals,drift=1.5").unwrap();
        let (a, b) = (SimConfig::for_seed(9, k.clone()), SimConfig::for_seed(9, k));
        assert_eq!(a.describe(), b.describe());
        let d = SimConfig::for_seed(3, Knobs::default());
        assert!(d.drift_of_bound() < 1.0, "safe seeds stay inside the bound");
    }
}
