//! What a store group does for sets: serving only its placement, freezing
//! sections that move away, installing sections that move in, and the
//! directory (held by the home group, copied everywhere else).
//!
//! The move protocol and why it never repeats a number are in
//! `docs/architecture/sets.md`; the rules each command keeps are cited
//! there by name.

use std::collections::BTreeSet;
use std::ops::Range;

use seqsvr_core::directory::{sections_of, HOME_SET};
use seqsvr_core::{DirChange, Directory, Place, SectionId, SetCall, SetId, SetKind};

use super::{Dirty, SetState};
use crate::command::{Outcome, Rejection, Reply};

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

    /// See [`crate::command::Command::Freeze`]. Idempotent for sections
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

    /// See [`crate::command::Command::Install`]. Idempotent: a section
    /// already served at or above its floor plus a step is left alone.
    /// `move_id` is `None` for a set's addition, which is no move: it
    /// neither checks nor records a move id.
    pub(super) fn install(
        &mut self,
        first: SectionId,
        floors: &[u64],
        move_id: Option<u64>,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let range = self.check_sections(first, floors.len())?;
        if let Some(id) = move_id {
            self.check_move_id(id)?;
        }
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
        let last_move = move_id.map_or(self.placement.last_move, |id| {
            id.max(self.placement.last_move)
        });
        if newly > 0 || last_move > self.placement.last_move {
            self.placement = placement;
            self.placement.last_move = last_move;
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

    /// See [`crate::command::Command::Freeze`]: a freeze checked against the
    /// directory this group holds, then applied as before.
    pub(super) fn checked_freeze(
        &mut self,
        first: SectionId,
        count: u32,
        call: &SetCall,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let SetKind::Move { to, .. } = call.kind else {
            return Err(self.refuse(format!("{call} freezes nothing: only a move does")));
        };
        self.check_call(first, count as usize, call)?;
        self.freeze(first, count, to, call.move_id, dirty)
    }

    /// See [`crate::command::Command::Install`]: an install checked against
    /// the directory this group holds. An addition installs only sections
    /// never served here (`Absent`; those it already installed are left
    /// alone), at one step, and records no move id.
    pub(super) fn checked_install(
        &mut self,
        first: SectionId,
        floors: &[u64],
        call: &SetCall,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        self.check_call(first, floors.len(), call)?;
        match call.kind {
            SetKind::Move { .. } => self.install(first, floors, Some(call.move_id), dirty),
            SetKind::Addition => {
                if let Some(i) = floors.iter().position(|&f| f != 0) {
                    return Err(Rejection::Invalid(format!(
                        "an addition installs at floor 0, not {} (section {})",
                        floors[i],
                        first as usize + i
                    )));
                }
                // A section moved away was served here (or elsewhere, after
                // a move): an addition's "nothing was handed out yet" does
                // not hold for it. Reinstalling it would serve it again at
                // its final ceiling, below what its new set hands out.
                let end = first + floors.len() as SectionId;
                if let Some((s, Place::Moved { to })) = self
                    .placement
                    .runs
                    .iter()
                    .find(|r| r.first < end && first < r.end && r.place != Place::Absent)
                    .map(|r| (r.first.max(first), r.place))
                {
                    return Err(self.refuse(format!(
                        "section {s} was moved to set {to}: {call} installs only sections never served here"
                    )));
                }
                self.install(first, floors, None, dirty)
            }
        }
    }

    /// Refuses a freeze or install that the directory this group holds
    /// (its own in the home group, a copy elsewhere) does not show under
    /// way, that is for another set, or whose sections lie outside the
    /// call's range (docs/architecture/sets.md, Set commands are checked
    /// against the directory). Without it one operator call with an
    /// invented move id, or a repeated addition during a move, un-freezes
    /// sections or blocks every later move.
    pub(super) fn check_call(
        &self,
        first: SectionId,
        count: usize,
        call: &SetCall,
    ) -> Result<(), Rejection> {
        let spec = self.spec()?;
        self.check_sections(first, count)?;
        if call.set != spec.set_id {
            return Err(self.refuse(format!(
                "{call} is for set {}, and this group is set {}",
                call.set, spec.set_id
            )));
        }
        let role_ok = match call.kind {
            SetKind::Addition => true,
            SetKind::Move { from, to } => from != to && (from == call.set || to == call.set),
        };
        if !role_ok {
            return Err(self.refuse(format!("{call} neither leaves nor enters set {}", call.set)));
        }
        let Some(dir) = &self.directory else {
            return Err(self.refuse(format!(
                "this group holds no directory copy yet, so nothing shows {call}: push the copy first"
            )));
        };
        dir.check_call(call).map_err(|e| self.refuse(e))?;
        let ours = sections_of(spec, call.begin, call.end)
            .map_err(|e| Rejection::Invalid(format!("{call}: {e}")))?;
        let end = first as u64 + count as u64;
        if u64::from(first) < u64::from(ours.start) || end > u64::from(ours.end) {
            return Err(Rejection::Invalid(format!(
                "sections {first}..{end} are not all in {call} (sections {}..{} here)",
                ours.start, ours.end
            )));
        }
        Ok(())
    }

    /// A [`Rejection::SetCommand`] judged by the directory held here.
    pub(super) fn refuse(&self, reason: String) -> Rejection {
        Rejection::SetCommand {
            reason,
            directory_version: self.directory.as_ref().map_or(0, |d| d.version),
        }
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
