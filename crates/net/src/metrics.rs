//! The metrics listener: Prometheus' text format over plain HTTP/1.1,
//! `GET /metrics` only.
//!
//! Prometheus scrapes over HTTP/1.1, which the gRPC planes do not speak, so
//! metrics get a listener of their own. It is read-only and bounded: at
//! most [`MAX_CONNECTIONS`] scrapes at once, a request head of at most
//! [`MAX_REQUEST`] bytes read within [`READ_TIMEOUT`], one response per
//! connection. Like every plaintext listener it refuses a non-loopback
//! address unless the caller says `insecure` (metrics reveal load and
//! topology, nothing that changes state).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::error::{Error, Result};
use crate::plane::Plane;

/// Scrapes served at once; more wait for a slot.
pub const MAX_CONNECTIONS: usize = 16;
/// Largest request head read.
pub const MAX_REQUEST: usize = 8 * 1024;
/// Time a scraper has to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Renders the current metrics in Prometheus' text format.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves `render` on `tcp` until the task is dropped. Refuses a
/// non-loopback address unless `insecure`.
pub async fn serve(tcp: TcpListener, render: Render, insecure: bool) -> Result<()> {
    let local = tcp.local_addr().map_err(Error::Listener)?;
    check_exposure(local, insecure)?;
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return Ok(());
        };
        let (sock, _) = match tcp.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("metrics accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let render = render.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = answer(sock, &render).await {
                tracing::debug!("metrics scrape: {e}");
            }
        });
    }
}

fn check_exposure(local: SocketAddr, insecure: bool) -> Result<()> {
    if !local.ip().is_loopback() && !insecure {
        return Err(Error::PlaintextExposed {
            plane: Plane::Admin,
            addr: local,
        });
    }
    Ok(())
}

async fn answer(mut sock: TcpStream, render: &Render) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut len = 0;
    let head = tokio::time::timeout(READ_TIMEOUT, async {
        loop {
            let n = sock.read(&mut buf[len..]).await?;
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            len += n;
            if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(true);
            }
            if len == buf.len() {
                return Ok(false);
            }
        }
    })
    .await;
    let complete = matches!(head, Ok(Ok(true)));
    let (status, body) = if !complete {
        ("400 Bad Request", String::from("bad request\n"))
    } else if buf[..len].starts_with(b"GET /metrics ") || buf[..len].starts_with(b"GET /metrics?") {
        ("200 OK", render())
    } else {
        (
            "404 Not Found",
            String::from("only GET /metrics is served\n"),
        )
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await?;
    sock.write_all(body.as_bytes()).await?;
    sock.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(req).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_and_nothing_else() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let render: Render = Arc::new(|| "seqsvr_up 1\n".to_string());
        tokio::spawn(serve(tcp, render, false));
        let ok = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(ok.ends_with("seqsvr_up 1\n"));
        let nf = get(addr, b"GET / HTTP/1.1\r\n\r\n").await;
        assert!(nf.starts_with("HTTP/1.1 404"), "{nf}");
        let bad = get(addr, &[b'x'; MAX_REQUEST + 10]).await;
        assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    }

    #[test]
    fn refuses_exposed_plaintext_unless_insecure() {
        let a: SocketAddr = "10.1.2.3:9100".parse().unwrap();
        assert!(check_exposure(a, false).is_err());
        assert!(check_exposure(a, true).is_ok());
        assert!(check_exposure("127.0.0.1:9100".parse().unwrap(), false).is_ok());
    }
}
