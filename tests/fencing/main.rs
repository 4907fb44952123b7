//! Fencing against ghosts, twins and forgeries, on real processes.
//!
//! Every case first checks that the attack is refused with a typed error
//! and changes nothing, then runs the per-uid checker over every number
//! clients received meanwhile (a workload runs through every attack) plus
//! a burst afterwards: 0 repeats, 0 regressions (promise 1).
//!
//! 1. forged `AllocPeer.Adopt`s at an AllocSvr (promises 3, 5);
//! 2. delayed genuine adopts, replayed after the section moved on, also to
//!    a restarted receiver (3);
//! 3. `StorePeer.Handoff` of a live owner's section asked by someone else
//!    (3);
//! 4. a twin process with a live AllocSvr's id (3);
//! 5. `current` from an owner resumed after its lease and its sections
//!    moved (1);
//! 6. shorter lease terms and a store leader change while an AllocSvr
//!    still holds a lease granted under the longer ones (3);
//! 7. renewals, take-overs and raises in another AllocSvr's name, without
//!    and with TLS (3, 4, 5);
//! 8. gray failures: the store replica the AllocSvrs talk to paused for
//!    twice the lease, leader and follower (3, and availability).
//!
//! Each test says how it was shown to fail: the protecting rule was
//! switched off in a scratch copy of the code and the test run against it.
//!
//! The cases are modules under `tests/fencing/` (adopts: 1–2;
//! handoffs_twins: 3–5; leases: 6; names: 7; gray: 8); this file holds
//! the cluster set-up and helpers they share.
//!
//! The tests run one at a time: several clusters at once on a small
//! machine would measure the machine, and cases 6 and 8 are about timing.

use std::time::{Duration, Instant};

use attack::{
    alloc_lease, burst, channel, direct_next, eventually, kind, start_load, uid, uids_of, Cluster,
    Options, Outcome, StoreOrder, SECTIONS, STEP,
};
use seqsvr_client::SeqClient;
use seqsvr_core::checker::{Kind, Observation};
use seqsvr_core::LeaseTerms;
use seqsvr_proto::alloc_admin_client::AllocAdminClient;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::alloc_peer_client::AllocPeerClient;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::{Error, Rejection};
use seqsvr_testkit::{self as kit, attack, Bins};
use seqsvr_testkit::{assert_monotonic, SetCluster, TEST_RENEW_MS};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Lease + margin of the test clusters (`kit::test_lease`).
const EXPIRY: Duration = kit::TEST_EXPIRY;
/// The test clusters' lease.
const LEASE: Duration = Duration::from_millis(2000);

/// A plaintext 3-store, 2-alloc cluster serving every section (alloc-1:
/// sections 0..4, alloc-2: 4..8), and a client.
async fn ready() -> (SetCluster, SeqClient) {
    let cluster = SetCluster::start(BINS, attack::set(), 2);
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    (cluster, c)
}

fn plain(addr: &str) -> tonic::transport::Channel {
    channel(addr, None, Duration::from_secs(5))
}

/// Sends an adopt of `sections` to the AllocSvr whose peer plane is at
/// `peer`.
async fn adopt(peer: &str, sections: &[(u32, u64)]) -> Result<u32, tonic::Status> {
    let mut c = AllocPeerClient::new(plain(peer));
    let req = pb::AdoptRequest {
        sections: sections
            .iter()
            .map(|&(section, epoch)| pb::Adopted { section, epoch })
            .collect(),
    };
    c.adopt(req).await.map(|r| r.into_inner().installed)
}

/// Hands `section` from the AllocSvr whose admin plane is at `admin` to
/// `to`, as an operator's drain does.
async fn hand_off(admin: &str, section: u32, to: &str) -> pb::MoveResult {
    let mut c = AllocAdminClient::new(plain(admin));
    let req = pb::AllocHandoffRequest {
        moves: vec![pb::Move {
            section,
            to_alloc: to.into(),
        }],
    };
    let mut r = c.handoff(req).await.unwrap().into_inner().results;
    r.remove(0)
}

/// The sections an AllocSvr says it serves (its client plane's status).
async fn served(addr: &str) -> Vec<u32> {
    let mut c = AllocClient::new(plain(addr));
    let mut s = c
        .status(pb::AllocStatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .sections;
    s.sort();
    s
}

fn shown(r: &Result<u32, tonic::Status>) -> String {
    match r {
        Ok(n) => format!("OK, installed {n}"),
        Err(st) => format!("{:?} {:?}", st.code(), kind(st)),
    }
}

/// Owner and epoch of every section, from the store.
async fn owners(read: &seqsvr_store_api::ReadClient) -> Vec<(Option<String>, u64)> {
    read.read_sections(0, SECTIONS)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.record.owner, s.record.epoch))
        .collect()
}

mod adopts;
mod gray;
mod handoffs_twins;
mod leases;
mod names;
