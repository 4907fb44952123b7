//! An AllocSvr's Prometheus metrics.
//!
//! The hot path adds one atomic add per call (numbers handed out); every
//! other figure is either counted off the hot path (renewals, lapses,
//! take-overs, raises, and the latency of renewals and raises) or read when scraped (sections
//! served, lease left, allocator counters). Calls by method and status
//! code, with latency, come from the planes' [`seqsvr_net::calls`] layers.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};
use seqsvr_proto::ErrorKind;

use crate::allocator::Allocator;

/// The metrics of one AllocSvr process.
pub struct AllocMetrics {
    /// Where everything is registered (also the planes' call metrics).
    pub registry: Registry,
    /// Sequence numbers handed out (`next` and batches).
    pub numbers: IntCounter,
    /// Lease renewals, by result (granted, failed).
    renewals: IntCounterVec,
    /// Renewals that found the lease lapsed.
    pub lapses: IntCounter,
    /// Round trip of granted renewals, from the send time (the time the
    /// lease is counted from) to the grant.
    renewal_seconds: Histogram,
    /// Sections started: claimed by take-over, adopted after handoffs.
    sections: IntCounterVec,
    /// Store latency of ceiling raises.
    raise_seconds: Histogram,
    /// Allocator counters (one metric each), mirrored when scraped.
    allocator: AllocatorCounters,
    /// State read when scraped.
    state: StateGauges,
    /// Errors answered, by kind, and forwarding.
    pub front: FrontMetrics,
}

/// What the doors and forwarding count (`docs/architecture/forwarding.md`):
/// errors answered by kind (every door), calls forwarded to owners by
/// outcome and their latency, the sizes of the batches sent to owners,
/// and the calls in flight to owners. Nothing here is touched on the
/// owner's own hot path: errors and forwarded calls only.
#[derive(Clone)]
pub struct FrontMetrics {
    /// Errors answered, by `ErrorKind` name.
    errors: IntCounterVec,
    /// Forwarded calls, by operation and outcome (`ok` or the kind).
    forwarded: IntCounterVec,
    /// Forwarded calls' latency, by operation.
    forward_seconds: HistogramVec,
    /// Uids in each batch sent to an owner (coalesced `Next`s and parts
    /// of forwarded batches).
    pub batch_uids: Histogram,
    /// Callers' calls combined in each batch sent to an owner.
    pub batch_calls: Histogram,
    /// Forwarded calls waiting for their owner's answer.
    pub in_flight: IntGauge,
}

impl FrontMetrics {
    fn register(registry: &Registry) -> prometheus::Result<Self> {
        let errors = IntCounterVec::new(
            Opts::new(
                "seqsvr_alloc_errors_total",
                "errors answered to callers (every door), by ErrorKind",
            ),
            &["kind"],
        )?;
        let forwarded = IntCounterVec::new(
            Opts::new(
                "seqsvr_alloc_forwarded_total",
                "calls for uids owned elsewhere, forwarded to their owner, by op and outcome",
            ),
            &["op", "outcome"],
        )?;
        let forward_seconds = HistogramVec::new(
            HistogramOpts::new(
                "seqsvr_alloc_forward_seconds",
                "latency of a forwarded call, from the caller's arrival to the owner's answer",
            )
            .buckets(vec![
                0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.0,
            ]),
            &["op"],
        )?;
        let batch_uids = Histogram::with_opts(
            HistogramOpts::new(
                "seqsvr_alloc_forward_batch_uids",
                "uids in one batch sent to an owner (coalesced Next calls or a batch's part)",
            )
            .buckets(vec![
                1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0, 4096.0,
            ]),
        )?;
        let batch_calls = Histogram::with_opts(
            HistogramOpts::new(
                "seqsvr_alloc_forward_batch_calls",
                "callers' calls (single Nexts, parts of batches) combined in one batch sent to an owner",
            )
            .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0]),
        )?;
        let in_flight = IntGauge::new(
            "seqsvr_alloc_forward_in_flight",
            "forwarded calls waiting for their owner's answer",
        )?;
        for c in [
            Box::new(errors.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(forwarded.clone()),
            Box::new(forward_seconds.clone()),
            Box::new(batch_uids.clone()),
            Box::new(batch_calls.clone()),
            Box::new(in_flight.clone()),
        ] {
            registry.register(c)?;
        }
        Ok(Self {
            errors,
            forwarded,
            forward_seconds,
            batch_uids,
            batch_calls,
            in_flight,
        })
    }

    /// A batch of `uids` uids combining `calls` callers' calls was sent
    /// to an owner.
    pub fn batch_sent(&self, uids: usize, calls: usize) {
        self.batch_uids.observe(uids as f64);
        self.batch_calls.observe(calls as f64);
    }

    /// An error answered to a caller.
    pub fn error(&self, kind: ErrorKind) {
        self.errors.with_label_values(&[kind.as_str_name()]).inc();
    }

    /// A forwarded call of `op` ended with `outcome` (`ok` or a kind
    /// name) after `took`.
    pub fn forwarded(&self, op: &str, outcome: &str, took: Duration) {
        self.forwarded.with_label_values(&[op, outcome]).inc();
        self.forward_seconds
            .with_label_values(&[op])
            .observe(took.as_secs_f64());
    }

    /// How many calls of `op` ended with `outcome` (for tests and status).
    pub fn forwarded_count(&self, op: &str, outcome: &str) -> u64 {
        self.forwarded.with_label_values(&[op, outcome]).get()
    }
}

