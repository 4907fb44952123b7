//! The StoreSvr's API as its callers see it: what AllocSvrs, `seqctl` and
//! clients need to talk to a store group, and nothing of its insides (no
//! Raft, no storage).
//!
//! # Layout
//! - [`rejection`]: [`Rejection`], why the store refused a command. The
//!   store's state machine produces them; they travel to callers intact.
//! - [`error`]: [`Error`], everything a store call can fail with, and its
//!   one mapping to and from gRPC statuses.
//! - [`client`]: a client per plane ([`PeerClient`], [`ReadClient`],
//!   [`AdminClient`]) over one failover core ([`Replicas`]) that moves to
//!   another replica when one is slow, not only when it is dead. The reads
//!   both the peer and the client plane serve (routes, sections, status)
//!   are written once, in [`PlaneClient`], generic over the plane.
//! - [`counters`]: the counter calls (declarations written by the
//!   owner of a name's section, read by a new owner), docs/counters.md.
//! - [`ids`]: the id-namespace calls (worker-id claims, raises, releases;
//!   namespace creation and listing), docs/ids.md.
//! - [`membership`]: why a store membership change was refused
//!   ([`MemberRefusal`]) and what a change did ([`MembershipChange`]).

pub mod client;
pub mod counters;
pub mod error;
pub mod ids;
pub mod membership;
pub mod rejection;
pub mod sets;

pub use client::{
    AdminClient, AllocAddrs, PeerClient, PlaneClient, ReadClient, ReadPlane, Replicas, SectionInfo,
};
pub use error::{Error, Result};
pub use membership::{MemberRefusal, MemberRefusalKind, MembershipChange};
pub use rejection::{CounterRefusal, IdRefusal, Rejection};
pub use sets::{Frozen, SetsClient};

/// A store replica's id within its Raft group.
pub type NodeId = u64;
