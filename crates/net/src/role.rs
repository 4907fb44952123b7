//! Who a caller is, as its certificate says.
//!
//! A peer- or admin-plane caller proves who it is with a client
//! certificate from the cluster's CA. The certificate names exactly one
//! seqsvr role in a URI subject alternative name:
//!
//! | role | URI SAN |
//! | --- | --- |
//! | store replica with Raft node id 3 | `urn:seqsvr:store:3` |
//! | AllocSvr `alloc-1` | `urn:seqsvr:alloc:alloc-1` |
//! | operator `alice` | `urn:seqsvr:operator:alice` |
//!
//! A URI SAN is the standard place for a machine identity (SPIFFE puts its
//! ids there too), sits beside the DNS and IP SANs a server certificate
//! needs anyway, and so one certificate can serve a process as both server
//! and client. The subject's common name is not used: it is free text, and
//! TLS libraries no longer match on it.
//!
//! A certificate with no seqsvr role, or with several, is refused: there
//! is no "primary" role to fall back on, and a certificate that says two
//! things is a mistake in issuing it.

use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;
use x509_parser::extensions::GeneralName;

/// Every seqsvr role URI starts with this.
pub const URN_PREFIX: &str = "urn:seqsvr:";

/// A caller's role.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A store replica, by Raft node id.
    Store(u64),
    /// An AllocSvr, by alloc id.
    Alloc(String),
    /// An operator, by name.
    Operator(String),
}

impl Role {
    /// The role's kind as written in its URI and in messages: `store`,
    /// `alloc` or `operator`.
    pub fn kind(&self) -> &'static str {
        match self {
            Role::Store(_) => "store",
            Role::Alloc(_) => "alloc",
            Role::Operator(_) => "operator",
        }
    }

    /// The URI SAN that carries this role in a certificate.
    pub fn uri(&self) -> String {
        format!("{URN_PREFIX}{self}")
    }

    /// Parses a URI SAN. `Ok(None)` means the URI is not a seqsvr role
    /// (a certificate may carry other URIs); `Err` means it claims to be
    /// one but is malformed.
    pub fn from_uri(uri: &str) -> Result<Option<Role>> {
        let Some(rest) = strip_prefix_ignore_case(uri, URN_PREFIX) else {
            return Ok(None);
        };
        let bad = |reason| Error::BadRole {
            uri: uri.to_string(),
            reason,
        };
        let (kind, id) = rest
            .split_once(':')
            .ok_or_else(|| bad("expected urn:seqsvr:<kind>:<id>"))?;
        match kind {
            "store" => {
                let id = id
                    .parse::<u64>()
                    .map_err(|_| bad("a store id is a decimal node id"))?;
                Ok(Some(Role::Store(id)))
            }
            "alloc" => Ok(Some(Role::Alloc(checked_name(id).map_err(bad)?))),
            "operator" => Ok(Some(Role::Operator(checked_name(id).map_err(bad)?))),
            _ => Err(bad("the kind must be store, alloc or operator")),
        }
    }

    /// The role in a DER-encoded X.509 certificate: the one seqsvr URI
    /// SAN it carries. Zero or several seqsvr URIs, or a malformed one,
    /// are refused.
    pub fn from_cert_der(der: &[u8]) -> Result<Role> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| Error::Certificate(e.to_string()))?;
        let san = cert
            .subject_alternative_name()
            .map_err(|e| Error::Certificate(e.to_string()))?;
        let mut found = None;
        let mut count = 0;
        for name in san.iter().flat_map(|s| s.value.general_names.iter()) {
            if let GeneralName::URI(uri) = name {
                if let Some(role) = Role::from_uri(uri)? {
                    count += 1;
                    found.get_or_insert(role);
                }
            }
        }
        match (found, count) {
            (Some(role), 1) => Ok(role),
            (None, _) => Err(Error::NoRole),
            (Some(_), n) => Err(Error::ManyRoles(n)),
        }
    }
}

