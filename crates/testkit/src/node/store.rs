//! A fake store speaking the store's peer plane with its semantics:
//! registered incarnations and twins, fenced renewals, take-overs with
//! known epochs and prepared grants, one-step raises fenced by owner,
//! incarnation and epoch (the store's own section rules,
//! `SectionRecord::claim` and `check_raise`), conditional handoffs,
//! linearizable reads; with
//! faults a test can switch on (refused or lost handoff replies, renewals
//! that fail, twins replaced, no leader's status).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use seqsvr_core::{RouteTable, SectionId, SetSpec};
use seqsvr_proto::store_peer_server::{StorePeer, StorePeerServer};
use seqsvr_proto::{self as pb};
use seqsvr_store_api::{Error, Rejection};
use seqsvr_store_core::{RaiseRule, SectionRecord};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

pub const SECTIONS: u32 = 4;
pub const SECTION_SIZE: u64 = 10;
pub const STEP: u64 = 100;

pub fn spec() -> SetSpec {
    spec_at(0)
}

/// The fake store's set starting at `uid_begin` (names' tests serve the
/// range reserved for names).
pub fn spec_at(uid_begin: u64) -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin,
        uid_end: uid_begin + SECTION_SIZE * SECTIONS as u64,
        section_size: SECTION_SIZE,
        step: STEP,
    }
}

/// A section as the fake store keeps it: the store's own record, so its
/// rules for a claim and a raise are the store's.
pub type Rec = SectionRecord;

/// A registered AllocSvr.
#[derive(Debug, Clone)]
pub struct AllocRec {
    pub incarnation: u64,
    pub addr: String,
    pub peer_addr: String,
    pub fenced: bool,
}

/// How the fake store answers a handoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffFault {
    None,
    /// Refused, nothing changed.
    Refuse,
    /// Applied, but the reply is lost (retryable error).
    LoseReply,
}

#[derive(Debug)]
pub struct State {
    /// The set's first uid.
    pub base: u64,
    pub sections: Vec<Rec>,
    pub allocs: BTreeMap<String, AllocRec>,
    pub route_version: u64,
    pub lease_ms: u64,
    pub handoff_fault: HandoffFault,
    /// Renewals fail (no leader) while set.
    pub renew_down: bool,
    /// A registration may replace a live incarnation (its lease ended).
    pub replace_twins: bool,
    /// Planned stops recorded.
    pub stops: u32,
    /// `Status` fails (no leader's list of AllocSvrs) while set.
    pub status_down: bool,
    /// Id namespaces and worker ids: the store's own state machine, with
    /// the AllocSvrs registered above mirrored into it before each call.
    pub ids: seqsvr_store_core::SetState,
    /// Id raises fail (no leader) while set.
    pub ids_down: bool,
}

#[derive(Clone)]
pub struct FakeStore(pub Arc<Mutex<State>>);

pub type Answer<T> = Result<Response<T>, Status>;

pub fn refuse<T>(r: Rejection) -> Answer<T> {
    Err(Error::Rejected(r).to_status())
}

impl FakeStore {
    pub fn new(owner: &str, lease_ms: u64) -> Self {
        Self::at(owner, lease_ms, 0)
    }

    /// A store whose set starts at `base`.
    pub fn at(owner: &str, lease_ms: u64, base: u64) -> Self {
        let sections = (0..SECTIONS)
            .map(|_| Rec {
                owner: Some(owner.to_string()),
                ..Rec::default()
            })
            .collect();
        FakeStore(Arc::new(Mutex::new(State {
            base,
            sections,
            allocs: BTreeMap::new(),
            route_version: 1,
            lease_ms,
            handoff_fault: HandoffFault::None,
            renew_down: false,
            replace_twins: false,
            stops: 0,
            status_down: false,
            ids: {
                let mut ids = seqsvr_store_core::SetState::default();
                let cmd = seqsvr_store_core::Command::ConfigureSet(spec_at(base));
                ids.apply(&cmd, &mut Vec::new()).unwrap();
                ids
            },
            ids_down: false,
        })))
    }

