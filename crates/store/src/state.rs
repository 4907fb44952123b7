//! The store's state machine logic: ceilings, owners, epochs and routes of
//! one set, and how each [`Command`] changes them.
//!
//! This is pure: no I/O, no clock, no randomness. Every replica applies the
//! same commands in the same order and must reach the same state, so apply
//! may only depend on the state and the command. Persistence lives in
//! [`crate::state_machine`], which writes back exactly the records a command
//! [`Dirty`]-marked.

use std::collections::BTreeMap;

use seqsvr_core::section::RaiseCheck;
use seqsvr_core::{AllocId, Epoch, RouteTable, SectionId, SetSpec};
use serde::{Deserialize, Serialize};

use crate::types::{Command, Grant, Outcome, Rejection, Reply};

/// Longest alloc id and address accepted (they are stored and replicated).
pub const MAX_NAME_LEN: usize = 256;

/// One section's durable record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionRecord {
    /// The ceiling: no number above it has ever been handed out (promise 2).
    pub max_seq: u64,
    /// The fencing token of the current owner (promise 3).
    pub epoch: Epoch,
    /// The current owner, if any.
    pub owner: Option<AllocId>,
}

/// A registered AllocSvr.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocRecord {
    /// Its client-facing `host:port`.
    pub addr: String,
    /// Being drained: the arbiter routes nothing to it.
    pub draining: bool,
}

/// A record that a command changed and that must be written back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dirty {
    /// The set spec and every section (after `ConfigureSet`).
    All,
    /// The route version.
    RouteVersion,
    /// One section.
    Section(SectionId),
    /// One alloc's address.
    Alloc(AllocId),
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
}

impl SetState {
    /// Applies one command, recording what changed in `dirty`. A rejected
    /// command changes nothing.
    pub fn apply(&mut self, cmd: &Command, dirty: &mut Vec<Dirty>) -> Outcome {
        match cmd {
            Command::ConfigureSet(spec) => self.configure(spec, dirty),
            Command::RegisterAlloc { alloc, addr } => self.register(alloc, addr, dirty),
            Command::Assign {
                alloc,
                first,
                count,
            } => self.assign(alloc, *first, *count, dirty),
            Command::TakeOver {
                alloc,
                first,
                count,
            } => self.take_over(alloc, *first, *count, dirty),
            Command::Raise { section, epoch, to } => self.raise(*section, *epoch, *to, dirty),
            Command::Handoff {
                from,
                to,
                first,
                count,
            } => self.handoff(from, to, *first, *count, dirty),
            Command::SetDraining { alloc, draining } => self.set_draining(alloc, *draining, dirty),
        }
    }

    fn spec(&self) -> Result<&SetSpec, Rejection> {
        self.set.as_ref().ok_or(Rejection::NotConfigured)
    }

