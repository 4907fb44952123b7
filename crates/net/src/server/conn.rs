//! Accepting connections: the handshake pool, the connection cap,
//! TCP_NODELAY, the TLS handshake, and the handshake and idle timeouts.
//!
//! [`Incoming`] is the stream of connections handed to tonic. It accepts
//! from the listener, runs the TLS handshake (if any) in its own task so a
//! slow client cannot hold up the accept loop, then takes a slot under the
//! cap and yields the connection wrapped in a [`Conn`].
//!
//! # Handshakes do not hold slots under the cap
//!
//! Anyone who can reach the port can open a TCP connection and say
//! nothing. If such connections counted under `max_connections`, a
//! stranger holding the cap full would lock every legitimate caller out
//! (an AllocSvr that reconnects would lose its lease). So a connection
//! still in its TLS handshake holds a place in a separate pool,
//! `max_handshakes` per listener and `max_handshakes_per_source` per
//! source (an IPv4 address or an IPv6 /64), for at most
//! `handshake_timeout`; it takes a slot under `max_connections` only once
//! its handshake is done and, on the peer and admin planes, its
//! certificate names a seqsvr role. A connection over either handshake
//! bound is closed at once. Plaintext connections have no handshake and
//! take their slot at accept (plaintext is for loopback, or explicitly
//! insecure setups).
//!
//! # Connection cap: accept, then close at once
//!
//! A connection over `max_connections` is accepted and closed straight
//! away (on plaintext listeners after an HTTP/2 GOAWAY saying why) rather
//! than left in the kernel's accept queue. Left queued, it
//! would look connected to the client, which would send its requests and
//! wait out its own deadline for an answer that may never come; closed,
//! the client sees a failed connection at once and can back off or try
//! another server. Accepting keeps the queue short too, so when a slot
//! frees the next client is served without waiting behind stale ones.
//!
//! # Timeouts without per-call work
//!
//! [`Conn`] sits between tonic's HTTP/2 server and the (TLS) stream. It
//! owns one timer per connection, armed first for the handshake deadline
//! (TLS done and the 24-byte HTTP/2 preface read) and then for the idle
//! deadline. Reads only set a flag when they carry a request frame; when
//! the timer fires, a connection used since it was armed gets another
//! idle period, so a busy connection costs no clock read and no timer
//! update per socket read (each is a measurable share of a call that
//! costs tens of microseconds), and an unused one is closed between one
//! and two idle periods after its last request frame. When a deadline
//! passes, the connection's next read or stalled write fails and tonic
//! drops it.
//!
//! Idle is judged from HTTP/2 frame headers, which is why the listener
//! runs TLS itself (below this layer tonic would see only ciphertext):
//! HEADERS, DATA, CONTINUATION and RST_STREAM frames from the peer count
//! as use, PING, SETTINGS, WINDOW_UPDATE, PRIORITY and GOAWAY do not.
//! Keepalive pings therefore do not keep an unused connection open.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tokio_stream::Stream;
use tonic::transport::server::Connected;

use super::handshake::{Handshake, Started};
use super::size::Unfinished;
use crate::plane::Plane;

/// What [`Incoming`] needs of the plane's limits.
#[derive(Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) handshake: Duration,
    pub(crate) idle: Duration,
}

/// A listener's connection counts, for metrics and tests. Cloning shares
/// them.
#[derive(Clone, Debug)]
pub struct Connections {
    slots: Arc<Semaphore>,
    max: usize,
    counters: Arc<Counters>,
    handshakes: Arc<Handshakes>,
    pub(crate) unfinished: &'static Unfinished,
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    refused_handshakes: AtomicU64,
}

/// Connections in their handshake: how many, and how many per source.
#[derive(Debug)]
struct Handshakes {
    max: usize,
    per_source: usize,
    running: Mutex<Running>,
}

#[derive(Debug, Default)]
struct Running {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
}

