//! The HTTP API when the planes use TLS (real processes): it serves TLS
//! with the client plane's certificate (`docs/clients.md`, HTTP), so a
//! TLS client that trusts the cluster's CA — rustls here, and `curl
//! --cacert` — gets numbers for the AllocSvr's own uids and, forwarded
//! over TLS, for the other AllocSvr's; a client that does not trust the
//! CA fails its handshake; and a plain-HTTP request sent to the TLS port
//! is refused cleanly: the connection is closed at once, with no HTTP
//! answer, no number handed out, and the port serving TLS callers after.
//!
//! The `curl` part prints why and is skipped without curl, unless `CI`
//! is set, where it fails (`.ci/run` installs curl).

use std::sync::Arc;
use std::time::{Duration, Instant};

use attack::{Cluster, Options};
use seqsvr_testkit::{attack, Bins};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// A uid of alloc-1's sections (0–3) and one of alloc-2's (4–7).
const OWN: u64 = 1_005;
const FORWARDED: u64 = 6_005;

/// A rustls client trusting the CA in `ca`, speaking HTTP/1.1.
fn connector(ca: &std::path::Path) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// Sends `req` over TLS to `addr`; returns (status, body), or the
/// handshake's error.
async fn https(
    tls: &tokio_rustls::TlsConnector,
    addr: &str,
    req: &str,
) -> Result<(u16, String), std::io::Error> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut s = tls.connect(name, tcp).await?;
    s.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    // The server closes after answering (`Connection: close`); a TLS
    // peer that closes without close_notify is still an answer here.
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    let (status, _, body) = seqsvr_testkit::node::http_answer(&out);
    Ok((status, body))
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
}

/// `GET /v1/{op}/{uid}` over TLS: the number.
async fn number(tls: &tokio_rustls::TlsConnector, addr: &str, op: &str, uid: u64) -> u64 {
    let (st, body) = https(tls, addr, &get(&format!("/v1/{op}/{uid}")))
        .await
        .unwrap();
    assert_eq!(st, 200, "{op} {uid}: {body}");
    body.trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_serves_tls_and_refuses_plain_http_cleanly() {
    let cluster = Cluster::start(
        BINS,
        Options {
            tls: true,
            ..Default::default()
        },
    )
    .await;
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let pki = cluster.pki.as_ref().unwrap();
    let http = cluster.allocs[0].http.clone().unwrap();
    let tls = connector(&pki.ca_path());

    // Own and forwarded uids, next then current then next again.
    for uid in [OWN, FORWARDED] {
        let first = number(&tls, &http, "next", uid).await;
        assert_eq!(number(&tls, &http, "current", uid).await, first);
        let second = number(&tls, &http, "next", uid).await;
        assert!(second > first, "uid {uid}: {second} after {first}");
    }
    let body = format!(r#"{{"uids":[{OWN},{FORWARDED}]}}"#);
    let req = format!(
        "POST /v1/next-batch HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let (st, out) = https(&tls, &http, &req).await.unwrap();
    assert!(st == 200 && out.starts_with(r#"{"seqs":["#), "{st} {out}");

    // Another CA's client: the handshake fails, nothing is asked.
    let rogue = connector(&cluster.rogue.as_ref().unwrap().ca_path());
    let r = https(&rogue, &http, &get(&format!("/v1/next/{OWN}"))).await;
    assert!(r.is_err(), "a client not trusting the CA got {r:?}");

    // Plain HTTP to the TLS port: closed at once, no HTTP answer, no
    // number handed out.
    let before = number(&tls, &http, "current", OWN).await;
    let t0 = Instant::now();
    let mut s = TcpStream::connect(&http).await.unwrap();
    s.write_all(get(&format!("/v1/next/{OWN}")).as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out)).await;
    assert!(
        read.is_ok(),
        "a plain-HTTP request to the TLS port was left hanging"
    );
    let text = String::from_utf8_lossy(&out);
    assert!(
        !text.contains("HTTP/1."),
        "a plain-HTTP request got an HTTP answer: {text}"
    );
    println!(
        "plain HTTP to the TLS port: closed after {:?} with {} bytes",
        t0.elapsed(),
        out.len()
    );
    assert_eq!(
        number(&tls, &http, "current", OWN).await,
        before,
        "a refused request handed out a number"
    );
    assert!(number(&tls, &http, "next", OWN).await > before);

    curl_over_tls(&http, &pki.ca_path());
}

/// `curl --cacert` gets a number; `curl` without it (the system's CAs)
/// refuses the server.
fn curl_over_tls(http: &str, ca: &std::path::Path) {
    let have = std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(
            !ci,
            "curl is not installed; CI is set, so this is a failure"
        );
        return eprintln!("skipped the curl part: curl is not installed");
    }
    let port = http.rsplit_once(':').unwrap().1;
    let url = format!("https://localhost:{port}/v1/next/{FORWARDED}");
    let curl = |args: &[&str]| {
        std::process::Command::new("curl")
            .args(["-s", "--max-time", "5"])
            .args(args)
            .output()
            .unwrap()
    };
    let ok = curl(&["--cacert", &ca.display().to_string(), &url]);
    let text = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success() && text.trim().parse::<u64>().is_ok(),
        "curl --cacert: {text} {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let untrusted = curl(&[&url]);
    assert!(
        !untrusted.status.success(),
        "curl trusted a server of the cluster's own CA without --cacert"
    );
}
