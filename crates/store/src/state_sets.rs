//! What a store group does for sets: serving only its placement, freezing
//! sections that move away, installing sections that move in, and the
//! directory (held by the home group, copied everywhere else).
//!
//! The move protocol and why it never repeats a number are in
//! `docs/architecture/sets.md`; the rules each command keeps are cited
//! there by name.

use std::collections::BTreeSet;
use std::ops::Range;

use seqsvr_core::directory::HOME_SET;
use seqsvr_core::{DirChange, Directory, Place, SectionId, SetId};

use super::{Dirty, SetState};
use crate::types::{Outcome, Rejection, Reply};

impl SetState {
    /// Refuses unless every section of `range` is served by this set: a
    /// section absent or moved away has no owner here and gets none, so
    /// no AllocSvr of this set can hand out a number for it (promise 1
    /// across moves).
    pub(crate) fn check_serving(&self, range: &Range<usize>) -> Result<(), Rejection> {
        let r = range.start as SectionId..range.end as SectionId;
        match self.placement.first_not_serving(r) {
            None => Ok(()),
            Some((section, place)) => Err(not_serving(section, place)),
        }
    }

    /// See [`crate::types::Command::Freeze`]. Idempotent for sections
    /// already moved to `to`, so a resumed move re-reads the same final
    /// ceilings.
    pub(super) fn freeze(
        &mut self,
        first: SectionId,
        count: u32,
        to: SetId,
        move_id: u64,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let range = self.check_sections(first, count as usize)?;
        self.check_move_id(move_id)?;
        if to == self.spec()?.set_id {
            return Err(Rejection::Invalid("a move to the set itself".into()));
        }
        let moved = seqsvr_core::Place::Moved { to };
        for i in range.clone() {
            match self.placement.place_of(i as SectionId) {
                Place::Serving => {}
                p if p == moved => {}
                p => return Err(not_serving(i as SectionId, p)),
            }
        }
        let mut placement = self.placement.clone();
        if !placement.set(first..first + count, moved) {
            return Err(Rejection::Invalid(
                "the move would split this set's span into too many runs".into(),
            ));
        }
        let mut owners = BTreeSet::new();
        let mut newly = 0;
        let mut finals = Vec::with_capacity(range.len());
        let mut epochs = Vec::with_capacity(range.len());
        for i in range {
            let r = &mut self.sections[i];
            finals.push(r.max_seq);
            if self.placement.place_of(i as SectionId) == Place::Serving {
                // A new epoch with no owner: the old owner's raises and
                // handoffs are refused from now on, and its next renewal
                // no longer lists the section.
                if let Some(o) = r.owner.take() {
                    owners.insert(o);
                }
                r.epoch += 1;
                r.incarnation = 0;
                r.start = r.max_seq;
                newly += 1;
                dirty.push(Dirty::Section(i as SectionId));
            }
            epochs.push(r.epoch);
        }
        if newly > 0 || move_id > self.placement.last_move {
            self.placement = placement;
            self.placement.last_move = move_id;
            dirty.push(Dirty::Placement);
        }
        if newly > 0 {
            // Clients see the frozen sections leave the route table even
            // when no AllocSvr owned them.
            owners.insert(String::new());
        }
        self.routes_changed(owners, dirty);
        Ok(Reply::Frozen {
            finals,
            epochs,
            newly,
            route_version: self.route_version,
        })
    }

