//! The load generator: closed-loop callers on this process's runtime,
//! through the client library or a bare tonic stub.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use seqsvr_client::SeqClient;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{NextBatchRequest, NextRequest};
use tonic::transport::Channel;

use crate::report::Figures;
use crate::setup::{pct, Cpu, Target};
use crate::{UIDS, WARMUP};

/// xorshift64: a few cycles per number, so the PRNG costs nothing.
pub struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (multiply-shift).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

/// Which uids the callers draw.
#[derive(Clone, Copy, Debug)]
pub enum Uids {
    /// Uniform over every uid served.
    Uniform,
    /// Only `n` hot uids, spread evenly over the sections: each is called
    /// often enough to run through a small step quickly.
    Hot(u64),
}

impl Uids {
    fn draw(self, rng: &mut XorShift) -> u64 {
        match self {
            Uids::Uniform => rng.below(UIDS),
            Uids::Hot(n) => rng.below(n) * (UIDS / n),
        }
    }
}

/// How a caller reaches the AllocSvr.
#[derive(Clone)]
pub enum Caller {
    /// Through the client library (routing, retries, deadlines).
    Lib(SeqClient),
    /// A bare tonic stub on one channel (no routing, no retries).
    Raw(AllocClient<Channel>),
}

impl Caller {
    fn name(&self) -> &'static str {
        match self {
            Caller::Lib(_) => "SeqClient",
            Caller::Raw(_) => "raw tonic",
        }
    }

    /// One call of `batch` uids (`0` = a single `next`); returns the seqs
    /// handed out.
    async fn call(&mut self, rng: &mut XorShift, batch: usize, uids: Uids) -> Result<u64, String> {
        if batch == 0 {
            let uid = uids.draw(rng);
            match self {
                Caller::Lib(c) => c.next(uid).await.map_err(|e| e.to_string())?,
                Caller::Raw(c) => {
                    c.next(NextRequest {
                        uid,
                        count: 0,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| e.to_string())?
                    .get_ref()
                    .seq
                }
            };
            return Ok(1);
        }
        let uids: Vec<u64> = (0..batch).map(|_| uids.draw(rng)).collect();
        let n = match self {
            Caller::Lib(c) => c.next_batch(&uids).await.map_err(|e| e.to_string())?.len(),
            Caller::Raw(c) => c
                .next_batch(NextBatchRequest { uids })
                .await
                .map_err(|e| e.to_string())?
                .get_ref()
                .seqs
                .len(),
        };
        Ok(n as u64)
    }
}

const WARMING: u8 = 0;
const MEASURING: u8 = 1;
const STOPPED: u8 = 2;

/// Runs `callers` closed-loop tasks of `batch`-uid calls (`0`: `next`):
/// 1 s of warm-up, then `secs` measured. A call counts if it started and
/// ended while measuring.
pub async fn phase(
    target: &Target,
    caller: &Caller,
    batch: usize,
    uids: Uids,
    callers: usize,
    secs: u64,
) -> Figures {
    let state = Arc::new(AtomicU8::new(WARMING));
    let tasks: Vec<_> = (0..callers)
        .map(|k| {
            tokio::spawn(call_loop(
                caller.clone(),
                state.clone(),
                batch,
                uids,
                k as u64 + 1,
            ))
        })
        .collect();
    tokio::time::sleep(WARMUP).await;
    let cpu0 = Cpu::now(target);
    state.store(MEASURING, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    state.store(STOPPED, Ordering::Relaxed);
    let wall = start.elapsed().as_secs_f64();
    let cpu1 = Cpu::now(target);
    let mut all = Tally::new();
    for t in tasks {
        all.add(t.await.unwrap());
    }
    let Tally {
        h,
        seqs,
        errors,
        last_error,
    } = all;
    let shape = match (batch, uids) {
        (0, Uids::Uniform) => "next".to_string(),
        (0, Uids::Hot(n)) => format!("next hot {n}"),
        (_, Uids::Uniform) => "batch-16".to_string(),
        (_, Uids::Hot(n)) => format!("batch-16 hot {n}"),
    };
    let f = Figures {
        label: format!("{} {shape} c={callers} {}", target.name, caller.name()),
        cpu: format!(
            "bench {:.0} server {:.0} stores {:.0}",
            pct(cpu1.bench - cpu0.bench, wall),
            pct(cpu1.server - cpu0.server, wall),
            pct(cpu1.stores - cpu0.stores, wall),
        ),
        calls_per_s: h.len() as f64 / wall,
        server_us_per_call: (cpu1.server - cpu0.server) * 1e6 / h.len().max(1) as f64,
        detail: cpu1.counters.per_call(&cpu0.counters, h.len() as f64),
        seqs_per_s: seqs as f64 / wall,
        p50: h.value_at_quantile(0.5) as f64,
        p99: h.value_at_quantile(0.99) as f64,
        p999: h.value_at_quantile(0.999) as f64,
        max: h.max() as f64,
    };
    f.print();
    if errors > 0 {
        println!(
            "    {errors} errors; last: {}",
            last_error.unwrap_or_default()
        );
    }
    f
}

/// One caller's measured calls.
struct Tally {
    /// Latency per call, µs.
    h: Histogram<u64>,
    /// Seqs handed out.
    seqs: u64,
    /// Failed calls, and the last one's error.
    errors: u64,
    last_error: Option<String>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            h: Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap(),
            seqs: 0,
            errors: 0,
            last_error: None,
        }
    }

    fn add(&mut self, t: Tally) {
        self.h.add(t.h).unwrap();
        self.seqs += t.seqs;
        self.errors += t.errors;
        self.last_error = self.last_error.take().or(t.last_error);
    }
}

/// One caller: calls in a closed loop until `state` is `STOPPED`, counting
/// the calls that started and ended while `MEASURING`.
async fn call_loop(
    mut caller: Caller,
    state: Arc<AtomicU8>,
    batch: usize,
    uids: Uids,
    seed: u64,
) -> Tally {
    let mut rng = XorShift::new(seed);
    let mut tally = Tally::new();
    loop {
        let s = state.load(Ordering::Relaxed);
        if s == STOPPED {
            break;
        }
        let t = Instant::now();
        let r = caller.call(&mut rng, batch, uids).await;
        let us = t.elapsed().as_micros() as u64;
        if s != MEASURING || state.load(Ordering::Relaxed) != MEASURING {
            continue;
        }
        match r {
            Ok(n) => {
                tally.h.saturating_record(us.max(1));
                tally.seqs += n;
            }
            Err(e) => {
                tally.errors += 1;
                tally.last_error = Some(e);
            }
        }
    }
    tally
}

/// Makes `calls` calls of `batch` uids (`0`: `next`) from `callers`
/// closed-loop tasks, as [`phase`] does but by count rather than time;
/// returns the calls that failed.
pub async fn calls(caller: &Caller, batch: usize, callers: usize, calls: u64) -> u64 {
    let each = calls / callers as u64;
    let tasks: Vec<_> = (0..callers)
        .map(|k| {
            let mut caller = caller.clone();
            tokio::spawn(async move {
                let mut rng = XorShift::new(k as u64 + 1);
                let mut failed = 0;
                for _ in 0..each {
                    if caller.call(&mut rng, batch, Uids::Uniform).await.is_err() {
                        failed += 1;
                    }
                }
                failed
            })
        })
        .collect();
    let mut failed = 0;
    for t in tasks {
        failed += t.await.unwrap();
    }
    failed
}
