//! The AllocSvr core: per-uid sequence numbers served from memory under
//! ceilings held by the store (`docs/architecture/overview.md`,
//! `docs/architecture/alloc.md`).
//!
//! Every uid of a section this AllocSvr owns has a `cur_seq` in a dense
//! in-memory array (8 bytes a uid). `next(uid)` bumps it with one
//! compare-and-swap, as long as the result stays at or below the section's
//! ceiling (`max_seq`), which the store has made durable. When a section has
//! used most of its room, it asks — once — for a raise *ahead of need*; a
//! background task writes the new ceiling to the store and applies it, so
//! callers almost never wait on Raft. A section taken over starts every uid
//! at the store's previous ceiling (*skip ahead*) and never trusts memory.
//!
//! No sockets and no clocks here (except the deadline of a waiting call):
//! the store is behind the [`CeilingStore`] trait, and [`mem`] has an
//! in-memory implementation for tests. Leases are not checked here: the
//! server checks its lease once per request and calls
//! [`Allocator::drop_section`] when it loses a section.
//!
//! # Layout
//! - [`section`]: [`SectionSlot`], one section: while served, a block of
//!   `cur_seq` cells, ceiling and high-water mark; the lock-free hot path,
//!   the epoch guard, and freeing a lost section's cells.
//! - [`allocator`]: [`Allocator`], a set's sections indexed by section id:
//!   `next`, `next_batch`, `current`, waiting variants, take-over install,
//!   drop, and the raise queue.
//! - [`raiser`]: [`Raiser`], the background task that performs raises and
//!   take-overs against a [`CeilingStore`], with retry and back-off.
//! - [`steps`]: [`StepPolicy`] and [`Pace`], how far each section's next
//!   raise goes and at what headroom it is asked for (fixed steps, or
//!   adaptive ones sized to the section's rate); pure, given the time.
//! - [`ceiling`]: the [`CeilingStore`] trait: what the allocator needs from
//!   the store; [`Grant`] is the project's one grant type.
//! - [`mem`]: [`MemCeilingStore`](mem::MemCeilingStore), an in-memory store
//!   with the store's take-over contract and injectable faults.
//! - [`control`]: [`Control`](control::Control), the control loop as a
//!   state machine (`on(now, event) -> effects`): the renewal cycle, route
//!   reads, releasing marks, lapses, fencing; the node and the seeded
//!   simulation both execute its effects.
//! - [`ownership`]: the ownership decisions as pure functions (renewal
//!   reconciliation, adopt, after a failed handoff), the control loop's
//!   helpers, shared with the seeded simulation.
//! - [`service`]: the gRPC services, one per plane (client: `Next`,
//!   `NextBatch`, `Current`, `Routes`, `Status`; peer: `Adopt`, `Counter`;
//!   admin: `Handoff`, `Status`, `Counter`), and their one mapping of
//!   errors to statuses.
//! - [`counters`]: declared counters on the admin plane: a write applied
//!   by the owner of the name's section, fenced in its store, in force in
//!   memory before the answer (`docs/counters.md`).
//! - [`front`]: [`Front`](front::Front), what every door calls: a uid of
//!   a section served here from memory, any other forwarded to its owner
//!   (one hop, coalesced, bounded; `docs/architecture/forwarding.md`).
//! - [`http`]: the HTTP API, a door on its own port answering through the
//!   front (`docs/clients.md`); [`http_monitor`] its read-only view of the
//!   named counters held here (`docs/counters.md`).
//! - [`shared`]: what the services share with the node's background tasks:
//!   [`Shared`](shared::Shared) (allocator, lease, route table, fence,
//!   metrics), the [`Ownership`](shared::Ownership) lock (which holds the
//!   control loop) and the channels to other AllocSvrs.
//! - [`node`]: a running AllocSvr: config, start-up (a fresh incarnation,
//!   register, claim the sections routed here with take-overs), the
//!   executor of the control loop's effects (lease renewal, route sync,
//!   fencing), serving.
//! - [`resp_backend`]: the Redis-protocol door's backend: the allocator
//!   answering as the client plane does (the door itself is the
//!   `seqsvr-resp` crate; `node` starts it when configured).
//! - [`ids`]: time-ordered ids ([`IdWorkers`](ids::IdWorkers)): a
//!   worker id per namespace claimed from the store, its time ceiling kept
//!   ahead, ids issued under it (docs/ids.md).
//! - [`lease`]: the AllocSvr's view of its lease (clock passed in).
//! - [`handoff`]: planned moves with an explicit release, and adopt.
//! - [`store_link`]: the [`CeilingStore`] backed by the StoreSvr's peer
//!   plane.
//! - [`error`]: [`AllocError`] (the allocator's), [`StoreErr`] (the store's
//!   answers), [`CallError`] (a gRPC call's), and the node's errors.
//!
//! # Memory
//! A section's cells (8 bytes a uid) are allocated zeroed at its take-over,
//! which writes none of them (a uid's `cur_seq` is `max(cell, base)`), and
//! freed after the section is lost, once every call that may still read
//! them has finished (epoch-based reclamation; the hot path pins its thread
//! instead of counting references). What promises need after a loss is
//! kept: the newest epoch installed per section, a few dozen bytes. A
//! take-over after the free starts every uid at the grant's previous
//! ceiling (promise 1 across owners). The section table costs 24 bytes a
//! section of the set, owned or not. [`Allocator::stats`] counts the cell
//! bytes held and the sections freed.
//!
//! # Batches and waiting
//! [`Allocator::next_batch`] is not all-or-nothing: it stops at the first
//! uid it cannot serve; the numbers already appended were handed out. Its
//! per-uid cost is `next`'s (each uid needs its own compare-and-swap); the
//! saving of a batch is per request. An `Exhausted` answer is retryable:
//! [`Allocator::next_waiting`] and [`Allocator::next_batch_waiting`] wait on
//! the section (up to a deadline) until its raise lands.
//!
//! # Which promise is protected where (`docs/architecture/overview.md`)
//! - 1 (monotonic): cells only grow (CAS) and so does a block's base; a
//!   block stops serving while its base moves; a new block starts at the
//!   grant's previous ceiling, which no owner ever handed out beyond; memory
//!   is served again only under the epoch it was built under ([`ownership`]).
//! - 2 (durable): a number is handed out only at or below a ceiling the store
//!   acknowledged; the ceiling is raised only from store answers.
//! - 3 (exclusive): every raise carries the epoch and the incarnation; a
//!   stale-epoch answer drops the section; answers for an old epoch are
//!   ignored; a twin process never serves; a fenced one stops.
//! - 4 (bounded gap): raises target one step above the highest number
//!   handed out, so a restart skips at most one step per section; a grant
//!   prepared for this process is claimed as it is, not with another step.
//! - 5 (typed errors): [`AllocError`], [`CallError`], mapped once in
//!   [`service`].

pub mod allocator;
pub mod ceiling;
pub mod control;
pub mod counters;
pub mod error;
pub mod front;
pub mod handoff;
pub mod http;
pub mod http_ids;
pub mod http_monitor;
pub mod ids;
pub mod lease;
pub mod malloc;
pub mod mem;
pub mod metrics;
pub mod names;
pub mod node;
pub mod ownership;
pub mod raiser;
pub mod resp_backend;
pub mod section;
pub mod service;
pub mod shared;
pub mod steps;
pub mod store_link;
pub mod warm;

pub use allocator::{AllocConfig, AllocStats, Allocator, NameView, RaiseRequest};
pub use ceiling::{CeilingStore, Declared, Grant};
pub use error::{
    AllocError, CallError, ConfigError, ForwardError, MoveError, NodeError, Result, StoreErr,
};
pub use names::NameStats;
pub use ownership::{
    decide_adopt, decide_after_handoff, reconcile, AdoptRefusal, Adoption, AfterHandoff,
    Reconciliation,
};
pub use raiser::{Raiser, RaiserConfig, RoundReport};
pub use section::{SectionSlot, SectionState};
pub use steps::{AdaptiveSteps, Pace, StepPolicy};
