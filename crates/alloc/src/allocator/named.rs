//! Named counters on the allocator: one counter per name, held in the
//! name table (`names.rs`) and served under its position's section, its
//! ceiling, base and raises (`docs/counters.md`).
//!
//! A name's position is also a key of its own: a caller that sends the
//! position as a uid (as callers did before names had counters of their
//! own) is served from the position's cell. A name not held starts at or
//! above that cell as well, so callers moving from the position to the
//! name never see the name go back (`docs/counters.md`, Upgrading).

use seqsvr_core::{name_key, SectionId, Uid};
use tokio::time::Instant;

use super::Allocator;
use crate::error::{AllocError, Result};
use crate::names::NamePage;
use crate::section::{Refused, SectionState};

/// What a monitor shows of one name: read from memory, changing nothing
/// (`docs/counters.md`, Watching names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameView {
    /// The name's bytes.
    pub name: Vec<u8>,
    /// Its position (`seqsvr_core::name_key`).
    pub position: Uid,
    /// The position's section.
    pub section: SectionId,
    /// Whether the name table holds it (false: first seen or forgotten; a
    /// call would create it at `value`'s start).
    pub held: bool,
    /// Its `cur_seq` (what `current` answers; `None`: its section is not
    /// served here now).
    pub value: Option<u64>,
    /// Its section as served here (`None`: not served here now).
    pub section_state: Option<SectionState>,
}

impl Allocator {
    /// The next number of `name`: strictly above every number handed out
    /// for it before, by any owner (promise 1), never above a durable
    /// ceiling (promise 2). A name not held here (first seen, or
    /// forgotten) starts above everything it ever had (`names.rs`).
    pub fn next_name(&self, name: &[u8]) -> Result<u64> {
        self.next_name_n(name, 1)
    }

    /// Reserves `n` numbers of `name` in one step and returns the last:
    /// the caller owns `(v − n, v]`. `n` as for
    /// [`next_n`](Self::next_n); a bad name or count is refused and changes
    /// nothing.
    pub fn next_name_n(&self, name: &[u8], n: u64) -> Result<u64> {
        let key = name_key(name)?;
        if n == 0 || n > self.max_count() {
            return Err(AllocError::InvalidCount {
                count: n,
                max: self.max_count(),
            });
        }
        let (slot, section, idx) = self.locate(key)?;
        // A name first held here starts above its position's own counter
        // too (module docs).
        let at_least = slot.current(idx).unwrap_or(0);
        let guard = crossbeam_epoch::pin();
        self.names.take(name, section, at_least, |held| {
            slot.take_held_pinned(held, n, &guard, |early| self.queue_raise(section, early))
                .map_err(|r| match r {
                    Refused::Exhausted => self.exhausted(section),
                    Refused::NotServing => AllocError::NotOwner { section },
                })
        })
    }

    /// The name's `cur_seq`: ≥ every number ever handed out for it, and
    /// below the next one (for a name not held: its section's skip-ahead
    /// value or forgotten floor, which no one handed out to it).
    pub fn current_name(&self, name: &[u8]) -> Result<u64> {
        let key = name_key(name)?;
        let (slot, section, idx) = self.locate(key)?;
        let at_least = slot.current(idx).unwrap_or(0);
        slot.current_held(self.names.held(name, section, at_least))
            .ok_or(AllocError::NotOwner { section })
    }

    /// What a monitor shows of `name`, or `NotOwner` when its section is
    /// not served here. Reads only: a name not held is not created.
    pub fn name_view(&self, name: &[u8]) -> Result<NameView> {
        let position = name_key(name)?;
        let (slot, section, idx) = self.locate(position)?;
        let at_least = slot.current(idx).unwrap_or(0);
        let (last, held) = self.names.lookup(name, section, at_least);
        let value = slot.current_held(last);
        let section_state = slot.state();
        if value.is_none() || section_state.is_none() {
            return Err(AllocError::NotOwner { section });
        }
        Ok(NameView {
            name: name.to_vec(),
            position,
            section,
            held,
            value,
            section_state,
        })
    }

    /// A page of the names held here (`NameTable::page`): up to `limit`
    /// names starting with `prefix`, from `cursor`, looking at no more
    /// than `budget` entries; the next page's cursor (`None`: the end).
    /// `None` for a cursor no page gave. A name whose section is no longer
    /// served here is listed without a value or section state.
    pub fn names_page(
        &self,
        cursor: u64,
        limit: usize,
        prefix: &[u8],
        budget: usize,
    ) -> Option<(Vec<NameView>, Option<u64>)> {
        let NamePage { names, next } = self.names.page(cursor, limit, prefix, budget)?;
        let views = names
            .into_iter()
            .map(|h| {
                let slot = self.slot(h.section);
                NameView {
                    position: name_key(&h.name).unwrap_or_default(),
                    section: h.section,
                    held: true,
                    value: slot.and_then(|s| s.current_held(h.value)),
                    section_state: slot.and_then(|s| s.state()),
                    name: h.name,
                }
            })
            .collect();
        Some((views, next))
    }

    /// Like [`next_name_n`](Self::next_name_n), but when the section is
    /// exhausted waits for its raise (up to `deadline`) and retries.
    pub async fn next_name_n_waiting(&self, name: &[u8], n: u64, deadline: Instant) -> Result<u64> {
        self.retry_exhausted(deadline, || self.next_name_n(name, n))
            .await
    }
}
