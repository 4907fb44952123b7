//! The HTTP API's time-ordered ids (docs/ids.md), beside `http.rs`: the
//! routes, and the answers in this API's shape and in Leaf-snowflake's
//! (`/api/snowflake/get/{key}`, `/decodeSnowflakeId?snowflakeId=`), for
//! teams migrating from Leaf. Bad input is refused before the front is
//! called.

use http::StatusCode;
use seqsvr_core::ids::format_unix_ms;

use crate::error::CallError;
use crate::front::Front;
use crate::ids::MAX_IDS_PER_CALL;

/// The namespace Leaf's decode uses unless the query names one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// An id request, understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdRoute {
    /// `n` ids of a namespace; `leaf`: Leaf's bare text.
    Next {
        /// The namespace.
        ns: String,
        /// How many.
        n: u32,
        /// Leaf's shape, or this API's.
        leaf: bool,
        /// An array of ids asked for (`/v1/ids/…`).
        many: bool,
    },
    /// An id taken apart.
    Decode {
        /// The namespace.
        ns: String,
        /// The id.
        id: u64,
        /// Leaf's shape, or this API's.
        leaf: bool,
    },
}

/// `%XX` escapes decoded; `None` for a `%` not followed by two hex digits.
pub fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

fn namespace(s: &str) -> Result<String, String> {
    let bytes = percent_decode(s).ok_or_else(|| format!("{s:?} is not percent-encoded"))?;
    match String::from_utf8(bytes) {
        Ok(ns) if !ns.is_empty() && ns.len() <= 128 && !ns.chars().any(char::is_control) => Ok(ns),
        _ => Err(format!(
            "{s:?} is not an id namespace (1..=128 printable characters)"
        )),
    }
}

fn number(s: &str, what: &str) -> Result<u64, String> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not {what} (a decimal number)"));
    }
    s.parse()
        .map_err(|_| format!("{s:?} is too large for {what}"))
}

/// The id route of `path?query`, if the path is one (`Err`: it is, but
/// its input is bad).
pub fn route(path: &str, query: Option<&str>) -> Option<Result<IdRoute, String>> {
    let next = |ns: &str, n: u32, leaf: bool, many: bool| {
        namespace(ns).map(|ns| IdRoute::Next { ns, n, leaf, many })
    };
    if let Some(ns) = path.strip_prefix("/v1/id/") {
        return Some(next(ns, 1, false, false));
    }
    if let Some(ns) = path.strip_prefix("/api/snowflake/get/") {
        return Some(next(ns, 1, true, false));
    }
    if let Some(rest) = path.strip_prefix("/v1/ids/") {
        let Some((ns, n)) = rest.rsplit_once('/') else {
            return Some(Err("use /v1/ids/{namespace}/{count}".into()));
        };
        let r = number(n, "a count").and_then(|n| match u32::try_from(n) {
            Ok(n @ 1..=MAX_IDS_PER_CALL) => Ok(n),
            _ => Err(format!("a count is 1..={MAX_IDS_PER_CALL}, not {n}")),
        });
        return Some(r.and_then(|n| next(ns, n, false, true)));
    }
    if let Some(rest) = path.strip_prefix("/v1/decode-id/") {
        let Some((ns, id)) = rest.rsplit_once('/') else {
            return Some(Err("use /v1/decode-id/{namespace}/{id}".into()));
        };
        let r = number(id, "an id").and_then(|id| {
            namespace(ns).map(|ns| IdRoute::Decode {
                ns,
                id,
                leaf: false,
            })
        });
        return Some(r);
    }
    if path == "/decodeSnowflakeId" {
        let mut id = None;
        let mut ns = DEFAULT_NAMESPACE.to_string();
        for pair in query.unwrap_or("").split('&') {
            match pair.split_once('=') {
                Some(("snowflakeId", v)) => id = Some(v),
                Some(("namespace", v)) => match namespace(v) {
                    Ok(v) => ns = v,
                    Err(e) => return Some(Err(e)),
                },
                _ => {}
            }
        }
        let Some(id) = id else {
            return Some(Err("snowflakeId is missing".into()));
        };
        let r = number(id, "an id").map(|id| IdRoute::Decode { ns, id, leaf: true });
        return Some(r);
    }
    None
}

