//! Which sections this AllocSvr may serve: the decisions of the ownership
//! protocol as pure functions (no I/O, no clock: whatever time they depend
//! on is passed in as a fact, such as "the lease had lapsed").
//!
//! `node.rs` and `handoff.rs` act on these decisions; the seeded
//! simulation calls the same functions, so what it checks is what runs.
//! The protocol is described in `docs/architecture/failover.md`
//! (leases, fencing, planned moves) and `docs/architecture/alloc.md`
//! (ownership, skip ahead).
//!
//! - [`reconcile`]: after a granted renewal, which sections to drop and
//!   which to claim.
//! - [`decide_adopt`]: another AllocSvr says "this section was handed to
//!   you"; the store's record decides whether to install it.
//! - [`decide_after_handoff`]: a handoff failed or its outcome is unknown;
//!   the store's record says whether the section is still ours (a renewal's
//!   take-over claims it again at a new epoch) or moved on. It is never
//!   served again at the released epoch.
//!
//! Every decision takes the store's word (a linearizable read or a renewal
//! granted by a confirmed leader), never another AllocSvr's, and never
//! memory alone, for what another process may have done (promise 3).

use std::collections::BTreeSet;

use seqsvr_core::{AllocId, Epoch, Grant, Incarnation, SectionId};
use seqsvr_store_api::SectionInfo;

/// What a granted renewal changes: sections to stop serving *before* the
/// lease is extended, and sections to claim (take over) after.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// Sections to stop serving now, in order.
    pub drop: Vec<SectionId>,
    /// Sections to claim with a take-over, in order.
    pub claim: Vec<SectionId>,
}

/// Reconciles what this AllocSvr serves with what a granted renewal lists.
///
/// - `served`: the sections served from memory now.
/// - `listed`: the sections the renewal lists (routed to this AllocSvr).
/// - `releasing`: sections being handed off right now (stopped, store
///   handoff or its check in flight). They are neither dropped nor claimed:
///   the handoff decides their fate, and a renewal read before the store's
///   handoff write must not take back a section just released (promise 3),
///   nor one claimed while the handoff's outcome is still unknown.
/// - `lapsed`: whether this AllocSvr's lease had run out before this
///   renewal was granted.
///
/// Rules (`docs/architecture/failover.md`, Leases):
/// - a served section no longer listed is dropped (promise 3: it may
///   already be someone else's);
/// - if the lease had lapsed, *every* served section is dropped and the
///   listed ones are claimed again: sections move only while their owner's
///   lease is gone, and one that moved away and back meanwhile carries
///   numbers this memory never saw (promise 1; the seeded simulation found
///   this, seed 779);
/// - a listed section not served (after the drops) is claimed: the take-over
///   skips ahead to the store's ceiling (promise 1).
pub fn reconcile(
    served: &[SectionId],
    listed: &[SectionId],
    releasing: &[SectionId],
    lapsed: bool,
) -> Reconciliation {
    let listed: BTreeSet<SectionId> = listed.iter().copied().collect();
    let releasing: BTreeSet<SectionId> = releasing.iter().copied().collect();
    let served: BTreeSet<SectionId> = served
        .iter()
        .copied()
        .filter(|s| !releasing.contains(s))
        .collect();
    let drop: Vec<SectionId> = served
        .iter()
        .copied()
        .filter(|s| lapsed || !listed.contains(s))
        .collect();
    let claim = listed
        .iter()
        .copied()
        .filter(|s| !releasing.contains(s) && (lapsed || !served.contains(s)))
        .collect();
    Reconciliation { drop, claim }
}

/// What to do with an adopt the store confirms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adoption {
    /// Serve this grant: every uid starts at `prev_ceiling` (the ceiling
    /// when the handed-off epoch began; skip ahead, promise 1).
    Install(Grant),
    /// This process already installed the section at the named epoch or a
    /// newer one: nothing to do (a repeated adopt is harmless).
    AlreadyInstalled {
        /// The newest epoch installed here.
        installed: Epoch,
    },
}

