//! A development PKI: a CA and role certificates for a local cluster and
//! for tests.
//!
//! [`DevPki::generate`] writes into one directory:
//!
//! - `ca.pem`, `ca-key.pem`: the CA (made only if absent, so adding a node
//!   later signs with the same CA and the running nodes trust it);
//! - `<name>.pem`, `<name>-key.pem` for each [`Leaf`]: a certificate
//!   signed by the CA carrying the leaf's role URI, and DNS/IP names
//!   `localhost`, `127.0.0.1` and the leaf's hosts, usable both as a
//!   server and as a client certificate.
//!
//! Key files are created with mode 0600. An existing leaf is not
//! overwritten unless asked, since its key may already be deployed.
//!
//! This is for development and tests. A production cluster's CA belongs
//! in the operator's PKI, with its key offline; the files it issues need
//! only the same role URIs (see [`crate::role`]).

use crate::error::{Error, Result};
use crate::role::Role;
use crate::tls::TlsConfig;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::fs::OpenOptions;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// One identity to issue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// File name stem: `<name>.pem`, `<name>-key.pem`.
    pub name: String,
    /// The role the certificate carries.
    pub role: Role,
    /// Host names or IP addresses the certificate is valid for, besides
    /// `localhost` and `127.0.0.1`.
    pub hosts: Vec<String>,
}

impl Leaf {
    /// A leaf valid for `localhost` and `127.0.0.1` only.
    pub fn new(name: impl Into<String>, role: Role) -> Leaf {
        Leaf {
            name: name.into(),
            role,
            hosts: Vec::new(),
        }
    }

    /// Adds a host name or IP address.
    pub fn host(mut self, host: impl Into<String>) -> Leaf {
        self.hosts.push(host.into());
        self
    }
}

/// A directory holding a development CA and the certificates it issued.
#[derive(Clone, Debug)]
pub struct DevPki {
    dir: PathBuf,
}

const CA_NAME: &str = "seqsvr development CA";
/// Certificates are valid from a year before they are made, so a clock
/// somewhat behind does not reject them.
const YEARS_BEFORE: i32 = 1;
const CA_YEARS: i32 = 10;
const LEAF_YEARS: i32 = 5;

impl DevPki {
    /// Makes the CA in `dir` unless it is there, then issues `leaves`.
    /// An existing leaf is an error unless `overwrite`.
    pub fn generate(dir: &Path, leaves: &[Leaf], overwrite: bool) -> Result<DevPki> {
        for leaf in leaves {
            check_name(&leaf.name)?;
        }
        std::fs::create_dir_all(dir).map_err(|source| Error::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        let pki = DevPki {
            dir: dir.to_path_buf(),
        };
        let (ca_pem, ca_key) = pki.ca()?;
        let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)?;
        for leaf in leaves {
            pki.issue(leaf, &issuer, overwrite)?;
        }
        Ok(pki)
    }

    /// Opens a directory made by [`DevPki::generate`] without changing it.
    pub fn open(dir: &Path) -> DevPki {
        DevPki {
            dir: dir.to_path_buf(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate.
    pub fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The CA's private key.
    pub fn ca_key_path(&self) -> PathBuf {
        self.dir.join("ca-key.pem")
    }

    /// A leaf's certificate.
    pub fn cert_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.pem"))
    }

    /// A leaf's private key.
    pub fn key_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}-key.pem"))
    }

    /// The TLS settings of the leaf `name`.
    pub fn tls_config(&self, name: &str) -> TlsConfig {
        TlsConfig {
            ca: self.ca_path(),
            cert: self.cert_path(name),
            key: self.key_path(name),
        }
    }

    /// The CA certificate (PEM) and key, made first if neither exists.
    fn ca(&self) -> Result<(String, KeyPair)> {
        let (cert, key) = (self.ca_path(), self.ca_key_path());
        match (cert.exists(), key.exists()) {
            (true, true) => {
                let pem = read_string(&cert)?;
                let key_pem = read_string(&key)?;
                let key = KeyPair::from_pem(&key_pem).map_err(|e| Error::Pem {
                    path: key.clone(),
                    reason: format!("no usable CA key: {e}"),
                })?;
                Ok((pem, key))
            }
            (true, false) => Err(Error::HalfCa {
                present: cert,
                missing: key,
            }),
            (false, true) => Err(Error::HalfCa {
                present: key,
                missing: cert,
            }),
            (false, false) => {
                let mut params = CertificateParams::default();
                params.distinguished_name = name(CA_NAME);
                params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
                params.key_usages = vec![
                    KeyUsagePurpose::KeyCertSign,
                    KeyUsagePurpose::CrlSign,
                    KeyUsagePurpose::DigitalSignature,
                ];
                validity(&mut params, CA_YEARS);
                let key_pair = KeyPair::generate()?;
                let pem = params.self_signed(&key_pair)?.pem();
                write_new(&key, key_pair.serialize_pem().as_bytes(), 0o600, false)?;
                write_new(&cert, pem.as_bytes(), 0o644, false)?;
                Ok((pem, key_pair))
            }
        }
    }

