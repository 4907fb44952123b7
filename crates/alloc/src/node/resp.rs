//! The Redis-protocol door of an AllocSvr (`[resp]` in its config): off
//! unless configured; its own port; TLS with the client plane's
//! certificate when the planes use TLS; optional `AUTH`
//! (`docs/architecture/resp.md`, `docs/clients.md`).

use std::net::SocketAddr;
use std::sync::Arc;

use seqsvr_resp::{Credentials, DoorConfig, DoorMetrics, KeyMap};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::error::NodeError;
use crate::front::Front;
use crate::resp_backend::AllocBackend;

/// The `[resp]` section of an AllocSvr's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RespSection {
    /// Address to bind (`host:port`; port 0 picks one).
    pub addr: String,
    /// With `password`: `AUTH user password` (and `HELLO 3 AUTH …`).
    #[serde(default)]
    pub user: Option<String>,
    /// `AUTH` required with this password (Redis's `requirepass`, or the
    /// user's password when `user` is set).
    #[serde(default)]
    pub password: Option<String>,
    /// Key prefixes before a decimal uid; every prefix listed names the
    /// same uid space (docs/clients.md, Keys).
    #[serde(default = "default_prefixes")]
    pub key_prefixes: Vec<String>,
    /// Whether a bare decimal uid is a key.
    #[serde(default = "yes")]
    pub bare_uids: bool,
    /// Longest bulk argument accepted, in bytes.
    #[serde(default = "default_max_bulk")]
    pub max_bulk: usize,
    /// Most connections at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Most bytes buffered for one connection's unfinished request.
    #[serde(default = "default_max_query_buffer")]
    pub max_query_buffer: usize,
    /// Microseconds the door's thread keeps polling after answering before
    /// it sleeps (busy-polling; 0, the default, sleeps at once). Spends up
    /// to a core while requests come less than this apart, for lower
    /// latency and more requests a second from clients on the same
    /// machine (`docs/architecture/resp.md`, Busy-polling).
    #[serde(default)]
    pub spin_us: u64,
}

/// The longest `spin_us`.
pub const MAX_SPIN_US: u64 = 10_000;

fn default_prefixes() -> Vec<String> {
    vec!["seq:".to_string()]
}

fn yes() -> bool {
    true
}

fn default_max_bulk() -> usize {
    seqsvr_resp::parse::DEFAULT_MAX_BULK
}

fn default_max_connections() -> usize {
    seqsvr_resp::config::DEFAULT_MAX_CONNECTIONS
}

fn default_max_query_buffer() -> usize {
    seqsvr_resp::config::DEFAULT_MAX_QUERY_BUFFER
}

impl RespSection {
    /// A door on `addr` with every default.
    pub fn on(addr: impl Into<String>) -> RespSection {
        RespSection {
            addr: addr.into(),
            user: None,
            password: None,
            key_prefixes: default_prefixes(),
            bare_uids: true,
            max_bulk: default_max_bulk(),
            max_connections: default_max_connections(),
            max_query_buffer: default_max_query_buffer(),
            spin_us: 0,
        }
    }

    /// What is wrong, if anything: `(key, reason)`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.user.is_some() && self.password.is_none() {
            return Err(("resp.user", "a user needs a password".into()));
        }
        if self.password.as_deref() == Some("") {
            return Err(("resp.password", "empty".into()));
        }
        if !self.bare_uids && self.key_prefixes.is_empty() {
            return Err((
                "resp.key_prefixes",
                "no key form: list a prefix or allow bare uids".into(),
            ));
        }
        if let Some(p) = self
            .key_prefixes
            .iter()
            .find(|p| p.is_empty() || p.ends_with(|c: char| c.is_ascii_digit()) || p.len() > 64)
        {
            return Err((
                "resp.key_prefixes",
                format!("{p:?}: a prefix is 1 to 64 characters and does not end in a digit"),
            ));
        }
        if !(64..=512 * 1024 * 1024).contains(&self.max_bulk) {
            return Err((
                "resp.max_bulk",
                format!("{} is outside 64..=536870912", self.max_bulk),
            ));
        }
        if self.max_connections == 0 {
            return Err(("resp.max_connections", "0".into()));
        }
        if self.max_query_buffer < self.max_bulk + 64 {
            return Err((
                "resp.max_query_buffer",
                format!(
                    "{} leaves no room for one bulk of max_bulk",
                    self.max_query_buffer
                ),
            ));
        }
        if self.spin_us > MAX_SPIN_US {
            return Err((
                "resp.spin_us",
                format!("{} is outside 0..={MAX_SPIN_US}", self.spin_us),
            ));
        }
        Ok(())
    }

    /// The door's settings.
    pub fn door(&self) -> DoorConfig {
        let mut d = DoorConfig {
            auth: self.password.as_ref().map(|p| Credentials {
                user: self.user.clone(),
                password: p.clone(),
            }),
            keys: KeyMap {
                prefixes: self.key_prefixes.clone(),
                bare: self.bare_uids,
            },
            max_connections: self.max_connections,
            max_query_buffer: self.max_query_buffer,
            spin: std::time::Duration::from_micros(self.spin_us),
            ..DoorConfig::default()
        };
        d.limits.max_bulk = self.max_bulk;
        d
    }
}

/// Starts the door on `tcp` in front of `shared`'s allocator; TLS with
/// the client plane's settings when given. Plaintext on an address other
/// hosts can reach needs `insecure`, as on every plane.
pub(super) fn start(
    section: &RespSection,
    tcp: TcpListener,
    tls: Option<&seqsvr_net::ServerTls>,
    insecure: bool,
    front: &Arc<Front>,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, JoinHandle<()>), NodeError> {
    let shared = front.shared();
    let local = tcp
        .local_addr()
        .map_err(|e| NodeError::Runtime(format!("the resp listener: {e}")))?;
    if tls.is_none() && !local.ip().is_loopback() && !insecure {
        return Err(NodeError::Runtime(format!(
            "the resp door on {local} would be plaintext reachable from other hosts: configure [tls] or set insecure = true"
        )));
    }
    let metrics = DoorMetrics::register(&shared.metrics.registry)
        .map_err(|e| NodeError::Runtime(format!("the resp metrics: {e}")))?;
    let backend = Arc::new(AllocBackend {
        front: front.clone(),
    });
    let ctx = Arc::new(seqsvr_resp::Ctx::new(section.door(), metrics, &*backend));
    let acceptor = tls.map(seqsvr_net::ServerTls::acceptor_without_alpn);
    let task = tokio::spawn(seqsvr_resp::serve(tcp, acceptor, backend, ctx, stopped));
    Ok((local, task))
}
