//! A client of a store group's sets service (`StoreSets`, admin plane):
//! freeze, install, the copy of declared counters, directory changes and
//! copies, each sent to the
//! group's leader (a follower answers NOT_LEADER and the next replica is
//! tried). Every call is idempotent, so retrying one whose answer was
//! lost is safe.

use std::time::Duration;

use seqsvr_core::mover::{Declared, COUNTERS_PER_CALL};
use seqsvr_core::{DirChange, Directory, SectionId, SetCall, SetKind};
use seqsvr_proto::store_sets_client::StoreSetsClient;
use seqsvr_proto::{self as pb};
use tonic::transport::Channel;

use crate::client::{Connector, Replicas};
use crate::counters::CounterShown;
use crate::{Error, Result};

/// How long one sets call may take across replicas and retries (a leader
/// election included).
const DEADLINE: Duration = Duration::from_secs(10);

/// A store group's sets service.
#[derive(Clone, Debug)]
pub struct SetsClient {
    /// The replicas' admin listeners.
    pub replicas: Replicas<StoreSetsClient<Channel>>,
}

/// What a freeze returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frozen {
    /// Per section, its final ceiling in the source set.
    pub finals: Vec<u64>,
    /// Per section, the epoch it is frozen at.
    pub epochs: Vec<u64>,
    /// How many this call froze (0: a repeat).
    pub newly: u32,
    /// How long after the reply no AllocSvr of the source serves them,
    /// released or not (the group's lease + margin).
    pub lease_expiry: Duration,
    /// The AllocSvr incarnations that may still hold the sections, as the
    /// leader that applied the freeze names them; `None` from a store that
    /// names none (an older version).
    pub holders: Option<Vec<seqsvr_core::mover::Holder>>,
}

impl SetsClient {
    /// A client of the admin listeners at `addrs`.
    pub fn new(addrs: &[String], connect: &Connector) -> Result<Self> {
        let replicas = Replicas::new(addrs, connect, StoreSetsClient::new)?;
        Ok(Self {
            replicas: replicas.with(DEADLINE, Duration::from_secs(3), false),
        })
    }

