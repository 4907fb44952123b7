//! Who may call what on a store replica: the roles of the planes, checked
//! on every peer and admin call (see `docs/architecture/security.md`).
//!
//! - Raft RPCs: store replicas only.
//! - AllocSvr calls (register, renew, take over, raise, hand off): alloc X
//!   acting as X — or a store replica forwarding a call it checked itself.
//! - Admin calls: operators only.

use tonic::{Request, Status};

pub use seqsvr_net::auth::Auth;

/// Metadata key marking a call forwarded by another replica (which checked
/// the caller itself).
pub const FORWARDED: &str = "x-seqsvr-forwarded";

/// Checks a peer-plane call made in the name of AllocSvr `id`: from alloc
/// `id` itself, or forwarded by a store replica that is one of `members`
/// of this group (which checked the AllocSvr itself).
///
/// Only members may forward: a member is trusted with the group's log
/// anyway (as leader it writes any entry it likes), so trusting it to
/// have checked the AllocSvr's certificate adds no power. A store
/// certificate of anything else — another set's replica, a removed one
/// still running, one issued to no group — would otherwise act as every
/// AllocSvr (`docs/architecture/security.md`, "Forwarded calls").
pub fn require_alloc_or_forward<T>(
    auth: Auth,
    req: &Request<T>,
    id: &str,
    members: &[u64],
) -> Result<(), Status> {
    if req.metadata().contains_key(FORWARDED) {
        if let seqsvr_net::role::Role::Store(n) = auth.require_store(req)? {
            if auth != Auth::Insecure && !members.contains(&n) {
                return Err(Status::permission_denied(format!(
                    "store {n} is not a member of this group and may not forward AllocSvr calls"
                )));
            }
        }
    } else {
        auth.require_alloc(req, id)?;
    }
    Ok(())
}

/// Checks a read forwarded over the peer plane: from an AllocSvr (any) or
/// a store replica.
pub fn require_peer<T>(auth: Auth, req: &Request<T>) -> Result<(), Status> {
    if auth == Auth::Insecure {
        return Ok(());
    }
    match auth.caller(req)? {
        seqsvr_net::role::Role::Store(_) | seqsvr_net::role::Role::Alloc(_) => Ok(()),
        other => Err(Status::permission_denied(format!(
            "a {} certificate may not use the peer plane",
            other.kind()
        ))),
    }
}
