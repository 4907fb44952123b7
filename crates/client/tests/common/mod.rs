//! A fake AllocSvr for the client's tests: an in-memory counter per uid
//! behind the real gRPC service, with switches to misbehave.
//!
//! It judges ownership by its own route table, like the real one: a uid
//! outside the table's set gets `OUT_OF_RANGE`, a uid whose section the
//! table's placement calls moved or absent gets `MOVED` (with the set it
//! went to) or `NOT_SERVED`, a uid whose section the table gives to
//! another address gets `NOT_OWNER` — each with the table's version, its
//! set, the owner's address (for `NOT_OWNER`) and the version of the
//! directory it carries, or, with `legacy_errors`, the whole table as
//! servers before `route_version` sent it. So a test moves a section by
//! giving the fakes a newer table. `store.rs` is a fake store's client
//! plane.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

pub mod store;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seqsvr_client::{ClientOptions, SeqClient};
use seqsvr_core::MAX_BATCH;
use seqsvr_net::server::listener;
use seqsvr_net::{Limits, Plane, TlsConfig};
use seqsvr_proto::alloc_server::{Alloc, AllocServer};
use seqsvr_proto::{self as pb, status_with, ErrorDetail, ErrorKind};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Code, Request, Response, Status};

/// What a fake knows and how it should behave.
#[derive(Default)]
pub struct State {
    /// Its own address (to recognise itself in route tables).
    pub addr: String,
    /// Added to every number, so a test can tell which fake answered.
    pub base: u64,
    /// The route table it believes in and answers `Routes` with.
    pub route: Mutex<pb::RouteTable>,
    /// Last number per uid.
    counters: Mutex<HashMap<u64, u64>>,
    /// Fail this many more calls with `fail_kind` (`u32::MAX`: forever).
    pub fail_times: AtomicU32,
    /// Calls to let through before `fail_times` starts counting.
    pub fail_after: AtomicU32,
    /// The error `fail_times` uses.
    pub fail_kind: Mutex<Option<ErrorKind>>,
    /// Answer every call with a bare `UNAVAILABLE`, as a dropped
    /// connection looks to the client.
    pub down: AtomicBool,
    /// Never answer.
    pub hang: AtomicBool,
    /// Delay every answer by this many milliseconds.
    pub delay_ms: AtomicU64,
    /// `Next`, `NextBatch` and `Current` calls received.
    pub calls: AtomicU64,
    /// `Routes` calls received.
    pub routes_calls: AtomicU64,
    /// The uids of every `NextBatch` call, in arrival order.
    pub batches: Mutex<Vec<Vec<u64>>>,
    /// Leave the directory out of every table sent (`Routes` replies and
    /// errors' tables), still naming its version in errors: as a server
    /// whose copy is too large to attach, or an older one, would.
    pub strip_directory: AtomicBool,
    /// Attach the whole route table to errors instead of its version and
    /// the owner's address, as servers before `route_version` did.
    pub legacy_errors: AtomicBool,
}

/// A running fake AllocSvr.
pub struct Fake {
    /// Its `host:port`.
    pub addr: String,
    /// Its state and switches.
    pub state: Arc<State>,
    /// Stops the server when dropped.
    _stop: oneshot::Sender<()>,
}

impl Fake {
    /// Starts a fake on a free port; numbers it hands out start at `base`.
    pub async fn start(base: u64) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new(State {
            addr: addr.clone(),
            base,
            ..Default::default()
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tonic::transport::Server::builder()
            .add_service(AllocServer::new(Svc(state.clone())))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            });
        tokio::spawn(server);
        Fake {
            addr,
            state,
            _stop: stop,
        }
    }

    /// Starts a fake whose client plane is served with TLS, as an AllocSvr
    /// with `tls` in its config serves it (the plane's own listener, its
    /// limits, server-authenticated TLS).
    pub async fn start_tls(base: u64, tls: &TlsConfig) -> Fake {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap().to_string();
        let state = Arc::new(State {
            addr: addr.clone(),
            base,
            ..Default::default()
        });
        let server_tls = tls.server(Plane::Client).unwrap();
        let limits = Limits::for_plane(Plane::Client);
        let l = listener(tcp, Plane::Client, &limits, Some(&server_tls), false).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let router = l.server().add_service(AllocServer::new(Svc(state.clone())));
        tokio::spawn(l.serve(router, async {
            let _ = stopped.await;
        }));
        Fake {
            addr,
            state,
            _stop: stop,
        }
    }

    /// Replaces the fake's route table.
    pub fn set_route(&self, t: pb::RouteTable) {
        *self.state.route.lock().unwrap() = t;
    }

    /// Makes the next `times` calls fail with `kind`.
    pub fn fail(&self, kind: ErrorKind, times: u32) {
        *self.state.fail_kind.lock().unwrap() = Some(kind);
        self.state.fail_times.store(times, Ordering::SeqCst);
    }

    /// Data calls received so far.
    pub fn calls(&self) -> u64 {
        self.state.calls.load(Ordering::SeqCst)
    }

    /// `Routes` calls received so far.
    pub fn routes_calls(&self) -> u64 {
        self.state.routes_calls.load(Ordering::SeqCst)
    }

    /// The `NextBatch` requests received so far.
    pub fn batches(&self) -> Vec<Vec<u64>> {
        self.state.batches.lock().unwrap().clone()
    }
}

