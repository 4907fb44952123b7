//! What the end-to-end tests check: the per-uid monotonicity checker over
//! what clients received, and the workload and recorder that produce
//! those observations.

use std::time::Instant;

use seqsvr_core::rng::Rng;

/// Runs the per-uid checker over `obs` — numbers handed out (a batch's
/// copies of a uid in request order) and `current` answers — and fails the
/// test (with `logs`) on any regression, repeat or out-of-order read
/// (promise 1).
pub fn assert_monotonic(obs: &[seqsvr_core::checker::Observation], logs: impl Fn() -> String) {
    let r = seqsvr_core::checker::check(obs);
    println!(
        "checked {} numbers and {} current answers for {} uids: {} regressions, {} repeats, \
         {} current answers below an earlier number, {} not below a later number",
        r.observations,
        r.reads,
        r.uids,
        r.regressions.len(),
        r.repeats.len(),
        r.stale_reads.len(),
        r.reads_ahead.len()
    );
    assert!(
        r.observations > 500,
        "too few numbers to check anything ({})",
        r.observations
    );
    assert!(
        r.ok(),
        "promise 1 broken: {:?} {:?} {:?} {:?}\n{}",
        r.regressions.first(),
        r.repeats.first(),
        r.stale_reads.first(),
        r.reads_ahead.first(),
        logs()
    );
}

/// A running client workload: what it received and how often it failed.
pub struct Workload {
    /// Every answer received: numbers handed out and `current` reads.
    pub obs: std::sync::Arc<std::sync::Mutex<Vec<seqsvr_core::checker::Observation>>>,
    /// Calls that failed (expected while processes die).
    pub errors: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Set to stop the callers.
    pub stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The callers.
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Default for Workload {
    fn default() -> Self {
        Workload::new()
    }
}

impl Workload {
    /// Empty shared state; the caller spawns `tasks` with clones of it (or
    /// of a [`Recorder`]).
    pub fn new() -> Workload {
        Workload {
            obs: Default::default(),
            errors: Default::default(),
            stop: Default::default(),
            tasks: Vec::new(),
        }
    }

    /// A caller's handle on the shared state: makes calls and records them.
    pub fn recorder(&self) -> Recorder {
        Recorder {
            obs: self.obs.clone(),
            errors: self.errors.clone(),
            stop: self.stop.clone(),
        }
    }

    /// Stops the callers; returns every answer received (numbers and
    /// `current` reads, for [`assert_monotonic`]) and the failures.
    pub async fn finish(self) -> (Vec<seqsvr_core::checker::Observation>, u64) {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let errors = self.errors.load(Ordering::Relaxed);
        println!("{errors} failed calls");
        (std::mem::take(&mut *self.obs.lock().unwrap()), errors)
    }
}

/// Makes calls through the client library and records what each received,
/// with when it was sent and when it returned, for the per-uid checker.
/// Every method returns whether the call succeeded (a failure is counted).
#[derive(Clone)]
pub struct Recorder {
    obs: std::sync::Arc<std::sync::Mutex<Vec<seqsvr_core::checker::Observation>>>,
    errors: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Recorder {
    /// Whether the workload was told to stop.
    pub fn stopped(&self) -> bool {
        self.stop.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn record(
        &self,
        r: Result<Vec<seqsvr_core::checker::Observation>, seqsvr_client::Error>,
    ) -> bool {
        match r {
            Ok(got) => {
                self.obs.lock().unwrap().extend(got);
                true
            }
            Err(_) => {
                self.errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                false
            }
        }
    }

    /// A number handed out for `uid` by a call sent at `start` and
    /// returning now (`None`: the call failed, counted). For callers
    /// through other doors than the client library (the Redis protocol);
    /// `uid` is whatever the checker keys numbers by (a name's index).
    pub fn record_next(&self, uid: u64, got: Option<u64>, start: Instant) -> bool {
        use seqsvr_core::checker::Observation;
        match got {
            Some(seq) => {
                let o = Observation::next(uid, seq, start, Instant::now());
                self.obs.lock().unwrap().push(o);
                true
            }
            None => {
                self.errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                false
            }
        }
    }

    /// `next(uid)`.
    pub async fn next(&self, c: &seqsvr_client::SeqClient, uid: u64) -> bool {
        use seqsvr_core::checker::Observation;
        let start = Instant::now();
        let r = c.next(uid).await;
        self.record(r.map(|seq| vec![Observation::next(uid, seq, start, Instant::now())]))
    }

    /// `next_batch(uids)`: the answer in request order, each number with
    /// its position (a uid listed twice must get increasing numbers).
    pub async fn batch(&self, c: &seqsvr_client::SeqClient, uids: &[u64]) -> bool {
        use seqsvr_core::checker::Observation;
        let start = Instant::now();
        let r = c.next_batch(uids).await;
        self.record(r.map(|seqs| Observation::batch(uids, &seqs, start, Instant::now())))
    }

    /// `current(uid)`: checked against the numbers around it.
    pub async fn current(&self, c: &seqsvr_client::SeqClient, uid: u64) -> bool {
        use seqsvr_core::checker::Observation;
        let start = Instant::now();
        let r = c.current(uid).await;
        self.record(r.map(|seq| vec![Observation::current(uid, seq, start, Instant::now())]))
    }
}

/// The step of [`small_set`].
pub const SMALL_STEP: u64 = 200;

/// Set 0 as 8 sections of 500 uids, `[0, 4000)`, with a small step so
/// ceilings are raised often.
pub fn small_set() -> seqsvr_core::SetSpec {
    seqsvr_core::SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: 4000,
        section_size: 500,
        step: SMALL_STEP,
    }
}

/// The first 8,000 positions of the range reserved for names, in 8
/// sections of 1,000, step 500: what the named-counter tests serve.
pub fn name_set() -> seqsvr_core::SetSpec {
    seqsvr_core::SetSpec {
        set_id: 0,
        uid_begin: seqsvr_core::NAME_KEYS.start,
        uid_end: seqsvr_core::NAME_KEYS.start + 8000,
        section_size: 1000,
        step: 500,
    }
}

/// `callers` tasks calling `next` (every 4th call a batch of two) on 64
/// uids spread over every section of [`small_set`]; a caller whose `next`
/// failed waits 20 ms before its next call.
pub fn start_spread_workload(c: &seqsvr_client::SeqClient, callers: u64) -> Workload {
    let mut w = Workload::new();
    w.tasks = (0..callers)
        .map(|k| {
            let (c, r) = (c.clone(), w.recorder());
            tokio::spawn(async move {
                let mut rng = Rng::new(0x9e3779b97f4a7c15u64 ^ k);
                let mut i = 0u64;
                while !r.stopped() {
                    let x = rng.next_u64();
                    let uid = (x % 64) * 61 % 4000;
                    i += 1;
                    if i.is_multiple_of(4) {
                        r.batch(&c, &[uid, (uid + 500) % 4000]).await;
                    } else if !r.next(&c, uid).await {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                }
            })
        })
        .collect();
    w
}
