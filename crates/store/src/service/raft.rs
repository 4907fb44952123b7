//! The Raft transport endpoint of one replica (peer plane, store
//! certificates only).
//!
//! openraft trusts what it is sent, so two checks run before it sees a
//! request (`docs/architecture/security.md`, "Raft RPCs"):
//!
//! - **Who.** The caller's certificate must name this replica's set and
//!   the replica the request speaks for (the candidate of a vote, the
//!   leader of an append or a snapshot), and that replica must be a member
//!   (voter or learner) of this group as this replica knows it. Without
//!   it, any store certificate under the cluster's CA — a replica of
//!   another set (node ids are numbered per group, so it may well carry a
//!   member's id), a removed replica still running — could call elections
//!   here or send entries as a leader of this group.
//! - **Terms.** A vote with term `u64::MAX` overflows openraft's term
//!   arithmetic and panics every replica, and the stored vote makes the
//!   panic survive restarts. An absolute cap on terms is no answer: the
//!   group reaches any cap by its own elections, and a forged vote just
//!   below it leaves the group unable to elect anyone. So a request or
//!   reply may raise the term by at most [`MAX_TERM_JUMP`] over this
//!   replica's own, and terms stay below [`TERM_CEILING`], which no group
//!   reaches by elections.

use seqsvr_proto::{self as pb};
use seqsvr_store_api::Error;
use tonic::{Request, Response, Status};

use crate::auth::{Auth, StoreCerts};
use crate::fault::Isolation;
use crate::types::{NodeId, Raft};

/// The most a request or reply may raise the term over the receiver's
/// own. Terms grow by one per election; a replica cut off from its group
/// campaigns once per election timeout (400–800 ms by default), so 2^24
/// is months of campaigning alone. A replica whose term ran further ahead
/// than that is refused by the others and must be replaced
/// (`docs/operations.md`, "Replacing a replica").
pub const MAX_TERM_JUMP: u64 = 1 << 24;

/// Terms at or above this are refused outright: 2^62 elections take
/// billions of years, and the room above it keeps openraft's term
/// arithmetic far from overflow whatever the jumps.
pub const TERM_CEILING: u64 = 1 << 62;

/// Refuses a vote whose term is no step a real group takes from
/// `own_term`, the receiver's current term.
pub fn check_term(vote: &openraft::Vote<NodeId>, own_term: u64) -> Result<(), String> {
    let term = vote.leader_id().term;
    if term >= TERM_CEILING {
        return Err(format!("term {term} is at or above 2^62: refused"));
    }
    if term > own_term.saturating_add(MAX_TERM_JUMP) {
        return Err(format!(
            "term {term} jumps more than 2^24 over this replica's term {own_term}: refused"
        ));
    }
    Ok(())
}

/// Who may send a Raft request speaking for replica `claimed`: the
/// caller's certificate (`caller`, `None` on an insecure plane where
/// nothing is checked) must name `claimed`, and `claimed` must be one of
/// `members` — unless this replica knows no membership yet (a fresh
/// replica waiting to be added), when any store replica may be the one
/// adding it.
pub fn check_sender(
    caller: Option<NodeId>,
    claimed: NodeId,
    members: &[NodeId],
) -> Result<(), String> {
    let Some(caller) = caller else {
        return Ok(());
    };
    if caller != claimed {
        return Err(format!(
            "store {caller} may not speak for store {claimed} in a Raft request"
        ));
    }
    if !members.is_empty() && !members.contains(&caller) {
        return Err(format!(
            "store {caller} is not a member of this group (members: {members:?})"
        ));
    }
    Ok(())
}

/// The Raft transport endpoint.
#[derive(Clone)]
pub struct RaftService {
    /// The Raft handle.
    pub(crate) raft: Raft,
    /// Who may call.
    pub(crate) auth: Auth,
    /// Which store certificates are of this set.
    pub(crate) store_certs: StoreCerts,
    /// While on, peers' Raft RPCs are refused (partition fault).
    pub(crate) isolated: Isolation,
}

