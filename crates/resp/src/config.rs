//! The door's settings: limits, credentials, keys.

use crate::keys::KeyMap;
use crate::parse::Limits;

/// Who may use the door, when `AUTH` is required.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name (`AUTH user pass`); `None` takes the password alone
    /// (`AUTH pass`) as Redis's `requirepass` does, as user `default`.
    pub user: Option<String>,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"…")
            .finish()
    }
}

impl Credentials {
    /// Whether `user` (the default user when `None`) and `password`
    /// match, in time independent of where they differ.
    pub fn check(&self, user: Option<&[u8]>, password: &[u8]) -> bool {
        let want_user = self.user.as_deref().unwrap_or("default");
        let user_ok = same(user.unwrap_or(b"default"), want_user.as_bytes());
        let pass_ok = same(password, self.password.as_bytes());
        user_ok & pass_ok
    }
}

/// Equal bytes, compared without an early exit.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, &x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    diff == 0
}

/// How a door serves.
#[derive(Debug, Clone)]
pub struct DoorConfig {
    /// The parser's limits.
    pub limits: Limits,
    /// `AUTH` required with these, if set.
    pub auth: Option<Credentials>,
    /// Keys to uids.
    pub keys: KeyMap,
    /// Most connections at once (Redis's `maxclients`).
    pub max_connections: usize,
    /// Most requests answered per round (one read, one write); more
    /// pipelined requests wait for the next round.
    pub max_pipeline: usize,
    /// Most bytes buffered for one connection's unfinished request; past
    /// it the connection is closed, as Redis closes one past its query
    /// buffer limit.
    pub max_query_buffer: usize,
    /// The version `INFO` and `HELLO` report.
    pub version: String,
    /// How long the door's thread keeps polling after a round before it
    /// sleeps (`crate::spin`); zero: it sleeps at once.
    pub spin: std::time::Duration,
}

/// The default `max_connections` (Redis's default `maxclients`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The default `max_pipeline`.
pub const DEFAULT_MAX_PIPELINE: usize = 1024;

/// The default `max_query_buffer`: a few multi-key requests of short
/// keys fit many times over.
pub const DEFAULT_MAX_QUERY_BUFFER: usize = 1024 * 1024;

/// The Redis version announced: the server version clients check their
/// features against (`HELLO`, `COMMAND DOCS`, RESP3 all present).
pub const REDIS_VERSION: &str = "7.2.0";

impl Default for DoorConfig {
    fn default() -> Self {
        DoorConfig {
            limits: Limits::default(),
            auth: None,
            keys: KeyMap::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_pipeline: DEFAULT_MAX_PIPELINE,
            max_query_buffer: DEFAULT_MAX_QUERY_BUFFER,
            version: REDIS_VERSION.to_string(),
            spin: std::time::Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials() {
        let pass = Credentials {
            user: None,
            password: "pw".into(),
        };
        assert!(pass.check(None, b"pw") && pass.check(Some(b"default"), b"pw"));
        assert!(
            !pass.check(None, b"pw2") && !pass.check(Some(b"bob"), b"pw") && !pass.check(None, b"")
        );
        let user = Credentials {
            user: Some("app".into()),
            password: "pw".into(),
        };
        assert!(user.check(Some(b"app"), b"pw") && !user.check(None, b"pw"));
    }
}
