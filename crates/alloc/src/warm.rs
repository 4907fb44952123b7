//! Warming a `Next` call's cell while its request is still being read.
//!
//! Under load from many uids, the one costly step of serving `Next` is the
//! load of the uid's cell: the cells are 8 bytes a uid (8 MB for a million
//! uids), and between two calls the kernel's and HTTP/2's work evicts them
//! from the core's caches, so nearly every call misses the cache and the
//! TLB (`docs/benchmarks-log.md`). The handler cannot hide that miss: it knows
//! the uid only after tonic decoded the request, and needs the cell's value
//! for its answer right away.
//!
//! [`Warmed`] wraps the client plane's `Alloc` service. For a `Next` call it
//! wraps the request body, and when the body's first frame goes by (before
//! tonic decodes it) reads the uid from the raw bytes and asks the CPU to
//! start loading that uid's cell ([`Allocator::prefetch`]). The work tonic
//! and the handler do before they reach the cell (decoding, the request's
//! metadata, the lease check) then runs while the line is on its way.
//!
//! It is a hint and nothing else: a prefetch changes no state a program can
//! observe, and the bytes are read without trusting them. A frame that is
//! not a plain `NextRequest` with its uid first (compressed, split across
//! frames, another field first, a malformed varint, a uid out of range)
//! warms nothing, and the call goes on exactly as without the wrapper:
//! tonic decodes the message and the handler answers or refuses it.
//! Batches need no such hint: `Allocator::next_batch` prefetches its cells
//! itself, overlapping their misses.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use tonic::server::NamedService;
use tower_service::Service;

use crate::allocator::Allocator;

/// The gRPC path of `Next`, the one call warmed.
pub const NEXT_PATH: &str = "/seqsvr.v1.Alloc/Next";

/// The uid of a `NextRequest` read from the first bytes of a request body,
/// if they plainly hold one: an uncompressed gRPC message (flag 0, then a
/// 4-byte length) whose first field is field 1 (`uid`) as a varint, all
/// within `frame`. `None` for anything else; never panics, whatever the
/// bytes.
pub fn next_uid(frame: &[u8]) -> Option<u64> {
    // [0] compression flag, [1..5] big-endian length, [5] the first tag:
    // field 1, wire type 0 (varint).
    let (head, rest) = frame.split_first_chunk::<6>()?;
    let [flag, _, _, _, _, tag] = *head;
    if flag != 0 || tag != 0x08 {
        return None;
    }
    let mut uid = 0u64;
    for (i, &b) in rest.iter().take(10).enumerate() {
        let bits = u64::from(b & 0x7f);
        // The tenth byte of a varint may only hold the top bit of a u64.
        if i == 9 && bits > 1 {
            return None;
        }
        uid |= bits << (7 * i);
        if b & 0x80 == 0 {
            return Some(uid);
        }
    }
    None
}

/// The client plane's `Alloc` service with `Next` calls warmed (module
/// docs). Everything else passes through untouched.
#[derive(Clone, Debug)]
pub struct Warmed<S> {
    inner: S,
    alloc: Arc<Allocator>,
}

impl<S> Warmed<S> {
    /// Wraps `inner`, warming the cells of `alloc`.
    pub fn new(inner: S, alloc: Arc<Allocator>) -> Self {
        Self { inner, alloc }
    }
}

impl<S: NamedService> NamedService for Warmed<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for Warmed<S>
where
    S: Service<http::Request<WarmBody<B>>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let warm = (req.uri().path() == NEXT_PATH).then(|| self.alloc.clone());
        self.inner.call(req.map(|inner| WarmBody { inner, warm }))
    }
}

pin_project_lite::pin_project! {
    /// A request body that warms the uid's cell when its first frame goes
    /// by; the frames themselves pass through unchanged.
    pub struct WarmBody<B> {
        #[pin]
        inner: B,
        // Taken at the first data frame: one look per call.
        warm: Option<Arc<Allocator>>,
    }
}

impl<B: Body> Body for WarmBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                if let Some(alloc) = this.warm.take() {
                    if let Some(uid) = next_uid(data.chunk()) {
                        alloc.prefetch(uid);
                    }
                }
            }
        }
        polled
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use prost::Message;
    use seqsvr_proto as pb;

    /// A `NextRequest` framed as on the wire (uncompressed).
    fn framed(uid: u64) -> Vec<u8> {
        let msg = pb::NextRequest {
            uid,
            count: 0,
            ..Default::default()
        }
        .encode_to_vec();
        let mut out = vec![0];
        out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        out.extend_from_slice(&msg);
        out
    }

    #[test]
    fn reads_the_uid_of_a_framed_next_request() {
        for uid in [1, 127, 128, 16_383, 16_384, 1 << 35, u64::MAX - 1, u64::MAX] {
            assert_eq!(next_uid(&framed(uid)), Some(uid), "uid {uid}");
        }
    }

    #[test]
    fn anything_else_warms_nothing() {
        let whole = framed(300);
        let mut compressed = whole.clone();
        compressed[0] = 1;
        let mut other_field = whole.clone();
        other_field[5] = 0x10;
        // uid 0 is the default value, which protobuf leaves out: no field.
        let empty = framed(0);
        // A varint of eleven bytes, and one whose tenth byte overflows u64.
        let mut too_long = whole[..6].to_vec();
        too_long.extend([0xff; 10]);
        too_long.push(0x01);
        let mut overflow = whole[..6].to_vec();
        overflow.extend([0xff; 9]);
        overflow.push(0x02);
        let cases: [(&str, &[u8]); 8] = [
            ("nothing", &[]),
            ("prefix cut short", &whole[..4]),
            ("varint cut short", &framed(1 << 20)[..8]),
            ("compressed", &compressed),
            ("another field first", &other_field),
            ("empty message", &empty),
            ("varint too long", &too_long),
            ("varint over u64", &overflow),
        ];
        for (what, bytes) in cases {
            assert_eq!(next_uid(bytes), None, "{what}");
        }
    }

    proptest! {
        /// Whatever a caller sends, reading it never panics, and a uid read
        /// is the varint protobuf itself reads after the same prefix.
        #[test]
        fn any_bytes_are_read_safely(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Some(uid) = next_uid(&bytes) {
                let mut rest = &bytes[6..];
                prop_assert_eq!(prost::encoding::decode_varint(&mut rest).ok(), Some(uid));
            }
        }

        #[test]
        fn every_uid_round_trips(uid in 1u64..) {
            prop_assert_eq!(next_uid(&framed(uid)), Some(uid));
        }
    }
}
