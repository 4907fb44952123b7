//! Who may call what on a store replica: the roles of the planes, checked
//! on every peer and admin call (see `docs/architecture/security.md`).
//!
//! - Raft RPCs: replicas of this set that are members of this group
//!   (`service::raft`, with [`StoreCerts::replica`]).
//! - AllocSvr calls (register, renew, take over, raise, hand off): alloc X
//!   acting as X — or a member of this group, of this set, forwarding a
//!   call it checked itself.
//! - Reads on the peer plane: any AllocSvr or store replica. They are the
//!   reads the client plane serves to anyone, so a store certificate of
//!   another set, or of the old form, gains nothing there.
//! - Admin calls: operators only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seqsvr_core::SetId;
use seqsvr_net::role::{Role, StoreId};
use seqsvr_store_api::Error;
use tonic::{Request, Status};

use crate::types::NodeId;

pub use seqsvr_net::auth::Auth;

/// Metadata key marking a call forwarded by another replica (which checked
/// the caller itself).
pub const FORWARDED: &str = "x-seqsvr-forwarded";

/// How often, at most, the acceptance of one old-form store certificate
/// is logged: each Raft heartbeat presents it, and one line a minute says
/// as much as ten a second.
const LEGACY_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Which store certificates speak for a replica of this group's set.
///
/// A store certificate names a set and a node id (`store:<set>:<id>`).
/// Node ids are numbered per group and every set's group shares the CA,
/// so the id alone says nothing: set 1's replica 2 would pass for set 0's
/// replica 2 in every membership check. A certificate of another set is
/// therefore refused, naming both sets. One of the old form
/// (`store:<id>`, no set) is refused too, unless this replica's config
/// allows it (`legacy_store_certificates`, for a cluster whose
/// certificates are being re-issued: `docs/operations.md`, "Rotating
/// certificates"); each acceptance is then logged as a warning naming
/// the caller.
#[derive(Clone, Debug)]
pub struct StoreCerts {
    /// This replica's set.
    set: SetId,
    /// Whether old-form certificates are taken as this set's.
    legacy: bool,
    /// When each old-form caller was last logged.
    warned: Arc<Mutex<HashMap<NodeId, Instant>>>,
}

impl StoreCerts {
    /// The judge for a replica of `set`, taking old-form certificates as
    /// that set's only if `legacy`.
    pub fn new(set: SetId, legacy: bool) -> Self {
        Self {
            set,
            legacy,
            warned: Default::default(),
        }
    }

    /// The node id a store role speaks for in this group, or why it
    /// speaks for none.
    pub fn judge(&self, role: &Role) -> Result<NodeId, String> {
        match *role {
            Role::Store(StoreId { set, id }) if set == self.set => Ok(id),
            Role::Store(StoreId { set, id }) => Err(format!(
                "store {set}:{id} is a replica of set {set}; this replica serves set {}",
                self.set
            )),
            Role::LegacyStore(id) if self.legacy => Ok(id),
            Role::LegacyStore(id) => Err(format!(
                "the certificate names store:{id}, the old form without a set; this \
                 replica (set {set}) takes it only with legacy_store_certificates = true \
                 in its config; re-issue it as store:{set}:{id}",
                set = self.set
            )),
            ref other => Err(format!(
                "this call needs role store:<set>:<id>, not {other}"
            )),
        }
    }

    /// The replica of this group's set a peer-plane caller is: `None` on
    /// an insecure plane, where nothing is checked; refused
    /// `PERMISSION_DENIED` (or `UNAUTHENTICATED`) for anything but a store
    /// certificate [`StoreCerts::judge`] passes.
    pub fn replica<T>(&self, auth: Auth, req: &Request<T>) -> Result<Option<NodeId>, Status> {
        let role = auth.require_store(req)?;
        if auth == Auth::Insecure {
            return Ok(None);
        }
        let id = self
            .judge(&role)
            .map_err(|e| Error::Denied(e).to_status())?;
        if let Role::LegacyStore(_) = role {
            self.warn_legacy(id, req.remote_addr());
        }
        Ok(Some(id))
    }

