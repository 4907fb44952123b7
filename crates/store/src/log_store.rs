//! The Raft log and vote, persisted in sled (trees `log` and `raft`).
//!
//! Keys in `log` are fixed-width big-endian log indexes, so sled's ordered
//! scans follow the log. Values are [`seqsvr_core::codec`] encodings.
//!
//! Durability (promise 2): `save_vote` and `append` return only after
//! [`Disk::sync`] (flush + fsync). openraft 0.9 calls `append` once per
//! batch of entries and waits for the flush callback before it counts the
//! entries as persisted or answers the leader, so every entry a replica
//! acknowledges is on disk. One fsync covers the whole batch; batching many
//! commands into one entry happens in [`crate::proposer`].

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, RaftLogId, RaftLogReader, StorageIOError};
use seqsvr_core::codec;

use crate::disk::{check_value, Disk};
use crate::metrics::Stages;
use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const PURGED: &[u8] = b"purged";

/// The sled-backed Raft log store of one replica.
#[derive(Clone)]
pub struct LogStore {
    /// The replica's database (for syncs).
    disk: Disk,
    /// index → entry.
    log: sled::Tree,
    /// vote, committed and last purged log id.
    meta: sled::Tree,
    /// Where the time of an append is recorded.
    stages: Arc<Stages>,
}

fn read_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read_logs(&e).into()
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_logs(&e).into()
}

impl LogStore {
    /// Opens the log store in `disk`.
    pub fn open(disk: &Disk) -> std::io::Result<Self> {
        Ok(Self {
            disk: disk.clone(),
            log: disk.tree("log")?,
            meta: disk.tree("raft")?,
            stages: Stages::unregistered(),
        })
    }

    /// The same log store, recording the time of its appends in `stages`.
    pub fn with_stages(mut self, stages: Arc<Stages>) -> Self {
        self.stages = stages;
        self
    }

    fn get_meta<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
    ) -> Result<Option<T>, StorageError> {
        match self.meta.get(key).map_err(read_err)? {
            None => Ok(None),
            Some(v) => codec::decode(std::str::from_utf8(key).unwrap_or("meta"), &v)
                .map(Some)
                .map_err(read_err),
        }
    }

    fn put_meta<T: serde::Serialize>(&self, key: &[u8], value: &T) -> Result<(), StorageError> {
        let bytes = codec::encode(value).map_err(write_err)?;
        self.meta.insert(key, bytes).map_err(write_err)?;
        Ok(())
    }

    /// Whether this replica has ever stored Raft state (a vote or a log
    /// entry): such a replica must never be initialised again.
    pub fn is_fresh(&self) -> Result<bool, StorageError> {
        Ok(self.meta.get(VOTE).map_err(read_err)?.is_none()
            && self.log.is_empty()
            && self.meta.get(PURGED).map_err(read_err)?.is_none())
    }
}

fn key_bounds<RB: RangeBounds<u64>>(range: &RB) -> (Bound<[u8; 8]>, Bound<[u8; 8]>) {
    let map = |b: Bound<&u64>| match b {
        Bound::Included(i) => Bound::Included(codec::key_u64(*i)),
        Bound::Excluded(i) => Bound::Excluded(codec::key_u64(*i)),
        Bound::Unbounded => Bound::Unbounded,
    };
    (map(range.start_bound()), map(range.end_bound()))
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let mut out = Vec::new();
        for kv in self.log.range(key_bounds(&range)) {
            let (_, v) = kv.map_err(read_err)?;
            out.push(codec::decode("log entry", &v).map_err(read_err)?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.get_meta(PURGED)?;
        let last = match self.log.last().map_err(read_err)? {
            Some((_, v)) => Some(
                *codec::decode::<Entry>("log entry", &v)
                    .map_err(read_err)?
                    .get_log_id(),
            ),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.put_meta(VOTE, vote)?;
        // A vote must survive a crash, or a replica could vote twice in a term.
        self.disk
            .sync_async()
            .await
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.get_meta(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not synced: it only lets a restarted replica re-apply sooner; Raft
        // recovers the commit index from the leader anyway.
        self.put_meta(COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.get_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let start = std::time::Instant::now();
        let mut batch = sled::Batch::default();
        for entry in entries {
            let bytes = codec::encode(&entry).map_err(write_err)?;
            check_value(bytes.len()).map_err(write_err)?;
            batch.insert(&codec::key_u64(entry.get_log_id().index), bytes);
        }
        self.log.apply_batch(batch).map_err(write_err)?;
        // Acknowledge only what is on disk (promise 2).
        let res = self.disk.sync_async().await;
        self.stages.append.observe(start.elapsed().as_secs_f64());
        let err = res
            .as_ref()
            .err()
            .map(|e| write_err(std::io::Error::new(e.kind(), e.to_string())));
        callback.log_io_completed(res);
        err.map_or(Ok(()), Err)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Conflicting entries from an old leader; the next append's sync
        // makes the removal durable before anything depends on it.
        let mut batch = sled::Batch::default();
        for kv in self.log.range(codec::key_u64(log_id.index)..) {
            batch.remove(kv.map_err(write_err)?.0);
        }
        self.log.apply_batch(batch).map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Record the purge point first: a crash mid-purge then leaves
        // harmless garbage below it rather than a hole above it.
        self.put_meta(PURGED, &log_id)?;
        let mut batch = sled::Batch::default();
        for kv in self.log.range(..=codec::key_u64(log_id.index)) {
            batch.remove(kv.map_err(write_err)?.0);
        }
        self.log.apply_batch(batch).map_err(write_err)
    }
}