/// A route table for set `set_id` over `uids`, sections of `section_size`,
/// with runs `(first_section, count, addr)`.
pub fn table(
    set_id: u32,
    uids: Range<u64>,
    section_size: u64,
    version: u64,
    runs: &[(u32, u32, &str)],
) -> pb::RouteTable {
    pb::RouteTable {
        version,
        set: Some(pb::SetSpec {
            set_id,
            uid_begin: uids.start,
            uid_end: uids.end,
            section_size,
            step: 1000,
        }),
        entries: runs
            .iter()
            .map(|&(first, count, addr)| pb::RouteEntry {
                first_section: first,
                count,
                alloc_id: format!("alloc@{addr}"),
                addr: addr.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// An address nothing listens on (connections are refused).
pub async fn dead_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().to_string()
}

/// Options with a short deadline and quick retries, for fast tests.
pub fn quick(deadline_ms: u64) -> ClientOptions {
    let ms = Duration::from_millis;
    ClientOptions {
        deadline: ms(deadline_ms),
        connect_timeout: ms(200),
        attempt_timeout: ms(deadline_ms.min(200)),
        initial_backoff: ms(5),
        max_backoff: ms(50),
        tls: None,
        forwarded_by: None,
    }
}

/// A client connected through `seeds` with `options`.
pub async fn client(seeds: &[&Fake], options: ClientOptions) -> SeqClient {
    let seeds: Vec<String> = seeds.iter().map(|f| f.addr.clone()).collect();
    SeqClient::connect(&seeds, options).await.unwrap()
}

/// The gRPC service over a [`State`].
struct Svc(Arc<State>);

impl Svc {
    /// Counts the call and applies the misbehaviour switches.
    async fn gate(&self) -> Result<(), Status> {
        let s = &self.0;
        s.calls.fetch_add(1, Ordering::SeqCst);
        self.pause().await;
        if s.down.load(Ordering::SeqCst) {
            return Err(Status::unavailable("fake: down"));
        }
        let skip = s.fail_after.load(Ordering::SeqCst);
        if skip > 0 {
            s.fail_after.fetch_sub(1, Ordering::SeqCst);
            return Ok(());
        }
        let left = s.fail_times.load(Ordering::SeqCst);
        if left > 0 {
            if left != u32::MAX {
                s.fail_times.fetch_sub(1, Ordering::SeqCst);
            }
            let kind = s.fail_kind.lock().unwrap().unwrap_or(ErrorKind::Internal);
            return Err(error(kind, "fake: told to fail", None));
        }
        Ok(())
    }

    /// Sleeps as the `delay_ms` and `hang` switches say.
    async fn pause(&self) {
        let d = self.0.delay_ms.load(Ordering::SeqCst);
        if d > 0 {
            tokio::time::sleep(Duration::from_millis(d)).await;
        }
        if self.0.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    /// The route table as this fake sends it.
    fn table(&self) -> pb::RouteTable {
        let mut t = self.0.route.lock().unwrap().clone();
        if self.0.strip_directory.load(Ordering::SeqCst) {
            t.directory = None;
        }
        t
    }

    /// Checks that this fake serves `uid` by its own route table.
    fn check_owner(&self, uid: u64) -> Result<(), Status> {
        let full = self.0.route.lock().unwrap().clone();
        let directory = full.directory.as_ref().map_or(0, |d| d.version);
        let t = self.table();
        let set = t.set.unwrap_or_default();
        let legacy = self.0.legacy_errors.load(Ordering::SeqCst);
        if !(set.uid_begin..set.uid_end).contains(&uid) {
            return Err(refusal(
                ErrorDetail {
                    kind: ErrorKind::OutOfRange as i32,
                    ..Default::default()
                },
                t,
                legacy,
            ));
        }
        let section = ((uid - set.uid_begin) / set.section_size) as u32;
        let place = t
            .placement
            .iter()
            .find(|r| (r.first_section..r.end_section).contains(&section));
        if let Some(r) = place {
            let (kind, msg) = if r.kind == pb::PlaceKind::PlaceMoved as i32 {
                (ErrorKind::Moved, "section moved to another set")
            } else {
                (ErrorKind::NotServed, "section not served by this set")
            };
            let d = ErrorDetail {
                kind: kind as i32,
                retryable: true,
                to_set: r.to_set,
                directory_version: directory,
                reason: msg.into(),
                ..Default::default()
            };
            return Err(refusal(d, t, legacy));
        }
        let owner = t
            .entries
            .iter()
            .find(|e| section >= e.first_section && section - e.first_section < e.count)
            .cloned();
        match owner {
            Some(e) if e.addr == self.0.addr => Ok(()),
            owner => {
                let owner = owner.unwrap_or_default();
                let d = ErrorDetail {
                    kind: ErrorKind::NotOwner as i32,
                    retryable: true,
                    directory_version: directory,
                    owner_addr: owner.addr,
                    owner_alloc: owner.alloc_id,
                    ..Default::default()
                };
                Err(refusal(d, t, legacy))
            }
        }
    }

    /// Hands out the next number of `uid`.
    fn bump(&self, counters: &mut HashMap<u64, u64>, uid: u64) -> u64 {
        let c = counters.entry(uid).or_insert(0);
        *c += 1;
        self.0.base + *c
    }

    /// The fake's current route version.
    fn version(&self) -> u64 {
        self.0.route.lock().unwrap().version
    }
}

/// A refusal the way AllocSvrs build them: the table's version and set
/// (or, `legacy`, the whole table) added to `d`.
fn refusal(mut d: ErrorDetail, t: pb::RouteTable, legacy: bool) -> Status {
    let code = if d.kind == ErrorKind::OutOfRange as i32 {
        Code::OutOfRange
    } else {
        Code::Unavailable
    };
    let msg = std::mem::take(&mut d.reason);
    if legacy {
        #[allow(deprecated)]
        {
            d.route = Some(t);
        }
    } else {
        d.route_version = t.version;
        d.set = t.set;
    }
    status_with(code, msg, d)
}

/// A status the way AllocSvrs build them: code by kind, detail attached.
#[allow(deprecated)] // `route`: a test may want an older server's error
pub fn error(kind: ErrorKind, msg: &str, route: Option<pb::RouteTable>) -> Status {
    let (code, retryable) = match kind {
        ErrorKind::OutOfRange => (Code::OutOfRange, false),
        ErrorKind::InvalidRequest => (Code::InvalidArgument, false),
        ErrorKind::Internal => (Code::Internal, false),
        _ => (Code::Unavailable, true),
    };
    let d = ErrorDetail {
        kind: kind as i32,
        route,
        retryable,
        ..Default::default()
    };
    status_with(code, msg, d)
}

#[tonic::async_trait]
impl Alloc for Svc {
    // A call the client never makes.
    async fn status(
        &self,
        _r: Request<pb::AllocStatusRequest>,
    ) -> Result<Response<pb::AllocStatus>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn next(&self, r: Request<pb::NextRequest>) -> Result<Response<pb::NextReply>, Status> {
        self.gate().await?;
        let uid = r.get_ref().uid;
        self.check_owner(uid)?;
        let seq = self.bump(&mut self.0.counters.lock().unwrap(), uid);
        let route_version = self.version();
        Ok(Response::new(pb::NextReply { seq, route_version }))
    }

    async fn next_batch(
        &self,
        r: Request<pb::NextBatchRequest>,
    ) -> Result<Response<pb::NextBatchReply>, Status> {
        let uids = r.into_inner().uids;
        self.0.batches.lock().unwrap().push(uids.clone());
        self.gate().await?;
        if uids.is_empty() || uids.len() > MAX_BATCH {
            let msg = format!("batch of {} uids", uids.len());
            return Err(error(ErrorKind::InvalidRequest, &msg, None));
        }
        for &u in &uids {
            self.check_owner(u)?;
        }
        let mut counters = self.0.counters.lock().unwrap();
        let seqs = uids.iter().map(|&u| self.bump(&mut counters, u)).collect();
        let route_version = self.version();
        Ok(Response::new(pb::NextBatchReply {
            seqs,
            route_version,
        }))
    }

    async fn current(
        &self,
        r: Request<pb::CurrentRequest>,
    ) -> Result<Response<pb::CurrentReply>, Status> {
        self.gate().await?;
        let uid = r.get_ref().uid;
        self.check_owner(uid)?;
        let c = self.0.counters.lock().unwrap().get(&uid).copied();
        let seq = self.0.base + c.unwrap_or(0);
        let route_version = self.version();
        Ok(Response::new(pb::CurrentReply { seq, route_version }))
    }

    async fn routes(
        &self,
        _: Request<pb::GetRoutesRequest>,
    ) -> Result<Response<pb::RouteTable>, Status> {
        self.0.routes_calls.fetch_add(1, Ordering::SeqCst);
        self.pause().await;
        if self.0.down.load(Ordering::SeqCst) {
            return Err(Status::unavailable("fake: down"));
        }
        Ok(Response::new(self.table()))
    }

    async fn next_id(
        &self,
        _req: Request<pb::NextIdRequest>,
    ) -> Result<Response<pb::NextIdReply>, Status> {
        Err(Status::unimplemented("a fake AllocSvr: no ids"))
    }

    async fn decode_id(
        &self,
        _req: Request<pb::DecodeIdRequest>,
    ) -> Result<Response<pb::DecodeIdReply>, Status> {
        Err(Status::unimplemented("a fake AllocSvr: no ids"))
    }
}
