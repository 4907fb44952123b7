//! A route read's decisions (the control loop's, `control/routes.rs`): drop the
//! sections the table routes elsewhere, renew early when one is routed
//! here, publish the table.

use std::collections::BTreeSet;

use seqsvr_core::{Epoch, SectionId};

use crate::allocator::Allocator;

/// What a route read changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteRead {
    /// Sections served before the read that the table routes elsewhere,
    /// with the epoch they had then: drop each only if it is still at that
    /// epoch.
    pub drop: Vec<(SectionId, Epoch)>,
    /// A section routed here is not served: renew now (the renewal's
    /// take-over claims it) rather than at the next interval.
    pub renew_now: bool,
    /// The table is not older than the one held: publish it.
    pub publish: bool,
}

/// The sections served now, each with the epoch it is served under: what
/// a route read is compared with (taken before the read).
pub fn served_epochs(alloc: &Allocator) -> Vec<(SectionId, Epoch)> {
    alloc
        .served_sections()
        .into_iter()
        .filter_map(|s| Some((s, alloc.section_state(s)?.epoch)))
        .collect()
}

/// Decides what a route read changes.
///
/// - `before`: [`served_epochs`] taken *before* the read. A section taken
///   over or adopted while the read was under way is newer than the table
///   may know and is left alone (dropping it would cost a step, promise 4;
///   renewals remain the authority on what is ours); one dropped and taken
///   back meanwhile is at another epoch and is left alone too.
/// - `routed_here`: the sections the table routes to this AllocSvr.
/// - `served`: the sections served now, after the read.
/// - `fenced`: this process was replaced or fenced (it renews no more).
/// - `version`, `held`: the table's version and the held table's.
///
/// Promise 3: a section the table routes elsewhere may already be someone
/// else's; stop serving it at once, without waiting for the next renewal.
pub fn after_route_read(
    before: &[(SectionId, Epoch)],
    routed_here: &[SectionId],
    served: &[SectionId],
    fenced: bool,
    version: u64,
    held: u64,
) -> RouteRead {
    let here: BTreeSet<SectionId> = routed_here.iter().copied().collect();
    let served: BTreeSet<SectionId> = served.iter().copied().collect();
    RouteRead {
        drop: before
            .iter()
            .copied()
            .filter(|(s, _)| !here.contains(s))
            .collect(),
        renew_now: !fenced && here.iter().any(|s| !served.contains(s)),
        publish: version >= held,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_read_table() {
        struct Case {
            what: &'static str,
            before: &'static [(SectionId, Epoch)],
            here: &'static [SectionId],
            served: &'static [SectionId],
            fenced: bool,
            want: RouteRead,
        }
        let none = RouteRead {
            publish: true,
            ..Default::default()
        };
        let cases = [
            Case {
                what: "steady state",
                before: &[(0, 3), (1, 4)],
                here: &[0, 1],
                served: &[0, 1],
                fenced: false,
                want: none.clone(),
            },
            Case {
                what: "routed elsewhere: dropped at the epoch it had",
                before: &[(0, 3), (1, 4)],
                here: &[0],
                served: &[0, 1],
                fenced: false,
                want: RouteRead {
                    drop: vec![(1, 4)],
                    ..none.clone()
                },
            },
            Case {
                what: "taken over during the read: not in `before`, left alone",
                before: &[(0, 3)],
                here: &[0],
                served: &[0, 1],
                fenced: false,
                want: none.clone(),
            },
            Case {
                what: "routed here, not served: renew now",
                before: &[(0, 3)],
                here: &[0, 2],
                served: &[0],
                fenced: false,
                want: RouteRead {
                    renew_now: true,
                    ..none.clone()
                },
            },
            Case {
                what: "fenced: no renewal",
                before: &[],
                here: &[0, 2],
                served: &[],
                fenced: true,
                want: none.clone(),
            },
        ];
        for c in cases {
            let got = after_route_read(c.before, c.here, c.served, c.fenced, 9, 9);
            assert_eq!(got, c.want, "{}", c.what);
        }
        assert!(after_route_read(&[], &[], &[], false, 10, 9).publish);
        assert!(
            !after_route_read(&[], &[], &[], false, 8, 9).publish,
            "an older table (a slower replica's) is not published"
        );
    }
}
