//! The client plane of a store replica (`StoreRead`): read-only calls
//! anyone who can connect may make. Nothing here changes ownership or Raft
//! state; a follower forwards reads to the leader.
//!
//! At most `max_concurrent_reads` of them are served at once; the others
//! wait for a turn, in order, without being polled. Renewals and Raft run
//! on the same threads: with every read in flight runnable at once (a
//! flood holds thousands), each step of a renewal — its handler, the
//! shared barrier, the append to the followers — waits behind all of them
//! and leases lapse; behind at most this many, a step waits a few ms.

use seqsvr_proto::{self as pb};
use tonic::{Request, Response, Status};

use super::StoreApi;

/// The `StoreRead` service.
#[derive(Clone)]
pub struct ReadService(pub StoreApi);

impl ReadService {
    /// A turn to serve a read (module docs).
    async fn turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, Status> {
        self.0
            .reads
            .acquire()
            .await
            .map_err(|_| Status::unavailable("the replica is shutting down"))
    }
}

#[tonic::async_trait]
impl pb::store_read_server::StoreRead for ReadService {
    async fn get_routes(
        &self,
        req: Request<pb::GetRoutesRequest>,
    ) -> Result<Response<pb::RouteTable>, Status> {
        let _turn = self.turn().await?;
        // A stranger's metadata is dropped: it may not mark a call forwarded.
        self.0.routed_routes(Request::new(req.into_inner())).await
    }

    async fn read_sections(
        &self,
        req: Request<pb::ReadSectionsRequest>,
    ) -> Result<Response<pb::ReadSectionsReply>, Status> {
        let _turn = self.turn().await?;
        self.0
            .routed_read_sections(Request::new(req.into_inner()))
            .await
    }

    async fn status(
        &self,
        _req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StoreStatus>, Status> {
        let _turn = self.turn().await?;
        Ok(Response::new(self.0.status_now()))
    }
}
