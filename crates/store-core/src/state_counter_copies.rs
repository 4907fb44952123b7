//! How declared counters reach a set that starts serving their sections
//! without their owner's writes: a range move copies them from the source
//! before the install (`Command::CopyCounters`), a restore lands the
//! backup's before the sections (`Command::RestoreCounters`). Either way
//! the records are in place before any AllocSvr of this set can take a
//! section over and read them (docs/counters.md, Moves and backups): a
//! section gets an owner only once it is served here, and both commands
//! leave served sections alone.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Included, Unbounded};
use std::ops::Range;

use seqsvr_core::directory::sections_of;
use seqsvr_core::{name_key, CounterDecl, Place, SectionId, SetCall, SetKind};

use super::{Dirty, SetState};
use crate::command::{Outcome, Rejection, Reply};
use crate::counters::{CounterRecord, MAX_COUNTERS};

/// Declarations by name, each with the section of its position here.
type Checked = BTreeMap<Vec<u8>, CounterRecord>;

impl SetState {
    /// See [`crate::command::Command::CopyCounters`].
    pub(super) fn copy_counters(
        &mut self,
        call: &SetCall,
        after: &[u8],
        through: Option<&[u8]>,
        counters: &[(Vec<u8>, CounterDecl)],
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let spec = self.spec()?;
        let into_here = matches!(call.kind, SetKind::Move { to, .. } if to == spec.set_id);
        if !into_here {
            return Err(self.refuse(format!(
                "{call} copies declarations only into the set it moves to"
            )));
        }
        let ours = sections_of(spec, call.begin, call.end)
            .map_err(|e| Rejection::Invalid(format!("{call}: {e}")))?;
        self.check_call(ours.start, ours.len(), call)?;
        if through.is_some_and(|t| t <= after) {
            return Err(Rejection::Invalid(
                "a copy's last name must come after its first bound".into(),
            ));
        }
        let given = self.checked_records(counters, &ours)?;
        if let Some((n, _)) = (given.iter())
            .find(|(n, _)| n.as_slice() <= after || through.is_some_and(|t| n.as_slice() > t))
        {
            return Err(Rejection::Invalid(format!(
                "the name {:?} lies outside the copy's bounds",
                String::from_utf8_lossy(n)
            )));
        }
        // The records of the bounds' names in sections not served here: a
        // record the source does not list was left by an earlier move out
        // of this set and is stale (the source's are the newest).
        let from = if after.is_empty() {
            Unbounded
        } else {
            Excluded(after.to_vec())
        };
        let to = through.map_or(Unbounded, |t| Included(t.to_vec()));
        let stale: Vec<Vec<u8>> = (self.counters.by_name.range((from, to)))
            .filter(|(n, r)| {
                ours.contains(&r.section) && !self.served(r.section) && !given.contains_key(*n)
            })
            .map(|(n, _)| n.clone())
            .collect();
        let fresh: Checked = (given.into_iter())
            .filter(|(_, r)| !self.served(r.section))
            .collect();
        self.replace_records(stale, fresh, dirty)
    }

    /// See [`crate::command::Command::RestoreCounters`].
    pub(super) fn restore_counters(
        &mut self,
        counters: &[(Vec<u8>, CounterDecl)],
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let all = 0..self.spec()?.section_count();
        let given = self.checked_records(counters, &all)?;
        let fresh = (given.into_iter())
            .filter(|(_, r)| self.pristine(r.section))
            .collect();
        self.replace_records(Vec::new(), fresh, dirty)
    }

    /// Whether this set serves `section` (an AllocSvr may own it).
    fn served(&self, section: SectionId) -> bool {
        self.placement.place_of(section) == Place::Serving
    }

    /// `counters` as records, each name's section computed here (a set's
    /// own numbering), all refused if one is not a name, lies outside
    /// `sections`, is listed twice or declares rules its floor breaks.
    fn checked_records(
        &self,
        counters: &[(Vec<u8>, CounterDecl)],
        sections: &Range<SectionId>,
    ) -> Result<Checked, Rejection> {
        let spec = self.spec()?;
        let mut out = Checked::new();
        for (name, decl) in counters {
            let shown = String::from_utf8_lossy(name);
            let key = name_key(name).map_err(|e| Rejection::Invalid(e.to_string()))?;
            let section = (spec.section_of(key))
                .filter(|s| sections.contains(s))
                .ok_or_else(|| {
                    Rejection::Invalid(format!(
                        "the name {shown:?} (position {key}) is not in sections {}..{}",
                        sections.start, sections.end
                    ))
                })?;
            if let Some(r) = decl.rules {
                r.validate(decl.floor)
                    .map_err(|e| Rejection::Invalid(format!("{shown:?}: {e}")))?;
            }
            let rec = CounterRecord {
                section,
                decl: *decl,
            };
            if out.insert(name.clone(), rec).is_some() {
                return Err(Rejection::Invalid(format!(
                    "the name {shown:?} is listed twice"
                )));
            }
        }
        Ok(out)
    }

    /// Drops `stale` and writes `fresh`, marking what changed; refused,
    /// changing nothing, past [`MAX_COUNTERS`].
    fn replace_records(
        &mut self,
        stale: Vec<Vec<u8>>,
        fresh: Checked,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let added = (fresh.keys())
            .filter(|n| !self.counters.by_name.contains_key(*n))
            .count();
        if self.counters.by_name.len() - stale.len() + added > MAX_COUNTERS {
            return Err(Rejection::Invalid(format!(
                "at most {MAX_COUNTERS} counters in a set"
            )));
        }
        let mut changed = BTreeSet::new();
        for name in stale {
            self.counters.by_name.remove(&name);
            changed.insert(name);
        }
        for (name, rec) in fresh {
            if self.counters.by_name.get(&name) != Some(&rec) {
                self.counters.by_name.insert(name.clone(), rec);
                changed.insert(name);
            }
        }
        let newly = changed.len() as u32;
        dirty.extend(changed.into_iter().map(Dirty::Counter));
        Ok(Reply::CountersCopied { newly })
    }
}
