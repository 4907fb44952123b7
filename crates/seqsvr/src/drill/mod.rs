//! `seqctl drill`: a failover drill against any cluster.
//!
//! It drives a workload of `next` / `next_batch` calls, runs fault actions
//! at chosen times (kill -9, SIGSTOP, SIGCONT of a `seqsvr dev` process by
//! name, or any shell command the operator gives, e.g. `docker kill
//! alloc-2`), and reports what clients saw: regressions and repeats per uid
//! (must be 0 — promise 1), how long each section was unavailable, how long
//! recovery took after each fault, and how many numbers were skipped. Then
//! it judges its own evidence: it fails unless it made calls (at least
//! `--min-calls`) that returned numbers, every fault happened, promise 1
//! held, each fault's section jump stayed within one step (promise 4) and
//! its outage within `--max-outage` (when given).
//!
//! # Layout
//!
//! A drill flows args → faults / workload → analysis → report:
//!
//! - `args`: the flags ([`DrillArgs`]) and the parsers clap runs on them
//!   (durations, fault specs, uid ranges), and the [`DrillConfig`] they
//!   make.
//! - `faults`: what a fault is ([`Fault`], [`Action`]) and running the
//!   faults at their times.
//! - `workload`: the callers, and the record of what each call received or
//!   that it failed.
//! - `analysis`: turns those records into figures: violations, outages per
//!   section and per fault, skipped numbers.
//! - `report`: the figures ([`Report`]) as text or JSON.
//! - `judge`: the verdict ([`judge()`]): a pure function of the report and
//!   the [`Bounds`] the flags state.
//! - here: [`run`], which wires them together.
//!
//! Imports point one way only: `args` and `report` use `faults`'
//! types; `analysis` uses `faults`, `workload` and `report`; `judge` uses
//! `report` (and `args` builds its `Bounds`); `faults` and `workload` use
//! no other part.

mod analysis;
mod args;
mod faults;
mod judge;
mod report;
mod workload;

use std::time::Instant;

use seqsvr_client::{ClientOptions, SeqClient};
use seqsvr_store_api::client::connector;
use seqsvr_store_api::ReadClient;

use crate::error::{Context, Result};

pub use analysis::{section_skip, widest_section_jump};
pub use args::{parse_duration, parse_fault, parse_uids, DrillArgs, DrillConfig};
pub use faults::{Action, ActionKind, Fault};
pub use judge::{judge, Bounds, Breach, NUMBERS_PER_CALL};
pub use report::{FaultReport, Report};

/// The uids a drill covers and how they are cut into sections: the seed
/// store's set, or, when the directory lists several sets, one grid over
/// all their spans (every set follows set 0's section grid), so a drill
/// drives and reports every set's sections.
fn grid(set: seqsvr_core::SetSpec, dir: Option<&seqsvr_core::Directory>) -> seqsvr_core::SetSpec {
    let Some(d) = dir.filter(|d| d.sets.len() > 1) else {
        return set;
    };
    let begin = d
        .sets
        .values()
        .map(|s| s.spec.uid_begin)
        .min()
        .unwrap_or(set.uid_begin);
    let end = d
        .sets
        .values()
        .map(|s| s.spec.uid_end)
        .max()
        .unwrap_or(set.uid_end);
    seqsvr_core::SetSpec {
        uid_begin: begin,
        uid_end: end,
        ..set
    }
}

/// Runs a drill.
pub async fn run(cfg: DrillConfig) -> Result<Report> {
    faults::check(&cfg.faults, cfg.duration)?;
    let to_store = cfg
        .tls
        .clone()
        .map(|t| t.expecting(seqsvr_net::ServerRole::AnyStore));
    let store = ReadClient::new(&cfg.store, &connector(to_store))?;
    let routes = store.routes().await.context("reading the route table")?;
    let set = grid(routes.set, routes.directory.as_ref());
    let load = workload::Load {
        uids: workload::Uids::new(&set, cfg.uids.as_ref()),
        rate: cfg.rate,
        concurrency: cfg.concurrency,
        section_size: set.section_size,
    };
    let opts = ClientOptions {
        deadline: cfg.deadline,
        tls: cfg.tls.clone(),
        ..Default::default()
    };
    let client = SeqClient::connect(&cfg.allocs, opts).await?;
    let t0 = Instant::now();
    let end = t0 + cfg.duration;
    let running = load.start(&client, end);
    let targets = faults::Targets {
        dev_dir: &cfg.dev_dir,
        store: &store,
    };
    let faults = faults::run_faults(&cfg.faults, targets, t0, end).await;
    let (obs, calls) = running.finish().await?;
    Ok(analysis::analyse(
        &set,
        &obs,
        faults,
        calls,
        t0,
        Instant::now(),
    ))
}
