//! Strangers, wrong certificates, replays, oversized messages, floods and
//! operators' config mistakes, against real processes
//! (`docs/architecture/security.md`, the threat model).
//!
//! 1. Every listener of a TLS cluster (store client/peer/admin, AllocSvr
//!    client/peer/admin) gets every call of every service, from callers
//!    without a certificate, with a wrong role, with the right role and
//!    another id, with another CA's certificate, in plaintext, and with
//!    genuine messages of alloc-1 replayed under alloc-2's certificate:
//!    each is refused with a typed status or its handshake fails, nothing
//!    changes, and numbers keep going up (promises 1, 3, 5).
//! 2. Oversized messages on every plane get RESOURCE_EXHAUSTED; an
//!    oversized AllocSvr id at the store gets INVALID_ARGUMENT; the group
//!    stays alive (promise 5, liveness).
//! 3. Floods: many unfinished streams on one connection, thousands of idle
//!    connections, many TLS handshakes never completed; RSS stays bounded
//!    and the process keeps serving. A flood of cheap reads on the client
//!    planes of the store leader and of an AllocSvr, at their connection
//!    caps, for four leases: no lease lapses.
//! 4. Config mistakes: the process exits non-zero naming the file and key.
//!
//! Each test says how it was shown to fail: the protecting rule was
//! switched off in a scratch copy of the code and the test run against it.
//!
//! Each part is a module of its own under `tests/adversary/` (callers,
//! oversized, floods, renewals, config); this file holds what they share.
//!
//! The tests run one at a time (a flood measures memory; several clusters
//! at once on a small machine would measure the machine).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use attack::{
    alloc_lease, burst, channel, peak_rss_during, rss_kib, start_load, Cluster, Options, Outcome,
    Retarget, SECTIONS,
};
use seqsvr_core::checker::Observation;
use seqsvr_proto::alloc_admin_client::AllocAdminClient;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::alloc_peer_client::AllocPeerClient;
use seqsvr_proto::raft_client::RaftClient;
use seqsvr_proto::store_admin_client::StoreAdminClient;
use seqsvr_proto::store_peer_client::StorePeerClient;
use seqsvr_proto::store_read_client::StoreReadClient;
use seqsvr_proto::store_sets_client::StoreSetsClient;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::SectionInfo;
use seqsvr_testkit::{self as kit, attack, Bins};
use seqsvr_testkit::{assert_monotonic, SetCluster};
use tonic::transport::Channel;
use tonic::Code;

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

mod callers;
mod config;
mod floods;
mod oversized;
mod renewals;