/// The answer to an id route: status, content type, body.
pub async fn answer(
    front: &Front,
    r: IdRoute,
    json: bool,
) -> Result<(StatusCode, &'static str, String), CallError> {
    const TEXT: &str = "text/plain; charset=utf-8";
    const JSON: &str = "application/json";
    match r {
        IdRoute::Next { ns, n, leaf, many } => {
            let ids = front.next_ids(&ns, n).await?;
            let first = *ids
                .first()
                .ok_or_else(|| CallError::Internal("no id issued".into()))?;
            Ok(match (leaf, many, json) {
                (true, _, _) => (StatusCode::OK, TEXT, first.to_string()),
                (false, true, _) => (
                    StatusCode::OK,
                    JSON,
                    serde_json::json!({ "namespace": ns, "ids": ids }).to_string(),
                ),
                (false, false, true) => (
                    StatusCode::OK,
                    JSON,
                    serde_json::json!({ "namespace": ns, "id": first }).to_string(),
                ),
                (false, false, false) => (StatusCode::OK, TEXT, format!("{first}\n")),
            })
        }
        IdRoute::Decode { ns, id, leaf } => {
            let (d, _) = front.decode_id(&ns, id).await?;
            let body = if leaf {
                serde_json::json!({
                    "timestamp": format!("{}({})", d.unix_ms, format_unix_ms(d.unix_ms)),
                    "workerId": d.worker.to_string(),
                    "sequenceId": d.seq.to_string(),
                    "namespace": ns,
                })
            } else {
                serde_json::json!({
                    "namespace": ns,
                    "time_ms": d.unix_ms,
                    "time": format_unix_ms(d.unix_ms),
                    "worker": d.worker,
                    "sequence": d.seq,
                })
            };
            Ok((StatusCode::OK, JSON, body.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_routes_and_refusals() {
        let next = |ns: &str, n, leaf, many| {
            Some(Ok(IdRoute::Next {
                ns: ns.into(),
                n,
                leaf,
                many,
            }))
        };
        assert_eq!(route("/v1/id/msg", None), next("msg", 1, false, false));
        assert_eq!(route("/v1/id/a%20b", None), next("a b", 1, false, false));
        assert_eq!(
            route("/api/snowflake/get/msg", None),
            next("msg", 1, true, false)
        );
        assert_eq!(
            route("/v1/ids/msg/500", None),
            next("msg", 500, false, true)
        );
        assert_eq!(
            route("/decodeSnowflakeId", Some("snowflakeId=42")),
            Some(Ok(IdRoute::Decode {
                ns: DEFAULT_NAMESPACE.into(),
                id: 42,
                leaf: true
            }))
        );
        assert_eq!(
            route("/v1/decode-id/msg/7", None),
            Some(Ok(IdRoute::Decode {
                ns: "msg".into(),
                id: 7,
                leaf: false
            }))
        );
        for (p, q) in [
            ("/v1/id/", None),
            ("/v1/id/%zz", None),
            ("/v1/ids/msg/0", None),
            ("/v1/ids/msg/100001", None),
            ("/v1/ids/msg/-1", None),
            ("/v1/ids/msg", None),
            ("/v1/decode-id/msg/x", None),
            ("/decodeSnowflakeId", None),
            ("/decodeSnowflakeId", Some("snowflakeId=-5")),
            ("/decodeSnowflakeId", Some("snowflakeId=1&namespace=")),
        ] {
            assert!(
                matches!(route(p, q), Some(Err(_))),
                "{p} {q:?}: {:?}",
                route(p, q)
            );
        }
        assert_eq!(route("/v1/next/1", None), None);
    }
}
