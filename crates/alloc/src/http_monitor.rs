//! The HTTP API's monitor of named counters (`docs/counters.md`, Watching
//! names), beside `http.rs`: what an AllocSvr holds for a name, as JSON,
//! for teams used to Leaf's `/cache` page. Read only: no call here hands
//! out a number, creates a name or moves a ceiling.
//!
//! - `GET /v1/name/info/{name}` → one name: its `cur_seq` (`value`),
//!   whether the name table holds it, its section's ceiling, step (the
//!   adaptive step when steps adapt), raise headroom and when the ceiling
//!   last moved. A name whose section this AllocSvr does not serve is not
//!   forwarded: the answer says where it lives (set, AllocSvr, address),
//!   because a monitor shows one process's memory and a forwarded view
//!   would need a call of its own on the client plane.
//! - `GET /v1/names?limit=&cursor=&prefix=` and Leaf's path `GET /cache`
//!   (same query, JSON instead of Leaf's HTML table) → a page of the names
//!   held here: at most [`MAX_LIMIT`] names, and no more than
//!   [`SCAN_BUDGET`] entries looked at per page (fewer names and a cursor
//!   when a prefix matches few), so a page costs the same whatever the
//!   table holds.
//!
//! Bad input (a name out of bounds, a limit out of range, a cursor no page
//! gave, an unknown parameter) is a typed JSON error, as everywhere in the
//! API.

use std::time::{SystemTime, UNIX_EPOCH};

use http::StatusCode;
use seqsvr_client::Owner;
use seqsvr_core::ids::format_unix_ms;
use seqsvr_core::Uid;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::allocator::NameView;
use crate::error::{AllocError, CallError};
use crate::front::Front;
use crate::http_ids::percent_decode;

/// Names on one page unless the query says otherwise.
pub const DEFAULT_LIMIT: usize = 100;
/// Most names on one page.
pub const MAX_LIMIT: usize = 1000;
/// Most name-table entries one page looks at (each shard's lock is held
/// while its part is copied, so this bounds what a page costs callers).
pub const SCAN_BUDGET: usize = 10_000;

/// A monitor request, understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MonitorRoute {
    /// One name's view.
    Name(Vec<u8>),
    /// A page of the names held here.
    List {
        /// Where the page starts (0: the first page).
        cursor: u64,
        /// Most names on it.
        limit: usize,
        /// Only names starting with these bytes.
        prefix: Vec<u8>,
    },
}

/// The monitor route of `path?query`, if the path is one (`Err`: it is,
/// but its input is bad).
pub fn route(path: &str, query: Option<&str>) -> Option<Result<MonitorRoute, String>> {
    if let Some(n) = path.strip_prefix("/v1/name/info/") {
        return Some(name(n).map(MonitorRoute::Name));
    }
    if path == "/v1/names" || path == "/cache" {
        return Some(list(query.unwrap_or("")));
    }
    None
}

