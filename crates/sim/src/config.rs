//! The parameters of one run, all derived from its seed (and the knobs
//! a test sets), so that a seed alone replays the run.

use seqsvr_core::SetSpec;
use seqsvr_store::arbiter::LeaseConfig;

use crate::faults::{self, Fault};
use crate::net::{fmt_time, Delays, Time, MS, SEC};
use crate::rng::Rng;

/// Deliberate weakenings of the protocol, to show the checks can fail.
/// All off in the safe configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Knobs {
    /// A store leader grants lease renewals without first confirming its
    /// leadership with a quorum (DESIGN §3 forbids this): a deposed leader
    /// that has not noticed keeps an old owner's lease alive.
    pub unsafe_renewals: bool,
    /// AllocSvrs serve without checking their lease.
    pub skip_lease_check: bool,
    /// If set, every AllocSvr's clock runs slow by this multiple of the
    /// documented drift bound (`margin / lease`); above 1.0 is unsafe.
    pub drift_times_bound: Option<f64>,
}

/// Everything that shapes one run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The seed (every random choice derives from it).
    pub seed: u64,
    /// Virtual time simulated.
    pub duration: Time,
    /// Store replicas.
    pub replicas: usize,
    /// AllocSvrs.
    pub allocs: usize,
    /// Clients.
    pub clients: usize,
    /// The set served.
    pub spec: SetSpec,
    /// Lease timing (the store's arbiter and the AllocSvrs').
    pub lease: LeaseConfig,
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
        let mut rng = Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xC0FF_EE);
        let allocs = 2 + rng.pick(2);
        let lease = LeaseConfig::default();
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
                set_id: 1,
                uid_begin: 1000,
                uid_end: 1048,
                section_size: 8,
                step,
            },
            lease,
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
        cfg.faults = faults::generate(&mut rng, &cfg);
        cfg
    }

    /// AllocSvr `a`'s clock rate relative to real (= store) time.
    pub fn alloc_rate(&self, a: usize) -> f64 {
        1.0 / (1.0 + self.drift[a])
    }

    /// The configuration and schedule, for failure reports.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "seed {}: {} replicas, {} allocs, {} clients, {} simulated; step {}; lease {} ms, margin {} ms; knobs {:?}\n",
            self.seed,
            self.replicas,
            self.allocs,
            self.clients,
            fmt_time(self.duration),
            self.spec.step,
            self.lease.lease_ms,
            self.lease.margin_ms,
            self.knobs
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
