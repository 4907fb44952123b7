//! A store replica's configuration: [`StoreConfig`] (one TOML file) and
//! its parts — the group's [`Member`]s, the [`InitialAlloc`] routes, the
//! [`RaftTiming`] and the [`LeaseSection`] — with parsing and validation.

use std::path::PathBuf;

use seqsvr_core::SetSpec;
use serde::{Deserialize, Serialize};

use crate::arbiter::{ArbiterConfig, RebalanceConfig};
use crate::types::NodeId;
use seqsvr_core::LeaseTerms;
use seqsvr_net::{PlaneLimits, TlsConfig};
use seqsvr_store_api::{Error, Result};

/// One member of the store group, as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    /// Raft node id (≥ 1, unique in the group).
    pub id: NodeId,
    /// Its peer-plane `host:port` (Raft, and calls forwarded to the leader).
    pub addr: String,
}

/// The sections first routed to an AllocSvr of the set. Applied once the
/// AllocSvr has registered, and only to sections with no owner yet, so a
/// restart with the same config changes nothing and later moves are never
/// undone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitialAlloc {
    /// The AllocSvr's id.
    pub id: String,
    /// First section routed to it.
    pub first: u32,
    /// Number of sections routed to it.
    pub count: u32,
}

impl InitialAlloc {
    /// `sections` split among `ids` in order: equal shares of consecutive
    /// sections, the last AllocSvr taking the remainder as well.
    pub fn even_split<I>(ids: I, sections: u32) -> Vec<InitialAlloc>
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: Into<String>,
    {
        let ids = ids.into_iter();
        let n = ids.len() as u32;
        let share = sections / n.max(1);
        ids.enumerate()
            .map(|(i, id)| {
                let first = i as u32 * share;
                InitialAlloc {
                    id: id.into(),
                    first,
                    count: if i as u32 + 1 == n {
                        sections - first
                    } else {
                        share
                    },
                }
            })
            .collect()
    }
}

/// Raft timing, in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RaftTiming {
    /// Leader heartbeat interval.
    pub heartbeat_ms: u64,
    /// Election timeout, lower bound.
    pub election_min_ms: u64,
    /// Election timeout, upper bound.
    pub election_max_ms: u64,
    /// Build a snapshot after this many log entries.
    pub snapshot_every: u64,
}

impl Default for RaftTiming {
    fn default() -> Self {
        Self {
            heartbeat_ms: 100,
            election_min_ms: 400,
            election_max_ms: 800,
            snapshot_every: 10_000,
        }
    }
}

/// Lease timing as configured. `lease_ms` and `margin_ms` are only the
/// *initial* terms of a new group: the terms in force are replicated state,
/// changed with `seqctl store lease` (see `docs/operations.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaseSection {
    /// Initial lease length, in ms.
    pub lease_ms: u64,
    /// Initial drift margin, in ms.
    pub margin_ms: u64,
    /// How often the arbiter looks for expired leases, in ms.
    pub tick_ms: u64,
}

impl Default for LeaseSection {
    fn default() -> Self {
        let t = LeaseTerms::default();
        Self {
            lease_ms: t.lease_ms,
            margin_ms: t.margin_ms,
            tick_ms: ArbiterConfig::default().tick_ms,
        }
    }
}

impl LeaseSection {
    /// The initial terms.
    pub fn terms(&self) -> LeaseTerms {
        LeaseTerms {
            lease_ms: self.lease_ms,
            margin_ms: self.margin_ms,
        }
    }
}

