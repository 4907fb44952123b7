//! Structured logging for every binary: `RUST_LOG` filters (default
//! `info`), `--log-format json` switches to one JSON object a line.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; logs go to stderr.
pub fn init(json: bool) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = if json {
        b.json().try_init()
    } else {
        b.try_init()
    };
}