impl std::fmt::Debug for AllocMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocMetrics")
            .field("numbers", &self.numbers.get())
            .finish_non_exhaustive()
    }
}

impl AllocMetrics {
    /// A fresh registry with every AllocSvr metric, labelled with its id.
    pub fn new(alloc: &str) -> prometheus::Result<Arc<Self>> {
        let registry = Registry::new_custom(
            None,
            Some([("alloc".to_string(), alloc.to_string())].into()),
        )?;
        seqsvr_net::exposition::register_common(&registry)?;
        let numbers = IntCounter::new("seqsvr_alloc_numbers_total", "sequence numbers handed out")?;
        let renewals = IntCounterVec::new(
            Opts::new("seqsvr_alloc_renewals_total", "lease renewals, by result"),
            &["result"],
        )?;
        let lapses = IntCounter::new(
            "seqsvr_alloc_lease_lapses_total",
            "renewals that found the lease had lapsed (every section was dropped)",
        )?;
        let renewal_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "seqsvr_alloc_renewal_seconds",
                "round trip of a granted lease renewal, from its send time",
            )
            .buckets(vec![
                0.000_5, 0.001, 0.001_5, 0.002, 0.003, 0.004, 0.005, 0.007_5, 0.01, 0.015, 0.02,
                0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.0,
            ]),
        )?;
        let sections = IntCounterVec::new(
            Opts::new(
                "seqsvr_alloc_sections_started_total",
                "sections started: taken over or adopted",
            ),
            &["how"],
        )?;
        let raise_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "seqsvr_alloc_raise_seconds",
                "store latency of a ceiling raise",
            )
            .buckets(vec![
                0.000_5, 0.001, 0.002, 0.003, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0,
            ]),
        )?;
        let allocator = AllocatorCounters::register(&registry)?;
        let state = StateGauges::register(&registry)?;
        for c in [
            Box::new(numbers.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(renewals.clone()),
            Box::new(lapses.clone()),
            Box::new(renewal_seconds.clone()),
            Box::new(sections.clone()),
            Box::new(raise_seconds.clone()),
        ] {
            registry.register(c)?;
        }
        let front = FrontMetrics::register(&registry)?;
        Ok(Arc::new(Self {
            front,
            registry,
            numbers,
            renewals,
            lapses,
            renewal_seconds,
            sections,
            raise_seconds,
            allocator,
            state,
        }))
    }

    /// An error answered to a caller (see [`FrontMetrics`]).
    pub fn error(&self, kind: ErrorKind) {
        self.front.error(kind);
    }

    /// A renewal granted or failed.
    pub fn renewal(&self, granted: bool) {
        let r = if granted { "granted" } else { "failed" };
        self.renewals.with_label_values(&[r]).inc();
    }

    /// A granted renewal's round trip.
    pub fn renewed(&self, took: Duration) {
        self.renewal_seconds.observe(took.as_secs_f64());
    }

    /// Sections started by a take-over (`took_over`) or an adopt.
    pub fn sections_started(&self, how: &str, n: usize) {
        self.sections.with_label_values(&[how]).inc_by(n as u64);
    }

    /// A raise's store latency.
    pub fn raised(&self, took: Duration) {
        self.raise_seconds.observe(took.as_secs_f64());
    }

    /// Reads the AllocSvr's state into the gauges and renders everything:
    /// the allocator's counters and sections served from `alloc`, and the
    /// rest as the caller read it (lease left in ms, draining, fenced,
    /// route version; see `Shared::render_metrics`).
    pub fn render(
        &self,
        alloc: &Allocator,
        lease_left_ms: i64,
        draining: bool,
        fenced: bool,
        route_version: u64,
    ) -> String {
        let st = alloc.stats();
        let c = &self.allocator;
        for (counter, v) in [
            (&c.exhausted, st.exhausted),
            (&c.raises_queued, st.raises_queued),
            (&c.raises_applied, st.raises_applied),
            (&c.sections_dropped, st.sections_dropped),
            (&c.sections_freed, st.sections_freed),
            (&c.raises_early, st.raises_early),
            (&c.raise_waits, st.raise_waits),
            (&c.raise_wait_timeouts, st.raise_wait_timeouts),
            (&c.names_created, st.names.created),
            (&c.names_forgotten, st.names.forgotten),
            (&c.name_numbers_skipped, st.names.skipped),
            (&c.counter_limit_errors, st.names.limit_errors),
        ] {
            counter.inc_by(v.saturating_sub(counter.get()));
        }
        let g = &self.state;
        g.sections_served.set(alloc.served_count() as i64);
        g.cell_bytes.set(st.cell_bytes as i64);
        g.names_held.set(st.names.held as i64);
        g.lease_left_seconds.set(lease_left_ms as f64 / 1000.0);
        g.draining.set(i64::from(draining));
        g.fenced.set(i64::from(fenced));
        g.route_version.set(route_version as i64);
        g.sections_by_step.reset();
        for (step, n) in alloc.step_counts() {
            g.sections_by_step
                .with_label_values(&[&step.to_string()])
                .set(n as i64);
        }
        let set = alloc.spec().set_id.to_string();
        seqsvr_net::exposition::render(&self.registry, &[("set", &set)])
    }
}

