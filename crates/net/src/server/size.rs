//! The plane's message-size limit, answered `RESOURCE_EXHAUSTED`.
//!
//! tonic's own limit is set per service (`max_decoding_message_size`, 4
//! MiB unless changed), so a listener cannot impose it on the services a
//! caller adds, and tonic answers a message over it with `OUT_OF_RANGE`,
//! a code that tells a client "your argument is wrong" rather than "too
//! big for this server". So the limit is enforced one step earlier:
//! the plane's layer wraps each request body in [`Limited`], which reads
//! the 5-byte gRPC length prefix of every message as the body's frames go
//! by and fails the body with a `RESOURCE_EXHAUSTED` status as soon as a
//! prefix announces more than the limit, before the message is buffered.
//! tonic's decoder passes that status on as the call's answer. (The layer
//! is the plane's [`PlaneLayer`](super::PlaneLayer), which also enforces
//! the request timeout.)
//!
//! A service whose own tonic limit is *smaller* than the plane's still
//! answers `OUT_OF_RANGE` from tonic; the layer rewrites that status (when
//! it comes as a trailers-only answer, as unary calls give it) to
//! `RESOURCE_EXHAUSTED`, so a caller sees one code for "too large"
//! whichever limit it hit.
//!
//! # Unfinished messages: a budget per listener
//!
//! tonic's decoder reserves a message's announced length as soon as it
//! reads the prefix and holds what has arrived until the message is
//! complete. A caller who opens many streams, announces large messages and
//! never finishes them would make the server hold streams × `max_message`
//! per connection (64 MiB on the client plane), times the connections. So
//! a message that is not complete within the DATA frame that carries its
//! prefix takes its announced length from the listener's [`Unfinished`]
//! budget (`max_unfinished_bytes`) until it completes or the call ends
//! (answered, timed out, reset); a message that does not fit fails the
//! call with `RESOURCE_EXHAUSTED` before it is buffered. A message that
//! arrives whole in one frame (every client-plane request: they are far
//! below HTTP/2's 16 KiB frames) never touches the budget, so a stranger
//! holding it full does not stop those calls, and they pay nothing for it.
//!
//! # Cost
//!
//! No allocation per call: the body wrapper is a plain generic type (the
//! router boxes the request body once, as it does without the layer), and
//! the response check is one header look-up. Scanning touches only the 5
//! prefix bytes of each message; a message in one frame adds one branch.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{ready, Context, Poll};
use tonic::Status;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A listener's budget for unfinished request messages (see the module
/// doc): bytes announced by messages not yet complete, over all its
/// connections.
#[derive(Debug)]
pub struct Unfinished {
    max: usize,
    held: AtomicUsize,
}

