//! The seqsvr binaries' shared code: thin wiring of the component crates.
//!
//! # Layout
//! - `bin/seqsvr.rs`: `seqsvr store | dev` — runs a store replica, or a
//!   whole local cluster as child processes.
//! - `bin/seqctl.rs`: `seqctl status | sections | …` — the operator's tool.
//! - [`dev`]: the local cluster launcher behind `seqsvr dev`.
//! - [`ctl`]: seqctl's operator commands (status, drain, rebalance).
//! - [`defaults`]: the local cluster's fixed endpoints, shared by both
//!   binaries so `seqctl` with no flags talks to `seqsvr dev`.
//! - [`drill`]: `seqctl drill`: workload + faults + report.
//! - [`logging`]: tracing setup.

pub use seqsvr_core::checker;
pub mod ctl;
pub mod defaults;
pub mod dev;
pub mod drill;
pub mod logging;
