//! Bursts against adaptive steps (`docs/architecture/alloc.md`, Adaptive
//! steps). A hot uid and a hot name go from a steady rate to a hundred
//! times that while every raise takes 5 ms (virtual time): with fixed
//! small steps their sections run out while raises are in flight and
//! callers wait; with adaptive steps, once the first raises of the burst
//! have sized the step, no caller finds its section exhausted. Every
//! number goes through the per-key checker, and a take-over in the middle
//! of the burst skips at most the set's step (promise 4).

use std::sync::Arc;
use std::time::Duration;

use seqsvr_alloc::ceiling::{CeilingStore, Grant};
use seqsvr_alloc::mem::MemCeilingStore;
use seqsvr_alloc::{
    AdaptiveSteps, AllocConfig, AllocError, Allocator, Raiser, RaiserConfig, StoreErr,
};
use seqsvr_core::checker::{check, Observation};
use seqsvr_core::{name_key, Epoch, Incarnation, SectionId, SetSpec, NAME_KEYS};
use tokio::time::Instant;

/// Store latency of every take-over and raise.
const LATENCY: Duration = Duration::from_millis(5);
/// The step of a cold section, and the fixed step compared against.
const BASE: u64 = 100;
/// The largest step (the set's, with adaptive steps).
const MAX: u64 = 25_600;

/// A store whose writes take [`LATENCY`].
struct Slow(MemCeilingStore);

impl CeilingStore for Slow {
    async fn take_over(
        &self,
        incarnation: Incarnation,
        first: SectionId,
        known: Vec<Epoch>,
    ) -> Result<Vec<Grant>, StoreErr> {
        tokio::time::sleep(LATENCY).await;
        self.0.take_over(incarnation, first, known).await
    }

    async fn raise(
        &self,
        incarnation: Incarnation,
        section: SectionId,
        epoch: Epoch,
        to: u64,
    ) -> Result<u64, StoreErr> {
        tokio::time::sleep(LATENCY).await;
        self.0.raise(incarnation, section, epoch, to).await
    }

    async fn counters(
        &self,
        first: SectionId,
        count: u32,
    ) -> Result<Vec<seqsvr_alloc::Declared>, StoreErr> {
        self.0.counters(first, count).await
    }
}

/// Four sections of 16 keys starting at `begin`, with steps of `step`.
fn spec(begin: u64, step: u64) -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: begin,
        uid_end: begin + 64,
        section_size: 16,
        step,
    }
}

/// Fixed steps of [`BASE`], or adaptive ones from [`BASE`] to [`MAX`].
fn config(adaptive: bool) -> (u64, AllocConfig) {
    // A tenth of a step left: at the largest step, less than a raise's
    // worth of the burst, so only the headroom against the rate keeps up.
    let cfg = AllocConfig {
        raise_ahead_fraction: 0.1,
        adaptive: adaptive.then_some(AdaptiveSteps {
            base_step: BASE,
            target: Duration::from_millis(100),
            lead: Duration::from_millis(2),
            half_life: Duration::from_millis(50),
        }),
        ..AllocConfig::default()
    };
    (if adaptive { MAX } else { BASE }, cfg)
}

/// What one run saw.
#[derive(Debug, Default)]
struct Run {
    /// Callers that waited for a raise in the burst, after its first
    /// `WARM_UP`.
    waits_after_warm_up: u64,
    /// All callers that waited for a raise.
    waits: u64,
    /// Calls that failed (their wait ran out).
    failed: u64,
    /// Raises applied.
    raises: u64,
    observations: Vec<Observation<u64>>,
}

const WARM_UP: Duration = Duration::from_millis(100);

/// One allocator serving `spec` over a slow store, with its raiser running.
async fn serve(spec: &SetSpec, cfg: &AllocConfig, store: &Arc<Slow>) -> Arc<Allocator> {
    let alloc = Arc::new(Allocator::new(spec.clone(), cfg).unwrap());
    let raiser = Raiser::new(alloc.clone(), store.clone(), RaiserConfig::default());
    raiser.take_over(0, spec.section_count()).await.unwrap();
    tokio::spawn(raiser.run(std::future::pending()));
    alloc
}

