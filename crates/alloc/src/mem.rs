//! [`MemCeilingStore`]: a [`CeilingStore`] kept in memory, with the store's
//! semantics (epochs, step-sized take-overs, raise checks) and injectable
//! faults. For tests, benchmarks and single-process experiments; it is not
//! durable, so it must never back a real AllocSvr.

use std::future::{ready, Future};
use std::sync::{Mutex, MutexGuard};

use seqsvr_core::section::RaiseCheck;
use seqsvr_core::{Epoch, SectionId, SetSpec};

use crate::ceiling::{CeilingStore, Grant};
use crate::error::StoreErr;

/// What one section looks like in the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemSection {
    /// Fencing token: grows at every take-over.
    pub epoch: Epoch,
    /// The ceiling.
    pub max_seq: u64,
}

/// A failure to inject.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fault {
    /// Everything works.
    #[default]
    None,
    /// Every call fails with `Unavailable` and changes nothing.
    Unavailable,
    /// Raises land, but the reply is lost: the caller sees `Unavailable`
    /// (the outcome-unknown case a real network produces).
    LoseReplies,
}

/// The state behind the mutex.
#[derive(Debug)]
struct State {
    /// One entry per section of the set.
    sections: Vec<MemSection>,
    /// The failure currently injected.
    fault: Fault,
    /// Raises that landed, for tests that count store writes.
    raises: u64,
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
        let sections = vec![MemSection::default(); spec.section_count() as usize];
        Self {
            spec,
            state: Mutex::new(State {
                sections,
                fault: Fault::None,
                raises: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stored state of `section` (panics if out of range).
    pub fn section(&self, section: SectionId) -> MemSection {
        self.lock().sections[section as usize]
    }

    /// Injects `fault` until changed.
    pub fn set_fault(&self, fault: Fault) {
        self.lock().fault = fault;
    }

    /// How many raises have landed.
    pub fn raises(&self) -> u64 {
        self.lock().raises
    }

    /// Hands `section` to some other AllocSvr (a take-over we do not see):
    /// our epoch becomes stale.
    pub fn steal(&self, section: SectionId) -> Grant {
        let step = self.spec.step;
        take_one(&mut self.lock().sections, section, step)
    }

    fn do_take_over(&self, first: SectionId, count: u32) -> Result<Vec<Grant>, StoreErr> {
        let mut st = self.lock();
        if st.fault != Fault::None {
            return Err(StoreErr::Unavailable("injected".into()));
        }
        let end = first as u64 + count as u64;
        if end > st.sections.len() as u64 {
            return Err(StoreErr::UnknownSection);
        }
        let step = self.spec.step;
        Ok((first..first + count)
            .map(|s| take_one(&mut st.sections, s, step))
            .collect())
    }

    fn do_raise(&self, section: SectionId, epoch: Epoch, to: u64) -> Result<u64, StoreErr> {
        let mut st = self.lock();
        if st.fault == Fault::Unavailable {
            return Err(StoreErr::Unavailable("injected".into()));
        }
        let sec = st
            .sections
            .get_mut(section as usize)
            .ok_or(StoreErr::UnknownSection)?;
        // The epoch first: a ceiling answer is only meaningful to the owner.
        if sec.epoch != epoch {
            return Err(StoreErr::StaleEpoch);
        }
        match self.spec.check_raise(sec.max_seq, to) {
            Err(RaiseCheck::NotAbove) => {
                return Err(StoreErr::NotAbove {
                    current: sec.max_seq,
                })
            }
            Err(RaiseCheck::TooLarge) => return Err(StoreErr::TooLarge),
            Ok(()) => sec.max_seq = to,
        }
        st.raises += 1;
        match st.fault {
            Fault::LoseReplies => Err(StoreErr::Unavailable("reply lost".into())),
            _ => Ok(to),
        }
    }
}

/// One section's take-over: new epoch, ceiling up one step.
fn take_one(sections: &mut [MemSection], s: SectionId, step: u64) -> Grant {
    let sec = &mut sections[s as usize];
    sec.epoch += 1;
    let prev = sec.max_seq;
    sec.max_seq = prev + step;
    Grant {
        section: s,
        epoch: sec.epoch,
        prev_ceiling: prev,
        max_seq: sec.max_seq,
    }
}

impl CeilingStore for MemCeilingStore {
    fn take_over(
        &self,
        first: SectionId,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Grant>, StoreErr>> + Send {
        ready(self.do_take_over(first, count))
    }

    fn raise(
        &self,
        section: SectionId,
        epoch: Epoch,
        to: u64,
    ) -> impl Future<Output = Result<u64, StoreErr>> + Send {
        ready(self.do_raise(section, epoch, to))
    }
}
