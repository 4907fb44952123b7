//! How a group seeded from a backup takes in its state
//! (docs/operations.md, Backup and disaster recovery): `RestoreSet` fixes
//! the set with every section absent, then `RestoreSections` lands each
//! section at its raised ceiling in the same write that gives it its
//! place. A section is never served below the ceiling the restore gives
//! it (promise 1 across a disaster): until its chunk lands it is absent,
//! and absent sections get no owner ([`SetState::check_serving`]).

use seqsvr_core::directory::Directory;
use seqsvr_core::{Epoch, LeaseTerms, Place, Placement, SectionId, SetSpec};

use super::{Dirty, LeaseState, SectionRecord, SetState};
use crate::command::{Outcome, Rejection, Reply};

impl SetState {
    /// See [`crate::command::Command::RestoreSet`].
    pub(super) fn restore_set(
        &mut self,
        spec: &SetSpec,
        lease: LeaseTerms,
        route_version: u64,
        directory: &Option<Directory>,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        spec.validate()
            .map_err(|e| Rejection::Invalid(e.to_string()))?;
        lease.validate().map_err(Rejection::Invalid)?;
        match &self.set {
            Some(have) if have == spec => return Ok(Reply::Configured),
            Some(have) => {
                return Err(Rejection::SetMismatch(format!(
                    "stored {have:?}, restoring {spec:?}"
                )))
            }
            None => {}
        }
        self.set = Some(spec.clone());
        self.sections = vec![SectionRecord::default(); spec.section_count() as usize];
        self.placement = Placement::all_absent(spec.section_count());
        self.directory = directory.clone();
        self.lease = LeaseState {
            terms: lease,
            replaced_expiry_ms: 0,
            set: true,
        };
        self.route_version = self.route_version.max(route_version) + 1;
        dirty.extend([
            Dirty::All,
            Dirty::Placement,
            Dirty::Directory,
            Dirty::Lease,
            Dirty::RouteVersion,
        ]);
        Ok(Reply::Configured)
    }

    /// See [`crate::command::Command::RestoreSections`].
    pub(super) fn restore_sections(
        &mut self,
        first: SectionId,
        ceilings: &[u64],
        epochs: &[Epoch],
        places: &[Place],
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        if ceilings.len() != epochs.len() || ceilings.len() != places.len() {
            return Err(Rejection::Invalid(format!(
                "{} ceilings, {} epochs and {} places",
                ceilings.len(),
                epochs.len(),
                places.len()
            )));
        }
        let range = self.check_sections(first, ceilings.len())?;
        let mut placement = self.placement.clone();
        let mut newly = 0u32;
        for (k, i) in range.enumerate() {
            let s = i as SectionId;
            if !self.pristine(s) {
                continue;
            }
            if places[k] != Place::Absent && !placement.set(s..s + 1, places[k]) {
                return Err(Rejection::Invalid(
                    "the restore would split this set's span into too many runs".into(),
                ));
            }
            let r = &mut self.sections[i];
            r.max_seq = ceilings[k];
            r.start = ceilings[k];
            r.epoch = epochs[k];
            r.owner = None;
            r.incarnation = 0;
            dirty.push(Dirty::Section(s));
            newly += 1;
        }
        if newly > 0 {
            self.placement = placement;
            self.route_version += 1;
            dirty.push(Dirty::Placement);
            dirty.push(Dirty::RouteVersion);
        }
        Ok(Reply::Restored {
            newly,
            route_version: self.route_version,
        })
    }

    /// Whether section `s` was never given anything here: absent, no
    /// ceiling, no epoch. Only such a section takes a restored record, so
    /// no restore command can touch a section this group ever served.
    pub fn pristine(&self, s: SectionId) -> bool {
        let r = &self.sections[s as usize];
        self.placement.place_of(s) == Place::Absent
            && r.max_seq == 0
            && r.epoch == 0
            && r.owner.is_none()
    }
}
