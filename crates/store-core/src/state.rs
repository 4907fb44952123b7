//! The store's state machine logic: ceilings, owners, epochs and routes of
//! one set, and how each [`Command`] changes them.
//!
//! This is pure: no I/O, no clock, no randomness. Every replica applies the
//! same commands in the same order and must reach the same state, so apply
//! may only depend on the state and the command. Persistence lives in
//! the store's `state_machine.rs`, which writes back exactly the records a command
//! [`Dirty`]-marked.

use std::collections::{BTreeMap, BTreeSet};

use seqsvr_core::directory::{DirSet, HOME_SET};
use seqsvr_core::section::RaiseCheck;
use seqsvr_core::{
    AllocId, Directory, Epoch, Incarnation, LeaseTerms, Place, Placement, RouteTable, SectionId,
    SetSpec,
};
use serde::{Deserialize, Serialize};

use crate::command::{Command, Outcome, Rejection, Reply};
use crate::counters::Counters;
use crate::ids::IdSpaces;
use crate::owned::OwnerCounts;

/// Longest alloc id and address accepted (they are stored and replicated).
pub const MAX_NAME_LEN: usize = 256;

pub use seqsvr_core::SectionRecord;

/// The store's raise rule for a [`SectionRecord`]: its refusal is a
/// [`Rejection`], which is the store's to define, so the rule lives here
/// and the record (plain data and its epoch arithmetic) in `seqsvr-core`.
pub trait RaiseRule {
    /// Whether `owner`'s `incarnation` may raise this section (`section`
    /// of a set shaped `spec`) to `to` under `epoch`: fenced by owner,
    /// incarnation and epoch (promise 3), only up and by at most one step
    /// (promises 2 and 4). The epoch is checked before the ceiling, so a
    /// ceiling in a refusal is only ever told to the owner.
    fn check_raise(
        &self,
        spec: &SetSpec,
        section: SectionId,
        owner: &AllocId,
        incarnation: Incarnation,
        epoch: Epoch,
        to: u64,
    ) -> Result<(), Rejection>;
}

impl RaiseRule for SectionRecord {
    fn check_raise(
        &self,
        spec: &SetSpec,
        section: SectionId,
        owner: &AllocId,
        incarnation: Incarnation,
        epoch: Epoch,
        to: u64,
    ) -> Result<(), Rejection> {
        if self.owner.as_ref() != Some(owner) {
            return Err(Rejection::OwnedElsewhere {
                section,
                owner: self.owner.clone().unwrap_or_default(),
            });
        }
        if epoch != self.epoch || self.incarnation != incarnation {
            return Err(Rejection::StaleEpoch {
                section,
                given: epoch,
                current: self.epoch,
            });
        }
        let current = self.max_seq;
        spec.check_raise(current, to).map_err(|e| match e {
            RaiseCheck::NotAbove => Rejection::NotAbove {
                section,
                to,
                current,
            },
            RaiseCheck::TooLarge => Rejection::TooLarge {
                section,
                to,
                current,
            },
        })
    }
}

/// A registered AllocSvr.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocRecord {
    /// Its client-plane `host:port`.
    pub addr: String,
    /// Its peer-plane `host:port`.
    pub peer_addr: String,
    /// Its admin-plane `host:port`.
    pub admin_addr: String,
    /// Being drained: the arbiter routes nothing to it.
    pub draining: bool,
    /// The one process admitted under this id.
    pub incarnation: Incarnation,
    /// Fenced by an operator: its renewals are refused.
    pub fenced: bool,
    /// The route version at which the sections routed to it last changed:
    /// a renewal that already knows it gets no section list (a renewal
    /// costs O(changes), not O(sections)).
    pub sections_version: u64,
}

/// A record that a command changed and that must be written back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dirty {
    /// The set spec and every section (after `ConfigureSet`).
    All,
    /// The route version.
    RouteVersion,
    /// The lease terms.
    Lease,
    /// One section.
    Section(SectionId),
    /// One alloc's record.
    Alloc(AllocId),
    /// The placement of the span (what is served, absent, moved away).
    Placement,
    /// The directory (home group) or its copy (other groups).
    Directory,
    /// One id namespace (its layout and worker records).
    IdSpace(String),
    /// One counter's declaration.
    Counter(Vec<u8>),
}