/// A name from a path segment: percent-decoded, 1..=256 bytes.
fn name(s: &str) -> Result<Vec<u8>, String> {
    let bytes = percent_decode(s).ok_or_else(|| format!("{s:?} is not percent-encoded"))?;
    seqsvr_core::name_key(&bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// A listing's query: `limit` (1..=[`MAX_LIMIT`]), `cursor` (from a page's
/// `next_cursor`), `prefix` (percent-encoded, at most 256 bytes), each at
/// most once.
fn list(query: &str) -> Result<MonitorRoute, String> {
    let (mut cursor, mut limit, mut prefix) = (None, None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let twice = |k: &str| format!("{k} is given twice");
        match k {
            "cursor" => {
                let c = v
                    .parse::<u64>()
                    .ok()
                    .filter(|_| v.bytes().all(|b| b.is_ascii_digit()));
                let c = c.ok_or_else(|| format!("cursor {v:?} is not a page's next_cursor"))?;
                if cursor.replace(c).is_some() {
                    return Err(twice(k));
                }
            }
            "limit" => {
                let l = v
                    .parse::<usize>()
                    .ok()
                    .filter(|l| (1..=MAX_LIMIT).contains(l));
                let l = l.ok_or_else(|| format!("limit {v:?} is not in 1..={MAX_LIMIT}"))?;
                if limit.replace(l).is_some() {
                    return Err(twice(k));
                }
            }
            "prefix" => {
                let p = percent_decode(v).ok_or_else(|| format!("{v:?} is not percent-encoded"))?;
                if p.len() > seqsvr_core::MAX_NAME_LEN {
                    return Err(format!(
                        "a prefix is at most {} bytes",
                        seqsvr_core::MAX_NAME_LEN
                    ));
                }
                if prefix.replace(p).is_some() {
                    return Err(twice(k));
                }
            }
            other => {
                return Err(format!(
                    "unknown parameter {other:?} (limit, cursor, prefix)"
                ))
            }
        }
    }
    Ok(MonitorRoute::List {
        cursor: cursor.unwrap_or(0),
        limit: limit.unwrap_or(DEFAULT_LIMIT),
        prefix: prefix.unwrap_or_default(),
    })
}

/// The answer to a monitor request: `200` and its JSON, or the error the
/// door maps (a cursor no page gave: `INVALID_REQUEST`).
pub fn answer(front: &Front, r: MonitorRoute) -> Result<(StatusCode, String), CallError> {
    let clock = Clock::now();
    let alloc = &front.shared().alloc;
    let lease_ok = front.shared().lease_ok();
    let body = match r {
        MonitorRoute::Name(n) => match alloc.name_view(&n) {
            Ok(v) => view_json(&v, &clock, lease_ok),
            Err(AllocError::NotOwner { .. } | AllocError::OutOfRange { .. }) => {
                elsewhere_json(front, &n)
            }
            Err(e) => return Err(e.into()),
        },
        MonitorRoute::List {
            cursor,
            limit,
            prefix,
        } => {
            let Some((views, next)) = alloc.names_page(cursor, limit, &prefix, SCAN_BUDGET) else {
                return Err(CallError::Invalid(format!(
                    "cursor {cursor} is not a page's next_cursor"
                )));
            };
            json!({
                "alloc": front.shared().id,
                "held": alloc.stats().names.held,
                "limit": limit,
                "names": views.iter().map(|v| view_json(v, &clock, lease_ok)).collect::<Vec<_>>(),
                "next_cursor": next,
            })
        }
    };
    Ok((StatusCode::OK, body.to_string()))
}

/// One name served here, as JSON.
fn view_json(v: &NameView, clock: &Clock, lease_ok: bool) -> Value {
    let mut o = json!({
        "position": v.position,
        "section": v.section,
        "served_here": v.section_state.is_some(),
        "held": v.held,
        "value": v.value,
    });
    name_fields(&mut o, &v.name);
    if let Some(st) = &v.section_state {
        let fields = json!({
            "ceiling": st.ceiling,
            "step": st.step,
            "raise_margin": st.raise_margin,
            "raise_pending": st.raise_pending,
            "epoch": st.epoch,
            "lease_ok": lease_ok,
            "last_raise_ms": st.last_raise.map(|t| clock.unix_ms(t)),
            "last_raise": st.last_raise.map(|t| format_unix_ms(clock.unix_ms(t))),
        });
        merge(&mut o, fields);
    }
    o
}

/// A name whose section is not served here: where it lives, by this
/// AllocSvr's routes (its own set's table, else the forwarding client's
/// copy of the directory and the other sets' tables).
fn elsewhere_json(front: &Front, name: &[u8]) -> Value {
    let position = seqsvr_core::name_key(name).unwrap_or_default();
    let mut o = json!({
        "position": position,
        "served_here": false,
        "owner": owner_json(front, position),
    });
    if let Some(s) = front.shared().alloc.spec().section_of(position) {
        merge(&mut o, json!({ "section": s }));
    }
    name_fields(&mut o, name);
    o
}

/// The owner of `position` as the routes known here name it (`null`:
/// none known now).
fn owner_json(front: &Front, position: Uid) -> Value {
    let shared = front.shared();
    let spec = shared.alloc.spec();
    if let Some(s) = spec.section_of(position) {
        let routes = shared.routes();
        return match routes.table.entry_for_section(s) {
            Some(e) => json!({ "set": spec.set_id, "alloc": e.alloc, "addr": e.addr }),
            None => Value::Null,
        };
    }
    match front.owner_of(position) {
        Some(Owner::At { set, addr }) => json!({ "set": set, "addr": addr }),
        _ => Value::Null,
    }
}

/// `name` as text: itself when UTF-8, else percent-encoded (with
/// `"name_encoding":"percent"`), so it can be pasted back into a path.
fn name_fields(o: &mut Value, name: &[u8]) {
    let fields = match std::str::from_utf8(name) {
        Ok(s) => json!({ "name": s }),
        Err(_) => {
            let enc: String = name
                .iter()
                .map(|&b| match b {
                    b'%' => "%25".to_string(),
                    0x21..=0x7e => (b as char).to_string(),
                    _ => format!("%{b:02X}"),
                })
                .collect();
            json!({ "name": enc, "name_encoding": "percent" })
        }
    };
    merge(o, fields);
}

fn merge(o: &mut Value, more: Value) {
    if let (Value::Object(o), Value::Object(more)) = (o, more) {
        o.extend(more);
    }
}

/// The monotonic and the wall clock read once, to date a monotonic
/// instant.
struct Clock {
    mono: Instant,
    unix_ms: u64,
}

impl Clock {
    fn now() -> Self {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Self {
            mono: Instant::now(),
            unix_ms,
        }
    }

    /// The wall time of `t`, in ms since the Unix epoch.
    fn unix_ms(&self, t: Instant) -> u64 {
        let ago = self.mono.saturating_duration_since(t).as_millis() as u64;
        self.unix_ms.saturating_sub(ago)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list_of(q: &str) -> Result<MonitorRoute, String> {
        route("/v1/names", Some(q)).unwrap()
    }

    #[test]
    fn routes_and_refusals() {
        assert_eq!(route("/v1/next/1", None), None);
        assert_eq!(
            route("/v1/name/info/order%3A1", None),
            Some(Ok(MonitorRoute::Name(b"order:1".to_vec())))
        );
        let long = format!("/v1/name/info/{}", "k".repeat(257));
        for bad in ["/v1/name/info/", "/v1/name/info/%zz", long.as_str()] {
            assert!(matches!(route(bad, None), Some(Err(_))), "{bad}");
        }
        let default = MonitorRoute::List {
            cursor: 0,
            limit: DEFAULT_LIMIT,
            prefix: vec![],
        };
        assert_eq!(route("/cache", None), Some(Ok(default.clone())));
        assert_eq!(list_of(""), Ok(default));
        assert_eq!(
            list_of("limit=5&cursor=4294967296&prefix=order%3A"),
            Ok(MonitorRoute::List {
                cursor: 1 << 32,
                limit: 5,
                prefix: b"order:".to_vec(),
            })
        );
        let table = [
            ("limit=0", "limit \"0\" is not in 1..=1000"),
            ("limit=1001", "limit \"1001\" is not in 1..=1000"),
            ("limit=x", "limit \"x\" is not in 1..=1000"),
            ("cursor=-1", "cursor \"-1\" is not a page's next_cursor"),
            ("cursor=+1", "cursor \"+1\" is not a page's next_cursor"),
            ("limit=1&limit=2", "limit is given twice"),
            ("prefix=%4", "\"%4\" is not percent-encoded"),
            (
                "page=2",
                "unknown parameter \"page\" (limit, cursor, prefix)",
            ),
        ];
        for (q, want) in table {
            assert_eq!(list_of(q), Err(want.to_string()), "{q}");
        }
        let long = format!("prefix={}", "p".repeat(257));
        assert_eq!(
            list_of(&long),
            Err("a prefix is at most 256 bytes".to_string())
        );
    }

    #[test]
    fn names_as_text() {
        let mut o = json!({});
        name_fields(&mut o, "订单:1".as_bytes());
        assert_eq!(o, json!({ "name": "订单:1" }));
        let mut o = json!({});
        name_fields(&mut o, b"a\xff b%");
        assert_eq!(
            o,
            json!({ "name": "a%FF%20b%25", "name_encoding": "percent" })
        );
        assert_eq!(percent_decode("a%FF%20b%25").unwrap(), b"a\xff b%");
    }
}
