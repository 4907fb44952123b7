//! Planned moves and adopts (`handoff.rs`; `docs/architecture/failover.md`,
//! Planned moves), in order:
//! 1. [`Control::release`]: the move's checks and the release
//!    ([`release_section`]: stop serving, mark releasing), then
//!    [`Effect::Handoff`]. A section being handed off is neither dropped
//!    nor claimed by renewals until its handoff ends.
//! 2. [`Event::HandoffAnswered`]: moved — the mark goes and the new owner
//!    is told ([`Effect::Adopt`]); failed or unknown — read it back
//!    ([`Effect::ReadBack`]).
//! 3. [`Event::HandoffChecked`]: whatever the store says
//!    ([`decide_after_handoff`]), the section stays dropped, never served
//!    again at the released epoch; the mark goes and an early renewal
//!    claims it at a new epoch if it is still listed, fencing any late
//!    copy of the handoff (the simulation's bug 5).
//!
//! Receiving side:
//! 1. [`Event::AdoptAsked`]: the adopt's checks ([`adopt_pending`]) —
//!    refused at once ([`Effect::AdoptDenied`]), a repeat (an empty
//!    [`Effect::Install`]), or the reads ([`Effect::ReadAdopt`]: the
//!    declarations of the sections' names, then their store records);
//! 2. [`Event::AdoptRead`]: installs only what the store confirms
//!    ([`decide_adopt`]), and only if the lease held all along since
//!    before the reads ([`may_act_on_read`]: promise 3).

use std::collections::BTreeMap;
use std::time::Instant;

use seqsvr_core::{Epoch, SectionId};
use seqsvr_store_api::SectionInfo;

use crate::allocator::Allocator;
use crate::error::{CallError, MoveError};
use crate::ownership::{
    admit, adopt_pending, decide_adopt, decide_after_handoff, may_act_on_read, release_section,
    AdoptNamed, Adoption, NotAdmitted, Released, Target,
};

use super::{AdoptCheck, Control, Effect};

impl Control {
    /// The sections being handed off, for
    /// [`release_section`] to check and mark.
    pub fn releasing_mut(&mut self) -> &mut BTreeMap<SectionId, Released> {
        &mut self.releasing
    }

    /// The sections being handed off.
    pub fn releasing(&self) -> &BTreeMap<SectionId, Released> {
        &self.releasing
    }

    /// Removes a releasing mark without asking for anything (a move that
    /// ended abnormally).
    pub fn unmark(&mut self, section: SectionId) {
        self.releasing.remove(&section);
    }

    /// Step 1 of a move of `section` to `to` (`target`: what the store's
    /// leader said of it): the checks and the release, then the store's
    /// handoff. Call it under the lock that orders changes to what
    /// `alloc` serves: a renewal must see the section served or marked.
    /// An invalid move changes nothing.
    pub fn release(
        &mut self,
        alloc: &Allocator,
        section: SectionId,
        to: &str,
        target: &Target,
    ) -> Result<(Released, Vec<Effect>), MoveError> {
        let me = self.me.as_ref().map_or("", |(id, _)| id.as_str());
        let released = release_section(alloc, &mut self.releasing, me, section, to, target)?;
        let handoff = Effect::Handoff {
            section,
            to: to.to_string(),
            epoch: released.epoch,
        };
        Ok((released, vec![handoff]))
    }

    /// Step 2: the store answered the handoff.
    pub(super) fn handoff_answered(
        &mut self,
        section: SectionId,
        answer: Result<(Epoch, String), String>,
    ) -> Vec<Effect> {
        if !self.releasing.contains_key(&section) {
            return Vec::new(); // not a move in progress
        }
        match answer {
            Ok((epoch, addr)) => {
                self.releasing.remove(&section);
                vec![Effect::Adopt {
                    section,
                    epoch,
                    addr,
                }]
            }
            Err(_) => vec![Effect::ReadBack { section }],
        }
    }

    /// Step 3: the read-back of a failed handoff. The section is left
    /// dropped either way (a late copy of the handoff is conditional only
    /// on the released epoch and could still move it); the mark goes, and
    /// a renewal is asked for now: its take-over claims the section at a
    /// new epoch if it is still listed.
    pub(super) fn handoff_checked(
        &mut self,
        section: SectionId,
        read: Option<SectionInfo>,
    ) -> Vec<Effect> {
        let Some(released) = self.releasing.remove(&section) else {
            return Vec::new();
        };
        let after = match (&self.me, read) {
            (Some((me, incarnation)), Some(info)) if info.section == section => Some(
                decide_after_handoff(&info, me, *incarnation, released.epoch),
            ),
            _ => None,
        };
        let mut out = vec![Effect::LeftDropped { section, after }];
        if !self.fenced {
            out.push(Effect::WakeRenewal);
        }
        out
    }

    /// An adopt arrived: refused at once if malformed, naming a section
    /// not in the set, or while not admitted (a lapsed lease, a fence:
    /// promise 3); answered at once if everything named is installed
    /// already; else the reads, with the lapse count they are taken at.
    pub(super) fn adopt_asked(&mut self, now: Instant, named: &[AdoptNamed]) -> Vec<Effect> {
        let admitted = admit(self.lease_valid(now), self.fenced).map_err(|e| self.refusal(e));
        match adopt_pending(named, admitted) {
            Err(e) => vec![Effect::AdoptDenied(e)],
            Ok(sections) if sections.is_empty() => vec![Effect::Install { grants: Vec::new() }],
            Ok(sections) => vec![Effect::ReadAdopt {
                sections,
                lapses_before: self.lapses,
            }],
        }
    }

    /// The error a call not admitted gets, naming this process.
    fn refusal(&self, why: NotAdmitted) -> CallError {
        let (alloc, incarnation) = self.me.clone().unwrap_or_default();
        match why {
            NotAdmitted::Fenced => CallError::Fenced { alloc, incarnation },
            NotAdmitted::LeaseExpired => CallError::LeaseExpired { alloc },
        }
    }

    /// An adopt's store read: install what the store confirms for this
    /// incarnation at exactly the epoch named, if the lease held since
    /// before the read (the answer may be stale otherwise: the section may
    /// have moved while the lease was gone, promise 3).
    pub(super) fn adopt_read(
        &mut self,
        now: Instant,
        checks: &[AdoptCheck],
        lapses_before: u64,
    ) -> Vec<Effect> {
        let (me, incarnation) = match &self.me {
            Some((me, incarnation)) => (me.as_str(), *incarnation),
            None => ("", 0),
        };
        let mut grants = Vec::with_capacity(checks.len());
        for c in checks {
            match decide_adopt(&c.info, me, incarnation, c.named, c.installed) {
                Ok(Adoption::Install(g)) => grants.push(g),
                Ok(Adoption::AlreadyInstalled { .. }) => {}
                Err(e) => return vec![Effect::AdoptRefused(e)],
            }
        }
        let valid = self.lease_valid(now);
        if !may_act_on_read(valid, self.fenced, self.lapses, lapses_before) {
            return vec![Effect::AdoptNotAdmitted];
        }
        vec![Effect::Install { grants }]
    }
}
