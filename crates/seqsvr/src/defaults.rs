//! Endpoints and shape of the local cluster that `seqsvr dev` starts, so
//! that `seqctl` needs no flags to talk to it.
//!
//! Every process serves three planes, each on its own loopback port (see
//! `docs/architecture/overview.md`): the client plane (what clients and
//! `seqctl status` call), the peer plane (Raft, AllocSvr ↔ store, AllocSvr
//! ↔ AllocSvr) and the admin plane (operator commands).
//!
//! Every port is derived from one base, [`DEV_PORT_BASE`] unless
//! `seqsvr dev --port-base N` (and `seqctl --port-base N`) choose another:
//!
//! | process | peer | client | admin | metrics | resp | http |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | store `i` (1..=9) | N+i | N+10+i | N+20+i | N+30+i | | |
//! | alloc `j` (1..=6) | N+110+j | N+100+j | N+120+j | N+130+j | N+140+j | N+150+j |
//!
//! Set 0 is stores 1–3 and allocs 1–2; set 1 (`--sets 2`) stores 4–6 and
//! allocs 3–4; the names set ([`DEV_NAMES_SET`], always) stores 7–9 and
//! allocs 5–6. The span is `N..=N+156`.

use std::path::{Path, PathBuf};

use seqsvr_net::{DevPki, TlsConfig};

/// The dev cluster's default port base (store-1's peer plane is one above).
pub const DEV_PORT_BASE: u16 = 7100;

/// How far above the base the dev ports reach.
pub const DEV_PORT_SPAN: u16 = 156;

/// The highest port base whose whole span fits under 65536.
pub const DEV_PORT_BASE_MAX: u16 = u16::MAX - DEV_PORT_SPAN;

/// Checks a port base given on the command line: the whole span must be
/// real ports, and the base above the privileged ones.
pub fn check_port_base(base: u16) -> Result<u16, String> {
    if !(1024..=DEV_PORT_BASE_MAX).contains(&base) {
        return Err(format!(
            "port base {base} is out of bounds: the dev ports run from the base to base + \
             {DEV_PORT_SPAN}, so it must be between 1024 and {DEV_PORT_BASE_MAX}"
        ));
    }
    Ok(base)
}

/// Parses `--port-base` (clap value parser).
pub fn parse_port_base(s: &str) -> Result<u16, String> {
    let base: u16 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a port number"))?;
    check_port_base(base)
}

/// `127.0.0.1:<base + offset>`.
fn at(base: u16, offset: u16) -> String {
    format!("127.0.0.1:{}", base + offset)
}

/// One dev store replica's addresses, one per plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevStore {
    /// Raft node id.
    pub id: u64,
    /// Peer plane (Raft, AllocSvrs): the member address.
    pub peer: String,
    /// Client plane (routes, sections, status).
    pub client: String,
    /// Admin plane (operator commands).
    pub admin: String,
    /// Prometheus metrics (`GET /metrics`).
    pub metrics: String,
}

impl DevStore {
    /// Store replica `id` (1..=9) of the dev cluster whose ports start at
    /// `base`.
    pub fn at(base: u16, id: u64) -> DevStore {
        let i = id as u16;
        DevStore {
            id,
            peer: at(base, i),
            client: at(base, 10 + i),
            admin: at(base, 20 + i),
            metrics: at(base, 30 + i),
        }
    }

    /// Its process (and certificate) name: `store-<id>`.
    pub fn name(&self) -> String {
        format!("store-{}", self.id)
    }

    /// Every address it binds, with what for.
    pub fn ports(&self) -> Vec<(String, String)> {
        let n = self.name();
        [
            (&self.peer, "peer plane"),
            (&self.client, "client plane"),
            (&self.admin, "admin plane"),
            (&self.metrics, "metrics"),
        ]
        .into_iter()
        .map(|(a, what)| (a.clone(), format!("{n}'s {what}")))
        .collect()
    }
}

/// One dev AllocSvr's addresses, one per plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevAlloc {
    /// Its id (also its process and certificate name).
    pub id: &'static str,
    /// Client plane (Next, NextBatch, Current, Routes).
    pub client: String,
    /// Peer plane (adopts from other AllocSvrs).
    pub peer: String,
    /// Admin plane (handoffs).
    pub admin: String,
    /// Prometheus metrics (`GET /metrics`).
    pub metrics: String,
    /// The Redis-protocol door (`redis-cli -p 7241 INCR seq:42`).
    pub resp: String,
    /// The HTTP API (`GET /v1/next/{uid}` …; `docs/clients.md`).
    pub http: String,
}

