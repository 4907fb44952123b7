//! The Raft type configuration. What travels in the log — commands,
//! batches of them, their replies — is the pure `seqsvr_store_core::command`,
//! re-exported here.

use std::io::Cursor;

pub use seqsvr_store_core::command::{
    Command, Outcome, Rejection, Reply, Request, Response, MAX_SECTIONS_PER_CALL,
};

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
