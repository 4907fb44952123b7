//! Whether anything listens at the addresses `seqctl` was given, asked in
//! well under a second before a command's calls (which retry for seconds
//! and, against nothing, would end blaming a leader): a refused or silent
//! TCP connect at every address is "nothing listens at …", naming the
//! addresses, where they came from and how to give others.

use std::time::Duration;

use super::settings::Origin;
use crate::error::Error;

/// How long one TCP connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(400);

/// The addresses of `addrs` at which a TCP connection is accepted within
/// [`CONNECT_TIMEOUT`] (all tried at once).
pub async fn listening(addrs: &[String]) -> Vec<String> {
    let tries = addrs.iter().map(|a| async move {
        let connect = tokio::net::TcpStream::connect(a.as_str());
        matches!(
            tokio::time::timeout(CONNECT_TIMEOUT, connect).await,
            Ok(Ok(_))
        )
        .then(|| a.clone())
    });
    futures::future::join_all(tries)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// What the addresses are, for messages, and the flag and variable that
/// give them.
#[derive(Debug, Clone, Copy)]
pub struct Role {
    /// `the store replicas' client planes`.
    pub what: &'static str,
    /// `--store`.
    pub flag: &'static str,
    /// `SEQCTL_STORE`.
    pub var: &'static str,
}

/// The store replicas' client planes.
pub const STORE: Role = Role {
    what: "the store replicas' client planes",
    flag: "--store",
    var: "SEQCTL_STORE",
};
/// The AllocSvrs' client planes.
pub const ALLOC: Role = Role {
    what: "the AllocSvrs' client planes",
    flag: "--alloc",
    var: "SEQCTL_ALLOC",
};

/// The error for nothing listening at any of `addrs` (`role`, from
/// `origin`).
pub fn nothing_listens(addrs: &[String], role: Role, origin: &Origin) -> Error {
    let hint = match origin {
        Origin::Dev => format!(
            "is `seqsvr dev` running (with another --port-base, give seqctl the same)? For \
             another cluster give {} or {}, or a profile (--profile)",
            role.flag, role.var
        ),
        _ => format!(
            "is the cluster running there? Other addresses: {} or {}, or a profile \
             (--profile)",
            role.flag, role.var
        ),
    };
    Error::Failed(format!(
        "nothing listens at {} ({}, {origin}): {hint}",
        addrs.join(", "),
        role.what
    ))
}

/// Fails with [`nothing_listens`] unless something listens at one of
/// `addrs` at least.
pub async fn need_listener(addrs: &[String], role: Role, origin: &Origin) -> Result<(), Error> {
    if listening(addrs).await.is_empty() {
        return Err(nothing_listens(addrs, role, origin));
    }
    Ok(())
}

/// A sentence for a failure that is a TLS mismatch, from its message
/// `text` and whether seqctl dialed with TLS; `None` for anything else.
///
/// What the libraries say for each (their words, not ours, so matched
/// here): a plaintext client at a TLS server gets `h2 protocol error` (the
/// server's TLS bytes are not HTTP/2); a TLS client at a plaintext server
/// gets `corrupt message of type InvalidContentType` (its HTTP/2 bytes are
/// not TLS); a certificate from another CA is an `invalid peer
/// certificate`.
pub fn tls_sentence(text: &str, tls: bool) -> Option<String> {
    const GIVE_CA: &str =
        "give the cluster's CA certificate with --ca (or SEQCTL_CA, or ca in a profile)";
    if !tls && (text.contains("h2 protocol error") || text.contains("frame with invalid size")) {
        return Some(format!(
            "the server did not answer in plaintext HTTP/2: it most likely speaks TLS, and \
             seqctl dialed without it; {GIVE_CA}"
        ));
    }
    if tls && (text.contains("InvalidContentType") || text.contains("corrupt message")) {
        return Some(
            "seqctl dialed with TLS but the server answered in plaintext: drop --ca (and \
             SEQCTL_CA, or ca in the profile), or turn TLS on at the server"
                .into(),
        );
    }
    if tls && text.contains("invalid peer certificate") {
        let why = text
            .split("invalid peer certificate: ")
            .nth(1)
            .and_then(|r| r.split([';', ' ', ',']).next())
            .unwrap_or("");
        return Some(match why {
            "UnknownIssuer" | "BadSignature" => format!(
                "the server's certificate is not signed by the CA seqctl was given: it belongs \
                 to another cluster's PKI; {GIVE_CA}"
            ),
            "Expired" | "NotValidYet" => {
                "the server's certificate is outside its validity period: renew it".into()
            }
            _ => format!(
                "seqctl refused the server's certificate ({why}): check --ca and the \
                 server's certificate"
            ),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages seen from each mismatch, against real servers.
    #[test]
    fn tls_mismatches_become_sentences() {
        let plain_to_tls = "internal: Internal: h2 protocol error: http2 error";
        let s = tls_sentence(plain_to_tls, false).unwrap();
        assert!(s.contains("speaks TLS") && s.contains("--ca"), "{s}");
        assert_eq!(tls_sentence(plain_to_tls, true), None);
        let tls_to_plain = "no store leader available: received corrupt message of type \
                            InvalidContentType";
        let s = tls_sentence(tls_to_plain, true).unwrap();
        assert!(s.contains("answered in plaintext"), "{s}");
        assert_eq!(tls_sentence(tls_to_plain, false), None);
        for why in ["BadSignature", "UnknownIssuer"] {
            let wrong_ca = format!(
                "transport: no seed answered with a route table: 127.0.0.1:23101: Unavailable: \
                 invalid peer certificate: {why}; 127.0.0.1:23102: Unavailable: invalid peer \
                 certificate: {why}"
            );
            let s = tls_sentence(&wrong_ca, true).unwrap();
            assert!(s.contains("not signed by the CA seqctl was given"), "{s}");
        }
        let s = tls_sentence("invalid peer certificate: NotValidForName", true).unwrap();
        assert!(s.contains("(NotValidForName)"), "{s}");
        assert_eq!(
            tls_sentence("no store leader available: election", true),
            None
        );
    }

    #[tokio::test]
    async fn nothing_listening_is_told_at_once_naming_the_addresses() {
        let free = || {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let addrs = vec![free(), free()];
        let started = std::time::Instant::now();
        let e = need_listener(&addrs, STORE, &Origin::Dev)
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "nothing listens at {}, {} (the store replicas' client planes, the dev \
                 cluster's defaults): is `seqsvr dev` running",
                addrs[0], addrs[1]
            )),
            "{msg}"
        );
        // One listener among them is enough to go on.
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let some = vec![addrs[0].clone(), held.local_addr().unwrap().to_string()];
        assert!(need_listener(&some, ALLOC, &Origin::Env("SEQCTL_ALLOC"))
            .await
            .is_ok());
        let msg = nothing_listens(&addrs[..1], ALLOC, &Origin::Env("SEQCTL_ALLOC")).to_string();
        assert!(
            msg.contains(
                "(the AllocSvrs' client planes, from SEQCTL_ALLOC): is the cluster running there?"
            ),
            "{msg}"
        );
    }
}
