//! Backups and the restore that can never go backwards
//! (docs/operations.md, Backup and disaster recovery).
//!
//! A backup is the leader's state at one log position, taken after a
//! linearizable barrier, so it holds every ceiling acknowledged before it
//! was asked for. A file is a short text header (readable with `head`)
//! and the encoded [`SetState`]:
//!
//! ```text
//! seqsvr-backup
//! format 2
//! set 0
//! log_index 1234
//! log_term 3
//! leader_time_unix_ms 1767225600000
//! sections 100
//! counters 12
//!
//! <codec-encoded (SetState, Counters)>
//! ```
//!
//! Format 2 carries the declared counters (docs/counters.md), which the
//! state's own encoding leaves out (the store keeps them as records of
//! their own); format 1, written before, has no `counters` line and
//! encodes the state alone. Both are read; a format-1 backup restores no
//! declarations.
//!
//! A backup is old the moment it is written: the group went on raising
//! ceilings. Restoring it as it is would hand out again every number given
//! out since (promise 1). A [`RestorePlan`] therefore raises every ceiling
//! by a safety margin the operator states, either in numbers or as the
//! fastest rate any section's ceiling grows, times the backup's age; no
//! plan exists without one ([`RestoreError::MissingMargin`]).

use seqsvr_core::mover::COUNTERS_PER_CALL;
use seqsvr_core::{codec, LeaseTerms, Place, SectionId, SetId, MAX_SECTIONS_PER_CALL};

use crate::command::Command;
use crate::counters::Counters;
use crate::state::SetState;

/// The first line of every backup file.
pub const MAGIC: &str = "seqsvr-backup";

/// The header format this version writes (it reads this one and
/// [`FORMAT_STATE_ONLY`]).
pub const FORMAT: u32 = 2;

/// The format written before backups carried declared counters.
pub const FORMAT_STATE_ONLY: u32 = 1;

/// What a backup says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupHeader {
    /// The header format ([`FORMAT`]).
    pub format: u32,
    /// The set whose group was backed up.
    pub set_id: SetId,
    /// The last log index the state covers.
    pub log_index: u64,
    /// That entry's term.
    pub log_term: u64,
    /// The leader's wall clock when it took the state, in ms since the
    /// Unix epoch: where the backup's age counts from.
    pub leader_time_unix_ms: u64,
    /// Sections in the state.
    pub sections: u32,
    /// Declared counters (and tombstones) in the backup (0 in format 1,
    /// which carries none).
    pub counters: u32,
}

/// A backup: its header and the state it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// The header.
    pub header: BackupHeader,
    /// The group's state at `header.log_index`, its declared counters
    /// included.
    pub state: SetState,
}

/// Why a backup could not be read or restored. Every refusal changes
/// nothing (promise 5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// The file is not a backup of a format this version reads.
    #[error("not a seqsvr backup: {0}")]
    Format(String),
    /// No safety margin was stated.
    #[error(
        "a restore needs a safety margin: give --margin N (numbers added to every ceiling) or \
         --raise-rate R (the fastest any section's ceiling grows, numbers per second; the margin \
         is then R times the backup's age plus one step)"
    )]
    MissingMargin,
    /// Both forms of the margin were stated.
    #[error("give --margin or --raise-rate, not both")]
    BothMargins,
    /// The margin is below one step.
    #[error(
        "a margin of {margin} is below one step ({step}): a raise acknowledged as the backup \
         was taken may already be above the backup's ceiling"
    )]
    MarginTooSmall {
        /// The margin stated or derived.
        margin: u64,
        /// The set's step.
        step: u64,
    },
    /// A raised ceiling would not fit in 64 bits.
    #[error("section {section}: ceiling {ceiling} plus margin {margin} overflows")]
    Overflow {
        /// The section.
        section: SectionId,
        /// Its backed-up ceiling.
        ceiling: u64,
        /// The margin.
        margin: u64,
    },
}

impl Backup {
    /// A backup of `state` at log id (`log_index`, `log_term`), taken at
    /// `leader_time_unix_ms` on the leader's clock.
    pub fn new(state: SetState, log_index: u64, log_term: u64, leader_time_unix_ms: u64) -> Self {
        let header = BackupHeader {
            format: FORMAT,
            set_id: state.set.as_ref().map_or(0, |s| s.set_id),
            log_index,
            log_term,
            leader_time_unix_ms,
            sections: state.sections.len() as u32,
            counters: state.counters.by_name.len() as u32,
        };
        Backup { header, state }
    }

