//! What every seqsvr process exposes besides its own metrics, and how a
//! scrape is rendered.
//!
//! - [`register_common`] registers `seqsvr_build_info{version,commit}` (always 1)
//!   and the process collector's `process_*` series (CPU seconds,
//!   resident memory, open file descriptors, start time).
//! - [`render`] gathers a registry and adds labels known only at scrape
//!   time to every series — `set`, which an AllocSvr learns from its
//!   store after it started — so every series a process exposes carries
//!   its set and its node label (docs/operations.md, Metrics).

use prometheus::proto::LabelPair;
use prometheus::{IntGaugeVec, Opts, Registry};

/// The version the binaries were built as.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit they were built from (`unknown` when it could not be told).
pub const COMMIT: &str = env!("SEQSVR_COMMIT");

/// Registers `seqsvr_build_info` and the process collector in `registry`.
pub fn register_common(registry: &Registry) -> prometheus::Result<()> {
    let info = IntGaugeVec::new(
        Opts::new(
            "seqsvr_build_info",
            "the version and commit this process was built from (always 1)",
        ),
        &["version", "commit"],
    )?;
    info.with_label_values(&[VERSION, COMMIT]).set(1);
    registry.register(Box::new(info))?;
    #[cfg(target_os = "linux")]
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    Ok(())
}

/// Renders `registry` in Prometheus' text format, every series with the
/// labels `extra` added (a label a series already has is left as it is).
pub fn render(registry: &Registry, extra: &[(&str, &str)]) -> String {
    let mut families = registry.gather();
    for f in &mut families {
        for m in f.mut_metric() {
            let mut labels = m.take_label();
            for (name, value) in extra {
                if !labels.iter().any(|l| l.name() == *name) {
                    let mut l = LabelPair::default();
                    l.set_name(name.to_string());
                    l.set_value(value.to_string());
                    labels.push(l);
                }
            }
            labels.sort_by(|a, b| a.name().cmp(b.name()));
            m.set_label(labels);
        }
    }
    prometheus::TextEncoder::new()
        .encode_to_string(&families)
        .unwrap_or_else(|e| format!("# metrics encoding failed: {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_gets_the_extra_labels_and_build_info_is_there() {
        let r = Registry::new_custom(None, Some([("alloc".into(), "a-1".into())].into())).unwrap();
        register_common(&r).unwrap();
        let c = prometheus::IntCounter::new("seqsvr_x_total", "x").unwrap();
        r.register(Box::new(c.clone())).unwrap();
        c.inc();
        let text = render(&r, &[("set", "3")]);
        assert!(
            text.contains(r#"seqsvr_x_total{alloc="a-1",set="3"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                r#"seqsvr_build_info{{alloc="a-1",commit="{COMMIT}",set="3",version="{VERSION}"}} 1"#
            )),
            "{text}"
        );
        #[cfg(target_os = "linux")]
        assert!(
            text.contains(r#"process_resident_memory_bytes{alloc="a-1",set="3"}"#),
            "{text}"
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.contains(r#"set="3""#), "{line}");
        }
    }
}
