//! What a client requires of the server it dials: a certificate from the
//! cluster's CA for the name dialed, *and* the role the caller expects.
//!
//! Every seqsvr process's certificate comes from the same CA, so the CA
//! alone proves only "some seqsvr process". Without a role check an
//! AllocSvr's certificate (or another set's replica's) could answer for a
//! store replica: an AllocSvr would renew its lease with it, an operator's
//! `seqctl` would read routes and send admin calls to it, and a replica
//! would send it Raft messages. So a [`ClientTls`](crate::ClientTls) may
//! carry a [`ServerRole`], and [`RoleVerifier`] checks the server's
//! certificate first as rustls's WebPKI verifier does (chain to the CA,
//! validity, the name dialed), then reads its role
//! ([`Role::from_cert_der`]) and refuses the handshake if the role is not
//! the one expected (`docs/architecture/security.md`, "Whom a client
//! dials").

use crate::error::Error;
use crate::role::Role;
use std::fmt;
use std::sync::Arc;
use tokio_rustls::rustls::{
    self,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    client::WebPkiServerVerifier,
    pki_types::{CertificateDer, ServerName, UnixTime},
    DigitallySignedStruct, OtherError, SignatureScheme,
};

/// The role a client requires of the server it dials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerRole {
    /// A store replica of any set: for callers that do not know which set
    /// the addresses they were given belong to.
    AnyStore,
    /// A store replica of this set's group.
    Store(u32),
    /// An AllocSvr.
    Alloc,
    /// A server of the cluster, store replica (any set) or AllocSvr: for
    /// callers given addresses that may be either (a client's seeds, a
    /// health probe). An operator's certificate is refused.
    Server,
}

impl ServerRole {
    /// Whether `role` is what this expects. An old-form store certificate
    /// (`store:<id>`, no set) is a store replica of *some* set: it passes
    /// [`ServerRole::AnyStore`], and [`ServerRole::Store`] only if
    /// `legacy` allows it (a cluster whose certificates are being
    /// re-issued, as on the server side).
    pub fn admits(&self, role: &Role, legacy: bool) -> bool {
        match (self, role) {
            (ServerRole::AnyStore, Role::Store(_) | Role::LegacyStore(_)) => true,
            (ServerRole::Store(set), Role::Store(s)) => s.set == *set,
            (ServerRole::Store(_), Role::LegacyStore(_)) => legacy,
            (ServerRole::Alloc, Role::Alloc(_)) => true,
            (ServerRole::Server, Role::Store(_) | Role::LegacyStore(_) | Role::Alloc(_)) => true,
            _ => false,
        }
    }
}

/// As in messages: "a store replica", "a store replica of set 1", "an
/// AllocSvr".
impl fmt::Display for ServerRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerRole::AnyStore => write!(f, "a store replica"),
            ServerRole::Store(set) => write!(f, "a store replica of set {set}"),
            ServerRole::Alloc => write!(f, "an AllocSvr"),
            ServerRole::Server => write!(f, "a store replica or an AllocSvr"),
        }
    }
}

/// What a certificate's role is, for a refusal: "an alloc certificate
/// (alloc:alloc-1)", "a store certificate (store:1:4)".
fn described(role: &Role) -> String {
    let article = if role.kind() == "alloc" || role.kind() == "operator" {
        "an"
    } else {
        "a"
    };
    format!("{article} {} certificate ({role})", role.kind())
}

/// The WebPKI check plus the role check, for one address.
#[derive(Debug)]
pub(crate) struct RoleVerifier {
    /// Chain, validity and name, as rustls checks them by default.
    pub(crate) webpki: Arc<WebPkiServerVerifier>,
    /// The role required, if any (`None`: any certificate of the CA).
    pub(crate) expect: Option<ServerRole>,
    /// Whether an old-form store certificate passes [`ServerRole::Store`].
    pub(crate) legacy: bool,
    /// The address dialed, for the refusal.
    pub(crate) addr: String,
}

impl RoleVerifier {
    /// Checks the role of a certificate the WebPKI verifier accepted.
    fn check(&self, end_entity: &CertificateDer<'_>) -> Result<(), Error> {
        let Some(expect) = self.expect else {
            return Ok(());
        };
        let found = match Role::from_cert_der(end_entity) {
            Ok(role) if expect.admits(&role, self.legacy) => return Ok(()),
            Ok(role) => described(&role),
            Err(e) => format!("a certificate without a usable role ({e})"),
        };
        Err(Error::WrongServer {
            addr: self.addr.clone(),
            found,
            expected: expect.to_string(),
        })
    }
}

impl ServerCertVerifier for RoleVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        self.check(end_entity)
            .map_err(|e| rustls::Error::Other(OtherError(Arc::new(e))))?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }

    fn root_hint_subjects(&self) -> Option<&[rustls::DistinguishedName]> {
        self.webpki.root_hint_subjects()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::StoreId;

    #[test]
    fn what_each_expectation_admits() {
        let store = |set, id| Role::Store(StoreId::new(set, id));
        let alloc = Role::Alloc("alloc-1".into());
        let ops = Role::Operator("alice".into());
        let old = Role::LegacyStore(2);
        use ServerRole::*;
        // (expected, role, legacy allowed, admitted)
        let table = [
            (AnyStore, store(0, 1), false, true),
            (AnyStore, store(7, 1), false, true),
            (AnyStore, old.clone(), false, true),
            (AnyStore, alloc.clone(), false, false),
            (AnyStore, ops.clone(), false, false),
            (Store(1), store(1, 4), false, true),
            (Store(1), store(0, 4), false, false),
            (Store(1), old.clone(), false, false),
            (Store(1), old.clone(), true, true),
            (Store(1), alloc.clone(), true, false),
            (Alloc, alloc.clone(), false, true),
            (Alloc, store(0, 1), false, false),
            (Alloc, ops.clone(), false, false),
            (Server, store(3, 1), false, true),
            (Server, old.clone(), false, true),
            (Server, alloc.clone(), false, true),
            (Server, ops.clone(), true, false),
        ];
        for (expect, role, legacy, want) in table {
            assert_eq!(
                expect.admits(&role, legacy),
                want,
                "{expect} / {role} / legacy {legacy}"
            );
        }
    }

    #[test]
    fn refusals_say_what_came_and_what_was_expected() {
        let e = Error::WrongServer {
            addr: "10.0.0.1:7102".into(),
            found: described(&Role::Alloc("alloc-1".into())),
            expected: ServerRole::AnyStore.to_string(),
        };
        assert_eq!(
            e.to_string(),
            "the server at 10.0.0.1:7102 presented an alloc certificate (alloc:alloc-1); \
             a store replica was expected"
        );
    }
}
