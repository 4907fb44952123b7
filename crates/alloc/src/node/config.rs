//! An AllocSvr's configuration: [`AllocNodeConfig`] (one TOML file), its
//! defaults, and its validation (ids, addresses, timing bounds).

use std::net::{IpAddr, Ipv6Addr};

use seqsvr_core::AllocId;
use seqsvr_net::{Plane, PlaneLimits, TlsConfig};
use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

use super::resp::RespSection;

/// An AllocSvr's configuration (one TOML file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocNodeConfig {
    /// This AllocSvr's id (as the store's route table names it, and as its
    /// certificate names it: `urn:seqsvr:alloc:<id>`).
    pub id: AllocId,
    /// Its client-plane `host:port`, as clients should dial it.
    pub addr: String,
    /// Its peer-plane `host:port`, as other AllocSvrs should dial it.
    pub peer_addr: String,
    /// Its admin-plane `host:port`, as operators should dial it.
    pub admin_addr: String,
    /// Address to bind the client plane, if not `addr`.
    #[serde(default)]
    pub listen: Option<String>,
    /// Address to bind the peer plane, if not `peer_addr`.
    #[serde(default)]
    pub peer_listen: Option<String>,
    /// Address to bind the admin plane, if not `admin_addr`.
    #[serde(default)]
    pub admin_listen: Option<String>,
    /// The set's store replicas' **peer-plane** addresses (`host:port`).
    pub store: Vec<String>,
    /// TLS files (every plane, and dialing the store and other AllocSvrs).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Allow plaintext on addresses other hosts can reach (every caller is
    /// then trusted). Off by default.
    #[serde(default)]
    pub insecure: bool,
    /// Per-plane listener limits (defaults per plane where missing).
    #[serde(default)]
    pub limits: Option<PlaneLimits>,
    /// Where to serve Prometheus metrics (`GET /metrics`, plain HTTP), if
    /// anywhere. A non-loopback address needs `insecure = true`.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// How often the route table is re-read from the store, in ms.
    #[serde(default = "default_route_poll_ms")]
    pub route_poll_ms: u64,
    /// How often the lease is renewed, in ms (well below the lease length
    /// the store grants, so one or two lost renewals do not interrupt
    /// service).
    #[serde(default = "default_renew_ms")]
    pub renew_ms: u64,
    /// How long a call may wait for an exhausted section's raise, in ms.
    #[serde(default = "default_wait_ms")]
    pub wait_ms: u64,
    /// Raise a section ahead of need when less than this fraction of a
    /// step is left (0.0–1.0).
    #[serde(default = "default_fraction")]
    pub raise_ahead_fraction: f64,
    /// The Redis-protocol door, if served (off unless configured).
    #[serde(default)]
    pub resp: Option<RespSection>,
    /// Forwarding calls for uids owned elsewhere to their owner
    /// (`docs/architecture/forwarding.md`); on by default.
    #[serde(default)]
    pub forward: ForwardSection,
    /// Where to serve the HTTP API (`GET /v1/next/{uid}` …; `docs/clients.md`),
    /// if anywhere: its own port, on the client plane's terms (TLS when
    /// `tls` is set; a non-loopback plaintext address needs `insecure`).
    #[serde(default)]
    pub http_addr: Option<String>,
    /// Adaptive steps (`docs/architecture/alloc.md`, Adaptive steps); off
    /// (every raise adds the set's step) unless configured.
    #[serde(default)]
    pub adaptive_steps: Option<AdaptiveStepsSection>,
    /// Most named counters held in memory (`docs/counters.md`, Memory); a
    /// name forgotten to stay within it is recreated above everything it
    /// had, and counted. At least 1.
    #[serde(default = "default_max_names")]
    pub max_names: usize,
}

/// The `[adaptive_steps]` table. The largest step is the set's `step`
/// (the store refuses a raise of more, `STEP_TOO_LARGE`); `base_step`
/// must not be above it, which is checked against the set the store
/// serves when the node starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveStepsSection {
    /// The step of a cold section (and the smallest).
    pub base_step: u64,
    /// A step that lasted less than this many ms doubles; one that lasted
    /// twice as long or more halves.
    #[serde(default = "default_step_target_ms")]
    pub target_ms: u64,
    /// Headroom kept ahead of a raise, in ms at the section's recent rate
    /// (at least twice the measured raise latency).
    #[serde(default = "default_step_lead_ms")]
    pub lead_ms: u64,
    /// Half-life of the rate's moving average, in ms.
    #[serde(default = "default_step_half_life_ms")]
    pub half_life_ms: u64,
}

