//! TLS settings from PEM files.
//!
//! Each seqsvr process has one identity: a certificate (with its role URI
//! and its DNS/IP names) and key signed by the cluster's CA, plus the CA
//! certificate itself. The same three files serve every plane and both
//! directions:
//!
//! - **client plane**, server side: the certificate only; callers are not
//!   asked for one ([`ServerTls`] for [`Plane::Client`]).
//! - **peer and admin planes**, server side: the certificate, and a client
//!   certificate signed by the CA is *required* (mutual TLS).
//! - **dialing** another seqsvr process: the CA to check the server, the
//!   role its certificate must name ([`crate::verify`]), and the own
//!   certificate to present when the server asks ([`ClientTls`]).
//!
//! The files are read once, when the listener or channel is built; every
//! error names the file it came from.
//!
//! Servers built by [`crate::server`] use [`ServerTls`], a rustls
//! configuration, because the listener runs the TLS handshake itself (see
//! that module for why). [`TlsConfig::tonic_server`] gives the same
//! settings as a tonic `ServerTlsConfig` for a server built by hand.

use crate::error::{Error, Result};
#[cfg(feature = "server")]
use crate::plane::Plane;
use crate::verify::{RoleVerifier, ServerRole};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
#[cfg(feature = "server")]
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{
    self,
    client::WebPkiServerVerifier,
    crypto::CryptoProvider,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    RootCertStore,
};
#[cfg(feature = "server")]
use tonic::transport::{Certificate, ServerTlsConfig};
use tonic::transport::{ClientTlsConfig, Endpoint, Identity};

/// Where one process's TLS files are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The cluster CA's certificate (PEM).
    pub ca: PathBuf,
    /// This process's certificate, optionally followed by intermediates
    /// (PEM).
    pub cert: PathBuf,
    /// This process's private key (PEM, PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The server side of TLS for one plane, ready for a listener.
#[cfg(feature = "server")]
#[derive(Clone)]
pub struct ServerTls {
    pub(crate) config: Arc<rustls::ServerConfig>,
    mutual: bool,
}

#[cfg(feature = "server")]
impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("mutual", &self.mutual)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "server")]
impl ServerTls {
    /// The same identity and client checks for an HTTP/1.1 listener: it
    /// offers ALPN `http/1.1` instead of `h2`, so a client offering both
    /// (curl does) speaks what the listener serves.
    pub fn for_http1(&self) -> ServerTls {
        let mut config = (*self.config).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        ServerTls {
            config: Arc::new(config),
            mutual: self.mutual,
        }
    }