/// The lease terms in force and the longest expiry any lease still
/// running may have been granted under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseState {
    /// The terms every renewal is granted under now.
    pub terms: LeaseTerms,
    /// `lease + margin` of the terms these replaced (0: none): a new leader
    /// waits for the longer of the two before moving anything, so a
    /// shorter lease cannot cut short one granted under the old terms.
    pub replaced_expiry_ms: u64,
    /// Whether the group's first terms were set. Until then no renewal is
    /// granted, so no lease runs under terms that were never chosen, and
    /// the first terms replace nothing.
    pub set: bool,
}

impl LeaseState {
    /// How long a new leader waits before moving anything.
    pub fn office_wait_ms(&self) -> u64 {
        self.terms.expiry_ms().max(self.replaced_expiry_ms)
    }
}

/// Everything the store knows about its set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetState {
    /// The set, once configured.
    pub set: Option<SetSpec>,
    /// Per section, indexed by section id.
    pub sections: Vec<SectionRecord>,
    /// Registered AllocSvrs.
    pub allocs: BTreeMap<AllocId, AllocRecord>,
    /// Grows whenever a section changes owner or an owner's address changes.
    pub route_version: u64,
    /// The lease terms.
    pub lease: LeaseState,
    /// Which sections of the span this set serves (moves change it).
    pub placement: Placement,
    /// The home group's directory, or a copy of it in other groups.
    pub directory: Option<Directory>,
    /// Sections owned per AllocSvr: derived from `sections`, kept by
    /// [`apply`](Self::apply), never serialized (rebuilt on load and
    /// snapshot install, [`rebuild_derived`](Self::rebuild_derived)).
    #[serde(skip)]
    pub owned: OwnerCounts,
    /// The id namespaces. Kept out of this struct's encoding (which older
    /// snapshots were written in): the store persists them as records of
    /// their own and snapshots carry them beside the state.
    #[serde(skip)]
    pub ids: IdSpaces,
    /// The declared counters (and tombstones), kept out of this struct's
    /// encoding like `ids`: persisted as records of their own, carried
    /// beside the state in snapshots.
    #[serde(skip)]
    pub counters: Counters,
}

impl SetState {
    /// Applies one command, recording what changed in `dirty`. A rejected
    /// command changes nothing.
    pub fn apply(&mut self, cmd: &Command, dirty: &mut Vec<Dirty>) -> Outcome {
        let from = dirty.len();
        let out = self.apply_records(cmd, dirty);
        // The derived counts follow what the command marked.
        let marked = &dirty[from..];
        let sections = &self.sections;
        self.owned.update(
            |i| sections[i].owner.as_ref(),
            sections.len(),
            marked.iter().filter_map(|d| match d {
                Dirty::Section(s) => Some(*s as usize),
                _ => None,
            }),
            marked.contains(&Dirty::All),
        );
        out
    }

    /// Rebuilds the state derived from the records (after a load or a
    /// snapshot install: it is never serialized).
    pub fn rebuild_derived(&mut self) {
        self.owned = OwnerCounts::of_sections(self.sections.iter().map(|r| r.owner.as_ref()));
    }

