//! Error details on the wire, in the standard gRPC form.
//!
//! Every non-OK status a seqsvr server returns carries, in its binary
//! `grpc-status-details-bin`, a `google.rpc.Status` whose details hold:
//! - a `google.rpc.ErrorInfo`: `reason` is the [`ErrorKind`] name (e.g.
//!   `STALE_EPOCH`), `domain` is `seqsvr`, `metadata` the facts that are set
//!   (`retryable`, `section`, `current`, `leader_addr` …) as strings — what
//!   any gRPC client in any language can read;
//! - a `google.rpc.RetryInfo` when the call may be retried;
//! - the typed [`ErrorDetail`], for seqsvr's own clients.
//!
//! No detail carries a route table: a refusal names the owner's address
//! and the server's route version, O(1) whatever the table's size, and a
//! caller whose table is older fetches it (`docs/client.md`).

use std::collections::HashMap;

use prost::{Message, Name};
use tonic_types::pb as rpc;

use crate::v1::{ErrorDetail, ErrorKind};

/// The ErrorInfo domain of seqsvr errors.
pub const DOMAIN: &str = "seqsvr";

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";
const DETAIL: &str = "type.googleapis.com/seqsvr.v1.ErrorDetail";

impl Name for ErrorDetail {
    const NAME: &'static str = "ErrorDetail";
    const PACKAGE: &'static str = "seqsvr.v1";
}

