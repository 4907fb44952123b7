//! Endpoints and shape of the local cluster that `seqsvr dev` starts, so
//! that `seqctl` needs no flags to talk to it.
//!
//! Every process serves three planes, each on its own loopback port (see
//! `docs/architecture/overview.md`): the client plane (what clients and
//! `seqctl status` call), the peer plane (Raft, AllocSvr ↔ store, AllocSvr
//! ↔ AllocSvr) and the admin plane (operator commands).

use std::path::{Path, PathBuf};

use seqsvr_net::{DevPki, TlsConfig};

/// One dev store replica's addresses, one per plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevStore {
    /// Raft node id.
    pub id: u64,
    /// Peer plane (Raft, AllocSvrs): the member address.
    pub peer: &'static str,
    /// Client plane (routes, sections, status).
    pub client: &'static str,
    /// Admin plane (operator commands).
    pub admin: &'static str,
    /// Prometheus metrics (`GET /metrics`).
    pub metrics: &'static str,
}

impl DevStore {
    /// Its process (and certificate) name: `store-<id>`.
    pub fn name(&self) -> String {
        format!("store-{}", self.id)
    }
}

/// One dev AllocSvr's addresses, one per plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevAlloc {
    /// Its id (also its process and certificate name).
    pub id: &'static str,
    /// Client plane (Next, NextBatch, Current, Routes).
    pub client: &'static str,
    /// Peer plane (adopts from other AllocSvrs).
    pub peer: &'static str,
    /// Admin plane (handoffs).
    pub admin: &'static str,
    /// Prometheus metrics (`GET /metrics`).
    pub metrics: &'static str,
    /// The Redis-protocol door (`redis-cli -p 7241 INCR seq:42`).
    pub resp: &'static str,
    /// The HTTP API (`GET /v1/next/{uid}` …; `docs/clients.md`).
    pub http: &'static str,
}

/// The dev cluster's store replicas.
pub const DEV_STORES: [DevStore; 3] = [
    DevStore {
        id: 1,
        peer: "127.0.0.1:7101",
        client: "127.0.0.1:7111",
        admin: "127.0.0.1:7121",
        metrics: "127.0.0.1:7131",
    },
    DevStore {
        id: 2,
        peer: "127.0.0.1:7102",
        client: "127.0.0.1:7112",
        admin: "127.0.0.1:7122",
        metrics: "127.0.0.1:7132",
    },
    DevStore {
        id: 3,
        peer: "127.0.0.1:7103",
        client: "127.0.0.1:7113",
        admin: "127.0.0.1:7123",
        metrics: "127.0.0.1:7133",
    },
];

/// The dev cluster's AllocSvrs.
pub const DEV_ALLOCS: [DevAlloc; 2] = [
    DevAlloc {
        id: "alloc-1",
        client: "127.0.0.1:7201",
        peer: "127.0.0.1:7211",
        admin: "127.0.0.1:7221",
        metrics: "127.0.0.1:7231",
        resp: "127.0.0.1:7241",
        http: "127.0.0.1:7251",
    },
    DevAlloc {
        id: "alloc-2",
        client: "127.0.0.1:7202",
        peer: "127.0.0.1:7212",
        admin: "127.0.0.1:7222",
        metrics: "127.0.0.1:7232",
        resp: "127.0.0.1:7242",
        http: "127.0.0.1:7252",
    },
];

/// Set 1's store replicas (`seqsvr dev --sets 2`).
pub const DEV_SET1_STORES: [DevStore; 3] = [
    DevStore {
        id: 4,
        peer: "127.0.0.1:7104",
        client: "127.0.0.1:7114",
        admin: "127.0.0.1:7124",
        metrics: "127.0.0.1:7134",
    },
    DevStore {
        id: 5,
        peer: "127.0.0.1:7105",
        client: "127.0.0.1:7115",
        admin: "127.0.0.1:7125",
        metrics: "127.0.0.1:7135",
    },
    DevStore {
        id: 6,
        peer: "127.0.0.1:7106",
        client: "127.0.0.1:7116",
        admin: "127.0.0.1:7126",
        metrics: "127.0.0.1:7136",
    },
];