    /// [`apply`](Self::apply) on the records alone.
    fn apply_records(&mut self, cmd: &Command, dirty: &mut Vec<Dirty>) -> Outcome {
        match cmd {
            Command::ConfigureSet(spec) => self.configure(spec, false, dirty),
            Command::ConfigureAddedSet(spec) => self.configure(spec, true, dirty),
            Command::SetLease(terms) => self.set_lease(*terms, dirty),
            Command::RegisterAlloc {
                alloc,
                addr,
                peer_addr,
                admin_addr,
                incarnation,
                replaces,
            } => self.register(
                alloc,
                [addr, peer_addr, admin_addr],
                *incarnation,
                *replaces,
                dirty,
            ),
            Command::FenceAlloc { alloc, incarnation } => self.fence(alloc, *incarnation, dirty),
            Command::Assign {
                alloc,
                first,
                expected,
            } => self.assign(alloc, *first, expected, dirty),
            Command::TakeOver {
                alloc,
                incarnation,
                first,
                known,
            } => self.take_over(alloc, *incarnation, *first, known, dirty),
            Command::Raise {
                alloc,
                incarnation,
                section,
                epoch,
                to,
            } => self.raise(alloc, *incarnation, *section, *epoch, *to, dirty),
            Command::Handoff {
                from,
                incarnation,
                to,
                section,
                epoch,
            } => self.handoff(from, *incarnation, to, *section, *epoch, dirty),
            Command::SetDraining { alloc, draining } => self.set_draining(alloc, *draining, dirty),
            Command::LegacyFreeze {
                first,
                count,
                to,
                move_id,
            } => self.freeze(*first, *count, *to, *move_id, dirty),
            Command::LegacyInstall {
                first,
                floors,
                move_id,
            } => self.install(*first, floors, Some(*move_id), dirty),
            Command::Directory(change) => self.change_directory(change, dirty),
            Command::CopyDirectory(copy) => self.copy_directory(copy, dirty),
            Command::Freeze { first, count, call } => {
                self.checked_freeze(*first, *count, call, dirty)
            }
            Command::Install {
                first,
                floors,
                call,
            } => self.checked_install(*first, floors, call, dirty),
            Command::RetireAlloc { alloc, incarnation } => self.retire(alloc, *incarnation, dirty),
            Command::StopAlloc { alloc, incarnation } => {
                self.stop_alloc(alloc, *incarnation, dirty)
            }
            Command::RestoreSet {
                spec,
                lease,
                route_version,
                directory,
            } => self.restore_set(spec, *lease, *route_version, directory, dirty),
            Command::RestoreSections {
                first,
                ceilings,
                epochs,
                places,
            } => self.restore_sections(*first, ceilings, epochs, places, dirty),
            Command::CreateIdSpace {
                name,
                layout,
                window_ms,
            } => self.create_id_space(name, layout, *window_ms, dirty),
            Command::ClaimWorker {
                ns,
                alloc,
                incarnation,
                now,
                reclaim,
            } => self.claim_worker(ns, alloc, *incarnation, *now, reclaim, dirty),
            Command::RaiseWorker {
                ns,
                worker,
                alloc,
                incarnation,
                epoch,
                to,
            } => self.raise_worker(ns, *worker, alloc, *incarnation, *epoch, *to, dirty),
            Command::ReleaseWorker {
                ns,
                worker,
                alloc,
                incarnation,
                epoch,
            } => self.release_worker(ns, *worker, alloc, *incarnation, *epoch, dirty),
            Command::Counter {
                alloc,
                incarnation,
                section,
                epoch,
                name,
                op,
                handed_out,
            } => {
                let owner = (alloc, *incarnation, *section, *epoch);
                self.counter(owner, name, op, *handed_out, dirty)
            }
            Command::CopyCounters {
                call,
                after,
                through,
                counters,
            } => self.copy_counters(call, after, through.as_deref(), counters, dirty),
            Command::RestoreCounters { counters } => self.restore_counters(counters, dirty),
            Command::RestoreIds { spaces } => self.restore_ids(spaces, dirty),
        }
    }

    pub(crate) fn spec(&self) -> Result<&SetSpec, Rejection> {
        self.set.as_ref().ok_or(Rejection::NotConfigured)
    }

    fn configure(&mut self, spec: &SetSpec, added: bool, dirty: &mut Vec<Dirty>) -> Outcome {
        spec.validate()
            .map_err(|e| Rejection::Invalid(e.to_string()))?;
        match &self.set {
            Some(have) if have == spec => Ok(Reply::Configured),
            Some(have) => Err(Rejection::SetMismatch(format!(
                "stored {have:?}, given {spec:?}"
            ))),
            None => {
                self.set = Some(spec.clone());
                self.sections = vec![SectionRecord::default(); spec.section_count() as usize];
                dirty.push(Dirty::All);
                // A set added to a running cluster serves nothing until it
                // is installed; otherwise the set serves its span, and set
                // 0 starts the directory (docs/architecture/sets.md).
                if added {
                    self.placement = Placement::all_absent(spec.section_count());
                } else if spec.set_id == HOME_SET {
                    self.directory = Some(Directory::new(DirSet {
                        spec: spec.clone(),
                        stores: Vec::new(),
                        admin: Vec::new(),
                    }));
                }
                dirty.push(Dirty::Placement);
                dirty.push(Dirty::Directory);
                Ok(Reply::Configured)
            }
        }
    }

    fn set_lease(&mut self, terms: LeaseTerms, dirty: &mut Vec<Dirty>) -> Outcome {
        terms.validate().map_err(Rejection::Invalid)?;
        if !self.lease.set {
            self.lease = LeaseState {
                terms,
                replaced_expiry_ms: 0,
                set: true,
            };
            dirty.push(Dirty::Lease);
        } else if self.lease.terms != terms {
            self.lease = LeaseState {
                replaced_expiry_ms: self.lease.terms.expiry_ms(),
                terms,
                set: true,
            };
            dirty.push(Dirty::Lease);
        }
        Ok(Reply::Leased(self.lease.terms))
    }

