//! Where a raise's time goes: the replicas' `seqsvr_store_stage_seconds`
//! and `seqsvr_store_command_seconds` histograms, scraped before and after
//! a phase, as means over the phase (docs/benchmarks.md, raise latency).

use crate::metrics::{metric, scrape};

/// Every replica's metrics text at one moment, by replica index.
pub struct Scrapes(Vec<String>);

impl Scrapes {
    /// Scrapes every replica's metrics listener.
    pub fn take(metrics_addrs: &[String]) -> Scrapes {
        Scrapes(metrics_addrs.iter().map(|a| scrape(a)).collect())
    }
}

/// Mean (µs) and count of histogram `name` with `labels` on the replicas
/// `which`, between two scrapes.
fn mean(a: &Scrapes, b: &Scrapes, which: &[usize], name: &str, labels: &[&str]) -> (f64, f64) {
    let delta = |suffix: &str| -> f64 {
        let n = format!("{name}_{suffix}");
        which
            .iter()
            .map(|&i| metric(&b.0[i], &n, labels) - metric(&a.0[i], &n, labels))
            .sum()
    };
    let (sum, count) = (delta("sum"), delta("count"));
    if count > 0.0 {
        (sum / count * 1e6, count)
    } else {
        (0.0, 0.0)
    }
}

/// Prints the breakdown of one phase: `client_us` is the mean latency the
/// callers saw, `leader` the leading replica's index.
pub fn print_breakdown(before: &Scrapes, after: &Scrapes, leader: usize, client_us: f64) {
    if before.0.iter().all(String::is_empty) {
        println!("  (no metrics listeners: no breakdown)");
        return;
    }
    let followers: Vec<usize> = (0..before.0.len()).filter(|&i| i != leader).collect();
    let stage = |which: &[usize], s: &str| {
        mean(
            before,
            after,
            which,
            "seqsvr_store_stage_seconds",
            &[&format!("stage=\"{s}\"")],
        )
    };
    let (command, raises) = mean(
        before,
        after,
        &[leader],
        "seqsvr_store_command_seconds",
        &["command=\"raise\""],
    );
    let (queue, _) = stage(&[leader], "queue");
    let (append, appends) = stage(&[leader], "append");
    let (replicate, calls) = stage(&[leader], "replicate");
    let (f_append, _) = stage(&followers, "append");
    let (apply, applies) = stage(&[leader], "apply");
    let rest = command - queue - append - replicate - apply;
    let row = |what: &str, us: f64, note: &str| println!("    {what:<42} {us:>8.0} µs  {note}");
    println!(
        "  raise latency breakdown (means over the phase; {raises:.0} raises, {appends:.0} leader appends, {calls:.0} AppendEntries with entries, {applies:.0} applies):"
    );
    row("as the caller saw it", client_us, "");
    row(
        "store: proposed → result",
        command,
        "seqsvr_store_command_seconds{command=\"raise\"}",
    );
    row("  queue in the proposer", queue, "per command");
    row("  leader append + fsync", append, "per log write");
    row(
        "  replication round trip",
        replicate,
        "per AppendEntries, both followers (commit waits for the faster)",
    );
    row("    of which follower append + fsync", f_append, "");
    row(
        "    of which network, codec, scheduling",
        replicate - f_append,
        "",
    );
    row("  apply (state machine)", apply, "per batch of entries");
    row(
        "  rest: commit → apply → reply hand-offs",
        rest,
        "proposed → result less the four above",
    );
    row(
        "gRPC, client and forwarding",
        client_us - command,
        "caller's view less the store's",
    );
}