    /// The file's bytes in [`FORMAT`]: header, blank line, the encoded
    /// state and declared counters.
    pub fn encode(&self) -> Result<Vec<u8>, RestoreError> {
        let h = &self.header;
        let mut out = format!(
            "{MAGIC}\nformat {FORMAT}\nset {}\nlog_index {}\nlog_term {}\nleader_time_unix_ms {}\n\
             sections {}\ncounters {}\n\n",
            h.set_id,
            h.log_index,
            h.log_term,
            h.leader_time_unix_ms,
            h.sections,
            self.state.counters.by_name.len()
        )
        .into_bytes();
        let body = codec::encode(&(&self.state, &self.state.counters))
            .map_err(|e| RestoreError::Format(e.to_string()))?;
        out.extend(body);
        Ok(out)
    }

    /// Reads a backup file's bytes; refuses anything else.
    pub fn decode(bytes: &[u8]) -> Result<Backup, RestoreError> {
        let bad = |m: String| RestoreError::Format(m);
        let end = bytes
            .windows(2)
            .position(|w| w == b"\n\n")
            .ok_or_else(|| bad("no header".into()))?;
        let head = std::str::from_utf8(&bytes[..end]).map_err(|_| bad("no header".into()))?;
        let mut lines = head.lines();
        if lines.next() != Some(MAGIC) {
            return Err(bad(format!("the first line is not {MAGIC:?}")));
        }
        let mut field = |name: &str| -> Result<u64, RestoreError> {
            let line = lines.next().unwrap_or_default();
            let value = line
                .strip_prefix(name)
                .and_then(|v| v.strip_prefix(' '))
                .ok_or_else(|| bad(format!("expected {name:?}, found {line:?}")))?;
            value
                .parse()
                .map_err(|_| bad(format!("{name} {value:?} is not a number")))
        };
        let format = field("format")?;
        if format != u64::from(FORMAT) && format != u64::from(FORMAT_STATE_ONLY) {
            return Err(bad(format!(
                "format {format}; this version reads formats {FORMAT_STATE_ONLY} and {FORMAT}"
            )));
        }
        let mut header = BackupHeader {
            format: format as u32,
            set_id: field("set")? as SetId,
            log_index: field("log_index")?,
            log_term: field("log_term")?,
            leader_time_unix_ms: field("leader_time_unix_ms")?,
            sections: field("sections")? as u32,
            counters: 0,
        };
        let body = &bytes[end + 2..];
        let state = if header.format == FORMAT_STATE_ONLY {
            codec::decode("backup", body).map_err(|e| bad(e.to_string()))?
        } else {
            header.counters = field("counters")? as u32;
            let (mut state, counters): (SetState, Counters) =
                codec::decode("backup", body).map_err(|e| bad(e.to_string()))?;
            if counters.by_name.len() != header.counters as usize {
                return Err(bad(format!(
                    "the header says {} declared counters, the backup holds {}",
                    header.counters,
                    counters.by_name.len()
                )));
            }
            state.counters = counters;
            state
        };
        let spec = state
            .set
            .as_ref()
            .ok_or_else(|| bad("the state has no set".into()))?;
        if spec.set_id != header.set_id || state.sections.len() != header.sections as usize {
            return Err(bad(format!(
                "the header says set {} with {} sections, the state holds set {} with {}",
                header.set_id,
                header.sections,
                spec.set_id,
                state.sections.len()
            )));
        }
        Ok(Backup { header, state })
    }

    /// The backup's age at `now_unix_ms`, in ms (0 if the leader's clock
    /// was ahead).
    pub fn age_ms(&self, now_unix_ms: u64) -> u64 {
        now_unix_ms.saturating_sub(self.header.leader_time_unix_ms)
    }
}

/// A margin as the operator states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarginArgs {
    /// Numbers added to every ceiling.
    pub margin: Option<u64>,
    /// The fastest any section's ceiling grows, numbers per second.
    pub raise_rate: Option<u64>,
}

/// How a backup is restored: the backup and the margin every ceiling is
/// raised by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorePlan {
    /// The backup.
    pub backup: Backup,
    /// Numbers added to every ceiling.
    pub margin: u64,
}