    pub fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }

    pub fn section(&self, s: SectionId) -> Rec {
        self.st().sections[s as usize].clone()
    }

    pub fn check_incarnation(st: &State, alloc: &str, inc: u64) -> Result<(), Rejection> {
        let rec = st
            .allocs
            .get(alloc)
            .ok_or_else(|| Rejection::NotRegistered {
                alloc: alloc.into(),
            })?;
        if rec.incarnation != inc || rec.fenced {
            return Err(Rejection::StaleIncarnation {
                alloc: alloc.into(),
                given: inc,
                current: if rec.fenced { 0 } else { rec.incarnation },
            });
        }
        Ok(())
    }

    /// Creates an id namespace.
    pub fn create_id_space(&self, ns: &str, layout: seqsvr_core::ids::Layout, window_ms: u64) {
        let cmd = seqsvr_store_core::Command::CreateIdSpace {
            name: ns.into(),
            layout,
            window_ms,
        };
        self.st().ids.apply(&cmd, &mut Vec::new()).unwrap();
    }

    /// Applies an id command as `alloc`'s `inc`, with the registration
    /// mirrored first.
    fn ids(
        &self,
        alloc: &str,
        inc: u64,
        cmd: seqsvr_store_core::Command,
    ) -> Result<seqsvr_store_core::Reply, Status> {
        let mut st = self.st();
        Self::check_incarnation(&st, alloc, inc).map_err(|r| Error::Rejected(r).to_status())?;
        let have = st.ids.allocs.get(alloc).map(|a| a.incarnation);
        if have != Some(inc) {
            let reg = seqsvr_store_core::Command::RegisterAlloc {
                alloc: alloc.into(),
                addr: "x:1".into(),
                peer_addr: "x:2".into(),
                admin_addr: "x:3".into(),
                incarnation: inc,
                replaces: have.unwrap_or(0),
            };
            st.ids.apply(&reg, &mut Vec::new()).unwrap();
        }
        st.ids
            .apply(&cmd, &mut Vec::new())
            .map_err(|r| Error::Rejected(r).to_status())
    }

    pub fn routes(st: &State) -> RouteTable {
        RouteTable::from_owners(
            st.route_version,
            spec_at(st.base),
            st.sections.iter().map(|r| r.owner.as_ref()),
            |id| {
                st.allocs
                    .get(id)
                    .map(|a| a.addr.clone())
                    .unwrap_or_default()
            },
        )
    }

    pub async fn serve(self) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let incoming = tonic::transport::server::TcpIncoming::from(l);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(StorePeerServer::new(self))
                .serve_with_incoming(incoming),
        );
        addr
    }
}

#[tonic::async_trait]
impl StorePeer for FakeStore {
    async fn register_alloc(
        &self,
        req: Request<pb::RegisterAllocRequest>,
    ) -> Answer<pb::RegisterAllocReply> {
        let r = req.into_inner();
        let mut st = self.st();
        if let Some(live) = st.allocs.get(&r.alloc_id) {
            // Incarnation 0: the id's last process recorded its stop.
            if live.incarnation != r.incarnation
                && live.incarnation != 0
                && !live.fenced
                && !st.replace_twins
            {
                return refuse(Rejection::Twin {
                    alloc: r.alloc_id,
                    live: live.incarnation,
                    addr: live.addr.clone(),
                });
            }
        }
        st.allocs.insert(
            r.alloc_id,
            AllocRec {
                incarnation: r.incarnation,
                addr: r.addr,
                peer_addr: r.peer_addr,
                fenced: false,
            },
        );
        Ok(Response::new(pb::RegisterAllocReply {
            route_version: st.route_version,
        }))
    }

    async fn stopped(&self, req: Request<pb::StoppedRequest>) -> Answer<pb::StoppedReply> {
        let r = req.into_inner();
        let mut st = self.st();
        if let Err(e) = Self::check_incarnation(&st, &r.alloc_id, r.incarnation) {
            return refuse(e);
        }
        let mut released = 0;
        for rec in st.sections.iter_mut() {
            if rec.owner.as_deref() == Some(r.alloc_id.as_str()) {
                rec.epoch += 1;
                rec.incarnation = 0;
                rec.start = rec.max_seq;
                released += 1;
            }
        }
        st.allocs.get_mut(&r.alloc_id).expect("checked").incarnation = 0;
        st.route_version += 1;
        st.stops += 1;
        Ok(Response::new(pb::StoppedReply {
            released,
            route_version: st.route_version,
        }))
    }

    async fn renew(&self, req: Request<pb::RenewRequest>) -> Answer<pb::RenewReply> {
        let r = req.into_inner();
        let st = self.st();
        if st.renew_down {
            return Err(Error::NoLeader("injected".into()).to_status());
        }
        if let Err(e) = Self::check_incarnation(&st, &r.alloc_id, r.incarnation) {
            return refuse(e);
        }
        let mut sections: Vec<pb::SectionRun> = Vec::new();
        for (s, rec) in st.sections.iter().enumerate() {
            if rec.owner.as_deref() != Some(r.alloc_id.as_str()) {
                continue;
            }
            match sections.last_mut() {
                Some(run) if run.first_section + run.count == s as u32 => run.count += 1,
                _ => sections.push(pb::SectionRun {
                    first_section: s as u32,
                    count: 1,
                }),
            }
        }
        Ok(Response::new(pb::RenewReply {
            lease_ms: st.lease_ms,
            sections,
            route_version: st.route_version,
            draining: false,
            sections_version: 0,
            sections_unchanged: false,
        }))
    }

