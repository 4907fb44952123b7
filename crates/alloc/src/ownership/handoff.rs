//! A handoff's decisions (`handoff.rs`), on both sides: the releasing
//! AllocSvr's checks and release of a move, and what it does when the
//! store's handoff failed or its outcome is unknown; the receiving
//! AllocSvr's checks of an adopt before and after reading the store.

use std::collections::BTreeMap;

use seqsvr_core::{AllocId, Epoch, Grant, Incarnation, SectionId};
use seqsvr_store_api::SectionInfo;

use crate::allocator::Allocator;
pub use crate::error::AdoptRefusal;
use crate::error::{CallError, MoveError};

/// Most sections one adopt may name (a handoff sends one; a bound keeps a
/// forged request from costing many store reads).
pub const MAX_ADOPT: usize = 1024;

/// A section being released: what it was served under when it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The epoch released.
    pub epoch: Epoch,
    /// Its ceiling here when it stopped (durable under `epoch`).
    pub ceiling: u64,
}

/// What the store's leader said of a move's target, asked before anything
/// is released: the store's own checks of a handoff's target (registered,
/// neither fenced nor draining), made where a refusal still costs nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Registered, neither fenced nor draining: the store would hand it
    /// the section.
    Ready,
    /// Not in the store's list of AllocSvrs.
    NotRegistered,
    /// Fenced by an operator.
    Fenced,
    /// Being drained.
    Draining,
}

impl Target {
    /// The refusal of a move of `section` to `to`, unless the target is
    /// [`Target::Ready`].
    fn check(&self, section: SectionId, to: &str) -> Result<(), MoveError> {
        let to = to.to_string();
        match self {
            Target::Ready => Ok(()),
            Target::NotRegistered => Err(MoveError::UnknownTarget { section, to }),
            Target::Fenced => Err(MoveError::TargetUnfit {
                section,
                to,
                state: "fenced",
            }),
            Target::Draining => Err(MoveError::TargetUnfit {
                section,
                to,
                state: "draining",
            }),
        }
    }
}

/// Checks a move of `section` from AllocSvr `me` to `to`, then releases
/// the section: stops serving it and marks it in `releasing` (the
/// sections being handed off, which renewals neither claim nor drop).
/// Call it under the lock that orders changes to what is served (the
/// ownership lock): a renewal must see the section either served or
/// marked.
///
/// Stopping comes before the store hands the section over, so no number
/// is handed out here after the new owner starts (promise 3, hence promise
/// 1 across owners). An invalid move changes nothing: a section not in the
/// set, no target or this AllocSvr itself, a section already being handed
/// off, one not served here (also if it was dropped or taken again
/// between the two looks), or a `target` the store's leader did not list
/// as able to take it. The last matters most: once released, a section is
/// never served again at the released epoch, even if the store refuses the
/// handoff (a late copy of it could still land), so a move the store is
/// known to refuse would cost an outage and a step for nothing.
pub fn release_section(
    alloc: &Allocator,
    releasing: &mut BTreeMap<SectionId, Released>,
    me: &str,
    section: SectionId,
    to: &str,
    target: &Target,
) -> Result<Released, MoveError> {
    if !alloc.spec().has_section(section) {
        return Err(MoveError::UnknownSection { section });
    }
    if to.is_empty() {
        return Err(MoveError::NoTarget);
    }
    if to == me {
        return Err(MoveError::ToSelf { section });
    }
    if releasing.contains_key(&section) {
        return Err(MoveError::Releasing { section });
    }
    let state = alloc
        .section_state(section)
        .ok_or(MoveError::NotServed { section })?;
    target.check(section, to)?;
    if !alloc.drop_section_if_epoch(section, state.epoch) {
        return Err(MoveError::NotServed { section });
    }
    let released = Released {
        epoch: state.epoch,
        ceiling: state.ceiling,
    };
    releasing.insert(section, released);
    Ok(released)
}

