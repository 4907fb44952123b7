//! The transport's own cost: a bare tonic server speaking the AllocSvr's
//! client-plane API, whose handlers only bump a counter.
//!
//! It runs in a process of its own, like the AllocSvr, on the same kind of
//! runtime (`new_multi_thread` with the AllocSvr's worker count) with
//! tonic's default server settings and no layers: what any gRPC service
//! costs on this machine. The bench starts it by running its own
//! executable with `--bare-server THREADS`; the child binds a free loopback
//! port, prints it on stdout and serves until its stdin closes (so it dies
//! with the bench).
//!
//! `Routes` answers one table that puts every section on this server, so
//! `SeqClient` drives it exactly as it drives the AllocSvr.
//!
//! By default it is served the way a tonic user writes it
//! (`Server::builder().add_service(..)`, through tonic's router). With
//! `--bare-no-router` it is served without the router, as the AllocSvr's
//! client plane is (`Listener::serve_one`): the transport alone, to show
//! what the AllocSvr's own work costs.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use seqsvr_proto::alloc_server::{Alloc, AllocServer};
use seqsvr_proto::{self as pb};
use tonic::{Request, Response, Status};

use crate::{SECTION_SIZE, STEP, UIDS};

/// The flag that turns the bench executable into the bare server.
pub const FLAG: &str = "--bare-server";

/// The bare service: one counter for every uid.
#[derive(Clone)]
struct Bare {
    /// Numbers handed out.
    counter: Arc<AtomicU64>,
    /// The one route table, all sections here.
    routes: pb::RouteTable,
}

#[tonic::async_trait]
impl Alloc for Bare {
    async fn next(
        &self,
        _req: Request<pb::NextRequest>,
    ) -> Result<Response<pb::NextReply>, Status> {
        Ok(Response::new(pb::NextReply {
            seq: self.counter.fetch_add(1, Relaxed) + 1,
            route_version: 1,
        }))
    }

    async fn next_batch(
        &self,
        req: Request<pb::NextBatchRequest>,
    ) -> Result<Response<pb::NextBatchReply>, Status> {
        let seqs = req
            .get_ref()
            .uids
            .iter()
            .map(|_| self.counter.fetch_add(1, Relaxed) + 1)
            .collect();
        Ok(Response::new(pb::NextBatchReply {
            seqs,
            route_version: 1,
        }))
    }

    async fn current(
        &self,
        _req: Request<pb::CurrentRequest>,
    ) -> Result<Response<pb::CurrentReply>, Status> {
        Ok(Response::new(pb::CurrentReply {
            seq: self.counter.load(Relaxed),
            route_version: 1,
        }))
    }

    async fn routes(
        &self,
        _req: Request<pb::GetRoutesRequest>,
    ) -> Result<Response<pb::RouteTable>, Status> {
        Ok(Response::new(self.routes.clone()))
    }

    async fn status(
        &self,
        _req: Request<pb::AllocStatusRequest>,
    ) -> Result<Response<pb::AllocStatus>, Status> {
        Err(Status::unimplemented("bare server"))
    }

    async fn next_id(
        &self,
        _req: Request<pb::NextIdRequest>,
    ) -> Result<Response<pb::NextIdReply>, Status> {
        Err(Status::unimplemented("bare server: no ids"))
    }

    async fn decode_id(
        &self,
        _req: Request<pb::DecodeIdRequest>,
    ) -> Result<Response<pb::DecodeIdReply>, Status> {
        Err(Status::unimplemented("bare server: no ids"))
    }
}

/// The flag (after the thread count) that serves without tonic's router.
pub const NO_ROUTER: &str = "--bare-no-router";

/// The child's side: serve on a free loopback port until stdin closes;
/// without tonic's router if `no_router`.
pub fn serve(threads: usize, no_router: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let routes = pb::RouteTable {
            version: 1,
            set: Some(pb::SetSpec {
                set_id: 0,
                uid_begin: 0,
                uid_end: UIDS,
                section_size: SECTION_SIZE,
                step: STEP,
            }),
            entries: vec![pb::RouteEntry {
                first_section: 0,
                count: (UIDS / SECTION_SIZE) as u32,
                alloc_id: "bare".into(),
                addr: addr.to_string(),
            }],
            ..Default::default()
        };
        let svc = Bare {
            counter: Arc::new(AtomicU64::new(0)),
            routes,
        };
        println!("{addr}");
        let stdin_closed = async {
            // Blocking read on a thread of its own: EOF means the bench
            // is gone.
            let _ = tokio::task::spawn_blocking(|| {
                let _ = std::io::stdin().read_to_end(&mut Vec::new());
            })
            .await;
        };
        let incoming = tonic::transport::server::TcpIncoming::from(tcp).with_nodelay(Some(true));
        if no_router {
            tonic::transport::Server::builder()
                .serve_with_incoming_shutdown(AllocServer::new(svc), incoming, stdin_closed)
                .await
                .unwrap();
        } else {
            tonic::transport::Server::builder()
                .add_service(AllocServer::new(svc))
                .serve_with_incoming_shutdown(incoming, stdin_closed)
                .await
                .unwrap();
        }
    });
}

/// The bench's side: the running bare server.
pub struct BareServer {
    child: Child,
    /// Its client-plane address.
    pub addr: String,
}

impl BareServer {
    /// Starts the bare server with `threads` runtime workers, without
    /// tonic's router if `no_router`.
    pub fn start(threads: usize, no_router: bool) -> BareServer {
        BareServer::start_under(threads, no_router, &[])
    }

    /// [`start`](BareServer::start), run under `under` (a profiler and its
    /// arguments; empty: none).
    pub fn start_under(threads: usize, no_router: bool, under: &[String]) -> BareServer {
        let exe = std::env::current_exe().expect("the bench's own executable");
        let mut cmd = seqsvr_testkit::command_under(under, exe);
        cmd.args([FLAG, &threads.to_string()]);
        if no_router {
            cmd.arg(NO_ROUTER);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the bare server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the bare server's address");
        BareServer {
            child,
            addr: line.trim().to_string(),
        }
    }

    /// Its process id, for CPU figures.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for BareServer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
