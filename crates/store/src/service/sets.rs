//! The sets service of a store replica (`StoreSets`, admin plane): freeze,
//! install and the copy of declared counters for range moves, the
//! directory and its copies. Operator
//! certificates only; answered by the leader only, like `StoreAdmin`.
//! The protocol these serve is in `docs/architecture/sets.md`.

use seqsvr_core::directory::{DirRange, PendingMove, HOME_SET};
use seqsvr_core::mover::COUNTERS_PER_CALL;
use seqsvr_core::{DirChange, DirSet, Directory, SetCall, SetKind};
use seqsvr_net::Role;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::counters::CounterShown;
use seqsvr_store_api::Error;
use tonic::{Request, Response, Status};

use super::{check_run, unexpected, StoreApi};
use crate::types::{Command, Reply};

/// The `StoreSets` service.
#[derive(Clone)]
pub struct SetsService(pub StoreApi);

fn pending(m: &pb::PendingMove) -> PendingMove {
    PendingMove {
        begin: m.begin,
        end: m.end,
        from: m.from_set,
        to: m.to_set,
    }
}

/// Converts a wire directory change, refusing malformed ones at the edge.
fn change_of(c: pb::DirectoryChange) -> Result<DirChange, Error> {
    use pb::directory_change::Change;
    Ok(
        match c
            .change
            .ok_or_else(|| Error::Invalid("no change given".into()))?
        {
            Change::AddSet(a) => {
                let s = a
                    .set
                    .ok_or_else(|| Error::Invalid("add_set without a set".into()))?;
                let spec = seqsvr_core::SetSpec::try_from(
                    s.spec
                        .as_ref()
                        .ok_or_else(|| Error::Invalid("set without spec".into()))?,
                )
                .map_err(Error::Invalid)?;
                DirChange::AddSet {
                    set: DirSet {
                        spec,
                        stores: s.stores,
                        admin: s.admin,
                    },
                    begin: a.begin,
                    end: a.end,
                }
            }
            Change::SetStores(s) => DirChange::SetStores {
                set: s.set_id,
                stores: s.stores,
                admin: s.admin,
            },
            Change::BeginMove(m) => DirChange::BeginMove(pending(&m)),
            Change::FinishMove(m) => DirChange::FinishMove(pending(&m)),
        },
    )
}

impl StoreApi {
    async fn freeze(&self, r: pb::FreezeRequest) -> Result<pb::FreezeReply, Error> {
        check_run(r.first_section, r.count as usize)?;
        declarations_travel(r.copies_counters, r.begin, r.end)?;
        self.require_leader()?;
        // Under the arbiter's lock: no renewal records a grant or reads its
        // sections half way through the freeze.
        let _moves = self.arbiter.moves.lock().await;
        let cmd = Command::Freeze {
            first: r.first_section,
            count: r.count,
            call: SetCall {
                set: r.set_id,
                move_id: r.move_id,
                begin: r.begin,
                end: r.end,
                kind: SetKind::Move {
                    from: r.set_id,
                    to: r.to_set,
                },
            },
        };
        match self.write(cmd).await? {
            Reply::Frozen {
                finals,
                epochs,
                newly,
                route_version,
            } => {
                // Who may still hold the sections, as this leader — the
                // one that applied the freeze — sees the leases now, still
                // under the lock renewals take (docs/architecture/sets.md).
                let a = self.sm.read();
                let holders = (self.arbiter.holders(&a.state, std::time::Instant::now()))
                    .into_iter()
                    .map(|h| pb::AllocHolder {
                        alloc_id: h.id,
                        incarnation: h.incarnation,
                        admin_addr: h.admin_addr,
                        fenced: h.fenced,
                    })
                    .collect();
                Ok(pb::FreezeReply {
                    finals,
                    epochs,
                    newly,
                    route_version,
                    lease_expiry_ms: a.state.lease.office_wait_ms(),
                    holders,
                    holders_named: true,
                })
            }
            r => Err(unexpected(r)),
        }
    }

