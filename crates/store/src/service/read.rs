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
        let api = &self.0;
        let req = Request::new(req.into_inner());
        api.route(
            req,
            |_| api.routes(),
            |mut c, r| async move { c.get_routes(r).await },
        )
        .await
    }

    async fn read_sections(
        &self,
        req: Request<pb::ReadSectionsRequest>,
    ) -> Result<Response<pb::ReadSectionsReply>, Status> {
        let api = &self.0;
        let req = Request::new(req.into_inner());
        api.route(
            req,
            |r| api.read_sections(r),
            |mut c, r| async move { c.read_sections(r).await },
        )
        .await
    }

    async fn status(
        &self,
        _req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StoreStatus>, Status> {
        Ok(Response::new(self.0.status_now()))
    }
}
