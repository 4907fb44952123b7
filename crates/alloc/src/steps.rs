//! Adaptive steps: how far a section's next raise goes and how much
//! headroom is left when it is asked for (`docs/architecture/alloc.md`,
//! Adaptive steps).
//!
//! With fixed steps (the default) every raise adds the set's step and is
//! asked for once less than a fixed fraction of it is left. With adaptive
//! steps each section keeps a [`Pace`]:
//!
//! - **Step.** A section starts at the configured base step. When a raise
//!   is planned, the step grows (doubles, up to the set's step, the
//!   largest) if the previous one lasted less than the target duration,
//!   and shrinks (halves, down to the base, once per doubling of the
//!   target it lasted beyond two targets) when it lasted longer: hot
//!   sections raise rarely with large steps, cold ones keep small gaps.
//! - **Trigger.** The headroom kept is the section's recent rate (numbers
//!   per second, measured raise to raise: an exponentially weighted moving
//!   average that follows a faster sample at once and a slower one with its
//!   half-life) times a lead time: the configured lead, or twice the
//!   measured raise latency if that is longer, and never less than the
//!   fixed fraction of the current step (a floor that also meets the onset
//!   of a burst, before a raise has measured it; 0 leaves the rate alone). A section whose rate jumps raises
//!   earlier, so the raise lands before the section runs out.
//!
//! Safety does not depend on any of this: a raise never goes more than the
//! set's step above the highest number handed out (the store refuses more,
//! `STEP_TOO_LARGE`), which is what bounds the gap a failover skips
//! (promise 4). The logic here is pure: every call is given the time.

use std::time::Duration;

use tokio::time::Instant;

/// Tuning of adaptive steps (an AllocSvr's `[adaptive_steps]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveSteps {
    /// The step of a cold section, and the smallest: `1..=` the set's step
    /// (which is the largest).
    pub base_step: u64,
    /// A step that lasted less than this is doubled for the next raise;
    /// one that lasted twice this or more is halved.
    pub target: Duration,
    /// Headroom kept ahead of a raise, in time at the recent rate (at least
    /// twice the measured raise latency).
    pub lead: Duration,
    /// Half-life of the rate's moving average.
    pub half_life: Duration,
}

impl Default for AdaptiveSteps {
    fn default() -> Self {
        Self {
            base_step: seqsvr_core::section::DEFAULT_STEP,
            target: Duration::from_secs(5),
            lead: Duration::from_millis(100),
            half_life: Duration::from_secs(2),
        }
    }
}

/// How one allocator's sections size and time their raises, checked
/// against its set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPolicy {
    /// The smallest step (the set's step with fixed steps).
    base: u64,
    /// The largest step: the set's step, the store's bound on a raise.
    max: u64,
    /// The least headroom kept, as a fraction of the current step.
    fraction: f64,
    /// `None`: fixed steps.
    adaptive: Option<AdaptiveSteps>,
}

impl StepPolicy {
    /// Fixed steps of `step`, raised once `fraction` of a step is left.
    pub fn fixed(step: u64, fraction: f64) -> Self {
        Self {
            base: step.max(1),
            max: step.max(1),
            fraction: fraction.clamp(0.0, 1.0),
            adaptive: None,
        }
    }

    /// The policy for a set whose step (the largest) is `set_step`; an
    /// error says what is wrong with `adaptive`.
    pub fn new(
        set_step: u64,
        fraction: f64,
        adaptive: Option<AdaptiveSteps>,
    ) -> Result<Self, String> {
        let mut p = Self::fixed(set_step, fraction);
        let Some(a) = adaptive else {
            return Ok(p);
        };
        if a.base_step == 0 || a.base_step > set_step {
            return Err(format!(
                "base_step {} not in 1..={set_step} (the set's step is the largest step)",
                a.base_step
            ));
        }
        for (name, d) in [
            ("target", a.target),
            ("lead", a.lead),
            ("half_life", a.half_life),
        ] {
            if d.is_zero() {
                return Err(format!("{name} must be above zero"));
            }
        }
        p.base = a.base_step;
        p.adaptive = Some(a);
        Ok(p)
    }

    /// The smallest step.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The largest step (the set's).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Whether steps adapt.
    pub fn is_adaptive(&self) -> bool {
        self.adaptive.is_some()
    }

    /// The least headroom kept for a section at `step`: the fixed fraction
    /// of it, below a step.
    fn floor(&self, step: u64) -> u64 {
        ((step as f64 * self.fraction) as u64).min(step - 1)
    }
}

