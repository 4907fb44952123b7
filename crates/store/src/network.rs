//! Raft RPCs between store replicas, over gRPC.
//!
//! Each RPC carries an openraft message in the project's codec inside a
//! protobuf `RaftPayload`; the reply carries the remote's `Result`. A
//! connection failure is reported as *unreachable* so openraft backs off
//! instead of hammering a dead peer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
use serde::{de::DeserializeOwned, Serialize};
use tonic::transport::{Channel, Endpoint};

use crate::types::{NodeId, TypeConfig};

/// Largest gRPC message between replicas (snapshot chunks are smaller).
pub const MAX_MESSAGE: usize = 64 << 20;

/// Makes [`Conn`]s to peers.
#[derive(Clone, Default)]
pub struct Network {
    /// Set while this replica is cut off from its peers on purpose (the
    /// drill's partition fault): every Raft RPC fails as unreachable.
    pub isolated: Arc<AtomicBool>,
}

/// A connection to one peer replica.
pub struct Conn {
    /// See [`Network::isolated`].
    isolated: Arc<AtomicBool>,
    /// The peer's id (for error reports).
    target: NodeId,
    /// The peer's address (for error reports).
    addr: String,
    /// A lazily connected channel; tonic reconnects after failures.
    client: Option<RaftClient<Channel>>,
}

/// Builds a lazily connecting channel to `addr` (`host:port`).
pub fn channel(addr: &str, connect_timeout: Duration) -> Result<Channel, tonic::transport::Error> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5))
        .connect_lazy())
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Conn;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Conn {
        let client = channel(&node.addr, Duration::from_millis(500))
            .ok()
            .map(|c| {
                RaftClient::new(c)
                    .max_decoding_message_size(MAX_MESSAGE)
                    .max_encoding_message_size(MAX_MESSAGE)
            });
        Conn {
            isolated: self.isolated.clone(),
            target,
            addr: node.addr.clone(),
            client,
        }
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
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let unreachable =
            |msg: String| RPCError::Unreachable(Unreachable::new(&std::io::Error::other(msg)));
        if self.isolated.load(Ordering::Relaxed) {
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
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(
            |mut c, r| Box::pin(async move { c.append_entries(r).await }),
            &rpc,
            &option,
        )
        .await
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
            &option,
        )
        .await
    }
}
