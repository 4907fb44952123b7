//! The seqsvr binaries' shared code: thin wiring of the component crates.
//!
//! # Layout
//! - `bin/seqsvr.rs`: `seqsvr store | alloc | dev | certs` — runs a store
//!   replica or an AllocSvr (three listeners each: client, peer and admin
//!   planes), a whole local cluster as child processes, or writes a PKI.
//! - `bin/seqctl.rs`: `seqctl status | sections | alloc … | store lease | …`
//!   — the operator's tool.
//! - [`dev`]: the local cluster launcher behind `seqsvr dev`.
//! - [`certs`]: which certificates a cluster needs (`seqsvr certs`, and
//!   `seqsvr dev --tls`).
//! - [`ctl`]: seqctl's operator commands (status, drain, rebalance, fence,
//!   lease terms) over the store's client and admin planes and the
//!   AllocSvrs' admin planes.
//! - [`ctl_store`]: seqctl's store membership commands (add, remove,
//!   replace a replica) and the membership lines of its status.
//! - [`defaults`]: the local cluster's fixed endpoints, shared by both
//!   binaries so `seqctl` with no flags talks to `seqsvr dev`.
//! - [`drain_self`]: `seqsvr alloc drain --self`, an AllocSvr's planned
//!   stop asked from beside it (a Kubernetes preStop hook).
//! - [`drill`]: `seqctl drill`: workload + faults + report.
//! - [`logging`]: tracing setup.
//! - [`restore`]: backup files written and read back into a restore
//!   plan (`seqctl store backup`, `seqsvr store restore`).
//! - [`out`]: standard output that reports a closed pipe instead of
//!   panicking (`outln!`).
//! - [`error`]: [`Error`], the one error type of both binaries.

pub use seqsvr_core::checker;
pub mod certs;
pub mod ctl;
pub mod defaults;
pub mod dev;
pub mod drain_self;
pub mod drill;
pub mod error;
pub mod logging;
pub mod out;
pub mod restore;
pub mod sets;

pub use error::{Error, Result};
