//! How a new TCP connection becomes the stream HTTP/2 runs on: at once
//! (plaintext) or after a TLS handshake, and which finished connections a
//! plane admits. The pool the handshakes wait in is `conn.rs`'s.

use std::future::Future;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::Connected;

use crate::plane::Plane;
use crate::role::Role;

/// How a new TCP connection becomes the stream HTTP/2 runs on.
pub(crate) trait Handshake: Send + Unpin + 'static {
    type Io: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static;

    /// Whether [`start`](Handshake::start) runs a handshake (the
    /// connection then waits in the handshake pool) or is done at once.
    const RUNS: bool;

    fn start(&self, tcp: TcpStream) -> Started<Self::Io>;

    /// Whether a connection whose handshake is done may be served on
    /// `plane`: on the peer and admin planes, its certificate must name a
    /// seqsvr role.
    fn admissible(_io: &Self::Io, _plane: Plane) -> Result<(), crate::Error> {
        Ok(())
    }

    /// Turns away a connection over the cap; dropping it closes it.
    fn refuse(&self, io: Self::Io) {
        drop(io);
    }
}

pub(crate) enum Started<Io> {
    Done(Io),
    Running(Pin<Box<dyn Future<Output = io::Result<Io>> + Send>>),
}

/// Plaintext: the TCP stream itself.
pub(crate) struct Plain;

impl Handshake for Plain {
    type Io = TcpStream;
    const RUNS: bool = false;

    fn start(&self, tcp: TcpStream) -> Started<TcpStream> {
        Started::Done(tcp)
    }

    /// Says why before closing: a GOAWAY refusing every stream. A client
    /// whose call is already on the connection reports it `UNAVAILABLE`
    /// (refused, safe to retry); one whose call is not yet sent sees a
    /// closed connection (tonic: `CANCELLED`). The write goes to an empty
    /// socket buffer and does not block; if it cannot be made at once the
    /// connection is closed all the same.
    fn refuse(&self, tcp: TcpStream) {
        let _ = tcp.try_write(GOAWAY_REFUSED);
        // Unread bytes would turn the close into a reset, which can
        // discard the GOAWAY before the client reads it.
        let mut sink = [0u8; 512];
        while matches!(tcp.try_read(&mut sink), Ok(n) if n > 0) {}
        drop(tcp);
    }
}

/// A server preface (empty SETTINGS) and a GOAWAY (last stream 0,
/// REFUSED_STREAM) saying why.
const GOAWAY_REFUSED: &[u8] = b"\0\0\0\x04\0\0\0\0\0\
    \0\0\x20\x07\0\0\0\0\0\
    \0\0\0\0\0\0\0\x07\
    connection limit reached";

/// TLS. The stream's connect info is tonic's `TlsConnectInfo`, so
/// `Request::peer_certs()` and `remote_addr()` work as with tonic's own
/// TLS.
pub(crate) struct Tls(pub(crate) TlsAcceptor);

impl Handshake for Tls {
    type Io = TlsStream<TcpStream>;
    const RUNS: bool = true;

    fn start(&self, tcp: TcpStream) -> Started<Self::Io> {
        Started::Running(Box::pin(self.0.accept(tcp)))
    }

    fn admissible(io: &Self::Io, plane: Plane) -> Result<(), crate::Error> {
        if !plane.mutual_tls() {
            return Ok(());
        }
        match io.get_ref().1.peer_certificates().and_then(|c| c.first()) {
            Some(c) => Role::from_cert_der(c).map(drop),
            None => Err(crate::Error::NoRole),
        }
    }
}