impl RestorePlan {
    /// A plan for `backup` with the margin `args` state, at `now_unix_ms`
    /// (the age a `raise_rate` is multiplied by). The margin must be at
    /// least one step, and no raised ceiling may overflow.
    pub fn new(
        backup: Backup,
        args: MarginArgs,
        now_unix_ms: u64,
    ) -> Result<RestorePlan, RestoreError> {
        let spec = backup
            .state
            .set
            .clone()
            .expect("decoded backups hold a set");
        let margin = match (args.margin, args.raise_rate) {
            (None, None) => return Err(RestoreError::MissingMargin),
            (Some(_), Some(_)) => return Err(RestoreError::BothMargins),
            (Some(m), None) => m,
            (None, Some(rate)) => derived_margin(rate, backup.age_ms(now_unix_ms), spec.step),
        };
        if margin < spec.step {
            return Err(RestoreError::MarginTooSmall {
                margin,
                step: spec.step,
            });
        }
        for (s, r) in backup.state.sections.iter().enumerate() {
            if r.max_seq.checked_add(margin).is_none() {
                return Err(RestoreError::Overflow {
                    section: s as SectionId,
                    ceiling: r.max_seq,
                    margin,
                });
            }
        }
        Ok(RestorePlan { backup, margin })
    }

    /// The commands still to write for `state` (the group's state now):
    /// `RestoreSet` while no set is stored, then `RestoreCounters` for the
    /// backup's declared counters whose section is still pristine and
    /// that are not in place yet, then `RestoreSections` for the pieces
    /// that hold a pristine section the backup had a place for. The
    /// declarations come first, so a section is never served (and so never
    /// taken over, which reads its declarations) without them. Empty once
    /// everything has landed.
    pub fn commands(&self, state: &SetState) -> Vec<Command> {
        let b = &self.backup.state;
        let spec = b.set.clone().expect("decoded backups hold a set");
        if state.set.is_none() {
            return vec![Command::RestoreSet {
                spec,
                lease: b.lease.terms,
                route_version: b.route_version,
                directory: b.directory.clone(),
            }];
        }
        if state.set.as_ref() != Some(&spec) {
            return Vec::new(); // refused at start: another set is stored
        }
        let n = b.sections.len() as SectionId;
        let mut out = self.counter_commands(state);
        let mut first = 0;
        while first < n {
            let end = (first + MAX_SECTIONS_PER_CALL).min(n);
            let due =
                (first..end).any(|s| state.pristine(s) && b.placement.place_of(s) != Place::Absent);
            if due {
                out.push(self.piece(first, end));
            }
            first = end;
        }
        out
    }

    /// `RestoreCounters` for the backup's declarations not in `state` yet
    /// whose section is still pristine there, a page at a time.
    fn counter_commands(&self, state: &SetState) -> Vec<Command> {
        let due: Vec<_> = (self.backup.state.counters.by_name.iter())
            .filter(|(name, rec)| {
                state.pristine(rec.section) && state.counters.by_name.get(*name) != Some(rec)
            })
            .map(|(name, rec)| (name.clone(), rec.decl))
            .collect();
        (due.chunks(COUNTERS_PER_CALL as usize))
            .map(|page| Command::RestoreCounters {
                counters: page.to_vec(),
            })
            .collect()
    }

    /// `RestoreSections` for sections `first..end`.
    fn piece(&self, first: SectionId, end: SectionId) -> Command {
        let b = &self.backup.state;
        let range = first as usize..end as usize;
        Command::RestoreSections {
            first,
            ceilings: b.sections[range.clone()]
                .iter()
                .map(|r| r.max_seq + self.margin)
                .collect(),
            epochs: b.sections[range]
                .iter()
                .map(|r| r.epoch.saturating_add(1))
                .collect(),
            places: (first..end).map(|s| b.placement.place_of(s)).collect(),
        }
    }

    /// The lease terms the restored group starts with.
    pub fn lease(&self) -> LeaseTerms {
        self.backup.state.lease.terms
    }
}

/// The margin a raise rate gives: `rate` numbers a second over the
/// backup's age (rounded up to a whole second), plus one step for the
/// raise that may have been in flight as the backup was taken.
pub fn derived_margin(rate: u64, age_ms: u64, step: u64) -> u64 {
    rate.saturating_mul(age_ms.div_ceil(1000))
        .saturating_add(step)
}

#[cfg(test)]
#[path = "backup_tests.rs"]
mod tests;