/// The allocator's counters, one metric per meaning.
struct AllocatorCounters {
    exhausted: IntCounter,
    raises_queued: IntCounter,
    raises_applied: IntCounter,
    sections_dropped: IntCounter,
    sections_freed: IntCounter,
    raises_early: IntCounter,
    raise_waits: IntCounter,
    raise_wait_timeouts: IntCounter,
    names_created: IntCounter,
    names_forgotten: IntCounter,
    name_numbers_skipped: IntCounter,
    counter_limit_errors: IntCounter,
}

impl AllocatorCounters {
    fn register(r: &Registry) -> prometheus::Result<Self> {
        let c = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            let c = IntCounter::new(name, help)?;
            r.register(Box::new(c.clone()))?;
            Ok(c)
        };
        Ok(Self {
            exhausted: c(
                "seqsvr_alloc_exhausted_total",
                "calls that found their section's ceiling reached and waited for a raise",
            )?,
            raises_queued: c("seqsvr_alloc_raises_queued_total", "ceiling raises queued")?,
            raises_applied: c(
                "seqsvr_alloc_raises_applied_total",
                "ceiling raises the store committed and this AllocSvr applied",
            )?,
            sections_dropped: c(
                "seqsvr_alloc_sections_dropped_total",
                "sections this AllocSvr stopped serving",
            )?,
            sections_freed: c(
                "seqsvr_alloc_sections_freed_total",
                "sections whose cur_seq cells were freed once their last callers finished",
            )?,
            raises_early: c(
                "seqsvr_alloc_raises_early_total",
                "ceiling raises asked for while the section still had headroom (the rest: by a caller that found it exhausted)",
            )?,
            raise_waits: c(
                "seqsvr_alloc_raise_waits_total",
                "callers that found their section exhausted and waited for its raise",
            )?,
            raise_wait_timeouts: c(
                "seqsvr_alloc_raise_wait_timeouts_total",
                "waits for a raise that ran out (answered CEILING_EXHAUSTED, retryable)",
            )?,
            names_created: c(
                "seqsvr_alloc_names_created_total",
                "named counters created here: first seen, or seen again after being forgotten",
            )?,
            names_forgotten: c(
                "seqsvr_alloc_names_forgotten_total",
                "named counters forgotten to stay within max_names",
            )?,
            name_numbers_skipped: c(
                "seqsvr_alloc_name_numbers_skipped_total",
                "numbers named counters skipped when created above their section's base because names of it were forgotten",
            )?,
            counter_limit_errors: c(
                "seqsvr_alloc_declared_limit_errors_total",
                "calls a declared counter refused whole because they would pass its maximum (COUNTER_MAX_REACHED)",
            )?,
        })
    }
}

/// The AllocSvr's state, one gauge per meaning (durations in seconds).
struct StateGauges {
    sections_served: IntGauge,
    cell_bytes: IntGauge,
    names_held: IntGauge,
    lease_left_seconds: Gauge,
    draining: IntGauge,
    fenced: IntGauge,
    route_version: IntGauge,
    sections_by_step: IntGaugeVec,
}

impl StateGauges {
    fn register(r: &Registry) -> prometheus::Result<Self> {
        let int = |name: &str, help: &str| -> prometheus::Result<IntGauge> {
            let g = IntGauge::new(name, help)?;
            r.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let lease_left_seconds = Gauge::new(
            "seqsvr_alloc_lease_left_seconds",
            "time left on this AllocSvr's lease (0 or less: none)",
        )?;
        r.register(Box::new(lease_left_seconds.clone()))?;
        let sections_by_step = IntGaugeVec::new(
            Opts::new(
                "seqsvr_alloc_sections_by_step",
                "sections served, by the step their next raise adds (adaptive steps; fixed: the set's step)",
            ),
            &["step"],
        )?;
        r.register(Box::new(sections_by_step.clone()))?;
        Ok(Self {
            sections_by_step,
            sections_served: int("seqsvr_alloc_sections_served", "sections this AllocSvr serves")?,
            cell_bytes: int(
                "seqsvr_alloc_cell_bytes",
                "bytes of cur_seq cells held (served sections, and lost ones until their last callers finish)",
            )?,
            names_held: int("seqsvr_alloc_names_held", "named counters held in memory (at most max_names)")?,
            lease_left_seconds,
            draining: int("seqsvr_alloc_draining", "1 while this AllocSvr is draining")?,
            fenced: int("seqsvr_alloc_fenced", "1 once this AllocSvr was fenced (it never serves again)")?,
            route_version: int("seqsvr_alloc_route_version", "the route table version this AllocSvr holds")?,
        })
    }
}
