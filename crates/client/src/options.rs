//! How the client dials AllocSvrs (TLS or not) and how patient it is:
//! deadlines, timeouts and backoff.

use std::time::Duration;

pub use seqsvr_net::ClientTls;

use crate::error::{Error, Result};

/// Tuning for a [`SeqClient`](crate::SeqClient). Build it with struct
/// update syntax: `ClientOptions { deadline: …, ..Default::default() }`.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Most time one call may take, retries and route refreshes included
    /// (default 2 s). Past it the call returns its last failure.
    pub deadline: Duration,
    /// Most time to open a TCP connection to an AllocSvr (default 500 ms).
    pub connect_timeout: Duration,
    /// Most time one RPC attempt may take (default 500 ms, and never past
    /// the deadline). Shorter than the deadline so that a paused or cut-off
    /// AllocSvr costs one attempt, not the whole call: the client then
    /// refreshes its routes and finds the section's new owner.
    pub attempt_timeout: Duration,
    /// First pause between retries (default 10 ms); doubles per retry.
    pub initial_backoff: Duration,
    /// Longest pause between retries (default 250 ms).
    pub max_backoff: Duration,
    /// TLS to the AllocSvrs' client plane (default: none, plaintext). The
    /// client plane authenticates the server only, so this is just the CA
    /// that signed the AllocSvrs' certificates:
    /// `Some(ClientTls::server_only(Path::new("ca.pem"))?)`. Seeds are then
    /// dialed as `https://`, and so is every address a route table names.
    pub tls: Option<ClientTls>,
    /// Set only by an AllocSvr that forwards calls for uids it does not
    /// own (its id; default none). Every `Next`, `NextBatch` and `Current`
    /// then carries it as [`FORWARDED_BY`] metadata, and the AllocSvr that
    /// receives it answers from its own memory or with its typed error,
    /// never by forwarding again: a call makes at most one hop
    /// (`docs/architecture/forwarding.md`).
    pub forwarded_by: Option<String>,
}

/// The metadata key that marks a call forwarded by an AllocSvr (its value:
/// the forwarding AllocSvr's id). A receiver never forwards such a call.
/// Anyone may set it; it only ever takes forwarding away from its caller.
pub const FORWARDED_BY: &str = "seqsvr-forwarded-by";

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(2),
            connect_timeout: Duration::from_millis(500),
            attempt_timeout: Duration::from_millis(500),
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(250),
            tls: None,
            forwarded_by: None,
        }
    }
}

impl ClientOptions {
    /// Checks that the options make sense together.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidArgument(m.to_string()));
        if self.deadline.is_zero() {
            return bad("deadline must be positive");
        }
        if self.connect_timeout.is_zero() || self.attempt_timeout.is_zero() {
            return bad("connect_timeout and attempt_timeout must be positive");
        }
        if self.initial_backoff.is_zero() || self.initial_backoff > self.max_backoff {
            return bad("need 0 < initial_backoff <= max_backoff");
        }
        if let Some(id) = &self.forwarded_by {
            if tonic::metadata::MetadataValue::try_from(id.as_str()).is_err() {
                return bad("forwarded_by must be printable ASCII");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates() {
        assert!(ClientOptions::default().validate().is_ok());
        let ms = Duration::from_millis;
        let bad = [
            ClientOptions {
                deadline: ms(0),
                ..Default::default()
            },
            ClientOptions {
                attempt_timeout: ms(0),
                ..Default::default()
            },
            ClientOptions {
                initial_backoff: ms(300),
                max_backoff: ms(200),
                ..Default::default()
            },
        ];
        for o in bad {
            assert!(
                matches!(o.validate(), Err(Error::InvalidArgument(_))),
                "{o:?}"
            );
        }
    }
}
