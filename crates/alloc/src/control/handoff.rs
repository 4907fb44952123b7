//! The releasing marks of planned moves (`handoff.rs`): a section being
//! handed off is neither dropped nor claimed by renewals until its handoff
//! ends; one whose handoff failed is claimed again by an early renewal at
//! a new epoch, never served again at the released one (the simulation's
//! bug 5).

use std::collections::BTreeMap;

use seqsvr_core::SectionId;

use crate::ownership::Released;

use super::{Control, Effect};

impl Control {
    /// The sections being handed off, for
    /// [`release_section`](crate::ownership::release_section) to check
    /// and mark (under the lock that orders changes to what is served).
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

    /// A handoff ended: the mark goes; if the store did not move the
    /// section, a renewal is asked for now, whose take-over claims it at a
    /// new epoch if it is still listed (fencing any late copy of the
    /// handoff).
    pub(super) fn handoff_settled(&mut self, section: SectionId, handed_off: bool) -> Vec<Effect> {
        self.releasing.remove(&section);
        if handed_off || self.fenced {
            Vec::new()
        } else {
            vec![Effect::WakeRenewal]
        }
    }
}
