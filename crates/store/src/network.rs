//! Raft RPCs between store replicas, over gRPC.
//!
//! Each RPC carries an openraft message in the project's codec inside a
//! protobuf `RaftPayload`; the reply carries the remote's `Result`. A
//! connection failure is reported as *unreachable* so openraft backs off
//! instead of hammering a dead peer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use seqsvr_core::codec;
use seqsvr_proto::raft_client::RaftClient;
use seqsvr_proto::RaftPayload;
use seqsvr_store_api::client::Connector;
use serde::{de::DeserializeOwned, Serialize};
use tonic::transport::Channel;

use crate::fault::Isolation;
use crate::metrics::Stages;
use crate::service::raft::check_term;

use crate::types::{NodeId, TypeConfig};

/// Largest gRPC message between replicas: snapshot chunks are at most
/// 4 MiB, and the peer plane refuses anything above its own limit (8 MiB
/// by default) before decoding it.
pub const MAX_MESSAGE: usize = 8 << 20;

/// Makes [`Conn`]s to peers. Channels are kept per address: openraft asks
/// for a new client for every heartbeat round of a linearizable read, and
/// a new channel each time would mean a new connection (and TLS handshake)
/// per read.
#[derive(Clone)]
pub struct Network {
    /// On while this replica is cut off from its peers on purpose (a
    /// test's partition fault): every Raft RPC fails as unreachable.
    pub isolated: Isolation,
    /// How to dial a peer (plaintext or mTLS as this replica).
    connect: Connector,
    /// One channel per peer address.
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    /// Where replication round trips are recorded.
    stages: Arc<Stages>,
}

impl Network {
    /// A network that dials peers with `connect` and records replication
    /// round trips in `stages`.
    pub fn new(connect: Connector, stages: Arc<Stages>) -> Self {
        Self {
            isolated: Default::default(),
            connect,
            channels: Default::default(),
            stages,
        }
    }

    fn channel(&self, addr: &str) -> Option<Channel> {
        let mut chans = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = chans.get(addr) {
            return Some(c.clone());
        }
        let c = (self.connect)(addr).ok()?;
        chans.insert(addr.to_string(), c.clone());
        Some(c)
    }
}

/// A connection to one peer replica.
pub struct Conn {
    /// See [`Network::isolated`].
    isolated: Isolation,
    /// The peer's id (for error reports).
    target: NodeId,
    /// The peer's address (for error reports).
    addr: String,
    /// A lazily connected channel; tonic reconnects after failures.
    client: Option<RaftClient<Channel>>,
    /// See [`Network::stages`].
    stages: Arc<Stages>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Conn;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Conn {
        let client = self.channel(&node.addr).map(|c| {
            RaftClient::new(c)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE)
        });
        Conn {
            isolated: self.isolated.clone(),
            target,
            addr: node.addr.clone(),
            client,
            stages: self.stages.clone(),
        }
    }
}

/// The vote a reply carries, to check its term before openraft sees it
/// (a peer's reply is as untrusted as its request: see `service::raft`).
trait ReplyVote {
    fn vote(&self) -> Option<&openraft::Vote<NodeId>>;
}

impl ReplyVote for AppendEntriesResponse<NodeId> {
    fn vote(&self) -> Option<&openraft::Vote<NodeId>> {
        match self {
            AppendEntriesResponse::HigherVote(v) => Some(v),
            _ => None,
        }
    }
}

impl ReplyVote for VoteResponse<NodeId> {
    fn vote(&self) -> Option<&openraft::Vote<NodeId>> {
        Some(&self.vote)
    }
}

impl ReplyVote for InstallSnapshotResponse<NodeId> {
    fn vote(&self) -> Option<&openraft::Vote<NodeId>> {
        Some(&self.vote)
    }
}

type Rpc =
    fn(
        RaftClient<Channel>,
        tonic::Request<RaftPayload>,
    )
        -> futures::future::BoxFuture<'static, Result<tonic::Response<RaftPayload>, tonic::Status>>;

impl Conn {
    async fn call<Req, Resp, E>(
        &mut self,
        rpc: Rpc,
        req: &Req,
        sent: &openraft::Vote<NodeId>,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned + ReplyVote,
        E: std::error::Error + DeserializeOwned,
    {
        let unreachable =
            |msg: String| RPCError::Unreachable(Unreachable::new(&std::io::Error::other(msg)));
        if self.isolated.is_on() {
            return Err(unreachable(format!("isolated from {}", self.addr)));
        }
        let Some(client) = self.client.clone() else {
            return Err(unreachable(format!("bad address {:?}", self.addr)));
        };
        let data = codec::encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut request = tonic::Request::new(RaftPayload { data });
        request.set_timeout(option.hard_ttl());
        let reply = match tokio::time::timeout(option.hard_ttl(), rpc(client, request)).await {
            Err(_) => return Err(unreachable(format!("timeout talking to {}", self.addr))),
            Ok(Err(status)) => {
                return Err(unreachable(format!("{}: {}", self.addr, status.message())))
            }
            Ok(Ok(r)) => r.into_inner(),
        };
        let result: Result<Resp, RaftError<NodeId, E>> =
            codec::decode("raft reply", &reply.data)
                .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let resp = result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))?;
        if let Some(v) = resp.vote() {
            // The reply's term is bounded against the term this replica
            // sent with: its own at the time.
            check_term(v, sent.leader_id().term)
                .map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))?;
        }
        Ok(resp)
    }
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        // Heartbeats carry no entries: only replication is timed.
        let timed = (!rpc.entries.is_empty()).then(Instant::now);
        let r = self
            .call(
                |mut c, r| Box::pin(async move { c.append_entries(r).await }),
                &rpc,
                &rpc.vote,
                &option,
            )
            .await;
        if let (Some(start), Ok(_)) = (timed, &r) {
            self.stages.replicate.observe(start.elapsed().as_secs_f64());
        }
        r
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(
            |mut c, r| Box::pin(async move { c.install_snapshot(r).await }),
            &rpc,
            &rpc.vote,
            &option,
        )
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(
            |mut c, r| Box::pin(async move { c.vote(r).await }),
            &rpc,
            &rpc.vote,
            &option,
        )
        .await
    }
}