    fn issue(&self, leaf: &Leaf, issuer: &Issuer<'_, KeyPair>, overwrite: bool) -> Result<()> {
        let (cert, key) = (self.cert_path(&leaf.name), self.key_path(&leaf.name));
        if !overwrite {
            for p in [&cert, &key] {
                if p.exists() {
                    return Err(Error::Exists(p.clone()));
                }
            }
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = name(&leaf.name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let mut sans = vec![SanType::URI(leaf.role.uri().try_into()?)];
        let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        for h in &leaf.hosts {
            if !hosts.contains(h) {
                hosts.push(h.clone());
            }
        }
        for h in hosts {
            sans.push(match h.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(h.try_into()?),
            });
        }
        params.subject_alt_names = sans;
        validity(&mut params, LEAF_YEARS);
        let key_pair = KeyPair::generate()?;
        let pem = params.signed_by(&key_pair, issuer)?.pem();
        write_new(&key, key_pair.serialize_pem().as_bytes(), 0o600, overwrite)?;
        write_new(&cert, pem.as_bytes(), 0o644, overwrite)?;
        Ok(())
    }
}

fn name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "seqsvr");
    dn.push(DnType::CommonName, cn);
    dn
}

fn validity(params: &mut CertificateParams, years: i32) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Whole years are precise enough for a validity window.
    let year = 1970 + (secs / 31_556_952) as i32;
    params.not_before = rcgen::date_time_ymd(year - YEARS_BEFORE, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + years, 1, 1);
}

/// Names become file names; keep them plain.
fn check_name(name: &str) -> Result<()> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !plain || name == "ca" || name == "ca-key" || name.ends_with("-key") {
        return Err(Error::BadName(name.to_string()));
    }
    Ok(())
}

fn read_string(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `data` to a file created with `mode` (the mode applies from
/// creation, so a key is never readable by others, not even briefly).
fn write_new(path: &Path, data: &[u8], mode: u32, replace: bool) -> Result<()> {
    let err = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    if replace {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
    }
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = opts.open(path).map_err(err)?;
    f.write_all(data).map_err(err)?;
    f.sync_all().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::StoreId;

    #[test]
    fn generate_is_idempotent_and_reuses_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let pki = DevPki::generate(
            dir.path(),
            &[Leaf::new("store-1", Role::Store(StoreId::new(0, 1))).host("db1.example")],
            false,
        )
        .unwrap();
        let ca = std::fs::read(pki.ca_path()).unwrap();

        // A later node: same CA.
        DevPki::generate(
            dir.path(),
            &[Leaf::new("alloc-1", Role::Alloc("alloc-1".into()))],
            false,
        )
        .unwrap();
        assert_eq!(std::fs::read(pki.ca_path()).unwrap(), ca);

        // An existing leaf is kept unless asked.
        let old = std::fs::read(pki.cert_path("store-1")).unwrap();
        let e = DevPki::generate(
            dir.path(),
            &[Leaf::new("store-1", Role::Store(StoreId::new(0, 1)))],
            false,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Exists(_)), "{e}");
        assert_eq!(std::fs::read(pki.cert_path("store-1")).unwrap(), old);
        let again = Leaf::new("store-1", Role::Store(StoreId::new(0, 1)))
            .host("10.0.0.5")
            .host("db1.example");
        DevPki::generate(dir.path(), &[again], true).unwrap();
        assert_ne!(std::fs::read(pki.cert_path("store-1")).unwrap(), old);

        // The leaf carries its role and names.
        let pem = std::fs::read(pki.cert_path("alloc-1")).unwrap();
        let (_, p) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        assert_eq!(
            Role::from_cert_der(&p.contents).unwrap(),
            Role::Alloc("alloc-1".into())
        );
        let pem = std::fs::read(pki.cert_path("store-1")).unwrap();
        let (_, p) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let (_, c) = x509_parser::parse_x509_certificate(&p.contents).unwrap();
        let sans = format!("{:?}", c.subject_alternative_name().unwrap().unwrap().value);
        for want in [
            "URI(\"urn:seqsvr:store:0:1\")",
            "DNSName(\"localhost\")",
            "IPAddress([127, 0, 0, 1])",
            "IPAddress([10, 0, 0, 5])",
            "DNSName(\"db1.example\")",
        ] {
            assert!(sans.contains(want), "{want} not in {sans}");
        }
        assert!(!c.is_ca());
    }

    #[cfg(unix)]
    #[test]
    fn keys_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pki = DevPki::generate(
            dir.path(),
            &[Leaf::new("op", Role::Operator("op".into()))],
            false,
        )
        .unwrap();
        for p in [pki.ca_key_path(), pki.key_path("op")] {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", p.display());
        }
        let mode = std::fs::metadata(pki.cert_path("op"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(
            mode & 0o077,
            mode & 0o044,
            "certificates are readable, not writable, by others"
        );
    }

    #[test]
    fn half_a_ca_and_bad_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), "x").unwrap();
        assert!(matches!(
            DevPki::generate(dir.path(), &[], false),
            Err(Error::HalfCa { .. })
        ));
        for bad in ["", "ca", "../x", ".hidden", "a/b", "n-key"] {
            let e = DevPki::generate(
                dir.path(),
                &[Leaf::new(bad, Role::Store(StoreId::new(0, 1)))],
                false,
            );
            assert!(matches!(e, Err(Error::BadName(_))), "{bad:?}");
        }
    }
}
