//! The set directory: which set serves which uid range.
//!
//! A cluster is cut into *sets* by uid range; each set has its own store
//! group and its own AllocSvrs and knows nothing of the others. The
//! directory is the one replicated record of that cut. It lives in set 0's
//! store group (the *home* group) and is copied, versioned, into every other
//! group so that any seed can answer with it (`docs/architecture/sets.md`).
//!
//! This module is pure: the directory, its checks, and [`Placement`] — what
//! one store group holds of its own span (serving, absent, moved away).
//! Safety never rests on a directory copy being fresh: a section is served
//! only where its group's placement says `Serving`, and a move freezes the
//! source before it installs the destination (promise 1).

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::section::{SectionId, SetSpec, Uid};

/// A set's id. Set 0 is the home set: its store group holds the directory.
pub type SetId = u32;

/// The set whose store group holds the directory.
pub const HOME_SET: SetId = 0;

/// Most ranges a directory may hold (it is one replicated value).
pub const MAX_DIR_RANGES: usize = 1024;

/// Most runs a placement may hold (it is one stored value).
pub const MAX_PLACEMENT_RUNS: usize = 1024;

/// Most store addresses listed per set.
pub const MAX_SET_STORES: usize = 16;

/// One set as the directory knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirSet {
    /// The set's span, section size and step (its store group's spec).
    pub spec: SetSpec,
    /// Its store replicas' client-plane addresses (where anyone reads its
    /// routes).
    pub stores: Vec<String>,
    /// Its store replicas' admin-plane addresses (where operators and the
    /// mover send freezes and installs).
    pub admin: Vec<String>,
}

/// A uid range served by one set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirRange {
    /// First uid (inclusive).
    pub begin: Uid,
    /// One past the last uid.
    pub end: Uid,
    /// The set serving it.
    pub set: SetId,
}

/// A range move under way: begun in the directory, not yet flipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingMove {
    /// First uid moved.
    pub begin: Uid,
    /// One past the last uid moved.
    pub end: Uid,
    /// The set giving the range up.
    pub from: SetId,
    /// The set taking it.
    pub to: SetId,
}

/// The directory: sets, the ranges they serve, a move under way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Directory {
    /// Grows with every change; copies and clients keep the newest.
    pub version: u64,
    /// Every set, by id.
    pub sets: BTreeMap<SetId, DirSet>,
    /// Served ranges, sorted, non-overlapping, adjacent ranges of one set
    /// merged. Uids in no range are served by no set.
    pub ranges: Vec<DirRange>,
    /// The move under way, if any (one at a time).
    pub moving: Option<PendingMove>,
    /// The move's id: the directory version at which it began. Moves run
    /// one at a time, so ids grow with time; a store group refuses a freeze
    /// or install of an older move than one it already applied, so a mover
    /// that stalled and wakes up after later moves cannot undo them.
    pub move_id: u64,
}