/// One section an adopt names, with what this process knows of it when
/// the adopt arrives ([`AdoptNamed::of`] reads it from the allocator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdoptNamed {
    /// The section.
    pub section: SectionId,
    /// The epoch the adopt names.
    pub epoch: Epoch,
    /// The newest epoch installed here (0: never); `None`: the set has no
    /// such section.
    pub installed: Option<Epoch>,
}

impl AdoptNamed {
    /// `section` at `epoch` as named, with what `alloc` installed of it.
    pub fn of(alloc: &Allocator, section: SectionId, epoch: Epoch) -> Self {
        let installed = (alloc.spec().has_section(section)).then(|| alloc.known_epoch(section));
        Self {
            section,
            epoch,
            installed,
        }
    }
}

/// Checks an adopt naming `named` before anything is read from the store,
/// given whether this process is admitted to serve now ([`admit`](super::admit));
/// returns the (section, epoch) pairs not installed here yet at the named
/// epoch or a newer one (empty: a repeat, answered at once).
///
/// Refused, changing nothing: an empty adopt or one of more than
/// [`MAX_ADOPT`] sections, any adopt while not admitted (a lease that ran
/// out, a fenced process: promise 3), one naming a section not in the set.
pub fn adopt_pending(
    named: &[AdoptNamed],
    admitted: Result<(), CallError>,
) -> Result<Vec<(SectionId, Epoch)>, CallError> {
    if named.is_empty() || named.len() > MAX_ADOPT {
        return Err(CallError::Invalid(format!(
            "an adopt names 1..={MAX_ADOPT} sections, not {}",
            named.len()
        )));
    }
    admitted?;
    if let Some(n) = named.iter().find(|n| n.installed.is_none()) {
        return Err(CallError::UnknownSection { section: n.section });
    }
    Ok(named
        .iter()
        .filter(|n| n.installed.is_some_and(|installed| installed < n.epoch))
        .map(|n| (n.section, n.epoch))
        .collect())
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

/// Decides an adopt of `info.section` at epoch `named`, from the store's
/// linearizable record `info`, for AllocSvr `me` running as `incarnation`,
/// which installed the section at epoch `installed` at most (0: never).
///
/// Installs only what the store confirms: the section is `me`'s, granted
/// to this very incarnation, at exactly the epoch named, and newer than
/// anything installed here. The grant is the record's
/// ([`SectionRecord::grant`](seqsvr_core::SectionRecord::grant)): it
/// starts at the ceiling when the epoch began with the store's ceiling: nobody
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
    let (section, r) = (info.section, &info.record);
    if named <= installed {
        return Ok(Adoption::AlreadyInstalled { installed });
    }
    if r.owner.as_deref() != Some(me) {
        return Err(AdoptRefusal::OwnedElsewhere {
            section,
            owner: r.owner.clone(),
        });
    }
    if r.incarnation != incarnation {
        return Err(AdoptRefusal::OtherIncarnation {
            section,
            holder: r.incarnation,
        });
    }
    if r.epoch != named {
        return Err(AdoptRefusal::StaleEpoch {
            section,
            named,
            current: r.epoch,
        });
    }
    if r.max_seq <= r.start {
        return Err(AdoptRefusal::NoRoom {
            section,
            start: r.start,
            max_seq: r.max_seq,
        });
    }
    Ok(Adoption::Install(r.grant(section)))
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
    let r = &info.record;
    let ours =
        r.owner.as_deref() == Some(me) && r.incarnation == incarnation && r.epoch == released;
    if ours {
        AfterHandoff::Reclaim
    } else {
        AfterHandoff::LeaveDropped {
            owner: r.owner.clone(),
            epoch: r.epoch,
        }
    }
}

#[cfg(test)]
mod tests {
    use seqsvr_core::SectionRecord;

    use super::*;

    const ME: &str = "alloc-1";
    const INC: Incarnation = 0xA11C;

    fn info(owner: Option<&str>, incarnation: Incarnation, epoch: Epoch) -> SectionInfo {
        SectionInfo {
            section: 3,
            record: SectionRecord {
                max_seq: 250,
                epoch,
                owner: owner.map(str::to_string),
                incarnation,
                start: 200,
            },
        }
    }

