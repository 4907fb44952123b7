//! Store group membership changes, made by the leader for an operator
//! (`StoreAdmin.AddMember` / `RemoveMember`, see `service::admin`), and the
//! membership part of a replica's status.
//!
//! **Adding** a replica is two Raft changes. It joins as a *learner*: it
//! receives the log but does not vote, so while it catches up (possibly
//! a whole snapshot) the quorum is what it was. Only once its matched log
//! index is within one replication round of the leader's is it promoted
//! to *voter* (a joint configuration, then the final one). Promoting an
//! empty replica at once would count it in every majority from then on:
//! voters {1,2,3} would become {1,2,3,4}, needing 3 acknowledgements while
//! the new one can give none until it holds the whole log, so one slow or
//! failed original would stall every write until then. A learner that does
//! not catch up in time is removed again, so a refused add leaves
//! membership as it was; one left behind by a lost leadership (same id and
//! address) is resumed by the next add.
//!
//! Before anything changes, the leader asks the new replica for its status
//! over the peer plane (as itself, so under TLS its certificate must come
//! from the group's CA): it must answer, be the node id asked for, and
//! hold no Raft history. A replica that initialised a group of its own (or
//! belonged to another) would otherwise be added with a conflicting log.
//!
//! **Removing** a voter is allowed only if it is not the last voter and a
//! majority of the voters that *remain* are reachable (they answer a
//! status probe) and caught up (matched index within one replication
//! round): the change commits under the joint configuration, which needs a
//! majority of the remaining voters, and the group must be able to commit
//! afterwards. Removing a healthy voter while another is down could
//! otherwise leave a group that never commits again (voters {1,2,3}, 3
//! down, remove 2: {1,3} needs both). Removing a learner is always
//! allowed: it is in no quorum. The leader may remove itself; it steps
//! down once the change is committed and the others elect a new leader.
//!
//! One change at a time per leader (a lock), and none while a joint
//! configuration is in force (openraft would refuse it anyway). A change
//! runs to its end even if its caller goes away (`service::admin` runs it
//! as its own task): cut short during the catch-up, an add would leave a
//! learner behind.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use seqsvr_proto::store_peer_client::StorePeerClient;
use seqsvr_proto::{self as pb};
pub use seqsvr_store_api::membership::DEFAULT_CATCH_UP;
use seqsvr_store_api::{Error, MemberRefusal, MemberRefusalKind as Kind};

use crate::service::StoreApi;
use crate::types::NodeId;

/// Longest catch-up time a caller may ask for.
pub const MAX_CATCH_UP: Duration = Duration::from_secs(600);
/// What an add needs beyond its catch-up: probing the new replica and
/// committing two configurations (joint, then final).
pub const CHANGE_MARGIN: Duration = Duration::from_secs(10);

/// The longest catch-up an add served for at most `request_timeout` (the
/// admin plane's limit) may wait: the caller must get its answer.
pub fn max_catch_up(request_timeout: Duration) -> Duration {
    request_timeout
        .saturating_sub(CHANGE_MARGIN)
        .min(MAX_CATCH_UP)
}
/// How long a replica may take to answer a status probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

pub mod view;

use view::{Metrics, View};

type WriteError = RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>;

/// How far behind the leader a member may be and count as caught up: one
/// AppendEntries round, the most a healthy member trails by under load.
fn max_lag(api: &StoreApi) -> u64 {
    api.raft.config().max_payload_entries
}

/// Whether the replica whose status is `st` may join as `id`.
fn joinable(id: NodeId, st: &pb::StoreStatus) -> Result<(), String> {
    if st.node_id != id {
        return Err(format!("the replica there is store node {}", st.node_id));
    }
    if st.term > 0 || st.last_log_index > 0 || !st.members.is_empty() {
        return Err(format!(
            "it already holds a Raft history (term {}, last log index {}, {} members); \
             a joining replica starts from an empty data directory with join = true",
            st.term,
            st.last_log_index,
            st.members.len()
        ));
    }
    Ok(())
}

