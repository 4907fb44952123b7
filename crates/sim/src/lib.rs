//! A seeded, deterministic simulation of seqsvr's ownership protocol and
//! of range moves between sets.
//!
//! It drives the project's *real* pure components — the store's state
//! machine ([`seqsvr_store_core::state::SetState`], the sets' commands and the
//! directory included) and arbiter ([`seqsvr_store_core::arbiter::Arbiter`]),
//! the AllocSvr's [`Allocator`], [`Lease`] and every decision of the
//! AllocSvr's loops ([`seqsvr_alloc::ownership`]: admission, renewal list
//! and reconciliation, claims, route reads, raise answers and back-off,
//! handoff and adopt checks, a move's release), and the per-uid checker
//! ([`seqsvr_core::checker`]) — inside a discrete-event model of
//! everything around them: two sets, each a Raft group (terms, votes,
//! majority commit, deposed leaders) with the store API (forwarding,
//! barriers, the arbiter's lock, renewals, registrations, operator and
//! sets calls) and its AllocSvrs' loops (registration, renewal, claims,
//! route refresh, raiser, handoffs, adopts), twin processes, clients that
//! route by the directory with stale caches, the operator's range mover,
//! and the network. Time is virtual (nanoseconds), everything runs on one
//! thread, and every random choice comes from one seed, so a seed replays
//! exactly.
//!
//! Faults per seed ([`faults`]): partitions, crashes and pauses of store
//! replicas and AllocSvrs, slow messages, planned handoffs with their
//! adopts lost, delayed or duplicated, forged adopts, operator assigns,
//! twins, lease-terms changes, clock-rate drift within the documented
//! bound, and range moves between the sets, the mover stopped after a step
//! or killed during one and run again. Checks ([`check`]): promise 1 over
//! every number and every `Current` answer clients received, promises 2, 3
//! and 4 while running, across both sets.
//! `docs/architecture/simulation.md` says more.
//!
//! Replay a seed with `SEQSVR_SIM_SEED=<seed> cargo test -p seqsvr-sim
//! --test simulation every_promise -- --nocapture` (every event is
//! printed). [`Knobs`] restore old behaviours
//! (bugs the simulation found) and weaken the protocol (to show the checks
//! fail when a rule is broken).
//!
//! [`Allocator`]: seqsvr_alloc::Allocator
//! [`Lease`]: seqsvr_alloc::lease::Lease
//!
//! # Layout
//! The components depend on the shared types (`model`: messages and
//! events; `env`: the environment) and not on each other; the world loop
//! ties them together.
//! - [`rng`], [`net`]: the seeded PRNG; virtual time, nodes, cut links,
//!   message delays.
//! - [`knobs`], [`faults`], [`config`]: protocol variants; the fault
//!   schedule; a run's parameters and layout (which replica and process
//!   belongs to which set), all drawn from its seed.
//! - [`check`]: the invariants checked while running and at the end.
//! - `model`: messages, events, timers, AllocSvr names and addresses.
//! - `env`: time and the event queue, the random stream, the network, the
//!   monitor, the counters, the committed state.
//! - `raft`: the Raft model of one store group around the real state
//!   machine (`perturb`: the store's knobs, applied alike by every
//!   replica); `store`: the store API and the real arbiter's loop on top
//!   of it (one group per set).
//! - `link`: the store client (hedged attempts, back-off, deadline).
//! - `alloc`: AllocSvr processes with the real allocator, lease and
//!   ownership decisions.
//! - `client`: clients with a directory, route caches and retries;
//!   `operator`: admin calls; `mover`: the range mover (`seqctl set
//!   move`), step by step; `counter_calls`: its declared-counter calls
//!   as the store serves them.
//! - `world`: the event loop, the fault schedule applied, the report.

#![warn(missing_docs)]

pub mod check;
pub mod config;
pub mod faults;
pub mod ids;
pub mod knobs;
pub mod net;
pub mod rng;

mod alloc;
mod client;
mod counter_calls;
mod env;
mod layout;
mod link;
mod model;
mod mover;
mod operator;
mod perturb;
mod raft;
mod store;
mod world;

pub use check::Violation;
pub use config::SimConfig;
pub use env::Stats;
pub use knobs::{InstallAt, Knobs};
pub use world::{RunReport, World};

/// Runs the simulation of `seed` with `knobs` and time-ordered ids
/// ([`SimConfig::for_ids_seed`]); `verbose` prints every event.
pub fn run_ids_seed(seed: u64, knobs: Knobs, verbose: bool) -> RunReport {
    let mut cfg = SimConfig::for_ids_seed(seed, knobs);
    cfg.verbose = verbose;
    World::new(cfg).run()
}

/// Runs the simulation of `seed` with `knobs`; `verbose` prints every
/// event as it happens.
pub fn run_seed(seed: u64, knobs: Knobs, verbose: bool) -> RunReport {
    let mut cfg = SimConfig::for_seed(seed, knobs);
    cfg.verbose = verbose;
    World::new(cfg).run()
}