/// The source a connection's handshakes count against: its IPv4 address
/// (an IPv4-mapped IPv6 address is one), or its IPv6 /64, since one host
/// is usually given a whole /64.
fn source(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

/// A place in the handshake pool; given back when dropped.
struct HandshakePlace {
    pool: Arc<Handshakes>,
    source: IpAddr,
}

impl Handshakes {
    fn enter(pool: &Arc<Handshakes>, ip: IpAddr) -> Option<HandshakePlace> {
        let source = source(ip);
        let mut r = pool.running.lock().unwrap_or_else(|e| e.into_inner());
        if r.total >= pool.max {
            return None;
        }
        let n = r.by_source.entry(source).or_insert(0);
        if *n >= pool.per_source {
            return None;
        }
        *n += 1;
        r.total += 1;
        Some(HandshakePlace {
            pool: pool.clone(),
            source,
        })
    }
}

impl Drop for HandshakePlace {
    fn drop(&mut self) {
        let mut r = self.pool.running.lock().unwrap_or_else(|e| e.into_inner());
        r.total -= 1;
        if let Some(n) = r.by_source.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                r.by_source.remove(&self.source);
            }
        }
    }
}

impl Connections {
    pub(crate) fn new(
        max: usize,
        max_handshakes: usize,
        per_source: usize,
        unfinished: &'static Unfinished,
    ) -> Connections {
        Connections {
            slots: Arc::new(Semaphore::new(max)),
            max,
            counters: Arc::default(),
            handshakes: Arc::new(Handshakes {
                max: max_handshakes,
                per_source,
                running: Mutex::default(),
            }),
            unfinished,
        }
    }

    /// Bytes announced by request messages begun and not yet complete, over
    /// all connections (see `max_unfinished_bytes`).
    pub fn unfinished_bytes(&self) -> usize {
        self.unfinished.held()
    }

    /// Connections served now: handshake done, holding a slot under the
    /// cap.
    pub fn open(&self) -> usize {
        self.max - self.slots.available_permits()
    }

    /// Connections in their TLS handshake now (they hold no slot under the
    /// cap).
    pub fn handshaking(&self) -> usize {
        self.handshakes
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .total
    }

    /// New connections closed at once because the handshake pool, or
    /// their source's share of it, was full.
    pub fn refused_handshakes(&self) -> u64 {
        self.counters.refused_handshakes.load(Ordering::Relaxed)
    }

    /// The cap on open connections.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections given a slot under the cap since the listener started.
    pub fn accepted(&self) -> u64 {
        self.counters.accepted.load(Ordering::Relaxed)
    }

    /// Connections closed at once because the cap was reached (after their
    /// handshake, if any), or whose certificate named no role.
    pub fn refused(&self) -> u64 {
        self.counters.refused.load(Ordering::Relaxed)
    }
}

/// The connections of one listener (see the module doc).
pub(crate) struct Incoming<H: Handshake> {
    tcp: TcpListener,
    handshake: H,
    plane: Plane,
    conns: Connections,
    timeouts: Timeouts,
    handshakes: JoinSet<Option<(H::Io, SocketAddr, Instant)>>,
    /// Set after an accept error that is not about one connection (out of
    /// file descriptors, say): accepting again at once would spin.
    pause: Option<Pin<Box<Sleep>>>,
    refused: u64,
    last_refusal_warning: Option<Instant>,
}

/// Accept errors that concern one connection only; the next accept is
/// fine.
fn per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
    )
}

/// At most one warning per this much time about refused connections.
const REFUSAL_WARNING_EVERY: Duration = Duration::from_secs(10);
/// Back-off after an accept error that is not about one connection.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// Connections taken per poll before yielding to other tasks.
const ACCEPT_BUDGET: usize = 64;

impl<H: Handshake> Incoming<H> {
    pub(crate) fn new(
        tcp: TcpListener,
        handshake: H,
        plane: Plane,
        conns: Connections,
        timeouts: Timeouts,
    ) -> Self {
        Incoming {
            tcp,
            handshake,
            plane,
            conns,
            timeouts,
            handshakes: JoinSet::new(),
            pause: None,
            refused: 0,
            last_refusal_warning: None,
        }
    }

