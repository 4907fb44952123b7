//! What the gRPC services share with the node's background tasks
//! (renewal, route sync, handoffs): the allocator, the lease, the route
//! table, the fence, and the [`Ownership`] lock that orders every change to
//! which sections this process serves outside the hot path.
//!
//! [`node`](crate::node) builds one [`Shared`] per process; the services of
//! [`service`](crate::service) answer from it, and
//! [`handoff`](crate::handoff) releases and adopts sections through it.
//! The mapping of errors to statuses stays with the services
//! ([`Shared::status`], in `service.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use seqsvr_core::{AllocId, Incarnation, SectionId};
use seqsvr_net::ClientTls;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::{AllocAddrs, PeerClient};
use tokio::sync::Notify;
use tonic::transport::Channel;

use crate::allocator::Allocator;
use crate::control::Control;
use crate::error::CallError;
use crate::lease::Lease;
use crate::metrics::AllocMetrics;
use crate::ownership::{admit, may_act_on_read, release_moved, NotAdmitted};

/// Peer channels by address.
pub type PeerChannels = std::sync::Mutex<HashMap<String, Channel>>;

/// Who may change which sections this process serves, outside the hot
/// path: the control loop ([`Control`]: renewals' reconciliation, route
/// reads, releasing marks, lapse counting), handoffs settling a section,
/// adopts installing one, and fencing all act under this lock, so none of
/// them acts on a lease lapse it did not see (promise 3; see
/// [`Shared::may_serve`]).
pub type Ownership = Control;

/// A planned stop asked for over the admin plane: asked once, heard by
/// the one task that stops the node.
#[derive(Debug, Default)]
pub struct StopAsked {
    asked: AtomicBool,
    notify: tokio::sync::Notify,
}

impl StopAsked {
    /// Asks for the stop; whether it had been asked already.
    pub fn ask(&self) -> bool {
        let before = self.asked.swap(true, Ordering::AcqRel);
        if !before {
            self.notify.notify_one();
        }
        before
    }

    /// Returns once the stop is asked for.
    pub async fn wait(&self) {
        if self.asked.load(Ordering::Acquire) {
            return;
        }
        self.notify.notified().await;
    }
}

/// What the services share with the node's background tasks.
#[derive(Debug)]
pub struct Shared {
    /// The sections served.
    pub alloc: Arc<Allocator>,
    /// The version of the route table below (read on every reply).
    pub route_version: AtomicU64,
    /// The route table as last read from the store (served by `Routes`;
    /// errors name its version and, for not-owner, the section's owner).
    pub routes: RwLock<Arc<pb::RouteTable>>,
    /// How long a call may wait for an exhausted section's raise.
    pub wait: Duration,
    /// This AllocSvr's lease.
    pub lease: Lease,
    /// Whether the store says this AllocSvr is being drained.
    pub draining: AtomicBool,
    /// Set when this process stops (SIGTERM): it hands its sections over
    /// and takes none; reported as draining so peers hand it nothing.
    pub stopping: AtomicBool,
    /// A planned stop asked over the admin plane (`AllocAdmin.Drain`, a
    /// preStop hook's `seqsvr alloc drain --self`): the process's main
    /// task waits on it beside SIGTERM ([`crate::node::AllocNode::stop_asked`]).
    pub stop_asked: StopAsked,
    /// Set once the store says this incarnation was replaced or fenced:
    /// nothing is served again by this process (promise 3).
    pub fenced: AtomicBool,
    /// Our id.
    pub id: AllocId,
    /// Our advertised addresses, one per plane.
    pub addrs: AllocAddrs,
    /// The store's peer plane (handoffs, section reads); each use sets its
    /// own deadline.
    pub store: PeerClient,
    /// TLS for dialing other AllocSvrs (adopt), if any.
    pub client_tls: Option<ClientTls>,
    /// The control loop: the section list, releasing marks, lease lapses
    /// seen, the renewal cycle, the fence (`control/`).
    pub ownership: Mutex<Ownership>,
    /// Channels to other AllocSvrs' peer planes, by address (adopts).
    pub peers: PeerChannels,
    /// What this process counts.
    pub metrics: Arc<AllocMetrics>,
    /// Wakes the renewal loop early: routes newly ours, or a section left
    /// dropped after a failed handoff that a take-over must claim again.
    pub renew_now: Notify,
}

impl Shared {
    /// This process's incarnation.
    pub fn incarnation(&self) -> Incarnation {
        self.alloc.incarnation()
    }

    /// Whether the lease is valid right now (promise 3: an AllocSvr whose
    /// lease ran out stops serving at once).
    #[inline]
    pub fn lease_ok(&self) -> bool {
        self.lease.valid_at(std::time::Instant::now())
    }

    /// Whether this process was replaced or fenced.
    #[inline]
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Whether a call that reads or hands out numbers may be served: only
    /// with a valid lease, and never once fenced (promise 3). The hot
    /// path's whole check: a clock read and two atomic loads.
    #[inline]
    pub fn admitted(&self) -> bool {
        admit(self.lease_ok(), self.is_fenced()).is_ok()
    }

    /// [`admitted`](Self::admitted), with the reason when not.
    pub fn admit(&self) -> Result<(), CallError> {
        if self.admitted() {
            Ok(())
        } else {
            Err(self.not_admitted())
        }
    }

