//! The crate's error type.
//!
//! Errors that come from a file name the file, because the usual cause of
//! a TLS setup failure is a wrong path or a key that does not belong to
//! its certificate, and the operator has to know which file to look at.

use std::net::SocketAddr;
use std::path::PathBuf;

/// What can go wrong while setting up listeners, channels, TLS and
/// certificates.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file or directory could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A PEM file holds nothing usable of the kind expected.
    #[error("{}: {reason}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The certificates and key were read but do not make a TLS setup
    /// (for example, the key does not match the certificate).
    #[error("TLS setup with {}: {reason}", path.display())]
    Tls {
        /// The certificate (or CA) file the setup was built from.
        path: PathBuf,
        /// What the TLS library said.
        reason: String,
    },
    /// A certificate could not be parsed.
    #[error("unreadable certificate: {0}")]
    Certificate(String),
    /// A certificate carries no seqsvr role.
    #[error("certificate carries no seqsvr role (a URI SAN urn:seqsvr:store:<set>:<id>, urn:seqsvr:alloc:<id> or urn:seqsvr:operator:<name>)")]
    NoRole,
    /// A certificate carries more than one seqsvr role.
    #[error("certificate carries {0} seqsvr roles; exactly one is allowed")]
    ManyRoles(usize),
    /// A seqsvr role URI is malformed.
    #[error("bad seqsvr role {uri:?}: {reason}")]
    BadRole {
        /// The URI as found.
        uri: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A plaintext listener on an address other hosts can reach, without
    /// the caller saying that is intended.
    #[error(
        "refusing to serve the {plane} plane in plaintext on {addr}, which is not a loopback \
         address: configure TLS, listen on loopback, or pass insecure = true"
    )]
    PlaintextExposed {
        /// The plane.
        plane: crate::Plane,
        /// The listen address.
        addr: SocketAddr,
    },
    /// Server TLS without client certificates, given for a plane that
    /// identifies callers by them.
    #[error("the {plane} plane needs TLS settings that require client certificates (TlsConfig::server for that plane)")]
    PlaneTls {
        /// The plane.
        plane: crate::Plane,
    },
    /// An address to dial is malformed.
    #[error("bad address {addr:?}: {reason}")]
    Address {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server dialed presented a certificate from the CA, but not of
    /// the role the caller expects (`crate::verify`).
    #[error("the server at {addr} presented {found}; {expected} was expected")]
    WrongServer {
        /// The address dialed.
        addr: String,
        /// What its certificate names ("an alloc certificate (alloc:a1)").
        found: String,
        /// What the caller expected ("a store replica of set 0").
        expected: String,
    },
    /// A limit is out of range.
    #[error("bad {plane} plane limits: {reason}")]
    Limits {
        /// The plane the limits are for.
        plane: crate::Plane,
        /// What is wrong.
        reason: String,
    },
    /// A development identity's name cannot be a file name.
    #[error("bad identity name {0:?}: use letters, digits, '.', '_' and '-', not starting with '.' nor named \"ca\"")]
    BadName(String),
    /// A leaf certificate exists and overwriting was not asked for.
    #[error("{} exists; pass overwrite to replace it", .0.display())]
    Exists(PathBuf),
    /// The CA certificate exists without its key, or the other way round.
    #[error("{} exists but {} does not; remove both to make a new CA", present.display(), missing.display())]
    HalfCa {
        /// The file that is there.
        present: PathBuf,
        /// The file that is not.
        missing: PathBuf,
    },
    /// Generating or signing a certificate failed.
    #[cfg(feature = "certs")]
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    /// A listener's socket could not be inspected.
    #[error("listener: {0}")]
    Listener(std::io::Error),
    /// tonic refused a setting.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