/// Why an adopt is refused. A refusal installs nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptRefusal {
    /// The store says another AllocSvr (or nobody) owns the section.
    #[error("section {section} is owned by {owner:?} in the store, not by this AllocSvr")]
    OwnedElsewhere {
        /// The section.
        section: SectionId,
        /// Its owner in the store (`None`: unowned).
        owner: Option<AllocId>,
    },
    /// The store's grant is for another process with this AllocSvr's id
    /// (an earlier one, or 0: routed here but not claimed yet; a take-over
    /// will claim it).
    #[error(
        "section {section} is held by incarnation {holder:x} in the store, not by this process"
    )]
    OtherIncarnation {
        /// The section.
        section: SectionId,
        /// The incarnation the store's epoch was granted to.
        holder: Incarnation,
    },
    /// The epoch named is not the section's epoch in the store (a replayed,
    /// late or forged adopt).
    #[error("section {section}: adopt names epoch {named}, the store has {current}")]
    StaleEpoch {
        /// The section.
        section: SectionId,
        /// The epoch the adopt named.
        named: Epoch,
        /// The section's epoch in the store.
        current: Epoch,
    },
    /// The store's record has no room to serve (its ceiling is not above
    /// its start): never trusted (promise 2).
    #[error("section {section}: the store's ceiling {max_seq} is not above its start {start}")]
    NoRoom {
        /// The section.
        section: SectionId,
        /// The epoch's start.
        start: u64,
        /// The ceiling.
        max_seq: u64,
    },
}

/// Decides an adopt of `info.section` at epoch `named`, from the store's
/// linearizable record `info`, for AllocSvr `me` running as `incarnation`,
/// which installed the section at epoch `installed` at most (0: never).
///
/// Installs only what the store confirms: the section is `me`'s, granted
/// to this very incarnation, at exactly the epoch named, and newer than
/// anything installed here. The grant starts at `info.start` (the ceiling
/// when the epoch began) with the store's ceiling `info.max_seq`: nobody
/// handed out anything above the start (promise 1), and the ceiling is
/// durable (promise 2). A forged, replayed or late adopt cannot make this
/// process serve a section it does not hold (promise 3), nor serve one
/// twice from an older skip-ahead point (promise 1).
pub fn decide_adopt(
    info: &SectionInfo,
    me: &str,
    incarnation: Incarnation,
    named: Epoch,
    installed: Epoch,
) -> Result<Adoption, AdoptRefusal> {
    let section = info.section;
    if named <= installed {
        return Ok(Adoption::AlreadyInstalled { installed });
    }
    if info.owner.as_deref() != Some(me) {
        return Err(AdoptRefusal::OwnedElsewhere {
            section,
            owner: info.owner.clone(),
        });
    }
    if info.incarnation != incarnation {
        return Err(AdoptRefusal::OtherIncarnation {
            section,
            holder: info.incarnation,
        });
    }
    if info.epoch != named {
        return Err(AdoptRefusal::StaleEpoch {
            section,
            named,
            current: info.epoch,
        });
    }
    if info.max_seq <= info.start {
        return Err(AdoptRefusal::NoRoom {
            section,
            start: info.start,
            max_seq: info.max_seq,
        });
    }
    Ok(Adoption::Install(Grant {
        section,
        epoch: info.epoch,
        prev_ceiling: info.start,
        max_seq: info.max_seq,
    }))
}

/// What to do with a released section whose handoff failed or whose
/// outcome is unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterHandoff {
    /// The store still has the section at the released epoch for this
    /// process (the handoff was refused, or has not landed *yet*). Leave it
    /// dropped: a take-over at a new epoch (the next renewal lists it and
    /// claims it, known epoch = the released one) fences any late copy of
    /// the handoff. Serving it again at the released epoch is unsafe: a
    /// late copy (hedged to another replica, parked at a paused one,
    /// delayed on a lossy link) is conditional only on that epoch, and
    /// would move the section while this process serves it (promise 3;
    /// the seeded simulation's bug 5).
    Reclaim,
    /// The section moved on (the handoff landed, or it changed hands
    /// since): leave it dropped. If it is ours again at a newer epoch, a
    /// renewal claims it with a take-over (skip ahead, promise 1).
    LeaveDropped {
        /// Its owner in the store.
        owner: Option<AllocId>,
        /// Its epoch in the store.
        epoch: Epoch,
    },
}

