//! Named counters on the allocator: one counter per name, held in the
//! name table (`names.rs`) and served under its position's section, its
//! ceiling, base and raises (`docs/counters.md`).
//!
//! A name's position is also a key of its own: a caller that sends the
//! position as a uid (as callers did before names had counters of their
//! own) is served from the position's cell. A name not held starts at or
//! above that cell as well, so callers moving from the position to the
//! name never see the name go back (`docs/counters.md`, Upgrading).
//!
//! A declared counter (`docs/counters.md`, Declared counters) is served
//! by its declaration as this process holds it: above its floor, every
//! number ≡ offset (mod increment), never past its maximum. The owner
//! holds the declarations of its sections from the store before it
//! serves them, and puts a write in force here before answering it, so a
//! call that starts after a floor was set returns above it (promise 1).

use seqsvr_core::counter::Limit;
use seqsvr_core::{name_key, CounterDecl, SectionId, Uid};
use tokio::time::Instant;

use super::Allocator;
use crate::error::{AllocError, Result};
use crate::names::NamePage;
use crate::section::{Refused, SectionSlot, SectionState};

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
    /// the caller owns `(v − n, v]` (of a declared counter with increment
    /// `k`: `v − i·k`, `i < n`). `n` as for [`next_n`](Self::next_n); a
    /// bad name or count, or a batch that would pass a declared maximum,
    /// is refused and changes nothing.
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
        if let Some(decl) = self.names.decl(name, section) {
            return self.next_declared(name, n, slot, section, at_least, decl);
        }
        let guard = crossbeam_epoch::pin();
        self.names.take(name, section, at_least, |held| {
            slot.take_held_pinned(held, n, &guard, |early| self.queue_raise(section, early))
                .map_err(|r| self.refused(r, section))
        })
    }

    fn refused(&self, r: Refused, section: SectionId) -> AllocError {
        match r {
            Refused::Exhausted => self.exhausted(section),
            Refused::NotServing => AllocError::NotOwner { section },
        }
    }

    /// [`next_name_n`](Self::next_name_n) of a name with a declaration:
    /// above its floor, in its class, never past its maximum.
    fn next_declared(
        &self,
        name: &[u8],
        n: u64,
        slot: &SectionSlot,
        section: SectionId,
        at_least: u64,
        decl: CounterDecl,
    ) -> Result<u64> {
        let rules = decl.rules_or_default();
        let guard = crossbeam_epoch::pin();
        let out = self.names.take(name, section, at_least, |held| {
            let mut held = held.max(decl.floor);
            loop {
                let cur = slot
                    .current_held(held)
                    .ok_or(AllocError::NotOwner { section })?;
                let last = rules
                    .last_of(cur, n, self.spec.step)
                    .map_err(|l| limit_error(name, n, rules.increment, self.spec.step, l))?;
                let (v, base) = slot
                    .take_held_pinned(cur, last - cur, &guard, |early| {
                        self.queue_raise(section, early)
                    })
                    .map_err(|r| self.refused(r, section))?;
                if v == last {
                    return Ok((v, base));
                }
                // A new grant moved the base up between the two reads: `v`
                // is above everything before and handed to no one; start
                // again above it, so every number is in the class.
                held = v;
            }
        });
        if let Err(AllocError::CounterMaxReached { .. }) = &out {
            self.names.limit_refused();
        }
        out
    }

    /// The name's `cur_seq`: ≥ every number ever handed out for it, and
    /// below the next one (for a name not held: its section's skip-ahead
    /// value or forgotten floor, which no one handed out to it; for a
    /// declared counter, at least its floor).
    pub fn current_name(&self, name: &[u8]) -> Result<u64> {
        let key = name_key(name)?;
        let (slot, section, idx) = self.locate(key)?;
        let at_least = slot.current(idx).unwrap_or(0);
        let floor = self.names.decl(name, section).map_or(0, |d| d.floor);
        let held = self.names.held(name, section, at_least).max(floor);
        slot.current_held(held)
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

    /// The section of `name`'s position, if this set serves names there.
    pub fn name_section(&self, name: &[u8]) -> Result<SectionId> {
        let key = name_key(name)?;
        let (_, section, _) = self.locate(key)?;
        Ok(section)
    }

    /// The declaration of `name` in force here, if any.
    pub fn counter_decl(&self, name: &[u8], section: SectionId) -> Option<CounterDecl> {
        self.names.decl(name, section)
    }

    /// The last number handed out here for `name`, if it is held.
    pub fn name_held(&self, name: &[u8]) -> Option<u64> {
        self.names.held_exact(name)
    }

    /// Puts `name`'s declaration in force (the store applied it).
    pub fn set_counter_decl(&self, name: &[u8], section: SectionId, decl: CounterDecl) {
        self.names.set_decl(name, section, decl);
    }

    /// After a floor was put in force for a name of `section`: whether the
    /// ceiling here is above it; if not, the raise towards it is asked now
    /// rather than by the name's first call (`SectionSlot::want_above`).
    /// False as well if the section is not served here.
    pub fn want_room_above(&self, section: SectionId, floor: u64) -> bool {
        let Some(slot) = self.slot(section) else {
            return false;
        };
        slot.want_above(floor, || self.queue_raise(section, true)) == Some(true)
    }

    /// [`want_room_above`](Self::want_room_above), then waits (up to
    /// `deadline`) for the raise to land, as a caller that found the
    /// section exhausted waits: true once the ceiling here is above
    /// `floor`, so a call for the name is served from memory.
    pub async fn room_above(&self, section: SectionId, floor: u64, deadline: Instant) -> bool {
        let attempt = || match self
            .slot(section)
            .map(|slot| slot.want_above(floor, || self.queue_raise(section, true)))
        {
            Some(Some(true)) => Ok(()),
            Some(Some(false)) => Err(AllocError::Exhausted { section }),
            _ => Err(AllocError::NotOwner { section }),
        };
        self.retry_exhausted(deadline, attempt).await.is_ok()
    }

    /// Replaces the declarations of `section` with the store's, before a
    /// grant of it is installed.
    pub fn load_counter_decls(&self, section: SectionId, decls: Vec<(Vec<u8>, CounterDecl)>) {
        self.names.load_decls(section, decls);
    }

    /// Whether `section` holds name positions (its declarations are
    /// loaded before it is served).
    pub fn has_name_positions(&self, section: SectionId) -> bool {
        self.names.has_names(section)
    }

    /// Serialises this process's counter writes (held across the store
    /// write and the update in memory).
    pub async fn counter_write_lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.names.writes.lock().await
    }
}

/// The error of a call a declaration refuses.
fn limit_error(name: &[u8], n: u64, increment: u64, step: u64, l: Limit) -> AllocError {
    match l {
        Limit::MaxReached { max } => AllocError::CounterMaxReached {
            name: String::from_utf8_lossy(name).into_owned(),
            max,
        },
        Limit::SpanTooLarge => AllocError::InvalidCount {
            count: n,
            max: (step / increment.max(1)).max(1),
        },
    }
}