    /// The sections routed to `alloc`, in order (a renewal lists them).
    pub fn owned_by<'a>(&'a self, alloc: &'a str) -> impl Iterator<Item = SectionId> + 'a {
        (self.sections.iter().enumerate())
            .filter(move |(_, r)| r.owner.as_deref() == Some(alloc))
            .map(|(i, _)| i as SectionId)
    }

    pub(crate) fn check_sections(
        &self,
        first: SectionId,
        count: usize,
    ) -> Result<std::ops::Range<usize>, Rejection> {
        let n = self.spec()?.section_count();
        if count == 0 {
            return Err(Rejection::Invalid("count must be at least 1".into()));
        }
        let last = first as u64 + count as u64 - 1;
        if last >= n as u64 {
            return Err(Rejection::UnknownSection {
                section: last.min(u32::MAX as u64) as SectionId,
                count: n,
            });
        }
        Ok(first as usize..first as usize + count)
    }

    pub(crate) fn check_step(&self, range: std::ops::Range<usize>) -> Result<u64, Rejection> {
        let step = self.spec()?.step;
        if let Some(i) = range
            .clone()
            .find(|&i| self.sections[i].max_seq.checked_add(step).is_none())
        {
            return Err(Rejection::TooLarge {
                section: i as SectionId,
                to: u64::MAX,
                current: self.sections[i].max_seq,
            });
        }
        Ok(step)
    }

    /// Routes sections to `alloc` if each still has the expected epoch; a
    /// section changing hands gets a new epoch so its previous owner's
    /// raises are refused from now on (promise 3).
    fn assign(
        &mut self,
        alloc: &AllocId,
        first: SectionId,
        expected: &[Epoch],
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let range = self.check_sections(first, expected.len())?;
        self.check_serving(&range)?;
        if !self.allocs.contains_key(alloc) {
            return Err(Rejection::NotRegistered {
                alloc: alloc.clone(),
            });
        }
        check_epochs(&self.sections[range.clone()], first, expected)?;
        let mut moved = BTreeSet::new();
        for i in range {
            let r = &mut self.sections[i];
            if r.owner.as_ref() != Some(alloc) {
                if let Some(old) = r.owner.replace(alloc.clone()) {
                    moved.insert(old);
                }
                moved.insert(alloc.clone());
                r.epoch += 1;
                r.incarnation = 0;
                dirty.push(Dirty::Section(i as SectionId));
            }
        }
        self.routes_changed(moved, dirty);
        Ok(Reply::Assigned {
            route_version: self.route_version,
        })
    }

    /// See [`Command::TakeOver`].
    fn take_over(
        &mut self,
        alloc: &AllocId,
        incarnation: Incarnation,
        first: SectionId,
        known: &[Epoch],
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let range = self.check_sections(first, known.len())?;
        self.check_serving(&range)?;
        self.check_incarnation(alloc, incarnation)?;
        if let Some(i) = range
            .clone()
            .find(|&i| self.sections[i].owner.as_ref().is_some_and(|o| o != alloc))
        {
            return Err(Rejection::OwnedElsewhere {
                section: i as SectionId,
                owner: self.sections[i].owner.clone().unwrap_or_default(),
            });
        }
        let step = self.check_step(range.clone())?;
        let mut moved = BTreeSet::new();
        let mut grants = Vec::with_capacity(known.len());
        for (i, &k) in range.zip(known) {
            let r = &mut self.sections[i];
            let routed_here = r.owner.as_ref() == Some(alloc);
            if r.claim(alloc, incarnation, k, step) {
                if !routed_here {
                    moved.insert(alloc.clone());
                }
                dirty.push(Dirty::Section(i as SectionId));
            }
            grants.push(r.grant(i as SectionId));
        }
        self.routes_changed(moved, dirty);
        Ok(Reply::TakenOver {
            grants,
            route_version: self.route_version,
        })
    }