impl AdaptiveStepsSection {
    /// The allocator's settings.
    pub fn config(&self) -> crate::steps::AdaptiveSteps {
        crate::steps::AdaptiveSteps {
            base_step: self.base_step,
            target: std::time::Duration::from_millis(self.target_ms),
            lead: std::time::Duration::from_millis(self.lead_ms),
            half_life: std::time::Duration::from_millis(self.half_life_ms),
        }
    }

    fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(1..=seqsvr_core::section::MAX_STEP).contains(&self.base_step) {
            let r = format!(
                "{} is outside 1..={}",
                self.base_step,
                seqsvr_core::section::MAX_STEP
            );
            return Err(("adaptive_steps.base_step", r));
        }
        for (key, ms) in [
            ("adaptive_steps.target_ms", self.target_ms),
            ("adaptive_steps.lead_ms", self.lead_ms),
            ("adaptive_steps.half_life_ms", self.half_life_ms),
        ] {
            if !(1..=MAX_STEP_MS).contains(&ms) {
                return Err((key, format!("{ms} is outside 1..={MAX_STEP_MS}")));
            }
        }
        Ok(())
    }
}

fn default_step_target_ms() -> u64 {
    5_000
}

fn default_step_lead_ms() -> u64 {
    100
}

fn default_step_half_life_ms() -> u64 {
    2_000
}

/// Longest adaptive-step duration (a day).
const MAX_STEP_MS: u64 = 86_400_000;

/// The `[forward]` table: how calls for uids owned elsewhere are forwarded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardSection {
    /// Forward at all (off: such calls are refused `NOT_OWNER` with the
    /// owner's address, for callers that route themselves).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Most time one forwarded call may take, retries included, in ms.
    #[serde(default = "default_forward_deadline_ms")]
    pub deadline_ms: u64,
    /// Most calls in flight to one owner; more are refused `OVERLOADED`.
    #[serde(default = "default_forward_max_in_flight")]
    pub max_in_flight: usize,
    /// The retry delay forwarding's retryable errors name, in ms.
    #[serde(default = "default_forward_retry_after_ms")]
    pub retry_after_ms: u64,
}

impl Default for ForwardSection {
    fn default() -> Self {
        Self {
            enabled: true,
            deadline_ms: default_forward_deadline_ms(),
            max_in_flight: default_forward_max_in_flight(),
            retry_after_ms: default_forward_retry_after_ms(),
        }
    }
}

impl ForwardSection {
    /// The front's bounds.
    pub fn config(&self) -> crate::front::ForwardConfig {
        crate::front::ForwardConfig {
            deadline: std::time::Duration::from_millis(self.deadline_ms),
            max_in_flight: self.max_in_flight,
            retry_after_ms: self.retry_after_ms,
        }
    }

    fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(1..=MAX_WAIT_MS).contains(&self.deadline_ms) {
            let r = format!("{} is outside 1..={MAX_WAIT_MS}", self.deadline_ms);
            return Err(("forward.deadline_ms", r));
        }
        if !(1..=MAX_FORWARD_IN_FLIGHT).contains(&self.max_in_flight) {
            let r = format!(
                "{} is outside 1..={MAX_FORWARD_IN_FLIGHT}",
                self.max_in_flight
            );
            return Err(("forward.max_in_flight", r));
        }
        if self.retry_after_ms > MAX_WAIT_MS {
            let r = format!("{} is above {MAX_WAIT_MS}", self.retry_after_ms);
            return Err(("forward.retry_after_ms", r));
        }
        Ok(())
    }
}

fn default_true() -> bool {
    true
}

fn default_forward_deadline_ms() -> u64 {
    1000
}

fn default_forward_max_in_flight() -> usize {
    4096
}

fn default_forward_retry_after_ms() -> u64 {
    50
}

