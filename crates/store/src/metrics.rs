//! A store replica's Prometheus metrics.
//!
//! Counters of what this replica did (commands it proposed as leader by
//! kind and outcome, with latency; renewals granted and refused; arbiter
//! moves) are kept as it works; gauges of its state (Raft term, leadership,
//! log and apply positions, sections, route version, lease terms, fsyncs)
//! are read from the replica when scraped. Calls by method and status code
//! come from the planes' [`seqsvr_net::calls`] layers.
//!
//! [`Stages`] splits a write's time into the steps it goes through on the
//! leader and the followers (docs/benchmarks.md, raise latency): each is
//! one histogram handle, observed with a few atomic operations.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};

use crate::types::Command;

mod gauges;
mod render;

use gauges::Gauges;

/// The metrics of one replica.
pub struct StoreMetrics {
    /// Where everything is registered (also the planes' call metrics).
    pub registry: Registry,
    /// Commands proposed by this replica, by kind and outcome.
    commands: IntCounterVec,
    /// Propose-to-applied latency, by kind.
    command_seconds: HistogramVec,
    /// Renewals, by result (granted, refused).
    renewals: IntCounterVec,
    /// Sections the arbiter moved away from owners whose lease expired.
    moves: IntCounter,
    /// Sections the arbiter's rebalance asked givers to hand off, by
    /// outcome (`moved`, `failed`).
    rebalanced: IntCounterVec,
    /// fsyncs, mirrored from the disk's counter when scraped.
    fsyncs: IntCounter,
    /// Seconds spent syncing (sled flush + fsync), mirrored when scraped.
    sync_seconds: prometheus::Counter,
    /// Seconds spent applying to the state machine, mirrored when scraped.
    apply_seconds: prometheus::Counter,
    /// Gauges read when scraped.
    gauges: Gauges,
    /// Time per step of a write (see [`Stages`]).
    pub stages: Arc<Stages>,
}

/// Where the time of a write goes, step by step, as
/// `seqsvr_store_stage_seconds{stage=…}`. openraft 0.9 runs the leader's
/// steps in series: queue, append (leader), replicate (which includes a
/// follower's append), apply; what `seqsvr_store_command_seconds` holds
/// beyond their sum is openraft's own hand-offs (commit to apply, the
/// reply to the proposer).
#[derive(Clone)]
pub struct Stages {
    /// `queue`: a command waiting in the proposer for its batch to be
    /// handed to Raft (group commit: the batch before it is committing).
    pub queue: Histogram,
    /// `append`: writing a batch of log entries and making it durable
    /// (sled flush + fsync), on the leader and on followers alike.
    pub append: Histogram,
    /// `replicate`: an AppendEntries call that carries entries, from the
    /// leader's send to the follower's answer (the follower answers after
    /// its own append).
    pub replicate: Histogram,
    /// `apply`: applying a batch of committed entries to the state machine
    /// (state logic and the sled batch, no fsync).
    pub apply: Histogram,
    /// `snapshot`: building a snapshot and storing it (fsync included).
    pub snapshot: Histogram,
}

impl Stages {
    fn new(vec: &HistogramVec) -> Self {
        let h = |stage: &str| vec.with_label_values(&[stage]);
        Self {
            queue: h("queue"),
            append: h("append"),
            replicate: h("replicate"),
            apply: h("apply"),
            snapshot: h("snapshot"),
        }
    }

    /// Stages registered nowhere: for storage opened outside a node
    /// (tests, tools).
    pub fn unregistered() -> Arc<Self> {
        Arc::new(Self::new(
            &stage_histograms().expect("valid histogram options"),
        ))
    }
}

/// A registry whose every metric is labelled with the replica and its set,
/// holding the metrics every process exposes.
fn registry(node: u64, set: u32) -> prometheus::Result<Registry> {
    let labels = [
        ("store_node".to_string(), node.to_string()),
        ("set".to_string(), set.to_string()),
    ];
    let registry = Registry::new_custom(None, Some(labels.into()))?;
    seqsvr_net::exposition::register_common(&registry)?;
    Ok(registry)
}

fn stage_histograms() -> prometheus::Result<HistogramVec> {
    HistogramVec::new(
        HistogramOpts::new(
            "seqsvr_store_stage_seconds",
            "time per step of a write: queue (proposer), append (log write + fsync, leader and followers), replicate (AppendEntries with entries, round trip), apply (state machine), snapshot (build + store)",
        )
        .buckets(vec![
            0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.000_75, 0.001, 0.001_5, 0.002, 0.003,
            0.005, 0.007_5, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0,
        ]),
        &["stage"],
    )
}

