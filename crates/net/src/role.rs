//! Who a caller is, as its certificate says.
//!
//! A peer- or admin-plane caller proves who it is with a client
//! certificate from the cluster's CA. The certificate names exactly one
//! seqsvr role in a URI subject alternative name:
//!
//! | role | URI SAN |
//! | --- | --- |
//! | store replica with Raft node id 4 in set 1's group | `urn:seqsvr:store:1:4` |
//! | AllocSvr `alloc-1` | `urn:seqsvr:alloc:alloc-1` |
//! | operator `alice` | `urn:seqsvr:operator:alice` |
//!
//! A store certificate names the set as well as the node id because node
//! ids are numbered per group and every set's group shares the CA: with
//! the id alone, set 1's replica 2 would pass for set 0's replica 2. The
//! old form `urn:seqsvr:store:<id>`, issued before certificates named the
//! set, still parses (as [`Role::LegacyStore`]) so that a replica can say
//! what it refuses, and accept it where its config allows
//! (`docs/architecture/security.md`).
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

/// A store replica: the set whose group it belongs to and its Raft node
/// id in that group. Written `<set>:<id>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreId {
    /// The set (`SetSpec::set_id` of its group's config).
    pub set: u32,
    /// Its Raft node id, unique within the set's group only.
    pub id: u64,
}

impl StoreId {
    /// Replica `id` of set `set`'s group.
    pub fn new(set: u32, id: u64) -> Self {
        Self { set, id }
    }
}

impl fmt::Display for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.set, self.id)
    }
}

/// A caller's role.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A store replica, by set and Raft node id (`store:<set>:<id>`).
    Store(StoreId),
    /// A store replica named in the old form `store:<id>`, which says
    /// nothing of its set. Issued before certificates named the set;
    /// nothing issues it now. A replica accepts it from its peers only when
    /// its config allows it.
    LegacyStore(u64),
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
            Role::Store(_) | Role::LegacyStore(_) => "store",
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
            "store" => parse_store(id).map(Some).map_err(bad),
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

/// `store:1:4`, `alloc:alloc-1`, `operator:alice` (and the old
/// `store:4`): the URI without its `urn:seqsvr:` prefix.
impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Store(s) => write!(f, "store:{s}"),
            Role::LegacyStore(id) => write!(f, "store:{id}"),
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