impl Unfinished {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Unfinished {
        Unfinished {
            max,
            held: AtomicUsize::new(0),
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The budget.
    pub fn max(&self) -> usize {
        self.max
    }

    fn take(&self, n: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                h.checked_add(n).filter(|&t| t <= self.max)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }
}

/// What one body holds of its listener's budget; given back when the body
/// is dropped (the call ended, however it ended).
struct Hold {
    budget: &'static Unfinished,
    held: usize,
}

impl Hold {
    /// Holds `want` bytes instead of what is held now; false if the
    /// budget has no room.
    #[cold]
    fn set(&mut self, want: usize) -> bool {
        if self.held > 0 {
            self.budget.give(self.held);
            self.held = 0;
        }
        if want > 0 {
            if !self.budget.take(want) {
                return false;
            }
            self.held = want;
        }
        true
    }
}

impl Drop for Hold {
    #[inline]
    fn drop(&mut self) {
        if self.held > 0 {
            self.budget.give(self.held);
        }
    }
}

pin_project! {
    /// A request body that fails once a gRPC message in it announces more
    /// than the limit, or an unfinished message finds no room in the
    /// listener's budget.
    pub struct Limited<B> {
        #[pin]
        inner: B,
        max: usize,
        scan: Scan,
        hold: Hold,
    }
}

impl<B> Limited<B> {
    pub(crate) fn new(inner: B, max: usize, budget: &'static Unfinished) -> Limited<B> {
        Limited {
            inner,
            max,
            scan: Scan::default(),
            hold: Hold { budget, held: 0 },
        }
    }
}

impl<B> Body for Limited<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        match ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    if let Err(len) = this.scan.feed(data, *this.max) {
                        return Poll::Ready(Some(Err(Box::new(Status::resource_exhausted(
                            format!(
                                "request message of {len} bytes exceeds this server's limit of {} bytes",
                                this.max
                            ),
                        )))));
                    }
                    // A message left unfinished by this frame holds its
                    // announced length; one finished gives it back.
                    let want = this.scan.unfinished();
                    if want != this.hold.held && !this.hold.set(want) {
                        return Poll::Ready(Some(Err(Box::new(Status::resource_exhausted(
                            format!(
                                "server busy: no room for an unfinished request message of {want} \
                                 bytes (unfinished messages may hold {} bytes in all)",
                                this.hold.budget.max
                            ),
                        )))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            None => Poll::Ready(None),
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Where the scan is in the stream of length-prefixed messages:
/// `prefix` bytes of the next 5-byte prefix are read (the first is the
/// compression flag, the next four the big-endian length), or `skip`
/// bytes of a message body remain.
#[derive(Default)]
struct Scan {
    prefix: u8,
    len: u32,
    skip: u64,
    /// The announced length of the message being read.
    current: u64,
}

impl Scan {
    /// The announced length of a message begun and not yet complete (0
    /// between messages, or within a prefix).
    #[inline]
    fn unfinished(&self) -> usize {
        if self.skip > 0 {
            self.current as usize
        } else {
            0
        }
    }

    /// Follows `data`; `Err(len)` when a message announces `len` > `max`.
    fn feed(&mut self, mut data: &[u8], max: usize) -> Result<(), u64> {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = data
                    .len()
                    .min(usize::try_from(self.skip).unwrap_or(usize::MAX));
                self.skip -= n as u64;
                data = &data[n..];
                continue;
            }
            if self.prefix == 0 && data.len() >= 5 {
                // The common case, a whole prefix in one frame: read it at
                // once instead of byte by byte.
                let len = u64::from(u32::from_be_bytes([data[1], data[2], data[3], data[4]]));
                if len > max as u64 {
                    return Err(len);
                }
                self.skip = len;
                self.current = len;
                data = &data[5..];
                continue;
            }
            if self.prefix > 0 {
                self.len = (self.len << 8) | u32::from(data[0]);
            }
            self.prefix += 1;
            data = &data[1..];
            if self.prefix == 5 {
                let len = u64::from(self.len);
                if len > max as u64 {
                    return Err(len);
                }
                self.skip = len;
                self.current = len;
                self.prefix = 0;
                self.len = 0;
            }
        }
        Ok(())
    }
}

/// The `grpc-status` header, looked up by a ready-made name (a `&str`
/// would be parsed into a header name on every call); the call metrics
/// use it too.
pub(crate) static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// tonic's message for a decoded message over its limit, as it appears
/// percent-encoded in `grpc-message`.
const TONIC_TOO_LARGE: &[u8] = b"Error,%20decoded%20message%20length%20too%20large";

pub(crate) fn rewrite_too_large(headers: &mut HeaderMap) {
    // A successful unary answer carries its status in trailers, so this
    // look-up misses on the fast path.
    let Some(status) = headers.get(&GRPC_STATUS) else {
        return;
    };
    if status.as_bytes() != b"11" {
        return;
    }
    let too_large = headers
        .get(&GRPC_MESSAGE)
        .is_some_and(|m| m.as_bytes().starts_with(TONIC_TOO_LARGE));
    if too_large {
        headers.insert(GRPC_STATUS.clone(), HeaderValue::from_static("8"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(lens: &[u32]) -> Vec<u8> {
        let mut v = Vec::new();
        for &l in lens {
            v.push(0);
            v.extend_from_slice(&l.to_be_bytes());
            v.extend(std::iter::repeat_n(7u8, l as usize));
        }
        v
    }

    #[test]
    fn scan_follows_messages_split_anywhere() {
        let bytes = framed(&[3, 0, 100, 20]);
        for chunk in 1..=bytes.len() {
            let mut s = Scan::default();
            for c in bytes.chunks(chunk) {
                s.feed(c, 100).unwrap();
            }
            assert_eq!((s.prefix, s.skip), (0, 0));
        }
    }

    #[test]
    fn scan_stops_at_the_first_large_prefix() {
        let bytes = framed(&[10, 101, 5]);
        for chunk in 1..=bytes.len() {
            let mut s = Scan::default();
            let r: Result<Vec<()>, u64> = bytes.chunks(chunk).map(|c| s.feed(c, 100)).collect();
            assert_eq!(r, Err(101), "chunk {chunk}");
        }
    }

    #[test]
    fn an_unfinished_message_holds_its_announced_length_until_it_is_done() {
        let bytes = framed(&[300, 20]);
        let mut s = Scan::default();
        s.feed(&bytes[..100], 1000).unwrap();
        assert_eq!(s.unfinished(), 300);
        s.feed(&bytes[100..305], 1000).unwrap();
        assert_eq!(s.unfinished(), 0, "between messages");
        s.feed(&bytes[305..307], 1000).unwrap();
        assert_eq!(s.unfinished(), 0, "within a prefix");
        s.feed(&bytes[307..311], 1000).unwrap();
        assert_eq!(s.unfinished(), 20);

        let budget: &'static Unfinished = Box::leak(Box::new(Unfinished::new(500)));
        let mut a = Hold { budget, held: 0 };
        let mut b = Hold { budget, held: 0 };
        assert!(a.set(300));
        assert!(!b.set(201), "over the budget");
        assert_eq!(b.held, 0);
        assert!(b.set(200));
        assert_eq!(budget.held(), 500);
        assert!(a.set(100), "a smaller message in its place");
        assert_eq!(budget.held(), 300);
        drop(a);
        assert!(b.set(0));
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn only_tonics_too_large_is_rewritten() {
        let status = Status::out_of_range(
            "Error, decoded message length too large: found 10 bytes, the limit is: 5 bytes",
        );
        let mut h = status.into_http::<()>().into_parts().0.headers;
        rewrite_too_large(&mut h);
        assert_eq!(h.get(&GRPC_STATUS).unwrap(), "8");

        let mut h = Status::out_of_range("index 9 of 3")
            .into_http::<()>()
            .into_parts()
            .0
            .headers;
        rewrite_too_large(&mut h);
        assert_eq!(h.get(&GRPC_STATUS).unwrap(), "11");
    }
}