/// Everything a store replica needs to run (one TOML file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// This replica's id; must be one of `members`.
    pub id: NodeId,
    /// Where its sled database lives.
    pub data_dir: PathBuf,
    /// Peer-plane bind address (defaults to this member's `addr`).
    #[serde(default)]
    pub listen: Option<String>,
    /// Client-plane address (read-only: routes, sections, status).
    pub client_addr: String,
    /// Admin-plane address (operator commands).
    pub admin_addr: String,
    /// Client- and admin-plane bind addresses, if they differ from the
    /// advertised ones.
    #[serde(default)]
    pub client_listen: Option<String>,
    /// See `client_listen`.
    #[serde(default)]
    pub admin_listen: Option<String>,
    /// TLS for every plane (mTLS on peer and admin). Without it every
    /// listener must be on loopback, or `insecure = true`.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Allow plaintext on non-loopback addresses (warned about at start).
    #[serde(default)]
    pub insecure: bool,
    /// Take store certificates of the old form `urn:seqsvr:store:<id>`,
    /// which name no set, as this set's replicas — this replica's own and
    /// its peers' — logging each caller as a warning. Only for a cluster
    /// whose store certificates are being re-issued in the form that names
    /// the set (`docs/operations.md`, "Rotating certificates"); off by
    /// default, since such a certificate could be any set's. Needs `tls`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legacy_store_certificates: bool,
    /// Per-plane connection and message limits.
    #[serde(default)]
    pub limits: PlaneLimits,
    /// Where to serve Prometheus metrics (`GET /metrics`, plain HTTP);
    /// none if unset. A non-loopback address needs `insecure = true`.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// The initial members of the group, this replica among them (its
    /// entry is its advertised peer-plane address). Read only when the
    /// group is first initialised: from then on membership lives in the
    /// Raft log and changes with `seqctl store add|remove|replace`.
    pub members: Vec<Member>,
    /// This replica is being added to a running group (`seqctl store add`):
    /// it never initialises a group, whatever `members` says, and waits
    /// for the leader to send it the log. `members` then needs only this
    /// replica's own entry. Keeping it set after the replica joined is
    /// harmless: a replica with a log never initialises anyway.
    #[serde(default)]
    pub join: bool,
    /// The set this group serves (uid bounds above `2^63 − 1` as decimal
    /// strings: `config_spec.rs`).
    #[serde(with = "super::config_spec")]
    pub set: SetSpec,
    /// This group is a set added to a cluster that runs already (`seqctl
    /// set add`): it starts serving nothing. Leave unset for set 0 and for
    /// a cluster of one set.
    #[serde(default)]
    pub added_set: bool,
    /// Raft timing.
    #[serde(default)]
    pub raft: RaftTiming,
    /// The set's AllocSvrs and their initial sections.
    #[serde(default)]
    pub allocs: Vec<InitialAlloc>,
    /// Lease timing.
    #[serde(default)]
    pub lease: LeaseSection,
    /// The arbiter's evening out of sections after a recovery
    /// (docs/operations.md, Automatic rebalancing): on by default.
    #[serde(default)]
    pub rebalance: RebalanceConfig,
    /// How many client-plane reads (`GetRoutes`, `ReadSections`, `Status`)
    /// this replica serves at once; more wait their turn (within the
    /// request timeout). Renewals and Raft share the replica's threads
    /// with these reads, which anyone who can connect may send: served
    /// all at once, thousands of reads in flight queue every step of a
    /// renewal behind them until leases lapse
    /// (docs/architecture/security.md, Reads that cannot starve renewals).
    #[serde(default = "default_max_concurrent_reads")]
    pub max_concurrent_reads: usize,
}

/// The default of [`StoreConfig::max_concurrent_reads`]: enough to keep
/// both cores of a small machine busy with reads, few enough that a
/// renewal waits behind at most that many.
pub const DEFAULT_MAX_CONCURRENT_READS: usize = 64;

fn default_max_concurrent_reads() -> usize {
    DEFAULT_MAX_CONCURRENT_READS
}

pub(super) fn config_err(key: &str, msg: impl std::fmt::Display) -> Error {
    Error::Config(format!("{key}: {msg}"))
}

/// Checks that `addr` is `host:port`.
pub fn check_host_port(key: &str, addr: &str) -> Result<()> {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(config_err(key, format!("{addr:?} is not host:port"))),
    }
}