    /// See [`crate::types::Command::Install`]. Idempotent: a section
    /// already served at or above its floor plus a step is left alone.
    pub(super) fn install(
        &mut self,
        first: SectionId,
        floors: &[u64],
        move_id: u64,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let range = self.check_sections(first, floors.len())?;
        self.check_move_id(move_id)?;
        let step = self.spec()?.step;
        let mut targets = Vec::with_capacity(floors.len());
        for (i, &floor) in range.clone().zip(floors) {
            let target = floor.checked_add(step).ok_or(Rejection::TooLarge {
                section: i as SectionId,
                to: u64::MAX,
                current: floor,
            })?;
            let r = &self.sections[i];
            if self.placement.place_of(i as SectionId) == Place::Serving && r.max_seq < target {
                // Serving already, below the floor: some number here may
                // be at or below one the source handed out. Refuse rather
                // than guess (nothing installs a serving section).
                return Err(Rejection::Invalid(format!(
                    "section {i} is already served here with ceiling {} below {target}",
                    r.max_seq
                )));
            }
            targets.push(target);
        }
        let mut placement = self.placement.clone();
        if !placement.set(first..first + floors.len() as u32, Place::Serving) {
            return Err(Rejection::Invalid(
                "the install would split this set's span into too many runs".into(),
            ));
        }
        let mut newly = 0;
        for (i, target) in range.zip(targets) {
            if self.placement.place_of(i as SectionId) == Place::Serving {
                continue;
            }
            let r = &mut self.sections[i];
            r.max_seq = r.max_seq.max(target);
            r.start = r.max_seq;
            r.epoch += 1;
            r.owner = None;
            r.incarnation = 0;
            newly += 1;
            dirty.push(Dirty::Section(i as SectionId));
        }
        if newly > 0 || move_id > self.placement.last_move {
            self.placement = placement;
            self.placement.last_move = move_id;
            dirty.push(Dirty::Placement);
        }
        if newly > 0 {
            self.routes_changed(BTreeSet::from([String::new()]), dirty);
        }
        Ok(Reply::Installed {
            newly,
            route_version: self.route_version,
        })
    }

    /// Refuses a freeze or install of a move older than one this group
    /// already applied: a mover that stalled and wakes up after later moves
    /// must not undo them (docs/architecture/sets.md, Crashes and resuming).
    fn check_move_id(&self, move_id: u64) -> Result<(), Rejection> {
        if move_id < self.placement.last_move {
            return Err(Rejection::Directory(format!(
                "move {move_id} is older than move {} this set already applied",
                self.placement.last_move
            )));
        }
        Ok(())
    }

    /// Applies a directory change: the home group only.
    pub(super) fn change_directory(
        &mut self,
        change: &DirChange,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        if self.spec()?.set_id != HOME_SET {
            return Err(Rejection::Directory(format!(
                "set {} does not hold the directory (set {HOME_SET} does)",
                self.spec()?.set_id
            )));
        }
        // On a copy: a refused change leaves the state as it was.
        let mut dir = self.directory.clone().ok_or_else(|| {
            Rejection::Directory("this group holds no directory (it was added to a cluster)".into())
        })?;
        let changed = dir
            .apply(change)
            .map_err(|e| Rejection::Directory(e.to_string()))?;
        let version = dir.version;
        if changed {
            self.directory = Some(dir);
            dirty.push(Dirty::Directory);
        }
        Ok(Reply::Directory { version, changed })
    }

    /// Keeps a copy of the home group's directory if it is newer.
    pub(super) fn copy_directory(&mut self, copy: &Directory, dirty: &mut Vec<Dirty>) -> Outcome {
        let id = self.spec()?.set_id;
        if id == HOME_SET {
            return Err(Rejection::Directory(
                "the home set holds the directory itself; it takes no copy".into(),
            ));
        }
        if !copy.sets.contains_key(&id) {
            return Err(Rejection::Directory(format!(
                "a directory that does not list set {id}"
            )));
        }
        let have = self.directory.as_ref().map_or(0, |d| d.version);
        if copy.version > have {
            self.directory = Some(copy.clone());
            dirty.push(Dirty::Directory);
            return Ok(Reply::Directory {
                version: copy.version,
                changed: true,
            });
        }
        Ok(Reply::Directory {
            version: have,
            changed: false,
        })
    }
}

fn not_serving(section: SectionId, place: Place) -> Rejection {
    Rejection::NotServing {
        section,
        moved_to: match place {
            Place::Moved { to } => Some(to),
            _ => None,
        },
    }
}
