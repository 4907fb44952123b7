//! The seqsvr.v1 gRPC API (protobuf messages, clients and servers),
//! generated at build time from `proto/seqsvr/v1/*.proto`.
//!
//! The protobuf package is versioned: a breaking change goes to `seqsvr.v2`
//! beside it, never into v1.

/// Package `seqsvr.v1`.
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("seqsvr.v1");
}

pub mod convert;

pub use v1::*;

use prost::Message;

/// Builds a gRPC status whose `details` carry an [`ErrorDetail`].
pub fn status_with(
    code: tonic::Code,
    message: impl Into<String>,
    detail: ErrorDetail,
) -> tonic::Status {
    tonic::Status::with_details(code, message.into(), detail.encode_to_vec().into())
}

/// The [`ErrorDetail`] inside a status built by [`status_with`], if any.
pub fn detail_of(status: &tonic::Status) -> Option<ErrorDetail> {
    if status.details().is_empty() {
        return None;
    }
    ErrorDetail::decode(status.details()).ok()
}