/// Why waiting for a learner ended without it catching up.
enum NotCaughtUp {
    /// This replica stopped leading.
    NotLeader,
    /// The learner left the membership meanwhile.
    Gone,
    /// The time ran out: its matched index and the leader's last index.
    Timeout(Option<u64>, u64),
}

fn refuse(kind: Kind, id: NodeId, reason: impl Into<String>) -> Error {
    MemberRefusal::new(kind, id, reason).into()
}

impl StoreApi {
    /// The membership this replica sees, if it leads (else NOT_LEADER) and
    /// no change is half done (a change concerning `id` is refused then).
    fn leader_view(&self, id: NodeId) -> Result<(Metrics, View), Error> {
        let m = self.raft.metrics().borrow().clone();
        if m.current_leader != Some(self.id) {
            return Err(self.not_leader());
        }
        let view = View::from_metrics(&m);
        if view.joint {
            return Err(refuse(
                Kind::Changing,
                id,
                format!(
                    "the membership change at log index {} is not finished",
                    view.index
                ),
            ));
        }
        Ok((m, view))
    }

    /// Maps an openraft write error of a change concerning member `id`.
    fn change_error(&self, id: NodeId, e: WriteError) -> Error {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => Error::NotLeader {
                leader: f.leader_id.zip(f.leader_node.map(|n| n.addr)),
            },
            RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => match c {
                ChangeMembershipError::InProgress(p) => refuse(Kind::Changing, id, p.to_string()),
                ChangeMembershipError::EmptyMembership(e) => {
                    refuse(Kind::LastVoter, id, e.to_string())
                }
                ChangeMembershipError::LearnerNotFound(e) => {
                    refuse(Kind::UnknownMember, id, e.to_string())
                }
            },
            RaftError::Fatal(f) => Error::Internal(f.to_string()),
        }
    }

    /// Asks the replica at `addr` for its status over the peer plane.
    async fn probe(&self, addr: &str) -> Result<pb::StoreStatus, String> {
        let ch = (self.connect)(addr)?;
        let mut req = tonic::Request::new(pb::StatusRequest {});
        req.set_timeout(PROBE_TIMEOUT);
        let mut client = StorePeerClient::new(ch);
        match tokio::time::timeout(PROBE_TIMEOUT, client.status(req)).await {
            Ok(Ok(s)) => Ok(s.into_inner()),
            Ok(Err(s)) => Err(format!("{addr} did not answer: {}", s.message())),
            Err(_) => Err(format!("{addr} did not answer in {PROBE_TIMEOUT:?}")),
        }
    }

    /// Whether voter `id` at `addr` is reachable and caught up, as the
    /// leader sees it in `m`.
    async fn healthy(&self, id: NodeId, addr: &str, m: &Metrics) -> Result<(), String> {
        if id == self.id {
            return Ok(());
        }
        let last = m.last_log_index.unwrap_or(0);
        let matched = m
            .replication
            .as_ref()
            .and_then(|r| r.get(&id).copied().flatten())
            .map(|l| l.index);
        match matched {
            Some(i) if i + max_lag(self) >= last => {}
            Some(i) => return Err(format!("voter {id} matched log index {i} of {last}")),
            None => return Err(format!("voter {id} matched nothing yet")),
        }
        self.probe(addr)
            .await
            .map(drop)
            .map_err(|e| format!("voter {id}: {e}"))
    }

    /// Waits until learner `id`'s matched index is within [`max_lag`] of
    /// the leader's last index.
    async fn wait_caught_up(&self, id: NodeId, within: Duration) -> Result<(), NotCaughtUp> {
        let mut rx = self.raft.metrics();
        let deadline = tokio::time::Instant::now() + within;
        let lag = max_lag(self);
        loop {
            let (matched, last) = {
                let m = rx.borrow_and_update();
                if m.current_leader != Some(self.id) {
                    return Err(NotCaughtUp::NotLeader);
                }
                if m.membership_config.membership().get_node(&id).is_none() {
                    return Err(NotCaughtUp::Gone);
                }
                let matched = m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&id).copied().flatten())
                    .map(|l| l.index);
                (matched, m.last_log_index.unwrap_or(0))
            };
            if matched.is_some_and(|i| i + lag >= last) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(NotCaughtUp::NotLeader),
                Err(_) => return Err(NotCaughtUp::Timeout(matched, last)),
            }
        }
    }

    /// Adds replica `id` at `addr` (both checked at the edge): a learner,
    /// caught up within `catch_up`, then a voter. See the module docs.
    pub(crate) async fn add_member(
        &self,
        id: NodeId,
        addr: &str,
        catch_up: Duration,
    ) -> Result<pb::MembershipReply, Error> {
        let _one = self.member_changes.lock().await;
        let (_, before) = self.leader_view(id)?;
        let resume = match before.addr(id) {
            Some(at) if before.voters.contains(&id) => {
                let why = format!("{id} is a voter at {at}");
                return Err(MemberRefusal::new(Kind::IdInUse, id, why).at(at).into());
            }
            Some(at) if at != addr => {
                let why = format!("{id} is a learner at {at}; remove it first");
                return Err(MemberRefusal::new(Kind::IdInUse, id, why).at(at).into());
            }
            Some(_) => true,
            None => false,
        };
        if let Some(other) = before.members.iter().find(|m| m.addr == addr && m.id != id) {
            let why = format!("{addr} is member {}'s address", other.id);
            return Err(MemberRefusal::new(Kind::AddrInUse, id, why).at(addr).into());
        }
        let not_joinable = |why: String| MemberRefusal::new(Kind::NotJoinable, id, why).at(addr);
        if !resume {
            let st = self.probe(addr).await.map_err(not_joinable)?;
            joinable(id, &st).map_err(not_joinable)?;
        }
        let start = Instant::now();
        if !resume {
            let node = BasicNode { addr: addr.into() };
            let added = self.raft.add_learner(id, node, false).await;
            added.map_err(|e| self.change_error(id, e))?;
            tracing::info!(id, addr, "membership: added a learner; catching it up");
        }
        match self.wait_caught_up(id, catch_up).await {
            Ok(()) => {}
            Err(NotCaughtUp::NotLeader) => return Err(self.not_leader()),
            Err(NotCaughtUp::Gone) => {
                return Err(refuse(Kind::UnknownMember, id, "removed while catching up"))
            }
            Err(NotCaughtUp::Timeout(matched, last)) => {
                let matched = matched.map_or("nothing".into(), |i| format!("log index {i}"));
                let remove = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
                let undone = match self.raft.change_membership(remove, false).await {
                    Ok(_) => "it was removed again".to_string(),
                    Err(e) => format!(
                        "removing it again failed ({}); it is left as a learner",
                        self.change_error(id, e)
                    ),
                };
                tracing::warn!(id, addr, "membership: learner did not catch up; {undone}");
                let why = format!(
                    "did not catch up within {catch_up:?} (matched {matched}, leader at {last}); \
                     {undone}"
                );
                return Err(MemberRefusal::new(Kind::CatchUpTimeout, id, why)
                    .at(addr)
                    .into());
            }
        }
        let caught_up = start.elapsed();
        let promote = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
        let r = self.raft.change_membership(promote, true).await;
        let r = r.map_err(|e| self.change_error(id, e))?;
        tracing::info!(id, addr, ?caught_up, "membership: promoted to voter");
        Ok(self.reply(before, r, caught_up))
    }

    /// Removes replica `id` (voter or learner). See the module docs for the
    /// rule.
    pub(crate) async fn remove_member(&self, id: NodeId) -> Result<pb::MembershipReply, Error> {
        let _one = self.member_changes.lock().await;
        let (m, before) = self.leader_view(id)?;
        let Some(addr) = before.addr(id) else {
            let known: Vec<String> = before.members.iter().map(|m| m.id.to_string()).collect();
            let why = format!("no member has id {id} (members: {})", known.join(","));
            return Err(refuse(Kind::UnknownMember, id, why));
        };
        let change = if before.learners.contains(&id) {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        } else {
            if before.voters.len() == 1 {
                let why = "it is the last voter; the group would have none";
                return Err(refuse(Kind::LastVoter, id, why));
            }
            let remaining: Vec<NodeId> =
                before.voters.iter().copied().filter(|v| *v != id).collect();
            let mut healthy = 0;
            let mut faults = Vec::new();
            for v in &remaining {
                match self
                    .healthy(*v, before.addr(*v).unwrap_or_default(), &m)
                    .await
                {
                    Ok(()) => healthy += 1,
                    Err(e) => faults.push(e),
                }
            }
            let need = remaining.len() / 2 + 1;
            if healthy < need {
                let why = format!(
                    "after removing it, {healthy} of the {} remaining voters would be reachable \
                     and caught up, and a majority is {need} ({})",
                    remaining.len(),
                    faults.join("; ")
                );
                return Err(MemberRefusal::new(Kind::QuorumAtRisk, id, why)
                    .at(addr)
                    .into());
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        };
        let r = self.raft.change_membership(change, false).await;
        let r = r.map_err(|e| self.change_error(id, e))?;
        tracing::info!(id, "membership: removed");
        Ok(self.reply(before, r, Duration::ZERO))
    }

    fn reply(
        &self,
        before: View,
        r: openraft::raft::ClientWriteResponse<crate::types::TypeConfig>,
        caught_up: Duration,
    ) -> pb::MembershipReply {
        let after = match &r.membership {
            Some(m) => View::of(m, r.log_id.index),
            None => View::from_metrics(&self.raft.metrics().borrow()),
        };
        pb::MembershipReply {
            before: before.members,
            after: after.members,
            catch_up_ms: caught_up.as_millis().try_into().unwrap_or(u64::MAX),
            membership_index: after.index,
            leader_id: self.id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::Membership;

    #[test]
    fn only_an_empty_replica_of_the_right_id_may_join() {
        let fresh = pb::StoreStatus {
            node_id: 4,
            ..Default::default()
        };
        assert!(joinable(4, &fresh).is_ok());
        assert!(joinable(5, &fresh).unwrap_err().contains("store node 4"));
        let initialised = pb::StoreStatus {
            term: 1,
            ..fresh.clone()
        };
        assert!(joinable(4, &initialised).unwrap_err().contains("history"));
        let with_log = pb::StoreStatus {
            last_log_index: 3,
            ..fresh.clone()
        };
        assert!(joinable(4, &with_log).is_err());
        let member = pb::StoreStatus {
            members: vec![pb::StoreMember::default()],
            ..fresh
        };
        assert!(joinable(4, &member).is_err());
    }

    #[test]
    fn a_catch_up_fits_in_the_admin_planes_request_timeout() {
        let s = Duration::from_secs;
        assert_eq!(max_catch_up(s(60)), s(50));
        assert_eq!(max_catch_up(s(3600)), MAX_CATCH_UP);
        assert_eq!(max_catch_up(s(5)), Duration::ZERO);
    }

    #[test]
    fn a_view_tells_voters_learners_and_joint_configs_apart() {
        let node = |a: &str| BasicNode { addr: a.into() };
        let nodes = std::collections::BTreeMap::from([
            (1, node("h:1")),
            (2, node("h:2")),
            (4, node("h:4")),
        ]);
        let m = Membership::new(vec![BTreeSet::from([1, 2])], nodes.clone());
        let v = View::of(&m, 7);
        assert_eq!(v.voters, BTreeSet::from([1, 2]));
        assert_eq!(v.learners, BTreeSet::from([4]));
        assert!(!v.joint);
        assert_eq!(v.index, 7);
        let voter: Vec<(u64, bool)> = v.members.iter().map(|m| (m.id, m.voter)).collect();
        assert_eq!(voter, [(1, true), (2, true), (4, false)]);
        let joint = Membership::new(
            vec![BTreeSet::from([1, 2]), BTreeSet::from([1, 2, 4])],
            nodes,
        );
        let v = View::of(&joint, 8);
        assert!(v.joint);
        assert_eq!(v.voters, BTreeSet::from([1, 2, 4]));
        assert!(v.learners.is_empty());
    }
}