/// What follows `store:`: `<set>:<id>`, or the old `<id>` alone. Both are
/// plain decimal numbers (no sign, no spaces), so a URI has exactly one
/// reading.
fn parse_store(rest: &str) -> std::result::Result<Role, &'static str> {
    fn number<T: FromStr>(s: &str, what: &'static str) -> std::result::Result<T, &'static str> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(what);
        }
        s.parse().map_err(|_| what)
    }
    const SET: &str = "a store's set is a decimal set id (store:<set>:<id>)";
    const ID: &str = "a store id is a decimal node id (store:<set>:<id>)";
    let mut parts = rest.split(':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(id), None, None) => Ok(Role::LegacyStore(number(id, ID)?)),
        (Some(set), Some(id), None) => Ok(Role::Store(StoreId {
            set: number(set, SET)?,
            id: number(id, ID)?,
        })),
        _ => Err("a store role is store:<set>:<id>, nothing more"),
    }
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
            Role::Store(StoreId::new(1, 4)),
            Role::LegacyStore(3),
            Role::Alloc("alloc-1".into()),
            Role::Operator("alice".into()),
        ] {
            assert_eq!(Role::from_uri(&role.uri()).unwrap(), Some(role.clone()));
            assert_eq!(role.to_string().parse::<Role>().unwrap(), role);
            assert_eq!(role.uri().parse::<Role>().unwrap(), role);
        }
        assert_eq!(
            Role::Store(StoreId::new(1, 7)).uri(),
            "urn:seqsvr:store:1:7"
        );
        assert_eq!(
            Role::from_uri("URN:SEQSVR:alloc:a").unwrap(),
            Some(Role::Alloc("a".into()))
        );
    }

    /// Every store URI has one reading: `<set>:<id>`, the old `<id>`, or
    /// a typed refusal saying what is wrong.
    #[test]
    fn store_roles_name_their_set() {
        let store = |set, id| Ok(Some(Role::Store(StoreId::new(set, id))));
        let bad = |reason: &'static str| reason;
        let table: &[(&str, std::result::Result<Option<Role>, &'static str>)] = &[
            ("urn:seqsvr:store:1:4", store(1, 4)),
            ("urn:seqsvr:store:0:1", store(0, 1)),
            (
                "urn:seqsvr:store:4294967295:18446744073709551615",
                store(u32::MAX, u64::MAX),
            ),
            ("urn:seqsvr:store:4", Ok(Some(Role::LegacyStore(4)))),
            (
                "urn:seqsvr:store:x:1",
                Err(bad("a store's set is a decimal set id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store:1:",
                Err(bad("a store id is a decimal node id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store::1",
                Err(bad("a store's set is a decimal set id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store:1:x",
                Err(bad("a store id is a decimal node id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store:1:2:3",
                Err(bad("a store role is store:<set>:<id>, nothing more")),
            ),
            (
                "urn:seqsvr:store:1:2:",
                Err(bad("a store role is store:<set>:<id>, nothing more")),
            ),
            (
                "urn:seqsvr:store:+1:2",
                Err(bad("a store's set is a decimal set id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store:1:-2",
                Err(bad("a store id is a decimal node id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store:4294967296:1",
                Err(bad("a store's set is a decimal set id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store: 1:2",
                Err(bad("a store's set is a decimal set id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store:",
                Err(bad("a store id is a decimal node id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store:x",
                Err(bad("a store id is a decimal node id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store:-1",
                Err(bad("a store id is a decimal node id (store:<set>:<id>)")),
            ),
            (
                "urn:seqsvr:store",
                Err(bad("expected urn:seqsvr:<kind>:<id>")),
            ),
        ];
        for (uri, want) in table {
            match (Role::from_uri(uri), want) {
                (Ok(got), Ok(want)) => assert_eq!(&got, want, "{uri}"),
                (Err(Error::BadRole { uri: u, reason }), Err(want)) => {
                    assert_eq!((u.as_str(), reason), (*uri, *want), "{uri}");
                }
                (got, want) => panic!("{uri}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn foreign_and_malformed_uris() {
        assert_eq!(Role::from_uri("spiffe://x/y").unwrap(), None);
        assert_eq!(Role::from_uri("urn:other:store:1").unwrap(), None);
        for bad in [
            "urn:seqsvr:store",
            "urn:seqsvr:store:x",
            "urn:seqsvr:store:-1",
            "urn:seqsvr:store:x:1",
            "urn:seqsvr:store:1:",
            "urn:seqsvr:store:1:2:3",
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

        let der = cert_with_uris(&["urn:seqsvr:store:0:1", "urn:seqsvr:operator:bob"]);
        assert!(matches!(
            Role::from_cert_der(&der),
            Err(Error::ManyRoles(2))
        ));

        let der = cert_with_uris(&["urn:seqsvr:store:0:1", "urn:seqsvr:store:0:1"]);
        assert!(matches!(
            Role::from_cert_der(&der),
            Err(Error::ManyRoles(2))
        ));

        let der = cert_with_uris(&["urn:seqsvr:store:one"]);
        assert!(matches!(
            Role::from_cert_der(&der),
            Err(Error::BadRole { .. })
        ));

        // The old form is read as what it is, never as a set's replica.
        let der = cert_with_uris(&["urn:seqsvr:store:2"]);
        assert_eq!(Role::from_cert_der(&der).unwrap(), Role::LegacyStore(2));
        let der = cert_with_uris(&["urn:seqsvr:store:0:2"]);
        assert_eq!(
            Role::from_cert_der(&der).unwrap(),
            Role::Store(StoreId::new(0, 2))
        );

        assert!(matches!(
            Role::from_cert_der(b"not a certificate"),
            Err(Error::Certificate(_))
        ));
    }
}
