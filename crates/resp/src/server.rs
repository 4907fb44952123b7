//! The door's listener: accepts connections (TLS if given), reads
//! requests, answers them in rounds.
//!
//! A round is one read's worth of complete requests (at most
//! `max_pipeline`), answered in order with one write: a client's pipeline
//! costs one backend batch per run of `INCR`s and one write per round,
//! not one per command. Memory per connection is bounded: the read buffer
//! by `max_query_buffer` (past it the connection is closed, as Redis
//! closes one past its query buffer limit), the replies of a round by
//! `max_pipeline` and the per-command caps.

use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::backend::Backend;
use crate::conn::{Conn, Ctx};
use crate::parse::{Parsed, Parser};
use crate::reply::Reply;
use crate::spin::Spinner;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the door on `listener` until `shutdown` resolves: every
/// connection on a task of its own (TLS first if `tls` is given), and the
/// spinner if `spin` is configured (`crate::spin`).
pub async fn serve<B: Backend>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    backend: Arc<B>,
    ctx: Arc<Ctx>,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let _spinner = Spinner::start(&ctx.activity, ctx.cfg.spin);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors and the like: wait, do not spin.
                    tracing::warn!("resp accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        ctx.stats.accepted.fetch_add(1, Relaxed);
        ctx.metrics.accepted.inc();
        let (backend, ctx, tls) = (backend.clone(), ctx.clone(), tls.clone());
        tokio::spawn(async move {
            let open = Open::new(&ctx);
            // Each connection's state on the heap (`Box::pin`): the task
            // itself stays small, so spawning and ending it copy a few
            // bytes, not the TLS branch's kilobytes.
            match tls {
                None => Box::pin(connection(tcp, backend, &ctx, open)).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, Box::pin(acceptor.accept(tcp)))
                        .await
                    {
                        Ok(Ok(stream)) => Box::pin(connection(stream, backend, &ctx, open)).await,
                        Ok(Err(e)) => tracing::debug!(%peer, "resp TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "resp TLS handshake timed out"),
                    }
                }
            }
        });
    }
}

/// Counts a connection open for as long as it lives.
struct Open<'a>(&'a Ctx);

impl<'a> Open<'a> {
    fn new(ctx: &'a Ctx) -> Open<'a> {
        ctx.stats.open.fetch_add(1, Relaxed);
        ctx.metrics.open.inc();
        Open(ctx)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.stats.open.fetch_sub(1, Relaxed);
        self.0.metrics.open.dec();
    }
}

/// Serves one connection until it closes, errs, or breaks the protocol.
async fn connection<S, B>(mut stream: S, backend: Arc<B>, ctx: &Arc<Ctx>, _open: Open<'_>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    B: Backend,
{
    let cfg = &ctx.cfg;
    if ctx.stats.open.load(Relaxed) > cfg.max_connections {
        ctx.metrics
            .dropped
            .with_label_values(&["max_connections"])
            .inc();
        let mut out = BytesMut::new();
        Reply::err("max number of clients reached").encode(crate::reply::Proto::Resp2, &mut out);
        let _ = stream.write_all(&out).await;
        return;
    }
    let mut conn = Conn::new(backend, ctx.clone());
    let mut parser = Parser::new();
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut out = BytesMut::with_capacity(16 * 1024);
    // A round's requests, kept between rounds (no allocation per round).
    let mut reqs = Vec::new();
    loop {
        let mut broken = None;
        while reqs.len() < cfg.max_pipeline {
            match parser.next(&mut buf, &cfg.limits, conn.session.authed) {
                Ok(Parsed::Request(r)) => reqs.push(r),
                Ok(Parsed::Nothing) => {}
                Ok(Parsed::Incomplete) => break,
                Err(e) => {
                    broken = Some(e);
                    break;
                }
            }
        }
        if reqs.is_empty() && broken.is_none() {
            if buf.len() > cfg.max_query_buffer {
                ctx.metrics
                    .dropped
                    .with_label_values(&["max_query_buffer"])
                    .inc();
                tracing::debug!(
                    "resp connection closed: query buffer over {} bytes",
                    cfg.max_query_buffer
                );
                return;
            }
            buf.reserve(16 * 1024);
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
        out.clear();
        conn.answer(reqs.drain(..), &mut out).await;
        if let Some(e) = &broken {
            // Redis answers a protocol error and closes the connection.
            ctx.metrics.errors.with_label_values(&["protocol"]).inc();
            Reply::err(e).encode(conn.session.proto, &mut out);
        }
        if stream.write_all(&out).await.is_err() {
            return;
        }
        if !cfg.spin.is_zero() {
            ctx.activity.round();
        }
        if broken.is_some() || conn.session.close {
            let _ = stream.shutdown().await;
            return;
        }
        if out.capacity() > 1024 * 1024 {
            out = BytesMut::with_capacity(16 * 1024);
        }
    }
}
