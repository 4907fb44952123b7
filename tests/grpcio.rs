//! A caller in another language, as a new user would write one: Python's
//! grpcio, stubs generated from `proto/` at test time, ONE address (the
//! first AllocSvr of a set of two, each owning half the sections), no
//! routing code. It asks for `Next`, `NextBatch` and `Current` for a uid
//! of every section, twice over, and every answer is checked: a number for
//! every uid, each later one larger (promise 1;
//! `docs/architecture/forwarding.md`, `docs/clients.md`).
//!
//! Skip or fail as the deploy suite does: without python3 with grpcio and
//! grpcio-tools the test prints why and passes, unless `CI` is set, where
//! it fails (`.ci/run` installs them).

use std::process::Command;
use std::time::Duration;

use seqsvr_core::SetSpec;
use seqsvr_testkit::deploy::{decide_here, Decision};
use seqsvr_testkit::Bins;
use seqsvr_testkit::SetCluster;

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// The caller: prints `next <uid> <seq>`, `batch <uid> <seq>` …, one per
/// line, or exits non-zero with the gRPC error.
const SCRIPT: &str = r#"
import sys
import grpc
sys.path.insert(0, sys.argv[1])
from seqsvr.v1 import alloc_pb2, alloc_pb2_grpc

addr, uids = sys.argv[2], [int(u) for u in sys.argv[3].split(",")]
stub = alloc_pb2_grpc.AllocStub(grpc.insecure_channel(addr))
for round in range(2):
    for uid in uids:
        print("next", uid, stub.Next(alloc_pb2.NextRequest(uid=uid), timeout=5).seq)
    seqs = stub.NextBatch(alloc_pb2.NextBatchRequest(uids=uids), timeout=5).seqs
    for uid, seq in zip(uids, seqs):
        print("batch", uid, seq)
    for uid in uids:
        print("current", uid, stub.Current(alloc_pb2.CurrentRequest(uid=uid), timeout=5).seq)
try:
    stub.Next(alloc_pb2.NextRequest(uid=10**12), timeout=5)
except grpc.RpcError as e:
    print("error", e.code().name)
"#;

/// Why python3 with grpcio and grpcio-tools cannot be used here.
fn missing() -> Option<String> {
    let ok = Command::new("python3")
        .args(["-c", "import grpc, grpc_tools.protoc"])
        .output()
        .is_ok_and(|o| o.status.success());
    (!ok).then(|| {
        "python3 with grpcio and grpcio-tools is not installed \
         (pip install grpcio grpcio-tools)"
            .to_string()
    })
}

/// Generates the Python stubs of `proto/` into `out`.
fn generate(out: &std::path::Path) {
    let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    // Every file of the package, so a new one imported by another is
    // never left out of the stubs.
    let mut files: Vec<_> = std::fs::read_dir(format!("{proto}/seqsvr/v1"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "proto"))
        .collect();
    files.sort();
    let gen = Command::new("python3")
        .args(["-m", "grpc_tools.protoc", "-I", proto])
        .arg(format!("--python_out={}", out.display()))
        .arg(format!("--grpc_python_out={}", out.display()))
        .args(&files)
        .output()
        .unwrap();
    assert!(
        gen.status.success(),
        "protoc: {}",
        String::from_utf8_lossy(&gen.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpcio_through_one_address_gets_every_uid() {
    match decide_here(missing) {
        Decision::Run => {}
        Decision::Skip(why) => return eprintln!("skipped: {why}"),
        Decision::Fail(why) => panic!("{why}"),
    }
    let set = SetSpec {
        section_size: 100,
        step: 200,
        ..SetSpec::new(0, 0..2000)
    };
    let cluster = SetCluster::start(BINS, set.clone(), 2);
    cluster.store.wait_ready(Duration::from_secs(30)).await;
    let client = cluster.client().await;
    cluster.wait_serving(&client).await;
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path());
    let script = dir.path().join("caller.py");
    std::fs::write(&script, SCRIPT).unwrap();
    // One uid of every section (a few inside each, not just the first).
    let uids: Vec<u64> = (0..set.section_count() as u64)
        .map(|s| s * 100 + s % 97)
        .collect();
    let list: Vec<String> = uids.iter().map(u64::to_string).collect();
    let out = Command::new("python3")
        .arg(&script)
        .arg(dir.path())
        .arg(&cluster.alloc_addrs[0])
        .arg(list.join(","))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python caller failed:\n{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        cluster.store.logs()
    );
    check(&stdout, &uids);
}

/// Every uid got a number from every call, each `next`/`batch` above the
/// one before for that uid, each `current` at least the last number.
fn check(out: &str, uids: &[u64]) {
    let mut last: std::collections::HashMap<u64, u64> = Default::default();
    let mut numbers = 0;
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["error", code] => assert_eq!(*code, "OUT_OF_RANGE", "{out}"),
            [op, uid, seq] => {
                let (uid, seq): (u64, u64) = (uid.parse().unwrap(), seq.parse().unwrap());
                let before = last.get(&uid).copied().unwrap_or(0);
                if *op == "current" {
                    assert!(seq >= before, "uid {uid}: current {seq} below {before}");
                } else {
                    assert!(seq > before, "uid {uid}: {op} {seq} not above {before}");
                    numbers += 1;
                }
                last.insert(uid, seq);
            }
            _ => panic!("unexpected line {line:?}"),
        }
    }
    assert_eq!(numbers, uids.len() * 4, "{out}");
    assert!(out.contains("error OUT_OF_RANGE"), "{out}");
    println!(
        "{numbers} numbers for {} uids through one address",
        uids.len()
    );
}
