//! What a connection's commands read and change: the door's shared
//! state ([`Ctx`]) and one connection's ([`Session`]).

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::OnceLock;
use std::time::Instant;

use bytes::Bytes;
use prometheus::IntCounter;

use crate::backend::Backend;
use crate::config::DoorConfig;
use crate::metrics::DoorMetrics;
use crate::reply::Proto;

/// Counters `INFO` reports.
#[derive(Debug)]
pub struct Stats {
    /// When the door started.
    pub started: Instant,
    /// Connections open now.
    pub open: AtomicUsize,
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Commands run.
    pub commands: AtomicU64,
    /// The last connection id handed out.
    pub last_id: AtomicU64,
}

/// What every connection of a door shares.
#[derive(Debug)]
pub struct Ctx {
    /// The door's settings.
    pub cfg: DoorConfig,
    /// Its metrics.
    pub metrics: DoorMetrics,
    /// What `INFO` reports.
    pub stats: Stats,
    /// The backend's `INCRBY` cap.
    pub max_count: u64,
    /// The backend's batch cap (`MGET`, `SEQ.BATCH`).
    pub max_batch: usize,
    /// The commands metric's counters, by position in the command table
    /// (the last: unknown names), looked up once: a label lookup hashes
    /// and locks, which is most of a command's bookkeeping otherwise.
    per_command: OnceLock<Vec<IntCounter>>,
    /// Rounds answered, for the spinner (`crate::spin`).
    pub activity: std::sync::Arc<crate::spin::Activity>,
}

impl Ctx {
    /// The shared state of a door serving `backend` with `cfg`.
    pub fn new<B: Backend>(cfg: DoorConfig, metrics: DoorMetrics, backend: &B) -> Ctx {
        Ctx {
            cfg,
            metrics,
            stats: Stats {
                started: Instant::now(),
                open: AtomicUsize::new(0),
                accepted: AtomicU64::new(0),
                commands: AtomicU64::new(0),
                last_id: AtomicU64::new(0),
            },
            max_count: backend.max_count(),
            max_batch: backend.max_batch(),
            per_command: OnceLock::new(),
            activity: Default::default(),
        }
    }

    /// Adds a connection's counts of commands run since its last call:
    /// `counts[i]` of the `i`-th command of the table, the last entry
    /// names not in it; `names` lists the table's names (the table is the
    /// commands' own, `crate::cmd::COMMANDS`). Leaves `counts` at zero. A
    /// connection counts a round's commands at once: one shared atomic
    /// add per command kind and round, not two per command.
    pub fn count_commands<I>(&self, counts: &mut [u64], names: impl FnOnce() -> I)
    where
        I: Iterator<Item = &'static str>,
    {
        let counters = self.per_command.get_or_init(|| {
            names()
                .chain(["unknown"])
                .map(|n| self.metrics.commands.with_label_values(&[n]))
                .collect()
        });
        let mut total = 0;
        for (c, n) in counters.iter().zip(counts.iter_mut()) {
            if *n > 0 {
                c.inc_by(*n);
                total += *n;
                *n = 0;
            }
        }
        if total > 0 {
            self.stats
                .commands
                .fetch_add(total, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// One connection's state.
#[derive(Debug)]
pub struct Session {
    /// Its id (`CLIENT ID`, `HELLO`).
    pub id: u64,
    /// The protocol it speaks.
    pub proto: Proto,
    /// Whether it may run commands (always, without `AUTH` configured).
    pub authed: bool,
    /// Its name (`CLIENT SETNAME`).
    pub name: Option<Bytes>,
    /// Set by `QUIT`: close after the replies so far.
    pub close: bool,
}
