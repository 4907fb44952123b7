//! Why the store refused a membership change (`AddMember`,
//! `RemoveMember`), and the change it reports when it made one.
//!
//! A refusal changed nothing: the group's membership is what it was before
//! the call (a learner added for a call that then timed out is removed
//! again before [`MemberRefusalKind::CatchUpTimeout`] is returned).

use std::time::Duration;

use seqsvr_proto::{self as pb, ErrorKind};

use crate::NodeId;

/// How long a new member may take to catch up when the caller names no
/// time (`AddMemberRequest.catch_up_timeout_ms` = 0).
pub const DEFAULT_CATCH_UP: Duration = Duration::from_secs(30);

/// Which rule refused a membership change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberRefusalKind {
    /// The id is already a member: a voter, or a learner at another address.
    IdInUse,
    /// Another member already has the address.
    AddrInUse,
    /// No member has the id.
    UnknownMember,
    /// The member is the group's last voter.
    LastVoter,
    /// After the removal, fewer than a majority of the remaining voters
    /// would be reachable and caught up: the change could not commit, or
    /// would leave a group that cannot.
    QuorumAtRisk,
    /// The replica at the address cannot join: it does not answer, is
    /// another node id, or already holds a Raft history of its own.
    NotJoinable,
    /// The learner did not catch up in time and was removed again.
    CatchUpTimeout,
    /// Another membership change is under way.
    Changing,
}

impl MemberRefusalKind {
    /// Every kind, for exhaustive tests.
    pub const ALL: [MemberRefusalKind; 8] = [
        MemberRefusalKind::IdInUse,
        MemberRefusalKind::AddrInUse,
        MemberRefusalKind::UnknownMember,
        MemberRefusalKind::LastVoter,
        MemberRefusalKind::QuorumAtRisk,
        MemberRefusalKind::NotJoinable,
        MemberRefusalKind::CatchUpTimeout,
        MemberRefusalKind::Changing,
    ];

    /// Its wire kind.
    pub fn error_kind(self) -> ErrorKind {
        match self {
            MemberRefusalKind::IdInUse => ErrorKind::MemberIdInUse,
            MemberRefusalKind::AddrInUse => ErrorKind::MemberAddrInUse,
            MemberRefusalKind::UnknownMember => ErrorKind::UnknownMember,
            MemberRefusalKind::LastVoter => ErrorKind::LastVoter,
            MemberRefusalKind::QuorumAtRisk => ErrorKind::QuorumAtRisk,
            MemberRefusalKind::NotJoinable => ErrorKind::MemberNotJoinable,
            MemberRefusalKind::CatchUpTimeout => ErrorKind::CatchUpTimeout,
            MemberRefusalKind::Changing => ErrorKind::MembershipChanging,
        }
    }

    /// The refusal kind of a wire kind, if it is one.
    pub fn of(kind: ErrorKind) -> Option<MemberRefusalKind> {
        Self::ALL.into_iter().find(|k| k.error_kind() == kind)
    }

    /// Whether the same call may succeed once the group has moved on: only
    /// a change under way ends by itself.
    pub fn is_retryable(self) -> bool {
        self == MemberRefusalKind::Changing
    }
}

/// A refused membership change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("store member {id}: {reason}")]
pub struct MemberRefusal {
    /// Which rule refused it.
    pub kind: MemberRefusalKind,
    /// The member id asked for.
    pub id: NodeId,
    /// The address concerned, when there is one.
    pub addr: String,
    /// The facts, for the operator.
    pub reason: String,
}

impl MemberRefusal {
    /// A refusal of `kind` for member `id`.
    pub fn new(kind: MemberRefusalKind, id: NodeId, reason: impl Into<String>) -> Self {
        MemberRefusal {
            kind,
            id,
            addr: String::new(),
            reason: reason.into(),
        }
    }

    /// The same refusal, naming `addr`.
    pub fn at(mut self, addr: impl Into<String>) -> Self {
        self.addr = addr.into();
        self
    }
}

/// One member of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Raft node id.
    pub id: NodeId,
    /// Peer-plane address.
    pub addr: String,
    /// Voter (or learner).
    pub voter: bool,
}

impl From<&pb::StoreMember> for Member {
    fn from(m: &pb::StoreMember) -> Self {
        Member {
            id: m.id,
            addr: m.addr.clone(),
            voter: m.voter,
        }
    }
}

/// A membership change the leader made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipChange {
    /// Membership before.
    pub before: Vec<Member>,
    /// Membership after.
    pub after: Vec<Member>,
    /// How long the new member took to catch up (adds only).
    pub catch_up: Duration,
    /// The log index of the membership now in force.
    pub membership_index: u64,
    /// The replica that made the change.
    pub leader_id: NodeId,
}

impl From<pb::MembershipReply> for MembershipChange {
    fn from(r: pb::MembershipReply) -> Self {
        MembershipChange {
            before: r.before.iter().map(Member::from).collect(),
            after: r.after.iter().map(Member::from).collect(),
            catch_up: Duration::from_millis(r.catch_up_ms),
            membership_index: r.membership_index,
            leader_id: r.leader_id,
        }
    }
}

/// `voters {1,2,3} learners {4}`: how membership is printed.
pub fn describe(members: &[Member]) -> String {
    let ids = |voter: bool| {
        let v: Vec<String> = members
            .iter()
            .filter(|m| m.voter == voter)
            .map(|m| m.id.to_string())
            .collect();
        v.join(",")
    };
    let learners = ids(false);
    if learners.is_empty() {
        format!("voters {{{}}}", ids(true))
    } else {
        format!("voters {{{}}} learners {{{learners}}}", ids(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_one_to_one_onto_wire_kinds() {
        let wire: std::collections::BTreeSet<i32> = MemberRefusalKind::ALL
            .iter()
            .map(|k| k.error_kind() as i32)
            .collect();
        assert_eq!(wire.len(), MemberRefusalKind::ALL.len());
        for k in MemberRefusalKind::ALL {
            assert_eq!(MemberRefusalKind::of(k.error_kind()), Some(k));
        }
        assert_eq!(MemberRefusalKind::of(ErrorKind::TooLarge), None);
    }

    #[test]
    fn membership_prints_voters_then_learners() {
        let m = |id, voter| Member {
            id,
            addr: String::new(),
            voter,
        };
        assert_eq!(describe(&[m(1, true), m(3, true)]), "voters {1,3}");
        assert_eq!(
            describe(&[m(1, true), m(4, false)]),
            "voters {1} learners {4}"
        );
    }
}
