//! Time-ordered ids in the simulation (docs/ids.md): the namespaces of a
//! run, the messages and timers id traffic adds to the model, and (in the
//! submodules) the id clients, the id faults and the checker.
//!
//! An id run ([`SimConfig::for_ids_seed`](crate::SimConfig::for_ids_seed))
//! is the ordinary run — both sets, their store groups, AllocSvrs,
//! clients, range moves and every fault — plus namespaces created in the
//! home set's store group, clients asking the home set's AllocSvrs for ids,
//! a wall clock per AllocSvr process (skewed, stepped back while running,
//! set back across a kill -9 and restart) and the id faults of
//! [`faults`]. What decides is the shipped code: the store's state
//! machine (`ClaimWorker`, `RaiseWorker`, `ReleaseWorker`) and its
//! `decision::worker_claim` under the arbiter's lock, the core's
//! `Generator`, and the AllocSvr's `ids::rules` (the generator a claim
//! starts, an issue, a raise's answer, the typed refusals). What is
//! modelled is when things happen (`alloc/ids.rs`: admission, claims, the
//! raiser's interval and back-off, waits for a raise, the planned stop's
//! releases).
//!
//! # Layout
//! - this file: the configuration ([`IdSim`]) and the model's id types;
//! - [`faults`]: the id faults and their schedule;
//! - `check`: the checker over every id issued;
//! - `client`: the id clients.

pub mod check;
pub(crate) mod client;
pub mod faults;

use seqsvr_core::ids::{Layout, Order};
use seqsvr_core::{AllocId, Epoch, Incarnation};
use seqsvr_store_core::command::Command;

use crate::net::{Node, Time};
use crate::rng::Rng;

pub use faults::IdFault;

/// Unix milliseconds at virtual time 0 on an AllocSvr's wall clock before
/// its skew (2026-01-01T00:00:00Z).
pub const WALL_START_MS: u64 = 1_767_225_600_000;

/// One namespace of an id run.
#[derive(Debug, Clone, PartialEq)]
pub struct IdSpaceSim {
    /// Its name.
    pub name: String,
    /// Its layout.
    pub layout: Layout,
    /// Its window, in ms.
    pub window_ms: u64,
}

/// The id part of a run: namespaces, clients, clocks and faults.
#[derive(Debug, Clone, PartialEq)]
pub struct IdSim {
    /// The namespaces, created in the home set's group at bootstrap.
    pub spaces: Vec<IdSpaceSim>,
    /// Id clients (asking the home set's AllocSvrs).
    pub clients: usize,
    /// Per AllocSvr process slot, its wall clock's skew at start, ms.
    pub skew_ms: Vec<i64>,
    /// The id faults, by time.
    pub faults: Vec<(Time, IdFault)>,
}

impl IdSim {
    /// Draws the id part of a run: two namespaces (one with 4 worker ids,
    /// one with 2 for 2–3 AllocSvrs and their twins, so holders race for
    /// them), windows of 200 ms – 2 s, skews within ±300 ms, the faults.
    pub(crate) fn draw(rng: &mut Rng, slots: usize, shape: &faults::IdShape) -> Self {
        let mut window = || [200, 500, 1000, 2000][rng.pick(4)];
        let layout = |worker_bits, seq_bits| Layout {
            time_bits: 41,
            worker_bits,
            seq_bits,
            epoch_ms: seqsvr_core::ids::layout::SEQSVR_EPOCH_MS,
            unit_ms: 1,
            js_safe: false,
            order: Order::TimeWorkerSeq,
        };
        let spaces = vec![
            IdSpaceSim {
                name: "msg".into(),
                layout: layout(2, 6),
                window_ms: window(),
            },
            IdSpaceSim {
                name: "order".into(),
                layout: layout(1, 4),
                window_ms: window(),
            },
        ];
        let skew_ms = (0..slots).map(|_| rng.range(0, 601) as i64 - 300).collect();
        let longest = spaces.iter().map(|s| s.window_ms).max().unwrap_or(1000);
        let faults = faults::generate(rng, shape, longest);
        IdSim {
            spaces,
            clients: 2,
            skew_ms,
            faults,
        }
    }

    /// The bootstrap commands creating the namespaces.
    pub(crate) fn create(&self) -> Vec<Command> {
        (self.spaces.iter())
            .map(|s| Command::CreateIdSpace {
                name: s.name.clone(),
                layout: s.layout,
                window_ms: s.window_ms,
            })
            .collect()
    }
}