    fn alloc() -> Allocator {
        let spec = seqsvr_core::SetSpec {
            set_id: 0,
            uid_begin: 0,
            uid_end: 40,
            section_size: 10,
            step: 10,
        };
        let a = Allocator::new(spec, &Default::default()).unwrap();
        let grant = |section, epoch| Grant {
            section,
            epoch,
            prev_ceiling: 0,
            max_seq: 10,
        };
        a.install(&[grant(0, 5), grant(1, 6)]).unwrap();
        a
    }

    #[test]
    fn release_checks_then_stops_serving_and_marks() {
        let a = alloc();
        let mut releasing = BTreeMap::new();
        let refused = [
            (9, "alloc-2", MoveError::UnknownSection { section: 9 }),
            (0, "", MoveError::NoTarget),
            (0, ME, MoveError::ToSelf { section: 0 }),
            (2, "alloc-2", MoveError::NotServed { section: 2 }),
        ];
        for (section, to, want) in refused {
            assert_eq!(
                release_section(&a, &mut releasing, ME, section, to, &Target::Ready),
                Err(want)
            );
        }
        let to = || "alloc-2".to_string();
        let unfit = [
            (
                Target::NotRegistered,
                MoveError::UnknownTarget {
                    section: 0,
                    to: to(),
                },
            ),
            (
                Target::Fenced,
                MoveError::TargetUnfit {
                    section: 0,
                    to: to(),
                    state: "fenced",
                },
            ),
            (
                Target::Draining,
                MoveError::TargetUnfit {
                    section: 0,
                    to: to(),
                    state: "draining",
                },
            ),
        ];
        for (target, want) in unfit {
            assert_eq!(
                release_section(&a, &mut releasing, ME, 0, "alloc-2", &target),
                Err(want)
            );
        }
        // A section not served here says so, whatever the target.
        assert_eq!(
            release_section(&a, &mut releasing, ME, 2, "alloc-9", &Target::NotRegistered),
            Err(MoveError::NotServed { section: 2 })
        );
        assert!(
            releasing.is_empty() && a.is_serving(0),
            "refusals change nothing"
        );
        assert_eq!(a.section_state(0).map(|s| s.epoch), Some(5));
        let released =
            release_section(&a, &mut releasing, ME, 0, "alloc-2", &Target::Ready).unwrap();
        assert_eq!(
            released,
            Released {
                epoch: 5,
                ceiling: 10
            }
        );
        assert!(!a.is_serving(0), "stopped before the store hands it over");
        assert_eq!(releasing.get(&0), Some(&released));
        assert_eq!(
            release_section(&a, &mut releasing, ME, 0, "alloc-3", &Target::Ready),
            Err(MoveError::Releasing { section: 0 })
        );
        assert!(a.is_serving(1), "other sections unaffected");
    }

    #[test]
    fn adopt_checks_before_the_store_read() {
        let a = alloc();
        let ok = || Ok(());
        let pend = |named: &[(SectionId, Epoch)], admitted| {
            let named: Vec<AdoptNamed> = (named.iter())
                .map(|&(s, e)| AdoptNamed::of(&a, s, e))
                .collect();
            adopt_pending(&named, admitted)
        };
        assert!(matches!(pend(&[], ok()), Err(CallError::Invalid(_))));
        let many = vec![(0, 9); MAX_ADOPT + 1];
        assert!(matches!(pend(&many, ok()), Err(CallError::Invalid(_))));
        let expired = || Err(CallError::LeaseExpired { alloc: ME.into() });
        assert_eq!(pend(&[(0, 9)], expired()), expired().map(|()| vec![]));
        assert_eq!(
            pend(&[(0, 9), (4, 1)], ok()),
            Err(CallError::UnknownSection { section: 4 })
        );
        assert_eq!(pend(&[(0, 5), (1, 3)], ok()), Ok(vec![]), "a repeat");
        assert_eq!(
            pend(&[(0, 5), (1, 7), (2, 1)], ok()),
            Ok(vec![(1, 7), (2, 1)])
        );
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
                {
                    let mut full = info(Some(ME), INC, 7);
                    full.record.max_seq = 200;
                    full
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