/// Why a directory change was refused. Nothing changes when one is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum DirError {
    /// `begin >= end`.
    #[error("empty or inverted uid range [{begin}, {end})")]
    EmptyRange {
        /// First uid given.
        begin: Uid,
        /// End given.
        end: Uid,
    },
    /// A range boundary that is not a section boundary of the set.
    #[error("[{begin}, {end}) is not whole sections of set {set} (section size {section_size}, span starts at {span_begin})")]
    NotWholeSections {
        /// First uid given.
        begin: Uid,
        /// End given.
        end: Uid,
        /// The set whose grid it must follow.
        set: SetId,
        /// Its section size.
        section_size: u64,
        /// Its first uid.
        span_begin: Uid,
    },
    /// A range outside the set's span.
    #[error("[{begin}, {end}) is outside set {set}'s span [{span_begin}, {span_end})")]
    OutsideSpan {
        /// First uid given.
        begin: Uid,
        /// End given.
        end: Uid,
        /// The set.
        set: SetId,
        /// Its span's first uid.
        span_begin: Uid,
        /// Its span's end.
        span_end: Uid,
    },
    /// A set's sections do not line up with the home set's.
    #[error("set {set}'s sections do not line up with set 0's (same section size, span starting on a section boundary)")]
    Misaligned {
        /// The set.
        set: SetId,
    },
    /// The range overlaps one served by another set.
    #[error("[{begin}, {end}) overlaps [{other_begin}, {other_end}) served by set {other_set}")]
    Overlap {
        /// First uid given.
        begin: Uid,
        /// End given.
        end: Uid,
        /// The overlapped range's first uid.
        other_begin: Uid,
        /// Its end.
        other_end: Uid,
        /// Its set.
        other_set: SetId,
    },
    /// No such set.
    #[error("no set {0}")]
    UnknownSet(SetId),
    /// The id is taken by a different set.
    #[error("set {0} already exists with a different spec or stores")]
    SetInUse(SetId),
    /// A set entry that cannot be stored (no stores, too many, bad spec).
    #[error("invalid set entry: {0}")]
    InvalidSet(String),
    /// Part of the range is not served by the set it would move from.
    #[error("uid {uid} is not served by set {from}")]
    NotServedBy {
        /// The first uid that is not.
        uid: Uid,
        /// The set named as the source.
        from: SetId,
    },
    /// A move from a set to itself.
    #[error("a move from set {0} to itself")]
    SameSet(SetId),
    /// Another move is under way.
    #[error(
        "a move of [{begin}, {end}) from set {from} to set {to} is under way: finish it first"
    )]
    MoveInProgress {
        /// Its first uid.
        begin: Uid,
        /// Its end.
        end: Uid,
        /// Its source.
        from: SetId,
        /// Its destination.
        to: SetId,
    },
    /// Finishing a move that was never begun.
    #[error("no move of [{begin}, {end}) from set {from} to set {to} is under way")]
    NoSuchMove {
        /// First uid given.
        begin: Uid,
        /// End given.
        end: Uid,
        /// Source given.
        from: SetId,
        /// Destination given.
        to: SetId,
    },
    /// The directory would hold too many ranges.
    #[error("the directory would hold more than {MAX_DIR_RANGES} ranges")]
    TooManyRanges,
}

/// A change to the directory (each one a replicated command in the home
/// group). All are idempotent: applying one that already took effect
/// changes nothing and succeeds, so a retried or resumed operator command
/// finishes instead of failing half way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirChange {
    /// Adds a set serving `range` (which must be free).
    AddSet {
        /// The new set.
        set: DirSet,
        /// The uids it serves from now on.
        begin: Uid,
        /// See `begin`.
        end: Uid,
    },
    /// Replaces a set's store addresses (after a replica change).
    SetStores {
        /// The set.
        set: SetId,
        /// Client-plane addresses.
        stores: Vec<String>,
        /// Admin-plane addresses.
        admin: Vec<String>,
    },
    /// Begins moving `[begin, end)` from `from` to `to`.
    BeginMove(PendingMove),
    /// Flips `[begin, end)` to `to` and ends the move.
    FinishMove(PendingMove),
}

fn check_range(begin: Uid, end: Uid) -> Result<(), DirError> {
    if begin >= end {
        return Err(DirError::EmptyRange { begin, end });
    }
    Ok(())
}

/// Checks that `[begin, end)` is whole sections inside `set`'s span.
pub fn check_sections(spec: &SetSpec, begin: Uid, end: Uid) -> Result<(), DirError> {
    check_range(begin, end)?;
    if begin < spec.uid_begin || end > spec.uid_end {
        return Err(DirError::OutsideSpan {
            begin,
            end,
            set: spec.set_id,
            span_begin: spec.uid_begin,
            span_end: spec.uid_end,
        });
    }
    let on_grid =
        |u: Uid| u == spec.uid_end || (u - spec.uid_begin).is_multiple_of(spec.section_size);
    if !on_grid(begin) || !on_grid(end) {
        return Err(DirError::NotWholeSections {
            begin,
            end,
            set: spec.set_id,
            section_size: spec.section_size,
            span_begin: spec.uid_begin,
        });
    }
    Ok(())
}