/// A store call about worker ids (peer plane).
#[derive(Debug, Clone)]
pub(crate) enum IdReq {
    /// `ClaimWorker`: decided under the arbiter's lock
    /// (`decision::worker_claim`), then written.
    Claim {
        /// The namespace.
        ns: String,
        /// The claimant.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// Its wall clock, Unix ms.
        now_ms: u64,
    },
    /// `RaiseWorker` (a write).
    Raise {
        /// The namespace.
        ns: String,
        /// The worker id.
        worker: u64,
        /// The holder.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The holding's epoch.
        epoch: Epoch,
        /// The ceiling asked for, in ticks.
        to: u64,
    },
    /// `ReleaseWorker` (a write).
    Release {
        /// The namespace.
        ns: String,
        /// The worker id.
        worker: u64,
        /// The holder.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The holding's epoch.
        epoch: Epoch,
    },
}

impl IdReq {
    /// The command a raise or release writes as it is (a claim is decided
    /// under the lock first: `None`).
    pub(crate) fn command(&self) -> Option<Command> {
        match self.clone() {
            IdReq::Claim { .. } => None,
            IdReq::Raise {
                ns,
                worker,
                alloc,
                incarnation,
                epoch,
                to,
            } => Some(Command::RaiseWorker {
                ns,
                worker,
                alloc,
                incarnation,
                epoch,
                to,
            }),
            IdReq::Release {
                ns,
                worker,
                alloc,
                incarnation,
                epoch,
            } => Some(Command::ReleaseWorker {
                ns,
                worker,
                alloc,
                incarnation,
                epoch,
            }),
        }
    }
}

/// Which attempt of which id client call a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdOp {
    /// The client's node number.
    pub client: usize,
    /// The call.
    pub op: u64,
    /// The attempt.
    pub attempt: u32,
}

/// Why an AllocSvr issued no id (the retryable and typed errors of
/// `NextId`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdRefused {
    /// Not serving yet, or stopping.
    Unavailable,
    /// `LEASE_EXPIRED`.
    LeaseExpired,
    /// `STALE_INCARNATION`.
    Fenced,
    /// `CLOCK_BEHIND`, with how far behind.
    ClockBehind(u64),
    /// `ID_CEILING_REACHED` after the wait for a raise.
    Ceiling,
    /// `ID_WORKER_UNAVAILABLE`: the worker id was lost twice in a call.
    WorkerLost,
    /// `ID_REFUSED`: every worker id is held.
    Exhausted,
    /// The store did not answer the claim (`NO_LEADER`).
    StoreDown,
    /// Any other refusal (a model bug if it happens).
    Other,
}

/// Client ↔ AllocSvr id traffic.
#[derive(Debug)]
pub(crate) enum IdMsg {
    /// `Alloc.NextId { namespace, count }`.
    Req {
        /// The attempt.
        op: IdOp,
        /// The namespace (index into [`IdSim::spaces`]).
        ns: usize,
        /// How many ids.
        n: u32,
    },
    /// Its answer.
    Resp {
        /// The attempt.
        op: IdOp,
        /// The ids, or why none.
        result: Result<Vec<u64>, IdRefused>,
    },
}

/// An admitted id call, or one waiting for a claim or a raise.
#[derive(Debug, Clone)]
pub(crate) struct IdWork {
    /// The caller's attempt.
    pub op: IdOp,
    /// Who asked.
    pub from: Node,
    /// The namespace.
    pub ns: usize,
    /// How many ids.
    pub n: u32,
    /// It waited for a raise already.
    pub waited: bool,
}

/// An AllocSvr's id timers.
#[derive(Debug)]
pub(crate) enum IdTimer {
    /// The issue of an admitted call, a moment after its admission.
    Serve(IdWork),
    /// The raiser of namespace `ns` looks at its ceiling (the generation
    /// guards against stale timers).
    Raise(usize, u64),
    /// A call waiting for a raise gives up waiting.
    WaitDeadline(u64),
}

/// What an AllocSvr's id store call is for.
#[derive(Debug)]
pub(crate) enum IdPurpose {
    /// A claim in namespace `ns`, sent at this lease-lapse count.
    Claim(usize, u64),
    /// A raise of namespace `ns`'s holding at `epoch`, sent at this
    /// lease-lapse count.
    Raise(usize, Epoch, u64),
    /// A planned stop's release.
    Release,
}

/// An id client's timers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IdCTimer {
    /// Start the next call.
    Issue,
    /// An attempt got no answer in time.
    Timeout(u64, u32),
    /// Try the current call again.
    Retry(u64),
}

/// Id events of the world loop.
#[derive(Debug)]
pub(crate) enum IdEv {
    /// An id client's timer.
    Client(usize, IdCTimer),
    /// The `i`-th id fault.
    Fault(usize),
    /// Restart process slot `p` after a planned stop or a kill.
    Restart(usize),
}
