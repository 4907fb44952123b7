//! The monitor of named counters on the HTTP API (`docs/counters.md`,
//! Watching names), end to end over plain HTTP/1.1 on TCP: one name's
//! view (value, ceiling, step, last raise, held or not), a name owned by
//! another AllocSvr answered with where it lives, the listing paged to
//! the end under `/v1/names` and Leaf's `/cache`; bad input gets a typed
//! JSON error; and nothing the monitor does hands out a number or creates
//! a name.

use std::collections::BTreeSet;

use seqsvr_alloc::node::AllocNode;
use seqsvr_core::{name_key, NAME_KEYS};
use serde_json::Value;

use seqsvr_testkit::node::*;

/// a1 serving the HTTP API and the names of sections 0–1 (of the range
/// reserved for names), a2 serving sections 2–3.
async fn pair() -> (AllocNode, AllocNode, String) {
    http_pair(&FakeStore::at("a1", 30_000, NAME_KEYS.start)).await
}

/// `count` names of the form `{prefix}{i}` whose positions are in
/// `sections` of the set.
fn names_in(prefix: &str, sections: std::ops::Range<u64>, count: usize) -> Vec<String> {
    let spec = spec_at(NAME_KEYS.start);
    (0u64..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|n| {
            let k = name_key(n.as_bytes()).unwrap();
            spec.section_of(k)
                .is_some_and(|s| sections.contains(&(s as u64)))
        })
        .take(count)
        .collect()
}

