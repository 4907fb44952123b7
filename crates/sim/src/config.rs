//! The parameters of one run, all derived from its seed (and the knobs
//! a test sets), so that a seed alone replays the run; and the layout of
//! the simulated deployment (which replica and AllocSvr process belongs to
//! which set).

use std::ops::Range;

use seqsvr_core::directory::SetId;
use seqsvr_core::{LeaseTerms, SectionId, SetSpec, Uid};
use seqsvr_store_core::arbiter::ArbiterConfig;

use crate::faults::{self, Fault, Shape};
use crate::knobs::Knobs;
use crate::net::{fmt_time, Delays, Time, MS, SEC};
use crate::rng::Rng;

pub use crate::layout::Layout;

/// Everything that shapes one run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The seed (every random choice derives from it).
    pub seed: u64,
    /// Virtual time simulated.
    pub duration: Time,
    /// Store replicas per set.
    pub replicas: usize,
    /// AllocSvr ids per set; each has a first process and a twin slot that
    /// only a fault starts ([`Layout`]).
    pub allocs: usize,
    /// Clients.
    pub clients: usize,
    /// Each set's span (its store group's spec); set 0 is the home set and
    /// serves its whole span, every other set serves what its span holds
    /// beyond the sets before it. Every span starts at the same uid with
    /// the same section size, so a section id names the same uids in every
    /// set, as in the real grid (`docs/architecture/sets.md`).
    pub sets: Vec<SetSpec>,
    /// The lease terms every store group starts with (replicated state;
    /// the operator may change them).
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
    /// Per AllocSvr (set by set, `set · allocs + i`), relative clock drift
    /// `δ = store_rate / alloc_rate - 1` (positive: the AllocSvr's clock is
    /// slow, the dangerous direction).
    pub drift: Vec<f64>,
    /// Message delays.
    pub delays: Delays,
    /// The fault schedule: what happens when (range moves included).
    pub faults: Vec<(Time, Fault)>,
    /// Protocol weakenings (all off normally).
    pub knobs: Knobs,
    /// Print every event.
    pub verbose: bool,
    /// Stop at the first broken promise found while running (a failed
    /// sanity check of the model is recorded, and the run goes on).
    pub stop_at_first: bool,
    /// No new fault starts in this final stretch; everything is healed at
    /// its start.
    pub quiet_tail: Time,
    /// Every section must have served a number within this final window.
    pub liveness_window: Time,
    /// Time-ordered ids: namespaces, id clients, wall clocks, id faults
    /// (`None`: no id traffic, the ordinary run).
    pub ids: Option<crate::ids::IdSim>,
}

/// The uid every span starts at.
const UID_BEGIN: Uid = 1000;
/// Uids per section.
const SECTION_SIZE: u64 = 8;
/// Sections of set 0's span (set 1's span holds them and as many more).
const HOME_SECTIONS: u64 = 6;