/// The sections of `spec` that `[begin, end)` covers (checked whole).
pub fn sections_of(spec: &SetSpec, begin: Uid, end: Uid) -> Result<Range<SectionId>, DirError> {
    check_sections(spec, begin, end)?;
    let first = ((begin - spec.uid_begin) / spec.section_size) as SectionId;
    let last = (end - spec.uid_begin).div_ceil(spec.section_size) as SectionId;
    Ok(first..last)
}

impl Directory {
    /// A new directory with the home set serving its whole span.
    pub fn new(home: DirSet) -> Self {
        let r = DirRange {
            begin: home.spec.uid_begin,
            end: home.spec.uid_end,
            set: home.spec.set_id,
        };
        Self {
            version: 1,
            sets: BTreeMap::from([(home.spec.set_id, home)]),
            ranges: vec![r],
            moving: None,
            move_id: 0,
        }
    }

    /// The set serving `uid`, if any.
    pub fn set_of(&self, uid: Uid) -> Option<SetId> {
        let i = self.ranges.partition_point(|r| r.end <= uid);
        self.ranges
            .get(i)
            .filter(|r| r.begin <= uid && uid < r.end)
            .map(|r| r.set)
    }

    /// Applies a change; `Ok(true)` if it changed anything (the version
    /// then grew by one), `Ok(false)` if it had already taken effect.
    pub fn apply(&mut self, change: &DirChange) -> Result<bool, DirError> {
        let mut next = self.clone();
        let changed = match change {
            DirChange::AddSet { set, begin, end } => next.add_set(set, *begin, *end)?,
            DirChange::SetStores { set, stores, admin } => next.set_stores(*set, stores, admin)?,
            DirChange::BeginMove(m) => next.begin_move(m)?,
            DirChange::FinishMove(m) => next.finish_move(m)?,
        };
        if changed {
            if next.ranges.len() > MAX_DIR_RANGES {
                return Err(DirError::TooManyRanges);
            }
            next.version += 1;
            *self = next;
        }
        Ok(changed)
    }

    fn home_spec(&self) -> Option<&SetSpec> {
        self.sets.get(&HOME_SET).map(|s| &s.spec)
    }

    fn check_entry(&self, set: &DirSet) -> Result<(), DirError> {
        set.spec
            .validate()
            .map_err(|e| DirError::InvalidSet(e.to_string()))?;
        let n = set.stores.len();
        if n == 0 || n > MAX_SET_STORES || set.admin.len() != n {
            return Err(DirError::InvalidSet(format!(
                "1..={MAX_SET_STORES} stores, each with a client and an admin address"
            )));
        }
        let bad = |a: &String| a.is_empty() || a.len() > 256 || a.chars().any(char::is_control);
        if set.stores.iter().chain(&set.admin).any(bad) {
            return Err(DirError::InvalidSet("a store address is malformed".into()));
        }
        if let Some(home) = self.home_spec() {
            let aligned = set.spec.section_size == home.section_size
                && set
                    .spec
                    .uid_begin
                    .abs_diff(home.uid_begin)
                    .is_multiple_of(home.section_size);
            if !aligned {
                return Err(DirError::Misaligned {
                    set: set.spec.set_id,
                });
            }
        }
        Ok(())
    }

    fn add_set(&mut self, set: &DirSet, begin: Uid, end: Uid) -> Result<bool, DirError> {
        let id = set.spec.set_id;
        if let Some(have) = self.sets.get(&id) {
            let served = self
                .ranges
                .iter()
                .any(|r| r.set == id && r.begin <= begin && end <= r.end);
            if have == set && served {
                return Ok(false);
            }
            return Err(DirError::SetInUse(id));
        }
        self.check_entry(set)?;
        check_sections(&set.spec, begin, end)?;
        if let Some(r) = self.ranges.iter().find(|r| r.begin < end && begin < r.end) {
            return Err(DirError::Overlap {
                begin,
                end,
                other_begin: r.begin,
                other_end: r.end,
                other_set: r.set,
            });
        }
        self.sets.insert(id, set.clone());
        self.assign(begin, end, id);
        Ok(true)
    }

