//! A fake store replica's client plane (`StoreRead.GetRoutes`, the one
//! call the client makes to stores), and builders for the set-related
//! parts of a route table: placement runs and the directory.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use seqsvr_proto::store_read_server::{StoreRead, StoreReadServer};
use seqsvr_proto::{self as pb};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

/// What a fake store holds.
#[derive(Default)]
pub struct StoreState {
    /// Its group's route table (with placement and directory).
    pub route: Mutex<pb::RouteTable>,
    /// `GetRoutes` calls received.
    pub calls: AtomicU64,
    /// Answer every call with a bare `UNAVAILABLE`.
    pub down: AtomicBool,
}

/// A running fake store.
pub struct FakeStore {
    /// Its client-plane `host:port`.
    pub addr: String,
    /// Its state and switches.
    pub state: Arc<StoreState>,
    /// Stops the server when dropped.
    _stop: oneshot::Sender<()>,
}

impl FakeStore {
    /// Starts a fake store on a free port.
    pub async fn start() -> FakeStore {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new(StoreState::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tonic::transport::Server::builder()
            .add_service(StoreReadServer::new(Svc(state.clone())))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            });
        tokio::spawn(server);
        FakeStore {
            addr,
            state,
            _stop: stop,
        }
    }

    /// Replaces the group's route table.
    pub fn set_route(&self, t: pb::RouteTable) {
        *self.state.route.lock().unwrap() = t;
    }

    /// `GetRoutes` calls received so far.
    pub fn calls(&self) -> u64 {
        self.state.calls.load(Ordering::SeqCst)
    }
}

struct Svc(Arc<StoreState>);

#[tonic::async_trait]
impl StoreRead for Svc {
    async fn get_routes(
        &self,
        _: Request<pb::GetRoutesRequest>,
    ) -> Result<Response<pb::RouteTable>, Status> {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        if self.0.down.load(Ordering::SeqCst) {
            return Err(Status::unavailable("fake store: down"));
        }
        Ok(Response::new(self.0.route.lock().unwrap().clone()))
    }

    // Calls the client never makes.
    async fn read_sections(
        &self,
        _: Request<pb::ReadSectionsRequest>,
    ) -> Result<Response<pb::ReadSectionsReply>, Status> {
        Err(Status::unimplemented("fake store"))
    }

    async fn status(
        &self,
        _: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StoreStatus>, Status> {
        Err(Status::unimplemented("fake store"))
    }
}

/// Sections `[first, end)` never installed in a set.
pub fn absent(first: u32, end: u32) -> pb::PlaceRun {
    pb::PlaceRun {
        first_section: first,
        end_section: end,
        kind: pb::PlaceKind::PlaceAbsent as i32,
        to_set: 0,
    }
}

/// Sections `[first, end)` frozen and moved to set `to`.
pub fn moved(first: u32, end: u32, to: u32) -> pb::PlaceRun {
    pb::PlaceRun {
        first_section: first,
        end_section: end,
        kind: pb::PlaceKind::PlaceMoved as i32,
        to_set: to,
    }
}

/// A directory at `version`: sets `(id, span, section_size, stores)` and
/// served ranges `(begin, end, set)`.
pub fn directory(
    version: u64,
    sets: &[(u32, Range<u64>, u64, &[&str])],
    ranges: &[(u64, u64, u32)],
) -> pb::Directory {
    pb::Directory {
        version,
        move_id: 0,
        sets: sets
            .iter()
            .map(|(id, uids, section_size, stores)| pb::DirSet {
                spec: Some(pb::SetSpec {
                    set_id: *id,
                    uid_begin: uids.start,
                    uid_end: uids.end,
                    section_size: *section_size,
                    step: 1000,
                }),
                stores: stores.iter().map(|s| s.to_string()).collect(),
                admin: stores.iter().map(|s| format!("admin-{s}")).collect(),
            })
            .collect(),
        ranges: ranges
            .iter()
            .map(|&(begin, end, set_id)| pb::DirRange { begin, end, set_id })
            .collect(),
        moving: None,
    }
}
