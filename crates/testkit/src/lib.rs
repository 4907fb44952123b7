//! What the tests and benches share, in one place: clusters of the real
//! binaries, the ways an attacker can reach them, the workload and the
//! checks of what clients received, and in-process AllocSvrs against a
//! fake store. Used only as a dev-dependency
//! (`docs/architecture/testing.md`).
//!
//! # Layout
//!
//! Always built (the AllocSvr's own tests use only these):
//!
//! - [`process`]: the binaries under test ([`Bins`], made by [`bins!`]
//!   where the test is compiled), free loopback ports, one server process
//!   ([`Proc`]), signals, what `/proc` says of a process.
//! - [`metrics`]: a Prometheus scrape and the sum of a metric's samples.
//! - [`node`]: AllocSvr nodes started in-process on loopback against the
//!   fake store ([`node::FakeStore`]), clients of their planes.
//! - [`rss`]: this process's resident memory.
//! - [`stages`]: where a raise's time goes, from the replicas' stage
//!   histograms (the `store_raise` and `scale` benches).
//! - [`deploy`]: running outside tools with a time limit, and whether
//!   the deployment checks can run here.
//!
//! With the `cluster` feature (the end-to-end tests and the `seqsvr`
//! benches):
//!
//! - [`cluster`]: a store group, AllocSvrs and a whole set of real
//!   processes ([`StoreCluster`], [`SetCluster`]).
//! - [`check`]: the per-uid checker's glue ([`assert_monotonic`]), the
//!   workload and its recorder, the small set.
//! - [`attack`]: raw calls, a TLS cluster with per-replica metrics,
//!   floods, running the binary to completion.
//! - [`sets`]: two sets and `seqctl` against them.
//! - [`ids`], [`door`], [`partition`]: id callers and libfaketime, a
//!   Redis-protocol client of one door, the store's partition fault.
//!
//! Imports point one way: `process`, `metrics`, `check` and `node` use
//! nothing of the kit; `stages` uses `metrics`; `cluster` uses `process`
//! and `node`; `attack`, `sets` and `ids` use `cluster` (and `attack`
//! `check` and `metrics`).

pub mod deploy;
pub mod metrics;
pub mod node;
pub mod process;
pub mod rss;
pub mod stages;

pub use process::{
    command_under, cpu_of, free_port, logs_in, machine_banner, rss_of, signal, Bins, Proc,
};

#[cfg(feature = "cluster")]
pub mod attack;
#[cfg(feature = "cluster")]
pub mod check;
#[cfg(feature = "cluster")]
pub mod cluster;
#[cfg(feature = "cluster")]
pub mod door;
#[cfg(feature = "cluster")]
pub mod ids;
#[cfg(feature = "cluster")]
pub mod partition;
#[cfg(feature = "cluster")]
pub mod sets;

#[cfg(feature = "cluster")]
pub use check::{
    assert_monotonic, name_set, small_set, start_spread_workload, Recorder, Workload, SMALL_STEP,
};
#[cfg(feature = "cluster")]
pub use cluster::{
    from_memory, start_alloc_door, start_alloc_on, start_alloc_with, test_lease, CtlRun,
    SetCluster, StoreCluster, StoreOptions, TEST_EXPIRY, TEST_RENEW_MS,
};
pub use metrics::{metric, scrape};
#[cfg(feature = "cluster")]
pub use partition::isolate;
