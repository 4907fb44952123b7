//! `seqctl counter import`: named counters' floors from the system a team
//! moves away from (`docs/counters.md`, Moving over), so no name ever
//! hands out a number the old system gave.
//!
//! - [`dump`]: `mysqldump` `INSERT`s, `mysql -B` TSV or CSV, read as rows
//!   (pure);
//! - [`sources`]: rows of Leaf's `leaf_alloc` and Tinyid's `tiny_id_info`,
//!   and Redis keys, as a [`Plan`]: one floor per counter, the highest
//!   number its source could have handed out, and what is refused, why
//!   (pure);
//! - [`redis`]: a live Redis read with `SCAN` + `MGET`;
//! - here: the [`FloorSink`] floors are set through, [`apply`] and its
//!   [`Summary`], the command's arguments and output.
//!
//! Setting a floor only ever moves a counter forward: importing the same
//! source twice, or an older dump after a newer one, changes nothing the
//! second time (`already above`).

pub mod dump;
pub mod redis;
pub mod sources;

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::outln;
use dump::Format;
use sources::Source;

/// One counter to import.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Floor {
    /// The name.
    #[serde(serialize_with = "as_text")]
    pub name: Vec<u8>,
    /// The highest number the source could have handed out for it: the
    /// counter must hand out only numbers above it.
    pub floor: u64,
    /// Where it came from (`leaf_alloc line 12`, `redis key "order:1"`).
    pub at: String,
}

/// A row or key that is not imported, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The name, as far as there is one.
    #[serde(serialize_with = "as_text")]
    pub name: Vec<u8>,
    /// Where it came from.
    pub at: String,
    /// Why it is not imported.
    pub reason: String,
}

/// What an import will do: floors, in the order first seen, and refusals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// One floor per counter.
    pub floors: Vec<Floor>,
    /// What is not imported.
    pub refused: Vec<Refusal>,
    /// Name → index in `floors`.
    index: HashMap<Vec<u8>, usize>,
}

impl Plan {
    /// Adds a floor for `name`, or refuses it if it is not a name
    /// (1..=256 bytes). A counter listed twice keeps the higher floor,
    /// which covers both.
    pub fn add(&mut self, name: Vec<u8>, floor: u64, at: String) {
        if let Err(e) = seqsvr_core::check_name(&name) {
            return self.refuse(&name, at, e.to_string());
        }
        match self.index.get(&name) {
            Some(&i) if self.floors[i].floor >= floor => {}
            Some(&i) => self.floors[i] = Floor { name, floor, at },
            None => {
                self.index.insert(name.clone(), self.floors.len());
                self.floors.push(Floor { name, floor, at });
            }
        }
    }

    /// Refuses `name` (from `at`) for `reason`.
    pub fn refuse(&mut self, name: &[u8], at: String, reason: String) {
        let name = name.to_vec();
        self.refused.push(Refusal { name, at, reason });
    }
}

/// What setting one floor did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorOutcome {
    /// The counter now hands out only numbers above the floor.
    Raised,
    /// The counter was already at or above it (`current`): unchanged.
    AlreadyAbove {
        /// The counter's last number.
        current: u64,
    },
}

/// Why a floor was not set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkError {
    /// This counter's floor is refused (a declared maximum below it, say):
    /// the import goes on with the next.
    Refused(String),
    /// The cluster cannot be reached or refuses every call: the import
    /// stops.
    Failed(String),
}

/// Where floors are set: the cluster's set-floor call, or memory.
pub trait FloorSink {
    /// Makes `name` hand out only numbers above `floor`; never moves it
    /// back (a counter already above is left as it is).
    fn set_floor(
        &self,
        name: &[u8],
        floor: u64,
    ) -> impl std::future::Future<Output = Result<FloorOutcome, SinkError>>;
}

/// Floors kept in memory, with the cluster's rule (only forward): what
/// tests import into.
#[derive(Debug, Default)]
pub struct MemSink {
    /// Name → last number (the floor set, or a value seeded by a test).
    pub counters: std::sync::Mutex<HashMap<Vec<u8>, u64>>,
}

impl FloorSink for MemSink {
    async fn set_floor(&self, name: &[u8], floor: u64) -> Result<FloorOutcome, SinkError> {
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let cur = c.entry(name.to_vec()).or_insert(0);
        if *cur >= floor {
            return Ok(FloorOutcome::AlreadyAbove { current: *cur });
        }
        *cur = floor;
        Ok(FloorOutcome::Raised)
    }
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Floors set.
    pub imported: usize,
    /// Counters already at or above their floor (left as they were).
    pub already_above: usize,
    /// Rows, keys or floors not imported, and why.
    pub refused: Vec<Refusal>,
}

/// Sets every floor of `plan` through `sink`, in order. A refusal of one
/// floor is counted and the import goes on; a failure of the sink stops
/// it, saying how far it got (running it again is safe).
pub async fn apply<S: FloorSink>(plan: &Plan, sink: &S) -> Result<Summary> {
    let mut s = Summary {
        refused: plan.refused.clone(),
        ..Default::default()
    };
    for f in &plan.floors {
        match sink.set_floor(&f.name, f.floor).await {
            Ok(FloorOutcome::Raised) => s.imported += 1,
            Ok(FloorOutcome::AlreadyAbove { .. }) => s.already_above += 1,
            Err(SinkError::Refused(reason)) => s.refused.push(Refusal {
                name: f.name.clone(),
                at: f.at.clone(),
                reason,
            }),
            Err(SinkError::Failed(why)) => {
                return Err(Error::Failed(format!(
                    "setting the floor of {} failed after {} imported, {} already above: {why} \
                     (importing again is safe: floors only move forward)",
                    text(&f.name),
                    s.imported,
                    s.already_above
                )))
            }
        }
    }
    Ok(s)
}

