//! A planned stop (SIGTERM, `seqsvr dev`'s Ctrl-C): hand every section to
//! a live peer of the set with planned handoffs (`handoff.rs`), then
//! record the stop in the store, so that nothing waits out this process's
//! lease: not the sections a last AllocSvr could not hand over, not this
//! AllocSvr's next process.
//!
//! The sequence (`docs/operations.md`, Stopping an AllocSvr):
//! 1. mark this process stopping: its `Status` says draining, so a peer
//!    that stops at the same time hands it nothing;
//! 2. ask the store leader which AllocSvrs of the set hold a live lease,
//!    and keep those whose client plane answers `Status` and is neither
//!    draining nor stopping;
//! 3. hand each served section to the least loaded of them, one planned
//!    handoff each (the section is unavailable for the few milliseconds of
//!    its own move only); a section a failed handoff left ours is tried
//!    again while time is left;
//! 4. stop renewing, polling routes and raising (nothing is claimed from
//!    here on), and stop serving what is left;
//! 5. record the stop (`StorePeer.Stopped`): the store gives every section
//!    the id still owns a new epoch and no incarnation, and leaves the id
//!    with no live incarnation — the next process of the id registers at
//!    once and claims them back, or the arbiter routes them elsewhere at
//!    once;
//! 6. the listeners close.
//!
//! The handoffs are bounded ([`STOP_HANDOFF_BOUND`] or the caller's), and
//! so is the record ([`STOP_RECORD_BOUND`]): a stop that cannot finish in
//! time (no live peer, a store without a leader) still exits, and says in
//! its log that what is left moves once the lease ends, as after a crash
//! (promise 3). Step 4 comes before step 5, so the store never frees a
//! section this process still serves.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use seqsvr_core::SectionId;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb};

use seqsvr_store_api::{Error as StoreError, Rejection};

use crate::handoff;
use crate::shared::Shared;

use super::AllocNode;

/// How long a stop may spend handing sections over before it exits
/// anyway. Well below Kubernetes' default grace period (30 s) and the
/// manifests' (`deploy/k8s`).
pub const STOP_HANDOFF_BOUND: Duration = Duration::from_secs(10);

/// How long recording the stop in the store may take (step 5).
pub const STOP_RECORD_BOUND: Duration = Duration::from_secs(2);

/// How long a peer's `Status` may take to say it is live.
const PEER_CHECK: Duration = Duration::from_millis(500);

/// What a stop did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopReport {
    /// Sections handed to a peer.
    pub handed_off: u32,
    /// Sections still held at exit: they move when the lease ends.
    pub left: Vec<SectionId>,
    /// The longest one section was unavailable during its handoff, µs.
    pub max_unavailable_us: u64,
    /// How long the handoffs took.
    pub took: Duration,
    /// Whether the store recorded the stop (sections left are then free at
    /// once, and the next process registers without waiting).
    pub recorded: bool,
    /// Worker ids of time-ordered ids released in the store.
    pub id_workers_released: usize,
}

/// A peer that may take sections.
struct Peer {
    id: String,
    sections: u32,
}

impl AllocNode {
    /// Returns once a planned stop was asked for over the admin plane
    /// (`AllocAdmin.Drain`): the caller then runs [`stop`](Self::stop),
    /// as on SIGTERM.
    pub async fn stop_asked(&self) {
        self.shared.stop_asked.wait().await
    }

    /// Stops this AllocSvr the planned way (module docs): hands its
    /// sections to live peers within `bound`, then stops serving.
    pub async fn stop(self, bound: Duration) -> StopReport {
        let shared = self.shared.clone();
        shared.stopping.store(true, Ordering::Release);
        let start = Instant::now();
        let mut report = StopReport::default();
        let work = hand_all(&self, &mut report);
        if tokio::time::timeout(bound, work).await.is_err() {
            tracing::warn!(
                ?bound,
                "stop: the handoffs did not finish in time; stopping anyway"
            );
        }
        report.took = start.elapsed();
        // 4. Nothing is claimed or extended from here on, and what is left
        //    is served no more.
        for t in &self.control {
            t.abort();
        }
        report.left = shared.alloc.served_sections();
        for &s in &report.left {
            shared.alloc.drop_section(s);
        }
        // Worker ids of time-ordered ids: nothing more is issued, and each
        // is released, so its next holder need not wait for the lease
        // (docs/ids.md). Recording the stop would free them too.
        if let Some(ids) = self.front.ids() {
            report.id_workers_released = ids.release_all(STOP_RECORD_BOUND).await;
        }
        // 5. The store frees what is left, and the id.
        report.recorded = record_stop(&shared).await;
        match (report.left.is_empty(), report.recorded) {
            (true, _) => tracing::info!(
                handed_off = report.handed_off,
                max_unavailable_ms = report.max_unavailable_us as f64 / 1000.0,
                took_ms = report.took.as_secs_f64() * 1000.0,
                recorded = report.recorded,
                "stop: every section handed to a live peer"
            ),
            (false, true) => tracing::info!(
                handed_off = report.handed_off,
                released = report.left.len(),
                "stop: {} sections released in the store: a peer or this AllocSvr's \
                 next process claims them at once",
                report.left.len()
            ),
            (false, false) => tracing::warn!(
                handed_off = report.handed_off,
                left = report.left.len(),
                lease_left_ms = shared.lease_left_ms(),
                "stop: {} sections neither handed over nor released; they are \
                 unavailable until this process's lease ends and the store moves them \
                 (as after a crash)",
                report.left.len()
            ),
        }
        self.shutdown();
        report
    }
}