    fn set_stores(
        &mut self,
        id: SetId,
        stores: &[String],
        admin: &[String],
    ) -> Result<bool, DirError> {
        let have = self.sets.get(&id).ok_or(DirError::UnknownSet(id))?;
        let new = DirSet {
            spec: have.spec.clone(),
            stores: stores.to_vec(),
            admin: admin.to_vec(),
        };
        if *have == new {
            return Ok(false);
        }
        self.check_entry(&new)?;
        self.sets.insert(id, new);
        Ok(true)
    }

    fn check_move(&self, m: &PendingMove) -> Result<(), DirError> {
        check_range(m.begin, m.end)?;
        if m.from == m.to {
            return Err(DirError::SameSet(m.from));
        }
        let from = self.sets.get(&m.from).ok_or(DirError::UnknownSet(m.from))?;
        let to = self.sets.get(&m.to).ok_or(DirError::UnknownSet(m.to))?;
        check_sections(&from.spec, m.begin, m.end)?;
        check_sections(&to.spec, m.begin, m.end)?;
        Ok(())
    }

    /// The first uid of `[begin, end)` not served by `set`, if any.
    fn first_not_served(&self, begin: Uid, end: Uid, set: SetId) -> Option<Uid> {
        let mut at = begin;
        while at < end {
            let i = self.ranges.partition_point(|r| r.end <= at);
            match self.ranges.get(i) {
                Some(r) if r.begin <= at && r.set == set => at = r.end,
                _ => return Some(at),
            }
        }
        None
    }

    fn begin_move(&mut self, m: &PendingMove) -> Result<bool, DirError> {
        match self.moving {
            Some(p) if p == *m => return Ok(false),
            Some(p) => {
                return Err(DirError::MoveInProgress {
                    begin: p.begin,
                    end: p.end,
                    from: p.from,
                    to: p.to,
                })
            }
            None => {}
        }
        self.check_move(m)?;
        if let Some(uid) = self.first_not_served(m.begin, m.end, m.from) {
            return Err(DirError::NotServedBy { uid, from: m.from });
        }
        self.moving = Some(*m);
        // `apply` adds one to the version for this change.
        self.move_id = self.version + 1;
        Ok(true)
    }

    fn finish_move(&mut self, m: &PendingMove) -> Result<bool, DirError> {
        if self.moving != Some(*m) {
            // Already finished (a resumed mover): the range is the
            // destination's and no move is pending.
            if self.moving.is_none() && self.first_not_served(m.begin, m.end, m.to).is_none() {
                return Ok(false);
            }
            return Err(DirError::NoSuchMove {
                begin: m.begin,
                end: m.end,
                from: m.from,
                to: m.to,
            });
        }
        self.assign(m.begin, m.end, m.to);
        self.moving = None;
        Ok(true)
    }

    /// Gives `[begin, end)` to `set`, cutting what it overlaps and merging
    /// adjacent ranges of one set.
    fn assign(&mut self, begin: Uid, end: Uid, set: SetId) {
        let mut out: Vec<DirRange> = Vec::with_capacity(self.ranges.len() + 2);
        for r in &self.ranges {
            if r.end <= begin || end <= r.begin {
                out.push(*r);
                continue;
            }
            if r.begin < begin {
                out.push(DirRange { end: begin, ..*r });
            }
            if end < r.end {
                out.push(DirRange { begin: end, ..*r });
            }
        }
        out.push(DirRange { begin, end, set });
        out.sort_by_key(|r| r.begin);
        let mut merged: Vec<DirRange> = Vec::with_capacity(out.len());
        for r in out {
            match merged.last_mut() {
                Some(l) if l.end == r.begin && l.set == r.set => l.end = r.end,
                _ => merged.push(r),
            }
        }
        self.ranges = merged;
    }
}

/// What a store command of a set's addition or of a move belongs to. A
/// freeze or install carries it, and a store group applies it only if the
/// directory it holds (its own, in the home group; its copy elsewhere)
/// shows that very addition or move (`docs/architecture/sets.md`, Set
/// commands are checked against the directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetKind {
    /// The set's addition: its range was served by no set before.
    Addition,
    /// A move of the range from one set to another.
    Move {
        /// The set giving the range up.
        from: SetId,
        /// The set taking it.
        to: SetId,
    },
}