    async fn install(&self, r: pb::InstallRequest) -> Result<pb::InstallReply, Error> {
        check_run(r.first_section, r.floors.len())?;
        use pb::install_request::Kind;
        let kind = match r.kind {
            Some(Kind::Addition(true)) => SetKind::Addition,
            Some(Kind::MovedFrom(from)) => {
                declarations_travel(r.counters_copied, r.begin, r.end)?;
                SetKind::Move { from, to: r.set_id }
            }
            Some(Kind::Addition(false)) | None => {
                return Err(Error::Invalid(
                    "an install names its kind: an addition, or the set it moves from".into(),
                ))
            }
        };
        self.require_leader()?;
        let cmd = Command::Install {
            first: r.first_section,
            floors: r.floors,
            call: SetCall {
                set: r.set_id,
                move_id: r.move_id,
                begin: r.begin,
                end: r.end,
                kind,
            },
        };
        match self.write(cmd).await? {
            Reply::Installed {
                newly,
                route_version,
            } => Ok(pb::InstallReply {
                newly,
                route_version,
            }),
            r => Err(unexpected(r)),
        }
    }

    /// A page of the declared counters of a run of sections, after a
    /// barrier: a move reads its source's once the freeze fenced them.
    async fn read_counters(
        &self,
        r: pb::ReadCountersRequest,
    ) -> Result<pb::ReadCountersReply, Error> {
        if r.after.len() > seqsvr_core::MAX_NAME_LEN {
            return Err(Error::Invalid("`after` is longer than a name".into()));
        }
        self.require_leader()?;
        self.barrier().await?;
        let limit = match r.limit {
            0 => COUNTERS_PER_CALL,
            n => n.min(COUNTERS_PER_CALL),
        };
        let a = self.sm.read();
        let (page, more) = (a.state.counters).of_sections_after(
            r.first_section,
            r.count,
            &r.after,
            limit as usize,
        );
        let counters = (page.into_iter())
            .map(|(name, rec)| {
                (&CounterShown {
                    name: name.clone(),
                    section: rec.section,
                    decl: rec.decl,
                })
                    .into()
            })
            .collect();
        Ok(pb::ReadCountersReply { counters, more })
    }

    async fn copy_counters(
        &self,
        r: pb::CopyCountersRequest,
    ) -> Result<pb::CopyCountersReply, Error> {
        if r.counters.len() > COUNTERS_PER_CALL as usize {
            return Err(Error::Invalid(format!(
                "at most {COUNTERS_PER_CALL} declarations a copy"
            )));
        }
        let counters = (r.counters.iter())
            .map(|d| {
                let c = CounterShown::from(d);
                (c.name, c.decl)
            })
            .collect();
        let cmd = Command::CopyCounters {
            call: SetCall {
                set: r.set_id,
                move_id: r.move_id,
                begin: r.begin,
                end: r.end,
                kind: SetKind::Move {
                    from: r.moved_from,
                    to: r.set_id,
                },
            },
            after: r.after,
            through: r.has_through.then_some(r.through),
            counters,
        };
        self.require_leader()?;
        match self.write(cmd).await? {
            Reply::CountersCopied { newly } => Ok(pb::CopyCountersReply { newly }),
            r => Err(unexpected(r)),
        }
    }

    async fn directory_write(&self, cmd: Command) -> Result<pb::DirectoryReply, Error> {
        self.require_leader()?;
        match self.write(cmd).await? {
            Reply::Directory { version, changed } => Ok(pb::DirectoryReply {
                version,
                changed,
                directory: self.sm.read().state.directory.as_ref().map(Into::into),
            }),
            r => Err(unexpected(r)),
        }
    }
}

