//! StoreSvr: the Raft-replicated store of section ceilings.
//!
//! Per set, a small Raft group (openraft) keeps for every section its
//! ceiling (`max_seq`), owner and epoch, plus the AllocSvrs' addresses and
//! the route version. The log and the state machine live in one sled
//! database per replica, and nothing is acknowledged before it is fsynced.
//!
//! # Layout
//! The pure logic — the state of a set and how each command changes it,
//! the arbiter, the leader's decisions — is the `seqsvr-store-core` crate,
//! which the seeded simulation drives too; [`state`], [`owned`] and the
//! commands in [`types`] re-export it.
//! - [`arbiter`]: the pure arbiter (leases and section moves on the
//!   leader) with the lock that orders its moves against renewals.
//! - [`auth`]: which role may call what on each plane.
//! - [`types`]: the Raft type config; commands, replies, rejections.
//! - [`disk`]: the sled database and the fsync that makes it durable.
//! - [`log_store`]: the Raft log and vote in sled.
//! - [`state_machine`]: the state machine and snapshots in sled.
//! - [`metrics`]: the replica's Prometheus metrics.
//! - [`network`]: Raft RPCs between replicas over gRPC.
//! - [`proposer`]: batches concurrent commands into one log entry.
//! - [`membership`]: adding and removing replicas (learner, catch-up,
//!   promotion; the removal rule) and the membership part of the status.
//! - [`service`]: the gRPC services, one file per plane (read, peer,
//!   admin, raft).
//! - [`node`]: configuration, bootstrap and the running replica.
//! - [`fault`]: test-only fault hooks (the partition switch), compiled in
//!   only with the `fault-hooks` feature.
//!
//! Its callers' side — typed refusals, the error type and its one gRPC
//! mapping, and the clients — is the `seqsvr-store-api` crate, which
//! AllocSvrs and tools link instead of this one (no Raft, no sled there).

// openraft's `StorageError` is large, and the storage traits dictate it as
// the error type; boxing it in our helpers would only add conversions.
#![allow(clippy::result_large_err)]

pub mod arbiter;
pub mod auth;
pub mod disk;
pub mod fault;
pub mod log_store;
pub mod membership;
pub mod metrics;
pub mod network;
pub mod node;
pub mod proposer;
pub mod service;
pub mod state_machine;
pub mod types;

pub use seqsvr_store_core::{owned, state};

pub use node::{StoreConfig, StoreListeners, StoreNode};
pub use seqsvr_store_api::{Error, Rejection, Result};