/// The set, move and range a freeze or install is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetCall {
    /// The set whose store group is asked (source of a freeze,
    /// destination of an install).
    pub set: SetId,
    /// The move's id (`Directory::move_id`); 0 for an addition.
    pub move_id: u64,
    /// First uid of the addition's or move's range.
    pub begin: Uid,
    /// One past its last uid.
    pub end: Uid,
    /// An addition or a move.
    pub kind: SetKind,
}

impl std::fmt::Display for SetCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (b, e) = (self.begin, self.end);
        match self.kind {
            SetKind::Addition => write!(f, "the addition of set {} serving [{b}, {e})", self.set),
            SetKind::Move { from, to } => write!(
                f,
                "move {} of [{b}, {e}) from set {from} to set {to}",
                self.move_id
            ),
        }
    }
}

impl Directory {
    /// Whether this directory shows `call` under way: for a move, the
    /// pending move is exactly it and carries its id; for an addition, the
    /// set serves the whole range, carries no move id, and no move into or
    /// out of it is pending. `Err` names what is in the way.
    pub fn check_call(&self, call: &SetCall) -> Result<(), String> {
        let v = self.version;
        let pending = |p: &PendingMove| {
            format!(
                "move {} of [{}, {}) from set {} to set {} is under way",
                self.move_id, p.begin, p.end, p.from, p.to
            )
        };
        match call.kind {
            SetKind::Addition => {
                if call.move_id != 0 {
                    return Err(format!(
                        "{call} carries move id {}; an addition carries none",
                        call.move_id
                    ));
                }
                if let Some(p) = self
                    .moving
                    .filter(|p| p.from == call.set || p.to == call.set)
                {
                    return Err(format!(
                        "{} (directory version {v}): finish it before adding set {} again",
                        pending(&p),
                        call.set
                    ));
                }
                check_range(call.begin, call.end).map_err(|e| e.to_string())?;
                if let Some(uid) = self.first_not_served(call.begin, call.end, call.set) {
                    let by = match self.set_of(uid) {
                        Some(s) => format!("set {s}"),
                        None => "no set".into(),
                    };
                    return Err(format!(
                        "the directory (version {v}) does not show {call}: uid {uid} is served by {by}"
                    ));
                }
                Ok(())
            }
            SetKind::Move { from, to } => {
                let m = PendingMove {
                    begin: call.begin,
                    end: call.end,
                    from,
                    to,
                };
                match self.moving {
                    Some(p) if p == m && self.move_id == call.move_id => Ok(()),
                    Some(p) if p == m => Err(format!(
                        "{call} is not the move under way: the directory (version {v}) gives it id {}",
                        self.move_id
                    )),
                    Some(p) => Err(format!(
                        "the directory (version {v}) does not show {call}: {}",
                        pending(&p)
                    )),
                    None => Err(format!(
                        "the directory (version {v}) does not show {call}: no move is under way"
                    )),
                }
            }
        }
    }
}

/// What a mover does for a move of `[begin, end)` to a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MovePlan {
    /// Begin (or resume) this move.
    Move(PendingMove),
    /// The range is already the destination's and no move is pending.
    Done,
}

impl Directory {
    /// How to run a move of `[begin, end)` to `to`: resume the move under
    /// way if it is this one, report it done if the range is already
    /// `to`'s, else begin it from the set serving `begin` (the home group
    /// checks the rest when the move begins).
    pub fn plan_move(&self, begin: Uid, end: Uid, to: SetId) -> Result<MovePlan, String> {
        if let Some(p) = self.moving {
            if p.begin == begin && p.end == end && p.to == to {
                return Ok(MovePlan::Move(p));
            }
            return Err(format!(
                "a move of [{}, {}) from set {} to set {} is under way: run that command again to finish it first",
                p.begin, p.end, p.from, p.to
            ));
        }
        let overlapping = || {
            self.ranges
                .iter()
                .filter(|r| r.begin < end && begin < r.end)
        };
        if self.first_uncovered(begin, end).is_none() && overlapping().all(|r| r.set == to) {
            return Ok(MovePlan::Done);
        }
        let from = self
            .set_of(begin)
            .ok_or_else(|| format!("no set serves uid {begin}"))?;
        Ok(MovePlan::Move(PendingMove {
            begin,
            end,
            from,
            to,
        }))
    }

