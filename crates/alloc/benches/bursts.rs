//! Bursty hot keys against fixed and adaptive steps, in one run
//! (`docs/benchmarks.md`, Bursty hot keys).
//!
//! One allocator over an in-memory store whose writes take `--latency-ms`
//! (a Raft write). Eight hot keys in eight sections, uids or names, go
//! through cycles of a steady phase (each key paced at `--steady` numbers a
//! second) and a burst (callers in a closed loop). Printed per run: raises
//! per minute per hot section and `next` p50/p99/max in steady phases and
//! in bursts, callers that waited for a raise, and the steps reached.
//!
//! `cargo bench -p seqsvr-alloc --bench bursts -- [--latency-ms 2]
//!  [--cycles 3] [--steady-ms 600] [--burst-ms 300] [--steady 2000]`

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use seqsvr_alloc::ceiling::{CeilingStore, Grant};
use seqsvr_alloc::mem::MemCeilingStore;
use seqsvr_alloc::{
    AdaptiveSteps, AllocConfig, AllocError, Allocator, Raiser, RaiserConfig, StoreErr,
};
use seqsvr_core::{name_key, Epoch, Incarnation, SectionId, SetSpec, NAME_KEYS};
use tokio::time::Instant;

/// The fixed step, and the adaptive base step.
const BASE: u64 = 1_000;
/// The adaptive largest step (the set's step then).
const MAX: u64 = 64_000;
const SECTION: u64 = 1_000;
const HOT: usize = 8;
/// Closed-loop callers per hot key in a burst.
const CALLERS: usize = 2;

struct Slow {
    inner: MemCeilingStore,
    latency: Duration,
}

impl CeilingStore for Slow {
    async fn take_over(
        &self,
        incarnation: Incarnation,
        first: SectionId,
        known: Vec<Epoch>,
    ) -> Result<Vec<Grant>, StoreErr> {
        tokio::time::sleep(self.latency).await;
        self.inner.take_over(incarnation, first, known).await
    }

    async fn raise(
        &self,
        incarnation: Incarnation,
        section: SectionId,
        epoch: Epoch,
        to: u64,
    ) -> Result<u64, StoreErr> {
        tokio::time::sleep(self.latency).await;
        self.inner.raise(incarnation, section, epoch, to).await
    }

    async fn counters(
        &self,
        first: SectionId,
        count: u32,
    ) -> Result<Vec<seqsvr_alloc::Declared>, StoreErr> {
        self.inner.counters(first, count).await
    }
}

#[derive(Clone, Copy)]
struct Args {
    latency: Duration,
    cycles: u32,
    steady: Duration,
    burst: Duration,
    steady_rate: u64,
}

