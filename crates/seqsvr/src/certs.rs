//! `seqsvr certs` and the dev cluster's PKI: which certificates a cluster
//! needs, issued by [`DevPki`].
//!
//! Every process has one certificate naming its role (see
//! `docs/architecture/security.md`): `store-<id>` for each store replica,
//! one per AllocSvr id, and one per operator (what `seqctl` presents on
//! the admin planes). Each is valid for `localhost`, `127.0.0.1` and the
//! hosts given.

use std::path::Path;

use seqsvr_net::{DevPki, Leaf, Role};

use crate::defaults::{DEV_ALLOCS, DEV_OPERATOR, DEV_SET1_ALLOCS, DEV_SET1_STORES, DEV_STORES};
use crate::error::Result;

/// Who needs a certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identities {
    /// Store replicas, by Raft node id.
    pub stores: Vec<u64>,
    /// AllocSvr ids.
    pub allocs: Vec<String>,
    /// Operator names.
    pub operators: Vec<String>,
    /// Extra host names or IP addresses every certificate is valid for.
    pub hosts: Vec<String>,
}

impl Identities {
    /// The dev cluster's processes and its `seqctl`.
    pub fn dev() -> Identities {
        Identities {
            stores: DEV_STORES
                .iter()
                .chain(&DEV_SET1_STORES)
                .map(|s| s.id)
                .collect(),
            allocs: DEV_ALLOCS
                .iter()
                .chain(&DEV_SET1_ALLOCS)
                .map(|a| a.id.to_string())
                .collect(),
            operators: vec![DEV_OPERATOR.to_string()],
            hosts: Vec::new(),
        }
    }

    /// One leaf per identity: `store-<id>`, `<alloc id>`, `<operator>`.
    pub fn leaves(&self) -> Vec<Leaf> {
        let stores = self
            .stores
            .iter()
            .map(|&id| Leaf::new(format!("store-{id}"), Role::Store(id)));
        let allocs = self
            .allocs
            .iter()
            .map(|id| Leaf::new(id.clone(), Role::Alloc(id.clone())));
        let operators = self
            .operators
            .iter()
            .map(|name| Leaf::new(name.clone(), Role::Operator(name.clone())));
        stores
            .chain(allocs)
            .chain(operators)
            .map(|leaf| self.hosts.iter().fold(leaf, |l, h| l.host(h.clone())))
            .collect()
    }
}

/// Issues certificates for `who` in `dir`, making the CA first if it is
/// not there. A certificate that exists is kept (its key may already be
/// deployed) unless `overwrite`; returns the names issued.
pub fn issue(dir: &Path, who: &Identities, overwrite: bool) -> Result<Vec<String>> {
    let pki = DevPki::open(dir);
    let leaves: Vec<Leaf> = who
        .leaves()
        .into_iter()
        .filter(|l| overwrite || !pki.cert_path(&l.name).exists())
        .collect();
    DevPki::generate(dir, &leaves, overwrite)?;
    Ok(leaves.into_iter().map(|l| l.name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_leaf_per_identity_with_its_role_and_hosts() {
        let who = Identities {
            stores: vec![1, 2],
            allocs: vec!["alloc-1".into()],
            operators: vec!["ops".into()],
            hosts: vec!["db.example".into()],
        };
        let leaves = who.leaves();
        let names: Vec<&str> = leaves.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["store-1", "store-2", "alloc-1", "ops"]);
        assert_eq!(leaves[1].role, Role::Store(2));
        assert_eq!(leaves[2].role, Role::Alloc("alloc-1".into()));
        assert_eq!(leaves[3].role, Role::Operator("ops".into()));
        assert!(leaves.iter().all(|l| l.hosts == ["db.example"]));
    }

    #[test]
    fn issuing_again_keeps_what_exists() {
        let dir = tempfile::tempdir().unwrap();
        let who = Identities::dev();
        let first = issue(dir.path(), &who, false).unwrap();
        // Both dev sets' stores (6) and AllocSvrs (4), and the operator.
        assert_eq!(first.len(), 11);
        let pki = DevPki::open(dir.path());
        let cert = std::fs::read(pki.cert_path("store-1")).unwrap();
        assert!(issue(dir.path(), &who, false).unwrap().is_empty());
        assert_eq!(std::fs::read(pki.cert_path("store-1")).unwrap(), cert);
        assert_eq!(issue(dir.path(), &who, true).unwrap().len(), 11);
        assert_ne!(std::fs::read(pki.cert_path("store-1")).unwrap(), cert);
        // Every issued credential loads.
        for name in first {
            pki.tls_config(&name).client().unwrap();
        }
    }
}