/// The most calls one AllocSvr may have in flight to one owner.
const MAX_FORWARD_IN_FLIGHT: usize = 1 << 20;

fn default_route_poll_ms() -> u64 {
    250
}

fn default_renew_ms() -> u64 {
    1000
}

fn default_wait_ms() -> u64 {
    1000
}

fn default_fraction() -> f64 {
    0.25
}

fn default_max_names() -> usize {
    crate::names::DEFAULT_MAX_NAMES
}

/// Bounds of the timing keys, in ms.
const MIN_RENEW_MS: u64 = 10;

const MAX_RENEW_MS: u64 = 600_000;

const MAX_ROUTE_POLL_MS: u64 = 3_600_000;

const MAX_WAIT_MS: u64 = 60_000;

impl AllocNodeConfig {
    /// Parses and checks a TOML config.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let cfg: Self = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The address to bind for `plane`.
    pub fn listen_addr(&self, plane: Plane) -> &str {
        let (listen, addr) = match plane {
            Plane::Client => (&self.listen, &self.addr),
            Plane::Peer => (&self.peer_listen, &self.peer_addr),
            Plane::Admin => (&self.admin_listen, &self.admin_addr),
        };
        listen.as_deref().unwrap_or(addr)
    }

    /// Checks for mistakes that would otherwise surface late; the error
    /// names the key at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_id(&self.id).or_else(|r| bad("id", r))?;
        let binds = self.check_planes()?;
        self.check_store()?;
        self.check_pacing()?;
        self.check_resp(&binds)?;
        if let Some(l) = &self.limits {
            l.validate().or_else(|e| bad("limits", e.to_string()))?;
        }
        Ok(())
    }

    /// The planes' addresses (each its own, advertised and bound), the
    /// metrics', the HTTP API's and forwarding's; returns what each plane
    /// binds, by key.
    fn check_planes(&self) -> Result<Vec<(&'static str, &str)>, ConfigError> {
        let advertised = [
            ("addr", &self.addr),
            ("peer_addr", &self.peer_addr),
            ("admin_addr", &self.admin_addr),
        ];
        for (i, (key, a)) in advertised.iter().enumerate() {
            check_addr(a, false).or_else(|r| bad(key, r))?;
            if let Some((other, _)) = advertised[..i].iter().find(|(_, b)| b == a) {
                return bad(
                    key,
                    format!("{a} is also {other}: every plane needs its own"),
                );
            }
        }
        let listens = [
            ("listen", &self.listen),
            ("peer_listen", &self.peer_listen),
            ("admin_listen", &self.admin_listen),
        ];
        for (key, l) in &listens {
            if let Some(l) = l {
                check_addr(l, true).or_else(|r| bad(key, r))?;
            }
        }
        if let Some(m) = &self.metrics_addr {
            check_addr(m, true).or_else(|r| bad("metrics_addr", r))?;
        }
        if let Some(h) = &self.http_addr {
            check_addr(h, true).or_else(|r| bad("http_addr", r))?;
        }
        if let Err((key, r)) = self.forward.validate() {
            return bad(key, r);
        }
        let binds: Vec<(&'static str, &str)> = listens
            .iter()
            .zip(Plane::ALL)
            .map(|((key, _), plane)| (*key, self.listen_addr(plane)))
            .collect();
        for (i, (key, b)) in binds.iter().enumerate() {
            let fixed_port = !b.ends_with(":0");
            if let Some((other, _)) = binds[..i].iter().find(|(_, c)| c == b && fixed_port) {
                return bad(
                    key,
                    format!("binds {b}, as {other} does: every plane needs its own"),
                );
            }
        }
        Ok(binds)
    }

    /// The store's addresses: at least one, each once.
    fn check_store(&self) -> Result<(), ConfigError> {
        if self.store.is_empty() {
            return bad("store", "no store addresses".into());
        }
        for (i, a) in self.store.iter().enumerate() {
            let key = format!("store[{i}]");
            check_addr(a, false).or_else(|r| bad(&key, r))?;
            if let Some(j) = self.store[..i].iter().position(|b| b == a) {
                return bad(&key, format!("{a} is listed twice (also store[{j}])"));
            }
        }
        Ok(())
    }

    /// Renewals, route reads, waits, raises and names.
    fn check_pacing(&self) -> Result<(), ConfigError> {
        if !(MIN_RENEW_MS..=MAX_RENEW_MS).contains(&self.renew_ms) {
            return bad(
                "renew_ms",
                format!(
                    "{} is outside {MIN_RENEW_MS}..={MAX_RENEW_MS}",
                    self.renew_ms
                ),
            );
        }
        if !(1..=MAX_ROUTE_POLL_MS).contains(&self.route_poll_ms) {
            return bad(
                "route_poll_ms",
                format!("{} is outside 1..={MAX_ROUTE_POLL_MS}", self.route_poll_ms),
            );
        }
        if self.wait_ms > MAX_WAIT_MS {
            return bad(
                "wait_ms",
                format!("{} is above {MAX_WAIT_MS}", self.wait_ms),
            );
        }
        if !(0.0..=1.0).contains(&self.raise_ahead_fraction) {
            return bad(
                "raise_ahead_fraction",
                format!("{} is outside 0.0..=1.0", self.raise_ahead_fraction),
            );
        }
        if let Some(a) = &self.adaptive_steps {
            a.validate().or_else(|(key, r)| bad(key, r))?;
        }
        if self.max_names == 0 {
            return bad("max_names", "0 holds no name; at least 1".to_string());
        }
        Ok(())
    }

    /// The RESP listener: its address, not one a plane binds, and its own
    /// settings.
    fn check_resp(&self, binds: &[(&str, &str)]) -> Result<(), ConfigError> {
        if let Some(r) = &self.resp {
            check_addr(&r.addr, true).or_else(|e| bad("resp.addr", e))?;
            if let Some((other, _)) = binds
                .iter()
                .find(|(_, b)| *b == r.addr && !b.ends_with(":0"))
            {
                return bad("resp.addr", format!("binds {}, as {other} does", r.addr));
            }
            r.check().or_else(|(key, reason)| bad(key, reason))?;
        }
        Ok(())
    }
}

