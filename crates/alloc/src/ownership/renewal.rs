//! A granted renewal's decisions (the control loop's renewal cycle,
//! `control/renewal.rs`): the
//! section list it carries, which sections to drop before the lease is
//! extended and which to claim after, and the take-overs that claim them.

use std::collections::BTreeSet;

use seqsvr_core::{Epoch, SectionId, MAX_SECTIONS_PER_CALL};

use crate::allocator::Allocator;

/// The sections a granted renewal routes to this AllocSvr, from the list
/// `cache` holds (its version, 0 for none, and the sections).
///
/// The renewal was sent naming `known`, the cached list's version then;
/// `list` is the list it carries (its version and sections), or `None`
/// when the store says the list is unchanged since `known`. A new list
/// replaces the cached one. "Unchanged" from a list this process does not
/// hold (none held, or another version than the one sent) is not a grant
/// that can be acted on: the cache is emptied so that the next renewal
/// asks for the whole list, and `None` is returned.
pub fn listed_sections(
    cache: &mut (u64, Vec<SectionId>),
    known: u64,
    list: Option<(u64, Vec<SectionId>)>,
) -> Option<Vec<SectionId>> {
    match list {
        Some(list) => *cache = list,
        None if cache.0 == 0 || cache.0 != known => {
            *cache = (0, Vec::new());
            return None;
        }
        None => {}
    }
    Some(cache.1.clone())
}

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

/// Consecutive runs `(first, count)` of sorted section ids (one store call
/// per run: take-overs at renewal, the reads of an adopt).
pub use seqsvr_core::section::runs;

/// The take-overs that claim `claim` (sorted, as [`reconcile`] returns it):
/// one per run of consecutive sections, cut into pieces of at most
/// [`MAX_SECTIONS_PER_CALL`], the most one store command holds. They are
/// sent together: a restart with 10^4 sections is a handful of take-overs
/// that the store commits together, not one write per section (and a run
/// of more would otherwise never be claimed).
pub fn claim_pieces(claim: &[SectionId]) -> Vec<(SectionId, u32)> {
    runs(claim)
        .into_iter()
        .flat_map(|(first, count)| {
            (0..count)
                .step_by(MAX_SECTIONS_PER_CALL as usize)
                .map(move |o| (first + o, (count - o).min(MAX_SECTIONS_PER_CALL)))
        })
        .collect()
}

/// What a take-over of sections `first .. first + count` names as known:
/// per section, the newest epoch this allocator installed (0: none). A
/// grant the store prepared for this process at a newer epoch (a handoff
/// to it, or a take-over whose reply was lost) then comes back unchanged
/// rather than costing another step (promise 4), and a section served here
/// before gets a new epoch and skips ahead (promise 1).
pub fn take_over_known(alloc: &Allocator, first: SectionId, count: u32) -> Vec<Epoch> {
    (first..first.saturating_add(count))
        .map(|s| alloc.known_epoch(s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_replaces_the_cache_and_unchanged_needs_the_one_sent() {
        let mut cache = (0, Vec::new());
        assert_eq!(listed_sections(&mut cache, 0, None), None, "none held");
        let got = listed_sections(&mut cache, 0, Some((4, vec![1, 2])));
        assert_eq!((got, &cache), (Some(vec![1, 2]), &(4, vec![1, 2])));
        assert_eq!(listed_sections(&mut cache, 4, None), Some(vec![1, 2]));
        assert_eq!(
            listed_sections(&mut cache, 3, None),
            None,
            "unchanged since a version other than the one held"
        );
        assert_eq!(cache, (0, Vec::new()), "forgotten: ask for the whole list");
        let got = listed_sections(&mut cache, 0, Some((5, vec![])));
        assert_eq!((got, &cache), (Some(vec![]), &(5, vec![])));
    }

    #[test]
    fn claims_are_cut_into_pieces_a_command_holds() {
        let max = MAX_SECTIONS_PER_CALL;
        let many: Vec<SectionId> = (10..10 + 2 * max + 3).chain([5000]).collect();
        assert_eq!(
            claim_pieces(&many),
            vec![(10, max), (10 + max, max), (10 + 2 * max, 3), (5000, 1)]
        );
        assert_eq!(claim_pieces(&[0, 1, 3]), vec![(0, 2), (3, 1)]);
        assert!(claim_pieces(&[]).is_empty());
    }

    #[test]
    fn take_overs_name_the_newest_epoch_installed() {
        let spec = seqsvr_core::SetSpec {
            set_id: 0,
            uid_begin: 0,
            uid_end: 30,
            section_size: 10,
            step: 10,
        };
        let a = Allocator::new(spec, &Default::default()).unwrap();
        let g = seqsvr_core::Grant {
            section: 1,
            epoch: 7,
            prev_ceiling: 0,
            max_seq: 10,
        };
        a.install(&[g]).unwrap();
        assert_eq!(take_over_known(&a, 0, 3), vec![0, 7, 0]);
        a.drop_section(1);
        assert_eq!(take_over_known(&a, 1, 1), vec![7], "kept after a drop");
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
}