/// Step 5: asks the store to record this incarnation's stop, within
/// [`STOP_RECORD_BOUND`]; whether it is recorded.
async fn record_stop(shared: &Shared) -> bool {
    if shared.fenced.load(Ordering::Acquire) {
        // The store refuses a fenced incarnation everything, its stop
        // too: its sections move once the lease ends.
        tracing::warn!("stop: not recorded, this process is fenced");
        return false;
    }
    let call = shared.store.stopped(&shared.id, shared.incarnation());
    match tokio::time::timeout(STOP_RECORD_BOUND, call).await {
        Ok(Ok(released)) => {
            tracing::info!(released, "stop: recorded in the store");
            true
        }
        // The store no longer admits this incarnation: a retried call
        // whose first try was applied (or a fence this process has not
        // heard of). Either way it holds nothing any more.
        Ok(Err(StoreError::Rejected(Rejection::StaleIncarnation { current: 0, .. }))) => {
            tracing::info!("stop: recorded in the store (by an earlier try)");
            true
        }
        Ok(Err(e)) => {
            tracing::warn!("stop: the store did not record the stop: {e}");
            false
        }
        Err(_) => {
            tracing::warn!(
                bound = ?STOP_RECORD_BOUND,
                "stop: the store did not record the stop in time"
            );
            false
        }
    }
}

/// Hands every served section over, pass after pass (a failed handoff can
/// leave a section ours, claimed again at a new epoch), until none is
/// left or no peer can take one.
async fn hand_all(node: &AllocNode, report: &mut StopReport) {
    let shared = &node.shared;
    loop {
        let served = shared.alloc.served_sections();
        if served.is_empty() {
            return;
        }
        let mut peers = live_peers(node).await;
        if peers.is_empty() {
            tracing::warn!(
                sections = served.len(),
                "stop: no live peer to hand sections to"
            );
            return;
        }
        let before = report.handed_off;
        let mut moved = Vec::new();
        for section in served {
            let peer = peers
                .iter_mut()
                .min_by_key(|p| (p.sections, p.id.clone()))
                .expect("peers");
            let m = pb::Move {
                section,
                to_alloc: peer.id.clone(),
            };
            // The peer is one the store's leader listed as live, neither
            // draining nor fenced (`live_peers`).
            let r = handoff::move_section(shared, &m, &handoff::Target::Ready).await;
            if r.ok {
                peer.sections += 1;
                report.handed_off += 1;
                report.max_unavailable_us = report.max_unavailable_us.max(r.unavailable_us);
            }
            moved.push(r);
        }
        handoff::log_handed_off(&moved);
        if report.handed_off == before {
            // Nothing moved this pass: wait for a renewal before the next.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The AllocSvrs of this set that may take sections: a live lease in the
/// store leader's view, not draining or fenced, and a client plane that
/// answers `Status` without saying draining (a peer stopping at the same
/// time says so; one that already exited does not answer).
async fn live_peers(node: &AllocNode) -> Vec<Peer> {
    let shared = &node.shared;
    let Some(status) = shared.store.leader_status().await else {
        tracing::warn!("stop: no store leader answered with the lease view");
        return Vec::new();
    };
    let mut peers = Vec::new();
    for a in &status.allocs {
        let leased = a.since_grant_ms >= 0 && (a.since_grant_ms as u64) < status.lease_ms;
        if a.alloc_id == shared.id || a.draining || a.expired || a.fenced || !leased {
            continue;
        }
        match peer_status(node, &a.addr).await {
            Ok(s) if !s.draining && s.lease_left_ms > 0 => peers.push(Peer {
                id: a.alloc_id.clone(),
                sections: s.sections.len() as u32,
            }),
            Ok(_) => tracing::info!(peer = %a.alloc_id, "stop: peer is draining or stopping"),
            Err(e) => tracing::info!(peer = %a.alloc_id, "stop: peer does not answer: {e}"),
        }
    }
    peers
}

/// A peer's own status, from its client plane.
async fn peer_status(node: &AllocNode, addr: &str) -> Result<pb::AllocStatus, String> {
    let tls = (node.shared.client_tls.clone()).map(|t| t.expecting(seqsvr_net::ServerRole::Alloc));
    let ch =
        seqsvr_net::client::channel(addr, tls.as_ref(), PEER_CHECK).map_err(|e| e.to_string())?;
    let mut c = AllocClient::new(ch);
    match tokio::time::timeout(PEER_CHECK, c.status(pb::AllocStatusRequest {})).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) => Err(s.message().to_string()),
        Err(_) => Err(format!("no answer within {PEER_CHECK:?}")),
    }
}
