//! `seqctl`'s operator commands, one file per command group:
//!
//! - `status`: `seqctl status` and `seqctl sections`, read-only views of
//!   the store group, the set, routes and leases;
//! - `alloc`: `seqctl alloc …`: planned moves (drain, undrain, rebalance)
//!   and fencing an AllocSvr incarnation;
//! - `store`: `seqctl store …`: store group settings (lease terms);
//! - `id`: `seqctl id layouts | decode | next | create | show`: time-ordered
//!   ids (layouts offline; ids, namespaces against the cluster);
//! - `import`: `seqctl counter import leaf | tinyid | redis`: named
//!   counters' floors from the system a team moves away from;
//! - `health`: `seqctl health <addr>`: one process's own status, as a
//!   probe (exit 0 healthy, 1 not ready, 2 unreachable);
//! - `settings`: where the addresses and credentials come from (flags,
//!   environment, a profile, the dev cluster's defaults);
//! - `print`: text or `--json` output;
//! - `reach`: whether anything listens there, asked before the calls;
//! - here: [`Ctl`], the cluster as those commands reach it.
//!
//! A command group is a clap subcommand enum and a `run` function in its
//! own file; `bin/seqctl.rs` only parses the global flags and dispatches.
//!
//! What the commands talk to:
//!
//! - one process's **client plane** (`health`): its own `Status`;
//! - the store's **client plane** ([`ReadClient`]): routes, sections,
//!   each replica's status;
//! - the store's **admin plane** ([`AdminClient`], operator certificate
//!   under TLS): draining marks, `Assign` (conditional on the epochs just
//!   read, so a section that moved meanwhile is not moved again), lease
//!   terms, fencing, and the leader's lease view of the AllocSvrs;
//! - an AllocSvr's **admin plane** (its address from that lease view):
//!   `Handoff`.

pub mod alloc;
pub mod counter;
pub mod health;
pub mod id;
pub mod import;
pub mod members;
pub mod print;
pub mod reach;
pub mod set;
pub mod settings;
pub mod status;
pub mod store;

use std::time::Duration;

use seqsvr_net::{ClientTls, ServerRole};
use seqsvr_proto::alloc_admin_client::AllocAdminClient;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::store_admin_client::StoreAdminClient;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::client::connector;
use seqsvr_store_api::{AdminClient, ReadClient};
use tonic::transport::Channel;

use crate::error::{Context, Error, Result};

pub use alloc::{drain, fence, parse_incarnation, rebalance, undrain};
pub use status::{sections, status};
pub use store::set_lease;

/// How long one replica's status may take.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// How long dialing an AllocSvr's admin plane may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A cluster as `seqctl` reaches it.
#[derive(Clone)]
pub struct Ctl {
    /// The store replicas' client planes.
    pub read: ReadClient,
    /// The store replicas' admin planes.
    pub admin: AdminClient,
    /// Each admin plane on its own, for per-replica status (status is not
    /// forwarded: only the leader knows the leases).
    admin_replicas: Vec<(String, StoreAdminClient<Channel>)>,
    /// How AllocSvrs' admin planes are dialed.
    tls: Option<ClientTls>,
}

impl std::fmt::Debug for Ctl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctl")
            .field("read", &self.read)
            .field("admin", &self.admin)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Ctl {
    /// A cluster whose store replicas serve their client planes at `read`
    /// and their admin planes at `admin`, dialed with `tls` (the CA and,
    /// for the admin planes, an operator certificate) or in plaintext.
    pub fn new(read: &[String], admin: &[String], tls: Option<ClientTls>) -> Result<Ctl> {
        // The addresses are given without their set: any store replica's
        // certificate, never an AllocSvr's (docs/architecture/security.md,
        // "Whom a client dials").
        let connect = connector(tls.clone().map(|t| t.expecting(ServerRole::AnyStore)));
        let admin_replicas = admin
            .iter()
            .map(|a| {
                let ch = connect(a).map_err(Error::Usage)?;
                Ok((a.clone(), StoreAdminClient::new(ch)))
            })
            .collect::<Result<_>>()?;
        Ok(Ctl {
            read: ReadClient::new(read, &connect).context("store client plane")?,
            admin: AdminClient::new(admin, &connect).context("store admin plane")?,
            admin_replicas,
            tls,
        })
    }

    /// The store leader's status, with its lease view of every AllocSvr:
    /// from the admin plane, or, if no admin plane answers (no operator
    /// certificate, say), from the client plane.
    pub async fn leader_status(&self) -> Option<pb::StoreStatus> {
        let calls = self.admin_replicas.iter().map(|(_, c)| {
            let mut c = c.clone();
            async move {
                let call = tokio::time::timeout(STATUS_TIMEOUT, c.status(pb::StatusRequest {}));
                match call.await {
                    Ok(Ok(s)) => Some(s.into_inner()),
                    _ => None,
                }
            }
        });
        let from_admin = futures::future::join_all(calls)
            .await
            .into_iter()
            .flatten()
            .find(|s| s.leads());
        match from_admin {
            Some(s) => Some(s),
            None => self.read.leader_status().await,
        }
    }

    /// A client of the AllocSvr client plane at `addr`.
    pub(crate) fn alloc_client(&self, addr: &str) -> Result<AllocClient<Channel>> {
        let tls = self.tls.clone().map(|t| t.expecting(ServerRole::Alloc));
        let ch = seqsvr_net::client::channel(addr, tls.as_ref(), CONNECT_TIMEOUT)?;
        Ok(AllocClient::new(ch))
    }

    /// A client of the AllocSvr admin plane at `addr`.
    pub(crate) fn alloc_admin(&self, addr: &str) -> Result<AllocAdminClient<Channel>> {
        let tls = self.tls.clone().map(|t| t.expecting(ServerRole::Alloc));
        let ch = seqsvr_net::client::channel(addr, tls.as_ref(), CONNECT_TIMEOUT)?;
        Ok(AllocAdminClient::new(ch))
    }
}