/// The dev AllocSvrs' ids, in port order.
pub const DEV_ALLOC_IDS: [&str; 6] = [
    "alloc-1", "alloc-2", "alloc-3", "alloc-4", "alloc-5", "alloc-6",
];

impl DevAlloc {
    /// AllocSvr `j` (1..=6) of the dev cluster whose ports start at `base`.
    pub fn at(base: u16, j: usize) -> DevAlloc {
        let o = j as u16;
        DevAlloc {
            id: DEV_ALLOC_IDS[j - 1],
            client: at(base, 100 + o),
            peer: at(base, 110 + o),
            admin: at(base, 120 + o),
            metrics: at(base, 130 + o),
            resp: at(base, 140 + o),
            http: at(base, 150 + o),
        }
    }

    /// Every address it binds, with what for.
    pub fn ports(&self) -> Vec<(String, String)> {
        [
            (&self.client, "client plane"),
            (&self.peer, "peer plane"),
            (&self.admin, "admin plane"),
            (&self.metrics, "metrics"),
            (&self.resp, "Redis-protocol door"),
            (&self.http, "HTTP API"),
        ]
        .into_iter()
        .map(|(a, what)| (a.clone(), format!("{}'s {what}", self.id)))
        .collect()
    }
}

/// One set of the dev cluster: its spec, stores and AllocSvrs.
#[derive(Debug, Clone)]
pub struct DevSet {
    /// The set's span (set 0: `[0, DEV_UID_END)`; set 1: `[0, 2 ×
    /// DEV_UID_END)`, so it can take ranges of set 0, serving `[DEV_UID_END,
    /// 2 × DEV_UID_END)` once added).
    pub spec: seqsvr_core::SetSpec,
    /// Its store replicas.
    pub stores: Vec<DevStore>,
    /// Its AllocSvrs.
    pub allocs: Vec<DevAlloc>,
}

impl DevSet {
    /// Every address its processes bind, with what for.
    pub fn ports(&self) -> Vec<(String, String)> {
        let stores = self.stores.iter().flat_map(DevStore::ports);
        stores
            .chain(self.allocs.iter().flat_map(DevAlloc::ports))
            .collect()
    }
}

/// The first `n` sets (1 or 2) of the dev cluster at the default ports,
/// and its names set.
pub fn dev_sets(n: u32) -> Vec<DevSet> {
    dev_sets_at(DEV_PORT_BASE, n)
}

/// The first `n` sets (1 or 2) of the dev cluster whose ports start at
/// `base`, and its names set (last).
pub fn dev_sets_at(base: u16, n: u32) -> Vec<DevSet> {
    let set = |id: u32, uids: std::ops::Range<u64>, stores: [u64; 3], allocs: [usize; 2]| DevSet {
        spec: seqsvr_core::SetSpec::new(id, uids),
        stores: stores.iter().map(|&i| DevStore::at(base, i)).collect(),
        allocs: allocs.iter().map(|&j| DevAlloc::at(base, j)).collect(),
    };
    let mut sets = vec![set(0, 0..DEV_UID_END, [1, 2, 3], [1, 2])];
    if n >= 2 {
        sets.push(set(1, 0..2 * DEV_UID_END, [4, 5, 6], [3, 4]));
    }
    sets.push(set(DEV_NAMES_SET, dev_names_span(), [7, 8, 9], [5, 6]));
    sets
}

/// The dev cluster's set for named counters (`docs/counters.md`): added
/// for its whole span at start, so a name works out of the box through
/// every door (any AllocSvr forwards a name to its owner).
pub const DEV_NAMES_SET: u32 = 2;

/// The names set's span: the sections of set 0's grid that cover the range
/// reserved for names (a span must start on set 0's section boundaries).
pub fn dev_names_span() -> std::ops::Range<u64> {
    let size = seqsvr_core::section::DEFAULT_SECTION_SIZE;
    let names = seqsvr_core::NAME_KEYS;
    (names.start / size * size)..names.end.div_ceil(size) * size
}

