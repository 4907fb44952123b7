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
//! format 3
//! set 0
//! log_index 1234
//! log_term 3
//! leader_time_unix_ms 1767225600000
//! sections 100
//! counters 12
//! ids 2
//!
//! <codec-encoded (SetState, Counters, IdSpaces)>
//! ```
//!
//! Format 3 carries the declared counters (docs/counters.md) and the id
//! namespaces (docs/ids.md), which the state's own encoding leaves out
//! (the store keeps them as records of their own). Format 2, written
//! before, has no `ids` line and encodes the state and the counters;
//! format 1 has no `counters` line either and encodes the state alone.
//! All three are read; a format-2 backup restores no id namespaces, a
//! format-1 backup no declarations either.
//!
//! A backup is old the moment it is written: the group went on raising
//! ceilings. Restoring it as it is would hand out again every number given
//! out since (promise 1). A [`RestorePlan`] therefore raises every ceiling
//! by a safety margin the operator states, either in numbers or as the
//! fastest rate any section's ceiling grows, times the backup's age; no
//! plan exists without one ([`RestoreError::MissingMargin`]).
//!
//! Id namespaces get a margin of time instead ([`restored_ids`]): every
//! worker id's ceiling is raised to at least two of its namespace's
//! windows past the restoring leader's clock, above any tick the lost
//! group may have raised a ceiling to since the backup.

use seqsvr_core::mover::COUNTERS_PER_CALL;
use seqsvr_core::{codec, LeaseTerms, Place, SectionId, SetId, MAX_SECTIONS_PER_CALL};

use crate::command::Command;
use crate::counters::Counters;
use crate::ids::{IdSpace, IdSpaces, UNRECORDED};
use crate::state::SetState;

/// The first line of every backup file.
pub const MAGIC: &str = "seqsvr-backup";

/// The header format this version writes (it reads this one,
/// [`FORMAT_NO_IDS`] and [`FORMAT_STATE_ONLY`]).
pub const FORMAT: u32 = 3;