    fn warn_legacy(&self, id: NodeId, from: Option<std::net::SocketAddr>) {
        let now = Instant::now();
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        let due = warned
            .get(&id)
            .is_none_or(|at| now.duration_since(*at) >= LEGACY_WARNING_EVERY);
        if due {
            warned.insert(id, now);
            let from = from.map_or_else(|| "an unknown address".to_string(), |a| a.to_string());
            tracing::warn!(
                caller = %format_args!("store:{id}"),
                %from,
                set = self.set,
                "accepted an old-form store certificate (store:{id}, no set) from {from} as \
                 replica {id} of set {} because legacy_store_certificates = true; re-issue it \
                 as store:{}:{id} and turn the allowance off (docs/operations.md, Rotating \
                 certificates)",
                self.set,
                self.set,
            );
        }
    }
}

/// Checks a peer-plane call made in the name of AllocSvr `id`: from alloc
/// `id` itself, and never one marked forwarded.
///
/// Such calls are not forwarded between replicas: a follower answers
/// NOT_LEADER naming the leader, and the AllocSvr calls the leader itself
/// with its own certificate. A forwarded call carries nothing that proves
/// the AllocSvr made it, so a replica — any member, a removed one still
/// running, another set's — could invent it: hand off a live section,
/// register a made-up AllocSvr at an attacker's address, record a live
/// one's stop (`docs/architecture/security.md`, "Forwarded calls"). A
/// call marked forwarded is refused whoever presents it, members
/// included.
pub fn require_alloc_not_forwarded<T>(
    auth: Auth,
    req: &Request<T>,
    id: &str,
) -> Result<(), Status> {
    if req.metadata().contains_key(FORWARDED) {
        let by = match auth.caller(req) {
            Ok(r) => r.to_string(),
            Err(_) => "a caller".to_string(),
        };
        return Err(Status::permission_denied(format!(
            "a call in AllocSvr {id:?}'s name marked forwarded (by {by}) is refused: AllocSvr \
             calls are never forwarded between replicas (nothing in them proves the AllocSvr \
             made them); the AllocSvr calls the leader itself"
        )));
    }
    auth.require_alloc(req, id).map(|_| ())
}

/// Checks a read forwarded over the peer plane: from an AllocSvr (any) or
/// a store replica (any set, either form: the module's docs say why).
pub fn require_peer<T>(auth: Auth, req: &Request<T>) -> Result<(), Status> {
    if auth == Auth::Insecure {
        return Ok(());
    }
    match auth.caller(req)? {
        Role::Store(_) | Role::LegacyStore(_) | Role::Alloc(_) => Ok(()),
        other => Err(Status::permission_denied(format!(
            "a {} certificate may not use the peer plane",
            other.kind()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_certificate_speaks_for_its_own_set_only() {
        let set0 = StoreCerts::new(0, false);
        assert_eq!(set0.judge(&Role::Store(StoreId::new(0, 2))), Ok(2));
        let e = set0.judge(&Role::Store(StoreId::new(1, 2))).unwrap_err();
        assert!(e.contains("set 1") && e.contains("set 0"), "{e}");
        let e = set0.judge(&Role::LegacyStore(2)).unwrap_err();
        assert!(e.contains("legacy_store_certificates"), "{e}");
        assert!(e.contains("store:0:2"), "{e}");
        assert!(set0.judge(&Role::Alloc("a".into())).is_err());

        let allowing = StoreCerts::new(3, true);
        assert_eq!(allowing.judge(&Role::LegacyStore(2)), Ok(2));
        // The allowance is for the old form, not for other sets.
        assert!(allowing.judge(&Role::Store(StoreId::new(0, 2))).is_err());
        assert_eq!(allowing.judge(&Role::Store(StoreId::new(3, 2))), Ok(2));
    }

    #[test]
    fn insecure_checks_nothing() {
        let req = Request::new(());
        assert_eq!(
            StoreCerts::new(1, false)
                .replica(Auth::Insecure, &req)
                .unwrap(),
            None
        );
    }
}
