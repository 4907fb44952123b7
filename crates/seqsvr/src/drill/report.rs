//! The drill's findings, printed as text or (`--json`) JSON, with the
//! verdict on them (see `judge`).

use serde::{Deserialize, Serialize};

use super::faults::Fault;
use crate::error::Result;
use crate::outln;

/// A fault as it happened.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultReport {
    /// The fault.
    pub fault: Fault,
    /// What it did (or why it failed).
    pub outcome: String,
    /// Whether it happened: its signal was delivered, its command exited
    /// 0, its replica acknowledged the cut.
    pub applied: bool,
    /// The longest time, from the fault on, that any section went without
    /// a successful call while calls for it failed (before the next fault),
    /// in ms.
    pub recovery_ms: f64,
    /// Across the fault, the largest jump of a section's numbers (see
    /// `section_skip`); compare with the step.
    pub section_skip_max: u64,
}

/// The drill's findings. Read back from JSON (`--json`), a figure that is
/// missing or not a number (`null`) is an error, never a default.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Calls made.
    pub requests: u64,
    /// Calls that failed (after the client's retries).
    pub failed: u64,
    /// Numbers received.
    pub numbers: usize,
    /// Distinct uids that received numbers.
    pub uids: usize,
    /// Later calls that got a smaller number (must be 0).
    pub regressions: usize,
    /// Two calls that got the same number (must be 0).
    pub repeats: usize,
    /// The first violations, human-readable.
    pub examples: Vec<String>,
    /// Per section: longest stretch without a successful call, in ms — max.
    pub unavailable_max_ms: f64,
    /// … and 99th percentile over sections.
    pub unavailable_p99_ms: f64,
    /// The worst sections: (section, uid range, ms).
    pub worst_sections: Vec<(u32, String, f64)>,
    /// Faults and recovery.
    pub faults: Vec<FaultReport>,
    /// Numbers never received between a uid's first and last number.
    pub skipped: u64,
    /// The largest such gap for one uid.
    pub skipped_max_per_uid: u64,
    /// The set's step (for reading the skips).
    pub step: u64,
}

impl Report {
    /// Whether promise 1 held.
    pub fn ok(&self) -> bool {
        self.regressions == 0 && self.repeats == 0
    }

    /// Prints the report (text or JSON).
    pub fn print(&self, json: bool) -> Result<()> {
        if json {
            outln!(
                "{}",
                serde_json::to_string_pretty(self).expect("report serialises")
            )?;
            return Ok(());
        }
        self.print_text()
    }

    /// Prints the report and the verdict on it (`reasons`, the judgement's
    /// breaches as sentences; empty: passed):
    /// as text, the report then `verdict  PASSED` or `verdict  FAILED` and
    /// a line per reason; as JSON, the report's fields and `breaches`, the
    /// reasons.
    pub fn print_judged(&self, json: bool, reasons: &[String]) -> Result<()> {
        if json {
            #[derive(Serialize)]
            struct Judged<'a> {
                #[serde(flatten)]
                report: &'a Report,
                breaches: &'a [String],
            }
            let judged = Judged {
                report: self,
                breaches: reasons,
            };
            let text = serde_json::to_string_pretty(&judged).expect("report serialises");
            return outln!("{text}");
        }
        self.print_text()?;
        if reasons.is_empty() {
            return outln!("verdict      PASSED");
        }
        outln!("verdict      FAILED")?;
        for r in reasons {
            outln!("  {r}")?;
        }
        Ok(())
    }

    fn print_text(&self) -> Result<()> {
        outln!(
            "requests     {} ({} failed), {} numbers for {} uids",
            self.requests,
            self.failed,
            self.numbers,
            self.uids
        )?;
        let verdict = if self.ok() { "OK" } else { "BROKEN" };
        outln!(
            "regressions  {}   repeats {}   => {verdict}",
            self.regressions,
            self.repeats
        )?;
        for e in &self.examples {
            outln!("  {e}")?;
        }
        outln!(
            "unavailable  per section (gaps with failed calls): max {:.0} ms, p99 {:.0} ms",
            self.unavailable_max_ms,
            self.unavailable_p99_ms
        )?;
        for (s, range, ms) in &self.worst_sections {
            outln!("  section {s:>5} (uids {range}): {ms:.0} ms")?;
        }
        for f in &self.faults {
            let applied = if f.applied { "" } else { " (NOT APPLIED)" };
            outln!(
                "fault at {:>7.1} s  {:?}: {}{applied}\n    longest outage after it {:.0} ms; largest section jump across it {} (step {})",
                f.fault.at.as_secs_f64(),
                f.fault.action,
                f.outcome,
                f.recovery_ms,
                f.section_skip_max,
                self.step
            )?;
        }
        outln!(
            "skipped      {} numbers (largest gap for one uid: {})",
            self.skipped,
            self.skipped_max_per_uid
        )
    }
}