    /// The first uid of `[begin, end)` in no range, if any.
    fn first_uncovered(&self, begin: Uid, end: Uid) -> Option<Uid> {
        let mut at = begin;
        for r in self
            .ranges
            .iter()
            .filter(|r| r.end > begin && r.begin < end)
        {
            if r.begin > at {
                return Some(at);
            }
            at = at.max(r.end);
        }
        (at < end).then_some(at)
    }
}

/// Where one section of a store group's span stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Place {
    /// Served by this set (owners, raises, take-overs allowed).
    Serving,
    /// Never installed here: another set serves it, or nobody does.
    Absent,
    /// Frozen and handed to another set: the ceiling is final here.
    Moved {
        /// The set it went to.
        to: SetId,
    },
}

/// A run of sections with one non-serving [`Place`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaceRun {
    /// First section.
    pub first: SectionId,
    /// One past the last section.
    pub end: SectionId,
    /// Where they stand.
    pub place: Place,
}

/// What a store group holds of its span: sections not listed are served.
/// Runs are sorted, disjoint and merged, so the record stays small.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The non-serving runs.
    pub runs: Vec<PlaceRun>,
    /// The id of the newest move (or set addition) whose freeze or install
    /// this group applied: older ones are refused.
    pub last_move: u64,
}

impl Placement {
    /// Every section of `0..count` absent (a set that is not home starts
    /// serving nothing until it is installed).
    pub fn all_absent(count: SectionId) -> Self {
        Self {
            runs: vec![PlaceRun {
                first: 0,
                end: count,
                place: Place::Absent,
            }],
            last_move: 0,
        }
    }

    /// Where section `s` stands.
    pub fn place_of(&self, s: SectionId) -> Place {
        let i = self.runs.partition_point(|r| r.end <= s);
        match self.runs.get(i) {
            Some(r) if r.first <= s => r.place,
            _ => Place::Serving,
        }
    }

    /// Whether every section of `range` is served.
    pub fn all_serving(&self, range: Range<SectionId>) -> bool {
        !self
            .runs
            .iter()
            .any(|r| r.first < range.end && range.start < r.end)
    }

    /// The first section of `range` not served, and where it stands.
    pub fn first_not_serving(&self, range: Range<SectionId>) -> Option<(SectionId, Place)> {
        self.runs
            .iter()
            .find(|r| r.first < range.end && range.start < r.end)
            .map(|r| (r.first.max(range.start), r.place))
    }

    /// Sets `range` to `place`; `false` if it would exceed
    /// [`MAX_PLACEMENT_RUNS`] (nothing changes then).
    pub fn set(&mut self, range: Range<SectionId>, place: Place) -> bool {
        let mut out: Vec<PlaceRun> = Vec::with_capacity(self.runs.len() + 2);
        for r in &self.runs {
            if r.end <= range.start || range.end <= r.first {
                out.push(*r);
                continue;
            }
            if r.first < range.start {
                out.push(PlaceRun {
                    end: range.start,
                    ..*r
                });
            }
            if range.end < r.end {
                out.push(PlaceRun {
                    first: range.end,
                    ..*r
                });
            }
        }
        if place != Place::Serving {
            out.push(PlaceRun {
                first: range.start,
                end: range.end,
                place,
            });
        }
        out.sort_by_key(|r| r.first);
        let mut merged: Vec<PlaceRun> = Vec::with_capacity(out.len());
        for r in out {
            match merged.last_mut() {
                Some(l) if l.end == r.first && l.place == r.place => l.end = r.end,
                _ => merged.push(r),
            }
        }
        if merged.len() > MAX_PLACEMENT_RUNS {
            return false;
        }
        self.runs = merged;
        true
    }
}

#[cfg(test)]
#[path = "directory_tests.rs"]
mod tests;