/// `per_ms` numbers for `key` each virtual millisecond for `ms`, each
/// caller willing to wait 50 ms for a raise; waits are counted apart from
/// `counting_after` on.
async fn drive(
    alloc: &Allocator,
    key: u64,
    per_ms: u64,
    ms: u64,
    run: &mut Run,
    counting_after: Option<Instant>,
) {
    for _ in 0..ms {
        let tick = Instant::now();
        for _ in 0..per_ms {
            let before = alloc.stats().raise_waits;
            let start = Instant::now();
            match alloc
                .next_waiting(key, start + Duration::from_millis(50))
                .await
            {
                Ok(seq) => run.observations.push(Observation::next(
                    key,
                    seq,
                    at(start),
                    at(Instant::now()),
                )),
                Err(AllocError::Exhausted { .. }) => run.failed += 1,
                Err(e) => panic!("{key}: {e}"),
            }
            let waited = alloc.stats().raise_waits - before;
            run.waits += waited;
            if counting_after.is_some_and(|t| start >= t) {
                run.waits_after_warm_up += waited;
            }
        }
        tokio::time::sleep_until(tick + Duration::from_millis(1)).await;
    }
}

/// Virtual nanoseconds since the first call of the test (the checker's
/// clock).
fn at(t: Instant) -> u64 {
    use std::sync::OnceLock;
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(|| t.into_std());
    t.into_std().saturating_duration_since(origin).as_nanos() as u64
}

/// A steady second at 10 numbers a millisecond, then a burst second at
/// 1,000 a millisecond, for one key of a set starting at `begin`.
async fn burst(adaptive: bool, begin: u64, key: u64) -> Run {
    let (step, cfg) = config(adaptive);
    let spec = spec(begin, step);
    let store = Arc::new(Slow(MemCeilingStore::new(spec.clone())));
    let alloc = serve(&spec, &cfg, &store).await;
    let mut run = Run::default();
    drive(&alloc, key, 10, 1_000, &mut run, None).await;
    let warm = Instant::now() + WARM_UP;
    drive(&alloc, key, 1_000, 1_000, &mut run, Some(warm)).await;
    run.raises = alloc.stats().raises_applied;
    run
}

fn assert_no_repeats(run: &Run) {
    let report = check(&run.observations);
    assert!(report.ok(), "{report:?}");
}

/// The first uid of a set of uids, and the first name its set serves.
fn keys() -> [(u64, u64); 2] {
    let name = (0u64..)
        .map(|i| name_key(format!("order:{i}").as_bytes()).unwrap())
        .find(|&k| k < NAME_KEYS.start + 64)
        .unwrap();
    [(0, 3), (NAME_KEYS.start, name)]
}