    async fn take_over(&self, req: Request<pb::TakeOverRequest>) -> Answer<pb::TakeOverReply> {
        let r = req.into_inner();
        let mut st = self.st();
        if let Err(e) = Self::check_incarnation(&st, &r.alloc_id, r.incarnation) {
            return refuse(e);
        }
        let range = r.first_section..r.first_section + r.count;
        if r.count == 0 || range.end > SECTIONS || r.known_epochs.len() != r.count as usize {
            return refuse(Rejection::Invalid("bad range".into()));
        }
        for s in range.clone() {
            let rec = &st.sections[s as usize];
            if rec.owner.as_ref().is_some_and(|o| *o != r.alloc_id) {
                return refuse(Rejection::OwnedElsewhere {
                    section: s,
                    owner: rec.owner.clone().unwrap_or_default(),
                });
            }
        }
        let mut grants = Vec::new();
        for (s, k) in range.zip(r.known_epochs) {
            let rec = &mut st.sections[s as usize];
            rec.claim(&r.alloc_id, r.incarnation, k, STEP);
            grants.push(pb::SectionGrant::from(&rec.grant(s)));
        }
        Ok(Response::new(pb::TakeOverReply {
            grants,
            route_version: st.route_version,
        }))
    }

    async fn raise(&self, req: Request<pb::RaiseRequest>) -> Answer<pb::RaiseReply> {
        let r = req.into_inner();
        let mut st = self.st();
        if let Err(e) = Self::check_incarnation(&st, &r.alloc_id, r.incarnation) {
            return refuse(e);
        }
        let spec = spec_at(st.base);
        let rec = &mut st.sections[r.section as usize];
        let checked = rec.check_raise(&spec, r.section, &r.alloc_id, r.incarnation, r.epoch, r.to);
        if let Err(e) = checked {
            return refuse(e);
        }
        rec.max_seq = r.to;
        Ok(Response::new(pb::RaiseReply { max_seq: r.to }))
    }

    async fn handoff(&self, req: Request<pb::HandoffRequest>) -> Answer<pb::HandoffReply> {
        let r = req.into_inner();
        let mut st = self.st();
        if let Err(e) = Self::check_incarnation(&st, &r.from_alloc, r.incarnation) {
            return refuse(e);
        }
        if st.handoff_fault == HandoffFault::Refuse {
            return refuse(Rejection::Invalid("injected refusal".into()));
        }
        let rec = &st.sections[r.section as usize];
        if rec.owner.as_deref() != Some(r.from_alloc.as_str()) || rec.incarnation != r.incarnation {
            return refuse(Rejection::OwnedElsewhere {
                section: r.section,
                owner: rec.owner.clone().unwrap_or_default(),
            });
        }
        if rec.epoch != r.epoch {
            return refuse(Rejection::StaleEpoch {
                section: r.section,
                given: r.epoch,
                current: rec.epoch,
            });
        }
        let Some(to) = st.allocs.get(&r.to_alloc).cloned() else {
            return refuse(Rejection::NotRegistered { alloc: r.to_alloc });
        };
        let rec = &mut st.sections[r.section as usize];
        rec.begin(&r.to_alloc, to.incarnation, STEP);
        let g = rec.grant(r.section);
        st.route_version += 1;
        if st.handoff_fault == HandoffFault::LoseReply {
            return Err(Error::NoLeader("reply lost".into()).to_status());
        }
        Ok(Response::new(pb::HandoffReply {
            grant: Some(pb::SectionGrant::from(&g)),
            route_version: st.route_version,
            to_peer_addr: to.peer_addr,
        }))
    }

    async fn read_sections(
        &self,
        req: Request<pb::ReadSectionsRequest>,
    ) -> Answer<pb::ReadSectionsReply> {
        let r = req.into_inner();
        let st = self.st();
        let sections = (r.first_section..r.first_section + r.count)
            .filter_map(|s| Some(pb::SectionState::from((s, st.sections.get(s as usize)?))))
            .collect();
        Ok(Response::new(pb::ReadSectionsReply { sections }))
    }

    async fn get_routes(&self, _req: Request<pb::GetRoutesRequest>) -> Answer<pb::RouteTable> {
        Ok(Response::new(pb::RouteTable::from(&Self::routes(
            &self.st(),
        ))))
    }

