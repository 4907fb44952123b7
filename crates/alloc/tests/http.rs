//! The HTTP API end to end (`docs/clients.md`, HTTP): a node serving it on
//! port 0, spoken to over raw TCP (what any HTTP client sends) and with
//! `curl`. Numbers for the node's own uids and, forwarded, for another
//! AllocSvr's; bad input (a bad uid, a huge body, bad JSON, a wrong
//! method, an unknown path) gets a typed JSON error and changes nothing.
//!
//! The `curl` test prints why and passes without curl, unless `CI` is
//! set, where it fails.

use seqsvr_alloc::node::AllocNode;

use seqsvr_testkit::node::*;

/// a1 serving the HTTP API and sections 0–1, a2 serving 2–3.
async fn pair() -> (AllocNode, AllocNode, String) {
    http_pair(&FakeStore::new("a1", 3000)).await
}

fn get(path: &str, accept: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\nAccept: {accept}\r\nConnection: close\r\n\r\n")
        .into_bytes()
}

fn post(path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn kind_of(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["error"]["kind"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_batch_and_current_for_own_and_forwarded_uids() {
    let (a1, a2, http) = pair().await;
    for uid in [5u64, 25] {
        let (st, head, body) = http_raw(&http, &get(&format!("/v1/next/{uid}"), "*/*")).await;
        assert_eq!(st, 200, "{head}\n{body}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/plain"),
            "{head}"
        );
        let first: u64 = body.trim().parse().unwrap();
        let (st, _, body) =
            http_raw(&http, &get(&format!("/v1/next/{uid}"), "application/json")).await;
        assert_eq!(st, 200);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["uid"], uid);
        let second = v["seq"].as_u64().unwrap();
        assert!(second > first, "uid {uid}: {second} after {first}");
        let (st, _, body) = http_raw(&http, &get(&format!("/v1/current/{uid}"), "*/*")).await;
        assert_eq!((st, body.trim().parse::<u64>().unwrap()), (200, second));
    }
    let (st, _, body) = http_raw(&http, &post("/v1/next-batch", r#"{"uids":[5,25,5]}"#)).await;
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let seqs: Vec<u64> = serde_json::from_value(v["seqs"].clone()).unwrap();
    assert_eq!(seqs.len(), 3);
    assert!(seqs[2] > seqs[0], "{seqs:?}");
    // Out of every set's range: 400, typed.
    let (st, _, body) = http_raw(&http, &get("/v1/next/100000", "*/*")).await;
    assert_eq!(
        (st, kind_of(&body).as_str()),
        (400, "OUT_OF_RANGE"),
        "{body}"
    );
    a1.shutdown();
    a2.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_typed_json_error_and_changes_nothing() {
    let (a1, a2, http) = pair().await;
    let cur = |uid: u64| a1.shared.alloc.current(uid).unwrap();
    let before = (cur(5), cur(15));
    let huge = format!(r#"{{"uids":[{}]}}"#, "1,".repeat(100_000) + "1");
    let many = format!(r#"{{"uids":[{}]}}"#, vec!["5"; 4097].join(","));
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (get("/v1/next/abc", "*/*"), 400, "INVALID_REQUEST"),
        (get("/v1/next/-5", "*/*"), 400, "INVALID_REQUEST"),
        (
            get("/v1/next/99999999999999999999", "*/*"),
            400,
            "INVALID_REQUEST",
        ),
        (get("/v1/nothing", "*/*"), 404, "NOT_FOUND"),
        (post("/v1/next/5", ""), 405, "INVALID_REQUEST"),
        (get("/v1/next-batch", "*/*"), 405, "INVALID_REQUEST"),
        (
            post("/v1/next-batch", "{\"uids\":[5,"),
            400,
            "INVALID_REQUEST",
        ),
        (
            post("/v1/next-batch", r#"{"uids":[5],"x":1}"#),
            400,
            "INVALID_REQUEST",
        ),
        (
            post("/v1/next-batch", r#"{"uids":[]}"#),
            400,
            "INVALID_REQUEST",
        ),
        (
            post("/v1/next-batch", r#"{"uids":[-1]}"#),
            400,
            "INVALID_REQUEST",
        ),
        (post("/v1/next-batch", &many), 400, "INVALID_REQUEST"),
        (post("/v1/next-batch", &huge), 413, "TOO_LARGE"),
    ];
    for (req, status, kind) in cases {
        let shown = String::from_utf8_lossy(&req[..req.len().min(60)]).into_owned();
        let (st, head, body) = http_raw(&http, &req).await;
        assert_eq!(st, status, "{shown}: {head}\n{body}");
        assert_eq!(kind_of(&body), kind, "{shown}: {body}");
        if status == 405 {
            assert!(head.to_ascii_lowercase().contains("allow: "), "{head}");
        }
    }
    assert_eq!(
        (cur(5), cur(15)),
        before,
        "a refused request handed out nothing"
    );
    a1.shutdown();
    a2.shutdown();
}

/// A retryable error is 503 with `Retry-After` and the delay in the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_error_says_when_to_retry() {
    let (a1, a2, http) = pair().await;
    a2.shutdown();
    // a2's sections are routed to a dead AllocSvr until the store moves
    // them: forwarding ends `OWNER_UNAVAILABLE`.
    let (st, head, body) = http_raw(&http, &get("/v1/next/25", "*/*")).await;
    assert_eq!(
        (st, kind_of(&body).as_str()),
        (503, "OWNER_UNAVAILABLE"),
        "{body}"
    );
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["retryable"], true);
    assert!(v["error"]["retry_after_ms"].as_u64().unwrap() > 0);
    a1.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_gets_numbers_and_typed_errors() {
    let have_curl = std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_curl {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(
            !ci,
            "curl is not installed; CI is set, so this is a failure"
        );
        return eprintln!("skipped: curl is not installed");
    }
    let (a1, a2, http) = pair().await;
    let curl = |args: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(["-s", "--max-time", "5"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let url = |p: &str| format!("http://{http}{p}");
    let (u1, u2) = (url("/v1/next/25"), url("/v1/next-batch"));
    let first: u64 = tokio::task::block_in_place(|| curl(&[&u1]))
        .trim()
        .parse()
        .unwrap();
    let json = tokio::task::block_in_place(|| curl(&["-H", "Accept: application/json", &u1]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["seq"].as_u64().unwrap() > first, "{json}");
    let batch =
        tokio::task::block_in_place(|| curl(&["-X", "POST", "-d", r#"{"uids":[5,25]}"#, &u2]));
    assert!(batch.starts_with(r#"{"seqs":["#), "{batch}");
    let bad = tokio::task::block_in_place(|| curl(&[&url("/v1/next/x")]));
    assert_eq!(kind_of(&bad), "INVALID_REQUEST");
    a1.shutdown();
    a2.shutdown();
}
