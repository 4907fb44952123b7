//! The seqsvr binaries' shared code: thin wiring of the component crates.
//!
//! # Layout
//! - `bin/seqsvr.rs`: `seqsvr store | dev` — runs a store replica, or a
//!   whole local cluster as child processes.
//! - `bin/seqctl.rs`: `seqctl status | sections | …` — the operator's tool.
//! - [`checker`]: the per-uid monotonicity checker over what clients
//!   received (promise 1), used by tests and drills.
//! - [`dev`]: the local cluster launcher behind `seqsvr dev`.
//! - [`defaults`]: the local cluster's fixed endpoints, shared by both
//!   binaries so `seqctl` with no flags talks to `seqsvr dev`.
//! - [`logging`]: tracing setup.

pub mod checker;
pub mod defaults;
pub mod dev;
pub mod logging;
