//! A log line for every leadership change and every membership change
//! this replica sees, from its Raft metrics: who leads in which term (or
//! that no one does), and voters and learners before and after, with the
//! log index of the membership in force.

use std::collections::BTreeSet;

use crate::membership::view::{Metrics, View};
use crate::types::{NodeId, Raft};

/// What the lines are about, as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    term: u64,
    leader: Option<NodeId>,
    voters: BTreeSet<NodeId>,
    learners: BTreeSet<NodeId>,
    joint: bool,
    index: u64,
}

impl Seen {
    pub(super) fn of(m: &Metrics) -> Self {
        let v = View::from_metrics(m);
        Self {
            term: m.current_term,
            leader: m.current_leader,
            voters: v.voters,
            learners: v.learners,
            joint: v.joint,
            index: v.index,
        }
    }
}

fn ids(s: &BTreeSet<NodeId>) -> String {
    let v: Vec<String> = s.iter().map(u64::to_string).collect();
    format!("{{{}}}", v.join(","))
}

fn members(s: &Seen) -> String {
    let mut out = format!("voters {}", ids(&s.voters));
    if !s.learners.is_empty() {
        out.push_str(&format!(" learners {}", ids(&s.learners)));
    }
    if s.joint {
        out.push_str(" (joint: a change under way)");
    }
    out
}

/// The lines `now` calls for after `before` (`None`: the first look),
/// as seen by replica `me`.
pub(super) fn changes(me: NodeId, before: Option<&Seen>, now: &Seen) -> Vec<String> {
    let mut out = Vec::new();
    let leader_changed = before.is_none_or(|b| b.leader != now.leader || b.term != now.term);
    if leader_changed && (now.leader.is_some() || before.is_some_and(|b| b.leader.is_some())) {
        out.push(match now.leader {
            Some(l) if l == me => {
                format!("leadership: this replica ({me}) leads in term {}", now.term)
            }
            Some(l) => format!("leadership: store {l} leads in term {}", now.term),
            None => format!(
                "leadership: no leader in term {} (election under way)",
                now.term
            ),
        });
    }
    let membership_changed = before.is_none_or(|b| {
        (&b.voters, &b.learners, b.joint) != (&now.voters, &now.learners, now.joint)
    });
    if membership_changed && !now.voters.is_empty() {
        out.push(match before {
            Some(b) if !b.voters.is_empty() => format!(
                "membership: {} -> {} (log index {})",
                members(b),
                members(now),
                now.index
            ),
            _ => format!("membership: {} (log index {})", members(now), now.index),
        });
    }
    out
}

/// Logs every change this replica's Raft metrics show, until the replica
/// shuts down.
pub(super) async fn watch(raft: Raft, me: NodeId) {
    let mut rx = raft.metrics();
    let mut seen: Option<Seen> = None;
    loop {
        let now = Seen::of(&rx.borrow_and_update());
        for line in changes(me, seen.as_ref(), &now) {
            tracing::info!(term = now.term, leader = ?now.leader, "{line}");
        }
        seen = Some(now);
        if rx.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(
        term: u64,
        leader: Option<NodeId>,
        voters: &[u64],
        learners: &[u64],
        joint: bool,
    ) -> Seen {
        Seen {
            term,
            leader,
            voters: voters.iter().copied().collect(),
            learners: learners.iter().copied().collect(),
            joint,
            index: term * 10,
        }
    }

    #[test]
    fn a_line_for_each_leadership_and_membership_change_and_none_otherwise() {
        let a = seen(1, Some(1), &[1, 2, 3], &[], false);
        let cases: Vec<(Option<Seen>, Seen, Vec<&str>)> = vec![
            (None, seen(0, None, &[], &[], false), vec![]),
            (
                None,
                a.clone(),
                vec![
                    "leadership: store 1 leads in term 1",
                    "membership: voters {1,2,3} (log index 10)",
                ],
            ),
            (Some(a.clone()), a.clone(), vec![]),
            (
                Some(a.clone()),
                seen(2, None, &[1, 2, 3], &[], false),
                vec!["leadership: no leader in term 2 (election under way)"],
            ),
            (
                Some(seen(2, None, &[1, 2, 3], &[], false)),
                seen(2, Some(2), &[1, 2, 3], &[], false),
                vec!["leadership: this replica (2) leads in term 2"],
            ),
            (
                Some(a.clone()),
                seen(1, Some(1), &[1, 2, 3], &[4], false),
                vec!["membership: voters {1,2,3} -> voters {1,2,3} learners {4} (log index 10)"],
            ),
            (
                Some(seen(1, Some(1), &[1, 2, 3], &[4], false)),
                seen(1, Some(1), &[1, 2, 3, 4], &[], true),
                vec!["membership: voters {1,2,3} learners {4} -> voters {1,2,3,4} (joint: a change under way) (log index 10)"],
            ),
        ];
        for (before, now, want) in cases {
            assert_eq!(
                changes(2, before.as_ref(), &now),
                want,
                "{before:?} -> {now:?}"
            );
        }
    }
}