fn args() -> Args {
    let mut a = Args {
        latency: Duration::from_millis(2),
        cycles: 3,
        steady: Duration::from_millis(600),
        burst: Duration::from_millis(300),
        steady_rate: 2_000,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = || argv.get(i + 1).and_then(|v| v.parse::<u64>().ok());
        match argv[i].as_str() {
            "--latency-ms" => a.latency = Duration::from_millis(v().expect("--latency-ms N")),
            "--cycles" => a.cycles = v().expect("--cycles N") as u32,
            "--steady-ms" => a.steady = Duration::from_millis(v().expect("--steady-ms N")),
            "--burst-ms" => a.burst = Duration::from_millis(v().expect("--burst-ms N")),
            "--steady" => a.steady_rate = v().expect("--steady N"),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

/// What one phase kind (steady or burst) measured.
struct Phase {
    latency: Histogram<u64>,
    raises: u64,
    waits: u64,
    time: Duration,
}

impl Phase {
    fn new() -> Self {
        Self {
            latency: Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap(),
            raises: 0,
            waits: 0,
            time: Duration::ZERO,
        }
    }

    fn line(&self, name: &str) -> String {
        let per_min = self.raises as f64 / HOT as f64 / self.time.as_secs_f64() * 60.0;
        let us = |q: f64| self.latency.value_at_quantile(q) as f64 / 1000.0;
        format!(
            "{name:6} {:>9} calls  raises/min/section {:>6.0}  next p50 {:>5.2} µs  p99 {:>6.2} µs  p99.9 {:>8.1} µs  max {:>8.1} µs  waits {:>5}",
            self.latency.len(),
            per_min,
            us(0.5),
            us(0.99),
            us(0.999),
            self.latency.max() as f64 / 1000.0,
            self.waits,
        )
    }
}

/// The hot keys: the first key of eight sections of a set starting at
/// `begin` (names: the first name found in each section).
fn hot_keys(begin: u64, names: bool) -> Vec<u64> {
    if !names {
        return (0..HOT as u64).map(|s| begin + s * SECTION + 7).collect();
    }
    let mut keys = vec![None; HOT];
    for i in 0u64.. {
        let k = name_key(format!("chat:{i}:seq").as_bytes()).unwrap();
        let s = ((k - begin) / SECTION) as usize;
        if k >= begin && s < HOT && keys[s].is_none() {
            keys[s] = Some(k);
            if keys.iter().all(Option::is_some) {
                break;
            }
        }
    }
    keys.into_iter().map(Option::unwrap).collect()
}

async fn one_call(alloc: &Allocator, key: u64, wait: Duration, h: &mut Histogram<u64>) {
    let t = Instant::now();
    match alloc.next(key) {
        Ok(_) => {}
        Err(AllocError::Exhausted { .. }) => {
            if let Err(e) = alloc.next_waiting(key, t + wait).await {
                panic!("a caller waited {wait:?} for a raise: {e}");
            }
        }
        Err(e) => panic!("{key}: {e}"),
    }
    h.record(t.elapsed().as_nanos().max(1) as u64).unwrap();
}

async fn run(a: Args, names: bool, adaptive: bool) {
    let begin = if names { NAME_KEYS.start } else { 0 };
    let spec = SetSpec {
        set_id: 0,
        uid_begin: begin,
        uid_end: begin + SECTION * 16,
        section_size: SECTION,
        step: if adaptive { MAX } else { BASE },
    };
    let cfg = AllocConfig {
        raise_ahead_fraction: 0.25,
        adaptive: adaptive.then_some(AdaptiveSteps {
            base_step: BASE,
            target: Duration::from_secs(1),
            lead: Duration::from_millis(5),
            half_life: Duration::from_millis(500),
        }),
        ..AllocConfig::default()
    };
    let store = Arc::new(Slow {
        inner: MemCeilingStore::new(spec.clone()),
        latency: a.latency,
    });
    let alloc = Arc::new(Allocator::new(spec.clone(), &cfg).unwrap());
    let raiser = Raiser::new(alloc.clone(), store.clone(), RaiserConfig::default());
    raiser.take_over(0, spec.section_count()).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(raiser.run(async {
        let _ = stopped.await;
    }));
    let keys = hot_keys(begin, names);
    let wait = Duration::from_secs(5);
    let (mut steady, mut burst) = (Phase::new(), Phase::new());
    let mut burst_waits = Vec::new();
    for _ in 0..a.cycles {
        for (phase, bursting) in [(&mut steady, false), (&mut burst, true)] {
            let took = if bursting { a.burst } else { a.steady };
            let (raises0, waits0) = (alloc.stats().raises_applied, alloc.stats().raise_waits);
            let start = Instant::now();
            let end = start + took;
            let merged = Arc::new(Mutex::new(Histogram::<u64>::new_from(&phase.latency)));
            let done = Arc::new(AtomicBool::new(false));
            let mut tasks = Vec::new();
            for &key in &keys {
                for _ in 0..if bursting { CALLERS } else { 1 } {
                    let (alloc, merged, done) = (alloc.clone(), merged.clone(), done.clone());
                    let rate = a.steady_rate;
                    tasks.push(tokio::spawn(async move {
                        let mut h = Histogram::<u64>::new_from(&merged.lock().unwrap());
                        let mut n = 0u64;
                        while Instant::now() < end && !done.load(Relaxed) {
                            if bursting {
                                for _ in 0..64 {
                                    one_call(&alloc, key, wait, &mut h).await;
                                }
                                tokio::task::yield_now().await;
                            } else {
                                // Paced: `rate` a second, in 1 ms ticks.
                                let due = start + Duration::from_micros(n * 1_000_000 / rate);
                                tokio::time::sleep_until(due).await;
                                one_call(&alloc, key, wait, &mut h).await;
                                n += 1;
                            }
                        }
                        merged.lock().unwrap().add(&h).unwrap();
                    }));
                }
            }
            for t in tasks {
                t.await.unwrap();
            }
            done.store(true, Relaxed);
            phase.time += start.elapsed();
            phase.latency.add(&*merged.lock().unwrap()).unwrap();
            phase.raises += alloc.stats().raises_applied - raises0;
            phase.waits += alloc.stats().raise_waits - waits0;
            if bursting {
                burst_waits.push(alloc.stats().raise_waits - waits0);
            }
        }
    }
    let steps: Vec<u64> = (0..HOT as u32)
        .filter_map(|s| alloc.section_state(s).map(|st| st.step))
        .collect();
    let kind = if names { "names" } else { "uids" };
    let mode = if adaptive {
        format!("adaptive {BASE}..={MAX}")
    } else {
        format!("fixed {BASE}")
    };
    println!("{kind} {mode}: hot sections' steps at the end {steps:?}");
    println!("  {}", steady.line("steady"));
    println!("  {}", burst.line("burst"));
    let st = alloc.stats();
    println!(
        "  waits per burst {burst_waits:?}; raises early {} of {}, wait timeouts {}",
        st.raises_early, st.raises_queued, st.raise_wait_timeouts
    );
    stop.send(()).unwrap();
    task.await.unwrap();
}

fn main() {
    let a = args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "bursty hot keys: {HOT} hot keys in {HOT} sections; store writes take {:?}; {} cycles of {:?} steady ({} /s a key) + {:?} burst ({CALLERS} closed-loop callers a key)",
        a.latency, a.cycles, a.steady, a.steady_rate, a.burst
    );
    for names in [false, true] {
        for adaptive in [false, true] {
            rt.block_on(run(a, names, adaptive));
        }
    }
}
