//! A range move's decision on the AllocSvr (`AllocAdmin.Release`,
//! `Shared::release`): the sections frozen in the store for a move to
//! another set stop being served here. The protocol, and why a release is
//! final, are in `docs/architecture/sets.md`.

use seqsvr_core::{Epoch, SectionId};

use crate::allocator::Allocator;

/// Stops serving every section of `sections` that is served here (frozen
/// in the store, at the epoch given with it, for a move to another set) and
/// returns those that were. A grant older than the freeze epoch is never
/// installed afterwards (a take-over answered after the release).
/// Sections outside the set are skipped (the service refuses them before).
/// Call it under the ownership lock, so no adopt or renewal installs one
/// half way.
///
/// A release needs no check: the store already took the sections away
/// (owner cleared, new epoch), and serving one again would need a grant
/// the store never gives a frozen section. The mover installs the
/// destination only once every AllocSvr of the source confirmed this, or
/// after the source's lease + margin (promises 1 and 3 across sets).
pub fn release_moved(
    alloc: &Allocator,
    sections: impl IntoIterator<Item = (SectionId, Epoch)>,
) -> Vec<SectionId> {
    sections
        .into_iter()
        .filter(|&(s, e)| alloc.spec().has_section(s) && alloc.release_moved(s, e))
        .map(|(s, _)| s)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ceiling::Grant;

    #[test]
    fn release_drops_what_is_served_and_says_which() {
        let spec = seqsvr_core::SetSpec {
            set_id: 0,
            uid_begin: 0,
            uid_end: 40,
            section_size: 10,
            step: 10,
        };
        let a = Allocator::new(spec, &Default::default()).unwrap();
        let grant = |section| Grant {
            section,
            epoch: 3,
            prev_ceiling: 0,
            max_seq: 10,
        };
        a.install(&[grant(0), grant(2)]).unwrap();
        assert_eq!(
            release_moved(&a, [(0, 4), (1, 4), (2, 4), (9, 4)]),
            vec![0, 2]
        );
        assert!(a.served_sections().is_empty());
        assert!(
            release_moved(&a, (0..4).map(|s| (s, 4))).is_empty(),
            "a repeat drops nothing"
        );
    }
}