async fn json(addr: &str, path: &str) -> Value {
    let (st, body) = http_call(addr, "GET", path).await;
    assert_eq!(st, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Every name of the listing at `path`, page by page (`limit` each).
async fn all_pages(addr: &str, path: &str, limit: usize) -> (BTreeSet<String>, usize) {
    let (mut seen, mut cursor, mut pages) = (BTreeSet::new(), 0u64, 0);
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let page = json(addr, &format!("{path}{sep}limit={limit}&cursor={cursor}")).await;
        let names = page["names"].as_array().unwrap();
        assert!(names.len() <= limit, "{page}");
        for n in names {
            seen.insert(n["name"].as_str().unwrap().to_string());
        }
        pages += 1;
        match page["next_cursor"].as_u64() {
            Some(c) => cursor = c,
            None => return (seen, pages),
        }
        assert!(pages < 100, "the listing does not end");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_shows_names_and_changes_nothing() {
    let (a1, a2, http) = pair().await;
    let hot = names_in("order:", 0..2, 5);
    for (i, n) in hot.iter().enumerate() {
        for _ in 0..=i {
            let (st, body) = http_call(&http, "GET", &format!("/v1/name/next/{n}")).await;
            assert_eq!(st, 200, "{body}");
        }
    }
    let alloc = &a1.shared.alloc;
    let before = alloc.stats().names;

    // One name: its value is what `current` answers; its section's facts.
    let n = &hot[4];
    let v = json(&http, &format!("/v1/name/info/{n}")).await;
    let current = alloc.current_name(n.as_bytes()).unwrap();
    assert_eq!(v["name"], n.as_str(), "{v}");
    assert_eq!(
        (v["served_here"].as_bool(), v["held"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(v["value"].as_u64(), Some(current), "{v}");
    let section = v["section"].as_u64().unwrap() as u32;
    let st = alloc.section_state(section).unwrap();
    assert_eq!(v["ceiling"].as_u64(), Some(st.ceiling), "{v}");
    assert!(st.ceiling >= current, "{v}");
    assert_eq!(v["step"].as_u64(), Some(STEP), "{v}");
    assert_eq!(v["epoch"].as_u64(), Some(st.epoch), "{v}");
    assert_eq!(
        v["position"].as_u64(),
        Some(name_key(n.as_bytes()).unwrap())
    );
    let raised = v["last_raise_ms"]
        .as_u64()
        .expect("the take-over dates the ceiling");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(raised <= now_ms && now_ms - raised < 60_000, "{v}");
    assert!(
        v["last_raise"].as_str().is_some_and(|s| !s.is_empty()),
        "{v}"
    );

    // A name never called: shown where it would start, not created.
    let cold = &names_in("never:", 0..2, 1)[0];
    let v = json(&http, &format!("/v1/name/info/{cold}")).await;
    assert_eq!(
        (v["served_here"].as_bool(), v["held"].as_bool()),
        (Some(true), Some(false))
    );
    assert!(v["value"].as_u64().is_some(), "{v}");

    // A name of a2's sections: where it lives, not a number.
    let away = &names_in("order:", 2..4, 1)[0];
    let v = json(&http, &format!("/v1/name/info/{away}")).await;
    assert_eq!(v["served_here"].as_bool(), Some(false), "{v}");
    assert_eq!(v["owner"]["alloc"], "a2", "{v}");
    assert_eq!(
        v["owner"]["addr"],
        a2.shared.alloc_status().addr.as_str(),
        "{v}"
    );
    assert!(v.get("value").is_none(), "{v}");

    // The listing, paged to its end, under both paths.
    let want: BTreeSet<String> = hot.iter().cloned().collect();
    for path in ["/v1/names", "/cache"] {
        let (seen, pages) = all_pages(&http, path, 2).await;
        assert_eq!(seen, want, "{path}");
        assert!(pages >= 3, "{path}: {pages} pages of 2 for 5 names");
    }
    let page = json(&http, "/v1/names?prefix=order%3A").await;
    assert_eq!(page["held"].as_u64(), Some(5), "{page}");
    assert_eq!(page["alloc"], "a1", "{page}");
    let first = &page["names"].as_array().unwrap()[0];
    assert!(first["ceiling"].as_u64().is_some(), "{page}");
    let none = json(&http, "/v1/names?prefix=nothing").await;
    assert_eq!(none["names"].as_array().map(Vec::len), Some(0), "{none}");

    // Nothing handed out, nothing created, nothing forgotten.
    assert_eq!(alloc.stats().names, before);
    assert_eq!(alloc.current_name(n.as_bytes()).unwrap(), current);
    a1.shutdown();
    a2.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_monitor_input_gets_a_typed_json_error() {
    let (a1, a2, http) = pair().await;
    let long = format!("/v1/name/info/{}", "k".repeat(257));
    let cases = [
        ("GET", "/v1/name/info/", 400, "INVALID_REQUEST"),
        ("GET", long.as_str(), 400, "INVALID_REQUEST"),
        ("GET", "/v1/name/info/%zz", 400, "INVALID_REQUEST"),
        ("GET", "/v1/names?limit=0", 400, "INVALID_REQUEST"),
        ("GET", "/v1/names?limit=1001", 400, "INVALID_REQUEST"),
        ("GET", "/cache?limit=abc", 400, "INVALID_REQUEST"),
        ("GET", "/v1/names?cursor=-1", 400, "INVALID_REQUEST"),
        // A cursor no page gave (shard 1000).
        (
            "GET",
            "/v1/names?cursor=4294967296000",
            400,
            "INVALID_REQUEST",
        ),
        ("GET", "/v1/names?page=2", 400, "INVALID_REQUEST"),
        ("GET", "/v1/names?limit=1&limit=2", 400, "INVALID_REQUEST"),
        ("POST", "/v1/names", 405, "INVALID_REQUEST"),
        ("DELETE", "/v1/name/info/x", 405, "INVALID_REQUEST"),
    ];
    for (method, path, status, kind) in cases {
        let (st, body) = http_call(&http, method, path).await;
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(
            (st, v["error"]["kind"].as_str()),
            (status, Some(kind)),
            "{method} {path}: {body}"
        );
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    assert_eq!(a1.shared.alloc.stats().names.created, 0);
    a1.shutdown();
    a2.shutdown();
}
