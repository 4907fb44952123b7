//! The invariants checked while a run goes on (promises 2, 3 and 4 of
//! `docs/architecture/promises.md`); promise 1 is checked at the end over
//! every client-visible result by the real checker
//! (`seqsvr_core::checker::check`): numbers handed out, a batch's copies of
//! a uid in request order, and every `Current` answer against the numbers
//! clients received around it.
//!
//! - Promise 2: every number handed out is at or below its section's
//!   *committed* ceiling at that instant.
//! - Promise 3: checked where requests are admitted (`alloc.rs`): when an
//!   AllocSvr process admits a request for a section it serves, no other
//!   process serves it (running, not fenced, lease valid by its own clock,
//!   section installed) — a twin with the same id counts as another.
//! - Promise 4, bounded gap: let `hi` be the highest number ever handed
//!   out in a section and `unused` the number of take-overs of it since a
//!   number was last handed out under the latest take-over's epoch. Then
//!   the committed ceiling never exceeds `hi + (1 + unused) · step` —
//!   checked at every committed take-over and raise. So a single failover
//!   or restart (`unused = 0` before it) skips at most one step, and each
//!   take-over whose owner died before handing anything out adds one more.
//!   The largest skip at a first number after a take-over is measured.
//!
//! Sections are those of the grid every set follows (section `s` is the
//! same uids in every set), so these checks hold across sets: promise 3
//! compares processes of every set, `hi` is the highest number any set
//! handed out. A range move's install in the destination counts as one
//! more take-over (it starts a step above the source's final ceiling); the
//! largest skip at the first number after a move is measured too.

use std::collections::BTreeMap;

use seqsvr_core::checker::Observation;
use seqsvr_core::{Epoch, Grant, SectionId, SetSpec};

use crate::net::{fmt_time, Time};

/// Promise numbers of the id checks in [`Violation::promise`] (the
/// guarantees of docs/ids.md; 1–5 are the sequence numbers' promises).
pub const ID_UNIQUE: u8 = 11;
/// Ids of a worker id ordered within and across holdings.
pub const ID_ORDER: u8 = 12;
/// No id above the committed ceiling.
pub const ID_CEILING: u8 = 13;
/// No two live processes hold one worker id.
pub const ID_EXCLUSIVE: u8 = 14;

/// The name of an id check, for reports.
pub fn check_name(promise: u8) -> Option<&'static str> {
    Some(match promise {
        ID_UNIQUE => "ids unique",
        ID_ORDER => "ids ordered per worker",
        ID_CEILING => "ids under the committed ceiling",
        ID_EXCLUSIVE => "one holder per worker id",
        _ => return None,
    })
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// When it was found (virtual time).
    pub at: Time,
    /// The promise it breaks (`docs/architecture/promises.md`; 0: a sanity
    /// check of the model).
    pub promise: u8,
    /// What happened.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(name) = check_name(self.promise) {
            return write!(f, "at {}: {name}: {}", fmt_time(self.at), self.what);
        }
        match self.promise {
            0 => write!(f, "at {}: {}", fmt_time(self.at), self.what),
            p => write!(f, "at {}: promise {p}: {}", fmt_time(self.at), self.what),
        }
    }
}

/// Per-section bookkeeping of the checks.
#[derive(Debug)]
pub(crate) struct Monitor {
    /// The step.
    step: u64,
    /// Highest number handed out, per section.
    hi: Vec<u64>,
    /// Take-overs since a number was handed out under the latest one.
    unused: Vec<u64>,
    /// The latest take-over's set and epoch, per section.
    grant_epoch: Vec<(usize, Epoch)>,
    /// The latest take-over has not handed anything out yet.
    fresh: Vec<bool>,
    /// A move installed the section since the last number handed out.
    moved_in: Vec<bool>,
    /// Largest skip measured at a first number after a take-over.
    max_skip: u64,
    /// The same, after a single take-over (one failover or restart).
    max_single_skip: u64,
    /// The same, at the first number after a range move (install and
    /// take-over in the destination).
    max_move_skip: u64,
    /// When each section last handed out a number.
    last_served: Vec<Time>,
    /// Per (set, section), the newest epoch any process installed.
    installed: BTreeMap<(usize, SectionId), Epoch>,
    /// What broke, in order.
    pub violations: Vec<Violation>,
    /// Every number clients received, and every `Current` answer.
    pub observations: Vec<Observation<Time>>,
}

impl Monitor {
    /// A monitor for `spec`.
    pub(crate) fn new(spec: &SetSpec) -> Self {
        let n = spec.section_count() as usize;
        Self {
            step: spec.step,
            hi: vec![0; n],
            unused: vec![0; n],
            grant_epoch: vec![(0, 0); n],
            fresh: vec![false; n],
            moved_in: vec![false; n],
            max_skip: 0,
            max_single_skip: 0,
            max_move_skip: 0,
            last_served: vec![0; n],
            installed: BTreeMap::new(),
            violations: Vec::new(),
            observations: Vec::new(),
        }
    }

    /// Records a violation.
    pub(crate) fn violate(&mut self, at: Time, promise: u8, what: String) {
        self.violations.push(Violation { at, promise, what });
    }

    fn bound(&self, s: usize) -> u64 {
        self.hi[s] + self.step * (1 + self.unused[s])
    }