/// The format written before backups carried id namespaces.
pub const FORMAT_NO_IDS: u32 = 2;

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
    /// Id namespaces in the backup (0 in formats 1 and 2, which carry
    /// none).
    pub ids: u32,
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
            ids: state.ids.spaces.len() as u32,
        };
        Backup { header, state }
    }

    /// The file's bytes in [`FORMAT`]: header, blank line, the encoded
    /// state, declared counters and id namespaces.
    pub fn encode(&self) -> Result<Vec<u8>, RestoreError> {
        let h = &self.header;
        let mut out = format!(
            "{MAGIC}\nformat {FORMAT}\nset {}\nlog_index {}\nlog_term {}\nleader_time_unix_ms {}\n\
             sections {}\ncounters {}\nids {}\n\n",
            h.set_id,
            h.log_index,
            h.log_term,
            h.leader_time_unix_ms,
            h.sections,
            self.state.counters.by_name.len(),
            self.state.ids.spaces.len()
        )
        .into_bytes();
        let body = codec::encode(&(&self.state, &self.state.counters, &self.state.ids))
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
        if !(u64::from(FORMAT_STATE_ONLY)..=u64::from(FORMAT)).contains(&format) {
            return Err(bad(format!(
                "format {format}; this version reads formats {FORMAT_STATE_ONLY} to {FORMAT}"
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
            ids: 0,
        };
        if header.format >= FORMAT_NO_IDS {
            header.counters = field("counters")? as u32;
        }
        if header.format >= FORMAT {
            header.ids = field("ids")? as u32;
        }
        let body = &bytes[end + 2..];
        let decoded = |e: seqsvr_core::Error| bad(e.to_string());
        let state = match header.format {
            FORMAT_STATE_ONLY => codec::decode("backup", body).map_err(decoded)?,
            FORMAT_NO_IDS => {
                let (mut state, counters): (SetState, Counters) =
                    codec::decode("backup", body).map_err(decoded)?;
                state.counters = counters;
                state
            }
            _ => {
                let (mut state, counters, ids): (SetState, Counters, IdSpaces) =
                    codec::decode("backup", body).map_err(decoded)?;
                state.counters = counters;
                state.ids = ids;
                state
            }
        };
        let held = (state.counters.by_name.len(), state.ids.spaces.len());
        if held != (header.counters as usize, header.ids as usize) {
            return Err(bad(format!(
                "the header says {} declared counters and {} id namespaces, the backup holds {} \
                 and {}",
                header.counters, header.ids, held.0, held.1
            )));
        }
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
    /// The backup's id namespaces as they land ([`restored_ids`]).
    pub ids: Vec<(String, IdSpace)>,
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
        let ids = restored_ids(&backup.state.ids, now_unix_ms);
        Ok(RestorePlan {
            backup,
            margin,
            ids,
        })
    }

    /// The commands still to write for `state` (the group's state now):
    /// `RestoreIds` for the backup's id namespaces not here yet and
    /// `RestoreSet` while no set is stored (the namespaces first: no
    /// AllocSvr can register, so none can claim a worker id, before the
    /// set is stored), then `RestoreCounters` for the
    /// backup's declared counters whose section is still pristine and
    /// that are not in place yet, then `RestoreSections` for the pieces
    /// that hold a pristine section the backup had a place for. The
    /// declarations come first, so a section is never served (and so never
    /// taken over, which reads its declarations) without them. Empty once
    /// everything has landed.
    pub fn commands(&self, state: &SetState) -> Vec<Command> {
        let b = &self.backup.state;
        let spec = b.set.clone().expect("decoded backups hold a set");
        if state.set.as_ref().is_some_and(|have| *have != spec) {
            return Vec::new(); // refused at start: another set is stored
        }
        let mut out = self.id_commands(state);
        if state.set.is_none() {
            out.push(Command::RestoreSet {
                spec,
                lease: b.lease.terms,
                route_version: b.route_version,
                directory: b.directory.clone(),
            });
            return out;
        }
        let n = b.sections.len() as SectionId;
        out.extend(self.counter_commands(state));
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

    /// `RestoreIds` for the namespaces not in `state` yet, a page at a
    /// time.
    fn id_commands(&self, state: &SetState) -> Vec<Command> {
        let due: Vec<_> = (self.ids.iter())
            .filter(|(name, _)| !state.ids.spaces.contains_key(name))
            .cloned()
            .collect();
        (due.chunks(IDS_PER_CALL))
            .map(|page| Command::RestoreIds {
                spaces: page.to_vec(),
            })
            .collect()
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

/// Most id namespaces one `RestoreIds` lands (each holds at most a
/// worker record per worker id ever claimed).
pub const IDS_PER_CALL: usize = 16;

/// The backup's namespaces `spaces` as a restore at `now_unix_ms` (the
/// restoring leader's clock) lands them: no holder, every epoch one up,
/// and every worker id's ceiling at least two windows past `now`. The lost
/// group raised no ceiling past its holders' clocks plus one window, and
/// those clocks were at most `now` when it was lost, give or take their
/// disagreement with this one, which the second window allows for
/// (docs/operations.md, Backup and disaster recovery). The same holds for
/// every worker id the backup has no record of (the lost group may have
/// claimed it since): an [`UNRECORDED`] record carries that ceiling. A
/// new holder starts at the ceiling plus one, so no id the lost group
/// issued is issued again.
pub fn restored_ids(spaces: &IdSpaces, now_unix_ms: u64) -> Vec<(String, IdSpace)> {
    (spaces.spaces.iter())
        .map(|(name, space)| {
            let l = &space.layout;
            let past = (l.tick_of(now_unix_ms))
                .saturating_add(l.ticks_in(space.window_ms).saturating_mul(2))
                .min(l.max_tick());
            let mut space = space.clone();
            for r in space.workers.values_mut() {
                r.ceiling = r.ceiling.max(past);
                r.epoch = r.epoch.saturating_add(1);
                r.holder = None;
            }
            // Worker ids first claimed after the backup have no record in
            // it: each starts above the same clock.
            let unrecorded = space.workers.entry(UNRECORDED).or_default();
            unrecorded.ceiling = unrecorded.ceiling.max(past);
            (name.clone(), space)
        })
        .collect()
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