/// `seqctl counter import`.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// Where the counters come from.
    #[command(subcommand)]
    pub from: ImportFrom,
    /// Print the plan (each counter's floor, each refusal) and change
    /// nothing; needs no cluster.
    #[arg(long, global = true)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The sources of an import.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ImportFrom {
    /// A Leaf `leaf_alloc` dump: mysqldump INSERTs, or the output of
    /// `mysql -B -e 'SELECT biz_tag, max_id, step FROM leaf_alloc'` (TSV)
    /// or a CSV, with a header line. Floor: max_id.
    Leaf {
        /// The dump ("-": standard input).
        file: PathBuf,
        /// How the dump is written.
        #[arg(long, value_enum, default_value_t = Format::Auto)]
        format: Format,
    },
    /// A Tinyid `tiny_id_info` dump (biz_type, begin_id, max_id, step,
    /// delta, remainder), as for Leaf. Floor: max_id.
    Tinyid {
        /// The dump ("-": standard input).
        file: PathBuf,
        /// How the dump is written.
        #[arg(long, value_enum, default_value_t = Format::Auto)]
        format: Format,
    },
    /// A live Redis: every key matching --match (SCAN), its value (GET);
    /// integers only. Floor: the value.
    Redis {
        /// The Redis to read (redis://[user:password@]host:port[/db]).
        #[arg(long, default_value = "redis://127.0.0.1:6379")]
        url: String,
        /// Only keys matching this glob (Redis `SCAN … MATCH`).
        #[arg(long = "match", default_value = "*")]
        pattern: String,
    },
}

/// Reads the source of `from` into a plan.
pub async fn plan(from: &ImportFrom) -> Result<Plan> {
    let (source, file, format) = match from {
        ImportFrom::Leaf { file, format } => (Source::Leaf, file, *format),
        ImportFrom::Tinyid { file, format } => (Source::Tinyid, file, *format),
        ImportFrom::Redis { url, pattern } => {
            let keys = seqsvr_resp::keys::KeyMap::default();
            return redis::plan(url, pattern, &keys).await;
        }
    };
    let text = read(file)?;
    let rows = dump::rows(&text, format, source.table(), source.columns())
        .map_err(|e| Error::Failed(format!("{}: {e}", file.display())))?;
    sources::plan_rows(source, &rows).map_err(|e| Error::Failed(format!("{}: {e}", file.display())))
}

fn read(file: &PathBuf) -> Result<Vec<u8>> {
    if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .map_err(|e| Error::io("reading standard input", e))?;
        return Ok(buf);
    }
    std::fs::read(file).map_err(|e| Error::io(format!("reading {}", file.display()), e))
}

/// `seqctl counter import --dry-run`: the plan, printed.
pub async fn dry_run(args: &ImportArgs) -> Result<()> {
    let plan = plan(&args.from).await?;
    print_plan(&plan, args.json)
}

/// `seqctl counter import`: the plan applied through `sink`, and the
/// summary printed.
pub async fn import<S: FloorSink>(args: &ImportArgs, sink: &S) -> Result<()> {
    let plan = plan(&args.from).await?;
    let summary = apply(&plan, sink).await?;
    print_summary(&summary, args.json)
}

/// Prints what an import would do.
pub fn print_plan(plan: &Plan, json: bool) -> Result<()> {
    if json {
        return crate::ctl::print::json(&serde_json::json!({
            "floors": plan.floors,
            "refused": plan.refused,
        }));
    }
    outln!(
        "would set {} floors; {} refused",
        plan.floors.len(),
        plan.refused.len()
    )?;
    for f in &plan.floors {
        outln!("  {:<40} floor {:>20}   ({})", text(&f.name), f.floor, f.at)?;
    }
    print_refused(&plan.refused)
}

/// Prints what an import did.
pub fn print_summary(s: &Summary, json: bool) -> Result<()> {
    if json {
        return crate::ctl::print::json(s);
    }
    outln!(
        "imported {}, already above {}, refused {}",
        s.imported,
        s.already_above,
        s.refused.len()
    )?;
    print_refused(&s.refused)
}

fn print_refused(refused: &[Refusal]) -> Result<()> {
    if !refused.is_empty() {
        outln!("refused:")?;
    }
    for r in refused {
        outln!("  {:<40} {}: {}", text(&r.name), r.at, r.reason)?;
    }
    Ok(())
}

/// A name as text: lossy UTF-8, quoted when it holds anything but
/// printable ASCII without spaces.
fn text(name: &[u8]) -> String {
    match std::str::from_utf8(name) {
        Ok(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic()) => s.to_string(),
        _ => format!("{:?}", String::from_utf8_lossy(name)),
    }
}

fn as_text<S: serde::Serializer>(name: &[u8], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(name))
}

#[cfg(test)]
mod tests;
