//! How many sections each AllocSvr owns, kept as commands apply instead
//! of counted by a scan of every section.
//!
//! `Status` reports each AllocSvr's section count. Counting them by a scan
//! is O(sections) under the state machine's read lock, which `apply` needs
//! for writing: a status flood would delay applies (and with them
//! renewals). [`OwnerCounts`] is derived state: it follows the sections
//! a command marks dirty (a section whose owner changed is always marked,
//! or it would not be written back), so no command has to
//! remember it, and it is never serialized — it is rebuilt from the
//! sections when a state is loaded or a snapshot installed, so the
//! state machine's encoding and snapshots do not change
//! (`docs/architecture/encoding.md`).

use std::collections::{BTreeMap, HashMap};

use seqsvr_core::AllocId;

/// Sections owned per AllocSvr, derived from the section records.
#[derive(Debug, Clone, Default)]
pub struct OwnerCounts {
    /// Per section, its owner as counted: an index into `names` (0: none).
    of: Vec<u32>,
    /// Owner names by index; index 0 is "no owner".
    names: Vec<AllocId>,
    /// The index of each name in `names`.
    index: HashMap<AllocId, u32>,
    /// Sections owned, by index.
    counts: Vec<u32>,
}

/// Derived: two states with equal records have equal counts, so the
/// counts never make two states differ (nor the same state, loaded and
/// rebuilt, differ from the one that was saved).
impl PartialEq for OwnerCounts {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for OwnerCounts {}

impl OwnerCounts {
    /// The counts of the sections whose owners `owners` lists in order,
    /// by a full scan.
    pub fn of_sections<'a>(owners: impl Iterator<Item = Option<&'a AllocId>>) -> Self {
        let mut c = Self {
            of: Vec::new(),
            names: vec![AllocId::new()],
            index: HashMap::new(),
            counts: vec![0],
        };
        for owner in owners {
            let i = c.intern(owner);
            c.counts[i as usize] += 1;
            c.of.push(i);
        }
        c
    }

    /// Follows a command's changes: `owner(s)` is section `s`'s owner now,
    /// of `len` sections; `changed` the sections it marked; `all` whether
    /// it marked every one. A state never counted (decoded, not yet
    /// rebuilt) is counted in full.
    pub fn update<'a>(
        &mut self,
        owner: impl Fn(usize) -> Option<&'a AllocId>,
        len: usize,
        changed: impl Iterator<Item = usize>,
        all: bool,
    ) {
        let uncounted = self.names.is_empty() || self.of.len() != len;
        if uncounted || all {
            *self = Self::of_sections((0..len).map(&owner));
            return;
        }
        for s in changed {
            let new = self.intern(owner(s));
            let old = std::mem::replace(&mut self.of[s], new);
            self.counts[old as usize] -= 1;
            self.counts[new as usize] += 1;
        }
    }

    /// How many sections `alloc` owns.
    pub fn count(&self, alloc: &str) -> u32 {
        self.index
            .get(alloc)
            .map_or(0, |&i| self.counts[i as usize])
    }

    /// How many sections have an owner.
    pub fn total(&self) -> u32 {
        self.counts.iter().skip(1).sum()
    }

    /// Every owner with at least one section, and its count (for tests
    /// and checks: what a full scan would say).
    pub fn all(&self) -> BTreeMap<AllocId, u32> {
        self.index
            .iter()
            .filter(|(_, &i)| self.counts[i as usize] > 0)
            .map(|(n, &i)| (n.clone(), self.counts[i as usize]))
            .collect()
    }

    /// The index of `owner`, added if new (names are few: the AllocSvrs
    /// ever seen since the last rebuild).
    fn intern(&mut self, owner: Option<&AllocId>) -> u32 {
        let Some(name) = owner else { return 0 };
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.clone());
        self.index.insert(name.clone(), i);
        self.counts.push(0);
        i
    }
}

