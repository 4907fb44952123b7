//! The size of a refusal does not grow with the route table.
//!
//! A `NOT_OWNER` (and `MOVED`, `NOT_SERVED`, `LEASE_EXPIRED`…) names the
//! section's owner and the route version, never the table: a request of
//! ten bytes must not buy a reply as large as the table (a table of 10^4
//! runs, each with an id and an address, is hundreds of kilobytes). The
//! AllocSvr's own mapping of errors to statuses ([`Shared::status`]) is
//! called with tables of growing size and the encoded status details
//! (what goes on the wire in `grpc-status-details-bin`) are measured.
//!
//! `cargo test -p seqsvr-alloc --test refusal_size -- --nocapture` prints
//! the sizes (`docs/benchmarks.md`, Refusal size).

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use seqsvr_alloc::lease::Lease;
use seqsvr_alloc::metrics::AllocMetrics;
use seqsvr_alloc::shared::{Ownership, Shared};
use seqsvr_alloc::{AllocConfig, AllocError, Allocator, CallError};
use seqsvr_core::SetSpec;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::client::{plaintext, AllocAddrs};
use seqsvr_store_api::PeerClient;
use tokio::sync::Notify;

/// A set of `sections` sections of 10 uids.
fn spec(sections: u64) -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: sections * 10,
        section_size: 10,
        step: 1000,
    }
}

/// A route table of `sections` runs of one section each, alternating
/// between 100 AllocSvrs (the largest table a set of this size can have).
fn table(sections: u32) -> pb::RouteTable {
    let entries = (0..sections)
        .map(|s| pb::RouteEntry {
            first_section: s,
            count: 1,
            alloc_id: format!("alloc-{:03}", s % 100),
            addr: format!("10.0.{}.{}:7201", s % 100 / 10, s % 10),
        })
        .collect();
    pb::RouteTable {
        version: 7,
        set: Some(pb::SetSpec::from(&spec(sections as u64))),
        entries,
        placement: Vec::new(),
        directory: None,
    }
}

/// An AllocSvr's shared state serving nothing, believing `t`.
fn shared(t: pb::RouteTable, sections: u64) -> Shared {
    let alloc = Allocator::new(spec(sections), &AllocConfig::default()).unwrap();
    let addrs = AllocAddrs {
        client: "10.0.9.9:7201".into(),
        peer: "10.0.9.9:7202".into(),
        admin: "10.0.9.9:7203".into(),
    };
    Shared {
        alloc: Arc::new(alloc),
        route_version: AtomicU64::new(t.version),
        routes: RwLock::new(Arc::new(t)),
        wait: Duration::from_millis(10),
        lease: Lease::new(std::time::Instant::now()),
        draining: AtomicBool::new(false),
        stopping: AtomicBool::new(false),
        stop_asked: Default::default(),
        fenced: AtomicBool::new(false),
        lease_lapses: Default::default(),
        id: "alloc-999".into(),
        addrs,
        store: PeerClient::new(&["127.0.0.1:9".into()], &plaintext()).unwrap(),
        client_tls: None,
        ownership: Mutex::new(Ownership::default()),
        peers: Default::default(),
        metrics: AllocMetrics::new("alloc-999").unwrap(),
        renew_now: Notify::new(),
    }
}

/// Bytes of the status details a `NOT_OWNER` for section 5 puts on the
/// wire, and of a `LEASE_EXPIRED`, with a table of `sections` runs.
fn refusal_bytes(sections: u32) -> (usize, usize) {
    let s = shared(table(sections), sections as u64);
    let not_owner = s.status(&CallError::Alloc(AllocError::NotOwner { section: 5 }));
    let lease = s.status(&CallError::LeaseExpired {
        alloc: "alloc-999".into(),
    });
    (not_owner.details().len(), lease.details().len())
}

#[tokio::test]
async fn a_refusal_stays_small_whatever_the_table_size() {
    let mut sizes = Vec::new();
    for n in [10u32, 100, 1_000, 10_000] {
        let (not_owner, lease) = refusal_bytes(n);
        let table = prost::Message::encoded_len(&table(n));
        println!(
            "sections {n:>6}: route table {table:>7} B; NOT_OWNER details {not_owner:>4} B; \
             LEASE_EXPIRED details {lease:>4} B"
        );
        sizes.push((n, not_owner, lease));
    }
    let (_, small, small_lease) = sizes[0];
    for &(n, not_owner, lease) in &sizes {
        // The same facts whatever the table: only the number widths vary.
        assert!(
            not_owner <= small + 8 && not_owner < 512,
            "NOT_OWNER with {n} sections: {not_owner} B (10 sections: {small} B)"
        );
        assert!(
            lease <= small_lease + 8 && lease < 512,
            "LEASE_EXPIRED with {n} sections: {lease} B (10 sections: {small_lease} B)"
        );
    }
}

#[tokio::test]
async fn a_not_owner_names_the_owner_and_the_route_version() {
    let s = shared(table(1_000), 1_000);
    let st = s.status(&CallError::Alloc(AllocError::NotOwner { section: 42 }));
    let d = seqsvr_proto::detail_of(&st).unwrap();
    assert_eq!(d.kind, pb::ErrorKind::NotOwner as i32);
    assert_eq!((d.section, d.has_section, d.retryable), (42, true, true));
    assert_eq!(d.route_version, 7);
    assert_eq!(
        (d.owner_alloc.as_str(), d.owner_addr.as_str()),
        ("alloc-042", "10.0.4.2:7201")
    );
    assert_eq!(d.set.map(|s| s.uid_end), Some(10_000));
    #[allow(deprecated)]
    let route = d.route;
    assert_eq!(route, None, "the table is never attached");
    // What a client that knows only the standard ErrorInfo reads.
    let (reason, meta) = seqsvr_proto::status::error_info_of(&st).unwrap();
    assert_eq!(reason, "NOT_OWNER");
    assert_eq!(meta["owner_addr"], "10.0.4.2:7201");
    assert_eq!(meta["route_version"], "7");
}