/// The standard `RetryInfo` delay: the detail's `retry_after_ms` when it
/// says one, else 50 ms.
fn retry_delay(retry_after_ms: u64) -> prost_types::Duration {
    let ms = if retry_after_ms == 0 {
        50
    } else {
        retry_after_ms
    };
    prost_types::Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// Builds a gRPC status carrying `detail` in the standard form.
pub fn status_with(
    code: tonic::Code,
    message: impl Into<String>,
    detail: ErrorDetail,
) -> tonic::Status {
    let message = message.into();
    let mut details = vec![prost_types::Any {
        type_url: ERROR_INFO.into(),
        value: error_info(&detail).encode_to_vec(),
    }];
    if detail.retryable {
        let retry = rpc::RetryInfo {
            retry_delay: Some(retry_delay(detail.retry_after_ms)),
        };
        details.push(prost_types::Any {
            type_url: RETRY_INFO.into(),
            value: retry.encode_to_vec(),
        });
    }
    details.push(prost_types::Any {
        type_url: DETAIL.into(),
        value: detail.encode_to_vec(),
    });
    let st = rpc::Status {
        code: code as i32,
        message: message.clone(),
        details,
    };
    let mut md = tonic::metadata::MetadataMap::new();
    let kind = ErrorKind::try_from(detail.kind).unwrap_or(ErrorKind::Internal);
    if let Ok(v) = kind_label(kind).parse() {
        md.insert(KIND_HEADER, v);
    }
    tonic::Status::with_details_and_metadata(code, message, st.encode_to_vec().into(), md)
}

/// The response header that names a failed call's [`ErrorKind`] as a
/// lower-snake label (`not_owner`), for the servers' per-call metrics
/// (`seqsvr_calls_total{kind}`, docs/operations.md, Metrics): read without
/// decoding the binary details.
pub const KIND_HEADER: &str = "seqsvr-error-kind";

/// `kind` as the label of the call metrics: its proto name, lower-snake
/// (`NOT_OWNER` is `not_owner`).
pub fn kind_label(kind: ErrorKind) -> String {
    kind.as_str_name().to_ascii_lowercase()
}

/// Every [`ErrorKind`] as a label ([`kind_label`]): the bounded set the
/// call metrics accept (anything else counts as `other`).
pub fn kind_labels() -> Vec<String> {
    (0..=255)
        .filter_map(|v| ErrorKind::try_from(v).ok())
        .filter(|k| *k != ErrorKind::Unspecified)
        .map(kind_label)
        .collect()
}

/// The [`ErrorDetail`] inside a status built by [`status_with`], if any.
pub fn detail_of(status: &tonic::Status) -> Option<ErrorDetail> {
    if status.details().is_empty() {
        return None;
    }
    let st = rpc::Status::decode(status.details()).ok()?;
    st.details
        .iter()
        .find(|a| a.type_url == DETAIL)
        .and_then(|a| ErrorDetail::decode(a.value.as_slice()).ok())
}

/// The standard `ErrorInfo` for a detail: reason and the facts that are set.
fn error_info(d: &ErrorDetail) -> rpc::ErrorInfo {
    let kind = ErrorKind::try_from(d.kind).unwrap_or(ErrorKind::Internal);
    let mut m = HashMap::new();
    m.insert("retryable".to_string(), d.retryable.to_string());
    let mut put = |k: &str, v: String, set: bool| {
        if set {
            m.insert(k.to_string(), v);
        }
    };
    put("section", d.section.to_string(), d.has_section);
    put("current", d.current.to_string(), d.current != 0);
    put("given", d.given.to_string(), d.given != 0);
    put("to", d.to.to_string(), d.to != 0);
    put("count", d.count.to_string(), d.count != 0);
    put("alloc", d.alloc.clone(), !d.alloc.is_empty());
    put("incarnation", d.incarnation.to_string(), d.incarnation != 0);
    put("addr", d.addr.clone(), !d.addr.is_empty());
    put("leader_id", d.leader_id.to_string(), d.leader_id != 0);
    put(
        "leader_addr",
        d.leader_addr.clone(),
        !d.leader_addr.is_empty(),
    );
    put("owner_addr", d.owner_addr.clone(), !d.owner_addr.is_empty());
    put(
        "owner_alloc",
        d.owner_alloc.clone(),
        !d.owner_alloc.is_empty(),
    );
    put(
        "directory_version",
        d.directory_version.to_string(),
        d.directory_version != 0,
    );
    put("to_set", d.to_set.to_string(), kind == ErrorKind::Moved);
    put(
        "set_id",
        d.set.as_ref().map_or(0, |s| s.set_id).to_string(),
        d.set.is_some(),
    );
    #[allow(deprecated)] // an older server's table: its version is still a fact
    let version = d
        .route
        .as_ref()
        .map_or(d.route_version, |r| r.version.max(d.route_version));
    put("route_version", version.to_string(), version != 0);
    rpc::ErrorInfo {
        reason: kind.as_str_name().to_string(),
        domain: DOMAIN.to_string(),
        metadata: m,
    }
}

/// Reads the standard `ErrorInfo` of a seqsvr status (what a client that
/// does not know seqsvr's types sees): `(reason, metadata)`.
pub fn error_info_of(status: &tonic::Status) -> Option<(String, HashMap<String, String>)> {
    let st = rpc::Status::decode(status.details()).ok()?;
    let a = st.details.iter().find(|a| a.type_url == ERROR_INFO)?;
    let info = rpc::ErrorInfo::decode(a.value.as_slice()).ok()?;
    Some((info.reason, info.metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_names_its_kind_in_a_header_the_call_metrics_read() {
        let st = status_with(
            tonic::Code::FailedPrecondition,
            "not mine",
            ErrorDetail {
                kind: ErrorKind::NotOwner as i32,
                ..Default::default()
            },
        );
        let v = st.metadata().get(KIND_HEADER).unwrap();
        assert_eq!(v.to_str().unwrap(), "not_owner");
        let labels = kind_labels();
        assert!(labels.contains(&"owner_unavailable".to_string()));
        assert!(labels.contains(&"moved".to_string()));
        assert!(!labels.iter().any(|l| l.contains("unspecified")));
        assert!(labels
            .iter()
            .all(|l| (l.bytes()).all(|b| b.is_ascii_lowercase() || b == b'_')));
    }

    #[test]
    fn details_are_standard_and_typed() {
        let d = ErrorDetail {
            kind: ErrorKind::StaleEpoch as i32,
            current: 7,
            given: 5,
            section: 3,
            has_section: true,
            retryable: false,
            ..Default::default()
        };
        let s = status_with(tonic::Code::FailedPrecondition, "stale", d.clone());
        assert_eq!(detail_of(&s), Some(d));
        let (reason, meta) = error_info_of(&s).unwrap();
        assert_eq!(reason, "STALE_EPOCH");
        assert_eq!(meta["section"], "3");
        assert_eq!(meta["current"], "7");
        assert_eq!(meta["retryable"], "false");
        // What a plain client decodes from the wire.
        let st = rpc::Status::decode(s.details()).unwrap();
        assert_eq!(st.code, tonic::Code::FailedPrecondition as i32);
        assert!(!st.details.iter().any(|a| a.type_url == RETRY_INFO));
        assert_eq!(detail_of(&tonic::Status::internal("x")), None);
    }
}