/// Set 1's AllocSvrs (`seqsvr dev --sets 2`).
pub const DEV_SET1_ALLOCS: [DevAlloc; 2] = [
    DevAlloc {
        id: "alloc-3",
        client: "127.0.0.1:7203",
        peer: "127.0.0.1:7213",
        admin: "127.0.0.1:7223",
        metrics: "127.0.0.1:7233",
        resp: "127.0.0.1:7243",
        http: "127.0.0.1:7253",
    },
    DevAlloc {
        id: "alloc-4",
        client: "127.0.0.1:7204",
        peer: "127.0.0.1:7214",
        admin: "127.0.0.1:7224",
        metrics: "127.0.0.1:7234",
        resp: "127.0.0.1:7244",
        http: "127.0.0.1:7254",
    },
];

/// One set of the dev cluster: its spec, stores and AllocSvrs.
#[derive(Debug, Clone)]
pub struct DevSet {
    /// The set's span (set 0: `[0, DEV_UID_END)`; set 1: `[0, 2 ×
    /// DEV_UID_END)`, so it can take ranges of set 0, serving `[DEV_UID_END,
    /// 2 × DEV_UID_END)` once added).
    pub spec: seqsvr_core::SetSpec,
    /// Its store replicas.
    pub stores: &'static [DevStore],
    /// Its AllocSvrs.
    pub allocs: &'static [DevAlloc],
}

/// The first `n` sets of the dev cluster (1 or 2).
pub fn dev_sets(n: u32) -> Vec<DevSet> {
    let mut sets = vec![DevSet {
        spec: seqsvr_core::SetSpec::new(0, 0..DEV_UID_END),
        stores: &DEV_STORES,
        allocs: &DEV_ALLOCS,
    }];
    if n >= 2 {
        sets.push(DevSet {
            spec: seqsvr_core::SetSpec::new(1, 0..2 * DEV_UID_END),
            stores: &DEV_SET1_STORES,
            allocs: &DEV_SET1_ALLOCS,
        });
    }
    sets
}

/// The dev cluster's set: uids `[0, 10_000_000)`, 100 sections.
pub const DEV_UID_END: u64 = 10_000_000;

/// Default data directory of `seqsvr dev`.
pub const DEV_DIR: &str = ".seqsvr-dev";

/// Where `seqsvr dev --tls` keeps its development PKI, under the dev dir.
pub const DEV_PKI_DIR: &str = "pki";

/// The certificate (and operator name) `seqsvr dev --tls` issues for
/// `seqctl`.
pub const DEV_OPERATOR: &str = "seqctl";

/// The store replicas' client-plane addresses (`seqctl --store` default).
pub fn dev_store_addrs() -> Vec<String> {
    DEV_STORES.iter().map(|s| s.client.to_string()).collect()
}

/// The store replicas' admin-plane addresses (`seqctl --store-admin`
/// default).
pub fn dev_store_admin_addrs() -> Vec<String> {
    DEV_STORES.iter().map(|s| s.admin.to_string()).collect()
}

/// The store replicas' peer-plane addresses (what AllocSvrs dial).
pub fn dev_store_peer_addrs() -> Vec<String> {
    DEV_STORES.iter().map(|s| s.peer.to_string()).collect()
}

/// The AllocSvrs' client-plane addresses (`seqctl --alloc` default):
/// set 0's, and set 1's if `seqsvr dev --sets 2` runs (a seed that does
/// not answer is skipped).
pub fn dev_alloc_addrs() -> Vec<String> {
    DEV_ALLOCS
        .iter()
        .chain(&DEV_SET1_ALLOCS)
        .map(|a| a.client.to_string())
        .collect()
}

/// The development PKI of the dev cluster in `dev_dir`.
pub fn dev_pki(dev_dir: &Path) -> DevPki {
    DevPki::open(&dev_dir.join(DEV_PKI_DIR))
}

/// The config file `seqsvr dev` writes for process `name`.
pub fn dev_config_path(dev_dir: &Path, name: &str) -> PathBuf {
    dev_dir.join(format!("{name}.toml"))
}

/// The operator credential for the dev cluster in `dev_dir`, if that
/// cluster runs with TLS: `seqsvr dev --tls` wrote its store configs with
/// a `[tls]` table and issued the operator certificate. `None` for a
/// plaintext dev cluster, or no dev cluster there at all.
pub fn dev_operator_tls(dev_dir: &Path) -> Option<TlsConfig> {
    let path = dev_config_path(dev_dir, &DEV_STORES[0].name());
    let cfg = seqsvr_store::StoreConfig::from_file(&path).ok()?;
    cfg.tls?;
    let operator = dev_pki(dev_dir).tls_config(DEV_OPERATOR);
    operator.cert.exists().then_some(operator)
}