    /// See [`Command::Handoff`]: conditional on the releasing owner's
    /// incarnation and epoch, so a forged, repeated or late handoff cannot
    /// move a section its owner still serves.
    fn handoff(
        &mut self,
        from: &AllocId,
        incarnation: Incarnation,
        to: &AllocId,
        section: SectionId,
        epoch: Epoch,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let range = self.check_sections(section, 1)?;
        self.check_serving(&range)?;
        self.check_incarnation(from, incarnation)?;
        let r = &self.sections[section as usize];
        if r.owner.as_ref() != Some(from) || r.incarnation != incarnation {
            return Err(Rejection::OwnedElsewhere {
                section,
                owner: r.owner.clone().unwrap_or_default(),
            });
        }
        check_epochs(&self.sections[range.clone()], section, &[epoch])?;
        if from == to {
            return Err(Rejection::Invalid("handoff to the current owner".into()));
        }
        let target = self
            .allocs
            .get(to)
            .ok_or_else(|| Rejection::NotRegistered { alloc: to.clone() })?;
        if target.fenced || target.draining {
            return Err(Rejection::Invalid(format!(
                "alloc {to:?} is fenced or draining"
            )));
        }
        let to_incarnation = target.incarnation;
        let step = self.check_step(range)?;
        let r = &mut self.sections[section as usize];
        r.begin(to, to_incarnation, step);
        let grant = r.grant(section);
        dirty.push(Dirty::Section(section));
        self.routes_changed(BTreeSet::from([from.clone(), to.clone()]), dirty);
        Ok(Reply::HandedOff {
            grant,
            route_version: self.route_version,
        })
    }

    fn set_draining(&mut self, alloc: &AllocId, draining: bool, dirty: &mut Vec<Dirty>) -> Outcome {
        let a = self.registered_mut(alloc)?;
        if a.draining != draining {
            a.draining = draining;
            dirty.push(Dirty::Alloc(alloc.clone()));
        }
        Ok(Reply::Registered {
            route_version: self.route_version,
        })
    }

    /// A raise is fenced by owner, incarnation and epoch (promise 3) and may
    /// only move the ceiling up, by at most one step (promises 2 and 4).
    fn raise(
        &mut self,
        alloc: &AllocId,
        incarnation: Incarnation,
        section: SectionId,
        epoch: Epoch,
        to: u64,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let range = self.check_sections(section, 1)?;
        self.check_serving(&range)?;
        let spec = self.spec()?.clone();
        self.check_incarnation(alloc, incarnation)?;
        let r = &mut self.sections[section as usize];
        r.check_raise(&spec, section, alloc, incarnation, epoch, to)?;
        r.max_seq = to;
        dirty.push(Dirty::Section(section));
        Ok(Reply::Raised { max_seq: to })
    }

    /// After sections changed owners: a new route version, which is also
    /// the new `sections_version` of every AllocSvr that gained or lost one.
    pub(crate) fn routes_changed(&mut self, allocs: BTreeSet<AllocId>, dirty: &mut Vec<Dirty>) {
        if allocs.is_empty() {
            return;
        }
        self.route_version += 1;
        dirty.push(Dirty::RouteVersion);
        for a in allocs {
            if let Some(rec) = self.allocs.get_mut(&a) {
                rec.sections_version = self.route_version;
                dirty.push(Dirty::Alloc(a));
            }
        }
    }

    /// The route table as clients see it.
    pub fn route_table(&self) -> Option<RouteTable> {
        let set = self.set.clone()?;
        let mut t = RouteTable::from_owners(
            self.route_version,
            set,
            self.sections.iter().map(|r| r.owner.as_ref()),
            |id| {
                self.allocs
                    .get(id)
                    .map(|a| a.addr.clone())
                    .unwrap_or_default()
            },
        );
        t.placement = self.placement.clone();
        t.directory = self.directory.clone();
        Some(t)
    }
}

#[path = "state_allocs.rs"]
mod allocs;
#[path = "state_sets.rs"]
mod sets;

#[path = "state_counter_copies.rs"]
mod counter_copies;
#[path = "state_counters.rs"]
mod counters;
#[path = "state_ids.rs"]
mod ids;
#[path = "state_restore.rs"]
mod restore;

/// Refuses unless every section still has the epoch the caller decided on.
fn check_epochs(
    records: &[SectionRecord],
    first: SectionId,
    expected: &[Epoch],
) -> Result<(), Rejection> {
    for (i, (r, &e)) in records.iter().zip(expected).enumerate() {
        if r.epoch != e {
            return Err(Rejection::StaleEpoch {
                section: first + i as SectionId,
                given: e,
                current: r.epoch,
            });
        }
    }
    Ok(())
}

fn check_name(what: &str, s: &str) -> Result<(), Rejection> {
    if s.is_empty() || s.len() > MAX_NAME_LEN || s.chars().any(char::is_control) {
        return Err(Rejection::Invalid(format!(
            "{what} must be 1..={MAX_NAME_LEN} printable characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
#[path = "state_tests.rs"]
pub(crate) mod tests;
