//! `seqsvr certs` and the dev cluster's PKI: which certificates a cluster
//! needs, issued by [`DevPki`].
//!
//! Every process has one certificate naming its role (see
//! `docs/architecture/security.md`): one per store replica, naming its set
//! and node id (`store:<set>:<id>`, in the files [`store_cert_name`]
//! gives), one per AllocSvr id, and one per operator (what `seqctl`
//! presents on the admin planes). Each is valid for `localhost`,
//! `127.0.0.1` and the hosts given.

use std::path::Path;

use seqsvr_net::{DevPki, Leaf, Role, StoreId};

use crate::defaults::{dev_sets, DEV_OPERATOR};
use crate::error::Result;

/// Who needs a certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identities {
    /// Store replicas, by set and Raft node id.
    pub stores: Vec<StoreId>,
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
        let sets = dev_sets(2);
        Identities {
            stores: sets
                .iter()
                .flat_map(|set| {
                    set.stores
                        .iter()
                        .map(|s| StoreId::new(set.spec.set_id, s.id))
                })
                .collect(),
            allocs: sets
                .iter()
                .flat_map(|set| set.allocs.iter().map(|a| a.id.to_string()))
                .collect(),
            operators: vec![DEV_OPERATOR.to_string()],
            hosts: Vec::new(),
        }
    }

    /// One leaf per identity: [`store_cert_name`], `<alloc id>`,
    /// `<operator>`.
    pub fn leaves(&self) -> Vec<Leaf> {
        let stores = self
            .stores
            .iter()
            .map(|&s| Leaf::new(store_cert_name(s), Role::Store(s)));
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

/// The name of a store replica's certificate files: `store-<id>` for set
/// 0's replicas (as before sets existed, so a one-set cluster's files keep
/// their names), `store-<set>-<id>` for other sets' — node ids are per
/// group, so set 1's replica 1 must not take set 0's files.
pub fn store_cert_name(s: StoreId) -> String {
    match s.set {
        0 => format!("store-{}", s.id),
        set => format!("store-{set}-{}", s.id),
    }
}

/// Issues certificates for `who` in `dir`, making the CA first if it is
/// not there. A certificate that exists is kept (its key may already be
/// deployed) unless `overwrite`, or unless it names another role than the
/// one asked for — a store certificate of the old form, which names no
/// set, is re-issued naming it. Returns the names issued.
pub fn issue(dir: &Path, who: &Identities, overwrite: bool) -> Result<Vec<String>> {
    let pki = DevPki::open(dir);
    let (new, existing): (Vec<Leaf>, Vec<Leaf>) = who
        .leaves()
        .into_iter()
        .partition(|l| !pki.cert_path(&l.name).exists());
    let replaced: Vec<Leaf> = existing
        .into_iter()
        .filter(|l| {
            let kept = pki.tls_config(&l.name).own_role().ok();
            overwrite || kept.as_ref() != Some(&l.role)
        })
        .collect();
    DevPki::generate(dir, &new, overwrite)?;
    DevPki::generate(dir, &replaced, true)?;
    Ok(new.into_iter().chain(replaced).map(|l| l.name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_leaf_per_identity_with_its_role_and_hosts() {
        let who = Identities {
            stores: vec![StoreId::new(0, 1), StoreId::new(0, 2), StoreId::new(1, 1)],
            allocs: vec!["alloc-1".into()],
            operators: vec!["ops".into()],
            hosts: vec!["db.example".into()],
        };
        let leaves = who.leaves();
        let names: Vec<&str> = leaves.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["store-1", "store-2", "store-1-1", "alloc-1", "ops"]);
        assert_eq!(leaves[1].role, Role::Store(StoreId::new(0, 2)));
        assert_eq!(leaves[2].role, Role::Store(StoreId::new(1, 1)));
        assert_eq!(leaves[3].role, Role::Alloc("alloc-1".into()));
        assert_eq!(leaves[4].role, Role::Operator("ops".into()));
        assert!(leaves.iter().all(|l| l.hosts == ["db.example"]));
    }

    #[test]
    fn issuing_again_keeps_what_exists() {
        let dir = tempfile::tempdir().unwrap();
        let who = Identities::dev();
        let first = issue(dir.path(), &who, false).unwrap();
        // Both dev uid sets' and the names set's stores (9) and AllocSvrs
        // (6), and the operator.
        assert_eq!(first.len(), 16);
        let pki = DevPki::open(dir.path());
        let cert = std::fs::read(pki.cert_path("store-1")).unwrap();
        assert!(issue(dir.path(), &who, false).unwrap().is_empty());
        assert_eq!(std::fs::read(pki.cert_path("store-1")).unwrap(), cert);
        assert_eq!(issue(dir.path(), &who, true).unwrap().len(), 16);
        assert_ne!(std::fs::read(pki.cert_path("store-1")).unwrap(), cert);
        // Every issued credential loads, and the stores' name their set.
        for name in first {
            pki.tls_config(&name).client().unwrap();
        }
        assert_eq!(
            pki.tls_config("store-1").own_role().unwrap(),
            Role::Store(StoreId::new(0, 1))
        );
        assert_eq!(
            pki.tls_config(&store_cert_name(StoreId::new(1, 4)))
                .own_role()
                .unwrap(),
            Role::Store(StoreId::new(1, 4))
        );
    }

    /// Every dev store replica's config points at a certificate naming
    /// its own set and id, so each one starts (`seqsvr dev --tls --sets 2`).
    #[test]
    fn dev_store_configs_name_their_own_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let pki = DevPki::open(dir.path());
        issue(pki.dir(), &Identities::dev(), false).unwrap();
        for set in crate::defaults::dev_sets(2) {
            for s in &set.stores {
                let cfg = crate::dev::dev_set_store_config(dir.path(), &set, s, Some(&pki));
                let role = cfg.tls.unwrap().own_role().unwrap();
                assert_eq!(role, Role::Store(StoreId::new(set.spec.set_id, s.id)));
            }
        }
    }

    /// A PKI made before store certificates named their set (a dev
    /// cluster's, kept across runs) gets its store certificates re-issued;
    /// the rest is kept.
    #[test]
    fn old_form_store_certificates_are_reissued() {
        let dir = tempfile::tempdir().unwrap();
        DevPki::generate(
            dir.path(),
            &[
                Leaf::new("store-1", Role::LegacyStore(1)),
                Leaf::new("ops", Role::Operator("ops".into())),
            ],
            false,
        )
        .unwrap();
        let who = Identities {
            stores: vec![StoreId::new(0, 1)],
            operators: vec!["ops".into()],
            ..Identities::default()
        };
        assert_eq!(issue(dir.path(), &who, false).unwrap(), ["store-1"]);
        let pki = DevPki::open(dir.path());
        assert_eq!(
            pki.tls_config("store-1").own_role().unwrap(),
            Role::Store(StoreId::new(0, 1))
        );
        assert!(issue(dir.path(), &who, false).unwrap().is_empty());
    }
}