    /// Starts the handshake in the handshake pool, or, with none to run,
    /// gives the connection its slot at once.
    fn admit(&mut self, tcp: TcpStream, peer: SocketAddr) -> Option<Conn<H::Io>> {
        // Small replies must not wait for a delayed ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, "TCP_NODELAY: {e}");
        }
        let place = if H::RUNS {
            match Handshakes::enter(&self.conns.handshakes, peer.ip()) {
                Some(p) => Some(p),
                None => {
                    self.conns
                        .counters
                        .refused_handshakes
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, plane = %self.plane, "too many handshakes: closed");
                    drop(tcp);
                    return None;
                }
            }
        } else {
            None
        };
        let deadline = Instant::now() + self.timeouts.handshake;
        match self.handshake.start(tcp) {
            Started::Done(io) => self.seat(io, peer, deadline),
            Started::Running(handshake) => {
                let plane = self.plane;
                let counters = self.conns.counters.clone();
                self.handshakes.spawn(async move {
                    let done = tokio::time::timeout_at(deadline, handshake).await;
                    drop(place);
                    match done {
                        Ok(Ok(io)) => match H::admissible(&io, plane) {
                            Ok(()) => Some((io, peer, deadline)),
                            Err(e) => {
                                // A certificate from the cluster's CA, so
                                // a mistake in issuing it: worth a warning.
                                counters.refused.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!(%peer, %plane, "connection closed: {e}");
                                None
                            }
                        },
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, %plane, "TLS handshake failed: {e}");
                            None
                        }
                        Err(_) => {
                            tracing::debug!(%peer, %plane, "TLS handshake timed out");
                            None
                        }
                    }
                });
                None
            }
        }
    }

    /// Gives a connection whose handshake is done its slot under the cap,
    /// or turns it away.
    fn seat(&mut self, io: H::Io, peer: SocketAddr, deadline: Instant) -> Option<Conn<H::Io>> {
        let Ok(slot) = self.conns.slots.clone().try_acquire_owned() else {
            self.conns.counters.refused.fetch_add(1, Ordering::Relaxed);
            self.warn_refused(peer);
            self.handshake.refuse(io);
            return None;
        };
        self.conns.counters.accepted.fetch_add(1, Ordering::Relaxed);
        Some(Conn::new(io, slot, deadline, self.timeouts.idle))
    }

    fn warn_refused(&mut self, peer: SocketAddr) {
        self.refused += 1;
        let now = Instant::now();
        let due = self
            .last_refusal_warning
            .is_none_or(|t| now.duration_since(t) >= REFUSAL_WARNING_EVERY);
        if due {
            tracing::warn!(
                plane = %self.plane,
                max_connections = self.conns.max,
                refused = self.refused,
                last = %peer,
                "connection limit reached: closing new connections at once"
            );
            self.last_refusal_warning = Some(now);
            self.refused = 0;
        } else {
            tracing::debug!(%peer, plane = %self.plane, "connection refused: limit reached");
        }
    }
}

