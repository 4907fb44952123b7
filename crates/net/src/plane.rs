//! The planes a seqsvr process serves.
//!
//! A plane is a listener with its own callers and rules. They are kept
//! apart so that the rules of one cannot leak into another: the client
//! plane is open to anyone who can reach it and so has small messages and
//! no certificate check, while the peer and admin planes change or move
//! state and so take only callers with a client certificate from the
//! cluster's CA.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One of the three planes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Plane {
    /// What IM backends and strangers may call: next, batch, current,
    /// routes, read-only status. TLS is optional and server-authenticated
    /// only.
    Client,
    /// Raft between store replicas; AllocSvr ↔ store (lease renewals,
    /// take-overs, raises); AllocSvr ↔ AllocSvr (adopt). Mutual TLS.
    Peer,
    /// Operator calls (drain, assign, lease configuration, set and
    /// membership changes) and metrics. Mutual TLS.
    Admin,
}

impl Plane {
    /// All planes, in a fixed order.
    pub const ALL: [Plane; 3] = [Plane::Client, Plane::Peer, Plane::Admin];

    /// Whether a TLS listener on this plane demands a client certificate
    /// signed by the cluster's CA.
    pub fn mutual_tls(self) -> bool {
        !matches!(self, Plane::Client)
    }

    /// The plane's name as written in configuration.
    pub fn name(self) -> &'static str {
        match self {
            Plane::Client => "client",
            Plane::Peer => "peer",
            Plane::Admin => "admin",
        }
    }
}

impl fmt::Display for Plane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