    /// The leader's status, with its list of AllocSvrs as a handoff's
    /// target check reads it. This fake grants no renewal it would record,
    /// so no AllocSvr shows a live lease in it (a stop finds no live peer).
    async fn status(&self, _req: Request<pb::StatusRequest>) -> Answer<pb::StoreStatus> {
        let st = self.st();
        if st.status_down {
            return Err(Status::unavailable("injected: no status"));
        }
        let allocs = st
            .allocs
            .iter()
            .map(|(id, a)| pb::AllocLease {
                alloc_id: id.clone(),
                addr: a.addr.clone(),
                peer_addr: a.peer_addr.clone(),
                incarnation: a.incarnation,
                fenced: a.fenced,
                since_grant_ms: -1,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(pb::StoreStatus {
            state: seqsvr_proto::convert::LEADER.into(),
            has_leader: true,
            lease_ms: st.lease_ms,
            allocs,
            ..Default::default()
        }))
    }
    async fn claim_worker(
        &self,
        req: Request<pb::ClaimWorkerRequest>,
    ) -> Answer<pb::ClaimWorkerReply> {
        let r = req.into_inner();
        let space = self.st().ids.ids.spaces.get(&r.namespace).cloned();
        let now = space.as_ref().map_or(0, |s| s.layout.tick_of(r.now_ms));
        let cmd = seqsvr_store_core::Command::ClaimWorker {
            ns: r.namespace.clone(),
            alloc: r.alloc_id.clone(),
            incarnation: r.incarnation,
            now,
            reclaim: Vec::new(),
        };
        match self.ids(&r.alloc_id, r.incarnation, cmd)? {
            seqsvr_store_core::Reply::WorkerClaimed(g) => {
                let s = space.expect("claimed in a namespace");
                Ok(Response::new(pb::ClaimWorkerReply {
                    holding: Some((&g).into()),
                    layout: Some((&s.layout).into()),
                    window_ms: s.window_ms,
                }))
            }
            other => Err(Status::internal(format!("{other:?}"))),
        }
    }

    async fn raise_worker(
        &self,
        req: Request<pb::RaiseWorkerRequest>,
    ) -> Answer<pb::RaiseWorkerReply> {
        let r = req.into_inner();
        if self.st().ids_down {
            return Err(Error::NoLeader("injected: ids down".into()).to_status());
        }
        let cmd = seqsvr_store_core::Command::RaiseWorker {
            ns: r.namespace,
            worker: r.worker,
            alloc: r.alloc_id.clone(),
            incarnation: r.incarnation,
            epoch: r.epoch,
            to: r.to,
        };
        match self.ids(&r.alloc_id, r.incarnation, cmd)? {
            seqsvr_store_core::Reply::WorkerRaised { ceiling } => {
                Ok(Response::new(pb::RaiseWorkerReply { ceiling }))
            }
            other => Err(Status::internal(format!("{other:?}"))),
        }
    }

    async fn release_worker(
        &self,
        req: Request<pb::ReleaseWorkerRequest>,
    ) -> Answer<pb::ReleaseWorkerReply> {
        let r = req.into_inner();
        let cmd = seqsvr_store_core::Command::ReleaseWorker {
            ns: r.namespace,
            worker: r.worker,
            alloc: r.alloc_id.clone(),
            incarnation: r.incarnation,
            epoch: r.epoch,
        };
        self.ids(&r.alloc_id, r.incarnation, cmd)?;
        Ok(Response::new(pb::ReleaseWorkerReply {}))
    }

    async fn id_spaces(&self, req: Request<pb::IdSpacesRequest>) -> Answer<pb::IdSpacesReply> {
        let ns = req.into_inner().namespace;
        let st = self.st();
        let spaces = (st.ids.ids.spaces.iter())
            .filter(|(n, _)| ns.is_empty() || **n == ns)
            .map(|(n, s)| pb::IdSpaceInfo {
                namespace: n.clone(),
                layout: Some((&s.layout).into()),
                window_ms: s.window_ms,
                unrecorded_ceiling: s.unrecorded_ceiling(),
                workers: (s.worker_records())
                    .map(|(&w, r)| pb::WorkerInfo {
                        holding: Some((&r.grant(w)).into()),
                        alloc_id: r.holder.clone().map(|h| h.0).unwrap_or_default(),
                        incarnation: r.holder.as_ref().map_or(0, |h| h.1),
                        live: r.holder.is_some(),
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(pb::IdSpacesReply { spaces }))
    }

    /// The fake keeps no counter declarations: a write is refused, so a
    /// test that needs one uses the real store.
    async fn counter_write(
        &self,
        _req: Request<pb::CounterWriteRequest>,
    ) -> Answer<pb::CounterWriteReply> {
        Err(Status::unimplemented(
            "the fake store keeps no counter declarations",
        ))
    }

    /// No declarations: every section reads as having none.
    async fn counters(&self, _req: Request<pb::CountersRequest>) -> Answer<pb::CountersReply> {
        Ok(Response::new(pb::CountersReply::default()))
    }
}