impl<H: Handshake> Stream for Incoming<H> {
    type Item = io::Result<Conn<H::Io>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let mut budget = ACCEPT_BUDGET;
        loop {
            // Polled on every turn, so a handshake started below is
            // watched before this returns `Pending`.
            match this.handshakes.poll_join_next(cx) {
                Poll::Ready(Some(Ok(Some((io, peer, deadline))))) => {
                    if let Some(conn) = this.seat(io, peer, deadline) {
                        return Poll::Ready(Some(Ok(conn)));
                    }
                    continue;
                }
                Poll::Ready(Some(Ok(None))) => continue,
                Poll::Ready(Some(Err(e))) => {
                    tracing::debug!("handshake task: {e}");
                    continue;
                }
                Poll::Ready(None) | Poll::Pending => {}
            }
            if let Some(pause) = &mut this.pause {
                if pause.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.pause = None;
            }
            if budget == 0 {
                // Connections keep coming: let other tasks run.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            budget -= 1;
            match this.tcp.poll_accept(cx) {
                Poll::Ready(Ok((tcp, peer))) => {
                    if let Some(conn) = this.admit(tcp, peer) {
                        return Poll::Ready(Some(Ok(conn)));
                    }
                }
                Poll::Ready(Err(e)) if per_connection(&e) => {}
                Poll::Ready(Err(e)) => {
                    tracing::warn!(plane = %this.plane, "accept failed: {e}; pausing");
                    this.pause = Some(Box::pin(tokio::time::sleep(ACCEPT_ERROR_PAUSE)));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// One accepted connection: the stream, its slot under the cap, and its
/// handshake and idle deadlines (see the module doc).
pub(crate) struct Conn<IO> {
    io: IO,
    _slot: OwnedSemaphorePermit,
    watch: Watch,
}

impl<IO> Conn<IO> {
    fn new(
        io: IO,
        slot: OwnedSemaphorePermit,
        handshake_deadline: Instant,
        idle: Duration,
    ) -> Self {
        Conn {
            io,
            _slot: slot,
            watch: Watch {
                timer: Box::pin(tokio::time::sleep_until(handshake_deadline)),
                armed_for: None,
                handshake_deadline: Some(handshake_deadline),
                idle,
                used: false,
                frames: Frames::default(),
            },
        }
    }
}

impl<IO: Connected> Connected for Conn<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

struct Watch {
    timer: Pin<Box<Sleep>>,
    /// The waker the timer was last polled with, if it has not been reset
    /// since: while the connection's task polls with the same waker and
    /// the timer has not fired, there is no need to poll it again.
    armed_for: Option<Waker>,
    /// Set until the HTTP/2 preface has been read.
    handshake_deadline: Option<Instant>,
    idle: Duration,
    /// Whether the peer sent a request frame since the timer was armed.
    used: bool,
    frames: Frames,
}

impl Watch {
    fn on_read(&mut self, data: &[u8]) {
        let (preface_done, used) = self.frames.feed(data);
        if preface_done {
            // The idle deadline may come before the handshake deadline the
            // timer is armed for; everywhere else it only moves later, so
            // this is the one eager re-arm.
            self.handshake_deadline = None;
            self.used = false;
            self.reset(Instant::now() + self.idle);
        } else if used {
            self.used = true;
        }
    }

    fn reset(&mut self, deadline: Instant) {
        self.timer.as_mut().reset(deadline);
        self.armed_for = None;
    }

    /// Whether the current deadline has passed; otherwise makes sure the
    /// task is woken when it does.
    ///
    /// Called whenever a read or write must wait, so it must be cheap: a
    /// timer already polled with this task's waker, and not fired since,
    /// will wake the task when it fires, so it is not polled again (a
    /// poll of tokio's timer costs far more than these two checks).
    #[inline]
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let armed = self
            .armed_for
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()));
        if armed && !self.timer.is_elapsed() {
            return None;
        }
        self.check(cx)
    }

    #[cold]
    fn check(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                self.armed_for = Some(cx.waker().clone());
                return None;
            }
            let now = Instant::now();
            let deadline = match self.handshake_deadline {
                Some(d) if now >= d => {
                    return Some(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "handshake timed out",
                    ))
                }
                Some(d) => d,
                None if !std::mem::take(&mut self.used) => {
                    return Some(io::Error::new(io::ErrorKind::TimedOut, "idle timeout"))
                }
                None => now + self.idle,
            };
            self.reset(deadline);
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Conn<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                if !new.is_empty() {
                    this.watch.on_read(new);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.watch.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Conn<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        stalled(
            Pin::new(&mut this.io).poll_write(cx, buf),
            &mut this.watch,
            cx,
        )
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        stalled(
            Pin::new(&mut this.io).poll_write_vectored(cx, bufs),
            &mut this.watch,
            cx,
        )
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        stalled(Pin::new(&mut this.io).poll_flush(cx), &mut this.watch, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        stalled(
            Pin::new(&mut this.io).poll_shutdown(cx),
            &mut this.watch,
            cx,
        )
    }
}

/// A write that cannot proceed (the peer reads nothing) must not outlive
/// the deadline either: HTTP/2 stops reading while its writes are stuck.
#[inline]
fn stalled<T>(
    r: Poll<io::Result<T>>,
    watch: &mut Watch,
    cx: &mut Context<'_>,
) -> Poll<io::Result<T>> {
    match r {
        Poll::Pending => match watch.expired(cx) {
            Some(e) => Poll::Ready(Err(e)),
            None => Poll::Pending,
        },
        r => r,
    }
}

/// The client connection preface: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".
const PREFACE_LEN: u8 = 24;

/// Follows the HTTP/2 frames a client sends, reading only frame headers.
/// `preface` counts the preface bytes read; then `header` bytes of the
/// next 9-byte frame header are read (the first three are the payload
/// length, the fourth the type), or `skip` payload bytes remain.
#[derive(Default)]
struct Frames {
    preface: u8,
    header: u8,
    len: u32,
    kind: u8,
    skip: u32,
}

/// Frame types that carry or end a call: DATA, HEADERS, RST_STREAM,
/// CONTINUATION.
fn is_call_frame(kind: u8) -> bool {
    matches!(kind, 0x0 | 0x1 | 0x3 | 0x9)
}

impl Frames {
    /// Returns (the preface was completed by `data`, `data` holds the
    /// header of a call frame).
    fn feed(&mut self, mut data: &[u8]) -> (bool, bool) {
        let mut preface_done = false;
        if self.preface < PREFACE_LEN {
            let n = data.len().min(usize::from(PREFACE_LEN - self.preface));
            self.preface += n as u8;
            data = &data[n..];
            preface_done = self.preface == PREFACE_LEN;
        }
        let mut used = false;
        while !data.is_empty() {
            if self.skip > 0 {
                let n = data.len().min(self.skip as usize);
                self.skip -= n as u32;
                data = &data[n..];
                continue;
            }
            if self.header == 0 && data.len() >= 9 {
                // The common case, a whole frame header in hand: read it
                // at once instead of byte by byte.
                used |= is_call_frame(data[3]);
                self.skip = u32::from_be_bytes([0, data[0], data[1], data[2]]);
                data = &data[9..];
                continue;
            }
            let b = data[0];
            data = &data[1..];
            match self.header {
                0..=2 => self.len = (self.len << 8) | u32::from(b),
                3 => self.kind = b,
                _ => {}
            }
            self.header += 1;
            if self.header == 9 {
                used |= is_call_frame(self.kind);
                self.skip = self.len;
                self.header = 0;
                self.len = 0;
            }
        }
        (preface_done, used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, payload: usize) -> Vec<u8> {
        let mut v = (payload as u32).to_be_bytes()[1..].to_vec();
        v.extend_from_slice(&[kind, 0, 0, 0, 0, 1]);
        v.extend(std::iter::repeat_n(0xAB, payload));
        v
    }

    #[test]
    fn handshakes_count_per_ipv4_address_and_ipv6_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(source(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(source(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(source(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_ne!(source(ip("2001:db8:1:3::1")), ip("2001:db8:1:2::"));

        let pool = Arc::new(Handshakes {
            max: 3,
            per_source: 2,
            running: Mutex::default(),
        });
        let a = Handshakes::enter(&pool, ip("2001:db8::1")).unwrap();
        let _b = Handshakes::enter(&pool, ip("2001:db8::2")).unwrap();
        assert!(
            Handshakes::enter(&pool, ip("2001:db8::3")).is_none(),
            "same /64"
        );
        let _c = Handshakes::enter(&pool, ip("192.0.2.1")).unwrap();
        assert!(
            Handshakes::enter(&pool, ip("192.0.2.2")).is_none(),
            "pool full"
        );
        drop(a);
        assert!(Handshakes::enter(&pool, ip("192.0.2.2")).is_some());
        assert_eq!(pool.running.lock().unwrap().total, 2);
    }

    #[test]
    fn frames_split_anywhere() {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        let settings = frame(0x4, 12);
        bytes.extend(&settings);
        let preface_and_settings = bytes.len();
        bytes.extend(frame(0x6, 8)); // PING
        bytes.extend(frame(0x8, 4)); // WINDOW_UPDATE
        let quiet = bytes.len();
        bytes.extend(frame(0x1, 30)); // HEADERS
        bytes.extend(frame(0x0, 300)); // DATA

        for chunk in 1..=bytes.len() {
            let mut f = Frames::default();
            let mut done_at = None;
            let mut used_at = None;
            let mut pos = 0;
            for c in bytes.chunks(chunk) {
                let (d, u) = f.feed(c);
                pos += c.len();
                if d {
                    done_at.get_or_insert(pos);
                }
                if u {
                    used_at.get_or_insert(pos);
                }
            }
            assert_eq!((f.header, f.skip), (0, 0), "chunk {chunk}");
            let done_at = done_at.unwrap();
            assert!(done_at >= 24 && done_at < 24 + chunk, "chunk {chunk}");
            let used_at = used_at.unwrap();
            assert!(used_at > quiet, "chunk {chunk}: pings counted as use");
            assert!(used_at > preface_and_settings);
        }
    }
}