impl SimConfig {
    /// The configuration of `seed` with `knobs`.
    pub fn for_seed(seed: u64, knobs: Knobs) -> Self {
        let mut rng = Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x00C0_FFEE);
        let allocs = 2 + rng.pick(2);
        let lease = LeaseTerms::default();
        let bound = lease.margin_ms as f64 / lease.lease_ms as f64;
        // Small steps exercise raises and exhaustion; large ones give an
        // ex-owner room to hand out many numbers if fencing fails.
        let step = match rng.below(5) {
            0 | 1 => 8,
            2 | 3 => 64,
            _ => 1000,
        };
        let span = |set_id: SetId, sections: u64| SetSpec {
            set_id,
            uid_begin: UID_BEGIN,
            uid_end: UID_BEGIN + sections * SECTION_SIZE,
            section_size: SECTION_SIZE,
            step,
        };
        // Set 1's span covers set 0's too, so ranges can move both ways.
        let sets = vec![span(0, HOME_SECTIONS), span(1, 2 * HOME_SECTIONS)];
        // Most seeds drift up to 10 % either way; one in four sits just
        // inside the documented bound, slow (the direction that matters).
        let near = rng.chance(0.25);
        let drift = (0..sets.len() * allocs)
            .map(|_| match knobs.drift_times_bound {
                Some(k) => k * bound,
                None if near => bound * (0.9 + 0.099 * rng.unit()),
                None => 0.2 * rng.unit() - 0.1,
            })
            .collect();
        let duration = 60 * SEC;
        let quiet_tail = 20 * SEC;
        let mut cfg = SimConfig {
            seed,
            duration,
            replicas: 3,
            allocs,
            clients: 3,
            sets,
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
            ids: None,
        };
        let shape = Shape {
            layout: cfg.layout(),
            sections: cfg.sets.iter().map(|s| s.section_count()).collect(),
            movable: HOME_SECTIONS as u32,
            quiet: duration - quiet_tail,
            terms: lease,
            pause_in_renewal: cfg.knobs.pause_in_renewal,
        };
        cfg.faults = faults::generate(&mut rng, &shape);
        cfg
    }

    /// The configuration of `seed` with `knobs` and time-ordered ids: the
    /// ordinary run of [`for_seed`](Self::for_seed) (its schedule
    /// unchanged), plus namespaces, id clients and id faults drawn from a
    /// stream of their own.
    pub fn for_ids_seed(seed: u64, knobs: Knobs) -> Self {
        let mut cfg = Self::for_seed(seed, knobs);
        let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x1D5);
        let l = cfg.layout();
        let shape = crate::ids::faults::IdShape {
            slots: (0..l.allocs).map(|i| l.first_slot(0, i)).collect(),
            quiet: cfg.duration - cfg.quiet_tail,
            expiry_ms: cfg.lease.lease_ms + cfg.lease.margin_ms,
        };
        cfg.ids = Some(crate::ids::IdSim::draw(&mut rng, l.slots(), &shape));
        cfg
    }

    /// Who is where.
    pub fn layout(&self) -> Layout {
        Layout {
            sets: self.sets.len(),
            replicas: self.replicas,
            allocs: self.allocs,
        }
    }

    /// AllocSvr process slots in all (first processes and twins).
    pub fn slots(&self) -> usize {
        self.layout().slots()
    }

    /// Set `set`'s spec.
    pub fn spec(&self, set: usize) -> &SetSpec {
        &self.sets[set]
    }

    /// The grid every set follows: its sections cover every span, section
    /// `s` the same uids in each.
    pub fn grid(&self) -> SetSpec {
        let first = &self.sets[0];
        SetSpec {
            uid_end: self.sets.iter().map(|s| s.uid_end).max().unwrap_or(0),
            ..first.clone()
        }
    }

    /// The step (the same in every set).
    pub fn step(&self) -> u64 {
        self.sets[0].step
    }

    /// Checks what the model relies on: spans on one grid, one step.
    pub(crate) fn check(&self) {
        let g = &self.sets[0];
        assert_eq!(g.set_id, 0, "set 0 is the home set");
        for (i, s) in self.sets.iter().enumerate() {
            assert_eq!(s.set_id as usize, i, "sets are numbered in order");
            assert!(
                s.uid_begin == g.uid_begin && s.section_size == g.section_size,
                "every span starts on the home set's grid"
            );
            assert_eq!(s.step, g.step, "one step in every set");
        }
        assert_eq!(self.drift.len(), self.sets.len() * self.allocs);
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
        let l = self.layout();
        let i = l.set_of_slot(p) * self.allocs + l.index_of_slot(p);
        1.0 / (1.0 + self.drift[i])
    }

    /// The sections of set 0's span: the uids ranges move within.
    pub fn movable(&self) -> Range<SectionId> {
        0..self.sets[0].section_count()
    }

    /// The configuration and schedule, for failure reports.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "seed {}: {} sets of {} replicas and {} allocs, {} clients, {} simulated; step {}; lease {} ms, margin {} ms; knobs [{}]\n",
            self.seed,
            self.sets.len(),
            self.replicas,
            self.allocs,
            self.clients,
            fmt_time(self.duration),
            self.step(),
            self.lease.lease_ms,
            self.lease.margin_ms,
            self.knobs.to_arg()
        );
        let l = self.layout();
        for (i, spec) in self.sets.iter().enumerate() {
            s += &format!(
                "  set {i}: span [{}, {}), replicas r{}..r{}, processes p{}..p{}\n",
                spec.uid_begin,
                spec.uid_end,
                l.replica(i, 0),
                l.replica(i, l.replicas - 1),
                l.first_slot(i, 0),
                l.twin_slot(i, l.allocs - 1),
            );
        }
        for (i, d) in self.drift.iter().enumerate() {
            s += &format!(
                "  {}: clock drift δ = {:+.2}% (bound {:.0}%)\n",
                crate::model::alloc_name(i / self.allocs, i % self.allocs),
                d * 100.0,
                100.0 * self.drift_bound()
            );
        }
        s += "  fault schedule:\n";
        for (t, f) in &self.faults {
            s += &format!("    {:>12} {f}\n", fmt_time(*t));
        }
        if let Some(ids) = &self.ids {
            for sp in &ids.spaces {
                s += &format!(
                    "  id namespace {}: {} worker ids, {} ids per ms, window {} ms\n",
                    sp.name,
                    sp.layout.workers(),
                    sp.layout.max_seq() + 1,
                    sp.window_ms
                );
            }
            s += &format!("  wall clock skews (ms, by slot): {:?}\n", ids.skew_ms);
            s += "  id fault schedule:\n";
            for (t, f) in &ids.faults {
                s += &format!("    {:>12} {f}\n", fmt_time(*t));
            }
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
        d.check();
    }

    #[test]
    fn the_layout_numbers_across_sets() {
        let l = Layout {
            sets: 2,
            replicas: 3,
            allocs: 2,
        };
        assert_eq!(l.slots(), 8);
        assert_eq!((l.first_slot(1, 1), l.twin_slot(1, 1)), (5, 7));
        assert_eq!((l.set_of_slot(7), l.index_of_slot(7)), (1, 1));
        assert!(l.is_twin(7) && !l.is_twin(5) && l.is_twin(2));
        assert_eq!((l.replica(1, 2), l.set_of_replica(5)), (5, 1));
        assert_eq!(l.slots_of(1), 4..8);
    }
}