    /// Freezes sections `first..first+count` for the move `call` (a
    /// [`SetKind::Move`] out of `call.set`).
    pub async fn freeze(&self, first: SectionId, count: u32, call: &SetCall) -> Result<Frozen> {
        let SetKind::Move { from, to } = call.kind else {
            return Err(Error::Invalid(format!("{call} freezes nothing")));
        };
        if from != call.set {
            return Err(Error::Invalid(format!(
                "{call} freezes in set {from}, not set {}",
                call.set
            )));
        }
        let req = pb::FreezeRequest {
            first_section: first,
            count,
            to_set: to,
            move_id: call.move_id,
            set_id: call.set,
            begin: call.begin,
            end: call.end,
            // The mover copies declarations before it installs
            // (`seqsvr_core::mover`, the copy phase).
            copies_counters: true,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.freeze(r).await })
            .await?;
        if r.finals.len() != count as usize || r.epochs.len() != count as usize {
            return Err(Error::Internal(format!(
                "freeze of {count} sections returned {} ceilings",
                r.finals.len()
            )));
        }
        Ok(Frozen {
            finals: r.finals,
            epochs: r.epochs,
            newly: r.newly,
            lease_expiry: Duration::from_millis(r.lease_expiry_ms),
            holders: r.holders_named.then(|| {
                (r.holders.into_iter())
                    .map(|h| seqsvr_core::mover::Holder {
                        id: h.alloc_id,
                        incarnation: h.incarnation,
                        admin_addr: h.admin_addr,
                        fenced: h.fenced,
                    })
                    .collect()
            }),
        })
    }

    /// Installs sections `first..first+floors.len()` at their floors plus
    /// a step; returns how many changed.
    /// `call` says what the install is part of: the set's addition, or a
    /// move into `call.set`.
    pub async fn install(&self, first: SectionId, floors: Vec<u64>, call: &SetCall) -> Result<u32> {
        let kind = match call.kind {
            SetKind::Addition => pb::install_request::Kind::Addition(true),
            SetKind::Move { from, .. } => pb::install_request::Kind::MovedFrom(from),
        };
        let req = pb::InstallRequest {
            first_section: first,
            floors,
            move_id: call.move_id,
            set_id: call.set,
            begin: call.begin,
            end: call.end,
            kind: Some(kind),
            counters_copied: matches!(call.kind, SetKind::Move { .. }),
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.install(r).await })
            .await?;
        Ok(r.newly)
    }

    /// A page of the declared counters of sections `first..first+count`
    /// by name after `after` (at most [`COUNTERS_PER_CALL`]), and whether
    /// more follow.
    pub async fn read_counters(
        &self,
        first: SectionId,
        count: u32,
        after: &[u8],
    ) -> Result<(Vec<Declared>, bool)> {
        let req = pb::ReadCountersRequest {
            first_section: first,
            count,
            after: after.to_vec(),
            limit: COUNTERS_PER_CALL,
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.read_counters(r).await })
            .await?;
        let found = (r.counters.iter())
            .map(|d| {
                let c = CounterShown::from(d);
                (c.name, c.decl)
            })
            .collect();
        Ok((found, r.more))
    }

    /// Copies the declarations `counters` of the names after `after` and
    /// up to `through` (`None`: to the last) into this group for the move
    /// `call` (into `call.set`); returns how many changed.
    pub async fn copy_counters(
        &self,
        call: &SetCall,
        after: &[u8],
        through: Option<&[u8]>,
        counters: &[Declared],
    ) -> Result<u32> {
        let SetKind::Move { from, to } = call.kind else {
            return Err(Error::Invalid(format!("{call} copies no declarations")));
        };
        if to != call.set {
            return Err(Error::Invalid(format!(
                "{call} copies into set {to}, not set {}",
                call.set
            )));
        }
        let req = pb::CopyCountersRequest {
            set_id: call.set,
            move_id: call.move_id,
            begin: call.begin,
            end: call.end,
            moved_from: from,
            after: after.to_vec(),
            has_through: through.is_some(),
            through: through.unwrap_or_default().to_vec(),
            counters: (counters.iter())
                .map(|(name, decl)| {
                    (&CounterShown {
                        name: name.clone(),
                        section: 0,
                        decl: *decl,
                    })
                        .into()
                })
                .collect(),
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.copy_counters(r).await })
            .await?;
        Ok(r.newly)
    }

    /// Applies a directory change (set 0's group); returns whether it
    /// changed anything, and the directory after it.
    pub async fn change_directory(&self, change: &DirChange) -> Result<(bool, Directory)> {
        let req = change_pb(change);
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.change_directory(r).await })
            .await?;
        Ok((r.changed, directory_of(r.directory.as_ref())?))
    }

    /// Hands a copy of the directory to this group; returns the version it
    /// holds afterwards.
    pub async fn copy_directory(&self, d: &Directory) -> Result<u64> {
        let req = pb::Directory::from(d);
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.copy_directory(r).await })
            .await?;
        Ok(r.version)
    }
}

fn directory_of(d: Option<&pb::Directory>) -> Result<Directory> {
    let d = d.ok_or_else(|| Error::Internal("reply without a directory".into()))?;
    Directory::try_from(d).map_err(Error::Internal)
}

fn pending_pb(m: &seqsvr_core::PendingMove) -> pb::PendingMove {
    pb::PendingMove {
        begin: m.begin,
        end: m.end,
        from_set: m.from,
        to_set: m.to,
    }
}

fn change_pb(c: &DirChange) -> pb::DirectoryChange {
    use pb::directory_change::Change;
    let change = match c {
        DirChange::AddSet { set, begin, end } => Change::AddSet(pb::AddSet {
            set: Some(pb::DirSet {
                spec: Some((&set.spec).into()),
                stores: set.stores.clone(),
                admin: set.admin.clone(),
            }),
            begin: *begin,
            end: *end,
        }),
        DirChange::SetStores { set, stores, admin } => Change::SetStores(pb::SetStores {
            set_id: *set,
            stores: stores.clone(),
            admin: admin.clone(),
        }),
        DirChange::BeginMove(m) => Change::BeginMove(pending_pb(m)),
        DirChange::FinishMove(m) => Change::FinishMove(pending_pb(m)),
    };
    pb::DirectoryChange {
        change: Some(change),
    }
}
