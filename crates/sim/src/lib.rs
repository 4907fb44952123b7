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
//! Replay a seed with `SEQSVR_SIM_SEED=<seed> cargo test -p seqsvr-sim --
//! --nocapture` (every event is printed). [`Knobs`] also model the fixes
//! of bugs the simulation found in the AllocSvr's renewal and in the
//! store's arbiter (see the doc chapter).
//!
//! [`Allocator`]: seqsvr_alloc::Allocator
//! [`Lease`]: seqsvr_alloc::lease::Lease
//!
//! # Layout
//! - [`rng`]: the seeded PRNG (SplitMix64).
//! - [`net`]: virtual time, nodes, cut links, message delays.
//! - [`config`]: a run's parameters, all drawn from its seed; [`Knobs`]
//!   that weaken the protocol (to show the checks can fail) or fix it.
//! - [`faults`]: the fault schedule and how each fault is applied.
//! - `world`: the event loop and the deployment ([`World`]).
//! - `raft`: the Raft model (terms, votes, replication, commit) around the
//!   real state machine.
//! - `store`: store replicas — the store API (forwarding, barriers,
//!   renewals) and the real arbiter's loop.
//! - `alloc`: AllocSvrs — start-up, renewal, route refresh, serving, with
//!   the real allocator and lease; `link`: their store client and raiser.
//! - `client`: clients with route caches and retries.
//! - [`check`]: the invariants checked while running.

#![warn(missing_docs)]

pub mod check;
pub mod config;
pub mod faults;
pub mod net;
pub mod rng;

mod alloc;
mod client;
mod link;
mod raft;
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