/// Every address the dev cluster of `sets` binds, with what for, in the
/// order they are checked.
pub fn dev_ports(sets: &[DevSet]) -> Vec<(String, String)> {
    sets.iter().flat_map(DevSet::ports).collect()
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

/// Set 0's store replicas at port base `base`.
fn set0_stores(base: u16) -> Vec<DevStore> {
    dev_sets_at(base, 1).swap_remove(0).stores
}

/// The store replicas' client-plane addresses (`seqctl --store` default).
pub fn dev_store_addrs(base: u16) -> Vec<String> {
    set0_stores(base).into_iter().map(|s| s.client).collect()
}

/// The store replicas' admin-plane addresses (`seqctl --store-admin`
/// default).
pub fn dev_store_admin_addrs(base: u16) -> Vec<String> {
    set0_stores(base).into_iter().map(|s| s.admin).collect()
}

/// The AllocSvrs' client-plane addresses (`seqctl --alloc` default):
/// set 0's, and set 1's only while the dev cluster in `dev_dir` runs them
/// (`seqsvr dev --sets 2` keeps their pid files there while they run), so
/// the errors of a one-set cluster name only the seeds it has.
pub fn dev_alloc_addrs(base: u16, dev_dir: &Path) -> Vec<String> {
    let sets = dev_sets_at(base, 2);
    let set1_runs = sets[1]
        .allocs
        .iter()
        .any(|a| dev_dir.join(format!("{}.pid", a.id)).exists());
    let n = if set1_runs { 2 } else { 1 };
    sets.into_iter()
        .take(n)
        .flat_map(|s| s.allocs)
        .map(|a| a.client)
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
    let path = dev_config_path(dev_dir, "store-1");
    let cfg = seqsvr_store::StoreConfig::from_file(&path).ok()?;
    cfg.tls?;
    let operator = dev_pki(dev_dir).tls_config(DEV_OPERATOR);
    operator.cert.exists().then_some(operator)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_base_keeps_the_documented_ports() {
        let sets = dev_sets(2);
        let s1 = &sets[0].stores[0];
        assert_eq!(
            [&s1.peer, &s1.client, &s1.admin, &s1.metrics],
            [
                "127.0.0.1:7101",
                "127.0.0.1:7111",
                "127.0.0.1:7121",
                "127.0.0.1:7131"
            ]
        );
        let a1 = &sets[0].allocs[0];
        assert_eq!(
            [&a1.client, &a1.peer, &a1.admin, &a1.resp, &a1.http],
            [
                "127.0.0.1:7201",
                "127.0.0.1:7211",
                "127.0.0.1:7221",
                "127.0.0.1:7241",
                "127.0.0.1:7251"
            ]
        );
        assert_eq!(sets[1].stores[2].metrics, "127.0.0.1:7136");
        assert_eq!(sets[1].allocs[1].id, "alloc-4");
        assert_eq!(sets[1].allocs[1].http, "127.0.0.1:7254");
    }

    #[test]
    fn every_port_follows_the_base_once_and_within_the_span() {
        let base = 20_000;
        let ports: Vec<u16> = dev_ports(&dev_sets_at(base, 2))
            .iter()
            .map(|(a, _)| a.rsplit_once(':').unwrap().1.parse().unwrap())
            .collect();
        // Stores 1-9 (4 ports each), AllocSvrs 1-6 (6 each).
        assert_eq!(ports.len(), 9 * 4 + 6 * 6);
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "a port is used twice");
        assert_eq!(unique.first(), Some(&(base + 1)));
        assert_eq!(unique.last(), Some(&(base + DEV_PORT_SPAN)));
        let named = dev_ports(&dev_sets_at(base, 1));
        assert_eq!(
            named[1],
            ("127.0.0.1:20011".into(), "store-1's client plane".into())
        );
        assert!(named
            .iter()
            .any(|(_, w)| w == "alloc-2's Redis-protocol door"));
    }

    #[test]
    fn a_port_base_must_leave_room_for_the_span() {
        assert_eq!(parse_port_base("7100"), Ok(7100));
        assert_eq!(
            parse_port_base(&DEV_PORT_BASE_MAX.to_string()),
            Ok(DEV_PORT_BASE_MAX)
        );
        for bad in ["65500", "80", "x", "-1", "70000"] {
            let e = parse_port_base(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert!(parse_port_base("65500")
            .unwrap_err()
            .contains("between 1024 and 65379"));
    }

    #[test]
    fn set_1_seeds_only_while_set_1_runs() {
        let dir = tempfile::tempdir().unwrap();
        let one = dev_alloc_addrs(DEV_PORT_BASE, dir.path());
        assert_eq!(one, ["127.0.0.1:7201", "127.0.0.1:7202"]);
        std::fs::write(dir.path().join("alloc-3.pid"), "1").unwrap();
        let two = dev_alloc_addrs(9000, dir.path());
        assert_eq!(
            two,
            [
                "127.0.0.1:9101",
                "127.0.0.1:9102",
                "127.0.0.1:9103",
                "127.0.0.1:9104"
            ]
        );
    }
}
