//! `seqctl set …`: adding a set, moving a uid range between sets, and the
//! view of every set. The protocols are in `docs/architecture/sets.md`;
//! how to run them in `docs/operations.md`.
//!
//! - [`Sets`]: the cluster as the operator reaches it: the directory (from
//!   any store seed), each set's store group (client and admin planes) and
//!   AllocSvrs (admin plane).
//! - [`add`]: `set add` — a fresh store group starts serving a free range.
//! - [`mover`]: `set move` — freeze in the source, release, install in the
//!   destination at the final ceilings plus a step, flip the directory.
//! - [`view`]: `set status` — the directory and every set.
//!
//! Every step is idempotent in the stores, so running the same command
//! again after any crash finishes the job or reports it finished.

pub mod add;
pub mod mover;
pub mod view;

use std::time::Duration;

use seqsvr_core::directory::HOME_SET;
use seqsvr_core::{DirSet, Directory, SetId};
use seqsvr_net::{ClientTls, ServerRole};
use seqsvr_proto::alloc_admin_client::AllocAdminClient;
use seqsvr_proto::store_admin_client::StoreAdminClient;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::client::{connector, Connector};
use seqsvr_store_api::{ReadClient, SetsClient};
use tonic::transport::Channel;

/// How long one status or AllocSvr call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// What can go wrong running a sets command.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A store refused or failed a call.
    #[error(transparent)]
    Store(#[from] seqsvr_store_api::Error),
    /// The command cannot be run as given (the message says why).
    #[error("{0}")]
    Refused(String),
    /// The command was stopped on purpose after a step (`--stop-after`).
    #[error("stopped after step {0} as asked")]
    Stopped(&'static str),
}

/// Result alias for sets commands.
pub type Result<T> = std::result::Result<T, Error>;

/// The cluster as `seqctl set …` reaches it.
#[derive(Clone)]
pub struct Sets {
    /// Store client-plane addresses to learn the directory from (any set).
    seeds: Vec<String>,
    /// How store and AllocSvr planes are dialed.
    tls: Option<ClientTls>,
    connect: Connector,
}

impl std::fmt::Debug for Sets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sets").field("seeds", &self.seeds).finish()
    }
}

impl Sets {
    /// Starts from store client-plane `seeds` of any set.
    pub fn new(seeds: &[String], tls: Option<ClientTls>) -> Self {
        Self {
            seeds: seeds.to_vec(),
            connect: connector(tls.clone().map(|t| t.expecting(ServerRole::AnyStore))),
            tls,
        }
    }

    /// The route table (with its directory copy) of the store group at
    /// client-plane `addrs`.
    pub async fn routes(&self, addrs: &[String]) -> Result<seqsvr_core::RouteTable> {
        Ok(ReadClient::new(addrs, &self.connect)?.routes().await?)
    }

    /// The home group's directory: read from the seeds, then from set 0's
    /// own stores (a seed of another set holds a copy that may lag).
    pub async fn directory(&self) -> Result<Directory> {
        let seen = self.routes(&self.seeds).await?.directory.ok_or_else(|| {
            Error::Refused("the seed stores hold no directory yet (still bootstrapping?)".into())
        })?;
        if seen
            .sets
            .get(&HOME_SET)
            .is_some_and(|h| h.stores.is_empty())
        {
            return Err(Error::Refused(
                "set 0 has not recorded its store addresses yet; try again in a few seconds".into(),
            ));
        }
        let home = self.set(&seen, HOME_SET)?.stores.clone();
        if home.iter().any(|a| self.seeds.contains(a)) {
            return Ok(seen);
        }
        let d = self.routes(&home).await?.directory.ok_or_else(|| {
            Error::Refused("set 0's stores hold no directory (is set 0 the home set?)".into())
        })?;
        Ok(if d.version >= seen.version { d } else { seen })
    }

