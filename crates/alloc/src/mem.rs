//! [`MemCeilingStore`]: a [`CeilingStore`] kept in memory, with the store's
//! semantics — the store's own rules for one section
//! ([`SectionRecord::claim`], [`RaiseRule::check_raise`]: epochs fenced
//! by incarnation, step-sized take-overs, prepared grants returned
//! unchanged to the incarnation they were made for, raise checks) — and
//! injectable faults. For tests, benchmarks and single-process
//! experiments; it is not durable, so it must never back a real AllocSvr.
//!
//! The one thing it leaves out is routing: anyone may take any section
//! over (the real store refuses sections routed elsewhere), which is what
//! lets a test play a second AllocSvr taking sections away. Every section
//! is owned by one name ([`OWNER`]); processes differ by incarnation.

use std::future::{ready, Future};
use std::sync::{Mutex, MutexGuard};

use seqsvr_core::{AllocId, CounterDecl, Epoch, Incarnation, SectionId, SetSpec};
use seqsvr_store_api::{Error, Rejection};
use seqsvr_store_core::{RaiseRule, SectionRecord};

use crate::ceiling::{CeilingStore, Declared, Grant};
use crate::error::StoreErr;

/// The AllocSvr id every section of a [`MemCeilingStore`] is owned under.
pub const OWNER: &str = "mem";

/// What one section looks like in the store (a [`SectionRecord`] without
/// its owner, which is always [`OWNER`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemSection {
    /// Fencing token: grows at every take-over.
    pub epoch: Epoch,
    /// The ceiling.
    pub max_seq: u64,
    /// The ceiling when the current epoch began (where its holder starts).
    pub start: u64,
    /// The incarnation the current epoch was granted to (0: none).
    pub holder: Incarnation,
}

/// The incarnation [`MemCeilingStore::steal`] hands sections to: a process
/// no allocator is (stand-ins count up from 1).
pub const THIEF: Incarnation = u64::MAX;

/// A failure to inject.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fault {
    /// Everything works.
    #[default]
    None,
    /// Every call fails with `Unavailable` and changes nothing.
    Unavailable,
    /// Writes (raises and take-overs) land, but the reply is lost: the
    /// caller sees `Unavailable` (the outcome-unknown case a real network
    /// produces).
    LoseReplies,
}

impl From<&SectionRecord> for MemSection {
    fn from(r: &SectionRecord) -> Self {
        Self {
            epoch: r.epoch,
            max_seq: r.max_seq,
            start: r.start,
            holder: r.incarnation,
        }
    }
}

/// The state behind the mutex.
#[derive(Debug)]
struct State {
    /// One record per section of the set, as the store keeps it.
    sections: Vec<SectionRecord>,
    /// The failure currently injected.
    fault: Fault,
    /// Raises that landed, for tests that count store writes.
    raises: u64,
    /// Counter declarations by name, with the section of the name's
    /// position (`docs/counters.md`).
    counters: std::collections::BTreeMap<Vec<u8>, (SectionId, CounterDecl)>,
}

/// An in-memory ceiling store for one set.
#[derive(Debug)]
pub struct MemCeilingStore {
    /// The set: its step and raise limits.
    spec: SetSpec,
    /// Sections, fault, counters.
    state: Mutex<State>,
}