    /// A TLS acceptor for a listener served by hand.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.clone())
    }

    /// Whether a client certificate from the CA is required.
    pub fn is_mutual(&self) -> bool {
        self.mutual
    }

    /// An acceptor with these settings for a protocol other than gRPC
    /// (the Redis-protocol door): the same certificate and client
    /// checks, no ALPN (a Redis client offers none, or its own).
    pub fn acceptor_without_alpn(&self) -> tokio_rustls::TlsAcceptor {
        let mut config = (*self.config).clone();
        config.alpn_protocols.clear();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

/// The client side of TLS: the CA that must have signed the server's
/// certificate, the role that certificate must name (if the caller says),
/// and optionally an identity to present.
#[derive(Clone, Debug)]
pub struct ClientTls {
    /// SNI name and own identity; the CA is in `webpki`, because tonic
    /// takes either its own CA list or a verifier, not both.
    config: ClientTlsConfig,
    /// Checks chain, validity and name against the CA.
    webpki: Arc<WebPkiServerVerifier>,
    domain: Option<String>,
    /// The role the server must present; `None` takes any certificate of
    /// the CA.
    expect: Option<ServerRole>,
    /// Whether an old-form store certificate passes [`ServerRole::Store`].
    legacy_stores: bool,
}

impl ClientTls {
    /// Checks the server against the CA in `ca` and presents no
    /// certificate: enough for the client plane.
    pub fn server_only(ca: &Path) -> Result<ClientTls> {
        let ca_pem = read(ca)?;
        let webpki = webpki(ca, &certs(ca, &ca_pem)?)?;
        Ok(ClientTls {
            config: ClientTlsConfig::new(),
            webpki,
            domain: None,
            expect: None,
            legacy_stores: false,
        })
    }

    /// Checks the server's certificate against `name` instead of the host
    /// in the address dialed: for dialing by an IP address or a name the
    /// certificate does not carry.
    pub fn with_domain_name(mut self, name: impl Into<String>) -> ClientTls {
        self.domain = Some(name.into());
        self
    }

    /// The same settings, requiring the server to present a certificate
    /// of `role` (`docs/architecture/security.md`, "Whom a client dials"):
    /// a handshake with any other fails with [`Error::WrongServer`].
    pub fn expecting(mut self, role: ServerRole) -> ClientTls {
        self.expect = Some(role);
        self
    }

    /// The same settings, letting an old-form store certificate (no set)
    /// pass [`ServerRole::Store`], as `legacy_store_certificates` does on
    /// the server side.
    pub fn allowing_legacy_stores(mut self, allow: bool) -> ClientTls {
        self.legacy_stores = allow;
        self
    }

    /// The role the server must present, if set.
    pub fn expected(&self) -> Option<ServerRole> {
        self.expect
    }

    /// The name the server's certificate is checked against, if set.
    pub fn domain_name(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// These settings applied to `ep`, an endpoint for `addr`.
    pub fn apply(&self, ep: Endpoint, addr: &str) -> Result<Endpoint> {
        let config = match &self.domain {
            Some(d) => self.config.clone().domain_name(d.clone()),
            None => self.config.clone(),
        };
        let verifier = RoleVerifier {
            webpki: self.webpki.clone(),
            expect: self.expect,
            legacy: self.legacy_stores,
            addr: addr.to_string(),
        };
        Ok(ep.tls_config_with_verifier(config, Arc::new(verifier))?)
    }
}

impl TlsConfig {
    /// The server side for `plane`: the client plane asks for no client
    /// certificate, the peer and admin planes require one signed by the
    /// CA.
    #[cfg(feature = "server")]
    pub fn server(&self, plane: Plane) -> Result<ServerTls> {
        let provider = provider();
        let (chain, key) = self.identity()?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| self.tls_error(&self.cert, e))?;
        let builder = if plane.mutual_tls() {
            let roots = Arc::new(self.roots()?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| self.tls_error(&self.ca, e))?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| self.tls_error(&self.key, e))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(ServerTls {
            config: Arc::new(config),
            mutual: plane.mutual_tls(),
        })
    }

    /// The same settings as [`TlsConfig::server`], for a tonic server
    /// built by hand.
    #[cfg(feature = "server")]
    pub fn tonic_server(&self, plane: Plane) -> Result<ServerTlsConfig> {
        // Parse everything once here so errors name the file; tonic would
        // only fail later, without a path.
        self.server(plane)?;
        let identity = Identity::from_pem(read(&self.cert)?, read(&self.key)?);
        let config = ServerTlsConfig::new().identity(identity);
        Ok(if plane.mutual_tls() {
            config.client_ca_root(Certificate::from_pem(read(&self.ca)?))
        } else {
            config
        })
    }

    /// The client side: checks servers against the CA and presents this
    /// identity when asked (the peer and admin planes ask).
    pub fn client(&self) -> Result<ClientTls> {
        let (chain, key) = self.identity()?;
        // Build a rustls client once so a key that does not match its
        // certificate is reported here, with the path.
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| self.tls_error(&self.cert, e))?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(chain, key)
            .map_err(|e| self.tls_error(&self.key, e))?;
        let identity = Identity::from_pem(read(&self.cert)?, read(&self.key)?);
        let ca = certs(&self.ca, &read(&self.ca)?)?;
        Ok(ClientTls {
            config: ClientTlsConfig::new().identity(identity),
            webpki: webpki(&self.ca, &ca)?,
            domain: None,
            expect: None,
            legacy_stores: false,
        })
    }

    /// The role this process's own certificate (the chain's leaf) names.
    /// A server checks it is its own before serving: a replica started
    /// with another replica's certificate would speak for that replica.
    pub fn own_role(&self) -> Result<crate::role::Role> {
        let chain = certs(&self.cert, &read(&self.cert)?)?;
        crate::role::Role::from_cert_der(&chain[0]).map_err(|e| self.tls_error(&self.cert, e))
    }

    fn identity(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
        let chain = certs(&self.cert, &read(&self.cert)?)?;
        warn_if_readable_by_everyone(&self.key);
        let key_pem = read(&self.key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| Error::Pem {
            path: self.key.clone(),
            reason: format!("no usable private key: {e}"),
        })?;
        Ok((chain, key))
    }

    fn roots(&self) -> Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        for ca in certs(&self.ca, &read(&self.ca)?)? {
            roots.add(ca).map_err(|e| self.tls_error(&self.ca, e))?;
        }
        Ok(roots)
    }

    fn tls_error(&self, path: &Path, e: impl std::fmt::Display) -> Error {
        Error::Tls {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    }
}

