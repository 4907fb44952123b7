//! The seqsvr.v1 gRPC API (protobuf messages, clients and servers),
//! generated at build time from `proto/seqsvr/v1/*.proto`, and the one
//! home of every conversion between wire and core types ([`convert`]) and
//! of the error details every seqsvr status carries ([`status`]).
//!
//! The protobuf package is versioned: a breaking change goes to `seqsvr.v2`
//! beside it, never into v1.

/// Package `seqsvr.v1`.
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("seqsvr.v1");
}

pub mod convert;
mod convert_ids;
pub mod status;

pub use status::{detail_of, kind_label, kind_labels, status_with, KIND_HEADER};
pub use v1::*;
