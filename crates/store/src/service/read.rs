//! The client plane of a store replica (`StoreRead`): read-only calls
//! anyone who can connect may make. Nothing here changes ownership or Raft
//! state; a follower forwards reads to the leader.

use seqsvr_proto::{self as pb};
use tonic::{Request, Response, Status};

use super::StoreApi;

/// The `StoreRead` service.
#[derive(Clone)]
pub struct ReadService(pub StoreApi);

#[tonic::async_trait]
impl pb::store_read_server::StoreRead for ReadService {
    async fn get_routes(
        &self,
        req: Request<pb::GetRoutesRequest>,
    ) -> Result<Response<pb::RouteTable>, Status> {
        // A stranger's metadata is dropped: it may not mark a call forwarded.
        self.0.routed_routes(Request::new(req.into_inner())).await
    }

    async fn read_sections(
        &self,
        req: Request<pb::ReadSectionsRequest>,
    ) -> Result<Response<pb::ReadSectionsReply>, Status> {
        self.0
            .routed_read_sections(Request::new(req.into_inner()))
            .await
    }

    async fn status(
        &self,
        _req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StoreStatus>, Status> {
        Ok(Response::new(self.0.status_now()))
    }
}