/// One section's step and rate, kept for the allocator's life (see the
/// module docs). Every method is given the time.
#[derive(Debug, Clone, PartialEq)]
pub struct Pace {
    /// The step the next raise adds.
    step: u64,
    /// Numbers per second (of the highest number handed out, raise to
    /// raise): up at once, down as a moving average.
    rate: f64,
    /// Seconds from planning a raise to its landing, moving average (0:
    /// none measured yet).
    latency: f64,
    /// When the last raise landed (or the section was installed), and the
    /// highest number handed out then.
    mark: Option<(Instant, u64)>,
    /// When the raise in flight was planned.
    asked: Option<Instant>,
}

impl Pace {
    /// A section never raised: the base step, no rate.
    pub fn new(policy: &StepPolicy) -> Self {
        Self {
            step: if policy.is_adaptive() {
                policy.base
            } else {
                policy.max
            },
            rate: 0.0,
            latency: 0.0,
            mark: None,
            asked: None,
        }
    }

    /// The section was (re)installed at `now` from `high_water`: rates are
    /// measured from there (a take-over's skip is no consumption). The step
    /// and the averages carry over.
    pub fn restart(&mut self, now: Instant, high_water: u64) {
        self.mark = Some((now, high_water));
        self.asked = None;
    }

    /// The step of the raise planned at `now`. The first plan of a raise
    /// adjusts the step to how long the previous one lasted; retries of the
    /// same raise get the same step.
    pub fn plan(&mut self, policy: &StepPolicy, now: Instant) -> u64 {
        let Some(a) = policy.adaptive else {
            return policy.max;
        };
        if self.asked.is_some() {
            return self.step;
        }
        self.asked = Some(now);
        if let Some((since, _)) = self.mark {
            let mut lasted = now.saturating_duration_since(since);
            if lasted < a.target {
                self.step = self.step.saturating_mul(2).min(policy.max);
            } else {
                while lasted >= a.target * 2 && self.step > policy.base {
                    self.step = (self.step / 2).max(policy.base);
                    lasted /= 2;
                }
            }
        }
        self.step
    }

    /// The raise planned was not needed after all (the ceiling is already
    /// a step above): the next plan is a new raise's.
    pub fn unplanned(&mut self) {
        self.asked = None;
    }

    /// A raise landed at `now` with `high_water` the highest number handed
    /// out: the rate and the latency are measured. Returns the headroom at
    /// which the next raise is asked for.
    pub fn landed(&mut self, policy: &StepPolicy, now: Instant, high_water: u64) -> u64 {
        if let Some(asked) = self.asked.take() {
            let took = now.saturating_duration_since(asked).as_secs_f64();
            self.latency = if self.latency == 0.0 {
                took
            } else {
                0.75 * self.latency + 0.25 * took
            };
        }
        match (self.mark, policy.adaptive) {
            (Some((since, from)), Some(a)) => {
                let dt = now.saturating_duration_since(since);
                if !dt.is_zero() {
                    let sample = high_water.saturating_sub(from) as f64 / dt.as_secs_f64();
                    let alpha = 1.0 - 0.5f64.powf(dt.as_secs_f64() / a.half_life.as_secs_f64());
                    // Up at once, down with the half-life: a burst is
                    // met from its first raise on, a lull forgotten slowly.
                    self.rate = sample.max(self.rate + alpha * (sample - self.rate));
                    self.mark = Some((now, high_water));
                }
            }
            _ => self.mark = Some((now, high_water)),
        }
        self.margin(policy)
    }

    /// The headroom at which a raise is asked for: below the current step,
    /// at least the fixed fraction of it, and with adaptive steps the recent
    /// rate times the lead if more.
    pub fn margin(&self, policy: &StepPolicy) -> u64 {
        let step = self.step;
        let floor = policy.floor(step);
        let Some(a) = policy.adaptive else {
            return floor;
        };
        let lead = a.lead.as_secs_f64().max(2.0 * self.latency);
        let want = (self.rate * lead).ceil();
        let want = if want.is_finite() && want > 0.0 {
            want.min(u64::MAX as f64) as u64
        } else {
            0
        };
        want.max(floor).min(step - 1)
    }

    /// The step the next raise adds (before the next plan adjusts it).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Numbers per second, moving average.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// When the section's ceiling last moved here: the last raise landed,
    /// or the take-over installed it (`None`: never installed).
    pub fn moved_at(&self) -> Option<Instant> {
        self.mark.map(|(at, _)| at)
    }
}

#[cfg(test)]
mod tests;
