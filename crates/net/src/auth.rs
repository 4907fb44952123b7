//! The per-call role check on the peer and admin planes.
//!
//! TLS on those planes proves that a caller holds a certificate from the
//! cluster's CA; it does not say what the caller may do. A handler states
//! that with one call at its top:
//!
//! ```ignore
//! let who = self.auth.require_alloc(&req, &req.get_ref().alloc_id)?;
//! ```
//!
//! so an AllocSvr can renew only its own lease, only store replicas can
//! send Raft messages, and only operators can drain or reassign.
//!
//! The client plane never calls this: its callers are not identified.
//!
//! # Cost
//!
//! The check runs on every peer- and admin-plane call (Raft appends,
//! lease renewals), so it does not parse the certificate each time. tonic
//! hands every call on one TLS connection the same `Arc` of peer
//! certificates; the role found for that `Arc` is kept in a small
//! per-thread table holding a `Weak` to it. A call then costs a request
//! extension look-up, a pointer comparison per table entry and a clone of
//! the role (an allocation for alloc and operator names). Holding the
//! `Weak` keeps the `Arc`'s allocation from being reused while its entry
//! exists, so an address seen again is the same connection's certificates.
//!
//! # Insecure mode
//!
//! [`Auth::Insecure`] is for plaintext listeners on loopback (a developer's
//! machine, tests). There is no certificate to read, so **every caller is
//! trusted**: each check passes and returns a stand-in role (see the
//! methods). Never use it where another host can connect.

use crate::role::{Role, StoreId};
use std::cell::RefCell;
use std::fmt::Display;
use std::sync::{Arc, Weak};
use tokio_rustls::rustls::pki_types::CertificateDer;
use tonic::{Request, Status};

/// The name of the stand-in operator that [`Auth::Insecure`] reports.
pub const INSECURE_OPERATOR: &str = "insecure";

/// How a listener's callers are identified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// By the role in the client certificate of the call's TLS connection.
    Tls,
    /// Not at all: plaintext on loopback, every caller is trusted.
    Insecure,
}

type Certs = Arc<Vec<CertificateDer<'static>>>;

impl Auth {
    /// The caller's role. Under [`Auth::Insecure`] the caller is taken to
    /// be the operator [`INSECURE_OPERATOR`], who may do anything.
    pub fn caller<T>(self, req: &Request<T>) -> Result<Role, Status> {
        match self {
            Auth::Insecure => Ok(Role::Operator(INSECURE_OPERATOR.to_string())),
            Auth::Tls => {
                let certs = req
                    .peer_certs()
                    .ok_or_else(|| no_cert(&"any seqsvr role"))?;
                role_of(&certs)
            }
        }
    }

    /// Passes a store replica: any set, any node id, and the old form
    /// without a set too — which of them may do what is the store's to
    /// judge (its set, its membership, its config). Under
    /// [`Auth::Insecure`] the returned role is `Store(0:0)`, an id no
    /// replica has.
    pub fn require_store<T>(self, req: &Request<T>) -> Result<Role, Status> {
        match self {
            Auth::Insecure => Ok(Role::Store(StoreId::new(0, 0))),
            Auth::Tls => {
                let role = self.presented(req, &"store:<set>:<id>")?;
                match role {
                    Role::Store(_) | Role::LegacyStore(_) => Ok(role),
                    other => Err(denied(&"store:<set>:<id>", &other)),
                }
            }
        }
    }

    /// Passes exactly the AllocSvr `id`. Under [`Auth::Insecure`] the
    /// returned role is `Alloc(id)`.
    pub fn require_alloc<T>(self, req: &Request<T>, id: &str) -> Result<Role, Status> {
        match self {
            Auth::Insecure => Ok(Role::Alloc(id.to_string())),
            Auth::Tls => {
                // The id comes from the request: quote at most a bounded
                // prefix of it, or a huge one would overflow the status
                // header and break the response itself.
                let shown = Shown(id);
                let role = self.presented(req, &format_args!("alloc:{shown}"))?;
                match &role {
                    Role::Alloc(have) if have == id => Ok(role),
                    other => Err(denied(&format_args!("alloc:{shown}"), other)),
                }
            }
        }
    }

    /// Passes any operator. Under [`Auth::Insecure`] the returned role is
    /// `Operator(INSECURE_OPERATOR)`.
    pub fn require_operator<T>(self, req: &Request<T>) -> Result<Role, Status> {
        match self {
            Auth::Insecure => Ok(Role::Operator(INSECURE_OPERATOR.to_string())),
            Auth::Tls => {
                let role = self.presented(req, &"operator:<name>")?;
                match role {
                    Role::Operator(_) => Ok(role),
                    other => Err(denied(&"operator:<name>", &other)),
                }
            }
        }
    }

