//! The door's Prometheus metrics, registered in the server's registry
//! (so they carry its labels): commands by name, errors by kind,
//! connections open and accepted.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// The door's metrics.
#[derive(Debug, Clone)]
pub struct DoorMetrics {
    /// Commands answered, by command name (lower case; `unknown` for any
    /// name not in the table, so a stranger cannot grow the label set).
    pub commands: IntCounterVec,
    /// Error replies, by kind (`protocol`, `noauth`, `refused`,
    /// `not_owner` …, a bounded set).
    pub errors: IntCounterVec,
    /// Connections open now.
    pub open: IntGauge,
    /// Connections accepted.
    pub accepted: IntCounter,
    /// Connections closed for a full query buffer or refused at the
    /// connection limit.
    pub dropped: IntCounterVec,
}

impl DoorMetrics {
    /// The metrics, registered in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<DoorMetrics> {
        let m = DoorMetrics {
            commands: IntCounterVec::new(
                Opts::new(
                    "seqsvr_resp_commands_total",
                    "Redis-protocol commands answered, by command",
                ),
                &["command"],
            )?,
            errors: IntCounterVec::new(
                Opts::new(
                    "seqsvr_resp_errors_total",
                    "Redis-protocol error replies, by kind",
                ),
                &["kind"],
            )?,
            open: IntGauge::new("seqsvr_resp_connections", "Redis-protocol connections open")?,
            accepted: IntCounter::new(
                "seqsvr_resp_connections_total",
                "Redis-protocol connections accepted",
            )?,
            dropped: IntCounterVec::new(
                Opts::new(
                    "seqsvr_resp_connections_dropped_total",
                    "Redis-protocol connections closed by a limit, by limit",
                ),
                &["limit"],
            )?,
        };
        registry.register(Box::new(m.commands.clone()))?;
        registry.register(Box::new(m.errors.clone()))?;
        registry.register(Box::new(m.open.clone()))?;
        registry.register(Box::new(m.accepted.clone()))?;
        registry.register(Box::new(m.dropped.clone()))?;
        Ok(m)
    }

    /// Metrics registered nowhere (a door whose owner scrapes nothing).
    pub fn unregistered() -> DoorMetrics {
        Self::register(&Registry::new()).expect("fresh registry")
    }
}
