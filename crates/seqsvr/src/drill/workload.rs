//! The workload: callers making `next` / `next_batch` calls, and the record
//! of what each call received (or that it failed).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seqsvr_client::SeqClient;
use seqsvr_core::checker::Observation;
use seqsvr_core::rng::Rng;
use seqsvr_core::SetSpec;
use tokio::task::JoinHandle;

use crate::error::Result;

/// Which uids the callers draw from: every `stride`-th uid from `first`,
/// `count` of them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Uids {
    first: u64,
    count: u64,
    stride: u64,
}

impl Uids {
    /// `range`, or (`None`) up to 10,000 uids spread evenly over `set`.
    pub fn new(set: &SetSpec, range: Option<&Range<u64>>) -> Uids {
        match range {
            Some(r) => Uids {
                first: r.start,
                count: r.end - r.start,
                stride: 1,
            },
            None => {
                let n = (set.uid_end - set.uid_begin).min(10_000);
                Uids {
                    first: set.uid_begin,
                    count: n,
                    stride: (set.uid_end - set.uid_begin) / n,
                }
            }
        }
    }
}

/// The workload's shape.
pub(super) struct Load {
    /// The uids called.
    pub uids: Uids,
    /// Calls per second overall (0: closed loop).
    pub rate: u64,
    /// Concurrent callers.
    pub concurrency: usize,
    /// Uids per section (batches stay within one).
    pub section_size: u64,
}

/// What the calls did, besides the numbers.
#[derive(Debug, Default)]
pub(super) struct Calls {
    /// Calls made.
    pub requests: u64,
    /// Calls that failed (after the client's retries).
    pub failed: u64,
    /// (a uid of the failed call, when it started).
    pub failures: Vec<(u64, Instant)>,
}

/// What callers record as they go.
#[derive(Default)]
struct Record {
    obs: Mutex<Vec<Observation>>,
    requests: AtomicU64,
    failed: AtomicU64,
    /// Failed calls: (a uid of the call, when it started).
    failures: Mutex<Vec<(u64, Instant)>>,
}

/// A running workload.
pub(super) struct Running {
    workers: Vec<JoinHandle<()>>,
    record: Arc<Record>,
}

impl Load {
    /// Starts the callers; they stop at `end`.
    pub fn start(&self, client: &SeqClient, end: Instant) -> Running {
        let record: Arc<Record> = Default::default();
        let pace = (self.rate > 0)
            .then(|| Duration::from_secs_f64(self.concurrency as f64 / self.rate as f64));
        let workers = (0..self.concurrency)
            .map(|k| {
                let w = Worker {
                    client: client.clone(),
                    uids: self.uids,
                    record: record.clone(),
                    section_size: self.section_size,
                    pace,
                };
                tokio::spawn(w.run(k as u64, end))
            })
            .collect();
        Running { workers, record }
    }
}

impl Running {
    /// Waits for the callers to stop; returns the numbers received and the
    /// calls made.
    pub async fn finish(self) -> Result<(Vec<Observation>, Calls)> {
        for w in self.workers {
            w.await?;
        }
        let r = &self.record;
        let obs = std::mem::take(&mut *r.obs.lock().unwrap_or_else(|e| e.into_inner()));
        let calls = Calls {
            requests: r.requests.load(Ordering::Relaxed),
            failed: r.failed.load(Ordering::Relaxed),
            failures: std::mem::take(&mut *r.failures.lock().unwrap_or_else(|e| e.into_inner())),
        };
        Ok((obs, calls))
    }
}

/// What a call answered: the uids asked, in request order, and the
/// numbers, `seqs[i]` for `uids[i]`; on failure, a uid of the call.
type Answer = Result<(Vec<u64>, Vec<u64>), u64>;

/// One caller.
struct Worker {
    client: SeqClient,
    uids: Uids,
    record: Arc<Record>,
    pace: Option<Duration>,
    /// Uids per section (batches stay within one).
    section_size: u64,
}

impl Worker {
    async fn run(self, seed: u64, end: Instant) {
        let mut rng = Rng::new(seed);
        let Uids {
            first,
            count,
            stride,
        } = self.uids;
        let mut next_at = Instant::now();
        let mut i = 0u64;
        while Instant::now() < end {
            if let Some(p) = self.pace {
                next_at += p;
                tokio::time::sleep_until(next_at.into()).await;
            }
            let mut pick = || {
                let x = rng.next_u64();
                first + (x % count) * stride
            };
            i += 1;
            let start = Instant::now();
            self.record.requests.fetch_add(1, Ordering::Relaxed);
            let uid = pick();
            // Every 8th call, a group fan-out within one section.
            let result = if i.is_multiple_of(8) {
                self.batch(uid).await
            } else {
                self.next(uid).await
            };
            self.keep(start, Instant::now(), result);
        }
    }

    /// `next(uid)`; on failure, the uid.
    async fn next(&self, uid: u64) -> Answer {
        self.client
            .next(uid)
            .await
            .map(|s| (vec![uid], vec![s]))
            .map_err(|_| uid)
    }

    /// `next_batch` of 8 uids from `base` on, within `base`'s section (so a
    /// failure is attributed to the right section); on failure, its first
    /// uid.
    async fn batch(&self, base: u64) -> Answer {
        let (first, stride) = (self.uids.first, self.uids.stride);
        let lo = base - (base - first) % self.section_size.max(1);
        let batch: Vec<u64> = (0..8u64)
            .map(|k| (base + k * stride).min(lo + self.section_size - 1))
            .collect();
        self.client
            .next_batch(&batch)
            .await
            .map(|s| (batch.clone(), s))
            .map_err(|_| batch[0])
    }

    /// Records a call that started at `start` and returned at `end`.
    fn keep(&self, start: Instant, end: Instant, result: Answer) {
        match result {
            Ok((uids, seqs)) => {
                // In request order, each with its position (a uid listed
                // twice must get increasing numbers).
                let got = Observation::batch(&uids, &seqs, start, end);
                let mut o = self.record.obs.lock().unwrap_or_else(|e| e.into_inner());
                o.extend(got);
            }
            Err(uid) => {
                self.record.failed.fetch_add(1, Ordering::Relaxed);
                self.record
                    .failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((uid, start));
            }
        }
    }
}
