//! The Raft type configuration and what travels in the log.
//!
//! A log entry carries a [`Request`]: a batch of [`Command`]s proposed
//! together (group commit: one entry, one fsync per replica, many commands).
//! Applying it yields one [`Outcome`] per command, in order.

use std::io::Cursor;

use seqsvr_core::{AllocId, Epoch, SectionId, SetSpec};
use serde::{Deserialize, Serialize};

/// A store replica's id within its Raft group.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// seqsvr's Raft types: batches of commands in, batches of outcomes out.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Short names for openraft types instantiated with [`TypeConfig`].
pub type Raft = openraft::Raft<TypeConfig>;
/// A log id.
pub type LogId = openraft::LogId<NodeId>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A vote.
pub type Vote = openraft::Vote<NodeId>;
/// A storage error.
pub type StorageError = openraft::StorageError<NodeId>;
/// Membership as stored.
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
/// A snapshot's metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;

/// One state-machine command. Everything a command needs (including any
/// time, later) travels inside it: apply must be deterministic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Fixes the set this store group serves. Idempotent with an equal spec;
    /// a different spec is rejected (a set never changes shape in place).
    ConfigureSet(SetSpec),
    /// Records an AllocSvr's client-facing address.
    RegisterAlloc {
        /// The AllocSvr.
        alloc: AllocId,
        /// Its `host:port`.
        addr: String,
    },
    /// Routes sections `first..first+count` to `alloc` (the route table
    /// says it serves them). Each section that changes hands gets a new
    /// epoch, which fences the previous owner at once (promise 3); the new
    /// owner then claims them with `TakeOver`.
    Assign {
        /// The new owner.
        alloc: AllocId,
        /// First section.
        first: SectionId,
        /// Number of sections.
        count: u32,
    },
    /// `alloc` claims sections `first..first+count` routed to it (or
    /// unowned): per section the epoch grows by one and the ceiling rises by
    /// one step; the previous ceiling is where it starts (skip ahead).
    TakeOver {
        /// The new owner.
        alloc: AllocId,
        /// First section.
        first: SectionId,
        /// Number of sections.
        count: u32,
    },
    /// A planned move of sections from `from` (which stopped serving them)
    /// to `to`: assign and take over in one write.
    Handoff {
        /// The current owner, which released the sections.
        from: AllocId,
        /// The new owner.
        to: AllocId,
        /// First section.
        first: SectionId,
        /// Number of sections.
        count: u32,
    },
    /// Marks an AllocSvr as draining (the arbiter routes nothing to it) or
    /// not.
    SetDraining {
        /// The AllocSvr.
        alloc: AllocId,
        /// Draining or not.
        draining: bool,
    },
    /// Raises one section's ceiling to `to`, if `epoch` is still current.
    Raise {
        /// The section.
        section: SectionId,
        /// The caller's epoch for the section (fencing token).
        epoch: Epoch,
        /// The new ceiling.
        to: u64,
    },
}

/// A log entry's application payload: commands proposed together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Applied in order; each gets its own outcome.
    pub commands: Vec<Command>,
}

/// What applying a [`Request`] produced.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Response {
    /// One per command, in order. Empty for blank and membership entries.
    pub outcomes: Vec<Outcome>,
}

/// The result of one command.
pub type Outcome = Result<Reply, Rejection>;

/// A granted section after a take-over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The section.
    pub section: SectionId,
    /// Its new epoch: the owner's fencing token.
    pub epoch: Epoch,
    /// The ceiling before the take-over: the new owner starts every uid here.
    pub prev_ceiling: u64,
    /// The ceiling after the take-over (`prev_ceiling + step`).
    pub max_seq: u64,
}

/// A command's successful result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The set is configured (now or before).
    Configured,
    /// The alloc is registered; the route version after the change.
    Registered {
        /// Route version.
        route_version: u64,
    },
    /// Sections assigned; the route version after the change.
    Assigned {
        /// Route version.
        route_version: u64,
    },
    /// Sections taken over.
    TakenOver {
        /// One per section, in order.
        grants: Vec<Grant>,
        /// Route version after the change.
        route_version: u64,
    },
    /// The ceiling now stands at `max_seq`.
    Raised {
        /// The new ceiling.
        max_seq: u64,
    },
}

/// Why a command was refused. Deterministic: every replica refuses the same
/// command the same way, and a refused command changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum Rejection {
    /// The store has no set yet.
    #[error("the store has not been configured with a set yet")]
    NotConfigured,
    /// A `ConfigureSet` whose spec differs from the stored one.
    #[error("set spec differs from the configured one: {0}")]
    SetMismatch(String),
    /// A spec, name or address that is not acceptable.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The section is not in the set.
    #[error("section {section} is not in the set ({count} sections)")]
    UnknownSection {
        /// The section asked for.
        section: SectionId,
        /// How many sections the set has.
        count: u32,
    },
    /// The section is routed to another AllocSvr.
    #[error("section {section} is routed to {owner}")]
    OwnedElsewhere {
        /// The section.
        section: SectionId,
        /// Its owner.
        owner: AllocId,
    },
    /// The raise's epoch is not the section's current one (promise 3).
    #[error("stale epoch {given} for section {section}: current is {current}")]
    StaleEpoch {
        /// The section.
        section: SectionId,
        /// The epoch the caller gave.
        given: Epoch,
        /// The section's epoch.
        current: Epoch,
    },
    /// The new ceiling is not above the current one (ceilings never decrease).
    #[error("ceiling {to} for section {section} is not above the current {current}")]
    NotAbove {
        /// The section.
        section: SectionId,
        /// The ceiling asked for.
        to: u64,
        /// The current ceiling.
        current: u64,
    },
    /// The new ceiling is absurdly far above the current one.
    #[error("ceiling {to} for section {section} is too far above the current {current}")]
    TooLarge {
        /// The section.
        section: SectionId,
        /// The ceiling asked for.
        to: u64,
        /// The current ceiling.
        current: u64,
    },
}
