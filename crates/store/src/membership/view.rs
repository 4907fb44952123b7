//! Membership as a replica's Raft metrics show it (pure: no replica, no
//! calls), for status, metrics and the membership changes.

use std::collections::BTreeSet;

use openraft::{BasicNode, Membership, RaftMetrics};
use seqsvr_proto::{self as pb};

use crate::types::NodeId;

/// Serialises membership changes on one replica.
pub type ChangeLock = std::sync::Arc<tokio::sync::Mutex<()>>;

/// A replica's Raft metrics.
pub type Metrics = RaftMetrics<NodeId, BasicNode>;

/// Membership as one replica sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct View {
    /// Every member, voter or learner.
    pub members: Vec<pb::StoreMember>,
    /// Voters (of either configuration, while joint).
    pub voters: BTreeSet<NodeId>,
    /// Learners.
    pub learners: BTreeSet<NodeId>,
    /// Two configurations in force (a change is half done).
    pub joint: bool,
    /// The log index of the membership in force.
    pub index: u64,
}

impl View {
    /// The view of membership `m`, in force from log index `index`.
    pub(crate) fn of(m: &Membership<NodeId, BasicNode>, index: u64) -> View {
        let voters: BTreeSet<NodeId> = m.voter_ids().collect();
        let members = m
            .nodes()
            .map(|(id, n)| pb::StoreMember {
                id: *id,
                addr: n.addr.clone(),
                voter: voters.contains(id),
            })
            .collect();
        View {
            members,
            learners: m.learner_ids().collect(),
            voters,
            joint: m.get_joint_config().len() > 1,
            index,
        }
    }

    /// The view in `m`.
    pub fn from_metrics(m: &Metrics) -> View {
        let index = m.membership_config.log_id().map(|l| l.index).unwrap_or(0);
        View::of(m.membership_config.membership(), index)
    }

    /// Member `id`'s address, if it is one.
    pub(crate) fn addr(&self, id: NodeId) -> Option<&str> {
        let m = self.members.iter().find(|m| m.id == id);
        m.map(|m| m.addr.as_str())
    }
}

/// How far each member's log is behind the leader's (empty unless `m` is
/// a leader's).
pub fn replication(m: &Metrics) -> Vec<pb::MemberReplication> {
    let Some(repl) = &m.replication else {
        return Vec::new();
    };
    let last = m.last_log_index.unwrap_or(0);
    let mut out: Vec<pb::MemberReplication> = m
        .membership_config
        .nodes()
        .map(|(id, _)| {
            let matched = if *id == m.id {
                m.last_log_index
            } else {
                repl.get(id).copied().flatten().map(|l| l.index)
            };
            pb::MemberReplication {
                id: *id,
                matched_index: matched.unwrap_or(0),
                matched: matched.is_some(),
                lag: last.saturating_sub(matched.unwrap_or(0)),
            }
        })
        .collect();
    out.sort_by_key(|r| r.id);
    out
}