/// The crypto provider for every configuration this crate builds, named
/// rather than taken from the process default, so a second provider
/// linked into the binary cannot make the choice ambiguous.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Says so when a private key file may be read by every user of the host
/// (the dev PKI and `seqsvr certs` write keys 0600; Kubernetes mounts
/// them 0440). A warning, not a refusal: some container runtimes map
/// users so that only a wider mode works.
fn warn_if_readable_by_everyone(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o004 != 0 {
                tracing::warn!(
                    "private key {} is readable by every user of this host (mode {mode:04o}); \
                     chmod 600 it",
                    path.display()
                );
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// The WebPKI server verifier for the CA certificates `ca` read from
/// `path`.
fn webpki(path: &Path, ca: &[CertificateDer<'static>]) -> Result<Arc<WebPkiServerVerifier>> {
    let bad = |e: &dyn std::fmt::Display| Error::Tls {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut roots = RootCertStore::empty();
    for c in ca {
        roots.add(c.clone()).map_err(|e| bad(&e))?;
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| bad(&e))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Pem {
            path: path.to_path_buf(),
            reason: format!("bad certificate PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(Error::Pem {
            path: path.to_path_buf(),
            reason: "no CERTIFICATE block".to_string(),
        });
    }
    Ok(certs)
}

// The tests make certificates and build server settings.
#[cfg(all(feature = "server", feature = "certs"))]
#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{DevPki, Leaf};
    use crate::role::{Role, StoreId};

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let pki = DevPki::generate(
            dir.path(),
            &[
                Leaf::new("s1", Role::Store(StoreId::new(0, 1))),
                Leaf::new("s2", Role::Store(StoreId::new(0, 2))),
            ],
            false,
        )
        .unwrap();
        let good = pki.tls_config("s1");
        for plane in Plane::ALL {
            assert_eq!(good.server(plane).unwrap().is_mutual(), plane.mutual_tls());
            good.tonic_server(plane).unwrap();
        }
        good.client().unwrap();

        let missing = TlsConfig {
            cert: dir.path().join("nope.pem"),
            ..good.clone()
        };
        let e = missing.server(Plane::Peer).unwrap_err().to_string();
        assert!(e.contains("nope.pem"), "{e}");

        let not_pem = dir.path().join("junk.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let junk = TlsConfig {
            ca: not_pem.clone(),
            ..good.clone()
        };
        let e = junk.server(Plane::Admin).unwrap_err().to_string();
        assert!(
            e.contains("junk.pem") && e.contains("no CERTIFICATE"),
            "{e}"
        );
        let e = ClientTls::server_only(&not_pem).unwrap_err().to_string();
        assert!(e.contains("junk.pem"), "{e}");

        // s2's key with s1's certificate.
        let mismatched = TlsConfig {
            key: pki.tls_config("s2").key,
            ..good.clone()
        };
        let e = mismatched.server(Plane::Client).unwrap_err().to_string();
        assert!(e.contains("s2-key.pem"), "{e}");
        let e = mismatched.client().unwrap_err().to_string();
        assert!(e.contains("s2-key.pem"), "{e}");
    }

    #[test]
    fn config_is_plain_toml() {
        let t: TlsConfig =
            toml::from_str("ca = \"/etc/seqsvr/ca.pem\"\ncert = \"a.pem\"\nkey = \"a-key.pem\"\n")
                .unwrap();
        assert_eq!(t.cert, PathBuf::from("a.pem"));
        assert!(
            toml::from_str::<TlsConfig>("ca = \"x\"\ncert = \"y\"\nkey = \"z\"\nfoo = 1").is_err()
        );
    }
}