    /// Set `id`'s directory entry.
    pub fn set<'d>(&self, dir: &'d Directory, id: SetId) -> Result<&'d DirSet> {
        dir.sets
            .get(&id)
            .ok_or_else(|| Error::Refused(format!("no set {id} in the directory")))
    }

    /// The sets service of a set's store group.
    /// Its replicas must present store certificates of that set.
    pub fn sets_client(&self, set: &DirSet) -> Result<SetsClient> {
        let tls = self.tls.clone();
        let connect = connector(tls.map(|t| t.expecting(ServerRole::Store(set.spec.set_id))));
        Ok(SetsClient::new(&set.admin, &connect)?)
    }

    /// The sets service of a store group at admin-plane `admin`.
    pub fn sets_client_at(&self, admin: &[String]) -> Result<SetsClient> {
        Ok(SetsClient::new(admin, &self.connect)?)
    }

    /// The home group's sets service.
    pub fn home(&self, dir: &Directory) -> Result<SetsClient> {
        self.sets_client(self.set(dir, HOME_SET)?)
    }

    /// Hands `dir` to every set but the home one. Copies only help clients
    /// find sets; safety never rests on them, so a set that cannot be
    /// reached is reported, not fatal (running the command again retries).
    pub async fn copy_everywhere(&self, dir: &Directory) -> Vec<(SetId, String)> {
        let mut failed = Vec::new();
        for (id, set) in dir.sets.iter().filter(|(id, _)| **id != HOME_SET) {
            let r = match self.sets_client(set) {
                Ok(c) => c.copy_directory(dir).await.map_err(Error::from),
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                failed.push((*id, e.to_string()));
            }
        }
        failed
    }

    /// Refuses to go on if a set of `needed` (other than the home set,
    /// which holds the directory itself) did not take the directory copy
    /// that shows `what`: its store group would refuse the freeze or
    /// install. Running the command again pushes the copy again.
    pub fn require_copies(
        &self,
        failed: &[(SetId, String)],
        needed: &[SetId],
        what: &str,
    ) -> Result<()> {
        match failed.iter().find(|(id, _)| needed.contains(id)) {
            Some((id, e)) => Err(Error::Refused(format!(
                "set {id} did not take the directory copy that shows {what}: {e} \
                 (its store group judges the command by that copy; run the command again)"
            ))),
            None => Ok(()),
        }
    }

    /// The status of every replica at admin-plane `admin`, the leader's
    /// (with its lease view of the AllocSvrs) first if one answered.
    pub async fn leader_status(&self, admin: &[String]) -> Option<pb::StoreStatus> {
        for a in admin {
            let Ok(ch) = (self.connect)(a) else { continue };
            let mut c = StoreAdminClient::new(ch);
            let call = tokio::time::timeout(CALL_TIMEOUT, c.status(pb::StatusRequest {}));
            if let Ok(Ok(s)) = call.await {
                let s = s.into_inner();
                if s.leads() {
                    return Some(s);
                }
            }
        }
        None
    }

    /// The leader's status as the client planes at `addrs` report it
    /// (with its lease view of the AllocSvrs), if a leader answers.
    pub async fn leader_status_read(&self, addrs: &[String]) -> Result<Option<pb::StoreStatus>> {
        Ok(ReadClient::new(addrs, &self.connect)?.leader_status().await)
    }

    /// A client of the AllocSvr admin plane at `addr`.
    pub fn alloc_admin(&self, addr: &str) -> Result<AllocAdminClient<Channel>> {
        let tls = self.tls.clone().map(|t| t.expecting(ServerRole::Alloc));
        let ch = seqsvr_net::client::channel(addr, tls.as_ref(), CALL_TIMEOUT)
            .map_err(|e| Error::Refused(format!("AllocSvr admin plane {addr}: {e}")))?;
        Ok(AllocAdminClient::new(ch))
    }
}

/// Parses `begin..end` (uids).
pub fn parse_range(s: &str) -> std::result::Result<(u64, u64), String> {
    let (b, e) = s
        .split_once("..")
        .ok_or_else(|| format!("{s:?} is not BEGIN..END"))?;
    let n = |x: &str| {
        x.trim()
            .replace('_', "")
            .parse::<u64>()
            .map_err(|e| format!("{x:?}: {e}"))
    };
    let (b, e) = (n(b)?, n(e)?);
    if b >= e {
        return Err(format!("empty or inverted range {b}..{e}"));
    }
    Ok((b, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_or_say_why_not() {
        assert_eq!(parse_range("10..20"), Ok((10, 20)));
        assert_eq!(parse_range("10_000..20_000"), Ok((10_000, 20_000)));
        assert!(parse_range("20..10").unwrap_err().contains("inverted"));
        assert!(parse_range("5..5").unwrap_err().contains("empty"));
        assert!(parse_range("5-7").unwrap_err().contains("BEGIN..END"));
        assert!(parse_range("a..7").is_err());
    }
}