/// `store:3`, `alloc:alloc-1`, `operator:alice`: the URI without its
/// `urn:seqsvr:` prefix.
impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Store(id) => write!(f, "store:{id}"),
            Role::Alloc(id) => write!(f, "alloc:{id}"),
            Role::Operator(name) => write!(f, "operator:{name}"),
        }
    }
}

/// Parses either the full URI or its short form (`store:3`).
impl FromStr for Role {
    type Err = Error;

    fn from_str(s: &str) -> Result<Role> {
        let uri;
        let full = if strip_prefix_ignore_case(s, URN_PREFIX).is_some() {
            s
        } else {
            uri = format!("{URN_PREFIX}{s}");
            &uri
        };
        Role::from_uri(full)?.ok_or_else(|| Error::BadRole {
            uri: s.to_string(),
            reason: "not a seqsvr role",
        })
    }
}

/// URN scheme and namespace are case-insensitive; the rest is not.
fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Alloc ids and operator names: non-empty, at most 128 characters, URI
/// unreserved characters only, so the URI needs no escaping and reads the
/// same in logs.
fn checked_name(id: &str) -> std::result::Result<String, &'static str> {
    if id.is_empty() || id.len() > 128 {
        return Err("an id is 1 to 128 characters");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
    {
        return Err("an id uses only letters, digits, '-', '.', '_' and '~'");
    }
    Ok(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with_uris(uris: &[&str]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        for u in uris {
            params
                .subject_alt_names
                .push(rcgen::SanType::URI((*u).try_into().unwrap()));
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn uri_round_trip() {
        for role in [
            Role::Store(3),
            Role::Alloc("alloc-1".into()),
            Role::Operator("alice".into()),
        ] {
            assert_eq!(Role::from_uri(&role.uri()).unwrap(), Some(role.clone()));
            assert_eq!(role.to_string().parse::<Role>().unwrap(), role);
            assert_eq!(role.uri().parse::<Role>().unwrap(), role);
        }
        assert_eq!(Role::Store(7).uri(), "urn:seqsvr:store:7");
        assert_eq!(
            Role::from_uri("URN:SEQSVR:alloc:a").unwrap(),
            Some(Role::Alloc("a".into()))
        );
    }

    #[test]
    fn foreign_and_malformed_uris() {
        assert_eq!(Role::from_uri("spiffe://x/y").unwrap(), None);
        assert_eq!(Role::from_uri("urn:other:store:1").unwrap(), None);
        for bad in [
            "urn:seqsvr:store",
            "urn:seqsvr:store:x",
            "urn:seqsvr:store:-1",
            "urn:seqsvr:alloc:",
            "urn:seqsvr:alloc:a/b",
            "urn:seqsvr:alloc:a:b",
            "urn:seqsvr:king:arthur",
        ] {
            assert!(Role::from_uri(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn one_role_per_certificate() {
        let der = cert_with_uris(&["spiffe://cluster/x", "urn:seqsvr:alloc:a1"]);
        assert_eq!(Role::from_cert_der(&der).unwrap(), Role::Alloc("a1".into()));

        let der = cert_with_uris(&[]);
        assert!(matches!(Role::from_cert_der(&der), Err(Error::NoRole)));

        let der = cert_with_uris(&["urn:seqsvr:store:1", "urn:seqsvr:operator:bob"]);
        assert!(matches!(
            Role::from_cert_der(&der),
            Err(Error::ManyRoles(2))
        ));

        let der = cert_with_uris(&["urn:seqsvr:store:1", "urn:seqsvr:store:1"]);
        assert!(matches!(
            Role::from_cert_der(&der),
            Err(Error::ManyRoles(2))
        ));

        let der = cert_with_uris(&["urn:seqsvr:store:one"]);
        assert!(matches!(
            Role::from_cert_der(&der),
            Err(Error::BadRole { .. })
        ));

        assert!(matches!(
            Role::from_cert_der(b"not a certificate"),
            Err(Error::Certificate(_))
        ));
    }
}
