//! Table and property tests of [`Pace`]: steps stay within the base and
//! the set's step, the headroom below a step, and the step follows how
//! long the previous one lasted.

use super::*;
use proptest::prelude::*;

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn adaptive(base: u64, max: u64) -> StepPolicy {
    adaptive_with(base, max, 0.25)
}

/// Adaptive steps with `fraction` as the least headroom.
fn adaptive_with(base: u64, max: u64, fraction: f64) -> StepPolicy {
    StepPolicy::new(
        max,
        fraction,
        Some(AdaptiveSteps {
            base_step: base,
            target: 10 * S,
            lead: 100 * MS,
            half_life: 2 * S,
        }),
    )
    .unwrap()
}

#[test]
fn fixed_steps_are_the_sets_step_and_the_fraction() {
    let p = StepPolicy::fixed(10_000, 0.25);
    let t0 = Instant::now();
    let mut pace = Pace::new(&p);
    pace.restart(t0, 0);
    for i in 1..5u32 {
        assert_eq!(pace.plan(&p, t0 + i * MS), 10_000);
        assert_eq!(pace.landed(&p, t0 + i * MS, u64::from(i) * 9_000), 2_500);
    }
    // As before adaptive steps: a fraction of 1 keeps a step less one.
    let p = StepPolicy::fixed(10, 1.0);
    assert_eq!(Pace::new(&p).margin(&p), 9);
}

#[test]
fn a_step_doubles_keeps_or_halves_by_how_long_the_last_one_lasted() {
    let p = adaptive(100, 1_600);
    // (how long the previous step lasted, step before, step planned)
    let table = [
        (Duration::from_secs(1), 100, 200),
        (Duration::from_secs(9), 800, 1_600),
        (Duration::from_secs(1), 1_600, 1_600), // at the set's step
        (Duration::from_secs(10), 400, 400),    // within [target, 2 target)
        (Duration::from_secs(19), 400, 400),
        (Duration::from_secs(20), 400, 200), // two targets: halve
        (Duration::from_secs(40), 1_600, 400), // four: halve twice
        (Duration::from_secs(3_600), 1_600, 100), // cold: down to the base
        (Duration::from_secs(20), 100, 100),
    ];
    for (lasted, before, planned) in table {
        let t0 = Instant::now();
        let mut pace = Pace::new(&p);
        pace.step = before;
        pace.restart(t0, 0);
        assert_eq!(
            pace.plan(&p, t0 + lasted),
            planned,
            "a step of {before} that lasted {lasted:?}"
        );
        // A retry of the same raise keeps the planned step.
        assert_eq!(pace.plan(&p, t0 + lasted + S), planned);
    }
}

#[test]
fn the_headroom_follows_the_rate_and_the_raise_latency() {
    // No fraction: the headroom is the rate's alone.
    let p = adaptive_with(1_000, 1 << 20, 0.0);
    let t0 = Instant::now();
    let mut pace = Pace::new(&p);
    pace.restart(t0, 0);
    // 100,000 numbers a second for ten seconds, raises every 10 ms that
    // take 1 ms each.
    let mut hw = 0;
    let mut t = t0;
    for _ in 0..1_000 {
        t += 9 * MS;
        pace.plan(&p, t);
        t += MS;
        hw += 1_000;
        pace.landed(&p, t, hw);
    }
    assert!((pace.rate() - 100_000.0).abs() < 1_000.0, "{}", pace.rate());
    // 100 ms of lead at 100,000/s.
    let m = pace.margin(&p);
    assert!((10_000..=10_100).contains(&m), "{m}");
    // Raises that take 200 ms: the lead becomes twice that.
    for _ in 0..40 {
        t += 10 * MS;
        pace.plan(&p, t);
        t += 200 * MS;
        hw += 21_000;
        pace.landed(&p, t, hw);
    }
    let m = pace.margin(&p);
    assert!(m > 35_000, "{m} for 400 ms at ~100,000/s");
    assert!(m < pace.step(), "{m} below a step of {}", pace.step());
    // With a fraction, it is the floor where the rate asks for less.
    let q = adaptive_with(1_000, 1 << 20, 0.25);
    assert_eq!(pace.margin(&q), (1 << 20) / 4);
}

#[test]
fn a_cold_section_keeps_the_fractions_headroom() {
    let p = adaptive(1_000, 64_000);
    let pace = Pace::new(&p);
    assert_eq!(pace.step(), 1_000);
    assert_eq!(pace.margin(&p), 250);
}

#[test]
fn bad_adaptive_settings_are_refused() {
    let a = AdaptiveSteps::default();
    let bad = [
        AdaptiveSteps { base_step: 0, ..a },
        AdaptiveSteps {
            base_step: 10_001,
            ..a
        },
        AdaptiveSteps {
            target: Duration::ZERO,
            ..a
        },
        AdaptiveSteps {
            lead: Duration::ZERO,
            ..a
        },
        AdaptiveSteps {
            half_life: Duration::ZERO,
            ..a
        },
    ];
    for b in bad {
        assert!(StepPolicy::new(10_000, 0.25, Some(b)).is_err(), "{b:?}");
    }
    assert!(StepPolicy::new(10_000, 0.25, Some(a)).is_ok());
}

#[derive(Debug, Clone)]
enum Event {
    /// Time passes, numbers are handed out.
    Use {
        after_ms: u64,
        numbers: u64,
    },
    Plan,
    Land,
    Restart,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (0u64..100_000, 0u64..1_000_000)
            .prop_map(|(after_ms, numbers)| Event::Use { after_ms, numbers }),
        Just(Event::Plan),
        Just(Event::Land),
        Just(Event::Restart),
    ]
}

proptest! {
    /// Whatever the pattern of use, raises and restarts: every step is in
    /// `base..=max`, the headroom is below the step and at least the
    /// fraction's, and the rate is a finite non-negative number.
    #[test]
    fn steps_stay_bounded(
        base in 1u64..1_000,
        factor in 1u64..100,
        events in proptest::collection::vec(event(), 1..200),
    ) {
        let max = base * factor;
        let p = adaptive(base, max);
        let mut t = Instant::now();
        let mut hw = 0u64;
        let mut pace = Pace::new(&p);
        for e in events {
            match e {
                Event::Use { after_ms, numbers } => {
                    t += Duration::from_millis(after_ms);
                    hw += numbers;
                }
                Event::Plan => {
                    let step = pace.plan(&p, t);
                    prop_assert!((base..=max).contains(&step), "step {step}");
                }
                Event::Land => {
                    let m = pace.landed(&p, t, hw);
                    prop_assert!(m < pace.step());
                }
                Event::Restart => pace.restart(t, hw),
            }
            let (step, m) = (pace.step(), pace.margin(&p));
            prop_assert!((base..=max).contains(&step));
            prop_assert!(m < step && m >= p.floor(step), "margin {m}, step {step}");
            prop_assert!(pace.rate().is_finite() && pace.rate() >= 0.0);
        }
    }
}