/// What a full scan says each owner owns, of the sections whose owners
/// `owners` lists.
pub fn scan<'a>(owners: impl Iterator<Item = Option<&'a AllocId>>) -> BTreeMap<AllocId, u32> {
    let mut m = BTreeMap::new();
    for o in owners.flatten() {
        *m.entry(o.clone()).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use seqsvr_core::{codec, SetSpec};

    use super::*;
    use crate::command::Command;
    use crate::state::SetState;

    /// Any command that can change owners (or refuse to), over 3
    /// AllocSvrs and 8 sections; `None` stands for a snapshot restore.
    fn step() -> impl Strategy<Value = Option<Command>> {
        let alloc = 0u32..3;
        let cmd = prop_oneof![
            (
                alloc.clone(),
                0u32..8,
                proptest::collection::vec(0u64..5, 1..4)
            )
                .prop_map(|(a, first, known)| Command::TakeOver {
                    alloc: format!("a{a}"),
                    incarnation: u64::from(a) + 1,
                    first,
                    known,
                }),
            (
                alloc.clone(),
                0u32..8,
                proptest::collection::vec(0u64..5, 1..4)
            )
                .prop_map(|(a, first, expected)| Command::Assign {
                    alloc: format!("a{a}"),
                    first,
                    expected,
                }),
            (alloc.clone(), 0u32..3, 0u32..8, 0u64..5).prop_map(|(a, b, section, epoch)| {
                Command::Handoff {
                    from: format!("a{a}"),
                    incarnation: u64::from(a) + 1,
                    to: format!("a{b}"),
                    section,
                    epoch,
                }
            }),
            (0u32..8, 1u32..4, 0u64..3).prop_map(|(first, count, move_id)| {
                Command::LegacyFreeze {
                    first,
                    count,
                    to: 1,
                    move_id,
                }
            }),
            (0u32..8, proptest::collection::vec(0u64..50, 1..4), 0u64..3).prop_map(
                |(first, floors, move_id)| Command::LegacyInstall {
                    first,
                    floors,
                    move_id,
                }
            ),
            (alloc.clone(), 1u64..4).prop_map(|(a, incarnation)| Command::RetireAlloc {
                alloc: format!("a{a}"),
                incarnation,
            }),
            (alloc.clone(), 1u64..4).prop_map(|(a, incarnation)| Command::StopAlloc {
                alloc: format!("a{a}"),
                incarnation,
            }),
            (alloc.clone(), 0u64..3).prop_map(|(a, bump)| Command::RegisterAlloc {
                alloc: format!("a{a}"),
                addr: format!("x:{bump}"),
                peer_addr: "x:2".into(),
                admin_addr: "x:3".into(),
                incarnation: u64::from(a) + 1,
                replaces: 0,
            }),
            (alloc, any::<bool>()).prop_map(|(a, draining)| Command::SetDraining {
                alloc: format!("a{a}"),
                draining,
            }),
        ];
        prop_oneof![9 => cmd.prop_map(Some), 1 => Just(None)]
    }

    proptest! {
        /// Whatever commands apply (accepted or refused, several to a
        /// batch of dirty marks as the state machine applies them), and
        /// across snapshot restores, the counts kept equal a full scan.
        #[test]
        fn kept_counts_equal_a_full_scan(steps in proptest::collection::vec(step(), 0..80)) {
            let mut dirty = Vec::new();
            let mut s = crate::state::tests::three_allocs(80, &mut dirty);
            for (i, step) in steps.into_iter().enumerate() {
                match step {
                    Some(cmd) => {
                        let _ = s.apply(&cmd, &mut dirty);
                    }
                    None => {
                        // What a snapshot carries: the records, not the
                        // counts. Every other restore is left to the next
                        // apply to notice.
                        let bytes = codec::encode(&s).unwrap();
                        let mut restored: SetState = codec::decode("snapshot", &bytes).unwrap();
                        prop_assert_eq!(restored.owned.all(), BTreeMap::new());
                        if i % 2 == 0 {
                            restored.rebuild_derived();
                        } else {
                            let _ = restored.apply(&Command::SetDraining {
                                alloc: "nobody".into(),
                                draining: true,
                            }, &mut Vec::new());
                        }
                        prop_assert_eq!(&restored, &s);
                        s = restored;
                    }
                }
                // A batch's marks pile up in one list, as in `apply`.
                if dirty.len() > 64 {
                    dirty.clear();
                }
                prop_assert_eq!(s.owned.all(), scan(s.sections.iter().map(|r| r.owner.as_ref())));
                for a in ["a0", "a1", "a2", "nobody"] {
                    prop_assert_eq!(s.owned.count(a), scan(s.sections.iter().map(|r| r.owner.as_ref())).get(a).copied().unwrap_or(0));
                }
                prop_assert_eq!(
                    s.owned.total() as usize,
                    s.sections.iter().filter(|r| r.owner.is_some()).count()
                );
            }
        }
    }

    #[test]
    fn the_encoding_is_unchanged() {
        // The counts are not serialized: a state encodes exactly as its
        // records do (the golden bytes of `Applied` are pinned elsewhere).
        let mut s = SetState::default();
        let spec = SetSpec {
            set_id: 0,
            uid_begin: 0,
            uid_end: 20,
            section_size: 10,
            step: 10,
        };
        s.apply(&Command::ConfigureSet(spec), &mut Vec::new())
            .unwrap();
        let mut bare = s.clone();
        bare.owned = OwnerCounts::default();
        assert_eq!(codec::encode(&s).unwrap(), codec::encode(&bare).unwrap());
    }
}