    fn configure(&mut self, spec: &SetSpec, dirty: &mut Vec<Dirty>) -> Outcome {
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
                Ok(Reply::Configured)
            }
        }
    }

    fn register(&mut self, alloc: &AllocId, addr: &str, dirty: &mut Vec<Dirty>) -> Outcome {
        self.spec()?;
        check_name("alloc id", alloc)?;
        check_name("address", addr)?;
        if self.allocs.get(alloc).map(|a| a.addr.as_str()) != Some(addr) {
            self.allocs.entry(alloc.clone()).or_default().addr = addr.to_string();
            self.route_version += 1;
            dirty.push(Dirty::Alloc(alloc.clone()));
            dirty.push(Dirty::RouteVersion);
        }
        Ok(Reply::Registered {
            route_version: self.route_version,
        })
    }

    fn check_sections(&self, first: SectionId, count: u32) -> Result<(), Rejection> {
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
        Ok(())
    }

    fn require_registered(&self, alloc: &AllocId) -> Result<(), Rejection> {
        if !self.allocs.contains_key(alloc) {
            return Err(Rejection::Invalid(format!(
                "alloc {alloc:?} is not registered"
            )));
        }
        Ok(())
    }

    /// Routes sections to `alloc`; a section changing hands gets a new epoch
    /// so its previous owner's raises are refused from now on (promise 3).
    fn assign(
        &mut self,
        alloc: &AllocId,
        first: SectionId,
        count: u32,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        self.check_sections(first, count)?;
        self.require_registered(alloc)?;
        let mut moved = false;
        for (i, r) in self.sections[first as usize..(first + count) as usize]
            .iter_mut()
            .enumerate()
        {
            if r.owner.as_ref() != Some(alloc) {
                r.owner = Some(alloc.clone());
                r.epoch += 1;
                moved = true;
                dirty.push(Dirty::Section(first + i as u32));
            }
        }
        if moved {
            self.route_version += 1;
            dirty.push(Dirty::RouteVersion);
        }
        Ok(Reply::Assigned {
            route_version: self.route_version,
        })
    }

    /// Take-over = new owner + new epoch + ceiling raised by one step, in one
    /// write; the previous ceiling is where the new owner starts (skip ahead,
    /// promises 1 and 4).
    fn take_over(
        &mut self,
        alloc: &AllocId,
        first: SectionId,
        count: u32,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        self.check_sections(first, count)?;
        self.require_registered(alloc)?;
        let step = self.spec()?.step;
        let range = first as usize..first as usize + count as usize;
        if let Some((i, r)) = self.sections[range.clone()]
            .iter()
            .enumerate()
            .find(|(_, r)| r.owner.as_ref().is_some_and(|o| o != alloc))
        {
            return Err(Rejection::OwnedElsewhere {
                section: first + i as u32,
                owner: r.owner.clone().unwrap_or_default(),
            });
        }
        if let Some((i, _)) = self.sections[range.clone()]
            .iter()
            .enumerate()
            .find(|(_, r)| r.max_seq.checked_add(step).is_none())
        {
            let r = &self.sections[first as usize + i];
            return Err(Rejection::TooLarge {
                section: first + i as u32,
                to: u64::MAX,
                current: r.max_seq,
            });
        }
        let mut moved = false;
        let mut grants = Vec::with_capacity(count as usize);
        for (i, r) in self.sections[range].iter_mut().enumerate() {
            let section = first + i as u32;
            moved |= r.owner.as_ref() != Some(alloc);
            let prev_ceiling = r.max_seq;
            r.max_seq += step;
            r.epoch += 1;
            r.owner = Some(alloc.clone());
            dirty.push(Dirty::Section(section));
            grants.push(Grant {
                section,
                epoch: r.epoch,
                prev_ceiling,
                max_seq: r.max_seq,
            });
        }
        if moved {
            self.route_version += 1;
            dirty.push(Dirty::RouteVersion);
        }
        Ok(Reply::TakenOver {
            grants,
            route_version: self.route_version,
        })
    }

    /// A planned move: `from` has stopped serving the sections and hands
    /// them to `to` in one write (new owner, new epoch, ceiling + step),
    /// so `to` can start at once without waiting for a lease to expire.
    fn handoff(
        &mut self,
        from: &AllocId,
        to: &AllocId,
        first: SectionId,
        count: u32,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        self.check_sections(first, count)?;
        if let Some((i, r)) = self.sections[first as usize..(first + count) as usize]
            .iter()
            .enumerate()
            .find(|(_, r)| r.owner.as_ref() != Some(from))
        {
            return Err(Rejection::OwnedElsewhere {
                section: first + i as u32,
                owner: r.owner.clone().unwrap_or_default(),
            });
        }
        let step = self.spec()?.step;
        let range = first as usize..(first + count) as usize;
        if self.sections[range]
            .iter()
            .any(|r| r.max_seq.checked_add(step).is_none())
        {
            return Err(Rejection::Invalid("ceiling would overflow".into()));
        }
        // Neither step below can fail now, so a refusal changes nothing.
        let mut d = Vec::new();
        self.assign(to, first, count, &mut d)?;
        let out = self.take_over(to, first, count, &mut d)?;
        dirty.extend(d);
        Ok(out)
    }

    fn set_draining(&mut self, alloc: &AllocId, draining: bool, dirty: &mut Vec<Dirty>) -> Outcome {
        self.spec()?;
        let Some(a) = self.allocs.get_mut(alloc) else {
            return Err(Rejection::Invalid(format!(
                "alloc {alloc:?} is not registered"
            )));
        };
        if a.draining != draining {
            a.draining = draining;
            dirty.push(Dirty::Alloc(alloc.clone()));
        }
        Ok(Reply::Registered {
            route_version: self.route_version,
        })
    }

    /// A raise is fenced by the epoch (promise 3) and may only move the
    /// ceiling up, by a bounded amount (promises 2 and 4).
    fn raise(
        &mut self,
        section: SectionId,
        epoch: Epoch,
        to: u64,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        self.check_sections(section, 1)?;
        let spec = self.spec()?.clone();
        let r = &mut self.sections[section as usize];
        if epoch != r.epoch {
            return Err(Rejection::StaleEpoch {
                section,
                given: epoch,
                current: r.epoch,
            });
        }
        let current = r.max_seq;
        match spec.check_raise(current, to) {
            Err(RaiseCheck::NotAbove) => Err(Rejection::NotAbove {
                section,
                to,
                current,
            }),
            Err(RaiseCheck::TooLarge) => Err(Rejection::TooLarge {
                section,
                to,
                current,
            }),
            Ok(()) => {
                r.max_seq = to;
                dirty.push(Dirty::Section(section));
                Ok(Reply::Raised { max_seq: to })
            }
        }
    }

    /// The route table as clients see it.
    pub fn route_table(&self) -> Option<RouteTable> {
        let set = self.set.clone()?;
        Some(RouteTable::from_owners(
            self.route_version,
            set,
            self.sections.iter().map(|r| r.owner.as_ref()),
            |id| {
                self.allocs
                    .get(id)
                    .map(|a| a.addr.clone())
                    .unwrap_or_default()
            },
        ))
    }
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
mod tests;