fn kind(cmd: &Command) -> &'static str {
    match cmd {
        Command::ConfigureSet(_) | Command::ConfigureAddedSet(_) => "configure_set",
        Command::SetLease(_) => "set_lease",
        Command::RegisterAlloc { .. } => "register_alloc",
        Command::FenceAlloc { .. } => "fence_alloc",
        Command::Assign { .. } => "assign",
        Command::TakeOver { .. } => "take_over",
        Command::Handoff { .. } => "handoff",
        Command::SetDraining { .. } => "set_draining",
        Command::Raise { .. } => "raise",
        Command::Freeze { .. } | Command::LegacyFreeze { .. } => "freeze",
        Command::Install { .. } | Command::LegacyInstall { .. } => "install",
        Command::Directory(_) => "directory",
        Command::CopyDirectory(_) => "copy_directory",
        Command::RetireAlloc { .. } => "retire_alloc",
        Command::StopAlloc { .. } => "stop_alloc",
        Command::RestoreSet { .. } => "restore_set",
        Command::RestoreSections { .. } => "restore_sections",
        Command::CreateIdSpace { .. } => "create_id_space",
        Command::ClaimWorker { .. } => "claim_worker",
        Command::RaiseWorker { .. } => "raise_worker",
        Command::ReleaseWorker { .. } => "release_worker",
        Command::Counter { .. } => "counter",
        Command::CopyCounters { .. } => "copy_counters",
        Command::RestoreCounters { .. } => "restore_counters",
        Command::RestoreIds { .. } => "restore_ids",
    }
}

impl StoreMetrics {
    /// A fresh registry with every store metric.
    pub fn new(node: u64, set: u32) -> prometheus::Result<Arc<Self>> {
        let registry = registry(node, set)?;
        let commands = IntCounterVec::new(
            Opts::new(
                "seqsvr_store_commands_total",
                "commands this replica proposed, by kind and outcome",
            ),
            &["command", "outcome"],
        )?;
        let command_seconds = HistogramVec::new(
            HistogramOpts::new(
                "seqsvr_store_command_seconds",
                "time from proposing a command to its result (log append, replication, majority fsync, apply)",
            )
            .buckets(vec![0.000_5, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0]),
            &["command"],
        )?;
        let renewals = IntCounterVec::new(
            Opts::new(
                "seqsvr_store_renewals_total",
                "lease renewals handled by this replica as leader",
            ),
            &["result"],
        )?;
        let moves = IntCounter::new(
            "seqsvr_store_arbiter_moves_total",
            "runs of sections the arbiter routed away from AllocSvrs whose lease expired or that stopped (first routings of unowned sections are not counted)",
        )?;
        let rebalanced = IntCounterVec::new(
            Opts::new(
                "seqsvr_store_rebalanced_sections_total",
                "sections the arbiter's rebalance asked live AllocSvrs to hand off to less loaded ones, by outcome (moved, failed)",
            ),
            &["outcome"],
        )?;
        for o in ["moved", "failed"] {
            rebalanced.with_label_values(&[o]);
        }
        let fsyncs = IntCounter::new(
            "seqsvr_store_fsyncs_total",
            "fsyncs of the replica's database",
        )?;
        let sync_seconds = prometheus::Counter::new(
            "seqsvr_store_sync_seconds_total",
            "time this replica spent syncing its database (sled flush + fsync, log and state)",
        )?;
        let apply_seconds = prometheus::Counter::new(
            "seqsvr_store_apply_seconds_total",
            "time this replica spent applying committed entries to its state machine",
        )?;
        let gauges = Gauges::register(&registry)?;
        let stage_vec = stage_histograms()?;
        for c in [
            Box::new(stage_vec.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(commands.clone()),
            Box::new(command_seconds.clone()),
            Box::new(renewals.clone()),
            Box::new(moves.clone()),
            Box::new(rebalanced.clone()),
            Box::new(fsyncs.clone()),
            Box::new(sync_seconds.clone()),
            Box::new(apply_seconds.clone()),
        ] {
            registry.register(c)?;
        }
        Ok(Arc::new(Self {
            registry,
            commands,
            command_seconds,
            renewals,
            moves,
            rebalanced,
            fsyncs,
            sync_seconds,
            apply_seconds,
            gauges,
            stages: Arc::new(Stages::new(&stage_vec)),
        }))
    }

    /// A command this replica proposed, its outcome and how long it took.
    pub fn command(&self, cmd: &Command, ok: bool, took: Duration) {
        let k = kind(cmd);
        let outcome = if ok { "ok" } else { "refused" };
        self.commands.with_label_values(&[k, outcome]).inc();
        self.command_seconds
            .with_label_values(&[k])
            .observe(took.as_secs_f64());
    }

    /// A renewal granted or refused.
    pub fn renewal(&self, granted: bool) {
        let r = if granted { "granted" } else { "refused" };
        self.renewals.with_label_values(&[r]).inc();
    }

    /// An arbiter move.
    pub fn moved(&self) {
        self.moves.inc();
    }

    /// Sections of one rebalance batch: how many moved, how many did not.
    pub fn rebalanced(&self, moved: usize, failed: usize) {
        self.rebalanced
            .with_label_values(&["moved"])
            .inc_by(moved as u64);
        self.rebalanced
            .with_label_values(&["failed"])
            .inc_by(failed as u64);
    }
}