/// Who may change the directory: an operator any way; a store replica of
/// set N only set N's own store addresses (its leader keeps them current,
/// `node::home`), never the home set's nor another set's, since a store
/// certificate of one set must not redirect clients of another.
fn may_change(caller: &Role, change: &DirChange) -> Result<(), Status> {
    match (caller, change) {
        (Role::Operator(_), _) => Ok(()),
        (Role::Store(s), DirChange::SetStores { set, .. }) if s.set == *set && *set != HOME_SET => {
            Ok(())
        }
        (Role::Store(s), DirChange::SetStores { set, .. }) => {
            Err(Status::permission_denied(format!(
                "a store certificate ({caller}) may change only set {}'s store addresses, \
                 not set {set}'s",
                s.set
            )))
        }
        (Role::Store(_), _) => Err(Status::permission_denied(format!(
            "a store certificate ({caller}) may change only its own set's store addresses; \
             other directory changes need an operator certificate"
        ))),
        _ => Err(Status::permission_denied(format!(
            "this call needs an operator certificate, or a store certificate of the set \
             whose store addresses it changes; the caller presented {caller}"
        ))),
    }
}

/// Refuses copies that could not be a directory at all (the state machine
/// checks the rest).
fn copy_of(d: &pb::Directory) -> Result<Directory, Error> {
    let d = Directory::try_from(d).map_err(Error::Invalid)?;
    if d.ranges
        .iter()
        .any(|r: &DirRange| !d.sets.contains_key(&r.set))
    {
        return Err(Error::Invalid("a range names an unknown set".into()));
    }
    Ok(d)
}

#[tonic::async_trait]
impl pb::store_sets_server::StoreSets for SetsService {
    async fn freeze(
        &self,
        req: Request<pb::FreezeRequest>,
    ) -> Result<Response<pb::FreezeReply>, Status> {
        self.0.auth.require_operator(&req)?;
        Ok(Response::new(self.0.freeze(req.into_inner()).await?))
    }

    async fn install(
        &self,
        req: Request<pb::InstallRequest>,
    ) -> Result<Response<pb::InstallReply>, Status> {
        self.0.auth.require_operator(&req)?;
        Ok(Response::new(self.0.install(req.into_inner()).await?))
    }

    async fn read_counters(
        &self,
        req: Request<pb::ReadCountersRequest>,
    ) -> Result<Response<pb::ReadCountersReply>, Status> {
        self.0.auth.require_operator(&req)?;
        Ok(Response::new(self.0.read_counters(req.into_inner()).await?))
    }

    async fn copy_counters(
        &self,
        req: Request<pb::CopyCountersRequest>,
    ) -> Result<Response<pb::CopyCountersReply>, Status> {
        self.0.auth.require_operator(&req)?;
        Ok(Response::new(self.0.copy_counters(req.into_inner()).await?))
    }

    async fn change_directory(
        &self,
        req: Request<pb::DirectoryChange>,
    ) -> Result<Response<pb::DirectoryReply>, Status> {
        let caller = self.0.auth.caller(&req)?;
        let change = change_of(req.into_inner())?;
        may_change(&caller, &change)?;
        let cmd = Command::Directory(change);
        Ok(Response::new(self.0.directory_write(cmd).await?))
    }

    async fn copy_directory(
        &self,
        req: Request<pb::Directory>,
    ) -> Result<Response<pb::DirectoryReply>, Status> {
        self.0.auth.require_operator(&req)?;
        let cmd = Command::CopyDirectory(copy_of(&req.into_inner())?);
        Ok(Response::new(self.0.directory_write(cmd).await?))
    }
}

/// Refuses a move's freeze or install of the range `begin..end` from a
/// mover that does not copy declared counters (`copies` unset: an older
/// seqctl) if the range holds names: their declarations would not reach
/// the destination, which would serve the names without their maximum and
/// increment. A range of uids alone has no declarations to lose.
fn declarations_travel(copies: bool, begin: u64, end: u64) -> Result<(), Error> {
    let names = seqsvr_core::NAME_KEYS;
    if copies || end <= names.start || begin >= names.end {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "the range {begin}..{end} holds names, and this mover does not copy their declared \
         counters: run the move with a seqctl of this version (docs/operations.md, Sets)"
    )))
}
