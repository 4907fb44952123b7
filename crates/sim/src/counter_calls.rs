//! The declared-counter calls of a range move (`StoreSets.ReadCounters`,
//! a read after a barrier, and `CopyCounters`, a write), as the simulated
//! store serves them: by the real `Counters::of_sections_after` and the
//! real `Command::CopyCounters`. The simulated AllocSvrs serve no names,
//! so the pages are empty; the calls, their failures and their timing are
//! the shipped ones all the same. Depends on no other module here.

use seqsvr_core::mover::{Declared, COUNTERS_PER_CALL};
use seqsvr_core::{SectionId, SetCall};
use seqsvr_store_core::command::Command;
use seqsvr_store_core::state::SetState;

/// A move's declared-counter call to a store group.
#[derive(Debug, Clone)]
pub(crate) enum CounterReq {
    /// A page of the declarations of sections `first..first+count` after
    /// `after` (a read).
    Read {
        /// First section.
        first: SectionId,
        /// How many.
        count: u32,
        /// The last name of the previous page.
        after: Vec<u8>,
    },
    /// Their copy into the destination (a write).
    Copy {
        /// The move, as the destination judges it.
        call: SetCall,
        /// The page's lower bound (exclusive).
        after: Vec<u8>,
        /// The page's upper bound (inclusive; `None`: to the last).
        through: Option<Vec<u8>>,
        /// The declarations.
        counters: Vec<Declared>,
    },
}

impl CounterReq {
    /// The command a copy writes; `None` for a read.
    pub(crate) fn command(&self) -> Option<Command> {
        match self {
            CounterReq::Read { .. } => None,
            CounterReq::Copy {
                call,
                after,
                through,
                counters,
            } => Some(Command::CopyCounters {
                call: *call,
                after: after.clone(),
                through: through.clone(),
                counters: counters.clone(),
            }),
        }
    }

    /// A read's page from a replica's applied state, and whether more
    /// follow.
    pub(crate) fn read(&self, st: &SetState) -> (Vec<Declared>, bool) {
        let CounterReq::Read {
            first,
            count,
            after,
        } = self
        else {
            unreachable!("a copy is a write");
        };
        let limit = COUNTERS_PER_CALL as usize;
        let (page, more) = (st.counters).of_sections_after(*first, *count, after, limit);
        let page = (page.into_iter()).map(|(n, r)| (n.clone(), r.decl));
        (page.collect(), more)
    }
}
