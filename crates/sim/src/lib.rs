//! A seeded, deterministic simulation of seqsvr's failover protocol.
//!
//! It drives the project's *real* pure components — the store's state
//! machine ([`seqsvr_store::state::SetState`]) and arbiter
//! ([`seqsvr_store::arbiter::Arbiter`]), the AllocSvr's [`Allocator`] and
//! [`Lease`], and the per-uid checker ([`seqsvr_core::checker`]) — inside a
//! discrete-event model of everything around them: Raft (terms, votes,
//! majority commit, deposed leaders), the store API (forwarding, barriers,
//! renewals), the AllocSvr's loops (renewal, take-over, route refresh,
//! raiser), clients with stale route caches, and the network. Time is
//! virtual (nanoseconds), everything runs on one thread, and every random
//! choice comes from one seed, so a seed replays exactly.
//!
//! Faults per seed: partitions (AllocSvr↔replica, replica↔replica, the
//! leader cut off while AllocSvrs still reach it), AllocSvr crashes and
//! restarts, AllocSvr pauses (SIGSTOP, also between a request's lease check
//! and its number), store leader and replica crashes, slow messages, and
//! clock-rate drift within the documented bound. Checks: promise 1 over
//! every number clients received, plus promises 2, 3 and 4 while running
//! (see [`check`]). `docs/architecture/simulation.md` says more.
//!
//! The real openraft/tonic stack is covered by the multi-process tests;
//! this crate covers the protocol's interleavings, thousands of runs a
//! minute.
//!
//! [`Allocator`]: seqsvr_alloc::Allocator
//! [`Lease`]: seqsvr_alloc::lease::Lease
//!
//! # Layout
//! - [`rng`]: the seeded PRNG (SplitMix64).
//! - [`net`]: virtual time, nodes, cut links, message delays.
//! - [`config`]: a run's parameters, all drawn from its seed; [`Knobs`]
//!   that weaken the protocol to show the checks can fail.
//! - [`faults`]: the fault schedule and how each fault is applied.
//! - `world`: the event loop and the deployment ([`World`]).
//! - `store`: store replicas — a Raft model around the real state machine
//!   and arbiter, and the store API.
//! - `alloc`: AllocSvrs — start-up, renewal, route refresh, serving, with
//!   the real allocator and lease; `link`: their store client and raiser.
//! - `client`: clients with route caches and retries.
//! - [`check`]: the invariants checked while running.

pub mod check;
pub mod config;
pub mod faults;
pub mod net;
pub mod rng;

mod alloc;
mod client;
mod link;
mod store;
mod world;

pub use check::Violation;
pub use config::{Knobs, SimConfig};
pub use world::{RunReport, Stats, World};

/// Runs the simulation of `seed` with `knobs`; `verbose` prints every
/// event as it happens.
pub fn run_seed(seed: u64, knobs: Knobs, verbose: bool) -> RunReport {
    let mut cfg = SimConfig::for_seed(seed, knobs);
    cfg.verbose = verbose;
    World::new(cfg).run()
}