impl StoreConfig {
    /// Parses and validates a TOML config.
    pub fn from_toml(text: &str) -> Result<Self> {
        let cfg: StoreConfig = toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads, parses and validates a config file; errors name the file.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
        Self::from_toml(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
    }

    /// Checks the config for mistakes that would otherwise surface late.
    pub fn validate(&self) -> Result<()> {
        self.check_members()?;
        self.check_addrs()?;
        self.set.validate().map_err(|e| config_err("set", e))?;
        self.check_allocs()?;
        self.check_timing()?;
        self.limits
            .validate()
            .map_err(|e| config_err("limits", e))?;
        Ok(())
    }

    /// The members: at least one, ids unique and ≥ 1, addresses unique and
    /// well formed, this replica among them.
    fn check_members(&self) -> Result<()> {
        if self.members.is_empty() {
            return Err(config_err("members", "no members"));
        }
        let ids: std::collections::BTreeSet<_> = self.members.iter().map(|m| m.id).collect();
        if ids.len() != self.members.len() || ids.contains(&0) {
            return Err(config_err(
                "members.id",
                "member ids must be unique and ≥ 1",
            ));
        }
        let addrs: std::collections::BTreeSet<_> = self.members.iter().map(|m| &m.addr).collect();
        if addrs.len() != self.members.len() {
            return Err(config_err(
                "members.addr",
                "member addresses must be unique",
            ));
        }
        for m in &self.members {
            check_host_port("members.addr", &m.addr)?;
        }
        if !ids.contains(&self.id) {
            return Err(config_err(
                "id",
                format!("{} is not among the members", self.id),
            ));
        }
        Ok(())
    }

    /// The planes' and metrics' addresses (each plane its own), the reads'
    /// limit, and the legacy certificates switch.
    fn check_addrs(&self) -> Result<()> {
        check_host_port("client_addr", &self.client_addr)?;
        check_host_port("admin_addr", &self.admin_addr)?;
        if self.max_concurrent_reads == 0 {
            return Err(config_err("max_concurrent_reads", "must be at least 1"));
        }
        for (key, v) in [
            ("metrics_addr", &self.metrics_addr),
            ("listen", &self.listen),
            ("client_listen", &self.client_listen),
            ("admin_listen", &self.admin_listen),
        ] {
            if let Some(a) = v {
                check_host_port(key, a)?;
            }
        }
        if self.legacy_store_certificates && self.tls.is_none() {
            return Err(config_err(
                "legacy_store_certificates",
                "only means something with tls (without it no certificate is checked)",
            ));
        }
        let planes = [self.peer_bind(), self.client_bind(), self.admin_bind()];
        if planes[0] == planes[1] || planes[1] == planes[2] || planes[0] == planes[2] {
            return Err(config_err(
                "client_addr/admin_addr",
                "each plane needs its own address",
            ));
        }
        Ok(())
    }

    /// The AllocSvrs listed at bootstrap: each once, their sections in the
    /// set and not overlapping.
    fn check_allocs(&self) -> Result<()> {
        let mut taken = vec![false; self.set.section_count() as usize];
        let mut seen = std::collections::BTreeSet::new();
        for a in &self.allocs {
            if !seen.insert(&a.id) {
                return Err(config_err(
                    "allocs.id",
                    format!("{:?} is listed twice", a.id),
                ));
            }
            let end = a.first as u64 + a.count as u64;
            if a.id.is_empty() || a.count == 0 || end > taken.len() as u64 {
                return Err(config_err(
                    "allocs",
                    format!(
                        "alloc {:?}: sections {}+{} not in the set",
                        a.id, a.first, a.count
                    ),
                ));
            }
            for t in &mut taken[a.first as usize..end as usize] {
                if std::mem::replace(t, true) {
                    return Err(config_err(
                        "allocs",
                        format!("alloc {:?}: sections overlap another alloc's", a.id),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The lease terms, rebalancing, the lease tick and Raft's timing.
    fn check_timing(&self) -> Result<()> {
        self.lease
            .terms()
            .validate()
            .map_err(|e| config_err("lease", e))?;
        self.rebalance
            .validate()
            .map_err(|e| config_err("rebalance", e))?;
        if self.lease.tick_ms == 0 {
            return Err(config_err("lease.tick_ms", "must be positive"));
        }
        let t = &self.raft;
        if t.heartbeat_ms == 0
            || t.election_min_ms <= t.heartbeat_ms
            || t.election_max_ms <= t.election_min_ms
        {
            return Err(config_err(
                "raft",
                "need 0 < heartbeat_ms < election_min_ms < election_max_ms",
            ));
        }
        if t.snapshot_every == 0 {
            return Err(config_err("raft.snapshot_every", "must be at least 1"));
        }
        Ok(())
    }

    /// This replica's advertised peer-plane address.
    pub fn addr(&self) -> &str {
        let me = self.members.iter().find(|m| m.id == self.id);
        me.map(|m| m.addr.as_str()).unwrap_or_default()
    }

    /// Where to bind the peer plane.
    pub fn peer_bind(&self) -> &str {
        self.listen.as_deref().unwrap_or(self.addr())
    }

    /// Where to bind the client plane.
    pub fn client_bind(&self) -> &str {
        self.client_listen.as_deref().unwrap_or(&self.client_addr)
    }

    /// Where to bind the admin plane.
    pub fn admin_bind(&self) -> &str {
        self.admin_listen.as_deref().unwrap_or(&self.admin_addr)
    }

    pub(super) fn raft_config(&self) -> Result<openraft::Config> {
        let t = &self.raft;
        openraft::Config {
            cluster_name: format!("seqsvr-set-{}", self.set.set_id),
            heartbeat_interval: t.heartbeat_ms,
            election_timeout_min: t.election_min_ms,
            election_timeout_max: t.election_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(t.snapshot_every),
            max_in_snapshot_log_to_keep: 1000,
            snapshot_max_chunk_size: 4 << 20,
            ..Default::default()
        }
        .validate()
        .map_err(|e| config_err("raft", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_split_gives_the_remainder_to_the_last() {
        let a = |id: &str, first, count| InitialAlloc {
            id: id.into(),
            first,
            count,
        };
        assert_eq!(
            InitialAlloc::even_split(["a", "b", "c"], 100),
            vec![a("a", 0, 33), a("b", 33, 33), a("c", 66, 34)]
        );
        assert_eq!(InitialAlloc::even_split(["a"], 7), vec![a("a", 0, 7)]);
        assert_eq!(InitialAlloc::even_split(Vec::<String>::new(), 7), vec![]);
    }

    #[test]
    fn sample_configs_parse() {
        for (i, text) in [
            include_str!("../../../../config/store-1.toml"),
            include_str!("../../../../config/store-2.toml"),
            include_str!("../../../../config/store-3.toml"),
        ]
        .into_iter()
        .enumerate()
        {
            let cfg = StoreConfig::from_toml(text).unwrap();
            assert_eq!(cfg.id, i as u64 + 1);
            assert_eq!(cfg.members.len(), 3);
            assert_eq!(cfg.set.section_count(), 100);
        }
    }

    #[test]
    fn bad_configs_are_refused() {
        let good = include_str!("../../../../config/store-1.toml");
        for (from, to) in [
            ("id = 1", "id = 9"),
            ("step = 10000", "step = 0"),
            ("election_min_ms = 400", "election_min_ms = 50"),
            ("id = 2\naddr", "id = 1\naddr"),
            ("first = 50", "first = 49"),
            ("count = 50\n\n[[allocs]]", "count = 0\n\n[[allocs]]"),
            ("first = 50", "first = 99"),
            ("id = \"alloc-2\"", "id = \"alloc-1\""),
            ("addr = \"127.0.0.1:7101\"", "addr = \"not-an-address\""),
            (
                "client_addr = \"127.0.0.1:7111\"",
                "client_addr = \"127.0.0.1:7101\"",
            ),
            ("snapshot_every = 10000", "snapshot_every = 0"),
            ("margin_ms = 1000", "margin_ms = 10"),
            ("tick_ms = 100", "tick_ms = 0"),
            ("[raft]", "[rebalance]\nsections_per_interval = 0\n\n[raft]"),
            ("[raft]", "[rebalance]\ninterval_ms = 0\n\n[raft]"),
            ("[raft]", "[rebalance]\nenable = false\n\n[raft]"),
            // Unknown keys and misspelt tables are mistakes, not extensions.
            ("[raft]", "[raft]\nheartbeat = 100"),
            ("[lease]", "[leases]"),
            ("data_dir", "datadir"),
            // Old-form store certificates are a TLS matter: without TLS
            // the allowance could only be a mistake.
            ("data_dir", "legacy_store_certificates = true\ndata_dir"),
        ] {
            let text = good.replacen(from, to, 1);
            assert_ne!(text, good, "{from}");
            assert!(
                matches!(StoreConfig::from_toml(&text), Err(Error::Config(_))),
                "{to}"
            );
        }
        assert!(matches!(
            StoreConfig::from_toml("id = "),
            Err(Error::Config(_))
        ));
    }
}
