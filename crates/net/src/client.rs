//! Dialing a seqsvr server.
//!
//! Every seqsvr client (IM backends' client library, AllocSvr → store,
//! store → store for Raft, operator tools) dials through [`channel`], so
//! they all get the same transport settings:
//!
//! - **lazy connect**: building the channel does no I/O; the first call
//!   connects, and a broken connection is re-made on the next call. A
//!   process can start before the servers it talks to.
//! - **TCP_NODELAY**: small requests and replies go out at once instead of
//!   waiting for a delayed ACK (~40 ms at the tail otherwise).
//! - **HTTP/2 keepalive** while calls are open: a peer that stops
//!   answering is found within [`KEEPALIVE_INTERVAL`] +
//!   [`KEEPALIVE_TIMEOUT`], so an open call fails fast instead of waiting
//!   out its deadline. No pings go out on an idle connection, which lets
//!   the server's idle timeout close it.
//! - **TLS** when [`ClientTls`] is given: the address is dialed as
//!   `https://`, the server's certificate is checked against the CA and,
//!   if the settings name one ([`ClientTls::expecting`]), for the role the
//!   caller expects of that server; the own certificate is presented if
//!   the settings carry one.

use crate::error::{Error, Result};
use crate::tls::ClientTls;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// How long a connection with open calls may be silent before the client
/// pings it.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// How long the client waits for a ping's answer before dropping the
/// connection.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A lazily connecting channel to `addr` (`host:port`, or a URI whose
/// scheme agrees with `tls`: `https://` with TLS, `http://` without).
pub fn channel(addr: &str, tls: Option<&ClientTls>, connect_timeout: Duration) -> Result<Channel> {
    Ok(endpoint(addr, tls, connect_timeout)?.connect_lazy())
}

/// The endpoint [`channel`] connects with, for callers that set more
/// (a per-call timeout, say) before connecting.
pub fn endpoint(
    addr: &str,
    tls: Option<&ClientTls>,
    connect_timeout: Duration,
) -> Result<Endpoint> {
    let bad = |reason: String| Error::Address {
        addr: addr.to_string(),
        reason,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let uri = match addr.split_once("://") {
        Some((s, _)) if s.eq_ignore_ascii_case(scheme) => addr.to_string(),
        Some((s, _)) => {
            return Err(bad(format!(
                "scheme {s}:// does not match the TLS setting (expected {scheme}://)"
            )));
        }
        None => format!("{scheme}://{addr}"),
    };
    let mut ep = Endpoint::from_shared(uri)
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(false);
    if let Some(tls) = tls {
        ep = tls.apply(ep, addr)?;
    }
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn addresses() {
        let t = Duration::from_secs(1);
        assert_eq!(
            endpoint("127.0.0.1:7101", None, t)
                .unwrap()
                .uri()
                .to_string(),
            "http://127.0.0.1:7101/"
        );
        assert!(endpoint("http://h:1", None, t).is_ok());
        assert!(endpoint("https://h:1", None, t).is_err());
        assert!(endpoint("not an address", None, t).is_err());
        // Lazy: nothing listens there, yet the channel is built.
        channel("127.0.0.1:1", None, t).unwrap();
    }
}
