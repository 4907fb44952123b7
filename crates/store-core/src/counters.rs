//! Declared counters in the store (docs/counters.md, Declared counters):
//! per name, its declaration — a floor that only grows, and while
//! declared, a maximum and an increment/offset — or, once deleted, a
//! tombstone that keeps the floor.
//!
//! The name's owner serves it from memory, so a declaration is written
//! only by that owner, fenced by its epoch (`Command::Counter`), and a new
//! owner reads the declarations of its sections before it serves them:
//! whatever was written under an older epoch is in the state it reads
//! (a write under an epoch is refused once a newer one began).

use std::collections::BTreeMap;

use seqsvr_core::{CounterDecl, SectionId};
use serde::{Deserialize, Serialize};

use crate::command::Rejection;
pub use seqsvr_store_api::CounterRefusal;

/// Most counters (declared or tombstones) one store group keeps: each is
/// a replicated record, and every one of a section is read at a take-over.
pub const MAX_COUNTERS: usize = 100_000;

/// One counter's durable record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterRecord {
    /// The section of the name's position (fixed for ever: a name keeps
    /// its position).
    pub section: SectionId,
    /// The declaration (or tombstone).
    pub decl: CounterDecl,
}

/// Every counter of the group, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// By name.
    pub by_name: BTreeMap<Vec<u8>, CounterRecord>,
}

impl Counters {
    /// The records of sections `first..first + count`, by name.
    pub fn of_sections(
        &self,
        first: SectionId,
        count: u32,
    ) -> impl Iterator<Item = (&Vec<u8>, &CounterRecord)> {
        let end = first as u64 + count as u64;
        (self.by_name.iter())
            .filter(move |(_, r)| (first as u64..end).contains(&(r.section as u64)))
    }

    /// Up to `limit` records by name after `after`, and whether more follow.
    pub fn after(&self, after: &[u8], limit: usize) -> (Vec<(&Vec<u8>, &CounterRecord)>, bool) {
        self.page(after, limit, |_| true)
    }

    /// Up to `limit` records of sections `first..first + count` by name
    /// after `after`, and whether more follow: a range move reads the
    /// moved sections' declarations in such pages.
    pub fn of_sections_after(
        &self,
        first: SectionId,
        count: u32,
        after: &[u8],
        limit: usize,
    ) -> (Vec<(&Vec<u8>, &CounterRecord)>, bool) {
        let end = first as u64 + count as u64;
        self.page(after, limit, |r| {
            (first as u64..end).contains(&(r.section as u64))
        })
    }

    fn page(
        &self,
        after: &[u8],
        limit: usize,
        keep: impl Fn(&CounterRecord) -> bool,
    ) -> (Vec<(&Vec<u8>, &CounterRecord)>, bool) {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = if after.is_empty() {
            Unbounded
        } else {
            Excluded(after.to_vec())
        };
        let mut it = (self.by_name.range((from, Unbounded))).filter(|(_, r)| keep(r));
        let page: Vec<_> = it.by_ref().take(limit).collect();
        let more = it.next().is_some();
        (page, more)
    }
}

/// A counter refusal.
pub(crate) fn refuse(
    name: &[u8],
    kind: CounterRefusal,
    floor: u64,
    reason: impl Into<String>,
) -> Rejection {
    Rejection::Counter {
        name: name.to_vec(),
        kind,
        floor,
        reason: reason.into(),
    }
}