#[tokio::test(start_paused = true)]
async fn a_burst_finds_fixed_steps_exhausted() {
    for (begin, key) in keys() {
        let run = burst(false, begin, key).await;
        println!(
            "fixed steps of {BASE}, key {key}: {} waits ({} after the warm-up), {} failed, {} raises",
            run.waits, run.waits_after_warm_up, run.failed, run.raises
        );
        assert_no_repeats(&run);
        assert!(
            run.waits_after_warm_up > 100,
            "the comparison is meaningful only if fixed steps run out"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_burst_never_finds_adaptive_steps_exhausted_after_its_first_raises() {
    for (begin, key) in keys() {
        let run = burst(true, begin, key).await;
        println!(
            "adaptive steps {BASE}..={MAX}, key {key}: {} waits ({} after the warm-up), {} failed, {} raises",
            run.waits, run.waits_after_warm_up, run.failed, run.raises
        );
        assert_no_repeats(&run);
        assert_eq!(run.failed, 0, "no caller fails");
        assert_eq!(
            run.waits_after_warm_up, 0,
            "a caller found the section exhausted {WARM_UP:?} into the burst"
        );
    }
}

/// Take-overs back and forth in the middle of bursts, with the hot
/// sections at the largest step: no number repeats, and each take-over
/// skips at most the set's step above the highest number handed out
/// (promise 4, `docs/architecture/promises.md`).
#[tokio::test(start_paused = true)]
async fn take_overs_under_a_burst_skip_at_most_the_largest_step() {
    for (begin, key) in keys() {
        let (step, cfg) = config(true);
        let spec = spec(begin, step);
        let store = Arc::new(Slow(MemCeilingStore::new(spec.clone())));
        let allocs = [
            serve(&spec, &cfg, &store).await,
            Arc::new(Allocator::new(spec.clone(), &cfg).unwrap()),
        ];
        let b = Raiser::new(allocs[1].clone(), store.clone(), RaiserConfig::default());
        tokio::spawn(b.run(std::future::pending()));
        let section = spec.section_of(key).unwrap();
        let mut run = Run::default();
        let mut owner = 0;
        let mut largest_skip = 0;
        for round in 0..6 {
            drive(&allocs[owner], key, 10, 200, &mut run, None).await;
            drive(&allocs[owner], key, 1_000, 200, &mut run, None).await;
            let st = allocs[owner].section_state(section).unwrap();
            if round > 0 {
                assert_eq!(
                    st.step, MAX,
                    "a section this hot raises by the largest step"
                );
            }
            // The owner stops (its lease is gone); a raise it had in
            // flight may still land in the store.
            let last = run.observations.last().unwrap().seq;
            for s in 0..spec.section_count() {
                allocs[owner].drop_section(s);
            }
            owner = 1 - owner;
            let next = Raiser::new(
                allocs[owner].clone(),
                store.clone(),
                RaiserConfig::default(),
            );
            let grants = next.take_over(0, spec.section_count()).await.unwrap();
            let skip = grants[section as usize].prev_ceiling - last;
            largest_skip = largest_skip.max(skip);
            assert!(
                skip <= MAX,
                "a take-over skipped {skip} numbers of the hottest key, more than the largest step {MAX}"
            );
        }
        println!("key {key}: largest skip at a take-over {largest_skip} (bound {MAX})");
        assert_no_repeats(&run);
        assert_eq!(run.failed, 0);
    }
}

/// The metrics of adaptive steps: sections by step, early raises and
/// callers that waited, as scraped.
#[tokio::test(start_paused = true)]
async fn metrics_show_steps_early_raises_and_waits() {
    let (step, cfg) = config(true);
    let spec = spec(0, step);
    let store = Arc::new(Slow(MemCeilingStore::new(spec.clone())));
    let alloc = serve(&spec, &cfg, &store).await;
    let mut run = Run::default();
    drive(&alloc, 3, 1_000, 100, &mut run, None).await;
    let st = alloc.stats();
    assert!(st.raises_early > 0 && st.raise_waits > 0, "{st:?}");
    let metrics = seqsvr_alloc::metrics::AllocMetrics::new("alloc-1").unwrap();
    let text = metrics.render(&alloc, 0, false, false, 1);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .to_string()
    };
    assert!(line("seqsvr_alloc_raises_early_total").ends_with(&format!(" {}", st.raises_early)));
    assert!(line("seqsvr_alloc_raise_waits_total").ends_with(&format!(" {}", st.raise_waits)));
    line("seqsvr_alloc_raise_wait_timeouts_total");
    // The hot section at the largest step, the three others at the base.
    let by_step: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("seqsvr_alloc_sections_by_step"))
        .map(String::from)
        .collect();
    assert!(
        by_step
            .iter()
            .any(|l| l.contains(&format!("step=\"{MAX}\"")) && l.ends_with(" 1")),
        "{by_step:?}"
    );
    assert!(
        by_step
            .iter()
            .any(|l| l.contains(&format!("step=\"{BASE}\"")) && l.ends_with(" 3")),
        "{by_step:?}"
    );
}

/// A base step above the set's step (the largest, which the store
/// enforces) is refused with a typed error and builds nothing.
#[test]
fn a_base_step_above_the_sets_step_is_refused() {
    let (_, mut cfg) = config(true);
    for (set_step, ok) in [(BASE - 1, false), (BASE, true), (MAX, true)] {
        let r = Allocator::new(spec(0, set_step), &cfg);
        match (r, ok) {
            (Ok(a), true) => assert_eq!(a.steps().max(), set_step),
            (Err(AllocError::InvalidSteps { reason }), false) => {
                assert!(reason.contains("base_step"), "{reason}")
            }
            (r, _) => panic!("set step {set_step}: {:?}", r.map(|_| ())),
        }
    }
    cfg.adaptive.as_mut().unwrap().lead = Duration::ZERO;
    assert!(matches!(
        Allocator::new(spec(0, MAX), &cfg),
        Err(AllocError::InvalidSteps { .. })
    ));
}
