//! What an AllocSvr's id workers count (docs/ids.md, Operations): ids
//! issued and borrowed, clocks seen going back, refusals by reason,
//! worker ids held, claims refused for exhaustion, and the days left
//! before each namespace's time bits run out (an alert at 365 warns a
//! year ahead).

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use seqsvr_core::ids::{GenStats, Layout};

/// The id workers' metrics.
#[derive(Clone, Debug)]
pub struct IdMetrics {
    /// Ids issued.
    pub issued: IntCounter,
    /// Ids issued at a tick ahead of the clock.
    pub borrowed: IntCounter,
    /// Calls that found the clock behind the last tick issued.
    pub clock_back: IntCounter,
    /// Calls refused, by reason (`clock_behind`, `ceiling_reached`).
    pub refused: IntCounterVec,
    /// Worker ids held now.
    pub held: IntGauge,
    /// Claims refused because every worker id is held.
    pub exhausted: IntCounter,
    /// Days before a namespace's time bits run out, by namespace.
    pub days_left: IntGaugeVec,
}

impl IdMetrics {
    /// Registered in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered()?;
        for c in [
            Box::new(m.issued.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.borrowed.clone()),
            Box::new(m.clock_back.clone()),
            Box::new(m.refused.clone()),
            Box::new(m.held.clone()),
            Box::new(m.exhausted.clone()),
            Box::new(m.days_left.clone()),
        ] {
            registry.register(c)?;
        }
        Ok(m)
    }

    /// Not registered anywhere (tests).
    pub fn unregistered() -> prometheus::Result<Self> {
        Ok(Self {
            issued: IntCounter::new("seqsvr_alloc_ids_issued_total", "time-ordered ids issued")?,
            borrowed: IntCounter::new(
                "seqsvr_alloc_ids_borrowed_total",
                "ids issued at a tick ahead of the clock (sequence used up, or the clock went back)",
            )?,
            clock_back: IntCounter::new(
                "seqsvr_alloc_ids_clock_back_total",
                "id calls that found the wall clock behind the last tick issued",
            )?,
            refused: IntCounterVec::new(
                Opts::new(
                    "seqsvr_alloc_ids_refused_total",
                    "id calls refused by the generator, by reason",
                ),
                &["reason"],
            )?,
            held: IntGauge::new("seqsvr_alloc_id_workers_held", "worker ids held now")?,
            exhausted: IntCounter::new(
                "seqsvr_alloc_id_workers_exhausted_total",
                "worker-id claims refused because every worker id of the namespace is held",
            )?,
            days_left: IntGaugeVec::new(
                Opts::new(
                    "seqsvr_alloc_id_layout_days_left",
                    "days before the namespace's time bits run out (alert below 365)",
                ),
                &["namespace"],
            )?,
        })
    }

    /// Adds what a generator counted between `before` and `after`.
    pub fn counted(&self, before: &GenStats, after: &GenStats) {
        self.issued.inc_by(after.issued - before.issued);
        self.borrowed.inc_by(after.borrowed - before.borrowed);
        self.clock_back.inc_by(after.clock_back - before.clock_back);
        let behind = after.clock_behind - before.clock_behind;
        if behind > 0 {
            self.refused
                .with_label_values(&["clock_behind"])
                .inc_by(behind);
        }
        let ceiling = after.ceiling_reached - before.ceiling_reached;
        if ceiling > 0 {
            self.refused
                .with_label_values(&["ceiling_reached"])
                .inc_by(ceiling);
        }
    }

    /// Records how many days `layout` has left at Unix time `now_ms`.
    pub fn days_left(&self, ns: &str, layout: &Layout, now_ms: u64) {
        let end = layout.end_ms().unwrap_or(u64::MAX);
        let days = end.saturating_sub(now_ms) / 86_400_000;
        self.days_left
            .with_label_values(&[ns])
            .set(i64::try_from(days).unwrap_or(i64::MAX));
    }
}