impl RaftService {
    /// The caller, a replica of this set (`None` on an insecure plane),
    /// checked before the request is even decoded.
    fn check<T>(&self, req: &Request<T>) -> Result<Option<NodeId>, Status> {
        let caller = self.store_certs.replica(self.auth, req)?;
        if self.isolated.is_on() {
            return Err(Status::unavailable("isolated from peers (partition fault)"));
        }
        Ok(caller)
    }

    /// The checks of the module's docs, against what this replica knows
    /// now: its term and its membership.
    fn admit(&self, caller: Option<NodeId>, vote: &openraft::Vote<NodeId>) -> Result<(), Status> {
        let Some(claimed) = vote.leader_id().voted_for() else {
            return Err(Error::Invalid("the request's vote names no replica".into()).to_status());
        };
        let (own_term, members) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            let members: Vec<NodeId> = m.membership_config.nodes().map(|(id, _)| *id).collect();
            (m.current_term, members)
        };
        check_sender(caller, claimed, &members).map_err(|e| Error::Denied(e).to_status())?;
        check_term(vote, own_term).map_err(|e| Error::Invalid(e).to_status())
    }
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, p: &pb::RaftPayload) -> Result<T, Status> {
    seqsvr_core::codec::decode(what, &p.data).map_err(|e| Error::Invalid(e.to_string()).to_status())
}

fn encode<T: serde::Serialize>(v: &T) -> Result<Response<pb::RaftPayload>, Status> {
    let data =
        seqsvr_core::codec::encode(v).map_err(|e| Error::Internal(e.to_string()).to_status())?;
    Ok(Response::new(pb::RaftPayload { data }))
}

#[tonic::async_trait]
impl pb::raft_server::Raft for RaftService {
    async fn append_entries(
        &self,
        req: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        let caller = self.check(&req)?;
        let rpc: openraft::raft::AppendEntriesRequest<crate::types::TypeConfig> =
            decode("append-entries request", req.get_ref())?;
        self.admit(caller, &rpc.vote)?;
        encode(&self.raft.append_entries(rpc).await)
    }

    async fn vote(
        &self,
        req: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        let caller = self.check(&req)?;
        let rpc: openraft::raft::VoteRequest<NodeId> = decode("vote request", req.get_ref())?;
        self.admit(caller, &rpc.vote)?;
        encode(&self.raft.vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        req: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        let caller = self.check(&req)?;
        let rpc: openraft::raft::InstallSnapshotRequest<crate::types::TypeConfig> =
            decode("install-snapshot request", req.get_ref())?;
        self.admit(caller, &rpc.vote)?;
        encode(&self.raft.install_snapshot(rpc).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_may_grow_by_elections_but_not_jump() {
        let v = |term| openraft::Vote::new(term, 1);
        assert!(check_term(&v(7), 6).is_ok());
        assert!(
            check_term(&v(3), 6).is_ok(),
            "a lower term is openraft's to refuse"
        );
        assert!(check_term(&v(6 + MAX_TERM_JUMP), 6).is_ok());
        assert!(check_term(&v(7 + MAX_TERM_JUMP), 6).is_err());
        // Past 2^32 (the old absolute cap) a group keeps electing.
        assert!(check_term(&v((1 << 32) + 1), 1 << 32).is_ok());
        assert!(check_term(&v(u64::MAX), 1 << 32).is_err());
        assert!(check_term(&v(u64::MAX), u64::MAX - 1).is_err());
        assert!(check_term(&v(TERM_CEILING), TERM_CEILING - 1).is_err());
        assert!(check_term(&v(TERM_CEILING - 1), TERM_CEILING - 2).is_ok());
    }

    #[test]
    fn only_members_speak_for_themselves() {
        let members = [1, 2, 3];
        assert!(check_sender(Some(2), 2, &members).is_ok());
        let e = check_sender(Some(9), 2, &members).unwrap_err();
        assert!(e.contains("may not speak for store 2"), "{e}");
        let e = check_sender(Some(9), 9, &members).unwrap_err();
        assert!(e.contains("not a member"), "{e}");
        // A fresh replica knows no membership yet: whoever adds it.
        assert!(check_sender(Some(9), 9, &[]).is_ok());
        assert!(check_sender(Some(9), 2, &[]).is_err());
        // Nothing is checked on an insecure plane.
        assert!(check_sender(None, 9, &members).is_ok());
    }
}