    fn presented<T>(self, req: &Request<T>, want: &dyn Display) -> Result<Role, Status> {
        let certs = req.peer_certs().ok_or_else(|| no_cert(want))?;
        role_of(&certs)
    }
}

fn no_cert(want: &dyn Display) -> Status {
    Status::unauthenticated(format!(
        "this call needs a client certificate with role {want}; none was presented"
    ))
}

fn denied(want: &dyn Display, have: &Role) -> Status {
    Status::permission_denied(format!(
        "this call needs role {want}; the caller presented {have}"
    ))
}

/// Entries per thread. A thread serves calls from many connections, but a
/// peer or admin listener has few callers (replicas, AllocSvrs,
/// operators); a miss only costs a parse.
const CACHE_ENTRIES: usize = 32;

thread_local! {
    static ROLES: RefCell<Vec<(Weak<Vec<CertificateDer<'static>>>, Role)>> =
        const { RefCell::new(Vec::new()) };
}

/// The role in the first (leaf) certificate, cached per `Arc` as the
/// module doc explains.
fn role_of(certs: &Certs) -> Result<Role, Status> {
    let key = Arc::as_ptr(certs);
    let hit = ROLES.with(|t| {
        t.borrow()
            .iter()
            .find(|(w, _)| w.as_ptr() == key)
            .map(|(_, r)| r.clone())
    });
    if let Some(role) = hit {
        return Ok(role);
    }
    let leaf = certs.first().ok_or_else(|| no_cert(&"any seqsvr role"))?;
    let role = Role::from_cert_der(leaf).map_err(|e| {
        Status::permission_denied(format!("the client certificate is not usable here: {e}"))
    })?;
    ROLES.with(|t| {
        let mut t = t.borrow_mut();
        t.retain(|(w, _)| w.strong_count() > 0);
        if t.len() >= CACHE_ENTRIES {
            t.remove(0);
        }
        t.push((Arc::downgrade(certs), role.clone()));
    });
    Ok(role)
}

/// A caller-supplied name in an error message: at most 64 bytes of it.
struct Shown<'a>(&'a str);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MAX: usize = 64;
        if self.0.len() <= MAX {
            return f.write_str(self.0);
        }
        let mut end = MAX;
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{}… ({} bytes)", &self.0[..end], self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn insecure_trusts_everyone() {
        let req = Request::new(());
        let a = Auth::Insecure;
        assert_eq!(
            a.caller(&req).unwrap(),
            Role::Operator(INSECURE_OPERATOR.into())
        );
        assert_eq!(
            a.require_store(&req).unwrap(),
            Role::Store(StoreId::new(0, 0))
        );
        assert_eq!(
            a.require_alloc(&req, "a1").unwrap(),
            Role::Alloc("a1".into())
        );
        assert!(a.require_operator(&req).is_ok());
    }

    #[test]
    fn tls_without_certificate_is_unauthenticated() {
        let req = Request::new(());
        let a = Auth::Tls;
        for r in [
            a.caller(&req),
            a.require_store(&req),
            a.require_alloc(&req, "a1"),
            a.require_operator(&req),
        ] {
            let e = r.unwrap_err();
            assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
            assert!(e.message().contains("none was presented"), "{e:?}");
        }
    }

    #[test]
    fn cache_follows_the_arc_not_the_address() {
        let mk = |uri: &str| {
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.subject_alt_names
                .push(rcgen::SanType::URI(uri.try_into().unwrap()));
            let k = rcgen::KeyPair::generate().unwrap();
            let der = p.self_signed(&k).unwrap().der().clone();
            Arc::new(vec![der])
        };
        let a = mk("urn:seqsvr:store:0:1");
        assert_eq!(role_of(&a).unwrap(), Role::Store(StoreId::new(0, 1)));
        assert_eq!(role_of(&a).unwrap(), Role::Store(StoreId::new(0, 1)));
        drop(a);
        // The dead entry pins its allocation, so a new Arc cannot alias it.
        let b = mk("urn:seqsvr:alloc:x");
        assert_eq!(role_of(&b).unwrap(), Role::Alloc("x".into()));
        for i in 0..(CACHE_ENTRIES as u64 + 5) {
            let c = mk(&format!("urn:seqsvr:store:1:{i}"));
            assert_eq!(role_of(&c).unwrap(), Role::Store(StoreId::new(1, i)));
        }
        ROLES.with(|t| assert!(t.borrow().len() <= CACHE_ENTRIES));
    }
}
