//! `seqctl id create` against real processes (docs/ids.md, Operations):
//! a custom layout from flags on top of a preset, printed with the date
//! its time bits run out; the same create again is a success that changes
//! nothing; another layout for the namespace is refused; bad input is
//! refused with the reason and creates nothing; ids of a scattered
//! namespace come back through `seqctl id next` and decode through
//! `seqctl id decode` and `seqctl id show`.

use std::time::{Duration, Instant};

use seqsvr_core::ids::Layout;
use seqsvr_core::SetSpec;
use seqsvr_testkit::Bins;
use seqsvr_testkit::SetCluster;

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// `seqctl` against the cluster's store (client and admin planes) and
/// AllocSvrs: success, standard output, standard error.
fn seqctl(cl: &SetCluster, args: &[&str]) -> (bool, String, String) {
    let allocs = cl.alloc_addrs.join(",");
    let r = cl.seqctl(&[&["--alloc", &allocs][..], args].concat());
    (r.ok(), r.out, r.err)
}

/// `seqctl` with no cluster named: success, standard output, standard
/// error.
fn seqctl_offline(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(BINS.seqctl)
        .args(args)
        .output()
        .unwrap();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    println!("seqctl {args:?}: {:?}\n{o}{e}", out.status.code());
    (out.status.success(), o, e)
}

/// `seqctl id show --json`: the namespaces, as JSON.
fn shown(cl: &SetCluster) -> serde_json::Value {
    let (ok, out, err) = seqctl(cl, &["id", "show", "--json"]);
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

const CUSTOM: &[&str] = &[
    "--preset",
    "twitter",
    "--time-bits",
    "39",
    "--shard-bits",
    "2",
    "--unit",
    "1ms",
    "--epoch",
    "2024-01-01",
    "--window-ms",
    "2000",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_is_validated_idempotent_and_scattered_ids_decode() {
    let set = SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: 3000,
        section_size: 1000,
        step: 500,
    };
    let cl = SetCluster::start(BINS, set, 3);
    cl.store.wait_ready(Duration::from_secs(30)).await;
    // Every AllocSvr registered (the store counts them for worker bits).
    let client = cl.client().await;
    cl.wait_serving(&client).await;

    let create = |extra: &[&str]| {
        let mut a = vec!["id", "create", "msgs"];
        a.extend_from_slice(extra);
        seqctl(&cl, &a)
    };
    // A custom layout: printed with its run-out date.
    let start = Instant::now();
    let (ok, out, err) = loop {
        let r = create(CUSTOM);
        if r.0 || start.elapsed() > Duration::from_secs(20) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(ok, "{err}");
    assert!(out.contains("msgs: created"), "{out}");
    assert!(
        out.contains("time=39 worker=10 seq=12 shard=2 unit=1ms epoch=2024-01-01T00:00:00.000Z"),
        "{out}"
    );
    assert!(out.contains("runs_out=2041-06-02T21:56:53.888Z"), "{out}");
    // The same again: success, nothing changed.
    let (ok, out, err) = create(CUSTOM);
    assert!(ok, "{err}");
    assert!(out.contains("msgs: exists already"), "{out}");
    let before = shown(&cl);

    // Another layout for it: refused, and it keeps its own.
    let mut other = CUSTOM.to_vec();
    other[3] = "38";
    let (ok, _, err) = create(&other);
    assert!(!ok);
    assert!(err.contains("exists with"), "{err}");

    // Bad input: refused with the reason; nothing created, nothing changed.
    let bad: &[(&[&str], &str)] = &[
        (&["--time-bits", "42"], "64 bits in all; at most 63"),
        (&["--js-safe"], "at most 53 for a JavaScript-safe layout"),
        (
            &["--shard-bits", "16", "--time-bits", "20"],
            "shard bits must be within 1..=15",
        ),
        (&["--unit", "3ms"], "--unit \"3ms\""),
        (&["--unit", "1000"], "--unit \"1000\""),
        (&["--epoch", "2999-01-01"], "is in the future"),
        (&["--epoch", "2024-02-30"], "--epoch \"2024-02-30\""),
        (&["--time-bits", "30"], "ran out at"),
        (&["--holders", "2000"], "hold only 1024 worker ids"),
        (&["--preset", "uuid"], "unknown layout"),
        // Checked by the store: three AllocSvrs are registered.
        (
            &["--worker-bits", "1"],
            "the 3 registered AllocSvrs need 2 worker bits",
        ),
        (&["--window-ms", "0"], "window must be within"),
    ];
    for (flags, why) in bad {
        let mut a = vec!["id", "create", "bad"];
        a.extend_from_slice(flags);
        let (ok, _, err) = seqctl(&cl, &a);
        assert!(!ok, "{flags:?} accepted");
        assert!(err.contains(why), "{flags:?}: {err}");
    }
    // The epoch is checked by the store too, whatever the client says.
    let future = Layout {
        epoch_ms: 32_503_680_000_000, // 3000-01-01
        ..Layout::twitter()
    };
    let r = cl.store.admin().create_id_space("bad", &future, 1000).await;
    assert!(
        r.as_ref()
            .is_err_and(|e| e.to_string().contains("in the future")),
        "{r:?}"
    );
    assert_eq!(shown(&cl), before, "a refused create changed something");
    assert_eq!(before.as_array().unwrap().len(), 1, "{before}");
    assert_eq!(before[0]["layout"]["shard_bits"], 2);

    // Ids of the scattered namespace, through the AllocSvrs: spread over
    // the shards, and decoded (shard bits taken off) to their worker id.
    let (ok, out, err) = seqctl(&cl, &["id", "next", "msgs", "--count", "200"]);
    assert!(ok, "{err}");
    let ids: Vec<u64> = out.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(ids.len(), 200);
    let shards: std::collections::BTreeSet<u64> = ids.iter().map(|id| id >> 61).collect();
    assert_eq!(shards.len(), 4, "200 ids over {shards:?}");
    let (ok, out, err) = seqctl(
        &cl,
        &["id", "decode", &ids[7].to_string(), "--namespace", "msgs"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("namespace=msgs time=20"), "{out}");
    assert!(out.contains("worker="), "{out}");
    // Offline, by the same custom layout given as flags: the same parts,
    // no cluster asked.
    let by_ns = out.trim().trim_start_matches("namespace=msgs ").to_string();
    let id7 = ids[7].to_string();
    let mut a = vec!["id", "decode", id7.as_str()];
    // The layout's flags, without create's window.
    a.extend(
        CUSTOM
            .chunks(2)
            .filter(|f| f[0] != "--window-ms")
            .flatten()
            .copied(),
    );
    let (ok, out, err) = seqctl_offline(&a);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), by_ns, "offline decode by flags");
    // A forged shard: not an id of the namespace.
    let forged = (ids[7] ^ (1 << 61)).to_string();
    let (ok, _, err) = seqctl(&cl, &["id", "decode", &forged, "--namespace", "msgs"]);
    assert!(!ok);
    assert!(err.contains("is not an id of this layout"), "{err}");
    let (ok, out, _) = seqctl(&cl, &["id", "show", "msgs"]);
    assert!(ok && out.contains("shard=2"), "{out}");
}