impl MemCeilingStore {
    /// A store where every section has epoch 0 and ceiling 0.
    pub fn new(spec: SetSpec) -> Self {
        let sections = vec![SectionRecord::default(); spec.section_count() as usize];
        Self {
            spec,
            state: Mutex::new(State {
                sections,
                fault: Fault::None,
                raises: 0,
                counters: Default::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stored state of `section` (panics if out of range).
    pub fn section(&self, section: SectionId) -> MemSection {
        MemSection::from(&self.lock().sections[section as usize])
    }

    /// Injects `fault` until changed.
    pub fn set_fault(&self, fault: Fault) {
        self.lock().fault = fault;
    }

    /// How many raises have landed.
    pub fn raises(&self) -> u64 {
        self.lock().raises
    }

    /// Records `name`'s declaration (its position in `section`), as the
    /// owner's write would: a take-over of the section reads it, and the
    /// section's ceiling is lifted to at least the floor in the same write
    /// (`docs/architecture/promises.md`, promise 4: an operator's floor).
    pub fn declare(&self, name: &[u8], section: SectionId, decl: CounterDecl) {
        let mut st = self.lock();
        st.counters.insert(name.to_vec(), (section, decl));
        let sec = &mut st.sections[section as usize];
        sec.max_seq = sec.max_seq.max(decl.floor);
    }

    /// Hands `section` to some other AllocSvr (a take-over we do not see):
    /// our epoch becomes stale.
    pub fn steal(&self, section: SectionId) -> Grant {
        self.prepare(section, THIEF)
    }

    /// Hands `section` to `incarnation` (a handoff to it, in one write: new
    /// epoch, ceiling up one step) without it knowing yet: its next
    /// take-over gets this very grant back.
    pub fn prepare(&self, section: SectionId, incarnation: Incarnation) -> Grant {
        let sec = &mut self.lock().sections[section as usize];
        sec.begin(&owner(), incarnation, self.spec.step);
        sec.grant(section)
    }

    fn do_take_over(
        &self,
        incarnation: Incarnation,
        first: SectionId,
        known: &[Epoch],
    ) -> Result<Vec<Grant>, StoreErr> {
        let mut st = self.lock();
        if st.fault == Fault::Unavailable {
            return Err(StoreErr::Unavailable("injected".into()));
        }
        let end = first as u64 + known.len() as u64;
        if known.is_empty() || end > st.sections.len() as u64 {
            return Err(StoreErr::UnknownSection);
        }
        let (step, owner) = (self.spec.step, owner());
        let grants = (first..).zip(known).map(|(s, &k)| {
            let sec = &mut st.sections[s as usize];
            sec.claim(&owner, incarnation, k, step);
            sec.grant(s)
        });
        let grants: Vec<Grant> = grants.collect();
        match st.fault {
            Fault::LoseReplies => Err(StoreErr::Unavailable("reply lost".into())),
            _ => Ok(grants),
        }
    }

    fn do_raise(
        &self,
        incarnation: Incarnation,
        section: SectionId,
        epoch: Epoch,
        to: u64,
    ) -> Result<u64, StoreErr> {
        let mut st = self.lock();
        if st.fault == Fault::Unavailable {
            return Err(StoreErr::Unavailable("injected".into()));
        }
        let sec = st
            .sections
            .get_mut(section as usize)
            .ok_or(StoreErr::UnknownSection)?;
        sec.check_raise(&self.spec, section, &owner(), incarnation, epoch, to)
            .map_err(refused)?;
        sec.max_seq = to;
        st.raises += 1;
        match st.fault {
            Fault::LoseReplies => Err(StoreErr::Unavailable("reply lost".into())),
            _ => Ok(to),
        }
    }
}

/// The owner of every section.
fn owner() -> AllocId {
    OWNER.to_string()
}

/// A refusal as the AllocSvr's store client maps it.
fn refused(r: Rejection) -> StoreErr {
    StoreErr::from(Error::Rejected(r))
}

impl CeilingStore for MemCeilingStore {
    fn take_over(
        &self,
        incarnation: Incarnation,
        first: SectionId,
        known: Vec<Epoch>,
    ) -> impl Future<Output = Result<Vec<Grant>, StoreErr>> + Send {
        ready(self.do_take_over(incarnation, first, &known))
    }

    fn raise(
        &self,
        incarnation: Incarnation,
        section: SectionId,
        epoch: Epoch,
        to: u64,
    ) -> impl Future<Output = Result<u64, StoreErr>> + Send {
        ready(self.do_raise(incarnation, section, epoch, to))
    }

    fn counters(
        &self,
        first: SectionId,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Declared>, StoreErr>> + Send {
        let st = self.lock();
        let end = first as u64 + count as u64;
        let found = (st.counters.iter())
            .filter(|(_, (s, _))| (first as u64..end).contains(&(*s as u64)))
            .map(|(n, &(s, d))| (n.clone(), s, d))
            .collect();
        ready(Ok(found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> MemCeilingStore {
        MemCeilingStore::new(SetSpec {
            set_id: 0,
            uid_begin: 0,
            uid_end: 30,
            section_size: 10,
            step: 10,
        })
    }

    fn g(section: SectionId, epoch: Epoch, prev_ceiling: u64, max_seq: u64) -> Grant {
        Grant {
            section,
            epoch,
            prev_ceiling,
            max_seq,
        }
    }

    #[test]
    fn a_prepared_grant_comes_back_unchanged_to_its_incarnation_only() {
        let st = store();
        assert_eq!(st.prepare(1, 7), g(1, 1, 0, 10));
        // Its incarnation, which never installed it: the same grant.
        assert_eq!(st.do_take_over(7, 1, &[0]), Ok(vec![g(1, 1, 0, 10)]));
        assert_eq!(st.do_take_over(7, 1, &[0]), Ok(vec![g(1, 1, 0, 10)]));
        // Once installed (known = 1): a new epoch, one step up.
        assert_eq!(st.do_take_over(7, 1, &[1]), Ok(vec![g(1, 2, 10, 20)]));
        // Another process with no knowledge never gets another's grant.
        assert_eq!(st.do_take_over(8, 1, &[0]), Ok(vec![g(1, 3, 20, 30)]));
        assert_eq!(st.section(1).holder, 8);
    }

    #[test]
    fn a_lost_take_over_reply_costs_no_extra_step() {
        let st = store();
        st.set_fault(Fault::LoseReplies);
        assert!(st.do_take_over(5, 0, &[0, 0]).is_err());
        assert_eq!(st.section(0).epoch, 1, "landed");
        st.set_fault(Fault::None);
        assert_eq!(
            st.do_take_over(5, 0, &[0, 0]),
            Ok(vec![g(0, 1, 0, 10), g(1, 1, 0, 10)])
        );
    }

    #[test]
    fn raises_are_fenced_by_epoch_and_incarnation() {
        let st = store();
        st.do_take_over(5, 0, &[0]).unwrap();
        assert_eq!(st.do_raise(6, 0, 1, 15), Err(StoreErr::StaleEpoch));
        assert_eq!(st.do_raise(5, 0, 2, 15), Err(StoreErr::StaleEpoch));
        assert_eq!(st.do_raise(5, 0, 1, 15), Ok(15));
        st.steal(0);
        assert_eq!(st.do_raise(5, 0, 1, 20), Err(StoreErr::StaleEpoch));
        assert_eq!(st.do_take_over(5, 3, &[0]), Err(StoreErr::UnknownSection));
    }
}