    /// Why a call is not admitted (fenced, else lease expired).
    #[cold]
    pub fn not_admitted(&self) -> CallError {
        match admit(self.lease_ok(), self.is_fenced()) {
            Err(NotAdmitted::Fenced) => CallError::Fenced {
                alloc: self.id.clone(),
                incarnation: self.incarnation(),
            },
            // Or admitted again meanwhile (a renewal landed): the call was
            // refused for the lease.
            Err(NotAdmitted::LeaseExpired) | Ok(()) => CallError::LeaseExpired {
                alloc: self.id.clone(),
            },
        }
    }

    /// Time left on the lease (negative once expired), in ms.
    pub fn lease_left_ms(&self) -> i64 {
        self.lease.left_ms(std::time::Instant::now())
    }

    /// The ownership lock (a panic elsewhere cannot leave it torn: every
    /// change under it is a single map insert/remove or counter bump).
    pub fn ownership(&self) -> MutexGuard<'_, Ownership> {
        self.ownership.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a decision taken from a store read made when the lapse
    /// count was `lapses_before` may be acted on now, under the ownership
    /// lock `own`: not fenced, the lease valid now, and no lapse seen since.
    /// Then the lease was valid all along since the read, so the store
    /// cannot have moved the section meanwhile (it moves sections only after
    /// the owner's lease has certainly expired; failover.md, Timing), and
    /// no renewal can drop it between this check and the action (promise 3).
    pub fn may_serve(&self, own: &Ownership, lapses_before: u64) -> bool {
        may_act_on_read(
            self.lease_ok(),
            self.is_fenced(),
            own.lapses(),
            lapses_before,
        )
    }

    /// Marks this process fenced and stops serving everything: the store
    /// says another incarnation holds our id ([`Effect::Fence`], performed
    /// under the ownership lock, `_own`). It never serves again; a restart
    /// registers a new incarnation.
    ///
    /// [`Effect::Fence`]: crate::control::Effect::Fence
    pub fn fence(&self, _own: &mut Ownership, why: &dyn std::fmt::Display) {
        if self.fenced.swap(true, Ordering::AcqRel) {
            return;
        }
        let dropped: Vec<SectionId> = self
            .alloc
            .served_sections()
            .into_iter()
            .filter(|&s| self.alloc.drop_section(s))
            .collect();
        tracing::error!(
            alloc = %self.id,
            incarnation = %format_args!("{:x}", self.incarnation()),
            dropped = dropped.len(),
            "this process was replaced or fenced in the store ({why}): every section dropped, \
             renewals stopped; it answers every call UNAVAILABLE from now on and must be restarted"
        );
    }

    /// Installs a newer route table.
    pub fn set_routes(&self, t: pb::RouteTable) {
        let v = t.version;
        *self.routes.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
        self.route_version.store(v, Ordering::Release);
    }

    /// The route table as last read (a copy, for `Routes`).
    pub fn route_table(&self) -> pb::RouteTable {
        (*self.routes()).clone()
    }

    /// The route table as last read, shared (no copy: what an error
    /// detail reads its few facts from).
    pub fn routes(&self) -> Arc<pb::RouteTable> {
        self.routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The route table's version (read on every reply).
    pub(crate) fn version(&self) -> u64 {
        self.route_version.load(Ordering::Acquire)
    }

    /// Reads this AllocSvr's state into its metrics and renders them all,
    /// for a scrape ([`AllocMetrics::render`]).
    pub fn render_metrics(&self) -> String {
        self.metrics.render(
            &self.alloc,
            self.lease_left_ms(),
            self.draining.load(Ordering::Relaxed),
            self.fenced.load(Ordering::Relaxed),
            self.route_version.load(Ordering::Relaxed),
        )
    }

    /// Stops serving every listed section it serves (they were frozen in
    /// the store for a move to another set) and returns how many it
    /// served. Under the ownership lock, so no adopt or renewal installs
    /// one half way; serving one again would need a new grant, which the
    /// store never gives a frozen section (docs/architecture/sets.md).
    pub fn release(&self, sections: &[pb::SectionEpoch]) -> u32 {
        let _own = self.ownership();
        let sections = sections.iter().map(|s| (s.section, s.epoch));
        let released = release_moved(&self.alloc, sections).len() as u32;
        if released > 0 {
            tracing::info!(released, "released sections frozen for a move");
        }
        released
    }

    /// This AllocSvr's own view, for `Status` on the client and admin planes.
    pub fn alloc_status(&self) -> pb::AllocStatus {
        pb::AllocStatus {
            alloc_id: self.id.clone(),
            addr: self.addrs.client.clone(),
            lease_left_ms: self.lease_left_ms(),
            sections: self.alloc.served_sections(),
            route_version: self.version(),
            draining: self.draining.load(Ordering::Relaxed)
                || self.stopping.load(Ordering::Relaxed),
            incarnation: self.incarnation(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// The run of the route table that names `section`'s owner, if any.
pub(crate) fn entry_of(t: &pb::RouteTable, section: SectionId) -> Option<&pb::RouteEntry> {
    let i = t
        .entries
        .partition_point(|e| e.first_section as u64 + e.count as u64 <= section as u64);
    t.entries.get(i).filter(|e| e.first_section <= section)
}