/// Decides, from the store's linearizable record `info`, what `me` running
/// as `incarnation` does with a section it released at epoch `released`
/// after the store handoff failed or its outcome is unknown.
///
/// Either way the section stays dropped; nothing is ever served again at
/// the released epoch. The record only tells whether it is still ours at
/// that epoch ([`AfterHandoff::Reclaim`]: the store has it for this very
/// incarnation at exactly the released epoch, so a renewal's take-over
/// claims it again, at a new epoch, with no one else having served it) or
/// moved on ([`AfterHandoff::LeaveDropped`]: promise 1, memory is never
/// trusted across an epoch change).
pub fn decide_after_handoff(
    info: &SectionInfo,
    me: &str,
    incarnation: Incarnation,
    released: Epoch,
) -> AfterHandoff {
    let ours = info.owner.as_deref() == Some(me)
        && info.incarnation == incarnation
        && info.epoch == released;
    if ours {
        AfterHandoff::Reclaim
    } else {
        AfterHandoff::LeaveDropped {
            owner: info.owner.clone(),
            epoch: info.epoch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "alloc-1";
    const INC: Incarnation = 0xA11C;

    fn info(owner: Option<&str>, incarnation: Incarnation, epoch: Epoch) -> SectionInfo {
        SectionInfo {
            section: 3,
            max_seq: 250,
            epoch,
            owner: owner.map(str::to_string),
            incarnation,
            start: 200,
        }
    }

    #[test]
    fn reconcile_table() {
        struct Case {
            what: &'static str,
            served: &'static [SectionId],
            listed: &'static [SectionId],
            releasing: &'static [SectionId],
            lapsed: bool,
            drop: &'static [SectionId],
            claim: &'static [SectionId],
        }
        let cases = [
            Case {
                what: "steady state: nothing to do",
                served: &[0, 1, 2],
                listed: &[0, 1, 2],
                releasing: &[],
                lapsed: false,
                drop: &[],
                claim: &[],
            },
            Case {
                what: "unlisted dropped, new claimed",
                served: &[0, 1, 2],
                listed: &[1, 2, 5],
                releasing: &[],
                lapsed: false,
                drop: &[0],
                claim: &[5],
            },
            Case {
                what: "lapsed: drop every served one, claim every listed one",
                served: &[0, 1, 2],
                listed: &[1, 2, 5],
                releasing: &[],
                lapsed: true,
                drop: &[0, 1, 2],
                claim: &[1, 2, 5],
            },
            Case {
                what: "releasing, still listed (renewal read before the handoff): not claimed",
                served: &[0],
                listed: &[0, 4],
                releasing: &[4],
                lapsed: false,
                drop: &[],
                claim: &[],
            },
            Case {
                what: "releasing, no longer listed, still marked served: not dropped mid-way",
                served: &[0, 4],
                listed: &[0],
                releasing: &[4],
                lapsed: false,
                drop: &[],
                claim: &[],
            },
            Case {
                what: "releasing with a lapsed lease: neither dropped nor claimed",
                served: &[0, 4],
                listed: &[0, 4],
                releasing: &[4],
                lapsed: true,
                drop: &[0],
                claim: &[0],
            },
            Case {
                what: "nothing listed: drop all",
                served: &[2, 0],
                listed: &[],
                releasing: &[],
                lapsed: false,
                drop: &[0, 2],
                claim: &[],
            },
            Case {
                what: "unsorted, duplicated input: sorted, unique output",
                served: &[],
                listed: &[7, 3, 7, 3],
                releasing: &[],
                lapsed: false,
                drop: &[],
                claim: &[3, 7],
            },
        ];
        for c in cases {
            let r = reconcile(c.served, c.listed, c.releasing, c.lapsed);
            assert_eq!(r.drop, c.drop, "{}: drop", c.what);
            assert_eq!(r.claim, c.claim, "{}: claim", c.what);
            for s in &r.claim {
                assert!(
                    !c.releasing.contains(s),
                    "{}: claimed a releasing one",
                    c.what
                );
            }
        }
    }

    #[test]
    fn adopt_installs_only_what_the_store_confirms() {
        let grant = Grant {
            section: 3,
            epoch: 7,
            prev_ceiling: 200,
            max_seq: 250,
        };
        let big = 1u64 << 63;
        /// What, the store's record, the epoch named, the newest installed,
        /// and the decision.
        type Case = (
            &'static str,
            SectionInfo,
            Epoch,
            Epoch,
            Result<Adoption, AdoptRefusal>,
        );
        let cases: Vec<Case> = vec![
            (
                "handed to this process at the named epoch",
                info(Some(ME), INC, 7),
                7,
                5,
                Ok(Adoption::Install(grant)),
            ),
            (
                "never installed before",
                info(Some(ME), INC, 7),
                7,
                0,
                Ok(Adoption::Install(grant)),
            ),
            (
                "replayed: already installed at that epoch",
                info(Some(ME), INC, 7),
                7,
                7,
                Ok(Adoption::AlreadyInstalled { installed: 7 }),
            ),
            (
                "late: a newer epoch is installed",
                info(Some(ME), INC, 9),
                7,
                9,
                Ok(Adoption::AlreadyInstalled { installed: 9 }),
            ),
            (
                "forged: the store says someone else owns it",
                info(Some("alloc-2"), INC, 7),
                7,
                0,
                Err(AdoptRefusal::OwnedElsewhere {
                    section: 3,
                    owner: Some("alloc-2".into()),
                }),
            ),
            (
                "forged: unowned",
                info(None, 0, 7),
                7,
                0,
                Err(AdoptRefusal::OwnedElsewhere {
                    section: 3,
                    owner: None,
                }),
            ),
            (
                "prepared for an earlier process with this id",
                info(Some(ME), 0xBEEF, 7),
                7,
                0,
                Err(AdoptRefusal::OtherIncarnation {
                    section: 3,
                    holder: 0xBEEF,
                }),
            ),
            (
                "routed here but not claimed yet (incarnation 0)",
                info(Some(ME), 0, 7),
                7,
                0,
                Err(AdoptRefusal::OtherIncarnation {
                    section: 3,
                    holder: 0,
                }),
            ),
            (
                "forged: epoch 2^63",
                info(Some(ME), INC, 7),
                big,
                5,
                Err(AdoptRefusal::StaleEpoch {
                    section: 3,
                    named: big,
                    current: 7,
                }),
            ),
            (
                "replayed after the section moved on (store has a newer epoch)",
                info(Some(ME), INC, 8),
                7,
                5,
                Err(AdoptRefusal::StaleEpoch {
                    section: 3,
                    named: 7,
                    current: 8,
                }),
            ),
            (
                "store record with no room",
                SectionInfo {
                    max_seq: 200,
                    ..info(Some(ME), INC, 7)
                },
                7,
                0,
                Err(AdoptRefusal::NoRoom {
                    section: 3,
                    start: 200,
                    max_seq: 200,
                }),
            ),
        ];
        for (what, info, named, installed, want) in cases {
            assert_eq!(
                decide_adopt(&info, ME, INC, named, installed),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn after_a_failed_handoff_reclaim_only_if_untouched() {
        let reclaim = AfterHandoff::Reclaim;
        let cases = [
            (
                "handoff refused, or not landed yet: still ours at the released epoch",
                info(Some(ME), INC, 7),
                7,
                reclaim,
            ),
            (
                "handoff landed, reply lost",
                info(Some("alloc-2"), 0xB0B, 8),
                7,
                AfterHandoff::LeaveDropped {
                    owner: Some("alloc-2".into()),
                    epoch: 8,
                },
            ),
            (
                "moved away and back: ours at a newer epoch (a take-over claims it)",
                info(Some(ME), INC, 9),
                7,
                AfterHandoff::LeaveDropped {
                    owner: Some(ME.into()),
                    epoch: 9,
                },
            ),
            (
                "replaced: same id, another incarnation",
                info(Some(ME), 0xBEEF, 7),
                7,
                AfterHandoff::LeaveDropped {
                    owner: Some(ME.into()),
                    epoch: 7,
                },
            ),
            (
                "released epoch forged or confused (2^63)",
                info(Some(ME), INC, 7),
                1 << 63,
                AfterHandoff::LeaveDropped {
                    owner: Some(ME.into()),
                    epoch: 7,
                },
            ),
            (
                "unowned",
                info(None, 0, 8),
                7,
                AfterHandoff::LeaveDropped {
                    owner: None,
                    epoch: 8,
                },
            ),
        ];
        for (what, info, released, want) in cases {
            assert_eq!(
                decide_after_handoff(&info, ME, INC, released),
                want,
                "{what}"
            );
        }
    }
}
