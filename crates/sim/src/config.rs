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
    /// Adds [`Fault::PauseInRenewal`] to the faults drawn: a pause right
    /// after a renewal extended the lease, before its take-overs (and, with
    /// `lease_before_drop`, before its drops).
    pub pause_in_renewal: bool,
    /// The order `renew_once` (`crates/alloc/src/node.rs`) had before it
    /// was fixed: extend the lease first, drop the sections the renewal no
    /// longer lists a moment later (a window with a valid lease and moved
    /// sections).
    pub lease_before_drop: bool,
    /// The behaviour `renew_once` (`crates/alloc/src/node.rs`) had before
    /// it was fixed: a renewal that comes back after the lease lapsed keeps
    /// the installed sections it lists, so a section that moved away and
    /// back meanwhile is served from stale memory under its old epoch.
    /// (Fixed: after a lapse every section is dropped and the listed ones
    /// are taken over again.)
    pub keep_sections_after_lapse: bool,
    /// The behaviour of the store before it was fixed (`service.rs`
    /// `renew`, `node.rs` `arbitrate`): a renewal may record its grant and
    /// read its sections between the arbiter's `plan` and the commit of its
    /// `Assign`, leasing the owner the sections being moved away. (Fixed:
    /// `Arbiter::moves` serialises the two.)
    pub renew_during_moves: bool,
}

impl Knobs {
    /// Parses a comma-separated list of knob names (the format of
    /// `SEQSVR_SIM_KNOBS`): `unsafe_renewals`, `skip_lease_check`,
    /// `drift=<multiple of the bound>`, `pause_in_renewal`,
    /// `lease_before_drop`, `keep_sections_after_lapse`, `renew_during_moves`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut k = Knobs::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.split_once('=') {
                Some(("drift", x)) => {
                    let x = x.parse().map_err(|e| format!("drift={x}: {e}"))?;
                    k.drift_times_bound = Some(x);
                }
                None if item == "unsafe_renewals" => k.unsafe_renewals = true,
                None if item == "skip_lease_check" => k.skip_lease_check = true,
                None if item == "pause_in_renewal" => k.pause_in_renewal = true,
                None if item == "lease_before_drop" => k.lease_before_drop = true,
                None if item == "keep_sections_after_lapse" => k.keep_sections_after_lapse = true,
                None if item == "renew_during_moves" => k.renew_during_moves = true,
                _ => return Err(format!("unknown knob {item:?}")),
            }
        }
        Ok(k)
    }

    /// The knobs in [`parse`](Self::parse)'s format (empty when none).
    pub fn to_arg(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        let flags = [
            (self.unsafe_renewals, "unsafe_renewals"),
            (self.skip_lease_check, "skip_lease_check"),
            (self.pause_in_renewal, "pause_in_renewal"),
            (self.lease_before_drop, "lease_before_drop"),
            (self.keep_sections_after_lapse, "keep_sections_after_lapse"),
            (self.renew_during_moves, "renew_during_moves"),
        ];
        out.extend(
            flags
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, n)| n.to_string()),
        );
        if let Some(x) = self.drift_times_bound {
            out.push(format!("drift={x}"));
        }
        out.join(",")
    }
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
        let mut rng = Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x00C0_FFEE);
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

    /// The documented drift bound, `margin / lease`.
    pub fn drift_bound(&self) -> f64 {
        self.lease.margin_ms as f64 / self.lease.lease_ms as f64
    }

    /// The largest AllocSvr drift, as a fraction of the bound.
    pub fn drift_of_bound(&self) -> f64 {
        let worst = self.drift.iter().fold(0.0f64, |m, d| m.max(d.abs()));
        worst / self.drift_bound()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_round_trip_and_configs_replay() {
        let k = Knobs::parse("unsafe_renewals, drift=1.5,keep_sections_after_lapse").unwrap();
        assert!(k.unsafe_renewals && k.keep_sections_after_lapse && !k.skip_lease_check);
        assert_eq!(k.drift_times_bound, Some(1.5));
        assert_eq!(Knobs::parse(&k.to_arg()).unwrap(), k);
        assert_eq!(Knobs::parse("").unwrap(), Knobs::default());
        assert!(Knobs::parse("nope").is_err());
        let (a, b) = (SimConfig::for_seed(9, k.clone()), SimConfig::for_seed(9, k));
        assert_eq!(a.describe(), b.describe());
        let d = SimConfig::for_seed(3, Knobs::default());
        assert!(d.drift_of_bound() < 1.0, "safe seeds stay inside the bound");
    }
}