/// The error naming `key`, for `reason`.
fn bad<T>(key: &str, reason: String) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid {
        key: key.to_string(),
        reason,
    })
}

/// An AllocSvr id: what a certificate can carry (`urn:seqsvr:alloc:<id>`).
fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 128 {
        return Err("must be 1 to 128 characters".into());
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
    {
        return Err(format!(
            "{id:?}: use only letters, digits, '-', '.', '_' and '~'"
        ));
    }
    Ok(())
}

/// A `host:port`: an IPv4 address, a bracketed IPv6 address or a DNS name,
/// and a port (0 only where `any_port`, for binding).
fn check_addr(a: &str, any_port: bool) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{a:?} is not a host:port address: {why}"));
    let Some((host, port)) = a.rsplit_once(':') else {
        return bad("no port");
    };
    match port.parse::<u16>() {
        Ok(0) if !any_port => return bad("port 0"),
        Ok(_) => {}
        Err(_) => return bad("the port is not a number in 0..=65535"),
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return match v6.parse::<Ipv6Addr>() {
            Ok(_) => Ok(()),
            Err(_) => bad("bad IPv6 address"),
        };
    }
    if host.contains(':') {
        return bad("an IPv6 address goes in brackets, as [::1]:7201");
    }
    if host.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let dns = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if dns {
        Ok(())
    } else {
        bad("bad host name")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
id = "alloc-1"
addr = "127.0.0.1:7201"
peer_addr = "127.0.0.1:7211"
admin_addr = "127.0.0.1:7221"
store = ["127.0.0.1:7111", "127.0.0.1:7112", "store-3.example:7113"]
renew_ms = 1000
route_poll_ms = 250
wait_ms = 1000
raise_ahead_fraction = 0.25
"#;

    fn key_of(text: &str) -> String {
        match AllocNodeConfig::from_toml(text) {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an invalid key, got {other:?}"),
        }
    }

    #[test]
    fn a_full_config_parses_with_defaults() {
        let cfg = AllocNodeConfig::from_toml(GOOD).unwrap();
        assert_eq!(cfg.store.len(), 3);
        assert!(!cfg.insecure && cfg.tls.is_none() && cfg.limits.is_none());
        assert_eq!(cfg.listen_addr(Plane::Peer), "127.0.0.1:7211");
        let more = format!(
            "{GOOD}listen = \"0.0.0.0:7201\"\ninsecure = true\n\
             [tls]\nca = \"ca.pem\"\ncert = \"a.pem\"\nkey = \"a-key.pem\"\n\
             [limits.client]\nmax_connections = 9\n"
        );
        let cfg = AllocNodeConfig::from_toml(&more).unwrap();
        assert_eq!(cfg.listen_addr(Plane::Client), "0.0.0.0:7201");
        assert_eq!(cfg.limits.unwrap().client.max_connections, 9);
        assert!(cfg.tls.is_some() && cfg.insecure);
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (
                "addr = \"127.0.0.1:7201\"",
                "addr = \"not-an-address\"",
                "addr",
            ),
            (
                "peer_addr = \"127.0.0.1:7211\"",
                "peer_addr = \"h:99999\"",
                "peer_addr",
            ),
            (
                "admin_addr = \"127.0.0.1:7221\"",
                "admin_addr = \"[::1:7221\"",
                "admin_addr",
            ),
            (
                "admin_addr = \"127.0.0.1:7221\"",
                "admin_addr = \"127.0.0.1:7201\"",
                "admin_addr",
            ),
            (
                "admin_addr = \"127.0.0.1:7221\"",
                "admin_addr = \"10.0.0.1:0\"",
                "admin_addr",
            ),
            ("renew_ms = 1000", "renew_ms = 0", "renew_ms"),
            ("route_poll_ms = 250", "route_poll_ms = 0", "route_poll_ms"),
            ("wait_ms = 1000", "wait_ms = 600000", "wait_ms"),
            (
                "raise_ahead_fraction = 0.25",
                "raise_ahead_fraction = 1.5",
                "raise_ahead_fraction",
            ),
            (
                "raise_ahead_fraction = 0.25",
                "raise_ahead_fraction = nan",
                "raise_ahead_fraction",
            ),
            (
                "wait_ms = 1000",
                "wait_ms = 1000\nmax_names = 0",
                "max_names",
            ),
            ("id = \"alloc-1\"", "id = \"\"", "id"),
            (
                "wait_ms = 1000",
                "wait_ms = 1000\nhttp_addr = \"nowhere\"",
                "http_addr",
            ),
            (
                "raise_ahead_fraction = 0.25",
                "raise_ahead_fraction = 0.25\n[forward]\nmax_in_flight = 0",
                "forward.max_in_flight",
            ),
            (
                "raise_ahead_fraction = 0.25",
                "raise_ahead_fraction = 0.25\n[forward]\ndeadline_ms = 0",
                "forward.deadline_ms",
            ),
            ("id = \"alloc-1\"", "id = \"alloc 1\"", "id"),
            ("\"store-3.example:7113\"", "\"127.0.0.1:7111\"", "store[2]"),
            (
                "\"store-3.example:7113\"",
                "\"-bad-.example:7113\"",
                "store[2]",
            ),
            (
                "store = [\"127.0.0.1:7111\", \"127.0.0.1:7112\", \"store-3.example:7113\"]",
                "store = []",
                "store",
            ),
        ];
        for (from, to, key) in cases {
            let text = GOOD.replace(from, to);
            assert_ne!(text, GOOD, "{from} not in the sample");
            assert_eq!(key_of(&text), key, "{to}");
        }
        let bind_twice =
            format!("{GOOD}listen = \"0.0.0.0:7000\"\npeer_listen = \"0.0.0.0:7000\"\n");
        assert_eq!(key_of(&bind_twice), "peer_listen");
        let bad_listen = format!("{GOOD}admin_listen = \"nowhere\"\n");
        assert_eq!(key_of(&bad_listen), "admin_listen");
        let ephemeral = format!("{GOOD}listen = \"127.0.0.1:0\"\npeer_listen = \"127.0.0.1:0\"\n");
        AllocNodeConfig::from_toml(&ephemeral).unwrap();
        let limits = format!("{GOOD}[limits.client]\nmax_connections = 0\n");
        assert_eq!(key_of(&limits), "limits");
    }

    #[test]
    fn the_resp_door_is_off_unless_configured() {
        assert_eq!(AllocNodeConfig::from_toml(GOOD).unwrap().resp, None);
        let on = format!("{GOOD}[resp]\naddr = \"127.0.0.1:6380\"\npassword = \"pw\"\n");
        let r = AllocNodeConfig::from_toml(&on).unwrap().resp.unwrap();
        assert_eq!(
            (r.addr.as_str(), r.password.as_deref()),
            ("127.0.0.1:6380", Some("pw"))
        );
        assert_eq!(r.key_prefixes, ["seq:"]);
        for (extra, key) in [
            ("[resp]\naddr = \"127.0.0.1:7201\"\n", "resp.addr"),
            ("[resp]\naddr = \"nowhere\"\n", "resp.addr"),
            (
                "[resp]\naddr = \"127.0.0.1:0\"\nuser = \"app\"\n",
                "resp.user",
            ),
            (
                "[resp]\naddr = \"127.0.0.1:0\"\nkey_prefixes = [\"user1\"]\n",
                "resp.key_prefixes",
            ),
            (
                "[resp]\naddr = \"127.0.0.1:0\"\nmax_bulk = 1\n",
                "resp.max_bulk",
            ),
            (
                "[resp]\naddr = \"127.0.0.1:0\"\nspin_us = 10001\n",
                "resp.spin_us",
            ),
        ] {
            assert_eq!(key_of(&format!("{GOOD}{extra}")), key, "{extra}");
        }
    }

    #[test]
    fn adaptive_steps_are_off_unless_configured() {
        assert_eq!(
            AllocNodeConfig::from_toml(GOOD).unwrap().adaptive_steps,
            None
        );
        let on = format!(
            "{GOOD}[adaptive_steps]
base_step = 1000
"
        );
        let a = AllocNodeConfig::from_toml(&on)
            .unwrap()
            .adaptive_steps
            .unwrap();
        let c = a.config();
        assert_eq!(c.base_step, 1000);
        assert_eq!(c.target, std::time::Duration::from_secs(5));
        assert_eq!(c.lead, std::time::Duration::from_millis(100));
        assert_eq!(c.half_life, std::time::Duration::from_secs(2));
        for (extra, key) in [
            (
                "base_step = 0
",
                "adaptive_steps.base_step",
            ),
            (
                "base_step = 1
target_ms = 0
",
                "adaptive_steps.target_ms",
            ),
            (
                "base_step = 1
lead_ms = 0
",
                "adaptive_steps.lead_ms",
            ),
            (
                "base_step = 1
half_life_ms = 86400001
",
                "adaptive_steps.half_life_ms",
            ),
        ] {
            let text = format!(
                "{GOOD}[adaptive_steps]
{extra}"
            );
            assert_eq!(key_of(&text), key, "{extra}");
        }
        let missing = format!(
            "{GOOD}[adaptive_steps]
target_ms = 10
"
        );
        assert!(matches!(
            AllocNodeConfig::from_toml(&missing),
            Err(ConfigError::Parse(_))
        ));
    }

    #[test]
    fn unknown_and_missing_keys_are_refused() {
        for text in [
            format!("{GOOD}renew_every = 3\n"),
            GOOD.replace("peer_addr = \"127.0.0.1:7211\"\n", ""),
            "id = 1".to_string(),
        ] {
            assert!(
                matches!(
                    AllocNodeConfig::from_toml(&text),
                    Err(ConfigError::Parse(_))
                ),
                "{text}"
            );
        }
    }

    #[test]
    fn addresses() {
        for ok in [
            "127.0.0.1:1",
            "[::1]:7201",
            "alloc-1.svc.local:7201",
            "h:65535",
        ] {
            assert_eq!(check_addr(ok, false), Ok(()), "{ok}");
        }
        for bad in [
            "not-an-address",
            "127.0.0.1",
            ":7201",
            "h:",
            "h:0",
            "::1:7201",
            "http://h:1",
            "h h:1",
            "h..x:1",
        ] {
            assert!(check_addr(bad, false).is_err(), "{bad}");
        }
        assert_eq!(check_addr("0.0.0.0:0", true), Ok(()));
    }
}