    /// A take-over (or handoff) of one section committed in `set`. A
    /// grant the store had prepared and returned unchanged began nothing
    /// new and is not counted; returns whether this one began a new epoch.
    pub(crate) fn on_takeover(&mut self, now: Time, set: usize, g: &Grant) -> bool {
        let s = g.section as usize;
        if (set, g.epoch) == self.grant_epoch[s] {
            return false;
        }
        if g.prev_ceiling > self.bound(s) {
            let what = format!(
                "take-over of section {} at ceiling {}: more than {} step(s) above the highest number handed out ({})",
                g.section,
                g.prev_ceiling,
                1 + self.unused[s],
                self.hi[s]
            );
            self.violate(now, 4, what);
        }
        self.unused[s] += 1;
        self.grant_epoch[s] = (set, g.epoch);
        self.fresh[s] = true;
        true
    }

    /// A process of `set` installed `section` at `epoch` (or holds it at
    /// that epoch after an install).
    pub(crate) fn on_installed(&mut self, set: usize, section: SectionId, epoch: Epoch) {
        let e = self.installed.entry((set, section)).or_default();
        *e = (*e).max(epoch);
    }

    /// A take-over by `alloc`'s `incarnation` committed in `set`; `prev`
    /// holds each section's (owner, incarnation, epoch) before it. Promise
    /// 4, a lost reply or a lost adopt costs no extra step: a take-over may
    /// begin a new epoch over one the store granted to this very process
    /// only if the process installed that grant (a grant it never
    /// installed is handed back unchanged, `SetState::take_over`).
    pub(crate) fn on_claim(
        &mut self,
        now: Time,
        set: usize,
        alloc: &str,
        incarnation: u64,
        prev: &[(Option<String>, u64, Epoch)],
        grants: &[Grant],
    ) {
        for (g, (owner, inc, epoch)) in grants.iter().zip(prev) {
            let mine = owner.as_deref() == Some(alloc) && *inc == incarnation && *inc != 0;
            let installed = self.installed.get(&(set, g.section)).copied();
            if g.epoch != *epoch && mine && installed.unwrap_or(0) < *epoch {
                let what = format!(
                    "take-over of section {} by {alloc} ({incarnation:x}) began epoch {} over epoch {}, granted to the same process and never installed: a lost reply cost a step",
                    g.section, g.epoch, epoch
                );
                self.violate(now, 4, what);
            }
        }
    }

    /// A range move installed `section` in its destination `set` at
    /// `ceiling`, under `epoch`: one more step than a take-over may add
    /// (the install starts a step above the source's final ceiling, itself
    /// within the bound), and it counts as an unused take-over until a
    /// number is handed out under a later one. A number the source hands
    /// out after it (a request admitted before the freeze, its number taken
    /// after a pause) is not under it.
    pub(crate) fn on_install(
        &mut self,
        now: Time,
        set: usize,
        section: SectionId,
        ceiling: u64,
        epoch: Epoch,
    ) {
        let s = section as usize;
        if ceiling > self.bound(s) + self.step {
            let what = format!(
                "install of section {section} at ceiling {ceiling}: more than {} step(s) above the highest number handed out ({})",
                2 + self.unused[s],
                self.hi[s]
            );
            self.violate(now, 4, what);
        }
        self.unused[s] += 1;
        self.grant_epoch[s] = (set, epoch);
        self.fresh[s] = false;
        self.moved_in[s] = true;
    }

    /// A raise committed.
    pub(crate) fn on_raise(&mut self, now: Time, section: SectionId, max_seq: u64) {
        let s = section as usize;
        if max_seq > self.bound(s) {
            let what = format!(
                "raise of section {section} to {max_seq}: more than {} step(s) above the highest number handed out ({})",
                1 + self.unused[s],
                self.hi[s]
            );
            self.violate(now, 4, what);
        }
    }

    /// AllocSvr process `a` of `set` handed out `v` in section `s`, serving
    /// it under `epoch`; `ceiling` is the section's committed ceiling in
    /// that set now.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_handout(
        &mut self,
        now: Time,
        a: usize,
        set: usize,
        s: SectionId,
        epoch: Epoch,
        v: u64,
        ceiling: u64,
    ) {
        let i = s as usize;
        if v > ceiling {
            let what = format!(
                "p{a} handed out {v} in section {s} of set {set}, above the committed ceiling {ceiling}"
            );
            self.violate(now, 2, what);
        }
        if (set, epoch) == self.grant_epoch[i] {
            if std::mem::take(&mut self.fresh[i]) {
                let skip = v.saturating_sub(self.hi[i] + 1);
                self.max_skip = self.max_skip.max(skip);
                if self.unused[i] == 1 && !self.moved_in[i] {
                    self.max_single_skip = self.max_single_skip.max(skip);
                }
                if std::mem::take(&mut self.moved_in[i]) {
                    self.max_move_skip = self.max_move_skip.max(skip);
                }
            }
            self.unused[i] = 0;
        }
        self.hi[i] = self.hi[i].max(v);
        self.last_served[i] = now;
    }

    /// When section `s` last handed out a number.
    pub(crate) fn last_served(&self, s: SectionId) -> Time {
        self.last_served[s as usize]
    }

    /// The largest skips, in steps: after a single take-over, overall
    /// (several take-overs before a number was handed out), and after a
    /// range move.
    pub(crate) fn max_skip_steps(&self) -> (f64, f64, f64) {
        let step = self.step as f64;
        (
            self.max_single_skip as f64 / step,
            self.max_skip as f64 / step,
            self.max_move_skip as f64 / step,
        )
    }
}
