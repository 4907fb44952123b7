//! The Raft transport endpoint of one replica (peer plane, store
//! certificates only).
//!
//! openraft trusts the votes it is sent: a vote with term `u64::MAX`
//! overflows its term arithmetic and panics every replica, and the stored
//! vote makes the panic survive restarts. Terms grow by one per election;
//! [`MAX_TERM`] is far beyond any term a real group reaches and far below
//! overflow, and every request and reply is checked against it before
//! openraft sees it.

use seqsvr_proto::{self as pb};
use seqsvr_store_api::Error;
use tonic::{Request, Response, Status};

use crate::auth::Auth;
use crate::fault::Isolation;
use crate::types::{NodeId, Raft};

/// Highest Raft term accepted on the wire: 2^32 elections take decades at
/// one election per 150 ms; anything above is forged or corrupt.
pub const MAX_TERM: u64 = 1 << 32;

/// Refuses a vote whose term no real group reaches.
pub fn check_term(vote: &openraft::Vote<NodeId>) -> Result<(), String> {
    let term = vote.leader_id().term;
    if term >= MAX_TERM {
        return Err(format!("term {term} is beyond {MAX_TERM}: refused"));
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
    /// While on, peers' Raft RPCs are refused (partition fault).
    pub(crate) isolated: Isolation,
}

impl RaftService {
    fn check<T>(&self, req: &Request<T>) -> Result<(), Status> {
        self.auth.require_store(req)?;
        if self.isolated.is_on() {
            return Err(Status::unavailable("isolated from peers (partition fault)"));
        }
        Ok(())
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

fn guard(vote: &openraft::Vote<NodeId>) -> Result<(), Status> {
    check_term(vote).map_err(|e| Error::Invalid(e).to_status())
}

#[tonic::async_trait]
impl pb::raft_server::Raft for RaftService {
    async fn append_entries(
        &self,
        req: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.check(&req)?;
        let rpc: openraft::raft::AppendEntriesRequest<crate::types::TypeConfig> =
            decode("append-entries request", req.get_ref())?;
        guard(&rpc.vote)?;
        encode(&self.raft.append_entries(rpc).await)
    }

    async fn vote(
        &self,
        req: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.check(&req)?;
        let rpc: openraft::raft::VoteRequest<NodeId> = decode("vote request", req.get_ref())?;
        guard(&rpc.vote)?;
        encode(&self.raft.vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        req: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.check(&req)?;
        let rpc: openraft::raft::InstallSnapshotRequest<crate::types::TypeConfig> =
            decode("install-snapshot request", req.get_ref())?;
        guard(&rpc.vote)?;
        encode(&self.raft.install_snapshot(rpc).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_terms_are_refused() {
        let v = |term| openraft::Vote::new(term, 1);
        assert!(check_term(&v(7)).is_ok());
        assert!(check_term(&v(MAX_TERM - 1)).is_ok());
        assert!(check_term(&v(MAX_TERM)).is_err());
        assert!(check_term(&v(u64::MAX)).is_err());
    }
}
